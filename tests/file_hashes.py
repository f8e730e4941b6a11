"""The bytes of a folder's files as hashes, to show that a command left a folder as it found it."""

import hashlib
import os


def of_folder(folder) -> dict[str, str]:
  """Every file under `folder` (its path relative to the folder) and the SHA-256 of its bytes."""
  out = {}
  for root, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
  return out
