"""Token ids resident on the devices: training and evaluation batches gathered inside the jitted steps.

Each split lives on every device as int32 ids preceded by the context_size tokens before it (the
boundary symbol before train): what data.TokenStream reads on the host, so the contexts and targets
gathered here are the host's, bit for bit. The training order is the epoch's permutation
(TokenStream.train_order), computed on the host as before and sent once an epoch; step s of an
epoch takes positions [i b, (i + 1) b) of it, as data.StepBatches does. The host then touches the
devices only at dispatch boundaries.

Memory, on every device: 4 bytes a token of every split, and 4 more a training token for the order
(Brown: 8.8 MB; 100M training tokens: 0.9 GB).
"""

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from nplm_jax import backend_defaults
from nplm_jax.data import corpora as data_lib
from nplm_jax.parallel import sharding



def resident_bytes(stream: data_lib.TokenStream) -> int:
  """Bytes a device holds for resident data: every split's ids with their context, and the order."""
  tokens = sum(stream.num_examples(s) + stream.context_size for s in data_lib.SPLITS)
  return 4 * (tokens + stream.num_examples('train'))


def wanted(train_config, stream: data_lib.TokenStream, platform: str) -> bool:
  """Whether a run keeps its data on the devices (train.device_data, 'auto' resolved)."""
  mode = train_config.device_data
  if mode != 'auto':
    return mode == 'on'
  if train_config.input_threads:
    return False
  limit = backend_defaults.backend_default('train.device_data', platform)  # MiB a device
  return resident_bytes(stream) <= limit * 2**20


def put_replicated(mesh: Mesh, array: np.ndarray) -> jax.Array:
  """A host array on every device of the mesh (each process supplies its own devices' copies)."""
  return jax.make_array_from_callback(array.shape, NamedSharding(mesh, P()), lambda index: array[index])


def windows(ids, positions, context_size: int):
  """Contexts [B, n-1] (most recent first) and targets [B] at split positions, from a split's ids
  with their context before them (data.TokenStream.examples, on the device)."""
  t = positions + context_size
  return data_lib.context_windows(ids, t, context_size), ids[t]


def step_batch(ids, order, index, *, batch_size: int, context_size: int, mesh: Mesh):
  """The batch of step `index` of an epoch whose permutation is `order`, split on 'data'."""
  positions = lax.dynamic_slice_in_dim(order, index * batch_size, batch_size)
  positions = lax.with_sharding_constraint(positions, sharding.batch_sharding(mesh, 1))
  return windows(ids, positions, context_size)


def eval_positions(num_tokens: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
  """(positions [G, B] int32, weights [G, B]): data.padded_positions stacked, one row a batch."""
  batches = list(data_lib.padded_positions(num_tokens, batch_size))
  return (np.stack([p for p, _ in batches]).astype(np.int32), np.stack([w for _, w in batches]))


class ResidentData:
  """A run's splits on the devices, and the training order of the epoch in progress."""

  def __init__(self, stream: data_lib.TokenStream, mesh: Mesh, seed: int):
    self.stream, self.mesh, self.seed = stream, mesh, seed
    self.ids = {s: put_replicated(mesh, stream.ids_with_context(s)) for s in data_lib.SPLITS}
    self._epoch, self._order = None, None

  def train_order(self, epoch: int) -> jax.Array:
    """The epoch's permutation of training positions on the devices (sent when the epoch changes)."""
    if epoch != self._epoch:
      self._order = put_replicated(self.mesh, self.stream.train_order(self.seed, epoch).astype(np.int32))
      self._epoch = epoch
    return self._order
