"""Orbax checkpoints: the latest train state for resuming, and the best parameters by validation.

Restoring takes an abstract target that carries the shardings of the mesh in use, so a
checkpoint written under one mesh loads under any other.
"""

import os

import jax
import orbax.checkpoint as ocp


class Checkpoints:
  def __init__(self, workdir: str, keep: int = 2):
    workdir = os.path.abspath(workdir)
    self.latest = ocp.CheckpointManager(
        os.path.join(workdir, 'checkpoints'),
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))
    self.best = ocp.CheckpointManager(
        os.path.join(workdir, 'best'), options=ocp.CheckpointManagerOptions(max_to_keep=1, create=True))

  def save_latest(self, step: int, state, meta: dict) -> None:
    self.latest.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                   meta=ocp.args.JsonSave(meta)), force=True)

  def restore_latest(self, abstract_state):
    """(state, meta) of the newest checkpoint, or None when there is none."""
    step = self.latest.latest_step()
    if step is None:
      return None
    restored = self.latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
    return restored.state, restored.meta

  def save_best(self, step: int, params) -> None:
    self.best.save(step, args=ocp.args.StandardSave(params), force=True)

  def restore_best(self, abstract_params):
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
