"""What a run survives: divergence, preemption, kills at any moment, damaged checkpoints, a second
training on its workdir, and resumes that would change its trajectory."""

import gc
import json
import logging
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import orbax.checkpoint as ocp
import pytest

from nplm_jax import entry as entry_lib
from nplm_jax.training import evaluation
from nplm_jax.training import train
from nplm_jax.errors import UserError
from tests import checkpoint_reader
from tests import corpora
from tests import file_hashes

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_results(workdir) -> dict:
  with open(os.path.join(workdir, 'results.json'), encoding='utf-8') as f:
    return json.load(f)


def assert_same_outcome(workdir, reference, logged_steps: bool = True):
  a, b = read_results(workdir), read_results(reference)
  for key in ('valid_ppl', 'test_ppl', 'step', 'steps_trained', 'history', 'stopped_early'):
    assert a[key] == b[key], key
  pa, pb = checkpoint_reader.latest_params(workdir), checkpoint_reader.latest_params(reference)
  for k in pb:
    np.testing.assert_array_equal(pa[k], pb[k], err_msg=k)
  steps = lambda w: [json.loads(line)['step'] for line in pathlib.Path(w, 'metrics.jsonl').read_text(encoding='utf-8').splitlines()]
  assert not logged_steps or steps(workdir) == steps(reference)  # each step logged once, whatever the interruptions


# ---------------------------------------------------------------------------------- divergence

def test_divergence_stops_at_the_first_nonfinite_loss_and_keeps_nothing_nonfinite(tiny_config, tmp_path):
  tiny_config.optimizer.update(name='paper_sgd', learning_rate=1e9)
  tiny_config.train.update(max_steps=400, eval_every=100, checkpoint_every=20, log_every=500)
  with pytest.raises(train.TrainingDiverged, match=r'not finite from step \d+ on') as e:
    train.train_and_evaluate(tiny_config, str(tmp_path))
  first_bad = int(str(e.value).split('from step ')[1].split(' ')[0])
  assert first_bad <= 20 and '\n' not in str(e.value)
  assert not (tmp_path / 'results.json').exists()
  manager = ocp.CheckpointManager(str(tmp_path / 'checkpoints'))
  assert manager.all_steps() == []  # no evaluation was finite: every checkpoint after step 0 dropped
  with pytest.raises(train.TrainingDiverged):  # a re-run does not resume a diverged state
    train.train_and_evaluate(tiny_config, str(tmp_path))


def test_a_validation_perplexity_that_overflows_is_divergence(tiny_config, tmp_path, monkeypatch):
  tiny_config.train.update(max_steps=30, eval_every=10)
  calls = []

  def overflowing(experiment, params, split, between=None, max_batches=None):
    if max_batches is not None:  # the budget's timing probe
      return np.full(experiment.eval_batch_size, 10.0)
    calls.append(split)
    return np.full(experiment.stream.num_examples(split), 10.0 if len(calls) == 1 else 800.0)
  monkeypatch.setattr(evaluation, 'split_nll', overflowing)
  with pytest.raises(train.TrainingDiverged, match='validation perplexity overflows at step 20'):
    train.train_and_evaluate(tiny_config, str(tmp_path))
  manager = ocp.CheckpointManager(str(tmp_path / 'checkpoints'))
  assert manager.all_steps() == [10]  # the last finite evaluation's state is kept
  assert evaluation.perplexity(np.full(3, 800.0)) == float('inf')


# ------------------------------------------------------------------------------ resume guard

@pytest.fixture
def finished(tiny_config, tmp_path):
  tiny_config.train.update(max_steps=30, eval_every=15)
  workdir = tmp_path / 'run'
  train.train_and_evaluate(tiny_config, str(workdir))
  return tiny_config, workdir


@pytest.mark.parametrize('change,match', [
    (lambda c: c.train.update(batch_size=16), 'different config.train.batch_size'),
    (lambda c: c.update(seed=3), 'different config.seed'),
    (lambda c: c.model.update(m=9), 'different config.model.m'),
])
def test_resume_refuses_a_change_of_trajectory(finished, change, match):
  config, workdir = finished
  before = file_hashes.of_folder(workdir)
  change(config)
  with pytest.raises(UserError, match=match):
    train.train_and_evaluate(config, str(workdir))
  assert file_hashes.of_folder(workdir) == before


def test_resume_takes_another_form_of_the_embedding_gradient(finished):
  """model.embedding_gradient and model.distant_gradient say how C's gradient is made, not what it is: a
  finished run goes on with other forms (train.RESUME_FREE_KEYS) where any other model key is refused."""
  config, workdir = finished
  config.train.update(max_steps=45)
  config.model.update(embedding_gradient='sorted', distant_gradient='counts')
  results = train.train_and_evaluate(config, str(workdir))
  assert results['steps_trained'] == 45


@pytest.mark.parametrize('edit', ['shuffle_lines', 'new_word'])
def test_resume_refuses_another_corpus_at_the_same_path(finished, edit):
  config, workdir = finished
  before = file_hashes.of_folder(workdir)
  path = config.data.train_file
  with open(path, encoding='utf-8') as f:
    lines = f.readlines()
  original = ''.join(lines)
  try:
    with open(path, 'w', encoding='utf-8') as f:
      f.write(''.join(reversed(lines)) if edit == 'shuffle_lines' else original + 'zebra ' * 5 + '\n')
    with pytest.raises(UserError, match='another corpus'):
      train.train_and_evaluate(config, str(workdir))
  finally:
    with open(path, 'w', encoding='utf-8') as f:
      f.write(original)
  assert file_hashes.of_folder(workdir) == before


def test_resuming_a_finished_run_says_so_unless_asked_for_more(finished, capsys):
  config, workdir = finished
  stamp = file_hashes.of_folder(workdir / 'checkpoints')
  again = train.train_and_evaluate(config, str(workdir))
  assert 'nothing to train' in capsys.readouterr().out
  assert again == read_results(workdir) and file_hashes.of_folder(workdir / 'checkpoints') == stamp
  config.train.max_steps = 45  # more training asked for
  more = train.train_and_evaluate(config, str(workdir))
  assert more['steps_trained'] == 45


