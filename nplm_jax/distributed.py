"""Multi-process start-up: JAX's own runtime (jax.distributed), when the environment asks for it."""

import os

import jax

from nplm_jax.errors import UserError

# Set by launchers for which jax.distributed.initialize() finds its settings by itself.
COORDINATOR_VARIABLES = ('JAX_COORDINATOR_ADDRESS', 'TPU_WORKER_HOSTNAMES', 'MEGASCALE_COORDINATOR_ADDRESS')
TASK_COUNT_VARIABLES = ('SLURM_NTASKS', 'OMPI_COMM_WORLD_SIZE')


def wanted(mode: str, environ=os.environ) -> bool:
  if mode == 'auto':
    many_tasks = any(int(environ.get(v, '1') or 1) > 1 for v in TASK_COUNT_VARIABLES)
    return many_tasks or any(v in environ for v in COORDINATOR_VARIABLES)
  if mode in ('yes', 'no'):
    return mode == 'yes'
  raise UserError(f"distributed.initialize={mode!r} is unknown; use 'auto', 'yes' or 'no'")


def maybe_initialize(config) -> None:
  """Joins the processes of a multi-host job before any device is touched."""
  if wanted(config.distributed.initialize):
    jax.distributed.initialize()
