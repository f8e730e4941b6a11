"""launch/session.py: the one-call GPU session (gradient forms timed, the fastest picked, then the rows
that fit in the call, one at a time), checked on the CPU."""

import json
import os
import pathlib
import subprocess
import sys
import time
import types

import pytest

from launch import results
from launch import session as session_lib
from launch import sweep as sweep_lib
from nplm_jax import config as config_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_fastest_measured_form_is_picked_and_the_default_when_none_was():
  assert session_lib.pick_form({'scatter': 18_900.0, 'sorted': 41_000.0, 'sorted_counts': 39_000.0}) == 'sorted'
  assert session_lib.pick_form({'scatter': None, 'sorted': None, 'sorted_counts': 25_000.0}) == 'sorted_counts'
  assert session_lib.pick_form({'scatter': None, 'sorted': None}) == 'scatter'


def test_every_row_is_a_sweep_point_whose_config_validates_with_every_form_and_a_root_collect_pack_knows():
  """A misspelt point, key or root would waste the session's one call: each row, with each gradient form
  and a time budget, is read and validated as its run will read it."""
  for row in session_lib.ROWS:
    points = {p['name']: p for p in config_lib.load_experiment(row.experiment).get_sweep(row.sweep)}
    assert row.point in points, row
    assert results.gpu_plan_sweep(row.root, row.point) is not None, row.root
    for name in (*session_lib.WORD_FORMS, *(session_lib.CHAR_FORMS if row.chars else ())):
      form = session_lib.GRADIENT_FORMS[name]
      sweep_lib.check_points([points[row.point]], sweep_lib.parse_set([*row.sets, *form, 'train.max_seconds=400']))


class FakeClock:
  """time.time for run_rows: each fake run advances it by the seconds its row was given to train."""

  def __init__(self):
    self.now = 1000.0

  def __call__(self):
    return self.now


def fake_run(clock, calls, envs=None):
  def run(args, **kwargs):
    calls.append(args)
    if envs is not None:
      envs.append(kwargs['env']['JAX_COMPILATION_CACHE_DIR'])
    budget = next(a for a in args if a.startswith('--set=train.max_seconds='))
    clock.now += float(budget.rpartition('=')[2]) / 2  # rows end at half their budget
    return types.SimpleNamespace(returncode=0)
  return run


def record_runs(monkeypatch) -> list:
  """session_lib's subprocess.run replaced: each command's arguments recorded (the list returned), each a success."""
  calls = []

  def run(args, **unused_kwargs):
    calls.append(args)
    return types.SimpleNamespace(returncode=0)
  monkeypatch.setattr(session_lib.subprocess, 'run', run)
  return calls


def _row(name, epochs):
  return session_lib.Row('brown_tune', 'experiments/brown.py', 'tune', name, ('seed=1',), epochs, 10_000, 'a test')


def test_rows_run_in_order_while_they_fit_and_a_long_one_is_skipped_for_a_shorter_after_it(tmp_path, monkeypatch):
  monkeypatch.setattr(session_lib, 'pack', lambda root, out: None)
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)  # tests/conftest.py sets one of its own
  clock, calls, envs = FakeClock(), [], []
  session = session_lib.Session(rates={'scatter': 100.0, 'sorted': 1000.0}, form='sorted')
  # at 1,000 tokens/s: 10 s x 1.3 + 50 = 63 s for 1 epoch, 193 s for 11, 8,110 s for 620
  rows = [_row('first', 1.0), _row('too_long', 620.0), _row('second', 11.0)]
  session_lib.run_rows(rows, session, str(tmp_path), str(tmp_path / 'root'), deadline=clock() + 570,
                       run=fake_run(clock, calls, envs), clock=clock, extra_sets=('train.deterministic=True',))
  assert [r['point'] for r in session.rows] == ['first', 'too_long', 'second']
  assert [r['status'] for r in session.rows] == ['done', 'skipped: about 8110 s, 290 s left', 'done']
  first_sets = [a for a in calls[0] if a.startswith('--set=')]
  assert first_sets == ['--set=seed=1', '--set=model.embedding_gradient=sorted', '--set=model.distant_gradient=rows',
                        '--set=train.deterministic=True',
                        '--set=train.max_seconds=530']  # 570 - 15 for the pack - 25 to finish
  assert '--set=train.max_seconds=265' in calls[1]  # 555 s less the first row's 265, less 25 to finish
  assert '--only=second' in calls[1] and f'--root={tmp_path / "root" / "brown_tune"}' in calls[1]
  assert envs == [str(tmp_path / 'root' / 'jax_cache')] * 2  # the rows share one compilation cache
  with open(tmp_path / 'session.json', encoding='utf-8') as f:
    written = json.load(f)
  assert written['form'] == 'sorted' and written['command'] == 'bash launch/gpu_plan.sh session OUT'


