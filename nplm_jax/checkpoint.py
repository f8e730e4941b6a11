"""Orbax checkpoints: the latest train state for resuming, and the best parameters by validation.

Restoring takes an abstract target that carries the shardings of the mesh in use, so a
checkpoint written under one mesh (or number of processes) loads under any other. Every process
of a multi-process job takes part in each save and restore; Orbax coordinates them.
"""

import jax
import orbax.checkpoint as ocp

from nplm_jax import workdir as workdir_lib


def _options(max_to_keep: int, name: str) -> ocp.CheckpointManagerOptions:
  # Orbax names the barriers of a save by its step: the two managers save the same step at the
  # same time, so in a multi-process job each needs barriers of its own.
  return ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=True,
      multiprocessing_options=ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=name))


class Checkpoints:
  def __init__(self, workdir: workdir_lib.Workdir, keep: int = 2):
    self.latest = ocp.CheckpointManager(workdir.file('checkpoints'), options=_options(keep, 'latest'))
    self.best = ocp.CheckpointManager(workdir.file('best'), options=_options(1, 'best'))

  def save_latest(self, step: int, state, meta: dict) -> None:
    self.latest.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                   meta=ocp.args.JsonSave(meta)), force=True)

  def restore_latest(self, abstract_state):
    """(state, meta) of the newest checkpoint, or None when there is none."""
    self.wait()  # saves still being committed in the background are part of what to restore
    step = self.latest.latest_step()
    if step is None:
      return None
    restored = self.latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
    return restored.state, restored.meta

  def save_best(self, step: int, params) -> None:
    self.best.save(step, args=ocp.args.StandardSave(params), force=True)

  def restore_best(self, abstract_params):
    self.wait()
    step = self.best.latest_step()
    if step is None:
      return None
    return self.best.restore(step, args=ocp.args.StandardRestore(abstract_params))

  def wait(self) -> None:
    self.latest.wait_until_finished()
    self.best.wait_until_finished()

  def close(self) -> None:
    self.latest.close()
    self.best.close()


def abstract_with_shardings(tree, shardings):
  """ShapeDtypeStructs that tell Orbax which devices each restored array goes to."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)
