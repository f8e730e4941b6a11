"""The commands' entry points (console scripts and `python -m`): a signal at any moment ends in one line.

Each command runs inside run_command, which also makes a user error (errors.UserError) from anywhere
in the command one 'error:' line and exit status 1. It imports the command's module (JAX and all)
only after taking SIGINT and SIGTERM, so Ctrl-C or a SIGTERM during the imports, the start-up, an
evaluation or a tool's work stops the command with one 'error:' line and exit status 128 + the
signal, never a traceback; once stopping, further signals are ignored (a second Ctrl-C prints
nothing more). A library may catch the signal's exception with a broad `except` and go on (an
optional C extension's import falls back to pure Python on its ImportError): each signal raised is
also recorded, and a recorded one stops the command at the next check (raise_swallowed_signal: after
the command's import, as training starts its loop, and when the command returns). Inside the
training loop, train.Preemption takes the signals first and saves the step in progress. Files are
written whole or not at all (workdir.write_text_atomically, Orbax's commits), so what a stopped
command leaves is resumable: the same command again resumes or redoes it.

This module imports nothing heavy: it must be ready before the first import that can take seconds.
"""

import importlib
import importlib.util
import os
import signal
import sys

from nplm_jax.signals import Stopped  # pylint: disable=unused-import  # entry.Stopped, as before
from nplm_jax.signals import raise_stopped as _raise_stopped
from nplm_jax.signals import raise_swallowed_signal

# What each command's stop leaves behind, for its one line.
AFTER_TRAINING_STOP = 'run the same command to resume (the checkpoints saved so far are kept)'
AFTER_TOOL_STOP = 'nothing was written half-way; run it again'


# Extension modules whose import a signal must not interrupt: Ctrl-C inside numpy's, jaxlib's or
# tensorstore's (Orbax's) C++ initialisation ended in an ImportError with a traceback, or a nanobind
# abort. They are imported first with SIGINT and SIGTERM blocked; a signal that came meanwhile is
# delivered once they are in, as the usual stop line (a second or so later at most).
WITH_JAX = ('numpy', 'jax', 'tensorstore')
WITHOUT_JAX = ('numpy',)


def _import_shielded(names: tuple[str, ...]) -> None:
  signals = {signal.SIGINT, signal.SIGTERM}
  signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # threads the imports start inherit the mask
  try:
    for name in names:
      try:
        importlib.import_module(name)
      except ImportError:
        pass  # the command's own import says what is missing
  finally:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)


def run_command(module: str, function: str = 'main', after_stop: str = AFTER_TOOL_STOP,
                shielded: tuple[str, ...] = WITH_JAX, early: str | None = None):
  """Runs module.function() (it returns an exit status or None), turning a signal into one line.

  early: a function of the module that checks the command line before the shielded imports (JAX's take
  seconds), so that a bad flag, value or path is answered at once; it raises UserError or exits."""
  from nplm_jax.errors import UserError  # pylint: disable=g-import-not-at-top  # light; the except below names it
  # A signal that lands in a garbage-collection callback or a destructor (JAX's imports run some)
  # raises where Python only reports it as unraisable and goes on: stop there and then.
  previous_hook = sys.unraisablehook

  def unraisable(hook_args):
    if _abandoned_orbax_read(hook_args):
      return  # the read failed and its command reports that in its own line
    if isinstance(hook_args.exc_value, Stopped):
      _stop(hook_args.exc_value.signum, after_stop)
    elif isinstance(hook_args.exc_value, KeyboardInterrupt):
      _stop(signal.SIGINT, after_stop)
    previous_hook(hook_args)
  sys.unraisablehook = unraisable
  try:
    # Inside the try: a signal that comes while the second handler is being set (the first already raises
    # Stopped) is the stop line too.
    for each in (signal.SIGINT, signal.SIGTERM):
      signal.signal(each, _raise_stopped)
    if early:  # its checks import numpy (corpora): shielded as the rest are
      _import_shielded(('numpy',))
      getattr(importlib.import_module(module), early)()
    _import_shielded(shielded)
    command = getattr(importlib.import_module(module), function)
    raise_swallowed_signal()
    status = command()
    if not status:  # it finished (its results stand), but the stop was asked for
      raise_swallowed_signal()
  except UserError as e:  # the one place a command's user error becomes its line
    print(f'error: {e}', file=sys.stderr, flush=True)
    status = 1
  except Exception as e:  # pylint: disable=broad-except  # out of memory at run time: one line, not a traceback
    stopped = _stop_behind(e)
    if stopped is not None:  # a signal inside another extension's initialisation: its ImportError
      _stop(stopped, after_stop)
    if not _out_of_memory(e):
      raise
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    print(f'error: out of memory ({first[:200]}); lower the sizes the memory estimate could not see (batch, '
          f'model, samples) or free memory, then run the same command again', file=sys.stderr, flush=True)
    status = 1
  except KeyboardInterrupt:
    _stop(signal.SIGINT, after_stop)
  except Stopped as stopped:
    _stop(stopped.signum, after_stop)
  except SystemExit as exiting:  # a command that printed its error line and exits (cli.exit_with_error)
    if exiting.code:
      _quiet_teardown()
    raise
  if status:
    _quiet_teardown()
  sys.exit(status)


