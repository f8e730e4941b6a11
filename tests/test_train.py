"""Training end to end on a tiny corpus: it learns, resumes exactly, and the CLI writes results."""

import json
import math
import os
import re
import subprocess
import sys
import time

from typing import Any

import flax.struct
import jax
import numpy as np
import pytest

from nplm_jax.training import checkpoint as ckpt_lib
from nplm_jax.training import run_state as run_state_lib
from nplm_jax.training import sampled_noise
from nplm_jax.data import corpora as data
from nplm_jax.training import train
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.parallel import sharding
from nplm_jax.errors import UserError
from tests import checkpoint_reader
from tests import corpora

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def unigram_valid_ppl(files) -> float:
  corpus = data.text_corpus(files)
  counts = corpus.unigram_counts('train') + 0.5
  p = counts / counts.sum()
  return math.exp(-np.mean(np.log(p[corpus.splits['valid']])))


def test_training_beats_the_unigram_model(tiny_files, tiny_config, tmp_path):
  started = time.time()
  results = train.train_and_evaluate(tiny_config, str(tmp_path))
  assert 0 < results['wall_seconds'] <= time.time() - started
  baseline = unigram_valid_ppl(tiny_files)
  assert results['valid_ppl'] < 0.6 * baseline, (results['valid_ppl'], baseline)
  history = [h['valid_ppl'] for h in results['history']]
  assert history[-1] < history[0]
  for key in ('vocab_size', 'train_tokens', 'valid_tokens', 'test_tokens', 'valid_ppl', 'test_ppl', 'step',
              'wall_seconds', 'config'):
    assert key in results
  assert results['valid_tokens'] == data.text_corpus(tiny_files).num_tokens('valid')


@pytest.mark.parametrize('loss', ['sampled_softmax', 'nce'])
def test_sampled_training_learns_and_evaluates_exactly(tiny_files, tiny_config, tmp_path, loss):
  tiny_config.loss.update(name=loss, num_samples=10)
  tiny_config.train.num_epochs = 4
  results = train.train_and_evaluate(tiny_config, str(tmp_path))
  assert results['valid_ppl'] < 0.6 * unigram_valid_ppl(tiny_files)
  assert results['config']['loss']['name'] == loss




@pytest.mark.parametrize('anneal,dropout,average,moments', [
    (False, False, False, None), (True, False, False, None), (False, True, False, None), (True, False, True, None),
    (False, False, False, 'bfloat16')], ids=['plain', 'anneal', 'dropout', 'anneal_average', 'adamw_bfloat16_moments'])
def test_resume_equals_uninterrupted(tiny_config, tmp_path, anneal, dropout, average, moments):
  for c in (tiny_config,):
    c.optimizer.name = 'paper_sgd'
    c.optimizer.learning_rate = 3e-3
    if moments:  # AdamW's moments in bfloat16: the second's rounding draws its bits from (seed, step)
      c.optimizer.update(name='adamw', mu_dtype=moments, nu_dtype=moments)
    c.train.update(max_steps=40, eval_every=15)
    if anneal:  # every evaluation after the first anneals: the resumed run must keep the lowered rate
      c.train.update(anneal_factor=0.5, anneal_threshold=1.0, max_anneals=3, patience=0)
    if dropout:  # the masks of a step depend on (seed, step) only
      c.model.update(feature_dropout=0.2, hidden_dropout=0.3)
    if average:  # the moving average is saved and resumed with the parameters
      c.optimizer.ema_decay = 0.9
  whole, parts = str(tmp_path / 'whole'), str(tmp_path / 'parts')
  train.train_and_evaluate(tiny_config, whole)
  interrupted = tiny_config.copy_and_resolve_references()
  interrupted.train.max_steps = 32 if anneal else 22  # stops between evaluations (after an anneal)
  train.train_and_evaluate(interrupted, parts)
  resumed = train.train_and_evaluate(tiny_config, parts)
  for item in ('params', 'average') if average else ('params',):
    a, b = checkpoint_reader.latest_params(whole, item), checkpoint_reader.latest_params(parts, item)
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  with open(os.path.join(whole, 'results.json')) as f:
    assert json.load(f)['valid_ppl'] == resumed['valid_ppl']


@pytest.mark.parametrize('steps_per_dispatch', [1, 5])
def test_a_run_resumed_between_two_log_boundaries_logs_what_the_uninterrupted_run_logs(tiny_config, tmp_path,
                                                                                        steps_per_dispatch):
  """train_loss_mean is the mean over each logging interval: a run stopped at step 25 of intervals of 10 saves the
  losses of steps 21-25 with its checkpoint, and resumed, logs at step 30 the mean of steps 21-30, as the
  uninterrupted run does (it had logged the mean of 26-30 alone). Every row of the uninterrupted run is in the
  resumed run's metrics.jsonl, equal; the one row more is the stopped run's own last (step 25)."""
  tiny_config.train.update(max_steps=40, eval_every=20, log_every=10, steps_per_dispatch=steps_per_dispatch)
  if steps_per_dispatch > 1:
    tiny_config.train.device_data = 'on'
  whole, parts = tmp_path / 'whole', tmp_path / 'parts'
  train.train_and_evaluate(tiny_config, str(whole))
  interrupted = tiny_config.copy_and_resolve_references()
  interrupted.train.max_steps = 25
  train.train_and_evaluate(interrupted, str(parts))
  train.train_and_evaluate(tiny_config, str(parts))
  rows = lambda w: {r['step']: (r['train_loss_mean'], r['learning_rate'])
                    for r in map(json.loads, (w / 'metrics.jsonl').read_text(encoding='utf-8').splitlines())
                    if 'train_loss_mean' in r}
  uninterrupted, resumed = rows(whole), rows(parts)
  assert sorted(uninterrupted) == [10, 20, 30, 40] and sorted(resumed) == [10, 20, 25, 30, 40]
  assert {step: resumed[step] for step in uninterrupted} == uninterrupted


def _losses(workdir, with_steps: bool = False) -> list:
  with open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8') as f:
    return [(r['step'], r['train_loss_mean']) if with_steps else r['train_loss_mean'] for r in map(json.loads, f)
            if 'train_loss_mean' in r]