def test_a_row_that_fits_is_never_cut_by_its_safety_budget(tmp_path, monkeypatch):
  """The H100 session of 2026-11-26: Brown tune11's seed 1, estimated at 89 s with 108 s left, was given
  train.max_seconds=47 and stopped at 4.85 of its 6 epochs. A row that fits now gets at least its
  estimate less the finish (FINISH_RESERVE, below START_AND_FINISH) to train."""
  monkeypatch.setattr(session_lib, 'pack', lambda root, out: None)
  assert session_lib.FINISH_RESERVE < session_lib.START_AND_FINISH
  clock, calls = FakeClock(), []
  session = session_lib.Session(rates={'sorted': 1000.0}, form='sorted')
  row = _row('just_fits', 2.0)  # 20,000 tokens at 1,000 tokens/s: 20 s x 1.3 + 50 = 76 s estimated
  estimate = session_lib.estimate_seconds(row, 1000.0)
  deadline = clock() + estimate + session_lib.PACK_RESERVE  # exactly the estimate left
  session_lib.run_rows([row], session, str(tmp_path), str(tmp_path / 'root'), deadline=deadline,
                       run=fake_run(clock, calls), clock=clock)
  assert session.rows[0]['status'] == 'done'
  budget = int(next(a for a in calls[0] if a.startswith('--set=train.max_seconds=')).rpartition('=')[2])
  assert budget >= estimate - session_lib.FINISH_RESERVE - 1


def test_without_a_measured_rate_no_row_runs(tmp_path):
  clock, calls = FakeClock(), []
  session = session_lib.Session(rates={'scatter': None}, form='scatter')
  session_lib.run_rows([_row('first', 1.0)], session, str(tmp_path), str(tmp_path / 'root'), deadline=clock() + 570,
                       run=fake_run(clock, calls), clock=clock)
  assert not calls and session.rows[0]['status'] == 'skipped: no rate was measured'


def test_a_form_is_timed_by_the_throughput_benchmark_and_a_failed_one_gives_no_rate(tmp_path, monkeypatch):
  monkeypatch.chdir(REPO)
  monkeypatch.setattr(session_lib, 'PROBE_CONFIG', 'experiments/brown.py:mlp1')
  monkeypatch.setattr(session_lib, 'PROBE_VOCAB', 300)
  monkeypatch.setattr(session_lib, 'PROBE_BATCH', 32)
  rate = session_lib.probe('sorted', str(tmp_path))
  assert rate and rate > 0, (tmp_path / 'probe_sorted.log').read_text()
  monkeypatch.setitem(session_lib.GRADIENT_FORMS, 'misspelt', ('model.embedding_gradient=nonsense',))
  assert session_lib.probe('misspelt', str(tmp_path)) is None
  assert 'nonsense' in (tmp_path / 'probe_misspelt.log').read_text()


def test_a_row_trains_for_real_and_its_pack_is_collected_with_the_sessions_command(tmp_path, monkeypatch, nltk_data):
  """A real (tiny) row through launch.sweep, packed as device_sweeps.sh packs, and collect_pack's record
  names the session call."""
  del nltk_data  # the row reads Brown from NLTK_DATA
  monkeypatch.chdir(REPO)
  row = session_lib.Row('brown_tune', 'experiments/brown.py', 'regularised', 'reg0_mlp9',
                        ('train.max_steps=20', 'train.eval_every=20', 'mix.enabled=False', 'train.batch_size=64',
                         'model.m=4', 'model.h=6'),  # narrow: evaluating Brown's 361,192 words was 26 of its 38 s
                        0.01, 800_000, 'a test')
  session = session_lib.Session(rates={'scatter': 5000.0}, form='scatter')
  out, root = tmp_path / 'out', tmp_path / 'root'
  out.mkdir()
  session_lib.run_rows([row], session, str(out), str(root), deadline=session_lib.time.time() + 570)
  assert session.rows[0]['status'] == 'done', (root / 'logs' / 'brown_tune.log').read_text()
  assert (root / 'brown_tune' / 'reg0_mlp9' / 'results.json').exists()
  monkeypatch.setattr(results, 'RESULTS_DIR', str(tmp_path / 'results'))
  (tmp_path / 'RESULTS.md').write_text('<!-- results:ladder -->\n<!-- /results -->\n')
  monkeypatch.setattr(results, 'RESULTS_MD', str(tmp_path / 'RESULTS.md'))
  assert results.main(['collect_pack', f'--pack={out / "results.tgz"}', '--commit=abc', '--device=CPU']) == 0
  with open(tmp_path / 'results' / 'brown_tune_reg0_mlp9_seed0.json', encoding='utf-8') as f:
    kept = json.load(f)
  assert kept['command'] == 'bash launch/gpu_plan.sh session OUT  # point reg0_mlp9'
  assert 525 <= kept['config']['train']['max_seconds'] <= 530  # 570 s less the pack's 15 and the finish's 25


