"""Training batches read ahead in background threads with grain.

Each global step's batch is a pure function of (seed, step): step s of epoch e takes positions
[i b, (i + 1) b) of the epoch's permutation (data.TokenStream.train_order(seed, e)), of which this
process reads only the rows its devices hold. grain's MapDataset over those steps, sliced from
the step a run resumes at, keeps that order exactly while threads gather the next batches, so a
resumed run reads what the uninterrupted one did.
"""

import threading

import grain
import numpy as np

from nplm_jax import data as data_lib


class StepBatches:
  """A random-access source: item `step` is (contexts, targets) of this process's rows of that step."""

  def __init__(self, stream: data_lib.TokenStream, seed: int, batch_size: int, steps_per_epoch: int,
               total_steps: int, rows: np.ndarray):
    self.stream, self.seed, self.batch_size = stream, seed, batch_size
    self.steps_per_epoch, self.total_steps, self.rows = steps_per_epoch, total_steps, rows
    self._orders, self._lock = {}, threading.Lock()

  def __len__(self) -> int:
    return self.total_steps

  def _order(self, epoch: int) -> np.ndarray:
    with self._lock:  # one permutation per epoch, made once, whichever thread asks first
      if epoch not in self._orders:
        self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}  # keep at most two
        self._orders[epoch] = self.stream.train_order(self.seed, epoch)
      return self._orders[epoch]

  def __getitem__(self, step: int):
    epoch, index = divmod(int(step), self.steps_per_epoch)
    b = self.batch_size
    return self.stream.examples('train', self._order(epoch)[index * b:(index + 1) * b][self.rows])


def train_batches(source: StepBatches, start_step: int, num_threads: int = 2, prefetch: int = 8):
  """An iterator over the batches of steps start_step, start_step + 1, ... in order."""
  dataset = grain.MapDataset.source(source)[start_step:]
  options = grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch)
  return iter(dataset.to_iter_dataset(read_options=options))
