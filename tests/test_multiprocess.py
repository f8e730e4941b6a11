"""Several JAX processes on localhost (launch/local.sh), as a multi-host job runs: 2 processes x 2
host devices give the numbers of 1 process x 4, checkpoints move between the two, one process
writes, errors are reported once. Each failure shows every process's output."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from etils import epath

from nplm_jax.files import metrics
from nplm_jax.parallel import sharding
from tests import checkpoint_reader
from tests import corpora

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = 4  # in all, whatever the number of processes


@pytest.fixture(scope='module')
def files(tmp_path_factory):
  return corpora.write_markov_corpus(str(tmp_path_factory.mktemp('corpus')))


def job(processes: int, workdir, files, mesh, *extra, module=None, config='experiments/text.py:tiny'):
  """Runs a training (or `module`) as `processes` processes with DEVICES host devices in all."""
  args = [f'--config={config}', *extra]
  if module is None:
    args += [f'--workdir={workdir}', *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')),
             f'--config.mesh.cpu_devices={DEVICES // processes}', f'--config.mesh.data={mesh[0]}',
             f'--config.mesh.model={mesh[1]}', '--config.train.log_every=5']
  env = dict(os.environ, PYTHON=sys.executable, JAX_PLATFORMS='cpu', MODULE=module or 'nplm_jax.main')
  env['XLA_FLAGS'] = sharding.without_host_device_count(env)  # each process sets its own
  command = ([sys.executable, '-m', env['MODULE'], *args] if processes == 1 else
             ['bash', os.path.join('launch', 'local.sh'), str(processes), *args])
  proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  proc.output = f'--- exit {proc.returncode}, stdout:\n{proc.stdout}\n--- stderr:\n{proc.stderr}'
  return proc




def results(workdir):
  with open(os.path.join(workdir, 'results.json'), encoding='utf-8') as f:
    return json.load(f)


def losses(workdir):
  return [r['train_loss_mean'] for r in metrics.read_jsonl(epath.Path(workdir) / 'metrics.jsonl') if 'train_loss_mean' in r]


def assert_same_run(a, b, rtol=1e-5):
  np.testing.assert_allclose(losses(a), losses(b), rtol=rtol)
  ra, rb = results(a), results(b)
  for key in ('valid_ppl', 'test_ppl'):
    assert ra[key] == pytest.approx(rb[key], rel=rtol), key
  pa, pb = checkpoint_reader.latest_params(a), checkpoint_reader.latest_params(b)
  for k in pa:
    np.testing.assert_allclose(pa[k], pb[k], rtol=rtol, atol=1e-7, err_msg=k)


@pytest.mark.parametrize('mesh', [(1, 4), (2, 2), (4, 1)], ids=lambda m: f'mesh{m[0]}x{m[1]}')
def test_two_processes_give_the_numbers_of_one(files, tmp_path, mesh):
  steps = ('--config.train.max_steps=30', '--config.train.eval_every=15')
  two, one = job(2, tmp_path / 'two', files, mesh, *steps), job(1, tmp_path / 'one', files, mesh, *steps)
  assert two.returncode == 0, two.output
  assert one.returncode == 0, one.output
  assert len(losses(tmp_path / 'two')) == 6
  assert_same_run(tmp_path / 'two', tmp_path / 'one')
  # one writer: progress printed once, none of it by process 1 (gloo prints lines of its own)
  assert two.stdout.count('done: valid ppl') == 1, two.output
  assert not re.search(r'^\[process 1\] \d\d:\d\d:\d\d ', two.stdout, re.MULTILINE), two.output
  records = metrics.read_jsonl(epath.Path(tmp_path / 'two') / 'metrics.jsonl')
  assert len(records) == len({json.dumps(r, sort_keys=True) for r in records}), records  # each written once


def test_two_processes_gather_the_host_loops_batches_on_the_devices(files, tmp_path):
  """Data on the devices of 2 processes, 5 steps a dispatch: the host-fed run's numbers, bit for bit."""
  steps = ('--config.train.max_steps=30', '--config.train.eval_every=15')
  host = job(2, tmp_path / 'host', files, (2, 2), *steps, '--config.train.device_data=off')
  resident = job(2, tmp_path / 'resident', files, (2, 2), *steps, '--config.train.device_data=on',
                 '--config.train.steps_per_dispatch=5')
  assert host.returncode == 0, host.output
  assert resident.returncode == 0, resident.output
  assert losses(tmp_path / 'host') == losses(tmp_path / 'resident') and len(losses(tmp_path / 'host')) == 6
  assert results(tmp_path / 'host')['history'] == results(tmp_path / 'resident')['history']
  pa, pb = checkpoint_reader.latest_params(tmp_path / 'host'), checkpoint_reader.latest_params(tmp_path / 'resident')
  for k in pa:
    np.testing.assert_array_equal(pa[k], pb[k], err_msg=k)


MOVE_MESH, MOVE_PLAN = (2, 2), ('--config.train.eval_every=10',)


@pytest.fixture(scope='module')
def uninterrupted(files, tmp_path_factory):
  """The moves' reference, trained once for both: one process, 40 steps without a stop."""
  workdir = tmp_path_factory.mktemp('uninterrupted') / 'whole'
  whole = job(1, workdir, files, MOVE_MESH, '--config.train.max_steps=40', *MOVE_PLAN)
  assert whole.returncode == 0, whole.output
  return workdir


@pytest.mark.parametrize('first,then', [(2, 1), (1, 2)], ids=['2then1', '1then2'])
def test_a_checkpoint_moves_between_process_counts(files, uninterrupted, tmp_path, first, then):
  part = job(first, tmp_path / 'parts', files, MOVE_MESH, '--config.train.max_steps=20', *MOVE_PLAN)
  assert part.returncode == 0, part.output
  rest = job(then, tmp_path / 'parts', files, MOVE_MESH, '--config.train.max_steps=40', *MOVE_PLAN)
  assert rest.returncode == 0, rest.output
  assert 'resumed from step 20' in rest.stdout, rest.output
  assert_same_run(tmp_path / 'parts', uninterrupted)


def test_a_bad_setting_is_reported_once(files, tmp_path):
  (tmp_path / 'keep.txt').write_text('precious')
  proc = job(2, tmp_path, files, (2, 2), '--config.model.n=1')
  assert proc.returncode != 0
  errors = [line for line in (proc.stdout + proc.stderr).splitlines() if 'error:' in line]
  assert len(errors) == 1 and errors[0].startswith('error: model.n=1'), proc.output
  assert sorted(os.listdir(tmp_path)) == ['keep.txt']


@pytest.mark.parametrize('failing,expected', [('1', 'error: process 1: the corpus is unreadable here'),
                                              ('0,1', 'error: the corpus is unreadable here')])
def test_an_error_on_any_process_stops_all_and_is_reported_once(tmp_path, failing, expected):
  proc = job(2, tmp_path, None, None, f'--failing={failing}', module='tests.multiprocess_probe')
  assert proc.returncode == 1, proc.output
  errors = [line for line in (proc.stdout + proc.stderr).splitlines() if 'error:' in line]
  assert errors == [expected], proc.output
  assert 'started' not in proc.stdout, proc.output
