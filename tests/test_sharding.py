"""Mesh shapes, partition specs and the multi-host switch (single process; 8-device checks live in
tests/parallel_checks.py)."""

import pytest
from jax.sharding import PartitionSpec as P
import jax

from nplm_jax.training import in_flight as in_flight_lib
from nplm_jax.parallel import sharding
from nplm_jax.config import base_config
from nplm_jax.errors import UserError

pytestmark = pytest.mark.fast


@pytest.mark.parametrize('data,model,devices,expected', [
    (-1, 1, 8, (8, 1)), (1, -1, 8, (1, 8)), (2, 4, 8, (2, 4)), (-1, 2, 8, (4, 2)), (-1, 1, 1, (1, 1))])
def test_mesh_shape_fills_minus_one(data, model, devices, expected):
  assert sharding.mesh_shape(data, model, devices) == expected


def test_auto_mesh_splits_the_vocabulary_on_cpu_and_the_batch_on_accelerators():
  assert sharding.mesh_shape(-1, -1, 2, 'cpu') == (1, 2)
  assert sharding.mesh_shape(-1, -1, 8, 'gpu') == (8, 1)
  assert sharding.mesh_shape(-1, -1, 4, 'tpu') == (4, 1)


@pytest.mark.parametrize('requested,cores,expected', [(-1, 2, 2), (-1, 1, 1), (-1, 6, 4), (-1, 64, 8), (3, 2, 3), (0, 8, 0)])
def test_host_device_count(requested, cores, expected):
  assert sharding.host_device_count(requested, cores) == expected


def test_configure_host_devices_keeps_an_explicit_count():
  config = base_config()
  environ = {'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}
  sharding.configure_host_devices(config, environ)
  assert environ['XLA_FLAGS'] == '--xla_force_host_platform_device_count=8'
  environ = {}
  config.mesh.cpu_devices = 2
  sharding.configure_host_devices(config, environ)
  assert environ['XLA_FLAGS'] == '--xla_force_host_platform_device_count=2'


def test_the_default_host_devices_follow_the_model_family(monkeypatch):
  """mesh.cpu_devices=0: one per core for the 2003 model, one device for the revisited family (measured,
  backend_defaults.TABLE); -1, what runs recorded before the family's default kept, stays one per core."""
  monkeypatch.setattr(sharding, 'usable_cores', lambda: 4)
  config = base_config()
  assert config.mesh.cpu_devices == 0
  for kind, cpu_devices, flags in (('bengio2003', 0, '--xla_force_host_platform_device_count=4'), ('revisited', 0, None),
                                   ('revisited', -1, '--xla_force_host_platform_device_count=4')):
    config.model.kind, config.mesh.cpu_devices, environ = kind, cpu_devices, {}
    sharding.configure_host_devices(config, environ)
    assert environ.get('XLA_FLAGS') == flags, (kind, cpu_devices)


def test_a_child_process_gets_every_flag_but_the_host_device_count():
  flags = '--xla_backend_optimization_level=0 --xla_force_host_platform_device_count=8 --xla_dump_to=/tmp/x'
  assert sharding.without_host_device_count({'XLA_FLAGS': flags}) == '--xla_backend_optimization_level=0 --xla_dump_to=/tmp/x'
  assert sharding.without_host_device_count({}) == ''


def test_backend_settings_are_made_before_the_backends_start(tmp_path):
  from nplm_jax.parallel import backend  # pylint: disable=g-import-not-at-top
  config, environ = base_config(), {}
  config.mesh.cpu_devices = 2
  backend.configure(config, environ)
  assert environ['XLA_FLAGS'] == f'--xla_force_host_platform_device_count=2 {backend.DETERMINISTIC_GPU_FLAG}'
  config.train.deterministic, environ = False, {}
  backend.configure(config, environ)
  assert 'deterministic' not in environ['XLA_FLAGS']
  import jax  # pylint: disable=g-import-not-at-top
  config.train.compilation_cache_dir = str(tmp_path / 'cache')
  previous = jax.config.jax_compilation_cache_dir
  try:
    backend.configure(config, {})
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / 'cache')
  finally:
    jax.config.update('jax_compilation_cache_dir', previous)


@pytest.mark.parametrize('data,model,devices', [(3, 2, 8), (-1, 3, 8), (0, 1, 1), (2, 2, 8)])
def test_bad_mesh_shape_is_a_one_line_error(data, model, devices):
  with pytest.raises(UserError) as e:
    sharding.mesh_shape(data, model, devices)
  assert '\n' not in str(e.value) and 'mesh' in str(e.value)


def test_optimizer_state_follows_the_parameter_it_mirrors():
  """The optimiser state initialised from boxed parameters carries their logical axes (flax's way):
  each moment is placed as its parameter, counts replicated; no path matching."""
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from nplm_jax.models import bengio2003 as model_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.models import output_layer  # pylint: disable=g-import-not-at-top
  mesh = sharding.make_mesh(base_config().mesh)
  model = model_lib.NPLM(vocab_size=40, window=2, embed_dim=4, hidden_dim=6, direct=True, vocab_pad_multiple=8)

  def state():
    boxed = output_layer.boxed_params(model)
    return {'params': boxed, 'opt_state': optax.adam(1e-3).init(boxed), 'step': jax.numpy.zeros(())}
  placed = sharding.named_shardings(mesh, nn.get_partition_spec(jax.eval_shape(state)),
                                    {'vocab': 'model', 'hidden': 'model'})
  assert placed['params']['output'].spec == placed['opt_state'][0].mu['output'].spec == P(None, 'model')
  assert placed['opt_state'][0].nu['H'].spec == P(None, 'model') and placed['opt_state'][0].nu['d'].spec == P('model')
  assert placed['params']['C'].spec == P(None, None)
  assert placed['step'].spec == placed['opt_state'][0].count.spec == P()


def test_in_flight_limit_keeps_at_most_depth_results_pending():

  class Result:
    ready = 0

    def block_until_ready(self):
      Result.ready += 1
      return self

  in_flight = in_flight_lib.InFlightLimit(depth=2)
  results = [in_flight.push(Result()) for _ in range(5)]
  assert len(results) == 5 and Result.ready == 3  # every push beyond the second waited for the oldest
  in_flight.drain()
  assert Result.ready == 5


def test_cores_are_counted_where_sched_getaffinity_is_missing(monkeypatch):
  import os  # pylint: disable=g-import-not-at-top
  monkeypatch.delattr(os, 'sched_getaffinity', raising=False)  # as on macOS
  monkeypatch.setattr(os, 'cpu_count', lambda: 6)
  assert sharding.usable_cores() == 6
  environ = {}
  sharding.configure_host_devices(base_config(), environ)
  assert environ['XLA_FLAGS'] == '--xla_force_host_platform_device_count=4'
