"""Every file of a finished run's best/ step and of its latest checkpoint, deleted, emptied, truncated and
garbled, one at a time: the command that reads it (nplm-score and nplm-mix for best/, the training resumed
for the latest step) either works or refuses in one 'error:' line, with no traceback, no 'Exception
ignored' and no library warning before or after it."""

import os
import random
import shutil
import subprocess
import sys

import pytest

from tests import corpora
from tests import warm_python

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAMAGES = ('deleted', 'emptied', 'truncated', 'garbled')
NOISE = ('Traceback', 'Exception ignored', 'WARNING', 'was never awaited')


@pytest.fixture(scope='module')
def finished(tmp_path_factory):
  base = tmp_path_factory.mktemp('damaged')
  files = corpora.write_markov_corpus(str(base))
  data = [f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')]
  train = ['nplm_jax.main', '--config=experiments/text.py:tiny', *data, '--config.train.max_steps=20',
           '--config.train.eval_every=20']
  done = subprocess.run([sys.executable, '-m', *train, f'--workdir={base / "run"}'], cwd=REPO,
                        env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr
  return dict(base=base, run=base / 'run', files=files, train=train)


def step_files(run, folder: str) -> list[str]:
  root = os.path.join(run, folder)
  return sorted(os.path.relpath(os.path.join(d, f), run) for d, _, names in os.walk(root) for f in names)


def damage(path, how: str) -> None:
  data = open(path, 'rb').read()
  if how == 'deleted':
    os.remove(path)
  elif how == 'emptied':
    open(path, 'wb').close()
  elif how == 'truncated':
    open(path, 'wb').write(data[:len(data) // 2])
  else:  # garbled: eight bytes inverted
    garbled, rng = bytearray(data), random.Random(0)
    for _ in range(min(8, len(garbled))):
      garbled[rng.randrange(len(garbled))] ^= 0xFF
    open(path, 'wb').write(bytes(garbled))


def noise_or_lines(proc, what: str) -> str | None:
  """What is wrong with a command's output (None: it worked, or refused in one 'error:' line, 'warning:'
  lines aside)."""
  said = proc.stderr + proc.stdout
  if any(noise in said for noise in NOISE):
    return f'{what}:\n{proc.stderr}'
  errors = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith('warning:')]
  if proc.returncode and not (len(errors) == 1 and errors[0].startswith('error: ')):
    return f'{what}: exit {proc.returncode}\n{proc.stderr}'
  return None


def damaged_copy(finished, tmp_path, relative: str, how: str):
  workdir = tmp_path / f'{how}_{relative.replace(os.sep, "_")}'
  shutil.copytree(finished['run'], workdir)
  damage(workdir / relative, how)
  return workdir


def test_the_run_has_the_files_this_module_damages(finished):
  assert len(step_files(finished['run'], 'best')) >= 8 and len(step_files(finished['run'], 'checkpoints')) >= 8


@pytest.mark.parametrize('how', DAMAGES)
def test_every_file_of_best_damaged_is_one_line_or_nothing(finished, tmp_path, how):
  env, wrong = dict(os.environ, JAX_PLATFORMS='cpu'), []
  for relative in step_files(finished['run'], 'best'):
    workdir = damaged_copy(finished, tmp_path, relative, how)
    for command in (['nplm_jax.tools.score', f'--workdir={workdir}', f'--text={finished["files"]["test"]}'],
                    ['nplm_jax.tools.mix', f'--workdir={workdir}']):
      wrong.append(noise_or_lines(warm_python.shared().run(command, env=env), f'{command[0]}, {relative} {how}'))
    shutil.rmtree(workdir)
  assert not any(wrong), '\n'.join(w for w in wrong if w)


@pytest.mark.parametrize('how', DAMAGES)
def test_every_file_of_the_latest_step_damaged_is_one_line_or_resumed(finished, tmp_path, how):
  env, wrong = dict(os.environ, JAX_PLATFORMS='cpu'), []
  for relative in step_files(finished['run'], 'checkpoints'):
    workdir = damaged_copy(finished, tmp_path, relative, how)
    resumed = warm_python.shared().run([*finished['train'][:-2], '--config.train.max_steps=30',
                                        '--config.train.eval_every=10', f'--workdir={workdir}'], env=env)
    wrong.append(noise_or_lines(resumed, f'resumed, {relative} {how}'))
    shutil.rmtree(workdir)
  assert not any(wrong), '\n'.join(w for w in wrong if w)
