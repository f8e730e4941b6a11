"""Training batches read ahead in background threads with grain.

Each global step's batch is a pure function of (seed, step) (data.StepBatches). grain's
MapDataset over those steps, sliced from the step a run resumes at, keeps that order exactly
while threads gather the next batches, so a resumed run reads what the uninterrupted one did.
"""

import grain

from nplm_jax.data import corpora as data_lib


def train_batches(source: data_lib.StepBatches, start_step: int, num_threads: int = 2, prefetch: int = 8):
  """An iterator over the batches of steps start_step, start_step + 1, ... in order."""
  dataset = grain.MapDataset.source(source)[start_step:]
  options = grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch)
  return iter(dataset.to_iter_dataset(read_options=options))
