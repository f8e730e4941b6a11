"""Command-line parsing shared by the entry points: bad flags become one line, not a traceback."""

import argparse
import re
import sys

import jax
from absl import flags
from absl import logging

from nplm_jax import distributed

FLAGS = flags.FLAGS


def flag_error_line(error: Exception, argv: list[str]) -> str:
  """One line for a bad command line: an unknown --config.* key, a bad value, a broken or missing
  config file, or a missing flag."""
  config_arg = next((a for a in argv if a.startswith('--config=')), '--config')
  if isinstance(error, (AttributeError, KeyError)):
    text = str(error.args[0] if error.args else error)
    text = text.replace('\\n', '\n').replace("\\'", "'")  # a leaf key's message arrives escaped (repr'd twice)
    lines = text.splitlines() or ['']
    key = lines[0].strip('"\'\\ ')
    hint = next((line.strip().rstrip("'") for line in lines[1:] if 'Did you mean' in line), '')
    bad = [a.split('=')[0] for a in argv if a.startswith('--config.') and re.search(rf'\.{re.escape(key)}\b', a)]
    where = bad[0] if bad else key
    suggestion = f' ({hint[0].lower()}{hint[1:]})' if hint else ''
    return (f'{where} is not a config key{suggestion}; check its spelling against the config file '
            '(keys: nplm_jax/config.py)')
  if isinstance(error, SyntaxError):
    return f'{config_arg}: syntax error at line {error.lineno} of {error.filename}: {error.msg}'
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  detail = lines[-1] if lines else type(error).__name__  # config_flags puts the cause last
  detail = re.sub(r'^[A-Za-z.]*(Error|Exception): ', '', detail)  # the cause's type adds nothing for a user
  return f'{config_arg}: {detail}' if isinstance(error, OSError) or 'config file' in str(error) else detail


def parse_flags(argv: list[str]) -> list[str]:
  try:
    rest = FLAGS(argv)
    if 'config' in FLAGS:
      FLAGS.config.get('seed')  # config_flags defers loading errors to the first use
  except Exception as e:  # pylint: disable=broad-except  # any parse failure is the user's input
    sys.exit(f'error: {flag_error_line(e, argv)}')
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO; progress is printed
  return rest


def parse_flags_and_configure_backend(argv: list[str]) -> list[str]:
  """parse_flags, then the backend settings of --config (backend.configure) before JAX starts its
  backends: the flags_parser of scripts that touch devices outside main (the benchmarks)."""
  from nplm_jax import backend  # pylint: disable=g-import-not-at-top
  rest = parse_flags(argv)
  backend.configure(FLAGS.config)
  return rest


def exit_with_error(error: Exception, config=None) -> None:
  """Prints a user's error as one line, once per job, and exits 1.

  An error every process found (agreed on, or before the processes joined) is the leader's to
  report; any other error is reported by the process that found it.
  """
  every_process = isinstance(error, distributed.AgreedError) or not jax.distributed.is_initialized()
  if not every_process or distributed.declared_process_id(config) == 0:
    print(f'error: {error}', file=sys.stderr, flush=True)
  sys.exit(1)


class ArgumentParser(argparse.ArgumentParser):
  """argparse for the trained-model tools, whose --verbosity is theirs, not absl's: a bad command
  line is one 'error:' line, like every other entry point's."""

  def error(self, message):
    sys.exit(f'error: {message} (see --help)')