def test_the_plan_runs_the_session_step():
  """gpu_plan.sh session passes EXTRA_SET's --set options to launch.session (bash -n: the script parses)."""
  with open(os.path.join(REPO, 'launch', 'gpu_plan.sh'), encoding='utf-8') as f:
    text = f.read()
  assert 'python3 -m launch.session --out="$out" --root="$SWEEP_ROOT" "${sets[@]}"' in text
  assert subprocess.run(['bash', '-n', 'launch/gpu_plan.sh'], cwd=REPO, check=False).returncode == 0
  proc = subprocess.run([sys.executable, '-m', 'launch.session', '--help'], cwd=REPO, capture_output=True, text=True,
                        check=False)
  assert proc.returncode == 0 and '--seconds' in proc.stdout


@pytest.mark.parametrize('epochs,parts', [(1000.0, ['revisited']),
                                          (1.0, ['kernel', 'loop', 'kernel', 'research_train', 'loop'])])
def test_the_time_after_the_rows_goes_to_benchmarks(tmp_path, monkeypatch, epochs, parts):
  """After the rows, the rest of the call (each part cut at its most seconds or the time left) is issue
  28's figures: 'auto''s GPU test and dz in chunks of the vocabulary beside XLA in the training step, the
  research size's loop as it is and with every candidate (and the gradient matmul's forms), float32 at 300k
  in the training step, the research size's short trainings, then each research candidate in the loop; where no row fitted (too long
  at the measured rate), gpu_plan.sh's speed step, so the call still brings figures back. The rows leave
  FIGURES_RESERVE for them."""
  calls = []
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: {'sorted': 2000.0}.get(name))
  monkeypatch.setattr(session_lib, 'ROWS', (_row('row', epochs),))
  monkeypatch.setattr(session_lib, 'pack', lambda root, out: None)

  def run(args, **kwargs):
    env = kwargs.get('env', {})
    calls.append((args, env.get('DTYPES'), (env.get('ONLY'), env.get('GPU_TESTS'), env.get('TILES_RUNS'),
                                            env.get('KERNEL_VOCABS'), env.get('VOCAB_CHUNKS'),
                                            env.get('FLOAT32_KERNELS'), env.get('RESEARCH_BATCHES'),
                                            env.get('FLOAT32_TF32_KERNELS'))))
    return types.SimpleNamespace(returncode=0)
  monkeypatch.setattr(session_lib.subprocess, 'run', run)
  assert session_lib.main([f'--out={tmp_path}', f'--root={tmp_path / "root"}', '--seconds=400']) == 0
  figures = [c for c in calls if c[0][0] == 'timeout']
  assert [args[3] for args, _, _ in figures] == ['benchmarks/gpu_figures.sh'] * len(parts)
  assert [args[4] for args, _, _ in figures] == parts
  for args, _, only in figures:
    assert 60 <= int(args[1]) <= 385  # 400 s less the pack's 15 (and the row's)
  if epochs == 1.0:
    # the GPU tests of 'auto' and of dz in chunks of the vocabulary; those chunks beside XLA at 300k (8, 16; 8
    # with the layer's gradient in bfloat16), 17,905 (4) and 100k (16); the research size with every candidate;
    # float32 at 300k (its GPU test; TF32: XLA and the Mosaic form, that form with dz in chunks of the
    # vocabulary; IEEE: XLA and the loop form from dz); the research size's short trainings; each research candidate
    vocab_chunks = ('kernel_v300000_bfloat16,kernel_mosaic_vocab8_v300000_bfloat16,kernel_mosaic_vocab16_v300000_bfloat16,'
                    'kernel_mosaic_vocab8_gradient_bf16_v300000_bfloat16,'
                    'kernel_v17905_bfloat16,kernel_mosaic_vocab4_v17905_bfloat16,kernel_mosaic_vocab16_v100000_bfloat16')
    assert figures[0][1:] == ('bfloat16', (vocab_chunks, 'auto_takes_the_mosaic or vocab', '', '300000 17905 100000',
                                           '4 8 16', '', '', ''))
    candidates = ('research_bf16,research_bf16_carried_moments_gradient_bf16,gradient_matmul_research,'
                  'research_bf16_carried_moments_gradient_bf16_apart_padded')
    assert figures[1][1:] == ('bfloat16', (candidates, '', '', '', '', '', '256', ''))  # batch 256 alone
    float32 = ('kernel_v300000_float32_tf32,kernel_mosaic_vocab8_v300000_float32_tf32,kernel_v300000_float32,'
               'tiles_mosaic_v300000_float32_tf32')
    assert figures[2][1:] == ('float32', (float32, 'float32_gives_xlas_tf32', '', '300000', '', 'xla,pallas_loop_dz',
                                          '', 'xla,pallas_mosaic'))
    assert figures[3][1:] == ('bfloat16', ('research_train_default,research_train_candidates', '', '', '', '', '', '', ''))
    assert [int(f[0][1]) for f in figures[:4]] == [210, 240, 210, 150]  # each part's most seconds; the research the rest
    research = ('research_bf16,research_bf16_carried_rows,'
                'research_bf16_carried_layer,research_bf16_mu_bf16,research_bf16_moments_bf16,'
                'research_bf16_carried_moments_bf16,research_bf16_gradient_bf16,research_bf16_dlogits_apart,'
                'research_bf16_rows_padded,research_bf16_while_command_buffers,'
                'profile_research_bf16_loop_256,profile_research_bf16_loop_carried_moments_gradient_256,'
                'profile_research_bf16_loop_rows_256,profile_research_bf16_loop_whole_256,'
                'profile_research_bf16_loop_carried_moments_256')
    assert figures[4][1:] == ('bfloat16', (research, '', '', '', '', '', '', ''))  # both batches
    assert int(figures[4][0][1]) > 90  # all that is left (here the other parts took no time)
    row = next(c[0] for c in calls if c[0][0] != 'timeout')
    budget = int(next(a for a in row if a.startswith('--set=train.max_seconds=')).rpartition('=')[2])
    reserves = session_lib.FIGURES_RESERVE + session_lib.PACK_RESERVE + session_lib.FINISH_RESERVE
    assert 400 - reserves - 5 <= budget <= 400 - reserves  # the figures', the pack's, the finish's
  with open(tmp_path / 'session.json', encoding='utf-8') as f:
    written = json.load(f)
  assert written['form'] == 'sorted' and all(part in written['rest'] for part in parts)
  assert written['figures'] == (['vocab_chunks', 'research_candidates', 'float32', 'research_train', 'research']
                                if epochs == 1.0 else ['speed'])
  assert written['rows'][0]['status'].startswith('done' if epochs == 1.0 else 'skipped: about')


