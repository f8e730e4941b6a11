"""Errors a user can fix: main prints their message as one line, with no traceback."""


class UserError(ValueError):
  """Bad input; the message names the bad value and the fix."""