# -------------------------------------------------------------------- preemption and kills

def cli(workdir, files, *extra, env=None, fault=None, **popen):
  """nplm-train on the tiny config; with `fault`, one injected into its saves (tests/faulty_train.py)."""
  program = ['tests.faulty_train', fault, '--'] if fault else ['nplm_jax.main']
  args = [sys.executable, '-m', *program, '--config=experiments/text.py:tiny', f'--workdir={workdir}',
          *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')), *extra]
  environment = dict(os.environ, JAX_PLATFORMS='cpu', **(env or {}))
  return subprocess.Popen(args, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **popen)


# Several steps a dispatch (4), from data on the devices: kills and signals land between dispatches.
LONG = ('--config.train.max_steps=600', '--config.train.eval_every=100', '--config.train.log_every=20',
        '--config.model.h=64', '--config.model.m=32', '--config.train.steps_per_dispatch=4')


@pytest.fixture(scope='module')
def long_reference(tmp_path_factory):
  """An uninterrupted run of the LONG setting (a few seconds of training)."""
  folder = tmp_path_factory.mktemp('reference')
  files = corpora.write_markov_corpus(str(folder))
  proc = cli(folder / 'run', files, *LONG)
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 0, out + err
  return files, folder / 'run'


@pytest.mark.parametrize('signum,code', [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=['SIGTERM', 'SIGINT'])
def test_a_signal_saves_the_step_in_progress_and_the_run_resumes_exactly(long_reference, tmp_path, signum, code):
  files, reference = long_reference
  proc = cli(tmp_path / 'run', files, *LONG)
  for line in proc.stdout:  # wait until it trains
    if 'step 40/' in line:
      break
  proc.send_signal(signum)
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == code, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and f'stopped by {signal.Signals(signum).name} at step' in lines[0], err
  stopped_at = int(lines[0].split('at step ')[1].split(';')[0])
  assert 40 <= stopped_at < 600 and stopped_at in ocp.CheckpointManager(str(tmp_path / 'run' / 'checkpoints')).all_steps()
  rest = cli(tmp_path / 'run', files, *LONG)
  out, err = rest.communicate(timeout=600)
  assert rest.returncode == 0 and f'resumed from step {stopped_at}' in out, err
  assert_same_outcome(tmp_path / 'run', reference)


def finish_and_compare(workdir, files, reference):
  proc = cli(workdir, files, *LONG)
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 0, err
  assert_same_outcome(workdir, reference)


def test_kills_inside_the_saves_resume_to_the_uninterrupted_result(long_reference, tmp_path):
  """SIGKILL inside each save and between the two saves of a step (fault injection)."""
  files, reference = long_reference
  crashes = [('best_writing', 100), ('between_saves', 200), ('latest_writing', 300), ('best_writing', 400),
             ('latest_writing', 500), ('between_saves', 600)]
  from nplm_jax.training import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
  crash_points = {p for p in ckpt_lib.FAULT_POINTS if not p.endswith('_starting')}
  assert {point for point, _ in crashes} == crash_points  # every point of the saves where a kill can land
  for point, step in crashes:
    proc = cli(tmp_path / 'run', files, *LONG, fault=f'crash_at={point}:{step}')
    proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, (point, step)
  finish_and_compare(tmp_path / 'run', files, reference)
  print(f'{len(crashes)} kills inside saves')


def test_best_saves_between_checkpoints_keep_the_step_a_checkpoint_names(tmp_path):
  """train.checkpoint_every > eval_every: best saves at 20 and 25 come after the latest checkpoint of
  15, which names best step 15. Killed inside the best save of 30, the run resumes from 15 (its best
  step still there) and ends as the uninterrupted one."""
  files = corpora.write_markov_corpus(str(tmp_path))
  every = ('--config.train.max_steps=30', '--config.train.eval_every=5', '--config.train.checkpoint_every=15',
           '--config.train.log_every=5')
  reference = cli(tmp_path / 'reference', files, *every)
  assert reference.wait(timeout=600) == 0, reference.communicate()[1]
  crashed = cli(tmp_path / 'run', files, *every, fault='crash_at=best_writing:30')
  crashed.communicate(timeout=600)
  assert crashed.returncode == -signal.SIGKILL
  assert sorted(os.listdir(tmp_path / 'run' / 'checkpoints')) == ['15']
  assert '15' in os.listdir(tmp_path / 'run' / 'best')  # with 20 and 25, though no checkpoint names those
  finish_and_compare_with(tmp_path / 'run', files, every, tmp_path / 'reference')


def finish_and_compare_with(workdir, files, args, reference):
  proc = cli(workdir, files, *args)
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 0, err
  assert 'resumed from step' in out, out
  assert_same_outcome(workdir, reference)


def test_kills_at_timed_moments_resume_to_the_uninterrupted_result(long_reference, tmp_path):
  """SIGKILL during start-up, compilation, steps and evaluations."""
  files, reference = long_reference
  killed = 0
  # Each run is killed at a moment its own output marks, so that the kills land in the same phases on an
  # idle or a loaded machine (fixed delays once killed only 3 of 8 runs on an idle CI machine): in
  # start-up, once the model is built (compilation follows), once compiled, at its first logged steps,
  # after an evaluation, and in its steps again. Each resumed run goes on from its last checkpoint.
  markers = (None, r' model: ', r' compiled training', r' step \d+/', r' eval step \d+', r' step \d+/')
  for marker in markers:
    proc = cli(tmp_path / 'run', files, *LONG)
    if marker is None:
      time.sleep(0.5)
    else:
      for line in proc.stdout:  # ends early only if the run finishes first
        if re.search(marker, line):
          break
    if proc.poll() is None:
      proc.kill()
      killed += 1
    proc.communicate(timeout=120)
  assert killed >= 5, killed
  finish_and_compare(tmp_path / 'run', files, reference)
  print(f'{killed} timed kills')


# ------------------------------------------------------------------------ damaged checkpoints

def _corrupt(kind: str, step_dir: str) -> None:
  data_files = [os.path.join(r, n) for r, _, names in os.walk(os.path.join(step_dir, 'state', 'd')) for n in names]
  if kind == 'garbled_data':
    for path in data_files:
      with open(path, 'r+b') as f:
        f.write(b'garbage!' * 8)
  elif kind == 'truncated_data':
    for path in data_files:
      with open(path, 'r+b') as f:
        f.truncate(10)
  elif kind == 'garbled_manifest':
    with open(os.path.join(step_dir, 'state', 'manifest.ocdbt'), 'wb') as f:
      f.write(b'xx')
  elif kind == 'deleted_METADATA':
    os.remove(os.path.join(step_dir, 'state', '_METADATA'))
  elif kind == 'emptied_state':
    shutil.rmtree(os.path.join(step_dir, 'state'))
    os.mkdir(os.path.join(step_dir, 'state'))
  elif kind == 'empty_step_folder':
    shutil.rmtree(step_dir)
    os.mkdir(step_dir)
  elif kind == 'flipped_bit':  # one bit of one array's stored bytes: the files still read, the values differ
    flip_one_bit(os.path.join(step_dir, 'state'))
  elif kind == 'garbled_run_state':
    with open(os.path.join(step_dir, 'meta', 'metadata'), 'w', encoding='utf-8') as f:
      f.write('{not json')


def flip_one_bit(item_dir: str) -> None:
  """Flips bit 6 of the byte a third into the item's largest data file (an array's raw bytes: it
  still restores, with one value changed, as a bit flipped on disk would leave it)."""
  data = [os.path.join(r, n) for r, _, names in os.walk(item_dir) for n in names if os.path.basename(r) == 'd']
  largest = max(data, key=os.path.getsize)
  with open(largest, 'r+b') as f:
    f.seek(os.path.getsize(largest) // 3)
    byte = f.read(1)[0]
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte ^ 0x40]))


