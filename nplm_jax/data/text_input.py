"""Text a user hands a command (a file or '-' for stdin), read as lines of UTF-8 and checked as training
checks a corpus (corpora.check_text_line: no control characters), with one-line errors whose hint fits
what the bytes look like (a binary file, UTF-16, Latin-1)."""

import os
import sys

from nplm_jax.data import corpora
from nplm_jax.errors import UserError


def check_path(path: str | None, flag: str) -> None:
  """One line of error for a text path that is missing, a folder or not there ('-' = stdin is fine): what can be
  said before anything is read."""
  if not path:
    raise UserError(f"{flag} is required; give a text file, or '-' to read standard input")
  if path != '-' and os.path.isdir(path):
    raise UserError(f'{flag}={path!r} is a folder; give a text file')
  if path != '-' and not os.path.isfile(path):
    raise UserError(f'{flag}={path!r} does not exist; give an existing text file')


def read_lines(path: str | None, flag: str) -> list[str]:
  """The lines of `path` ('-' = stdin); one line of error for a missing, unreadable, empty, binary or
  non-UTF-8 text."""
  check_path(path, flag)
  source = f'{flag}={path!r}'  # the messages read: --text='x.txt' is not UTF-8 text ...
  try:
    if path == '-':
      raw = sys.stdin.buffer.read()
    else:
      with open(path, 'rb') as f:
        raw = f.read()
    text = raw.decode('utf-8-sig')  # a byte-order mark at the start is not a word
  except UnicodeDecodeError as e:
    raise corpora.not_utf8_error(e, path, source, head=raw[:corpora.HEAD_BYTES]) from None
  except OSError as e:
    raise UserError(f'{flag}={path!r} cannot be read ({e.strerror}); check its permissions') from None
  if not text.strip():
    raise UserError(f'{flag}={path!r} is empty; give text to work on')
  lines = text.splitlines()
  head = raw[:corpora.HEAD_BYTES]
  for number, line in enumerate(lines, 1):
    corpora.check_text_line(line, path, number, source, head=head)
  return lines