@pytest.mark.parametrize('steps_per_dispatch', [1, 4])
def test_data_on_the_devices_gives_the_host_loops_run_bit_for_bit(tiny_config, tmp_path, steps_per_dispatch):
  """Batches gathered inside the jitted steps (one or several a dispatch) are the host's: the same
  per-step losses, parameters and results, bit for bit."""
  tiny_config.model.update(feature_dropout=0.1, hidden_dropout=0.1)
  tiny_config.train.update(batch_size=64, max_steps=90, eval_every=35, log_every=5)  # epochs of 84 steps
  host_config = tiny_config.copy_and_resolve_references()
  host_config.train.device_data = 'off'
  host = train.train_and_evaluate(host_config, str(tmp_path / 'host'))
  tiny_config.train.update(device_data='on', steps_per_dispatch=steps_per_dispatch)
  resident = train.train_and_evaluate(tiny_config, str(tmp_path / 'resident'))
  assert _losses(tmp_path / 'host') == _losses(tmp_path / 'resident') and len(_losses(tmp_path / 'host')) == 18
  for key in ('valid_ppl', 'test_ppl', 'history', 'steps_trained'):
    assert host[key] == resident[key], key
  a, b = checkpoint_reader.latest_params(str(tmp_path / 'host')), checkpoint_reader.latest_params(str(tmp_path / 'resident'))
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize('moments', [None, 'bfloat16'], ids=['paper_sgd', 'adamw_bfloat16_moments'])
def test_several_steps_a_dispatch_resume_exactly(tiny_config, tmp_path, moments):
  """Interrupted between dispatches and resumed, several steps a dispatch (4: full ones and single
  steps before each boundary), the run ends bit-equal to the uninterrupted one; so does AdamW with its
  moments in bfloat16, carried through the loop (the second's rounding bits drawn from seed and step)."""
  tiny_config.train.update(max_steps=60, eval_every=25, log_every=10, steps_per_dispatch=4, device_data='on')
  if moments:
    tiny_config.optimizer.update(name='adamw', learning_rate=3e-3, mu_dtype=moments, nu_dtype=moments)
  whole = train.train_and_evaluate(tiny_config, str(tmp_path / 'whole'))
  interrupted = tiny_config.copy_and_resolve_references()
  interrupted.train.max_steps = 37
  train.train_and_evaluate(interrupted, str(tmp_path / 'parts'))
  resumed = train.train_and_evaluate(tiny_config, str(tmp_path / 'parts'))
  # The cut run logged step 37 too, so its interval to step 40 holds 3 steps, not 10: that mean differs.
  logged = lambda w: [x for x in _losses(w, with_steps=True) if x[0] % 10 == 0 and x[0] != 40]
  assert resumed['valid_ppl'] == whole['valid_ppl'] and logged(tmp_path / 'parts') == logged(tmp_path / 'whole')
  a, b = checkpoint_reader.latest_params(str(tmp_path / 'whole')), checkpoint_reader.latest_params(str(tmp_path / 'parts'))
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])


def test_host_fed_batches_with_several_steps_a_dispatch_train_every_step_counted(tiny_config, tmp_path, monkeypatch):
  """train.steps_per_dispatch=4 where device_data='auto' falls back to host-fed batches (the resident
  bound lowered to 0): the run trains the 40 steps it counts, bit-equal to one step a dispatch."""
  from nplm_jax.training import device_data  # pylint: disable=g-import-not-at-top
  from nplm_jax import backend_defaults  # pylint: disable=g-import-not-at-top
  del device_data
  monkeypatch.setitem(backend_defaults.TABLE, 'train.device_data', backend_defaults.BackendDefault(0, 0, 'a test'))
  tiny_config.train.update(max_steps=40, eval_every=20, log_every=10, device_data='auto', steps_per_dispatch=4)
  fed = train.train_and_evaluate(tiny_config, str(tmp_path / 'fed'))
  single = tiny_config.copy_and_resolve_references()
  single.train.update(device_data='off', steps_per_dispatch=1)
  one = train.train_and_evaluate(single, str(tmp_path / 'one'))
  assert fed['steps_trained'] == 40 and [h['step'] for h in fed['history']] == [20, 40]
  assert fed['history'] == one['history'] and _losses(tmp_path / 'fed') == _losses(tmp_path / 'one')
  a, b = checkpoint_reader.latest_params(str(tmp_path / 'fed')), checkpoint_reader.latest_params(str(tmp_path / 'one'))
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])


def test_the_logged_loss_is_the_mean_over_the_interval(tiny_config, tmp_path):
  """A resident run of 4 steps a dispatch logging every 8 steps logs the mean of those 8 steps' losses
  (as a run logging every step sees them), not the last dispatch's last loss."""
  tiny_config.train.update(max_steps=24, eval_every=24, device_data='on')
  every = tiny_config.copy_and_resolve_references()
  every.train.update(log_every=1, steps_per_dispatch=1)
  train.train_and_evaluate(every, str(tmp_path / 'every'))
  per_step = dict(_losses(tmp_path / 'every', with_steps=True))
  tiny_config.train.update(log_every=8, steps_per_dispatch=4)
  train.train_and_evaluate(tiny_config, str(tmp_path / 'interval'))
  logged = _losses(tmp_path / 'interval', with_steps=True)
  assert [s for s, _ in logged] == [8, 16, 24]
  for step, loss in logged:
    window = [per_step[s] for s in range(step - 7, step + 1)]
    np.testing.assert_allclose(loss, np.mean(window), rtol=1e-5)
    assert abs(loss - per_step[step]) > 1e-4  # the last step alone is another number


def test_every_dispatch_is_as_long_as_the_boundaries_allow(tiny_config, tmp_path, monkeypatch):
  """steps_per_dispatch=64 with log_every=50 (the review's case): dispatches of up to 64 steps that end
  on each log, evaluation and epoch boundary; none of one step where more were allowed."""
  lengths = []
  original = train._StepRunner.__call__

  def counting(self, state, step, num_steps, lr_scale, interval):
    lengths.append((step, num_steps))
    return original(self, state, step, num_steps, lr_scale, interval)
  monkeypatch.setattr(train._StepRunner, '__call__', counting)
  tiny_config.train.update(max_steps=300, eval_every=150, log_every=50, steps_per_dispatch=64, device_data='on')
  plan_epoch = train.experiment_lib.steps_plan(tiny_config, data.TokenStream(
      data.text_corpus({k: tiny_config.data[f'{k}_file'] for k in data.SPLITS}), 2).num_examples('train'))['steps_per_epoch']
  train.train_and_evaluate(tiny_config, str(tmp_path))
  assert sum(n for _, n in lengths) == 300
  plan = dict(eval_every=150, checkpoint_every=150, steps_per_epoch=plan_epoch, total=300)
  for step, n in lengths:
    assert n == min(64, train.next_boundary(step, plan, 50) - step), (step, n)
  assert all(n == 50 for _, n in lengths[:3]) or plan_epoch < 150


def test_dispatches_never_cross_a_boundary():
  plan = dict(eval_every=25, checkpoint_every=50, steps_per_epoch=84, total=200)
  assert train.next_boundary(0, plan, 10) == 10
  assert train.next_boundary(20, plan, 10) == 25  # an evaluation before the next log
  assert train.next_boundary(80, plan, 100) == 84  # an epoch's end: the next dispatch reads the next order
  assert train.next_boundary(190, plan, 1000) == 200  # the last step
  assert train.next_boundary(3, plan, 1000, extra=(7, 9)) == 7  # a profiled span