def drop_checksums(step_dir: str) -> None:
  """A step as nplm_jax saved it before checksums were kept."""
  path = os.path.join(step_dir, '_CHECKPOINT_METADATA')
  with open(path, encoding='utf-8') as f:
    metadata = json.load(f)
  metadata.pop('custom_metadata', None)
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(metadata, f)


CORRUPTIONS = ['garbled_data', 'truncated_data', 'garbled_manifest', 'deleted_METADATA', 'emptied_state',
               'empty_step_folder', 'garbled_run_state', 'flipped_bit']


@pytest.fixture(scope='module')
def two_checkpoints(tmp_path_factory):
  """A run saved at steps 20 and 40, and the same run of 60 steps without interruption."""
  folder = tmp_path_factory.mktemp('damage')
  files = corpora.write_markov_corpus(str(folder))
  config = corpora.tiny_config(files, max_steps=40, eval_every=20)
  train.train_and_evaluate(config, str(folder / 'base'))
  config.train.max_steps = 60
  train.train_and_evaluate(config, str(folder / 'reference'))
  return config, folder


@pytest.mark.parametrize('kind', CORRUPTIONS)
def test_an_unreadable_newest_checkpoint_is_set_aside_and_the_run_resumes_from_an_older_one(
    two_checkpoints, tmp_path, capsys, kind):
  config, folder = two_checkpoints
  workdir = tmp_path / 'run'
  shutil.copytree(folder / 'base', workdir)
  _corrupt(kind, str(workdir / 'checkpoints' / '40'))
  train.train_and_evaluate(config, str(workdir))
  err = capsys.readouterr().err
  assert 'warning: checkpoint step 40 cannot be read' in err and 'resuming from step 20' in err, err
  aside = [n for n in os.listdir(workdir / 'checkpoints') if n.startswith('40.unreadable')]
  assert len(aside) == 1  # set aside, not deleted
  assert_same_outcome(workdir, folder / 'reference')


def test_checkpoints_saved_without_checksums_still_load_with_a_note(two_checkpoints, tmp_path, capsys):
  config, folder = two_checkpoints
  workdir = tmp_path / 'run'
  shutil.copytree(folder / 'base', workdir)
  for step_dir in [workdir / 'checkpoints' / s for s in ('20', '40')] + [workdir / 'best' / s for s in os.listdir(
      workdir / 'best') if s.isdigit()]:
    drop_checksums(str(step_dir))
  os.remove(workdir / 'integrity.json')  # written by nplm_jax since checksums are kept
  train.train_and_evaluate(config, str(workdir))
  captured = capsys.readouterr()
  assert captured.err.count('was saved without checksums') == 1  # once a run, on stderr
  assert 'without checksums' not in captured.out
  assert_same_outcome(workdir, folder / 'reference', logged_steps=False)  # the base run logged its last step, 40


def test_no_readable_checkpoint_is_one_line_and_nothing_is_deleted(two_checkpoints, tmp_path):
  config, folder = two_checkpoints
  workdir = tmp_path / 'run'
  shutil.copytree(folder / 'base', workdir)
  for step in ('20', '40'):
    _corrupt('garbled_run_state', str(workdir / 'checkpoints' / step))
  before = file_hashes.of_folder(workdir)
  with pytest.raises(UserError, match='no checkpoint in .* can be read') as e:
    train.train_and_evaluate(config, str(workdir))
  assert '\n' not in str(e.value) and file_hashes.of_folder(workdir) == before


@pytest.mark.parametrize('damage,match', [
    (lambda w: (w / 'best' / '40' / 'default' / 'manifest.ocdbt').write_bytes(b'xx'), 'best parameters .* cannot be read'),
    (lambda w: (w / 'config.json').write_text('{garbled'), 'config.json.*cannot be read'),
    (lambda w: flip_one_bit(str(w / 'best' / '40' / 'default')), 'best parameters .* cannot be trusted .*differs from'),
])
def test_a_damaged_best_or_config_is_one_line(two_checkpoints, tmp_path, damage, match):
  config, folder = two_checkpoints
  workdir = tmp_path / 'run'
  shutil.copytree(folder / 'base', workdir)
  os.remove(workdir / 'results.json')  # so the finished run must evaluate its best parameters again
  damage(workdir)
  finished = config.copy_and_resolve_references()
  finished.train.max_steps = 40
  with pytest.raises(UserError, match=match) as e:
    train.train_and_evaluate(finished, str(workdir))
  assert '\n' not in str(e.value)


