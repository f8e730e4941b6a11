"""SIGINT and SIGTERM as an exception, and the record of each one raised: what the command layer's entry
point (nplm_jax.entry) installs and what the training loop checks, kept in a leaf module so that every
layer may import it."""


class Stopped(BaseException):
  """SIGINT or SIGTERM, raised where the program is (not an Exception: no `except Exception` stops it)."""

  def __init__(self, signum: int):
    super().__init__(signum)
    self.signum = signum


# Every signal raised as Stopped. Each one that reached run_command has ended the process, so one
# found here at a check was swallowed on its way (a broad `except`, an import's fallback).
_RAISED_SIGNALS: list[int] = []


def raise_stopped(signum, frame):
  """A signal handler: records the signal and raises Stopped where the program is."""
  del frame
  _RAISED_SIGNALS.append(signum)
  raise Stopped(signum)


def raise_swallowed_signal() -> None:
  """Raises Stopped for a signal that arrived under run_command and that the code it interrupted
  swallowed; does nothing otherwise (and outside run_command, which alone records signals)."""
  if _RAISED_SIGNALS:
    raise Stopped(_RAISED_SIGNALS[0])
