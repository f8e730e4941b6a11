"""Errors a user can fix: main prints their message as one line, with no traceback."""


class UserError(ValueError):
  """Bad input; the message names the bad value and the fix."""


class SaveFailed(UserError):
  """A checkpoint could not be written (a full disk, a read-only or lost folder). Here, with the errors,
  so that the command layer tells it apart without importing training."""
