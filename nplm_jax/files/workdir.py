"""The run folder (workdir) on any filesystem: its JSON files, made and read through etils.epath.

A workdir may be a local folder or a bucket path (gs://bucket/run): every read and write of it
goes through epath.Path, which Orbax uses for the checkpoints too. In a multi-process job every
process reads these files and only the leader (process 0) writes them.
"""

import hashlib
import json
import os
import socket
import time

from etils import epath

from nplm_jax.parallel import distributed
from nplm_jax import cleanup
from nplm_jax.errors import UserError


def as_path(path: str | os.PathLike) -> epath.Path:
  """An absolute epath.Path: remote paths (scheme://...) as given, local ones made absolute."""
  text = os.fspath(path)
  return epath.Path(text if '://' in text else os.path.abspath(text))


# What a training workdir holds: the run's own files (RUN_FILES, written once config.json is) and the
# folders and lock that exist from the start (checkpoints, best/, the TensorBoard events, a profile).
RUN_FILES = frozenset({'config.json', 'corpus.json', 'vocab.tsv', 'tokenizer.json', 'metrics.jsonl', 'results.json',
                       'mix_results.json', 'added_words.json', 'integrity.json'})
# The workdir's integrity record: that its checkpoints carry checksums, and the SHA-256 of the files the
# tools read beside them (vocab.tsv, tokenizer.json), itself closed by a digest of its content. Whether
# a checkpoint must carry checksums is known from here and from every other step's metadata, so one
# damaged or deleted file cannot make a check pass unseen.
INTEGRITY_FILE = 'integrity.json'
# The key of each checkpoint step's custom metadata (its _CHECKPOINT_METADATA) that holds its arrays' checksums.
CHECKPOINT_CHECKSUMS_KEY = 'checksums'
# Set to 1 to read a workdir's recorded files as they are when their record is gone (and record them anew).
ACCEPT_UNRECORDED_FILES = 'NPLM_ACCEPT_UNRECORDED_FILES'
# A launcher's log beside the run (launch.sweep appends the point's output to log.txt before training
# starts): training never writes it, so it is welcome with or without a config.json.
LAUNCHER_FILES = frozenset({'log.txt'})
RUN_ENTRIES = RUN_FILES | LAUNCHER_FILES | {'lock', 'checkpoints', 'best', 'tensorboard', 'profile'}


def check_not_a_file(path: str | os.PathLike) -> None:
  """Refuses a --workdir that names an existing file, in one line."""
  if as_path(path).exists() and not as_path(path).is_dir():
    raise UserError(f'--workdir={str(path)!r} is a file, not a folder; give a new or empty folder (the file was not '
                    'changed)')


