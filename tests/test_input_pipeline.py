"""grain reads training batches ahead in threads, in exactly the order of Run.train_batch."""

import numpy as np
import pytest

from nplm_jax.data import corpora as data
from nplm_jax.data import input_pipeline

pytestmark = pytest.mark.slow


def test_grain_batches_are_the_steps_batches_in_order_from_any_step():
  ids = np.random.default_rng(0).integers(0, 50, size=5_000)
  corpus = data.Corpus(tuple(f'w{i}' for i in range(50)), {'train': ids, 'valid': ids[:100], 'test': ids[:100]}, 0)
  stream = data.TokenStream(corpus, 3)
  rows = np.arange(8, 16)  # the second of two processes' rows of a batch of 16
  source = data.StepBatches(stream, seed=3, batch_size=16, steps_per_epoch=5_000 // 16, total_steps=900,
                                      rows=rows)
  for start in (0, 290, 700):  # resuming at any step, epochs crossed (312 steps an epoch)
    batches = input_pipeline.train_batches(source, start, num_threads=3, prefetch=4)
    for step in range(start, start + 60):
      contexts, targets = next(batches)
      epoch, index = divmod(step, 5_000 // 16)
      positions = stream.train_order(3, epoch)[index * 16:(index + 1) * 16][rows]
      expected = stream.examples('train', positions)
      np.testing.assert_array_equal(contexts, expected[0])
      np.testing.assert_array_equal(targets, expected[1])