def _metadata_damage(kind: str, path: str) -> None:
  if kind == 'deleted':
    os.remove(path)
  elif kind == 'truncated':
    with open(path, 'r+b') as f:
      f.truncate(os.path.getsize(path) // 2)
  else:  # garbled
    with open(path, 'wb') as f:
      f.write(b'\x00garbled{')


@pytest.mark.parametrize('kind', ['truncated', 'garbled', 'deleted'])
@pytest.mark.parametrize('flip', [False, True], ids=['intact', 'bit_flipped'])
def test_a_damaged_checksum_record_fails_closed(two_checkpoints, tmp_path, kind, flip):
  """The best step's _CHECKPOINT_METADATA truncated, garbled or deleted (with its arrays intact, or one
  bit flipped in them): no tool reads the parameters unchecked (one line), with integrity.json there or
  deleted too (the latest steps' own checksums then say the workdir keeps them)."""
  from nplm_jax.tools import trained as trained_lib  # pylint: disable=g-import-not-at-top
  _, folder = two_checkpoints
  for without_record in (False, True):
    workdir = tmp_path / f'run_{without_record}'
    shutil.copytree(folder / 'base', workdir)
    if flip:
      flip_one_bit(str(workdir / 'best' / '40' / 'default'))
    _metadata_damage(kind, str(workdir / 'best' / '40' / '_CHECKPOINT_METADATA'))
    if without_record:
      os.remove(workdir / 'integrity.json')
    with pytest.raises(UserError) as e:
      trained_lib.TrainedModel.load(str(workdir))
    assert '\n' not in str(e.value) and ('cannot be trusted' in str(e.value) or 'cannot be read' in str(e.value))


@pytest.mark.parametrize('kind', ['truncated', 'garbled', 'deleted'])
def test_a_damaged_latest_checksum_record_sets_the_step_aside(two_checkpoints, tmp_path, capsys, kind):
  config, folder = two_checkpoints
  workdir = tmp_path / 'run'
  shutil.copytree(folder / 'base', workdir)
  _metadata_damage(kind, str(workdir / 'checkpoints' / '40' / '_CHECKPOINT_METADATA'))
  train.train_and_evaluate(config, str(workdir))
  assert 'checkpoint step 40 cannot be read' in capsys.readouterr().err
  assert_same_outcome(workdir, folder / 'reference')


@pytest.mark.parametrize('damage,match', [
    (lambda w: (w / 'vocab.tsv').write_text(_swapped_lines((w / 'vocab.tsv').read_text(), 3, 4)), 'vocab.tsv differs'),
    (lambda w: (w / 'tokenizer.json').write_text((w / 'tokenizer.json').read_text().replace('"train"', '"corpus"')),
     'tokenizer.json differs'),
    (lambda w: (w / 'integrity.json').write_text((w / 'integrity.json').read_text()[:-20]), 'integrity.json is damaged'),
])
def test_the_files_beside_the_checkpoints_are_checked(two_checkpoints, tmp_path, damage, match):
  """Two lines of vocab.tsv swapped (it still parses), tokenizer.json changed, or the integrity record
  itself damaged: the tools refuse in one line instead of scoring with the wrong words."""
  from nplm_jax.tools import trained as trained_lib  # pylint: disable=g-import-not-at-top
  _, folder = two_checkpoints
  workdir = tmp_path / 'run'
  shutil.copytree(folder / 'base', workdir)
  damage(workdir)
  with pytest.raises(UserError, match=match) as e:
    trained_lib.TrainedModel.load(str(workdir))
  assert '\n' not in str(e.value)


def test_a_missing_integrity_record_is_noticed_by_the_checkpoints_that_keep_checksums(two_checkpoints, tmp_path,
                                                                                      monkeypatch):
  """integrity.json deleted and vocab.tsv changed afterwards (two faults): the checkpoints' own metadata says the
  workdir keeps a record, so the tools refuse the files they can no longer check, in one line naming the way to
  accept them; with NPLM_ACCEPT_UNRECORDED_FILES=1 they are read as they are, and a resumed training records
  them anew."""
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools import trained as trained_lib  # pylint: disable=g-import-not-at-top
  config, folder = two_checkpoints
  workdir = tmp_path / 'run'
  shutil.copytree(folder / 'base', workdir)
  os.remove(workdir / 'integrity.json')
  (workdir / 'vocab.tsv').write_text(_swapped_lines((workdir / 'vocab.tsv').read_text(), 3, 4))
  with pytest.raises(UserError, match=r'vocab.tsv and tokenizer.json in .* cannot be trusted: their record '
                                      r'integrity.json is missing.*set NPLM_ACCEPT_UNRECORDED_FILES=1') as e:
    trained_lib.TrainedModel.load(str(workdir))
  assert '\n' not in str(e.value)
  with pytest.raises(UserError, match='cannot be trusted: their record integrity.json is missing'):
    train.train_and_evaluate(config, str(workdir))  # a resumed training does not record them as good either
  assert not (workdir / 'integrity.json').exists()
  monkeypatch.setenv(workdir_lib.ACCEPT_UNRECORDED_FILES, '1')
  assert trained_lib.TrainedModel.load(str(workdir)).vocab[3] == (folder / 'base' / 'vocab.tsv').read_text(
      ).splitlines()[4].split('\t')[0]  # read as it is: the swapped lines


def _swapped_lines(text: str, i: int, j: int) -> str:
  lines = text.splitlines(keepends=True)
  lines[i], lines[j] = lines[j], lines[i]
  return ''.join(lines)


def test_a_best_step_newer_than_the_latest_is_recomputed(two_checkpoints, tmp_path, capsys):
  """A crash between the best save and the latest save of step 40 leaves best/40 beside latest 20."""
  config, folder = two_checkpoints
  workdir = tmp_path / 'run'
  shutil.copytree(folder / 'base', workdir)
  shutil.rmtree(workdir / 'checkpoints' / '40')
  train.train_and_evaluate(config, str(workdir))
  assert 'best step 40 is newer than the latest checkpoint (20)' in capsys.readouterr().err
  assert_same_outcome(workdir, folder / 'reference')


# ------------------------------------------------------------------------------------- lock

def test_a_second_training_on_a_workdir_is_refused_and_a_stale_lock_taken_over(tiny_config, tmp_path, capsys):
  tiny_config.train.update(max_steps=10, eval_every=10)
  workdir = tmp_path / 'run'
  workdir.mkdir()
  lock = {'host': __import__('socket').gethostname(), 'pid': os.getpid(), 'since': 'now'}  # this test: alive
  (workdir / 'lock').write_text(json.dumps(lock))
  with pytest.raises(UserError, match=f'in use by process {os.getpid()}') as e:
    train.train_and_evaluate(tiny_config, str(workdir))
  assert '\n' not in str(e.value) and json.loads((workdir / 'lock').read_text()) == lock
  dead = subprocess.Popen([sys.executable, '-c', 'pass'])
  dead.wait()
  (workdir / 'lock').write_text(json.dumps(dict(lock, pid=dead.pid)))
  train.train_and_evaluate(tiny_config, str(workdir))
  assert f'took over the lock of process {dead.pid}' in capsys.readouterr().err
  assert not (workdir / 'lock').exists()  # released at the end


# -------------------------------------------------------------------------- default workdir

def test_the_workdir_defaults_to_runs_name(tiny_files, tmp_path):
  args = [sys.executable, '-m', 'nplm_jax.main', '--config=' + os.path.join(REPO, 'experiments', 'text.py:tiny'),
          *(f'--config.data.{s}_file={tiny_files[s]}' for s in ('train', 'valid', 'test')),
          '--config.train.max_steps=5']
  proc = subprocess.run(args, cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO),
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  # the data files are overrides that change the run: runs/text_tiny-HASH (max_steps does not)
  folder = re.search(r'workdir: (runs/text_tiny-[0-9a-f]{8}) ', proc.stdout)
  assert folder, proc.stdout
  assert (tmp_path / folder[1] / 'results.json').exists()
  rerun = subprocess.run(args, cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO),
                         capture_output=True, text=True, timeout=300)
  assert rerun.returncode == 0 and 'nothing to train' in rerun.stdout, rerun.stderr


