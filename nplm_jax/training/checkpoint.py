"""Orbax checkpoints: the latest train state for resuming, and the best parameters by validation.

Restoring takes an abstract target that carries the shardings of the mesh in use, so a
checkpoint written under one mesh (or number of processes) loads under any other. Every process
of a multi-process job takes part in each save and restore; Orbax coordinates them.

Saves are asynchronous: training goes on while they are written (the arrays are copied off the
devices first). Crash consistency: a best save and the latest save of the same step commit in
either order. A latest checkpoint whose own step is its best step, but whose best save never
committed, is set aside at start-up and the run resumes from the one before it; best steps newer
than the latest checkpoint resumed (a crash between the two commits) are dropped. Either way the
run recomputes the lost steps exactly. best/ keeps every step that a latest checkpoint names, and
the newest (_prune_best), so the best step of whichever latest checkpoint a run resumes from is there.

Integrity: every step records a checksum of each of its arrays (integrity.checksums, in Orbax's
per-step custom metadata), checked on every restore. An unreadable checkpoint step, or one whose
arrays no longer match their checksums, is set aside (renamed STEP.unreadable-TIME, never deleted)
with a warning, and the run resumes from the newest good one; best parameters that do not match
are one line of error. Steps saved before checksums were kept are read as they are (noted once).
"""

import contextlib
import gc
import logging as logging_lib
import os
import sys
import threading
import time
import warnings

import jax
import orbax.checkpoint as ocp

from nplm_jax.parallel import distributed
from nplm_jax.training import integrity
from nplm_jax.files import metrics
from nplm_jax.models import bengio2003 as model_lib
from nplm_jax.models import output_layer
from nplm_jax.training import run_state as run_state_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import SaveFailed, UserError


CHECKSUMS = workdir_lib.CHECKPOINT_CHECKSUMS_KEY  # each step's custom metadata: integrity.checksums of its arrays


def _options(max_to_keep: int | None, name: str, create: bool = True) -> ocp.CheckpointManagerOptions:
  # Orbax names the barriers of a save by its step: the two managers save the same step one
  # after the other, so in a multi-process job each needs barriers of its own.
  return ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=create, cleanup_tmp_directories=create,  # a failed save's leftovers
      multiprocessing_options=ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=name))




# What a failed write says, in the words of the OS (TensorStore and Orbax wrap them in long messages).
WRITE_FAILURES = ('No space left on device', 'Read-only file system', 'Permission denied', 'Disk quota exceeded',
                  'Input/output error', 'No such file or directory', 'Stale file handle')


def _write_failure(error: Exception) -> str:
  text = str(error)
  found = next((reason for reason in WRITE_FAILURES if reason in text), None)
  if found:
    return found
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  return (lines[0][:200] if lines else type(error).__name__)


_in_orbax = lambda path: f'{os.sep}orbax{os.sep}' in path  # a source file of Orbax's


# Orbax's warnings about a damaged step that are not the user's to act on: what Checkpoints reports itself,
# in its one line (a step's metadata file deleted: 'its checksum record is missing'), and what does not
# change a restore that names each item's arguments and checks the arrays' checksums (an item's own
# metadata file deleted: the arrays still restore, and are verified).
_QUIET_ORBAX_WARNINGS = ('Metadata file does not exist', 'was found in the checkpoint, but could not be restored')


class _OrbaxErrorLogs(logging_lib.Filter):
  """Drops Orbax's own error logs (each with a traceback) of a failed save: every such failure is
  raised again by the next check, save or wait, which Checkpoints reports as one SaveFailed line; and
  its warnings about a damaged step that are not the user's to act on (_QUIET_ORBAX_WARNINGS)."""

  def filter(self, record) -> bool:
    if not _in_orbax(record.pathname):
      return True
    reported = record.levelno == logging_lib.WARNING and any(w in str(record.msg) for w in _QUIET_ORBAX_WARNINGS)
    return not (record.levelno >= logging_lib.ERROR or reported)


logging_lib.getLogger('absl').addFilter(_OrbaxErrorLogs())


def _raised_in_orbax(error: BaseException | None) -> bool:
  traceback = error.__traceback__ if error is not None else None
  while traceback is not None:
    if _in_orbax(traceback.tb_frame.f_code.co_filename):
      return True
    traceback = traceback.tb_next
  return False


# What TensorStore's errors say of the files they could not read or write (a checkpoint's arrays).
_TENSORSTORE_ERRORS = ('"zarr" driver', '"ocdbt" driver', 'OCDBT database', 'TensorStore')