def test_a_row_skipped_before_the_figures_trains_with_what_they_leave(tmp_path, monkeypatch):
  """The figures often end before their reserve (126 s of the H100's first call, 2026-11-26): a row that
  did not fit before them is tried again after them, in the same call, and trains where it now fits."""
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: {'sorted': 2000.0}.get(name))
  monkeypatch.setattr(session_lib, 'FIGURES_RESERVE', 300.0)
  monkeypatch.setattr(session_lib, 'ROWS', (_row('long', 20.0),))  # about 180 s: past 400 - 300 - 15
  monkeypatch.setattr(session_lib, 'pack', lambda root, out: None)

  calls = record_runs(monkeypatch)
  assert session_lib.main([f'--out={tmp_path}', f'--root={tmp_path / "root"}', '--seconds=400']) == 0
  kinds = ['figures' if args[0] == 'timeout' else 'row' for args in calls]
  assert kinds == ['figures'] * len(session_lib.FIGURES) + ['row']
  with open(tmp_path / 'session.json', encoding='utf-8') as f:
    rows = json.load(f)['rows']
  assert [r['status'] for r in rows] == ['done']  # the skip before the figures replaced by the run


def test_the_call_leaves_no_more_files_than_come_back(tmp_path, monkeypatch):
  """The device tool brings back 8 files of OUT: the probes' and the rows' logs go into results.tgz (logs/),
  not beside it (on the H200 the logs made 12 files and the pack was left out)."""
  monkeypatch.setattr(session_lib, 'ROWS', tuple(_row(f'row{k}', 1.0) for k in range(8)))
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: (
      pathlib.Path(logs, f'probe_{name}.log').write_text('{}'), 1e5)[1])

  def run(args, **unused_kwargs):
    if args[0] != 'timeout':  # a row's sweep: its results where launch.sweep would put them
      root, point = next(a for a in args if a.startswith('--root=')), next(a for a in args if a.startswith('--only='))
      pathlib.Path(root[7:], point[7:]).mkdir(parents=True, exist_ok=True)
      pathlib.Path(root[7:], point[7:], 'results.json').write_text('{}')
    return types.SimpleNamespace(returncode=0)
  monkeypatch.setattr(session_lib.subprocess, 'run', run)
  out = tmp_path / 'out'
  assert session_lib.main([f'--out={out}', f'--root={tmp_path / "root"}', '--seconds=400']) == 0
  assert sorted(os.listdir(out)) == ['results.tgz', 'session.json']
  import tarfile  # pylint: disable=g-import-not-at-top
  with tarfile.open(out / 'results.tgz') as tar:
    names = tar.getnames()
  assert 'logs/probe_sorted_counts.log' in names and 'logs/brown_tune.log' in names and 'session.json' in names
  assert 'brown_tune/row7/results.json' in names


