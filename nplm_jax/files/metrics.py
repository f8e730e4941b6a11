"""Metrics to TensorBoard event files and a JSON-lines log, and progress with rate and ETA.

Only the leader process writes or prints; the others' writers do nothing. Files go through
etils.epath, so they can live in a bucket (gs://...) like the checkpoints.
"""

import contextlib
import io
import json
import sys
import time

from etils import epath

from nplm_jax.parallel import distributed
from nplm_jax.progress import format_duration
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import UserError

REMOTE_SCHEMES = ('gs', 's3', 'az')  # prefixes whose TensorBoard files are written through epath


class _EpathEventFile:
  """An event file on any filesystem epath reaches: buffered, and rewritten whole at each flush
  (object stores cannot append), as tensorboardX's own GCS writer does."""

  def __init__(self, path: str):
    self._path, self._buffer = epath.Path(path), io.BytesIO()

  def write(self, data: bytes) -> None:
    self._buffer.write(data)

  def flush(self) -> None:
    self._path.write_bytes(self._buffer.getvalue())

  def close(self) -> None:
    self.flush()


class _EpathEventFiles:
  """tensorboardX writer factory for remote prefixes."""

  def open(self, path: str) -> _EpathEventFile:
    return _EpathEventFile(path)

  def directory_check(self, path: str) -> None:
    epath.Path(path).mkdir(parents=True, exist_ok=True)


def _import_tensorboardx():
  """tensorboardX, imported without PyTorch. Where torch is installed, tensorboardX imports it only to accept
  torch tensors, 2 s of every training command's start on 2 cores; the writer here is given Python floats. A
  None in sys.modules makes `import torch` raise the ImportError tensorboardX expects where torch is absent."""
  blocked = 'torch' not in sys.modules
  if blocked:
    sys.modules['torch'] = None
  try:
    import tensorboardX  # pylint: disable=g-import-not-at-top
    from tensorboardX import record_writer  # pylint: disable=g-import-not-at-top
  finally:
    if blocked and sys.modules.get('torch', 0) is None:
      del sys.modules['torch']  # the user's own `import torch` works as before
  return tensorboardX.SummaryWriter, record_writer


def _summary_writer(logdir: epath.Path):
  SummaryWriter, record_writer = _import_tensorboardx()  # pylint: disable=invalid-name
  for scheme in REMOTE_SCHEMES:
    record_writer.register_writer_factory(scheme, _EpathEventFiles())
  return SummaryWriter(str(logdir))


def _cannot_write(path: epath.Path, error: OSError) -> UserError:
  return UserError(f'{str(path)!r} cannot be written ({error.strerror or error}); free space or fix the folder, '
                   'then run the same command to resume')


class MetricWriter:
  """TensorBoard scalars and WORKDIR/metrics.jsonl, one JSON object per write.

  metrics.jsonl is the run's history: resumed from step S, it keeps the records up to S (rewritten
  once, atomically, at start) and continues from there, so an interrupted and resumed run logs each
  step once. A local file is appended to, a line a write (a crash can tear only the last line, which
  read_jsonl drops); on object stores, which cannot append, it is rewritten whole at each write.
  """

  def __init__(self, workdir: workdir_lib.Workdir, resumed_step: int = 0):
    self._enabled = distributed.is_leader()
    if not self._enabled:
      return
    self._path = workdir.file('metrics.jsonl')
    self._records = [r for r in read_jsonl(self._path) if r.get('step', 0) <= resumed_step]
    self._appendable = '://' not in str(self._path)
    workdir_lib.write_text_atomically(self._path, ''.join(json.dumps(r) + '\n' for r in self._records))
    self._tb_dir = workdir.file('tensorboard')
    self._tb = _summary_writer(self._tb_dir)

  def write(self, step: int, metrics: dict) -> None:
    if not self._enabled:
      return
    for k, v in metrics.items():
      self._tb.add_scalar(k, v, step)
    record = {'step': step, **metrics}
    if self._appendable:
      try:
        with open(self._path, 'a', encoding='utf-8') as f:
          f.write(json.dumps(record) + '\n')
      except OSError as e:
        raise _cannot_write(self._path, e) from None
      return
    self._records.append(record)
    workdir_lib.write_text_atomically(self._path, ''.join(json.dumps(r) + '\n' for r in self._records))

  def close(self, failing: bool = False) -> None:
    """Flushes TensorBoard's events. `failing` (an error is already on its way out): a flush that
    fails too (the same full disk) does not replace that error, which comes first."""
    if not self._enabled:
      return
    try:
      self._tb.close()
    except OSError as e:
      if failing:
        return
      raise _cannot_write(self._tb_dir, e) from None


