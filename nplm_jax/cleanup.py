"""What must be undone even when a command ends at once: a stop by a signal ends the process with
os._exit (entry._stop: no unwinding, so no `finally` runs), and a workdir's lock taken by this process
would stay behind. Holders register their release here; entry runs them before it exits."""

from collections.abc import Callable

_actions: list[Callable[[], None]] = []


def register(action: Callable[[], None]) -> None:
  if action not in _actions:
    _actions.append(action)


def unregister(action: Callable[[], None]) -> None:
  if action in _actions:
    _actions.remove(action)


def run_all() -> None:
  """Runs every registered action once, newest first; one that fails does not stop the others."""
  while _actions:
    action = _actions.pop()
    try:
      action()
    except BaseException:  # pylint: disable=broad-except  # exiting anyway: the rest must still run
      pass
