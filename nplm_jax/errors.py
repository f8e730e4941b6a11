"""Errors a user can fix: main prints their message as one line, with no traceback."""


class UserError(ValueError):
  """Bad input; the message names the bad value and the fix."""


def a_kind(value) -> str:
  """'an int', 'a NoneType': a value's type (or a type) named for a message."""
  name = (value if isinstance(value, type) else type(value)).__name__
  return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


class SaveFailed(UserError):
  """A checkpoint could not be written (a full disk, a read-only or lost folder). Here, with the errors,
  so that the command layer tells it apart without importing training."""


class UnknownWordError(UserError, KeyError):
  """A word not in the vocabulary: a KeyError too, as gensim's KeyedVectors raise for one."""

  def __str__(self) -> str:  # KeyError's own would quote the message
    return str(self.args[0]) if self.args else ''
