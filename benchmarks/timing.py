"""Timing shared by the JAX and PyTorch benchmarks (no framework imports, so either can use it)."""

import statistics
import time


def median_seconds(fn, repeats: int) -> float:
  """Median wall time of `fn()` (which must block until its work is done) over `repeats` calls."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)
