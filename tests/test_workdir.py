"""The workdir on any filesystem: a training in gs://bucket/run (a fake bucket) writes every file
there, resumes from there and is read back, and nothing lands in a local folder named gs:."""

import json
import os
import subprocess
import sys

import pytest

from nplm_jax.training import evaluation
from nplm_jax.training import train
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import UserError
from tests import fake_gcs

pytestmark = pytest.mark.fast


def test_a_run_lives_entirely_in_a_bucket(tiny_config, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # a path mistaken for a local one would appear here as gs:/...
  bucket = tmp_path / 'bucket_root'
  tiny_config.train.update(max_steps=30, eval_every=15, log_every=10)
  with fake_gcs.fake_gcs(str(bucket)):
    first = train.train_and_evaluate(tiny_config, 'gs://runs/tiny')
    tiny_config.train.max_steps = 45
    resumed = train.train_and_evaluate(tiny_config, 'gs://runs/tiny')
    nll = evaluation.evaluate_workdir('gs://runs/tiny', splits=('valid',))
    saved = workdir_lib.Workdir('gs://runs/tiny').read_json('results.json')
  assert not (tmp_path / 'gs:').exists()
  local = bucket / 'runs' / 'tiny'
  assert {'config.json', 'results.json', 'metrics.jsonl', 'checkpoints', 'best', 'tensorboard'} <= set(
      os.listdir(local))
  assert [s for s in os.listdir(local / 'checkpoints') if s.isdigit()] and os.listdir(local / 'best')
  assert [f for f in os.listdir(local / 'tensorboard') if f.startswith('events.out.tfevents')]
  assert resumed['steps_trained'] == 45 and len(resumed['history']) == len(first['history']) + 1
  assert saved['valid_ppl'] == resumed['valid_ppl'] == pytest.approx(evaluation.perplexity(nll['valid']), rel=1e-6)
  steps = [json.loads(line)['step'] for line in (local / 'metrics.jsonl').read_text().splitlines()]
  assert steps == [10, 15, 20, 30, 30, 40, 45, 45]  # train records every 10 steps, evaluations every 15, once each


@pytest.mark.unit
def test_workdir_json_is_written_atomically_and_never_nan(tmp_path):
  workdir = workdir_lib.Workdir(tmp_path)
  workdir.write_json('a.json', {'x': 1.5})
  assert workdir.read_json('a.json') == {'x': 1.5} and workdir.read_json('missing.json') is None
  assert sorted(os.listdir(tmp_path)) == ['a.json']  # no temporary file left
  with pytest.raises(ValueError):
    workdir.write_json('a.json', {'x': float('nan')})
  assert workdir.read_json('a.json') == {'x': 1.5}
  (tmp_path / 'bad.json').write_text('{not json')
  with pytest.raises(UserError, match='bad.json'):
    workdir.read_json('bad.json')


@pytest.mark.unit
def test_local_workdirs_are_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert str(workdir_lib.as_path('runs/x')) == str(tmp_path / 'runs' / 'x')
  assert str(workdir_lib.as_path('gs://bucket/x')) == 'gs://bucket/x'


@pytest.mark.unit
def test_local_metrics_are_appended_not_rewritten(tmp_path):
  from nplm_jax.files import metrics  # pylint: disable=g-import-not-at-top
  workdir = workdir_lib.Workdir(tmp_path)
  (tmp_path / 'metrics.jsonl').write_text('{"step": 5, "a": 1}\n{"step": 9, "a": 2}\n')
  writer = metrics.MetricWriter(workdir, resumed_step=5)  # a run resumed from step 5: step 9 is dropped
  inode = os.stat(tmp_path / 'metrics.jsonl').st_ino
  writer.write(6, {'a': 3})
  writer.write(7, {'a': 4})
  writer.close()
  assert os.stat(tmp_path / 'metrics.jsonl').st_ino == inode  # the same file, appended to
  assert [r['step'] for r in metrics.read_jsonl(workdir.file('metrics.jsonl'))] == [5, 6, 7]


def test_tensorboard_events_that_cannot_be_flushed_are_one_line_or_give_way(tmp_path, monkeypatch):
  """A full disk at the last flush of TensorBoard's events: one line with the fix; when an error (the
  save that found the disk full) is already on its way out, that error comes first and this is silent."""
  from nplm_jax.files import metrics  # pylint: disable=g-import-not-at-top
  writer = metrics.MetricWriter(workdir_lib.Workdir(tmp_path))
  writer.write(1, {'a': 1.0})

  def full_disk():
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(writer._tb, 'close', full_disk)  # pylint: disable=protected-access
  writer.close(failing=True)
  with pytest.raises(UserError, match=r'tensorboard.* cannot be written \(No space left on device\); free space'):
    writer.close()


@pytest.mark.unit
def test_progress_rate_and_eta_count_training_time_only(monkeypatch):
  """An evaluation or save (paused), and the first dispatch's compilation (before warmed_up), change
  neither the rate nor the ETA: 10 steps/s throughout, 1,000 steps in all."""
  from nplm_jax.files import metrics  # pylint: disable=g-import-not-at-top
  clock = [0.0]
  monkeypatch.setattr(metrics.time, 'perf_counter', lambda: clock[0])
  progress = metrics.Progress(start_step=200, total_steps=1000, tokens_per_step=32)  # a resumed run
  clock[0] += 60.0  # restoring and compiling: 60 s for the first dispatch of 1 step
  progress.warmed_up(201)
  clock[0] += 9.9  # 99 steps at 10 steps/s
  first = progress.report(300)
  with progress.paused():
    clock[0] += 30.0  # an evaluation
  clock[0] += 10.0
  second = progress.report(400)
  assert first['steps_per_sec'] == pytest.approx(10) and second['steps_per_sec'] == pytest.approx(10)
  assert first['tokens_per_sec'] == pytest.approx(320)
  assert first['eta'] == '1m10s' and second['eta'] == '1m00s'  # 700 and 600 steps at 10 steps/s


@pytest.mark.unit
def test_damaged_metrics_lines_are_dropped_not_fatal(tmp_path):
  """A metrics.jsonl with bytes that are not UTF-8 (a damaged disk block) still reads: resume and
  plot keep every good record."""
  from nplm_jax.files import metrics  # pylint: disable=g-import-not-at-top
  from etils import epath  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'metrics.jsonl'
  path.write_bytes(b'{"step": 1, "train_loss": 2.0}\n\xff\xfe{"step": 2}\n{"step": 3, "valid_ppl": 40.0}\n{"step": 4')
  assert [r['step'] for r in metrics.read_jsonl(epath.Path(path))] == [1, 3]


@pytest.mark.unit
def test_a_failed_write_is_one_line_and_leaves_no_temporary_file(tmp_path):
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.errors import UserError  # pylint: disable=g-import-not-at-top
  blocker = tmp_path / 'a_file'
  blocker.write_text('x')
  with pytest.raises(UserError, match='cannot be written'):
    workdir_lib.write_text_atomically(workdir_lib.as_path(blocker / 'results.json'), '{}')
  full = workdir_lib.as_path(tmp_path / 'out.json')
  real_replace = type(full).replace
  try:  # a disk that fills up between the write and the rename: the temporary file is removed
    type(full).replace = lambda self, target: (_ for _ in ()).throw(OSError(28, 'No space left on device'))
    with pytest.raises(UserError, match='No space left on device'):
      workdir_lib.write_text_atomically(full, '{}')
  finally:
    type(full).replace = real_replace
  assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']


def test_the_metric_writer_does_not_import_torch_and_torch_still_imports_after(tmp_path):
  """tensorboardX imports PyTorch where it is installed (.ci/run installs it for the benchmarks), 2 s of every
  training command's start; the writer keeps it out, and a later `import torch` is the user's as before."""
  script = ('import importlib.util, sys\n'
            'from nplm_jax.files import metrics, workdir\n'
            f'writer = metrics.MetricWriter(workdir.Workdir({str(tmp_path)!r}))\n'
            'writer.write(1, {"loss": 2.0})\n'
            'writer.close()\n'
            'assert "torch" not in sys.modules, "torch imported"\n'
            'if importlib.util.find_spec("torch"):\n'
            '  import torch\n'
            '  assert torch.zeros(2).shape == (2,)\n')
  done = subprocess.run([sys.executable, '-c', script], cwd=os.path.dirname(os.path.dirname(__file__)),
                        env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr
  assert [f for f in os.listdir(tmp_path / 'tensorboard') if f.startswith('events.out.tfevents')]
