"""nplm-train with a fault injected into its checkpoint saves, for tests/test_reliability.py:

    python -m tests.faulty_train crash_at=POINT:STEP -- NPLM-TRAIN'S ARGUMENTS   # SIGKILL at that point of STEP's saves
    python -m tests.faulty_train saves_fail_from=STEP -- ...                     # saves of STEP and later: a full disk
    python -m tests.faulty_train signal_at=POINT:SIGNAL[:COUNT] -- ...          # SIGNAL, COUNT times, at POINT

crash_at's POINT is one of checkpoint.FAULT_POINTS: inside a save or between two, where a timed kill would rarely
land; a full disk where a test cannot mount a small filesystem; signal_at's POINT one of those train.py names
(a user pressing Ctrl-C at that moment, twice with COUNT 2). The faults reach the run through
checkpoint.fault_hook and train.fault_hook, the seams the production code leaves for them; the rest is
nplm-train as users run it (entry.train).
"""

import os
import signal
import sys
import threading
import time


def fault(spec: str):
  """The hook for `spec` (crash_at=POINT:STEP or saves_fail_from=STEP)."""
  kind, _, value = spec.partition('=')
  if kind == 'crash_at':
    def crash(point: str, step: int) -> None:
      if f'{point}:{step}' == value:
        os.kill(os.getpid(), signal.SIGKILL)
    return crash
  if kind == 'saves_fail_from':
    def disk_full(point: str, step: int) -> None:
      if point.endswith('_starting') and step >= int(value):
        raise OSError(28, 'No space left on device')
    return disk_full
  raise SystemExit(f'unknown fault {spec!r}; use crash_at=POINT:STEP, saves_fail_from=STEP or '
                   'signal_at=POINT:SIGNAL[:COUNT]')


def signal_at(spec: str):
  """The training loop's hook for signal_at=POINT:SIGNAL[:COUNT]: SIGNAL sent COUNT times, 20 ms apart, from a
  thread, handled in the main thread at its next instruction."""
  point, name, *count = spec.partition('=')[2].split(':')
  signum, times = getattr(signal, name), int(count[0]) if count else 1

  def hook(at: str) -> None:
    if at != point:
      return
    def send():
      for _ in range(times):
        os.kill(os.getpid(), signum)
        time.sleep(0.02)
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join()
    time.sleep(1.0)  # never reached: the handler raises first
  return hook


def main() -> None:
  spec, separator, *argv = sys.argv[1:]
  assert separator == '--', sys.argv
  from nplm_jax.training import checkpoint  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import train  # pylint: disable=g-import-not-at-top
  if spec.startswith('signal_at='):
    train.fault_hook = signal_at(spec)
  else:
    checkpoint.fault_hook = fault(spec)
  sys.argv = ['nplm-train', *argv]
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.train()


if __name__ == '__main__':
  main()
