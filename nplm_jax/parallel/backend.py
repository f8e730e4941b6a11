"""Settings of JAX's backends that a run makes before any device is touched: host devices on CPU,
deterministic GPU reductions, and the persistent compilation cache."""

import contextlib
import os
import warnings

import jax

from nplm_jax import config as config_lib
from nplm_jax.parallel import sharding

DETERMINISTIC_GPU_FLAG = '--xla_gpu_deterministic_ops=true'


def configure(config, environ=os.environ) -> None:
  """Applies config.mesh.cpu_devices, config.train.deterministic and config.train.compilation_cache_dir.

  XLA reads its flags when the backends start, so this runs first (main and the benchmarks call it
  before anything else touches JAX's devices). With deterministic GPU ops the same run gives the
  same bits on a GPU, so a resumed run ends bit-equal to an uninterrupted one there as on a CPU
  (docs/accelerators.md, "Defaults by backend": its cost); XLA's CPU and TPU backends are deterministic already.
  """
  sharding.configure_host_devices(config, environ)
  flags = environ.get('XLA_FLAGS', '')
  if config.train.deterministic and 'xla_gpu_deterministic_ops' not in flags:
    environ['XLA_FLAGS'] = f'{flags} {DETERMINISTIC_GPU_FLAG}'.strip()
  cache = config.train.compilation_cache_dir
  if cache:
    jax.config.update('jax_compilation_cache_dir', cache)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)


def backends_started() -> bool:
  """Whether JAX has started its backends in this process (after which XLA_FLAGS is read no more)."""
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top  # no public way to ask
  return xla_bridge.backends_are_initialized()


@contextlib.contextmanager
def configured(config, environ=os.environ, warn: bool = True):
  """configure(config) for the backends started inside the block, then environ's XLA_FLAGS as it was: what a
  library call (nplm_jax.load, nplm_jax.train) must not leave behind for the caller's later subprocesses. Where
  JAX started earlier in the process with another count of host devices than the config asks for, says so
  (warn=False: the caller says what the count it has means)."""
  before = environ.get('XLA_FLAGS')
  if warn and backends_started():
    _warn_of_a_fixed_device_count(config)
  configure(config, environ)
  try:
    yield
  finally:
    if before is None:
      environ.pop('XLA_FLAGS', None)
    else:
      environ['XLA_FLAGS'] = before


def _warn_of_a_fixed_device_count(config) -> None:
  if jax.default_backend() != 'cpu':
    return
  wanted = sharding.host_device_count(config_lib.requested_cpu_devices(config), sharding.usable_cores())
  have = jax.local_device_count()
  if wanted != have:
    warnings.warn(f'JAX started in this process with {have} CPU device(s) and cannot change that; this config asks '
                  f'for {wanted} (mesh.cpu_devices): it runs on {have}. Restart the Python process (the kernel) to '
                  'get the config\'s count', UserWarning, stacklevel=4)