def test_steps_per_dispatch_is_chosen_by_backend():
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import experiment  # pylint: disable=g-import-not-at-top
  train_config = config_lib.base_config().train  # log_every 500
  assert experiment.steps_per_dispatch(train_config, 'cpu', resident=True) == 1
  assert experiment.steps_per_dispatch(train_config, 'gpu', resident=False) == 1  # host-fed: one a dispatch
  assert experiment.steps_per_dispatch(train_config, 'gpu', resident=True) == 50  # divides log_every
  train_config.log_every = 499  # prime: no useful divisor
  assert experiment.steps_per_dispatch(train_config, 'tpu', resident=True) == 64  # backend_defaults
  train_config.steps_per_dispatch = 7
  assert experiment.steps_per_dispatch(train_config, 'cpu', resident=True) == 7
  assert experiment.steps_per_dispatch(train_config, 'gpu', resident=False) == 1  # host-fed: one a dispatch


def test_device_data_is_automatic_within_a_memory_bound(tiny_files):
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import device_data  # pylint: disable=g-import-not-at-top
  stream = data.TokenStream(data.text_corpus(tiny_files), 2)
  train_config = config_lib.base_config().train
  assert device_data.resident_bytes(stream) == 4 * (sum(stream.num_examples(s) + 2 for s in data.SPLITS) +
                                                   stream.num_examples('train'))
  assert device_data.wanted(train_config, stream, 'cpu') and device_data.wanted(train_config, stream, 'gpu')
  train_config.input_threads = 2
  assert not device_data.wanted(train_config, stream, 'gpu')
  train_config.update(input_threads=0, device_data='off')
  assert not device_data.wanted(train_config, stream, 'gpu')
  from nplm_jax import backend_defaults  # pylint: disable=g-import-not-at-top
  limit = backend_defaults.backend_default('train.device_data', 'cpu') * 2**20
  assert device_data.resident_bytes(stream) < limit  # Brown (8.8 MB) too; 100M tokens (0.9 GB) is host-fed on CPU


def test_a_profile_of_chosen_steps_is_written(tiny_config, tmp_path):
  tiny_config.train.update(max_steps=12, eval_every=12, profile_steps='4:6')
  train.train_and_evaluate(tiny_config, str(tmp_path))
  traces = [os.path.join(r, n) for r, _, names in os.walk(tmp_path / 'profile') for n in names]
  assert any(t.endswith('.xplane.pb') for t in traces), traces


def test_grain_threads_feed_the_same_batches_across_a_resume(tiny_config, tmp_path):
  """train.input_threads > 0 (grain read-ahead), interrupted and resumed, ends bit-equal to the in-loop gather."""
  tiny_config.train.update(max_steps=40, eval_every=15)
  whole, parts = str(tmp_path / 'whole'), str(tmp_path / 'parts')
  train.train_and_evaluate(tiny_config, whole)
  threaded = tiny_config.copy_and_resolve_references()
  threaded.train.update(input_threads=2, max_steps=22)  # host-fed (device_data 'auto' is off with threads)
  train.train_and_evaluate(threaded, parts)
  threaded.train.max_steps = 40
  train.train_and_evaluate(threaded, parts)
  a, b = checkpoint_reader.latest_params(whole), checkpoint_reader.latest_params(parts)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])


def test_annealing_lowers_the_rate_and_goes_on_from_the_best_parameters(tiny_config, tmp_path):
  # threshold 1.0: every evaluation after the first counts as stalled; a factor of 1e-9 then freezes
  # the parameters, so every later evaluation must equal the best one.
  tiny_config.train.update(max_steps=50, eval_every=10, anneal_factor=1e-9, anneal_threshold=1.0,
                           max_anneals=2, patience=0)
  results = train.train_and_evaluate(tiny_config, str(tmp_path))
  history = results['history']
  # evaluation 4 stalls with both anneals spent: training ends there, converged
  assert [h['lr_scale'] for h in history] == pytest.approx([1.0, 1.0, 1e-9, 1e-18], rel=1e-9)
  assert results['stopped_early'] and results['steps_trained'] == 40
  best_after_anneal = min(h['valid_ppl'] for h in history[:2])
  for h in history[2:]:
    assert h['valid_ppl'] == pytest.approx(best_after_anneal, rel=1e-5)
  assert results['valid_ppl'] == pytest.approx(best_after_anneal, rel=1e-5)


def test_a_moving_average_is_what_a_run_evaluates_keeps_and_goes_on_from(tiny_config, tmp_path):
  """optimizer.ema_decay: evaluations read the average, best/ holds it, and an anneal after a worse
  evaluation restarts both the parameters and the average from the best one. A rate too large for
  this model (0.3) makes evaluation 2 worse; the anneal's factor 1e-9 then freezes the parameters,
  so every later evaluation equals the best, which it would not if the average went on from its own."""
  tiny_config.optimizer.update(learning_rate=0.3, ema_decay=0.5)
  tiny_config.train.update(max_steps=60, eval_every=10, anneal_factor=1e-9, anneal_threshold=1.0, max_anneals=2,
                           patience=0)
  results = train.train_and_evaluate(tiny_config, str(tmp_path / 'with'))
  history = [h['valid_ppl'] for h in results['history']]
  assert history[1] > history[0] and results['steps_trained'] == 40
  assert history[2:] == pytest.approx([history[0]] * 2, rel=1e-6)
  assert results['valid_ppl'] == pytest.approx(history[0], rel=1e-6) and results['step'] == 10
  average = checkpoint_reader.latest_params(str(tmp_path / 'with'), 'average')
  for k, p in checkpoint_reader.latest_params(str(tmp_path / 'with')).items():
    np.testing.assert_allclose(average[k], p, rtol=1e-6, atol=1e-8, err_msg=k)  # both went on from the best
  # The same first 10 steps without the average (the parameters' course is the same): another evaluation.
  tiny_config.optimizer.ema_decay = 0.0
  tiny_config.train.max_steps = 10
  last_params = train.train_and_evaluate(tiny_config, str(tmp_path / 'without'))
  assert last_params['valid_ppl'] != pytest.approx(history[0], rel=1e-3)


@flax.struct.dataclass
class StateBeforeTheAverage:
  """The train state as every run saved it before optimizer.ema_decay existed."""
  step: Any
  params: Any
  opt_state: Any


def test_a_run_saved_before_the_moving_average_existed_resumes_exactly(tiny_config, tmp_path, monkeypatch):
  """A state without an average is the tree it was before the average existed, so older checkpoints
  restore (a restore compares the saved tree with the one asked for) and the run goes on as it would."""
  tiny_config.train.update(max_steps=20, eval_every=10)
  whole = train.train_and_evaluate(tiny_config, str(tmp_path / 'whole'))
  save_latest = ckpt_lib.Checkpoints.save_latest
  monkeypatch.setattr(ckpt_lib.Checkpoints, 'save_latest', lambda self, step, state, run_state: save_latest(
      self, step, StateBeforeTheAverage(step=state.step, params=state.params, opt_state=state.opt_state), run_state))
  older = tiny_config.copy_and_resolve_references()
  older.train.max_steps = 10
  train.train_and_evaluate(older, str(tmp_path / 'parts'))
  monkeypatch.undo()
  resumed = train.train_and_evaluate(tiny_config, str(tmp_path / 'parts'))
  assert resumed['valid_ppl'] == whole['valid_ppl'] and resumed['history'] == whole['history']


