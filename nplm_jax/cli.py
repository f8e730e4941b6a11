"""Command-line parsing shared by the entry points: bad flags become one line, not a traceback."""

import argparse
import os
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


def program(module: str) -> str:
  """How the user called a command: its console script (nplm-score) or python -m MODULE."""
  called = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ''
  return called if called.startswith('nplm-') else f'python -m {module}'


def with_experiment_files_found(argv: list[str]) -> list[str]:
  """--config=experiments/NAME.py[:variant] resolved from any directory (config.experiment_file)."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  out = []
  for arg in argv:
    if arg.startswith('--config='):
      path, colon, variant = arg[len('--config='):].partition(':')
      arg = f'--config={config_lib.experiment_file(path)}{colon}{variant}'
    out.append(arg)
  return out


HELP_FLAGS = ('--help', '-h', '--helpshort', '-?')


def print_help(module: str, doc: str) -> None:
  """--help of a command with absl flags: how it is called, what it does, each of its flags with its
  default, and (with --config) how to set any config key. absl's own --help lists only the flags
  of the script file, which for a console script (nplm-train) is none."""
  print(f'usage: {program(module)} [--flag=value ...]\n')
  print(doc.strip() + '\n')
  print('flags:')
  ours = [f for name, flags_of in FLAGS.flags_by_module_dict().items()
          if not name.startswith(('absl', 'jax', 'orbax')) for f in flags_of]
  for flag in sorted({f.name: f for f in ours}.values(), key=lambda f: f.name):
    default = '' if flag.default in (None, '', False) or flag.name == 'config' else f' (default: {flag.default_as_str})'
    required = ' (required)' if flag.name in REQUIRED.get(module, ()) else ''
    print(f'  --{flag.name}: {flag.help}{required}{default}')
  if 'config' in FLAGS:
    print('\n  --config.SECTION.KEY=VALUE: set any key of the config (e.g. --config.train.batch_size=512); '
          '--print_config lists\n    every key with its value and meaning (defaults and comments: nplm_jax/config.py)')


# Flags a command requires (absl marks them by a validator, which --help cannot read back).
REQUIRED = {'nplm_jax.main': ('config',), 'nplm_jax.ngram': ('config',), 'nplm_jax.prepare': ('config', 'output'),
            'nplm_jax.mix': ('workdir',)}


def flags_parser(module: str, doc: str, configure_backend: bool = False):
  """The flags_parser for app.run of a command: --help as print_help, then parse_flags."""
  def parse(argv: list[str]) -> list[str]:
    if any(a in HELP_FLAGS for a in argv[1:]):
      print_help(module, doc)
      sys.exit(0)
    return parse_flags_and_configure_backend(argv) if configure_backend else parse_flags(argv)
  return parse


def parse_flags(argv: list[str]) -> list[str]:
  argv = with_experiment_files_found(argv)
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
  """argparse for the commands that take no --config (the trained-model tools, sweeps): a bad
  command line is one 'error:' line, like every other entry point's, and --help shows each flag's
  default. `module` names the program as the user called it (program())."""

  def __init__(self, module: str, **kwargs):
    kwargs.setdefault('formatter_class', HelpFormatter)
    super().__init__(prog=program(module), **kwargs)

  def error(self, message):
    sys.exit(f'error: {message} (see {self.prog} --help)')


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """--help with each optional flag's default (unless its help says it), and the module
  docstring's layout (its usage lines) kept."""

  def _get_help_string(self, action):
    text = action.help or ''
    shown = action.default not in (None, '', False, [], argparse.SUPPRESS) and not action.required
    if shown and 'default' not in text and action.option_strings:
      text += ' (default: %(default)s)'
    return text


class SubcommandParser(argparse.ArgumentParser):
  """A subcommand's parser (embeddings neighbours, plot curves, ...): its own --help, one-line errors."""

  def __init__(self, **kwargs):
    kwargs.setdefault('formatter_class', HelpFormatter)
    super().__init__(**kwargs)

  def error(self, message):
    sys.exit(f'error: {message} (see {self.prog} --help)')