class Workdir:
  """A run's folder: config.json, results.json, metrics and the checkpoints below it."""

  def __init__(self, path: str | os.PathLike):
    self.path = as_path(path)

  def __str__(self) -> str:
    return str(self.path)

  def file(self, name: str) -> epath.Path:
    return self.path / name

  def prepare(self) -> None:
    """Creates the folder and proves it writable, without touching what is already there."""
    try:
      self.path.mkdir(parents=True, exist_ok=True)
      probe = self.file(f'.write_probe_{os.getpid()}_{distributed.declared_process_id()}')
      probe.write_text('ok')
      probe.unlink()
    except OSError as e:
      raise UserError(f'--workdir={str(self.path)!r} cannot be written ({e.strerror or e}); '
                      'choose a folder you can write to') from None

  def check_only_ours(self) -> None:
    """Refuses a folder holding files this program did not write (training would overwrite or append
    to them): every entry must be one of a run's, and the run files need the run's config.json."""
    if not self.path.exists():
      return
    check_not_a_file(self.path)
    names = {p.name for p in self.path.iterdir()}
    foreign = sorted(n for n in names if n not in RUN_ENTRIES and not n.startswith('.write_probe_'))
    if 'config.json' not in names:
      foreign = sorted(set(foreign) | (names & RUN_FILES))  # a run's names, but no run of ours made them
    if foreign:
      shown = ', '.join(foreign[:5]) + (f' and {len(foreign) - 5} more' if len(foreign) > 5 else '')
      raise UserError(f'--workdir={str(self.path)!r} holds files this program did not write ({shown}); use a new or '
                      'empty --workdir (nothing in this one was changed)')

  def file_digest(self, name: str) -> str | None:
    path = self.file(name)
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None

  def write_integrity(self, files: tuple[str, ...]) -> None:
    """Records that checkpoints carry checksums and the digests of `files` (leader only). An existing
    record is checked instead, so a file damaged between runs is not recorded as good; a record gone from
    a workdir whose checkpoints carry checksums is not written anew over files it can no longer check."""
    if self.integrity() is not None:
      self.check_files(files)
      return
    self._refuse_unrecorded(files)
    record = {'format': 1, 'checkpoint_checksums': True, 'files': {n: self.file_digest(n) for n in files}}
    self.write_json(INTEGRITY_FILE, {**record, 'digest': _record_digest(record)})

  def integrity(self) -> dict | None:
    """The integrity record; None for a workdir written before it; one line for a damaged one."""
    try:
      record = self.read_json(INTEGRITY_FILE)
    except UserError:
      record = {'digest': None}
    if record is None:
      return None
    body = {k: v for k, v in record.items() if k != 'digest'}
    if record.get('digest') != _record_digest(body):
      raise UserError(f'{self.file(INTEGRITY_FILE)} is damaged (its digest does not match); restore it from a copy '
                      'of the workdir')
    return body

  def check_files(self, files: tuple[str, ...]) -> None:
    """One line when a recorded file changed since training wrote it (or was deleted), or when the record
    itself is gone from a workdir whose checkpoints were saved with checksums (by code that records)."""
    record = self.integrity()
    if record is None:
      self._refuse_unrecorded(files)
      return
    for name in files:
      expected = record.get('files', {}).get(name)
      if expected is not None and self.file_digest(name) != expected:
        raise UserError(f'{self.file(name)} differs from the file training wrote (its SHA-256 in {INTEGRITY_FILE}); '
                        'restore it from a copy of the workdir')

  def saved_with_checksums(self) -> bool:
    """Whether any step of best/ or checkpoints/ was saved with its arrays' checksums, read from the steps'
    own metadata files (no checkpoint library, no device)."""
    for folder in ('best', 'checkpoints'):
      root = self.file(folder)
      for step in (root.iterdir() if root.is_dir() else ()):
        try:
          custom = json.loads((step / '_CHECKPOINT_METADATA').read_text()).get('custom_metadata') or {}
        except (OSError, ValueError, AttributeError):
          continue
        if isinstance(custom, dict) and custom.get(CHECKPOINT_CHECKSUMS_KEY):
          return True
    return False

  def _refuse_unrecorded(self, files: tuple[str, ...]) -> None:
    """One line when `files` exist but their record is gone from a workdir that keeps one (its checkpoints
    carry checksums), unless ACCEPT_UNRECORDED_FILES=1 says to take them as they are."""
    present = [n for n in files if self.file(n).exists()]
    if not present or os.environ.get(ACCEPT_UNRECORDED_FILES) == '1' or not self.saved_with_checksums():
      return
    raise UserError(f'{" and ".join(present)} in {self.path} cannot be trusted: their record {INTEGRITY_FILE} is '
                    'missing, though the checkpoints were saved with checksums; restore it from a copy of the '
                    f'workdir, or set {ACCEPT_UNRECORDED_FILES}=1 to accept the files as they are')

  def remove_if_unused(self) -> None:
    """Removes the folder when nothing but this run's own lock is in it (a start that failed)."""
    if self.path.exists() and {p.name for p in self.path.iterdir()} <= {'lock'}:
      self.path.rmtree()

  def read_json(self, name: str) -> dict | None:
    """A JSON file of the workdir, or None when it does not exist."""
    path = self.file(name)
    if not path.exists():
      return None
    try:
      return json.loads(path.read_text())
    except (OSError, ValueError) as e:
      raise UserError(f'{str(path)!r} cannot be read ({e}); restore or delete it') from None

  def write_json(self, name: str, value: dict, indent: int | None = 2) -> None:
    """Writes a JSON file atomically (a temporary file, then a rename), on the leader only.

    Never writes NaN or infinity: JSON has no such numbers, and a result that holds one is a bug.
    """
    if not distributed.is_leader():
      return
    self.write_text(name, json.dumps(value, indent=indent, allow_nan=False) + '\n')

  def write_text(self, name: str, text: str) -> None:
    """Writes a text file of the workdir atomically, on the leader only."""
    if distributed.is_leader():
      write_text_atomically(self.file(name), text)