def test_resume_refuses_a_different_model(tiny_config, tmp_path):
  tiny_config.train.max_steps = 5
  train.train_and_evaluate(tiny_config, str(tmp_path))
  before = sorted(os.listdir(tmp_path))
  tiny_config.model.h = 17
  with pytest.raises(UserError, match='different config.model.h'):
    train.train_and_evaluate(tiny_config, str(tmp_path))
  assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize('key,value,match', [
    ('model.n', 1, 'model.n=1'), ('model.m', 0, 'model.m=0'), ('model.h', -1, 'model.h=-1'),
    ('train.batch_size', 0, 'train.batch_size=0'), ('train.chunk_size', 5, 'train.chunk_size=5'),
    ('train.anneal_factor', 2.0, 'train.anneal_factor=2.0'), ('train.anneal_threshold', -0.1, 'anneal_threshold=-0.1'),
    ('train.max_anneals', -1, 'train.max_anneals=-1'), ('model.feature_dropout', 1.0, 'feature_dropout=1.0'),
    ('model.hidden_dropout', -0.1, 'hidden_dropout=-0.1'),
])
def test_bad_hyperparameters_stop_before_work(tiny_config, tmp_path, key, value, match):
  section, name = key.split('.')
  tiny_config[section][name] = value
  (tmp_path / 'keep.txt').write_text('precious')
  with pytest.raises(UserError, match=match):
    train.train_and_evaluate(tiny_config, str(tmp_path))
  assert os.listdir(tmp_path) == ['keep.txt'] and (tmp_path / 'keep.txt').read_text() == 'precious'