def test_checkpoints_also_by_wall_time(tiny_config, tmp_path):
  """With evaluations rare, a time limit of almost nothing saves at every log step instead."""
  tiny_config.train.update(max_steps=23, eval_every=100, log_every=5, checkpoint_every_seconds=1e-6)
  train.train_and_evaluate(tiny_config, str(tmp_path / 'timed'))
  assert ocp.CheckpointManager(str(tmp_path / 'timed' / 'checkpoints')).all_steps() == [20, 23]
  tiny_config.train.checkpoint_every_seconds = 0
  train.train_and_evaluate(tiny_config, str(tmp_path / 'untimed'))
  assert ocp.CheckpointManager(str(tmp_path / 'untimed' / 'checkpoints')).all_steps() == [23]


def assert_resumes_to(args, workdir, env, reference):
  """The same command on `workdir` ends with the results of the uninterrupted run in `reference`."""
  resumed = subprocess.run([*args, f'--workdir={workdir}'], env=env, capture_output=True, text=True, timeout=300)
  assert resumed.returncode == 0, resumed.stderr
  expected = json.loads((reference / 'results.json').read_text())
  got = json.loads((workdir / 'results.json').read_text())
  assert (got['valid_ppl'], got['test_ppl'], got['history']) == (expected['valid_ppl'], expected['test_ppl'],
                                                                  expected['history'])


def _stopped_by_a_signal(tiny_files, tmp_path, signal_at: str, *extra):
  """The tiny run stopped by a signal at signal_at, POINT:SIGNAL[:COUNT] (tests/faulty_train.py; its args, env, workdir and the stopped process),
  beside its uninterrupted reference; asserts one line, exit 128 + the signal, no traceback, no results."""
  args = [sys.executable, '-m', 'nplm_jax.main', '--config=' + os.path.join(REPO, 'experiments', 'text.py:tiny'),
          *(f'--config.data.{s}_file={tiny_files[s]}' for s in ('train', 'valid', 'test')),
          '--config.train.max_steps=30', '--config.train.eval_every=10', *extra]
  env = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO)
  reference = subprocess.run([*args, f'--workdir={tmp_path / "reference"}'], env=env, capture_output=True, text=True,
                             timeout=300)
  assert reference.returncode == 0, reference.stderr
  workdir = tmp_path / 'stopped'
  faulty = [sys.executable, '-m', 'tests.faulty_train', f'signal_at={signal_at}', '--', *args[3:]]
  stopped = subprocess.run([*faulty, f'--workdir={workdir}'], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=300)
  signame = signal_at.split(':')[1]
  assert stopped.returncode == 128 + getattr(signal, signame), stopped.stderr
  lines = stopped.stderr.strip().splitlines()
  assert len(lines) == 1 and f'stopped by {signame}' in lines[0], stopped.stderr
  assert 'Traceback' not in stopped.stdout + stopped.stderr
  assert not (workdir / 'results.json').exists()
  return args, env, workdir, stopped


@pytest.mark.parametrize('point,signame,count', [('start', 'SIGTERM', 1), ('final_evaluation', 'SIGINT', 2)])
def test_signals_outside_the_loop_are_one_line_and_resumable(tiny_files, tmp_path, point, signame, count):
  """SIGTERM at start-up, and Ctrl-C pressed twice during the final evaluation: one 'error:' line, exit
  128 + the signal, no traceback; the same command then ends with the uninterrupted run's results."""
  args, env, workdir, stopped = _stopped_by_a_signal(tiny_files, tmp_path, f'{point}:{signame}:{count}')
  assert stopped.stderr.startswith(f'error: stopped by {signame}')
  assert_resumes_to(args, workdir, env, tmp_path / 'reference')