def _abandoned_orbax_read(hook_args) -> bool:
  """Whether an unraisable exception is that of an Orbax coroutine finalised after its read failed (a
  checkpoint's array file missing or damaged): the others of its reads, abandoned once the first failed,
  report theirs when collected, as 'Exception ignored in: <coroutine ...>' with a traceback."""
  code = getattr(hook_args.object, 'cr_code', None)
  return code is not None and f'{os.sep}orbax{os.sep}' in code.co_filename


def _quiet_teardown() -> None:
  """After the one error line, nothing more: work abandoned by the error (an Orbax read's coroutine,
  say) is finalised at exit, and Python would report its exception as 'Exception ignored in ...'
  with a traceback, or warn of a coroutine never awaited."""
  import warnings  # pylint: disable=g-import-not-at-top
  sys.unraisablehook = lambda hook_args: None
  warnings.simplefilter('ignore')


def _stop_behind(error: BaseException) -> int | None:
  """The signal of a Stopped or KeyboardInterrupt that `error` was raised from (its cause or context,
  at any depth), or None: a C extension's initialisation turns one into 'ImportError: initialization
  failed'."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, Stopped):
      return error.signum
    if isinstance(error, KeyboardInterrupt):
      return signal.SIGINT
    error = error.__cause__ or error.__context__
  return None


def _out_of_memory(error: BaseException) -> bool:
  """Python's MemoryError, or an XLA allocation failure (RESOURCE_EXHAUSTED)."""
  return isinstance(error, MemoryError) or 'RESOURCE_EXHAUSTED' in str(error)[:500]


def _stop(signum: int, after_stop: str) -> None:
  for each in (signal.SIGINT, signal.SIGTERM):
    signal.signal(each, signal.SIG_IGN)  # a second signal now would interrupt the message
  name = signal.Signals(signum).name + (' (Ctrl-C)' if signum == signal.SIGINT else '')
  from nplm_jax import cleanup  # pylint: disable=g-import-not-at-top  # a light module
  cleanup.run_all()  # a workdir's lock, say: no `finally` runs after os._exit
  print(f'error: stopped by {name}; {after_stop}', file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(128 + signum)  # pylint: disable=protected-access  # no more Python: JAX's atexit hooks could hang


def train():
  run_command('nplm_jax.main', after_stop=AFTER_TRAINING_STOP, early='check_flags')


def score():
  run_command('nplm_jax.commands.score', early='check_flags')


def sample():
  run_command('nplm_jax.commands.sample', early='check_flags')


def embeddings():
  run_command('nplm_jax.commands.embeddings', early='check_flags')


def extend():
  run_command('nplm_jax.commands.extend', early='check_flags')


def plot():
  run_command('nplm_jax.commands.plot', shielded=WITHOUT_JAX)


def export():
  run_command('nplm_jax.commands.export', early='check_flags')


def ngram():
  run_command('nplm_jax.commands.ngram', shielded=WITHOUT_JAX)


def mix():
  run_command('nplm_jax.commands.mix')


def prepare():
  run_command('nplm_jax.commands.prepare', shielded=WITHOUT_JAX)


def sweep():
  run_command(_launch('sweep'), after_stop='run the same command to go on (finished points are skipped)')


def table1():
  run_command(_launch('table1'))


def _launch(name: str) -> str:
  """launch/NAME.py: nplm_jax.launch.NAME once installed, launch.NAME in the repository."""
  return f'nplm_jax.launch.{name}' if importlib.util.find_spec('nplm_jax.launch') else f'launch.{name}'