class _UnretrievedOrbaxWrites(logging_lib.Filter):
  """Drops asyncio's 'Task (or Future) exception was never retrieved' logs for Orbax's own reads and
  writes. A save writes its arrays' fragments as concurrent tasks, and a restore reads them so; on a full
  disk or a damaged step several fail, Orbax raises the first, and the others are logged with a traceback
  when they are collected (seen in CI: six lines around the one SaveFailed line that already names the
  step, the folder and the cause; and around a damaged best/ step's one line). Other tasks still log."""

  def filter(self, record) -> bool:
    if 'exception was never retrieved' not in str(record.msg):
      return True
    error = record.exc_info[1] if record.exc_info else None
    said = f'{record.getMessage()} {error}'
    return not (_raised_in_orbax(error) or any(w in said for w in _TENSORSTORE_ERRORS))


logging_lib.getLogger('asyncio').addFilter(_UnretrievedOrbaxWrites())


# The points of a save where the tests inject faults (tests/faulty_train.py replaces `fault_hook`): a crash
# inside a save or between two, where a timed kill would rarely land, and a full disk when a save starts.
FAULT_POINTS = ('latest_starting', 'best_starting', 'between_saves', 'latest_writing', 'best_writing')


def fault_hook(point: str, step: int) -> None:
  """Called at each of FAULT_POINTS of the saves of `step`; does nothing (a seam the tests replace)."""
  del point, step


def _fault_point(point: str, step: int) -> None:
  assert point in FAULT_POINTS, point
  fault_hook(point, step)


@contextlib.contextmanager
def _closed_event_loops_quiet():
  """While restores are tried: a failed Orbax restore leaves TensorStore callbacks for an asyncio
  loop it has closed, and Python prints an 'Exception ignored' traceback for each, which tells a user
  nothing, and Python warns of each coroutine the failed read abandoned that it was never awaited.
  Within this block only those are silenced; the hook in place before is restored after, and every
  other unraisable exception and warning reaches it. A read that failed (an exception out of the
  block, or the yielded function called) has its garbage collected before the block ends, so the
  warnings come while they are silenced; a read that worked skips the collection, a full pass over
  the process's objects (most of a restore's time in a large process)."""
  previous = sys.unraisablehook
  failed = False

  def a_read_failed():
    nonlocal failed
    failed = True

  def hook(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError) and 'Event loop is closed' in str(unraisable.exc_value)):
      previous(unraisable)
  sys.unraisablehook = hook
  with warnings.catch_warnings():
    warnings.filterwarnings('ignore', message=r"coroutine '.*' was never awaited", category=RuntimeWarning)
    try:
      yield a_read_failed
    except BaseException:
      failed = True
      raise
    finally:
      if failed:
        gc.collect()
      sys.unraisablehook = previous


def _quiet_closed_event_loops() -> None:
  """When a save fails in the background, or a read of a damaged step, TensorStore's callbacks still
  call into the asyncio loops Orbax has closed: each prints a 'RuntimeError: Event loop is closed'
  traceback (through sys.excepthook, threads' excepthook or the unraisable hook) before and after the
  one error line that says what failed. A process that opens checkpoints drops those, and only those,
  from then on (once: the hooks are wrapped a single time)."""
  if getattr(sys.excepthook, 'drops_closed_event_loops', False):
    return
  closed = lambda error: isinstance(error, RuntimeError) and 'Event loop is closed' in str(error)
  previous_excepthook, previous_thread_hook, previous_unraisable = sys.excepthook, threading.excepthook, sys.unraisablehook

  def excepthook(kind, value, traceback):
    if not closed(value):
      previous_excepthook(kind, value, traceback)

  excepthook.drops_closed_event_loops = True
  sys.excepthook = excepthook
  threading.excepthook = lambda args: None if closed(args.exc_value) else previous_thread_hook(args)
  sys.unraisablehook = lambda unraisable: None if closed(unraisable.exc_value) else previous_unraisable(unraisable)


def _reason(error: Exception) -> str:
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  return f'{type(error).__name__}: {lines[0][:160] if lines else ""}'