# Both signals and both evaluations, each once (the two signals take the same path: CI time), and the
# loop's end
@pytest.mark.parametrize('point,signame', [('inside_evaluation', 'SIGTERM'), ('inside_final_evaluation', 'SIGINT'),
                                           ('after_the_loop', 'SIGINT')])
def test_signals_during_an_evaluation_stop_it_and_resume(tiny_files, tmp_path, point, signame):
  """A signal after the first call of an evaluation (the loop's, or the final one) is answered before
  the evaluation's next call, and one after the loop's last check (during the last step's evaluation
  or save) before the final evaluation: one line, exit 128 + the signal, and the same command then
  ends with the uninterrupted run's results (a step saved before its evaluation is evaluated first on
  resume)."""
  args, env, workdir, stopped = _stopped_by_a_signal(tiny_files, tmp_path, f'{point}:{signame}',
                                                     '--config.train.eval_batch_size=8')
  if point == 'inside_evaluation':  # stopped in the first evaluation (step 10), before training on
    assert 'eval step 10' not in stopped.stdout and 'step 20' not in stopped.stdout
  if point == 'after_the_loop':  # the last step trained and saved; the final evaluation is the resume's
    assert 'at step 30;' in stopped.stderr and 'done:' not in stopped.stdout
  assert_resumes_to(args, workdir, env, tmp_path / 'reference')


@pytest.mark.parametrize('point', ['after_the_loop', 'final_evaluation', 'inside_final_evaluation',
                                   'collected_at_the_end'])
def test_the_lock_is_released_on_every_exit_path_of_a_signal(tiny_files, tmp_path, point):
  """SIGTERM at each phase of a run's end, the last inside a destructor, where the handler's exception cannot
  propagate and the process ends at once (os._exit, no `finally`): one line, exit 143, and no WORKDIR/lock left
  behind for the next run to take over."""
  workdir = tmp_path / 'run'
  args = [sys.executable, '-m', 'nplm_jax.main', '--config=' + os.path.join(REPO, 'experiments', 'text.py:tiny'),
          *(f'--config.data.{s}_file={tiny_files[s]}' for s in ('train', 'valid', 'test')),
          '--config.train.max_steps=20', '--config.train.eval_every=10', '--config.train.eval_batch_size=8',
          f'--workdir={workdir}']
  faulty = [sys.executable, '-m', 'tests.faulty_train', f'signal_at={point}:SIGTERM', '--', *args[3:]]
  stopped = subprocess.run(faulty, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO), cwd=REPO,
                           capture_output=True, text=True, timeout=300)
  lines = stopped.stderr.strip().splitlines()
  assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
  assert len(lines) == 1 and 'stopped by SIGTERM' in lines[0], stopped.stderr
  assert (workdir / 'checkpoints').exists() and not (workdir / 'lock').exists()


