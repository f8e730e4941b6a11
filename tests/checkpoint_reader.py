"""The newest checkpoint's parameters of a workdir, read onto this test process's one device
(whatever mesh or number of processes saved them)."""

import os

import jax
import numpy as np
import orbax.checkpoint as ocp


def latest_params(workdir, item: str = 'params') -> dict:
  """The newest checkpoint's `item` of the train state: 'params', or 'average' (optimizer.ema_decay)."""
  manager = ocp.CheckpointManager(os.path.join(workdir, 'checkpoints'), item_handlers={
      'state': ocp.StandardCheckpointHandler(), 'meta': ocp.JsonCheckpointHandler()})
  try:
    step = manager.latest_step()
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                          manager.item_metadata(step)['state'])
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))
  finally:
    manager.close()
  return jax.tree.map(np.asarray, restored.state[item])