@pytest.mark.parametrize('device,probed', [
    ('NVIDIA H200', ['sorted_counts']),  # every form timed there twice: the fastest's rate alone
    ('NVIDIA H100 80GB HBM3', ['sorted_counts']),  # timed there too (2026-11-26): 8.7x the scatter
    ('NVIDIA A100-SXM4-80GB', ['scatter', 'sorted', 'sorted_counts']),  # never timed there: every form
    ('', ['scatter', 'sorted', 'sorted_counts']),  # no nvidia-smi
])
def test_the_forms_are_timed_in_full_only_where_they_were_not_measured(tmp_path, monkeypatch, device, probed):
  calls = []
  monkeypatch.setattr(session_lib, 'gpu_name', lambda: device)
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: (calls.append(name), 1e5)[1])
  monkeypatch.setattr(session_lib, 'ROWS', (_row('word', 1e6),))  # a word row, far too long to train
  monkeypatch.setattr(session_lib, 'spend_the_rest', lambda *a, **k: None)
  assert session_lib.main([f'--out={tmp_path / "out"}', f'--root={tmp_path / "root"}', '--seconds=100']) == 0
  assert calls == probed
  with open(tmp_path / 'out' / 'session.json', encoding='utf-8') as f:
    written = json.load(f)
  assert written['device'] == device and written['form'] in probed


def test_the_gpu_is_named_as_nvidia_smi_names_it_and_has_no_name_without_it(tmp_path, monkeypatch):
  smi = tmp_path / 'nvidia-smi'
  smi.write_text('#!/bin/sh\nprintf "NVIDIA H200\\nNVIDIA H200\\n"\n')
  smi.chmod(0o755)
  monkeypatch.setenv('PATH', str(tmp_path))
  assert session_lib.gpu_name() == 'NVIDIA H200'
  monkeypatch.setenv('PATH', '/nonexistent')
  assert session_lib.gpu_name() == ''


def test_a_row_with_its_own_probe_is_timed_as_it_trains_and_estimated_at_that_rate(tmp_path, monkeypatch):
  """A row whose rate is not the probed row's times a known ratio (Row.probe_vocab: the character row at
  four times the batch) has its own step timed once, at the first call's start, with its sweep point's
  config and overrides, its batch and the picked form; its estimate uses that rate (here fast enough to
  run where the probed row's rate would skip it), a later call times nothing again, and the picked form
  is never a row's rate."""
  row = session_lib._char_tune_row(  # pylint: disable=protected-access
      'char_tune5_dropout0.1_cosine16_batch2048_lr2e-3', 16.0, 1.41, 'a test', eval_every=1000,
      probe_vocab=session_lib.PTB_CHAR_VOCAB)
  timed = []

  def step_rate(config_args, vocab, batch, log):
    timed.append((config_args, vocab, batch, os.path.basename(log)))
    return 1e9
  monkeypatch.setattr(session_lib, '_step_rate', step_rate)
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: {'sorted_counts': 10.0}.get(name))
  monkeypatch.setattr(session_lib, 'ROWS', (row,))
  monkeypatch.setattr(session_lib, 'spend_the_rest', lambda *a, **k: None)
  calls = record_runs(monkeypatch)
  root = tmp_path / 'root'
  assert session_lib.main([f'--out={tmp_path / "out"}', f'--root={root}', '--seconds=400']) == 0
  assert [t[3] for t in timed[:2]] == ['probe_chars_sorted_counts.log', 'probe_chars_one_hot.log']  # no GPU named
  [(config_args, vocab, batch, log)] = timed[2:]
  assert config_args[0] == '--config=experiments/ptb.py:char_ladder5_dropout'
  assert '--config.train.batch_size=2048' in config_args and '--config.model.distant_gradient=counts' in config_args
  assert (vocab, batch) == (session_lib.PTB_CHAR_VOCAB, 2048) and log == f'probe_{row.root}_{row.point}.log'
  assert [next(a for a in args if a.startswith('--only=')) for args in calls] == [f'--only={row.point}']
  with open(tmp_path / 'out' / 'session.json', encoding='utf-8') as f:
    written = json.load(f)
  assert written['rates'][row.key] == 1e9 and 'sorted_counts' not in written['rates']  # no word row: no word probe
  assert session_lib.pick_form({'sorted': 5.0, row.key: 1e9}) == 'sorted'
  assert session_lib.row_rate(row, {'sorted': 5.0}, 'sorted') == 5.0 * row.relative_rate  # not timed: the ratio
  (root / row.root / row.point).mkdir(parents=True, exist_ok=True)
  assert session_lib.main([f'--out={tmp_path / "out"}', f'--root={root}', '--seconds=100']) == 0
  assert len(timed) == 3  # the later call goes on from the first's rates