def wait_for_the_stop_handlers(pid: int, timeout: float = 60.0) -> None:
  """Until the process catches SIGTERM (/proc/PID/status, SigCgt): entry installs its SIGINT and SIGTERM
  handlers together, first thing, and Python catches only SIGINT before that."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    with open(f'/proc/{pid}/status', encoding='utf-8') as f:
      caught = int(next(line for line in f if line.startswith('SigCgt:')).split()[1], 16)
    if caught >> (signal.SIGTERM - 1) & 1:
      return
    time.sleep(0.005)
  raise AssertionError(f'process {pid} installed no SIGTERM handler within {timeout} s')


@pytest.mark.parametrize('delay', [0.0, 0.1, 0.2, 0.3, 0.5, 0.8, 1.5])
def test_ctrl_c_at_any_moment_of_the_first_imports_is_the_stop_line(tiny_files, tmp_path, delay):
  """Ctrl-C 0 s to 1.5 s after the command's stop handlers exist (inside numpy's or jaxlib's imports, the
  flags' checks or the start-up): the stop line and exit 130, never an ImportError or an abort. What is
  promised starts there: before it, Python's own start-up (tens of milliseconds, more on a loaded machine)
  answers a Ctrl-C as Python does. The signal is timed from the handlers, not from the start, so a
  loaded machine's slower start cannot put it before them."""
  proc = subprocess.Popen([sys.executable, '-c', 'from nplm_jax import entry; entry.train()',
                           '--config=' + os.path.join(REPO, 'experiments', 'text.py:tiny'), f'--workdir={tmp_path / "w"}',
                           *(f'--config.data.{s}_file={tiny_files[s]}' for s in ('train', 'valid', 'test'))],
                          cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  wait_for_the_stop_handlers(proc.pid)
  time.sleep(delay)
  proc.send_signal(signal.SIGINT)
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 128 + signal.SIGINT, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and 'stopped by SIGINT' in lines[0], err
  assert 'Traceback' not in out + err


def test_a_signal_inside_an_extensions_initialisation_is_the_stop_line(tmp_path):
  """A C extension's initialisation turns the signal's exception into 'ImportError: initialization
  failed' (tensorstore, under Orbax, did at 0.8 s on a loaded machine): still the stop line and exit
  128 + the signal, at any depth of the exception's causes."""
  (tmp_path / 'extension_command.py').write_text(
      'from nplm_jax import entry\n'
      'def main():\n'
      '  try:\n'
      '    try:\n'
      '      raise entry.Stopped(15)\n'
      '    except entry.Stopped as stop:\n'
      "      raise ImportError('initialization failed') from stop\n"
      '  except ImportError:\n'
      "    raise RuntimeError('while importing orbax')\n")
  proc = subprocess.run([sys.executable, '-c', "from nplm_jax import entry; entry.run_command('extension_command')"],
                        cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=f'{REPO}:{tmp_path}'),
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
  assert proc.stderr.strip().splitlines() == [f'error: stopped by SIGTERM; {entry_lib.AFTER_TOOL_STOP}'], proc.stderr


SWALLOWING = """
import os, time

def swallowed(signum):  # as a library's broad except, or an optional extension's import fallback, would
  try:
    os.kill(os.getpid(), signum)
    time.sleep(5)
  except BaseException:
    pass
"""

SWALLOWING_COMMAND = """
import os, signal
from swallowing import swallowed

if os.environ['SWALLOW_AT'] == 'import':
  swallowed(signal.SIGTERM)

def main():
  if os.environ['SWALLOW_AT'] == 'work':
    swallowed(signal.SIGTERM)
  print('the work went on')
"""


@pytest.mark.parametrize('swallow_at', ['import', 'work'])
def test_a_signal_that_a_library_swallows_still_stops_the_command(tmp_path, swallow_at):
  """A signal whose exception the interrupted code caught and dropped (a CI run trained to the end
  through a Ctrl-C 1.5 s after its start): the stop line and exit 128 + the signal all the same, at
  the next check: before the command runs when it came during the command's import, else when it
  returns (training checks as its loop starts: test_a_signal_swallowed_in_the_start_up_...)."""
  (tmp_path / 'swallowing.py').write_text(SWALLOWING)
  (tmp_path / 'swallowing_command.py').write_text(SWALLOWING_COMMAND)
  proc = subprocess.run([sys.executable, '-c', "from nplm_jax import entry; entry.run_command('swallowing_command')"],
                        cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=f'{REPO}:{tmp_path}',
                                               SWALLOW_AT=swallow_at),
                        capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
  assert proc.stderr.strip().splitlines() == [f'error: stopped by SIGTERM; {entry_lib.AFTER_TOOL_STOP}'], proc.stderr
  assert ('the work went on' in proc.stdout) == (swallow_at == 'work')


def test_a_signal_swallowed_in_the_start_up_stops_training_before_its_loop(tiny_files, tmp_path):
  """Ctrl-C during a training's start-up, swallowed there: the stop line before the first step,
  not a whole training and exit 0."""
  (tmp_path / 'swallowing.py').write_text(SWALLOWING)
  swallowing_start = (
      'import signal\n'
      'from swallowing import swallowed\n'
      'from nplm_jax import entry\n'
      'from nplm_jax.training import experiment\n'
      'built = experiment.Experiment.__init__\n'
      'def swallowing(self, *args, **kwargs):\n'
      '  swallowed(signal.SIGINT)\n'
      '  built(self, *args, **kwargs)\n'
      'experiment.Experiment.__init__ = swallowing\n'
      'entry.train()\n')
  proc = subprocess.run([sys.executable, '-c', swallowing_start, '--config=' + os.path.join(REPO, 'experiments', 'text.py:tiny'),
                         f'--workdir={tmp_path / "w"}',
                         *(f'--config.data.{s}_file={tiny_files[s]}' for s in ('train', 'valid', 'test'))],
                        cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=f'{REPO}:{tmp_path}'),
                        capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 128 + signal.SIGINT, proc.stderr
  assert proc.stderr.strip().splitlines() == [f'error: stopped by SIGINT (Ctrl-C); {entry_lib.AFTER_TRAINING_STOP}']
  assert 'step ' not in proc.stdout and not (tmp_path / 'w' / 'results.json').exists()


def test_ctrl_c_during_a_tools_imports_is_one_line(tmp_path):
  """The commands take their signals before importing JAX (nplm_jax.entry): a Ctrl-C at once is one line. (The
  workdir and text look right to the checks made before the imports, so the signal lands inside them.)"""
  (tmp_path / 'x' / 'best').mkdir(parents=True)
  (tmp_path / 'x' / 'config.json').write_text('{}')
  (tmp_path / 'y').write_text('the cat sat\n')
  proc = subprocess.Popen([sys.executable, '-c', 'from nplm_jax import entry; entry.score()', '--workdir=x', '--text=y'],
                          cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  time.sleep(0.3)  # inside the imports (JAX alone takes longer)
  proc.send_signal(signal.SIGINT)
  out, err = proc.communicate(timeout=60)
  assert proc.returncode == 128 + signal.SIGINT, err
  assert err.strip().splitlines() == ['error: stopped by SIGINT (Ctrl-C); nothing was written half-way; run it again']


ABANDONED_WORK = """
from nplm_jax.errors import UserError

class _Pending:
  def __await__(self):
    yield

async def _read():  # as an Orbax read the error abandoned: its coroutine fails when finalised
  try:
    await _Pending()
  finally:
    raise OSError('the read of a damaged array, abandoned')

PENDING = []

def main():
  coroutine = _read()
  coroutine.send(None)  # started, never finished
  PENDING.append(coroutine)
  never_awaited = _read()  # and one never awaited
  PENDING.append(never_awaited)
  raise UserError('best/ is damaged')
"""


def test_the_error_line_is_the_last_line_whatever_work_it_abandoned(tmp_path):
  """Work abandoned by an error (a coroutine that fails when finalised at exit, one never awaited)
  adds no 'Exception ignored in' traceback or warning after the one error line."""
  (tmp_path / 'abandoning.py').write_text(ABANDONED_WORK)
  proc = subprocess.run([sys.executable, '-c', "from nplm_jax import entry; entry.run_command('abandoning')"],
                        cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=f'{REPO}:{tmp_path}'),
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == ['error: best/ is damaged'], proc.stderr


@pytest.fixture
def small_disk(tmp_path):
  """A 2 MiB filesystem (tmpfs), where this machine lets tests mount one (root, as in CI); else None."""
  folder = tmp_path / 'small_disk'
  folder.mkdir()
  mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=2M', 'tmpfs', str(folder)], capture_output=True)
  yield folder if mounted.returncode == 0 else None
  if mounted.returncode == 0:
    subprocess.run(['umount', str(folder)], check=False)


def test_a_full_disk_stops_training_in_one_line_and_resumes_exactly(tiny_files, tmp_path, small_disk):
  """Checkpoints that stop fitting: one 'error:' line naming the folder and the cause, training
  stopped, no temporary folders left; with space again the same command ends as an uninterrupted
  run. Without the right to mount a small disk, the failure is injected into Orbax's save instead."""
  args = [sys.executable, '-m', 'nplm_jax.main', '--config=' + os.path.join(REPO, 'experiments', 'text.py:tiny'),
          *(f'--config.data.{s}_file={tiny_files[s]}' for s in ('train', 'valid', 'test')),
          '--config.model.m=64', '--config.model.h=256', '--config.train.eval_every=20', '--config.train.max_steps=120',
          '--config.optimizer.name=adamw']
  env = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO)
  reference = subprocess.run([*args, f'--workdir={tmp_path / "reference"}'], env=env, capture_output=True, text=True,
                             timeout=300)
  assert reference.returncode == 0, reference.stderr
  if small_disk is not None:
    workdir, failing = small_disk / 'run', args
  else:
    workdir = tmp_path / 'run'
    failing = [sys.executable, '-m', 'tests.faulty_train', 'saves_fail_from=60', '--', *args[3:]]
  full = subprocess.run([*failing, f'--workdir={workdir}'], env=env, cwd=REPO, capture_output=True, text=True,
                        timeout=300)
  assert full.returncode == 1, full.stderr
  lines = full.stderr.strip().splitlines()
  assert len(lines) == 1 and 'No space left on device' in lines[0] and 'free space' in lines[0], full.stderr
  assert lines[0].startswith('error: saving step ') and str(workdir) in lines[0]
  assert not list(workdir.rglob('*.orbax-checkpoint-tmp*')) and not list(workdir.rglob('.*.tmp*'))
  assert not (workdir / 'results.json').exists()
  if small_disk is not None:  # space again: the same command, on a copy of the workdir
    shutil.copytree(workdir, tmp_path / 'run')
    workdir = tmp_path / 'run'
  assert_resumes_to(args, workdir, env, tmp_path / 'reference')


def test_a_save_that_fails_in_the_background_is_named_by_its_step(tmp_path, monkeypatch):
  """The failure a check between dispatches finds (best/ filled the disk after its save returned)
  names the step whose save failed, as a failure inside the save call does."""
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
  checkpoints = ckpt_lib.Checkpoints(workdir_lib.Workdir(tmp_path))
  checkpoints.save_best(60, {'w': np.ones(3, np.float32)})
  checkpoints.wait()

  def full_disk():
    raise ValueError('RESOURCE_EXHAUSTED: Failed writing: No space left on device [os_error_code=28]')

  monkeypatch.setattr(checkpoints.best, 'check_for_errors', full_disk)
  with pytest.raises(ckpt_lib.SaveFailed, match=rf'^saving step 60 to {re.escape(str(tmp_path / "best"))} failed '):
    checkpoints.check()
  checkpoints.close()


def test_unretrieved_failures_of_orbax_writes_are_not_logged(tmp_path, caplog):
  """A save's fragment writes are concurrent tasks; those whose failure Orbax did not raise are logged
  by asyncio when collected (seen in CI, six lines around the one error line). Those drop; a failed
  task of any other code is still logged."""
  import asyncio  # pylint: disable=g-import-not-at-top
  import importlib.util  # pylint: disable=g-import-not-at-top
  importlib.import_module('nplm_jax.training.checkpoint')  # adds the filter
  writes = []
  for where in (tmp_path / 'site-packages' / 'orbax' / 'serialization.py', tmp_path / 'mine.py'):
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text('async def write_fragment():\n  raise ValueError("No space left on device")\n')
    spec = importlib.util.spec_from_file_location(f'fragment_{len(writes)}', where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    writes.append(module.write_fragment)

  async def leave_unretrieved(write):
    task = asyncio.ensure_future(write())
    await asyncio.sleep(0.01)
    assert task.done()

  with caplog.at_level(logging.ERROR, logger='asyncio'):
    for write in writes:
      asyncio.run(leave_unretrieved(write))
      gc.collect()
  logged = [record for record in caplog.records if 'never retrieved' in record.getMessage()]
  assert len(logged) == 1 and f'defined at {tmp_path / "mine.py"}' in logged[0].getMessage()


def test_a_read_only_workdir_is_one_line_and_still_serves(tiny_files, tmp_path):
  """A finished workdir on a filesystem remounted read-only (as root, only a mount binds): the tools
  that read serve it, the commands that would write say so in one line, and nothing is half-written."""
  folder = tmp_path / 'read_only'
  folder.mkdir()
  if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=16M', 'tmpfs', str(folder)], capture_output=True).returncode:
    pytest.skip('this machine does not let tests mount a filesystem (read-only folders need one when run as root)')
  try:
    env = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO)
    train_args = [sys.executable, '-m', 'nplm_jax.main', '--config=' + os.path.join(REPO, 'experiments', 'text.py:tiny'),
                  *(f'--config.data.{s}_file={tiny_files[s]}' for s in ('train', 'valid', 'test')),
                  '--config.train.max_steps=20', f'--workdir={folder / "run"}']
    assert subprocess.run(train_args, env=env, capture_output=True, timeout=300).returncode == 0
    subprocess.run(['mount', '-o', 'remount,ro', str(folder)], check=True)
    score = subprocess.run([sys.executable, '-m', 'nplm_jax.tools.score', f'--workdir={folder / "run"}',
                            f'--text={tiny_files["test"]}'], env=env, capture_output=True, text=True, timeout=300)
    assert score.returncode == 0 and score.stdout.startswith('tokens '), score.stderr
    for args, says in ((train_args + ['--config.train.max_steps=40'], 'cannot be written'),
                       ([sys.executable, '-m', 'nplm_jax.tools.mix', f'--workdir={folder / "run"}'], 'Read-only file system')):
      proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
      lines = proc.stderr.strip().splitlines()
      assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith('error: ') and says in lines[0], proc.stderr
  finally:
    subprocess.run(['umount', str(folder)], check=False)