def read_jsonl(path: epath.Path) -> list[dict]:
  """The records of a JSON-lines file; a torn last line (a crash mid-write) or a damaged one is dropped."""
  if not path.exists():
    return []
  records = []
  for line in path.read_bytes().splitlines():
    try:
      records.append(json.loads(line.decode('utf-8')))
    except ValueError:  # a torn line, or bytes that are not UTF-8 (a damaged file): not a record
      continue
  return records


class Progress:
  """Training throughput and the time left: the steps left at the rate of training time alone, plus
  what the caller says the evaluations still to run will take.

  The loop pauses the clock around evaluations and saves (paused()) and restarts it once the first
  dispatch after a start or a resume has run (warmed_up(): that one compiled). The rate printed is
  the last interval's; the ETA divides the steps left by the rate over every measured interval, so
  neither jumps after an evaluation, a save or a resume.
  """

  def __init__(self, start_step: int, total_steps: int, tokens_per_step: int):
    self._total = total_steps
    self._tokens_per_step = tokens_per_step
    self._last_step, self._last_time, self._paused = start_step, time.perf_counter(), 0.0
    self._measured_steps, self._measured_seconds = 0, 0.0

  def warmed_up(self, step: int) -> None:
    """The first dispatch is done (its compilation included): measure from here."""
    self._last_step, self._last_time, self._paused = step, time.perf_counter(), 0.0

  @contextlib.contextmanager
  def paused(self):
    """Time spent inside (evaluation, checkpoints) is not training time."""
    began = time.perf_counter()
    try:
      yield
    finally:
      self._paused += time.perf_counter() - began

  def seconds_per_step(self) -> float:
    """Training's measured seconds a step so far (0 before the first report)."""
    return self._measured_seconds / self._measured_steps if self._measured_steps else 0.0

  def report(self, step: int, seconds_left: float | None = None, after_training: float = 0.0) -> dict:
    """The rate since the last report and the ETA: the steps left at the measured rate plus
    `after_training` (the evaluations still to run), or the time budget's `seconds_left` when that
    comes first."""
    now = time.perf_counter()
    steps, seconds = step - self._last_step, max(now - self._last_time - self._paused, 1e-9)
    self._last_step, self._last_time, self._paused = step, now, 0.0
    self._measured_steps += steps
    self._measured_seconds += seconds
    steps_per_sec = steps / seconds
    overall = self._measured_steps / self._measured_seconds
    eta = (self._total - step) / overall + after_training if overall > 0 else float('inf')
    if seconds_left is not None:
      eta = min(eta, max(seconds_left, 0.0))
    return {'steps_per_sec': steps_per_sec, 'tokens_per_sec': steps_per_sec * self._tokens_per_step,
            'eta': format_duration(eta) if eta != float('inf') else '?'}


def log(message: str) -> None:
  """A progress line with the time, printed by the leader process only."""
  if distributed.is_leader():
    print(time.strftime('%H:%M:%S ') + message, flush=True)


def warn(message: str) -> None:
  """A one-line warning on stderr, from the leader process only."""
  if distributed.is_leader():
    print(f'warning: {message}', file=sys.stderr, flush=True)


def note(message: str) -> None:
  """A one-line note on stderr (something the user may want to know, not a problem), leader only."""
  if distributed.is_leader():
    print(f'note: {message}', file=sys.stderr, flush=True)
