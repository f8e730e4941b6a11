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
