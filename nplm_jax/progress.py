"""Progress lines with a rate and the time left, for long work in any tool (no JAX: the n-gram and
prepare tools use it too)."""

import sys
import time


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'


AFTER_SECONDS = 5.0  # work shorter than this prints no progress
EVERY_SECONDS = 10.0  # at most one line this often


class StderrProgress:
  """progress(done, total) for long work: a line (on stderr, or given to `emit`) at most every `every`
  seconds, with the rate and the time left, once the work has run `after` seconds (short work
  prints nothing)."""

  def __init__(self, what: str, after: float | None = None, every: float | None = None, emit=None):
    self.what = what
    self._emit = emit or (lambda line: print(line, file=sys.stderr, flush=True))
    self.after = AFTER_SECONDS if after is None else after
    self.every = EVERY_SECONDS if every is None else every
    self._start = time.perf_counter()
    self._last = self._start - self.every  # the first line as soon as `after` has passed

  def emit(self, line: str) -> None:
    """A line of its own (an estimate made before any progress, say), where the progress lines go."""
    self._emit(line)

  def __call__(self, done: int, total: int) -> None:
    now = time.perf_counter()
    if now - self._start < self.after or now - self._last < self.every or not done:
      return
    self._last = now
    rate = done / max(now - self._start, 1e-9)
    shown = f'{rate:,.0f}' if rate >= 10 else f'{rate:.2g}'  # orders of an n-gram come slower than 1/s
    self._emit(f'{done:,}/{total:,} {self.what} ({shown}/s, ETA {format_duration((total - done) / rate)})')