def test_the_character_rows_train_with_the_form_their_own_step_ran_fastest_with(tmp_path, monkeypatch):
  """The character rows' step (CHAR_PROBE: |V| 50, batch 512) is timed with the picked form and with the
  one-hot form at the first call's start; the faster is theirs (here the one-hot, 1.5x), the word rows keep
  the picked form, and a character row's estimate is the character rows' step rate (times the row's share
  of CHAR_PROBE's)."""
  char_row = session_lib._ladder_row('chars', 'char_ladder2_depth4', 1.41)  # pylint: disable=protected-access
  word_row = _row('tune11_dropout0.5_weight_decay0.4_cosine6_ema0.999', 1.0)
  timed = []

  def step_rate(config_args, vocab, batch, log):
    timed.append((config_args, vocab, batch))
    return 3e5 if '--config.model.distant_gradient=one_hot' in config_args else 2e5
  monkeypatch.setattr(session_lib, '_step_rate', step_rate)
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: {'sorted_counts': 1e5}.get(name))
  monkeypatch.setattr(session_lib, 'ROWS', (char_row, word_row))
  monkeypatch.setattr(session_lib, 'spend_the_rest', lambda *a, **k: None)
  calls = record_runs(monkeypatch)
  assert session_lib.main([f'--out={tmp_path / "out"}', f'--root={tmp_path / "root"}', '--seconds=600']) == 0
  assert [(vocab, batch) for _, vocab, batch in timed] == [(session_lib.PTB_CHAR_VOCAB, 512)] * 2
  assert timed[0][0][0] == '--config=experiments/ptb.py:char_ladder5_dropout'
  with open(tmp_path / 'out' / 'session.json', encoding='utf-8') as f:
    written = json.load(f)
  assert (written['form'], written['char_form']) == ('sorted_counts', 'one_hot')
  assert written['rates']['chars:one_hot'] == 3e5 and written['rates']['chars:sorted_counts'] == 2e5
  [char_args, word_args] = calls
  assert '--set=model.distant_gradient=one_hot' in char_args and '--set=model.embedding_gradient=one_hot' in char_args
  assert '--set=model.distant_gradient=counts' in word_args
  rates = written['rates']
  assert session_lib.row_rate(char_row, rates, 'sorted_counts', 'one_hot') == 3e5
  assert session_lib.row_rate(word_row, rates, 'sorted_counts', 'one_hot') == 1e5
  assert session_lib.row_rate(char_row, rates, 'sorted_counts') == 1e5 * 1.41  # no character form: the picked one


def test_too_little_time_after_the_rows_is_left_alone(monkeypatch):
  calls = []
  monkeypatch.setattr(session_lib.subprocess, 'run', lambda args, **kw: calls.append(args))
  session = session_lib.Session()
  session_lib.spend_the_rest(session, '/tmp/unused', session_lib.MIN_FALLBACK_SECONDS - 1)
  assert not calls and not session.rest


