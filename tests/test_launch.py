"""The launch scripts' dry runs print the exact commands they would run (the SLURM and TPU ones
cannot run here; local.sh runs for real in tests/test_multiprocess.py; mps.sh's fallbacks here)."""

import os
import shlex
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ['--config=experiments/brown.py:mlp1', '--workdir=gs://bucket/runs/a b']


def dry_run(script, *args, **env):
  proc = subprocess.run(['bash', os.path.join('launch', script), *args], cwd=REPO, capture_output=True, text=True,
                        env=dict(os.environ, DRY_RUN='1', **env), timeout=60)
  assert proc.returncode == 0, proc.stderr
  return [shlex.split(line) for line in proc.stdout.strip().splitlines()]


def test_local_starts_one_process_per_index_on_one_coordinator():
  commands = dry_run('local.sh', '3', *ARGS, PORT='12355', PYTHON='py')
  assert len(commands) == 3
  for i, command in enumerate(commands):
    assert command == ['py', '-m', 'nplm_jax.main', *ARGS, '--config.distributed.initialize=yes',
                       '--config.distributed.coordinator_address=localhost:12355',
                       '--config.distributed.num_processes=3', f'--config.distributed.process_id={i}']


def test_slurm_runs_one_task_per_host_through_srun():
  assert dry_run('slurm.sbatch', *ARGS) == [
      ['srun', '--kill-on-bad-exit=1', 'python3', '-m', 'nplm_jax.main', *ARGS, '--config.distributed.initialize=yes']]
  with open(os.path.join(REPO, 'launch', 'slurm.sbatch'), encoding='utf-8') as f:
    assert '#SBATCH --ntasks-per-node=1' in f.read()


def test_tpu_vm_runs_the_training_on_every_worker():
  commands = dry_run('tpu_vm.sh', 'my-tpu', 'us-central2-b', *ARGS)
  assert len(commands) == 1
  assert commands[0][:6] == ['gcloud', 'compute', 'tpus', 'tpu-vm', 'ssh', 'my-tpu']
  assert '--zone=us-central2-b' in commands[0] and '--worker=all' in commands[0]
  remote = commands[0][-1].removeprefix('--command=')
  assert shlex.split(remote) == ['cd', 'nplm_jax', '&&', 'python3', '-m', 'nplm_jax.main', *ARGS,
                                 '--config.distributed.initialize=yes']


def test_tpu_vm_setup_ships_the_committed_files_and_installs_the_tpu_build():
  commands = dry_run('tpu_vm.sh', 'my-tpu', 'us-central2-b', *ARGS, SETUP='1')
  assert [c[0] for c in commands] == ['git', 'gcloud', 'gcloud', 'gcloud']
  assert commands[0][3:5] == ['archive', '--format=tar.gz']
  with open(os.path.join(REPO, 'requirements.txt'), encoding='utf-8') as f:
    jax_version = next(line.split('==')[1].strip() for line in f if line.startswith('jax=='))
  assert f"'jax[tpu]=={jax_version}'" in commands[2][-1]


@pytest.mark.parametrize('script,args', [('local.sh', ['x']), ('local.sh', []), ('tpu_vm.sh', ['only-a-name'])])
def test_bad_usage_is_one_line(script, args):
  proc = subprocess.run(['bash', os.path.join('launch', script), *args], cwd=REPO, capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode == 2 and proc.stderr.startswith('error: usage:') and proc.stderr.count('\n') == 1


def _start_mps(tmp_path, path):
  """Sources launch/mps.sh and calls start_mps, then stop_mps, with PATH as given and the CPU as JAX's backend."""
  script = f'source {os.path.join(REPO, "launch", "mps.sh")}; start_mps; echo "rc=$?"; stop_mps'
  env = dict(os.environ, PATH=path, PYTHON=sys.executable, JAX_PLATFORMS='cpu',
             CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / 'pipe'), CUDA_MPS_LOG_DIRECTORY=str(tmp_path / 'log'))
  return subprocess.run(['bash', '-c', script], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                        timeout=120)


def test_mps_is_left_off_in_one_line_where_the_machine_has_no_daemon(tmp_path):
  proc = _start_mps(tmp_path, os.path.dirname(shutil.which('bash')))
  assert proc.stdout.splitlines() == [
      'MPS: nvidia-cuda-mps-control is not on this machine; the processes share the GPU in time slices', 'rc=1']


def test_mps_is_stopped_again_when_jax_does_not_reach_the_gpu_through_it(tmp_path):
  """A daemon that starts but through which JAX finds no GPU (here: JAX on the CPU) is stopped, and the
  caller goes on without it: the sweeps never run on a CPU fallback unnoticed."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  control = bin_dir / 'nvidia-cuda-mps-control'  # records its arguments and what it reads
  control.write_text(f'#!/bin/bash\necho "args=$* input=$([ -t 0 ] || cat)" >>{tmp_path / "calls"}\n')
  control.chmod(0o755)
  proc = _start_mps(tmp_path, f'{bin_dir}:{os.environ["PATH"]}')
  assert proc.stdout.splitlines()[-1] == 'rc=1', proc.stdout + proc.stderr
  assert "did not run on the GPU (got 'cpu'" in proc.stdout
  assert (tmp_path / 'calls').read_text().splitlines() == ['args= input=quit', 'args=-d input=', 'args= input=quit']


def test_the_mps_script_parses():
  script = 'mps.sh'
  proc = subprocess.run(['bash', '-n', os.path.join(REPO, 'launch', script)], capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode == 0, proc.stderr
