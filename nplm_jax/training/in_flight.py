"""A bound on the work queued on the devices ahead of the host."""

import collections

import jax


class InFlightLimit:
  """Keeps at most `depth` steps queued on the devices.

  Dispatch is asynchronous, so the host prepares the next batch while the devices compute. An
  unbounded queue of multi-device executions can deadlock XLA's CPU collectives (two host devices
  waiting in different steps' all-reduces); two in flight keep the overlap without that risk.
  """

  def __init__(self, depth: int = 2):
    self._depth, self._pending = depth, collections.deque()

  def push(self, result):
    self._pending.append(result)
    if len(self._pending) > self._depth:
      jax.block_until_ready(self._pending.popleft())
    return result

  def drain(self) -> None:
    """Waits for everything still queued (independent executions can finish out of order)."""
    while self._pending:
      jax.block_until_ready(self._pending.popleft())
