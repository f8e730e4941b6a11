"""Text a user hands a command (a file or '-' for stdin), read as lines of UTF-8, with one-line errors."""

import os
import sys

from nplm_jax.errors import UserError


def read_lines(path: str | None, flag: str) -> list[str]:
  """The lines of `path` ('-' = stdin); one line of error for a missing, unreadable or empty text."""
  if not path:
    raise UserError(f"{flag} is required; give a text file, or '-' to read standard input")
  try:
    if path == '-':
      text = sys.stdin.buffer.read().decode('utf-8')
    else:
      if os.path.isdir(path):
        raise UserError(f'{flag}={path!r} is a folder; give a text file')
      if not os.path.isfile(path):
        raise UserError(f'{flag}={path!r} does not exist; give an existing text file')
      with open(path, 'rb') as f:
        text = f.read().decode('utf-8')
  except UnicodeDecodeError as e:
    raise UserError(f'{flag}={path!r} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); '
                    'convert it, e.g. iconv -f latin1 -t utf-8') from None
  except OSError as e:
    raise UserError(f'{flag}={path!r} cannot be read ({e.strerror}); check its permissions') from None
  if not text.strip():
    raise UserError(f'{flag}={path!r} is empty; give text to work on')
  return text.splitlines()