class Checkpoints:
  def __init__(self, workdir: workdir_lib.Workdir, keep: int = 2, read_only: bool = False):
    """read_only: for tools that only read a workdir; folders it lacks are not created."""
    self.save_seconds = 0.0  # what the training loop spent in save calls (copies off the devices, mostly)
    # of it, the arrays' checksums (on an H200 a character row's 29 best saves of 93 MB took 32 s of 228)
    self.checksum_seconds = 0.0
    self._started = {}  # manager -> the step its last save started (a failure found later names it)
    self._noted_unverified = False
    self._workdir = workdir
    self.latest = ocp.CheckpointManager(
        workdir.file('checkpoints'), options=_options(keep, 'latest', create=not read_only),
        item_handlers={'state': ocp.StandardCheckpointHandler(), 'meta': ocp.JsonCheckpointHandler()})
    # best/ is pruned here, not by a count: it keeps every step a latest checkpoint names (_prune_best)
    self.best = ocp.CheckpointManager(workdir.file('best'), options=_options(None, 'best', create=not read_only),
                                      item_handlers=ocp.StandardCheckpointHandler())
    # A save that fails in the background, or a read of a damaged step (a tool's too): TensorStore's callbacks'
    # tracebacks tell a user nothing (a best/ array file deleted printed one around nplm-score's error line).
    _quiet_closed_event_loops()

  @contextlib.contextmanager
  def _writing(self, manager, step: int):
    """A save, a wait or a check of saves in the background: any failure becomes one SaveFailed line
    (the step's temporary folders removed, so that the workdir resumes from its last saved step)."""
    if step is None:  # a wait or check: a failure is that of the last save started in the background
      step = self._started.get(manager)
    else:
      self._started[manager] = step
    try:
      yield
    except UserError:
      raise
    except Exception as e:  # pylint: disable=broad-except  # Orbax/TensorStore raise many kinds
      self._settle()
      self._remove_temporaries()
      what = f'step {step} to {manager.directory}' if step is not None else f'to {manager.directory}'
      raise SaveFailed(f'saving {what} failed ({_write_failure(e)}); free space or fix the folder, then run the '
                       'same command to resume from the last saved step') from None

  def _settle(self) -> None:
    """Waits for every save still running in the background (the other manager's too): a save that
    fails after the temporaries were removed would leave its own behind (seen: best/60.orbax-checkpoint-tmp
    after the latest save of step 60 filled the disk)."""
    for manager in (self.latest, self.best):
      try:
        manager.wait_until_finished()
      except Exception:  # pylint: disable=broad-except  # its failure is the one being reported, or follows from it
        pass

  def _remove_temporaries(self, attempts: int = 20, pause_seconds: float = 0.1) -> None:
    """Removes the failed saves' temporary folders. A write of the failed save can still be landing in
    one after the managers report the failure (seen on a loaded 2-core CPU: best/60.orbax-checkpoint-tmp
    left behind), so the sweep repeats, a moment apart, until none is found."""
    if not distributed.is_leader():
      return
    for _ in range(attempts):
      if not self._sweep_temporaries():
        return
      time.sleep(pause_seconds)

  def _sweep_temporaries(self) -> bool:
    """Removes the temporary folders found now; whether there were any."""
    found = False
    for manager in (self.latest, self.best):
      try:
        for leftover in manager.directory.glob('*.orbax-checkpoint-tmp*'):
          found = True
          leftover.rmtree()
      except OSError:
        pass  # a lost folder, or one still being written: the next sweep (or start) takes it
    return found

  def check(self) -> None:
    """Raises SaveFailed when a save running in the background has failed (the loop checks between
    dispatches, so training stops at the first failed save)."""
    for manager in (self.latest, self.best):
      with self._writing(manager, None):
        manager.check_for_errors()

  def save_latest(self, step: int, state, run_state: run_state_lib.RunState) -> None:
    _fault_point('between_saves', step)
    with self._writing(self.latest, step):
      _fault_point('latest_starting', step)
      self.latest.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                     meta=ocp.args.JsonSave(run_state.to_json())),
                       custom_metadata={CHECKSUMS: self._checksums(state)}, force=True)
    _fault_point('latest_writing', step)
    self._prune_best(step, run_state.best_step)

  def _prune_best(self, saving: int, best_step: int | None) -> None:
    """Deletes the best steps that neither a committed latest checkpoint nor the one being saved names,
    except the newest: whatever latest checkpoint a crash leaves, its best step is still there (with
    train.checkpoint_every > eval_every several best saves come between two latest ones). A latest
    checkpoint whose record cannot be read keeps every best step."""
    named = {best_step}
    for step in self.latest.all_steps():
      if step == saving:
        continue  # in flight: its record is run_state, above
      recorded = self._run_state_at(step)
      if recorded is None:
        return
      named.add(recorded.best_step)
    steps = self.best.all_steps()
    for step in steps:
      if step not in named and step != max(steps):
        self.best.delete(step)

  def _run_state_at(self, step: int) -> run_state_lib.RunState | None:
    try:
      return run_state_lib.RunState.from_json(self.latest.restore(step, args=ocp.args.Composite(
          meta=ocp.args.JsonRestore())).meta)
    except Exception:  # pylint: disable=broad-except  # a damaged step: its arrays' restore says how
      return None

  def save_best(self, step: int, params) -> None:
    """Starts saving the best parameters; it commits in the background (module docstring)."""
    with self._writing(self.best, step):
      _fault_point('best_starting', step)
      self.best.save(step, args=ocp.args.StandardSave(params),
                     custom_metadata={CHECKSUMS: self._checksums(params)}, force=True)
    _fault_point('best_writing', step)

  def _checksums(self, tree) -> dict[str, str]:
    """integrity.checksums, its time added to checksum_seconds."""
    started = time.perf_counter()
    sums = integrity.checksums(tree)
    self.checksum_seconds += time.perf_counter() - started
    return sums

  def _checksums_of(self, manager, step: int) -> tuple[dict | None, str]:
    """(the checksums saved with a step or None, why none: 'missing' or 'unreadable')."""
    try:
      return (manager.metadata(step).custom_metadata or {}).get(CHECKSUMS), 'missing'
    except Exception:  # pylint: disable=broad-except  # truncated, garbled or deleted metadata
      return None, 'unreadable'

  def _checksums_expected(self, manager, step: int) -> bool:
    """Whether this workdir saves checksums, known without the step's own metadata: its integrity
    record (a damaged one: yes), or any other step of latest or best carrying them."""
    try:
      record = self._workdir.integrity()
    except UserError:
      return True
    if record is not None and record.get('checkpoint_checksums'):
      return True
    for other in (self.latest, self.best):
      for s in other.all_steps():
        if not (other is manager and s == step) and self._checksums_of(other, s)[0] is not None:
          return True
    return False

  def _changed_arrays(self, manager, step: int, tree) -> str | None:
    """Why a restored step cannot be trusted (an array that differs from its checksum, or the checksum
    record missing or unreadable in a workdir that saves them), or None; a step saved before
    checksums were kept is read as it is, with one note on stderr."""
    expected, why = self._checksums_of(manager, step)
    if expected is None:
      if self._checksums_expected(manager, step):
        return f'its checksum record is {why}'
      if not self._noted_unverified:
        metrics.note(f'{manager.directory}/{step} was saved without checksums (by an older nplm_jax): read as it is')
        self._noted_unverified = True
      return None
    changed = integrity.mismatches(tree, expected)
    return f'{changed[0]} differs from its checksum: the files changed after they were saved' if changed else None

  def _best_committed(self, step: int, run_state: run_state_lib.RunState) -> bool:
    """False for a latest checkpoint saved with a best save of its own step that never committed."""
    return run_state.best_step != step or step in self.best.all_steps()

  def restore_latest(self, abstract_state):
    """(state, RunState) of the newest readable checkpoint, or None when there is none.

    Unreadable newer steps are set aside with a warning; when none is readable, one line says so.
    """
    self.wait()  # saves still being committed in the background are part of what to restore
    with _closed_event_loops_quiet() as a_read_failed:
      return self._restore_newest_readable(abstract_state, a_read_failed)

  def _restore_newest_readable(self, abstract_state, a_read_failed):
    steps = sorted(self.latest.all_steps(), reverse=True)
    problems = []
    for step in steps:
      if self._separate_layout(self.latest, step, 'state'):
        raise UserError(f'{self.latest.directory}/{step} was saved by an older nplm_jax (the output layer as U, W '
                        'and b): resume it with that version; evaluation, mix and the tools for trained models read '
                        'it as it is')
      try:
        restored = self.latest.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
        state, run_state = restored.state, run_state_lib.RunState.from_json(restored.meta)
      except Exception as e:  # pylint: disable=broad-except  # any way a checkpoint can be damaged
        a_read_failed()
        problems.append((step, _reason(e)))
        continue
      if not self._best_committed(step, run_state):
        problems.append((step, f'its best save of step {step} did not commit'))
        continue
      untrusted = self._changed_arrays(self.latest, step, state)
      if untrusted:
        problems.append((step, untrusted))
        continue
      for bad_step, reason in problems:
        aside = self._set_aside(self.latest, bad_step)
        metrics.warn(f'checkpoint step {bad_step} cannot be read ({reason}); set aside as {aside}, '
                     f'resuming from step {step}')
      return state, run_state
    if problems:
      folder = self.latest.directory
      raise UserError(f'no checkpoint in {folder} can be read (step {problems[0][0]}: {problems[0][1]}); restore '
                      f'them, or move {folder} away to train from the start')
    return None

  def latest_run_state(self) -> run_state_lib.RunState | None:
    """The RunState of the newest checkpoint whose JSON part is readable (the arrays are not read)."""
    self.wait()
    for step in sorted(self.latest.all_steps(), reverse=True):
      run_state = self._run_state_at(step)
      if run_state is not None and self._best_committed(step, run_state):
        return run_state
    return None

  def restore_best(self, abstract_params, step: int, model: model_lib.NPLM):
    """The best parameters, saved at `step` (in the older layout too: converted)."""
    self.wait()
    if step not in self.best.all_steps():
      raise UserError(f'{self.best.directory} holds no step {step}, the best one of this run; restore it, or '
                      'move best/ and checkpoints/ away to train from the start')
    try:
      with _closed_event_loops_quiet():
        if self._separate_layout(self.best, step):
          separate = self.best.restore(step, args=ocp.args.StandardRestore(
              output_layer.separate_output_layer_target(model, abstract_params)))
          return output_layer.stack_separate_output_layer(model, separate, abstract_params[output_layer.OUTPUT].sharding)
        params = self.best.restore(step, args=ocp.args.StandardRestore(abstract_params))
    except Exception as e:  # pylint: disable=broad-except
      raise UserError(f'the best parameters in {self.best.directory}/{step} cannot be read ({_reason(e)}); '
                      'restore them from a copy, or move best/ and checkpoints/ away to train again') from None
    untrusted = self._changed_arrays(self.best, step, params)
    if untrusted:
      raise UserError(f'the best parameters in {self.best.directory}/{step} cannot be trusted ({untrusted}); restore '
                      'them from a copy, or move best/ and checkpoints/ away to train again')
    return params

  def reconcile(self, resumed_step: int, evaluation_due: bool = False) -> None:
    """Drops best steps newer than the step the run resumes from: a crash came between the two saves
    of that step (or its latest checkpoint was unreadable), and resuming recomputes it exactly. With
    the resumed step's own evaluation still to run (a signal stopped it), its best save goes too."""
    for step in self.best.all_steps():
      if step > resumed_step or (evaluation_due and step == resumed_step):
        metrics.warn(f'best step {step} is newer than the latest checkpoint ({resumed_step}); it is recomputed')
        self.best.delete(step)

  def drop_latest_after(self, step: int) -> list[int]:
    """Deletes latest checkpoints after `step` (those of a diverged stretch); returns their steps."""
    dropped = [s for s in self.latest.all_steps() if s > step]
    for s in dropped:
      self.latest.delete(s)
    return dropped

  @staticmethod
  def _separate_layout(manager, step: int, item: str | None = None) -> bool:
    """Whether a step holds the older layout of the output layer (U, W, b); False if unreadable."""
    try:
      tree = manager.item_metadata(step)
      tree = tree[item] if item else tree
      params = tree['params'] if 'params' in tree else tree
      return output_layer.has_separate_output_layer(set(params))
    except Exception:  # pylint: disable=broad-except  # a damaged step: restoring it will say so
      return False

  def _set_aside(self, manager, step: int) -> str:
    """Renames an unreadable step folder out of Orbax's way (it must not block saving that step again)."""
    folder = manager.directory / str(step)
    aside = folder.parent / f'{step}.unreadable-{time.strftime("%Y%m%d-%H%M%S")}'
    if distributed.is_leader():
      folder.rename(aside)
    distributed.barrier(f'set_aside_{step}')
    manager.reload()
    return str(aside)

  def wait(self) -> None:
    for manager in (self.latest, self.best):
      with self._writing(manager, None):
        manager.wait_until_finished()

  def close(self) -> None:
    self.latest.close()
    self.best.close()

  def finish(self, failing: bool) -> None:
    """Waits for the saves in flight, then closes. `failing` (an error is already on its way out):
    a save that fails now, or a close, does not replace that error, which comes first."""
    try:
      self.wait()
      self.close()
    except Exception:  # pylint: disable=broad-except
      if not failing:
        raise
    if failing:  # a save still in flight when the first one failed may have left its temporary folder since
      self._remove_temporaries()


def abstract_with_shardings(tree, shardings):
  """ShapeDtypeStructs that tell Orbax which devices each restored array goes to."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)
