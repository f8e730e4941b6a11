"""The run folder (workdir) on any filesystem: its JSON files, made and read through etils.epath.

A workdir may be a local folder or a bucket path (gs://bucket/run): every read and write of it
goes through epath.Path, which Orbax uses for the checkpoints too. In a multi-process job every
process reads these files and only the leader (process 0) writes them.
"""

import json
import os

from etils import epath

from nplm_jax import distributed
from nplm_jax.errors import UserError


def as_path(path: str | os.PathLike) -> epath.Path:
  """An absolute epath.Path: remote paths (scheme://...) as given, local ones made absolute."""
  text = os.fspath(path)
  return epath.Path(text if '://' in text else os.path.abspath(text))


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
    text = json.dumps(value, indent=indent, allow_nan=False) + '\n'
    write_text_atomically(self.file(name), text)


def write_text_atomically(path: epath.Path, text: str) -> None:
  """Readers see the old file or the new one, never a half-written one (on object stores a
  single write is atomic already)."""
  temporary = path.parent / f'.{path.name}.tmp{os.getpid()}'
  temporary.write_text(text)
  temporary.replace(path)