def test_unwritable_workdir(tiny_config, tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('x')
  with pytest.raises(UserError, match='cannot be written'):
    train.train_and_evaluate(tiny_config, str(blocker / 'run'))
  assert blocker.read_text() == 'x'


def test_missing_text_corpus(tiny_config, tmp_path):
  tiny_config.data.train_file = str(tmp_path / 'nope.txt')
  with pytest.raises(UserError, match='does not exist'):
    train.train_and_evaluate(tiny_config, str(tmp_path / 'run'))


def run_cli(*args, env=None):
  environment = dict(os.environ, **(env or {}))
  return subprocess.run([sys.executable, '-m', 'nplm_jax.main', *args], cwd=REPO, env=environment,
                        capture_output=True, text=True, timeout=600)


def test_cli_end_to_end_writes_results(tiny_files, tmp_path):
  workdir = str(tmp_path / 'run')
  proc = run_cli('--config=experiments/text.py:tiny', f'--workdir={workdir}',
                 f'--config.data.train_file={tiny_files["train"]}', f'--config.data.valid_file={tiny_files["valid"]}',
                 f'--config.data.test_file={tiny_files["test"]}', '--config.train.num_epochs=1')
  assert proc.returncode == 0, proc.stderr
  with open(os.path.join(workdir, 'results.json')) as f:
    results = json.load(f)
  assert results['config']['model']['n'] == 3 and results['valid_ppl'] > 1
  assert results['checkpoint_save_seconds'] > 0 and results['checkpoint_checksum_seconds'] > 0  # its share, timed
  assert 'valid ppl' in proc.stdout and 'tok/s' in proc.stdout
  for name in ('metrics.jsonl', 'config.json', 'checkpoints', 'best', 'tensorboard'):
    assert os.path.exists(os.path.join(workdir, name)), name


@pytest.mark.parametrize('args,env,match', [
    (['--config=experiments/brown.py', '--config.model.hh=3'], {}, '--config.model.hh is not a config key'),
    (['--config=experiments/brown.py:mlp11'], {}, "unknown Brown variant 'mlp11'"),
    (['--config=experiments/brown.py'], {'NLTK_DATA': '{tmp}/no_such_folder'}, "no_such_folder' names no folder"),
    (['--config=experiments/ptb.py', '--config.data.path={tmp}/no_such_folder'], {}, 'data.path'),
    (['--config=experiments/brown.py', '--config.model.n=1'], {}, 'model.n=1'),
])
def test_cli_bad_input_is_one_line(tmp_path, args, env, match):
  (tmp_path / 'keep.txt').write_text('precious')  # beside the workdir: a refused run touches nothing
  args = [a.format(tmp=tmp_path) for a in args]
  env = {k: v.format(tmp=tmp_path) for k, v in env.items()}
  proc = run_cli(*args, f'--workdir={tmp_path / "run"}', env=env)
  assert proc.returncode != 0
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: ') and match in lines[0], proc.stderr
  assert os.listdir(tmp_path) == ['keep.txt']


def test_noise_samples_follow_the_unigram_power_distribution():
  import ml_collections  # pylint: disable=g-import-not-at-top
  counts = np.array([1000, 300, 100, 2, 50]) - 0.5  # make_sampled_loss adds 0.5 to every count
  config = ml_collections.ConfigDict(dict(name='nce', num_samples=200_000, noise_power=0.75))
  loss = sampled_noise.make_sampled_loss(config, counts, seed=0)
  expected = (counts + 0.5) ** 0.75 / np.sum((counts + 0.5) ** 0.75)
  np.testing.assert_allclose(np.exp(np.asarray(loss.log_noise)), expected, rtol=1e-5)
  samples = np.asarray(sampled_noise.draw_noise(loss, step=3))
  frequencies = np.bincount(samples, minlength=5) / samples.size
  np.testing.assert_allclose(frequencies, expected, atol=4e-3)
  assert not np.array_equal(samples[:100], np.asarray(sampled_noise.draw_noise(loss, step=4))[:100])
  np.testing.assert_array_equal(samples, np.asarray(sampled_noise.draw_noise(loss, step=3)))


def test_noise_of_a_large_vocabulary_is_drawn_with_the_probabilities_its_correction_uses():
  """Zipf over 250k words: the tail lies below a float32 CDF's rounding; the alias table's float32
  entries still give every word its probability within 1e-4 (relative), and log_noise is exactly
  what is drawn."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  v = 250_000
  counts = 1e8 / np.arange(1, v + 1) ** 1.1  # Zipf-like counts, the rarest about 1
  probs = (counts + 0.5) / np.sum(counts + 0.5)
  cdf32 = np.cumsum(probs).astype(np.float32).astype(np.float64)
  float32_cdf_probs = np.diff(np.concatenate([[0.0], cdf32]))
  assert np.sum(np.abs(float32_cdf_probs / probs - 1) > 0.1) > 1000  # what an inverse float32 CDF draws
  loss = sampled_noise.make_sampled_loss(ml_collections.ConfigDict(dict(name='nce', num_samples=10, noise_power=1.0)),
                                 counts, seed=0)
  drawn = sampled_noise.alias_probs(np.asarray(loss.noise_accept), np.asarray(loss.noise_alias))
  assert np.max(np.abs(drawn / probs - 1)) < 1e-4
  np.testing.assert_allclose(np.exp(np.asarray(loss.log_noise, np.float64)), drawn, rtol=1e-6)


def test_keys_added_by_newer_code_do_not_block_resuming(tiny_config, tmp_path):
  saved = json.loads(tiny_config.to_json_best_effort())
  del saved['loss'], saved['model']['compute_dtype']  # as written before these keys existed
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  train.check_resumable(workdir_lib.Workdir(tmp_path), tiny_config)  # no error
  tiny_config.model.compute_dtype = 'bfloat16'  # but a change to a key the old run had still counts
  saved['model']['m'] = 99
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  with pytest.raises(UserError, match='config.model.m'):
    train.check_resumable(workdir_lib.Workdir(tmp_path), tiny_config)


def load_brown_config(variant):
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  return config_lib.load_experiment(os.path.join(REPO, 'experiments', 'brown.py')).get_config(variant)


def test_tuned_variants_keep_the_row_and_change_only_the_optimiser_setting():
  paper, tuned = load_brown_config('mlp1'), load_brown_config('mlp1_tuned')
  assert tuned.model.to_dict() == paper.model.to_dict() and tuned.data.to_dict() == paper.data.to_dict()
  assert (tuned.optimizer.learning_rate, tuned.optimizer.weight_decay, tuned.train.anneal_factor) == (4e-3, 3e-5, 0.5)
  assert paper.train.anneal_factor == 0.0
  assert load_brown_config('mlp2_tuned').mix.enabled
  with pytest.raises(ValueError, match='unknown Brown variant'):
    load_brown_config('mlp11_tuned')


def test_seed_changes_the_initialisation_of_a_run(tiny_config, tmp_path):
  tiny_config.train.max_steps = 1
  first = train.train_and_evaluate(tiny_config, str(tmp_path / 'seed0'))
  tiny_config.seed = 1
  second = train.train_and_evaluate(tiny_config, str(tmp_path / 'seed1'))
  assert first['valid_ppl'] != second['valid_ppl']


def test_an_early_stopped_run_resumed_with_annealing_anneals_from_its_best_parameters(tiny_config, tmp_path):
  # patience 1 without annealing: the run stops at the first evaluation that does not improve,
  # which this high learning rate brings at once
  tiny_config.optimizer.learning_rate = 0.1
  tiny_config.train.update(max_steps=200, eval_every=10, patience=1)
  stopped = train.train_and_evaluate(tiny_config, str(tmp_path))
  assert stopped['stopped_early'], stopped['history']
  steps_before = stopped['steps_trained']
  tiny_config.train.update(anneal_factor=1e-9, anneal_threshold=1.0, max_anneals=1)
  resumed = train.train_and_evaluate(tiny_config, str(tmp_path))
  new = resumed['history'][len(stopped['history']):]
  assert new and new[0]['lr_scale'] == pytest.approx(1e-9)  # annealed at once ...
  assert new[0]['valid_ppl'] == pytest.approx(stopped['valid_ppl'], rel=1e-5)  # ... from the best parameters
  assert resumed['steps_trained'] == steps_before + 10 and resumed['stopped_early']  # a stall after the last anneal


def test_chunked_training_step_equals_the_unchunked_one(tiny_config, tmp_path):
  tiny_config.train.update(max_steps=12, eval_every=12)
  tiny_config.model.update(feature_dropout=0.1, hidden_dropout=0.1)
  whole = train.train_and_evaluate(tiny_config, str(tmp_path / 'whole'))
  tiny_config.train.chunk_size = 8
  chunked = train.train_and_evaluate(tiny_config, str(tmp_path / 'chunked'))
  assert chunked['valid_ppl'] == pytest.approx(whole['valid_ppl'], rel=1e-5)
  a, b = checkpoint_reader.latest_params(str(tmp_path / 'whole')), checkpoint_reader.latest_params(str(tmp_path / 'chunked'))
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-6)


def test_regularised_variants_add_one_change_at_a_time():
  base = load_brown_config('mlp10_tuned')
  previous = load_brown_config('reg0_mlp9')
  assert previous.model.to_dict() == base.model.to_dict() and previous.mix.enabled
  for name in ('reg1_dropout', 'reg2_h300', 'reg3_m100', 'reg4_n7'):
    config = load_brown_config(name)
    changed = {k for k, v in config.model.items() if previous.model[k] != v}
    assert changed and changed <= {'feature_dropout', 'hidden_dropout', 'h', 'm', 'n'}, (name, changed)
    assert config.optimizer.to_dict() == base.optimizer.to_dict() and config.mix.enabled
    previous = config
  assert (previous.model.n, previous.model.m, previous.model.h) == (7, 100, 300)


def allow_any_budget(monkeypatch):
  """Lets a budget too small to train in run its first step (a run refuses it otherwise), so that a test
  reaches the budget's stop at once."""
  monkeypatch.setattr(train, '_refuse_a_budget_too_small', lambda *args: None)


def test_a_time_budget_stops_at_the_next_dispatch_and_a_larger_one_goes_on(tiny_config, tmp_path, monkeypatch):
  """train.max_seconds is checked after every dispatch, not at the next scheduled evaluation: a spent
  budget stops after the first step, which is then evaluated (the run's one final evaluation)."""
  allow_any_budget(monkeypatch)
  tiny_config.train.update(max_seconds=1e-3, eval_every=40, num_epochs=2)
  budgeted = train.train_and_evaluate(tiny_config, str(tmp_path))
  assert budgeted['stopped_early'] and budgeted['steps_trained'] == 1  # before the first evaluation at 40
  assert [h['step'] for h in budgeted['history']] == [1] and budgeted['step'] == 1
  assert budgeted['test_ppl'] > 0 and budgeted['stop_reason'].startswith('train.max_seconds')
  tiny_config.train.max_seconds = 0.0  # no budget: the same run goes on to its end
  finished = train.train_and_evaluate(tiny_config, str(tmp_path))
  assert not finished['stopped_early'] and finished['stop_reason'] == ''
  assert finished['epochs'] == 2
  assert len(finished['history']) > len(budgeted['history'])


def test_a_time_budget_leaves_the_final_evaluation_its_measured_time(tiny_files, tiny_config, tmp_path, monkeypatch,
                                                                    capsys):
  """The budget counts the whole run: training stops when the next dispatch would leave the stop step's
  validation and the test split less than the time the probe measured for them. A probe that says they
  take all but 0.1 s of 600 stops training after its first dispatch (the start-up alone takes longer;
  the run itself far less than 600 s, so it is the reserve that stops it); the same budget again is
  finished, a larger one goes on."""
  allow_any_budget(monkeypatch)  # the start-up and 599.9 s exceed 600: the reserve, not the refusal, is tested
  tiny_config.train.update(max_seconds=600.0, eval_every=40, num_epochs=2)
  tokens = data.text_corpus(tiny_files).num_tokens
  slow = 599.9 / (tokens('valid') + tokens('test'))  # seconds a token: the final evaluation takes 599.9 s
  monkeypatch.setattr(train.evaluation, 'timing_probe', lambda run, params: slow)
  budgeted = train.train_and_evaluate(tiny_config, str(tmp_path / 'run'))
  assert budgeted['stop_reason'] == 'train.max_seconds=600 spent' and budgeted['steps_trained'] == 1
  assert 0 <= budgeted['after_training_seconds'] <= budgeted['wall_seconds'] < 600
  assert 'about 600 s left for the final evaluation' in capsys.readouterr().out
  assert train.train_and_evaluate(tiny_config, str(tmp_path / 'run'))['steps_trained'] == 1  # the same budget
  monkeypatch.setattr(train.evaluation, 'timing_probe', lambda run, params: 0.0)
  tiny_config.train.max_seconds = 1200.0
  assert train.train_and_evaluate(tiny_config, str(tmp_path / 'run'))['epochs'] == 2


def test_a_budget_decides_the_learning_rate_and_the_validations_size(tiny_config, tmp_path, monkeypatch, capsys):
  """With train.budget_decay the rate falls to 0 by the budget's stop (no early stop), and with
  train.budget_eval_share the validations during training read a subset, the final ones the whole split."""
  tiny_config.train.update(max_seconds=12.0, num_epochs=5000, eval_every=200, log_every=100, eval_batch_size=16,
                           budget_decay=1.0, budget_eval_share=0.001, patience=1)
  results = train.train_and_evaluate(tiny_config, str(tmp_path))
  out = capsys.readouterr().out
  assert 'decides the learning rate' in out and 'validations during training read the first 256 of the 795' in out
  rates = [float(r) for r in re.findall(r' lr (\S+) ', out)]
  assert len(rates) >= 3 and rates[0] > 0 and rates[-1] < 0.25 * rates[0]  # near 0 at the stop
  assert results['stop_reason'] == 'train.max_seconds=12 spent'  # not patience
  assert results['valid_tokens'] == 795  # the final figures: the whole split
  # the validations during training are timed: more than nothing, less than the run's time before the final ones
  assert 0 < results['validation_seconds'] < results['wall_seconds'] - results['after_training_seconds']


def test_a_budget_too_small_for_the_final_evaluation_is_refused_with_the_least_that_holds(tiny_config, tmp_path,
                                                                                          monkeypatch):
  tiny_config.train.update(max_seconds=10.0, num_epochs=1)
  monkeypatch.setattr(train.evaluation, 'timing_probe', lambda run, params: 1.0)  # a second a token
  with pytest.raises(UserError, match=r'train.max_seconds=10 leaves no time to train: .* final evaluation takes '
                     r'about \d+ s; give at least --config.train.max_seconds=\d+$') as refused:
    train.train_and_evaluate(tiny_config, str(tmp_path))
  tiny_config.train.max_seconds = float(str(refused.value).rsplit('=', 1)[1])  # the least it named: trains
  assert train.train_and_evaluate(tiny_config, str(tmp_path))['epochs'] == 1


def test_the_eta_counts_the_evaluations_still_to_run():
  plan = {'total': 100, 'eval_every': 20}
  clock = train._EvaluationClock(valid_tokens=1000, test_tokens=2000)
  clock.validated(2.0)  # 2 ms a token
  assert clock.final_seconds() == pytest.approx(6.0)
  assert clock.seconds_left(30, plan) == pytest.approx(4 * 2.0 + 4.0)  # validations at 40, 60, 80, 100; test
  assert clock.seconds_left(40, plan) == pytest.approx(4 * 2.0 + 4.0)  # 40's own comes after its progress line
  assert clock.seconds_left(100, plan) == pytest.approx(2.0 + 4.0)
  assert clock.seconds_left(90, {'total': 90, 'eval_every': 40}) == pytest.approx(2.0 + 4.0)  # the end's, off the 40s
  progress = train.metrics_lib.Progress(0, plan['total'], tokens_per_step=8)
  progress._measured_steps, progress._measured_seconds = 50, 50.0  # a step a second so far
  assert progress.report(50, after_training=3600.0)['eta'].startswith('1h00m')  # 50 steps, then an hour
  assert progress.report(50, seconds_left=60.0, after_training=3600.0)['eta'] == '1m00s'  # the budget first


@pytest.mark.parametrize('device_data', ['on', 'off'])
def test_an_evaluation_of_the_first_batches_is_the_full_one_s_beginning(tiny_config, tmp_path, device_data):
  tiny_config.train.update(device_data=device_data, eval_batch_size=16)
  run = train.experiment_lib.Experiment(tiny_config, workdir_lib.Workdir(str(tmp_path)))
  with train.jax.set_mesh(run.mesh):
    params = run.steps.init().params
    whole = train.evaluation.split_nll(run, params, 'valid')
    first = train.evaluation.split_nll(run, params, 'valid', max_batches=1)
    assert train.evaluation.timing_probe(run, params) > 0
  per_call = min(train.evaluation.EVAL_BATCHES_A_CALL, -(-len(whole) // 16)) if device_data == 'on' else 1
  assert len(first) == min(len(whole), per_call * 16)
  np.testing.assert_array_equal(first, whole[:len(first)])


def test_the_extra_evaluation_of_a_time_budget_leaves_the_resumed_run_on_the_uninterrupted_course(tiny_config,
                                                                                                 tmp_path, monkeypatch):
  """The evaluation at a time-budget stop (off the eval_every schedule) may be the best so far, but what
  annealing and patience judge by moves only at scheduled evaluations: stopped after step 1 and
  resumed, the run anneals where the uninterrupted one does and ends with its numbers. A threshold of
  90% makes every scheduled evaluation after the first stall, so judging the first against step 1's
  figure (as the code once did) would anneal there."""
  allow_any_budget(monkeypatch)
  tiny_config.train.update(eval_every=20, num_epochs=1, anneal_factor=0.5, anneal_threshold=0.9, max_anneals=10)
  uninterrupted = train.train_and_evaluate(tiny_config, str(tmp_path / 'uninterrupted'))
  tiny_config.train.max_seconds = 1e-3
  budgeted = train.train_and_evaluate(tiny_config, str(tmp_path / 'budgeted'))
  assert budgeted['stop_reason'].startswith('train.max_seconds') and budgeted['history'][0]['step'] % 20
  tiny_config.train.max_seconds = 0.0
  resumed = train.train_and_evaluate(tiny_config, str(tmp_path / 'budgeted'))
  scheduled = lambda results, key: [h[key] for h in results['history'] if h['step'] % 20 == 0]
  assert len(scheduled(uninterrupted, 'step')) >= 3 and scheduled(uninterrupted, 'lr_scale')[-1] < 1  # it annealed
  for key in ('step', 'lr_scale'):
    assert scheduled(resumed, key) == scheduled(uninterrupted, key)
  np.testing.assert_allclose(scheduled(resumed, 'valid_ppl'), scheduled(uninterrupted, 'valid_ppl'), rtol=1e-6)
  for key in ('valid_ppl', 'test_ppl'):
    assert resumed[key] == pytest.approx(uninterrupted[key], rel=1e-6)


def test_only_scheduled_evaluations_move_what_annealing_and_patience_judge_by():
  state = run_state_lib.RunState()
  assert state.record_evaluation(20, 0.5, 200.0)
  assert state.record_evaluation(25, 0.6, 190.0, scheduled=False)  # best/ takes step 25
  assert (state.best_valid_ppl, state.best_step) == (190.0, 25)
  assert (state.scheduled_best_ppl, state.evals_since_best) == (200.0, 0)
  assert not state.record_evaluation(30, 0.7, 195.0, scheduled=False)
  assert state.evals_since_best == 0  # no patience spent off the schedule
  assert not state.record_evaluation(40, 1.0, 199.0)  # not the best, but better than the scheduled best
  assert (state.scheduled_best_ppl, state.evals_since_best) == (199.0, 0)
  assert not state.record_evaluation(60, 1.5, 201.0)
  assert state.evals_since_best == 1
  old = {k: v for k, v in state.to_json().items() if k != 'scheduled_best_ppl'}  # saved before the field existed
  assert run_state_lib.RunState.from_json(old).scheduled_best_ppl == 190.0


def test_the_pallas_softmax_kernel_trains_as_xla_does(tiny_config, tmp_path):
  """A short training with train.softmax_kernel='pallas', 'pallas_loop' and 'pallas_loop_dz' (both forms,
  both backwards of the loop form, interpret mode on CPU) against 'xla': every logged loss within 1e-5,
  results within 1e-4."""
  import json  # pylint: disable=g-import-not-at-top
  tiny_config.train.update(max_steps=30, eval_every=15, log_every=5)
  results, losses = {}, {}
  for kernel in ('xla', 'pallas', 'pallas_loop', 'pallas_loop_dz'):
    tiny_config.train.softmax_kernel = kernel
    results[kernel] = train.train_and_evaluate(tiny_config, str(tmp_path / kernel))
    with open(tmp_path / kernel / 'metrics.jsonl', encoding='utf-8') as f:
      losses[kernel] = [r['train_loss_mean'] for r in map(json.loads, f) if 'train_loss_mean' in r]
  assert len(losses['xla']) == 6
  for kernel in ('pallas', 'pallas_loop', 'pallas_loop_dz'):
    np.testing.assert_allclose(losses[kernel], losses['xla'], rtol=1e-5)
    for key in ('valid_ppl', 'test_ppl'):
      assert results[kernel][key] == pytest.approx(results['xla'][key], rel=1e-4)


def test_the_mosaic_gpu_kernel_trains_as_xla_does(tmp_path):
  """train.softmax_kernel='pallas_mosaic' (the kernels' Mosaic GPU form, in its interpret mode on one CPU
  device) against 'xla', both in bfloat16: every logged loss within 1e-3 (its dz is rounded to bfloat16 for
  XLA's matmuls, as the XLA path's own dlogits), results within 1e-3. Then both in float32 at
  model.matmul_precision='default' (the form's float32: TF32 on a GPU, the layer read transposed; IEEE
  products in the interpreter), warp-specialised and dz in chunks of the vocabulary (train.softmax_kernel_tuning
  reaches the kernels): within 1e-5. Six steps, and the tiny corpus's training text with a quarter of its
  validation and test lines: the interpreter takes about half a second a step on a CPU, and 2 s warp-specialised
  (tests/test_softmax_kernel.py checks each tuning's numbers against NumPy). One device: its interpreter
  simulates one GPU (tests/test_softmax_kernel.py checks the one-line error on a mesh of several): where an
  earlier test of this process made several host devices, the test runs in a process of its own."""
  if len(jax.devices()) > 1:
    env = dict(os.environ, XLA_FLAGS=sharding.without_host_device_count())
    proc = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:xdist', '-p', 'no:cacheprovider',
                           f'{__file__}::test_the_mosaic_gpu_kernel_trains_as_xla_does', '--basetemp', str(tmp_path / 'own')],
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return
  tiny_config = corpora.tiny_config(corpora.write_markov_corpus(str(tmp_path), lines=(400, 15, 15)))
  tiny_config.train.update(max_steps=6, eval_every=6, log_every=2)
  tiny_config.mesh.cpu_devices = 1
  results, losses = {}, {}
  runs = (('xla', 'bfloat16', 'xla', ''), ('mosaic', 'bfloat16', 'pallas_mosaic', ''),
          ('xla_float32', 'float32', 'xla', ''),
          ('mosaic_float32', 'float32', 'pallas_mosaic', 'warpgroups=1,num_stages=1,dz_axis=vocab,dz_chunks=2'))
  for name, dtype, kernel, tuning in runs:
    tiny_config.model.update(compute_dtype=dtype, matmul_precision='default')
    tiny_config.train.update(softmax_kernel=kernel, softmax_kernel_tuning=tuning)
    results[name] = train.train_and_evaluate(tiny_config, str(tmp_path / name))
    with open(tmp_path / name / 'metrics.jsonl', encoding='utf-8') as f:
      losses[name] = [r['train_loss_mean'] for r in map(json.loads, f) if 'train_loss_mean' in r]
  assert len(losses['xla']) == 3
  for name, against, tolerance in (('mosaic', 'xla', 1e-3), ('mosaic_float32', 'xla_float32', 1e-5)):
    np.testing.assert_allclose(losses[name], losses[against], rtol=tolerance)
    for key in ('valid_ppl', 'test_ppl'):
      assert results[name][key] == pytest.approx(results[against][key], rel=tolerance)


def test_adamw_with_bfloat16_moments_trains_as_float32_does(tiny_config, tmp_path):
  """optimizer.mu_dtype / nu_dtype='bfloat16': the first moment stored in bfloat16 (optax's mu_dtype), then
  the second too (stochastically rounded), and a short AdamW training follows the float32 one (logged
  losses within 1e-2, the test perplexity within 0.5%: what a faster step may cost)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import optim  # pylint: disable=g-import-not-at-top
  tiny_config.optimizer.update(name='adamw', learning_rate=3e-3, weight_decay=0.0)
  tiny_config.train.update(max_steps=30, eval_every=30, log_every=5)
  losses, results = {}, {}
  for name, (mu_dtype, nu_dtype) in {'float32': ('float32',) * 2, 'mu': ('bfloat16', 'float32'),
                                     'both': ('bfloat16',) * 2}.items():
    tiny_config.optimizer.update(mu_dtype=mu_dtype, nu_dtype=nu_dtype)
    adam_state = optim.make_optimizer(tiny_config.optimizer, 4).init({'w': jnp.zeros((2, 3), jnp.float32)})[0]
    assert adam_state.mu['w'].dtype == jnp.dtype(mu_dtype) and adam_state.nu['w'].dtype == jnp.dtype(nu_dtype)
    results[name] = train.train_and_evaluate(tiny_config, str(tmp_path / name))
    losses[name] = _losses(tmp_path / name)
  assert len(losses['float32']) == 6
  for name in ('mu', 'both'):
    assert losses[name][-1] < losses[name][0]
    np.testing.assert_allclose(losses[name], losses['float32'], rtol=1e-2)
    assert results[name]['test_ppl'] == pytest.approx(results['float32']['test_ppl'], rel=5e-3)


def _carried_loop_runs(tiny_config, tmp_path, key: str, values, max_steps: int):
  """A short AdamW training in bfloat16 matmuls, in the loop of 5 steps a dispatch with the whole layer's copy
  carried (as the research size's GPU figures run it), once for each value of train.KEY: (logged losses,
  results), each by value."""
  tiny_config.optimizer.update(name='adamw', learning_rate=3e-3, weight_decay=0.0)
  tiny_config.model.compute_dtype = 'bfloat16'
  tiny_config.train.update(max_steps=max_steps, eval_every=max_steps, log_every=5, device_data='on',
                           steps_per_dispatch=5, carry_cast_layer='whole')
  losses, results = {}, {}
  for value in values:
    tiny_config.train[key] = value
    results[value] = train.train_and_evaluate(tiny_config, str(tmp_path / value))
    losses[value] = _losses(tmp_path / value)
  return losses, results


def test_a_bfloat16_output_layer_gradient_trains_as_float32s_does(tiny_config, tmp_path):
  """train.output_layer_gradient_dtype='bfloat16' with bfloat16 matmuls, in the loop of several steps a dispatch
  with the layer's copy carried (as the research size's GPU figures run it): a short AdamW training follows
  the float32 gradient's (logged losses within 1e-2, the test perplexity within 0.5%: what a faster step may cost)."""
  losses, results = _carried_loop_runs(tiny_config, tmp_path, 'output_layer_gradient_dtype', ('float32', 'bfloat16'),
                                       max_steps=30)
  assert len(losses['float32']) == 6 and losses['bfloat16'][-1] < losses['bfloat16'][0]
  np.testing.assert_allclose(losses['bfloat16'], losses['float32'], rtol=1e-2)
  assert results['bfloat16']['test_ppl'] == pytest.approx(results['float32']['test_ppl'], rel=5e-3)
  assert results['bfloat16']['test_ppl'] != results['float32']['test_ppl']  # the option took effect


def test_the_output_layer_gradients_forms_train_bit_equal(tiny_config, tmp_path):
  """train.output_layer_gradient_form='dlogits_apart_rows_padded' (the dlogits behind a barrier, f's rows
  padded to a multiple of 8) in the loop with the layer's copy carried: the same losses and test perplexity
  as 'as_traced', bit for bit on the CPU (the same sums; only the program's shape differs). With a bfloat16
  gradient they differ in the 8th digit there: XLA on a CPU drops the rounding of a bfloat16 product widened
  at once (excess precision), not one sliced first (test_model checks each form's bfloat16 gradient)."""
  losses, results = _carried_loop_runs(tiny_config, tmp_path, 'output_layer_gradient_form',
                                       ('as_traced', 'dlogits_apart_rows_padded'), max_steps=20)
  assert len(losses['as_traced']) == 4 and losses['as_traced'] == losses['dlogits_apart_rows_padded']
  assert results['as_traced']['test_ppl'] == results['dlogits_apart_rows_padded']['test_ppl']


def test_a_cosine_over_the_run_brings_the_logged_rate_to_zero_at_its_last_step(tiny_config, tmp_path):
  """optimizer.cosine_decay_steps=-1 decays over the run's planned steps (here train.max_steps): the rate
  the loop logs follows the cosine, from the full rate after the warm-up to 0 at the last step."""
  tiny_config.optimizer.update(name='adamw', learning_rate=2e-3, weight_decay=0.0, warmup_steps=4,
                               cosine_decay_steps=-1)
  tiny_config.train.update(max_steps=24, eval_every=24, log_every=4)
  train.train_and_evaluate(tiny_config, str(tmp_path))
  with open(tmp_path / 'metrics.jsonl', encoding='utf-8') as f:
    rates = {r['step']: r['learning_rate'] for r in map(json.loads, f) if 'learning_rate' in r}
  expected = {s: 2e-3 * 0.5 * (1 + np.cos(np.pi * (s - 4) / 20)) for s in (4, 8, 12, 16, 20, 24)}
  assert rates == pytest.approx(expected, abs=1e-9)


def test_the_start_line_names_the_output_layers_paths_auto_resolves_to(tiny_config, tmp_path, monkeypatch, capsys):
  """Where train.softmax_kernel='auto' is resolved by each call's shapes (one GPU), the run's first lines say
  which path its training and evaluation steps take, from the shapes the traced steps see (here as on a GPU:
  softmax_kernel_for leaves 'auto', and auto_kernel is asked for each)."""
  asked = []

  def auto_kernel(platform, shard_batch, shard_columns, features, compute_dtype, tuning=''):
    del platform, tuning
    asked.append((shard_batch, shard_columns, features, compute_dtype))
    return 'xla' if shard_batch < 32 else 'pallas_mosaic_here'

  monkeypatch.setattr(train.experiment_lib.vocab_softmax, 'softmax_kernel_for', lambda name, platform, devices: 'auto')
  monkeypatch.setattr(train.experiment_lib.vocab_softmax, 'auto_kernel', auto_kernel)
  config = tiny_config.copy_and_resolve_references()
  config.train.update(max_steps=2, eval_every=2, log_every=1, batch_size=16, eval_batch_size=64)
  config.mix.enabled = False
  train.train_and_evaluate(config, str(tmp_path / 'run'))  # a name not of KERNEL_FORMS takes XLA's path
  assert "output layer: xla in training, pallas_mosaic_here in evaluation (train.softmax_kernel='auto')" in (
      capsys.readouterr().out)
  k = config.model.h + (config.model.n - 1) * config.model.m * config.model.direct
  said, traced = asked[:2], set(asked[2:])
  assert said == [(16, 128, k, 'float32'), (64, 128, k, 'float32')] and set(said) <= traced