def test_a_later_call_on_the_warm_machine_goes_on_from_the_first(tmp_path, monkeypatch):
  """ROOT/session.json and the rows' workdirs outlive a call on a warm machine: the next call measures
  nothing again, trains the rows no call has trained (not those with results), runs no figures the first
  started (here all of them) and leaves them no time, and counts the calls (SESSION_SECONDS gives its
  length)."""
  rows = tuple(_row(f'row{k}', 1.0) for k in range(3))
  monkeypatch.setattr(session_lib, 'ROWS', rows)
  root = tmp_path / 'root'
  (root / 'brown_tune' / 'row0').mkdir(parents=True)
  (root / 'brown_tune' / 'row0' / 'results.json').write_text('{}')
  earlier = [{'root': 'brown_tune', 'point': 'row0', 'status': 'done'},
             {'root': 'brown_tune', 'point': 'row1', 'status': 'skipped: about 90 s, 35 s left'},
             {'root': 'brown_tune', 'point': 'row2', 'status': 'failed (exit 1)'}]
  session_lib.Session(rates={'sorted': 1e5}, form='sorted', rows=earlier,
                      rest='120 s of benchmarks/gpu_figures.sh loop',
                      figures=[f.name for f in session_lib.FIGURES]).write(str(root))
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: pytest.fail('probed again'))
  calls = record_runs(monkeypatch)
  monkeypatch.setenv('SESSION_SECONDS', '150')
  assert session_lib.main([f'--out={tmp_path / "out"}', f'--root={root}']) == 0
  assert all(args[0] != 'timeout' for args in calls)  # no figures
  assert [next(a for a in args if a.startswith('--only=')) for args in calls] == ['--only=row1', '--only=row2']
  budget = int(next(a for a in calls[0] if a.startswith('--set=train.max_seconds=')).rpartition('=')[2])
  assert 105 <= budget <= 110  # 150 s less the pack's 15 and the finish's 25: no figures' reserve
  with open(tmp_path / 'out' / 'session.json', encoding='utf-8') as f:
    written = json.load(f)
  # the earlier skip of row1 gives way to its run; the earlier failure of row2 stays beside its rerun
  assert written['calls'] == 2 and [(r['point'], r['status']) for r in written['rows']] == [
      ('row0', 'done'), ('row2', 'failed (exit 1)'), ('row1', 'done'), ('row2', 'done')]


def test_a_character_rows_estimate_covers_what_the_h100_took():
  """char_tune0 (8 epochs) took 220 s on the H100 at a loop rate of 230,508 characters/s (results/
  ptb_char_tune_h100c_*.json): its estimate at that rate covers it with a margin below half a minute (at the
  word rows' SLOWDOWN it was 281 s, and the 81-character window fitted in no call)."""
  row = next(r for r in session_lib.ROWS if r.point == session_lib._CHAR_TUNE0)  # pylint: disable=protected-access
  assert 220 <= session_lib.estimate_seconds(row, 230_508) <= 250


def test_a_later_call_on_a_fresh_machine_goes_on_from_the_session_brought_back(tmp_path, monkeypatch):
  """The H200s of 2026-11-26 and -27 were given back before the second call: with SESSION_EARLIER (the
  first call's session.json, carried) a fresh machine probes nothing, trains no row the first call
  trained (its results came back with that call's pack), gives no reserve to figures already started, and
  after the rows runs the parts of the figures no call started; ROOT/session.json, on a warm machine,
  would win."""
  rows = tuple(_row(f'row{k}', 1.0) for k in range(3))
  monkeypatch.setattr(session_lib, 'ROWS', rows)
  monkeypatch.setattr(session_lib, 'pack', lambda root, out: None)
  earlier = tmp_path / 'carry'
  earlier.mkdir()
  session_lib.Session(rates={'sorted': 1e5}, form='sorted', rest='150 s of benchmarks/gpu_figures.sh kernel',
                      figures=['vocab_chunks'], started=time.time() - 700,
                      rows=[{'root': 'brown_tune', 'point': 'row0', 'status': 'done'},
                            {'root': 'brown_tune', 'point': 'row1', 'status': 'skipped: about 90 s, 35 s left'}]
                      ).write(str(earlier))
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: pytest.fail('probed again'))
  calls = record_runs(monkeypatch)
  monkeypatch.setenv('SESSION_EARLIER', str(earlier / 'session.json'))
  assert session_lib.main([f'--out={tmp_path / "out"}', f'--root={tmp_path / "root"}', '--seconds=400']) == 0
  kinds = [args[4] if args[0] == 'timeout' else next(a for a in args if a.startswith('--only=')) for args in calls]
  # the research size with every candidate, float32's kernel part, the short trainings, each research candidate
  assert kinds == ['--only=row1', '--only=row2', 'loop', 'kernel', 'research_train', 'loop']
  budget = int(next(a for a in calls[0] if a.startswith('--set=train.max_seconds=')).rpartition('=')[2])
  assert 355 <= budget <= 360  # 400 s less the pack's 15 and the finish's 25: the first part started already
  with open(tmp_path / 'out' / 'session.json', encoding='utf-8') as f:
    written = json.load(f)
  assert written['calls'] == 2 and written['figures'] == ['vocab_chunks', 'research_candidates', 'float32',
                                                          'research_train', 'research']
  assert written['rest'].startswith('150 s of benchmarks/gpu_figures.sh kernel; ')
  assert [(r['point'], r['status']) for r in written['rows']] == [('row0', 'done'), ('row1', 'done'), ('row2', 'done')]