def _record_digest(record: dict) -> str:
  return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def write_text_atomically(path: epath.Path, text: str) -> None:
  """Readers see the old file or the new one, never a half-written one (on object stores a
  single write is atomic already). A write that fails (a full disk, a read-only or lost folder) is
  one line naming the path and the cause, and leaves no temporary file."""
  temporary = path.parent / f'.{path.name}.tmp{os.getpid()}'
  try:
    temporary.write_text(text)
    temporary.replace(path)
  except OSError as e:
    try:
      temporary.unlink(missing_ok=True)
    except OSError:
      pass
    raise UserError(f'{str(path)!r} cannot be written ({e.strerror or e}); free space or choose a folder you can '
                    'write to') from None


def output_file(path: str, flag: str) -> epath.Path:
  """The path of a file a command will write, checked before any work: not a folder, its folder
  made if missing; one line naming the flag otherwise."""
  where = as_path(path)
  if where.is_dir():
    raise UserError(f'{flag}={path!r} is a folder; give the path of a file to write')
  try:
    where.parent.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UserError(f'{flag}={path!r}: its folder cannot be made ({e.strerror or e}); choose another path') from None
  return where


def output_folder(path: str, flag: str) -> epath.Path:
  """A new or empty folder a command will write into, checked before any work (not made yet)."""
  where = as_path(path)
  if where.exists() and not where.is_dir():
    raise UserError(f'{flag}={path!r} is a file; give a new folder')
  if where.exists() and any(where.iterdir()):
    raise UserError(f'{flag}={path!r} is not empty; give a new folder')
  ancestor = where.parent
  while not ancestor.exists() and ancestor != ancestor.parent:
    ancestor = ancestor.parent
  if not ancestor.is_dir():
    raise UserError(f'{flag}={path!r} lies under {str(ancestor)!r}, which is a file; choose another path')
  return where


class Lock:
  """One training per workdir: WORKDIR/lock names its holder (host, process id, since when).

  A second training on the workdir is refused in one line; the lock of a process that is no longer
  running on this host is taken over. In a multi-process job the leader holds it for all.
  """

  def __init__(self, workdir: Workdir):
    self.path = workdir.file('lock')
    self._held = False

  def acquire(self) -> dict | None:
    """Takes the lock; returns the holder of a stale lock it took over (None if there was none)."""
    me = {'host': socket.gethostname(), 'pid': os.getpid(), 'since': time.strftime('%Y-%m-%d %H:%M:%S')}
    holder = self._holder()
    if holder is not None:
      if not _is_stale(holder):
        raise UserError(f'{str(self.path.parent)!r} is in use by process {holder.get("pid")} on '
                        f'{holder.get("host")} (since {holder.get("since")}); wait for it to end, or delete '
                        f'{str(self.path)!r} if that process is gone')
      self.path.unlink(missing_ok=True)
    if not _create_exclusively(self.path, json.dumps(me)):
      raise UserError(f'{str(self.path.parent)!r} was just taken by another training; use another --workdir')
    self._held = True
    cleanup.register(self.release)  # released even when a signal ends the process at once
    return holder

  def release(self) -> None:
    if self._held:
      self.path.unlink(missing_ok=True)
      self._held = False
    cleanup.unregister(self.release)

  def _holder(self) -> dict | None:
    try:
      return json.loads(self.path.read_text())
    except FileNotFoundError:
      return None
    except (OSError, ValueError):
      return {}  # unreadable: treated as stale below (a crash while writing it)


def _is_stale(holder: dict) -> bool:
  """True when the holder is gone: a process of this host that no longer runs, or no holder at all."""
  if not holder.get('pid'):
    return True
  if holder.get('host') != socket.gethostname():
    return False  # cannot tell: assume it runs
  try:
    os.kill(int(holder['pid']), 0)
  except ProcessLookupError:
    return True
  except PermissionError:
    return False  # another user's process
  return False


def _create_exclusively(path: epath.Path, text: str) -> bool:
  """Creates a file that must not exist yet; False when another process created it first.

  Exclusive on local filesystems; on object stores a create is a write (the last one wins).
  """
  if '://' in str(path):
    path.write_text(text)
    return True
  try:
    descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
  except FileExistsError:
    return False
  with os.fdopen(descriptor, 'w') as f:
    f.write(text)
  return True
