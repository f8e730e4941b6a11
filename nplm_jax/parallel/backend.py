"""Settings of JAX's backends that a run makes before any device is touched: host devices on CPU,
deterministic GPU reductions, and the persistent compilation cache."""

import os

import jax

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