@pytest.mark.parametrize('started,message', [(None, 'error: --earlier: no file '),
                                             (0.0, 'is from a call '),  # an older file, without the field
                                             (-4 * 3600, 'is from a call 4 h ago, not this session')])
def test_a_missing_or_stale_earlier_session_is_one_line_naming_the_fix(tmp_path, started, message):
  """A missing file, or one of a past session (whose rows and figures this session would skip), is refused
  in one line before anything runs."""
  if started is not None:
    session_lib.Session(started=time.time() + started if started else 0.0).write(str(tmp_path))
  with pytest.raises(SystemExit) as exit_:
    session_lib.main([f'--out={tmp_path / "out"}', f'--root={tmp_path / "root"}',
                      f'--earlier={tmp_path / ("session.json" if started is not None else "nope.json")}'])
  assert message in str(exit_.value) and "copy the last call's OUT/session.json" in str(exit_.value)
  assert '\n' not in str(exit_.value) and not (tmp_path / 'out').exists()


def test_every_benchmark_the_figures_name_is_one_the_figures_script_runs_with_their_settings():
  """Each name in FIGURES' ONLY lists is a benchmark that benchmarks/gpu_figures.sh runs with that part's
  settings (KERNEL_VOCABS, DTYPES, VOCAB_CHUNKS): a misspelt name, or one its loops do not reach, runs
  nothing in a GPU call."""
  import re  # pylint: disable=g-import-not-at-top
  with open(os.path.join(REPO, 'benchmarks', 'gpu_figures.sh'), encoding='utf-8') as f:
    script = f.read()
  templates = set(re.findall(r'^\s*(?:\[ [^]]*\] && )?(?:bench|profile|bench_script|train_short) (\S+)', script,
                             re.MULTILINE))
  for figures in session_lib.FIGURES:
    settings = figures.settings
    runs = {t.replace('${v}', v).replace('$dtype', dtype).replace('${chunks}', chunks)
            for t in templates for v in settings.get('KERNEL_VOCABS', '17905 100000 300000').split()
            for dtype in settings.get('DTYPES', 'bfloat16').split() for chunks in settings.get('VOCAB_CHUNKS', '4 8').split()}
    named = settings['ONLY'].split(',')
    assert set(named) <= runs, (figures.name, set(named) - runs)


def test_on_the_h200_a_session_of_character_rows_times_only_their_one_hot_step(tmp_path, monkeypatch):
  """On the H200 the one-hot forms were timed against sorted + counts three times (1.39x-1.44x): a session
  whose rows are all character rows times neither the word forms nor the baseline, only CHAR_PROBE's step
  with the one-hot forms (about 15 s, not about 60), and trains with them; where that fails, the
  baseline is timed after all."""
  monkeypatch.setattr(session_lib, 'gpu_name', lambda: 'NVIDIA H200')
  monkeypatch.setattr(session_lib, 'probe', lambda name, logs: pytest.fail('the word forms timed'))
  monkeypatch.setattr(session_lib, 'ROWS', (session_lib._ladder_row('chars', 'char_ladder4_tied', 1.41, 10.0),))  # pylint: disable=protected-access
  monkeypatch.setattr(session_lib, 'spend_the_rest', lambda *a, **k: None)
  for one_hot_runs, timed_forms, picked in ((True, ['one_hot'], 'one_hot'),
                                            (False, ['one_hot', 'sorted_counts'], 'sorted_counts')):
    timed = []

    def step_rate(config_args, vocab, batch, log, one_hot_runs=one_hot_runs, timed=timed):
      timed.append(os.path.basename(log)[len('probe_chars_'):-len('.log')])
      return None if 'one_hot' in log and not one_hot_runs else 3e5
    monkeypatch.setattr(session_lib, '_step_rate', step_rate)
    calls = record_runs(monkeypatch)
    out = tmp_path / picked
    assert session_lib.main([f'--out={out}', f'--root={out / "root"}', '--seconds=400']) == 0
    assert timed == timed_forms
    with open(out / 'session.json', encoding='utf-8') as f:
      written = json.load(f)
    assert written['char_form'] == picked
    assert f'--set=model.distant_gradient={"one_hot" if picked == "one_hot" else "counts"}' in calls[0]
    assert written['rows'][0]['estimate_s'] == round(session_lib.estimate_seconds(session_lib.ROWS[0], 3e5))
