"""Multi-process settings in one process: when to join, the arguments, the declared process id.

Runs of several real processes are in tests/test_multiprocess.py.
"""

import pytest

from nplm_jax.parallel import distributed
from nplm_jax.config import base_config
from nplm_jax.errors import UserError

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def dist(**kw):
  config = base_config().distributed
  config.update(kw)
  return config


@pytest.mark.parametrize('kw,environ,expected', [
    ({}, {}, False), ({}, {'SLURM_NTASKS': '1'}, False), ({}, {'SLURM_NTASKS': '4'}, True),
    ({}, {'JAX_COORDINATOR_ADDRESS': 'host:1234'}, True), ({}, {'TPU_WORKER_HOSTNAMES': 'a,b'}, True),
    ({'coordinator_address': 'localhost:1234'}, {}, True),
    ({'initialize': 'yes'}, {}, True), ({'initialize': 'no'}, {'SLURM_NTASKS': '4'}, False)])
def test_distributed_initialize_only_when_asked(kw, environ, expected):
  assert distributed.wanted(dist(**kw), environ) is expected


def test_distributed_bad_mode():
  with pytest.raises(UserError, match="distributed.initialize='maybe'"):
    distributed.wanted(dist(initialize='maybe'), {})


def test_initialize_arguments_explicit_or_detected():
  assert distributed.initialize_arguments(dist()) == {}  # jax.distributed detects them
  assert distributed.initialize_arguments(dist(coordinator_address='localhost:12355', num_processes=2,
                                               process_id=1)) == dict(
      coordinator_address='localhost:12355', num_processes=2, process_id=1)


@pytest.mark.parametrize('kw,match', [
    (dict(num_processes=0), 'num_processes=0'), (dict(num_processes=2, process_id=2), 'process_id=2'),
    (dict(coordinator_address='localhost'), 'needs a port'),
    (dict(coordinator_address='localhost:1234'), 'give all three')])
def test_bad_distributed_settings_are_one_line(kw, match):
  with pytest.raises(UserError, match=match) as e:
    distributed.initialize_arguments(dist(**kw))
  assert '\n' not in str(e.value)


def test_declared_process_id_before_joining():
  config = base_config()
  assert distributed.declared_process_id(config, {}) == 0
  assert distributed.declared_process_id(config, {'SLURM_PROCID': '3'}) == 3
  config.distributed.process_id = 1
  assert distributed.declared_process_id(config, {'SLURM_PROCID': '3'}) == 1


def test_agree_on_errors_alone_raises_the_error_itself():
  def fail():
    raise UserError('bad')
  with pytest.raises(UserError, match='bad'):
    distributed.agree_on_errors(fail)
  assert distributed.agree_on_errors(lambda: 7) == 7


def test_a_library_call_joins_only_when_asked():
  """detect=False (nplm_jax.train without join=True): 'auto' never joins, whatever the launcher says; 'yes' does."""
  environ = {'SLURM_NTASKS': '4'}
  assert distributed.wanted(dist(), environ) and not distributed.wanted(dist(), environ, detect=False)
  assert distributed.wanted(dist(initialize='yes'), {}, detect=False)


def free_port() -> int:
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def meet(address: str, count: int, indices, timeout: float) -> dict:
  """rendezvous of the processes `indices` of `count`, each in a thread: index -> None or the error's text."""
  import threading  # pylint: disable=g-import-not-at-top
  outcome = {}

  def one(index):
    try:
      distributed.rendezvous(address, count, index, timeout, 'not every process arrived')
      outcome[index] = None
    except UserError as e:
      outcome[index] = str(e)
  threads = [threading.Thread(target=one, args=(i,)) for i in indices]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join(timeout + 10)
  return outcome


def test_processes_meet_before_jax_joins_them_and_a_missing_one_is_an_exception():
  """Every process there: each rendezvous returns, and the port is free again for JAX's coordinator. One of three
  missing: process 0 raises naming it, the one that came raises too, both within the timeout (no process exits)."""
  import socket  # pylint: disable=g-import-not-at-top
  port = free_port()
  assert meet(f'localhost:{port}', 3, (0, 1, 2), timeout=20) == {0: None, 1: None, 2: None}
  with socket.create_server(('', port)):  # what JAX's coordinator does next
    pass
  outcome = meet(f'localhost:{free_port()}', 3, (0, 1), timeout=2)
  assert 'missing: process 2' in outcome[0] and 'not every process arrived' in outcome[1], outcome
  alone = meet(f'localhost:{free_port()}', 2, (1,), timeout=1)
  assert alone[1].startswith('no coordinator answered'), alone


SLURM_JOIN = '''
import sys
from nplm_jax import config as config_lib
from nplm_jax.errors import UserError
from nplm_jax.parallel import distributed
config = config_lib.base_config()
config.distributed.timeout_seconds = 2
try:
  distributed.maybe_initialize(config)
except UserError as e:
  print(e)
'''


def test_a_join_the_launcher_describes_is_an_exception_when_a_process_never_comes(tmp_path):
  """Process 0 of 2 as SLURM describes it (no address in the config): the processes meet first at the address
  JAX would detect, so the missing one is a JoinError in Python, not JAX's abort (in a fresh process, since
  an abort would end it)."""
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, JAX_PLATFORMS='cpu', SLURM_JOB_ID='4242', SLURM_STEP_NODELIST='localhost', SLURM_NTASKS='2',
             SLURM_PROCID='0', SLURM_LOCALID='0', JAX_COORDINATOR_PORT=str(free_port()))
  proc = subprocess.run([sys.executable, '-c', SLURM_JOIN], cwd=tmp_path, env=env, capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'not every process arrived' in proc.stdout and 'missing: process 1' in proc.stdout, proc.stdout + proc.stderr
