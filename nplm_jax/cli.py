"""Command-line parsing shared by the entry points: bad flags become one line, not a traceback."""

import argparse
import os
import re
import sys

from absl import flags
from absl import logging

from nplm_jax.errors import SaveFailed, UserError

# JAX and the process layer are imported where an error is reported (exit_with_error), not here: the commands
# parse and check their flags with this module before the imports that take seconds.

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
  detail = re.sub(r'^[\w.]*(Error|Exception): ', '', detail)  # the cause's type adds nothing for a user
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
  from nplm_jax.parallel import backend  # pylint: disable=g-import-not-at-top
  rest = parse_flags(argv)
  backend.configure(FLAGS.config)
  return rest


def exit_with_error(error: Exception, config=None) -> None:
  """Prints a user's error as one line, once per job, and exits 1.

  An error every process found (agreed on, or before the processes joined) is the leader's to
  report; any other error is reported by the process that found it.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from nplm_jax.parallel import distributed  # pylint: disable=g-import-not-at-top
  every_process = isinstance(error, distributed.AgreedError) or not jax.distributed.is_initialized()
  alone = isinstance(error, distributed.JoinError)  # found by this process only, before any could agree
  if alone or not every_process or distributed.declared_process_id(config) == 0:
    print(f'error: {error}', file=sys.stderr, flush=True)
  if isinstance(error, SaveFailed):  # Orbax's save threads would print tracebacks at shutdown
    sys.stdout.flush()
    os._exit(1)  # pylint: disable=protected-access
  sys.exit(1)


class ArgumentParser(argparse.ArgumentParser):
  """argparse for the commands that take no --config (the trained-model tools, sweeps): a bad
  command line is one 'error:' line, like every other entry point's, and --help shows each flag's
  default. `module` names the program as the user called it (program()); subcommands' parsers are
  of this class too (parser_class), each with its own --help."""

  def __init__(self, module: str | None = None, **kwargs):
    kwargs.setdefault('formatter_class', HelpFormatter)
    if module is not None:  # subcommands' parsers (embeddings neighbours, ...) get their prog from argparse
      kwargs['prog'] = program(module)
    super().__init__(**kwargs)

  def error(self, message):
    sys.exit(f'error: {message} (see {self.prog} --help)')


def module_doc(module: str) -> str:
  """A module's docstring read from its source, not imported: a command's --help and its early checks need
  its tool's text, not the tool's imports (JAX's take seconds)."""
  import ast  # pylint: disable=g-import-not-at-top
  import importlib.util  # pylint: disable=g-import-not-at-top
  with open(importlib.util.find_spec(module).origin, encoding='utf-8') as f:
    return ast.get_docstring(ast.parse(f.read()), clean=False) or ''


def add_devices_flag(parser: argparse.ArgumentParser) -> None:
  """--devices for the commands that load a trained model (nplm_jax.load's devices)."""
  parser.add_argument('--devices', type=int, default=None, metavar='N',
                      help="how many of the backend's devices to run on, whatever mesh the model was trained on "
                           '(default: all, on the mesh of its training where that fits them)')


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """--help with each optional flag's default (unless its help says it), and the module
  docstring's layout (its usage lines) kept."""

  def _get_help_string(self, action):
    text = action.help or ''
    shown = action.default not in (None, '', False, [], argparse.SUPPRESS) and not action.required
    if shown and 'default' not in text and action.option_strings:
      text += ' (default: %(default)s)'
    return text


CONFIG_EPILOG = ('--config.SECTION.KEY=VALUE sets any key of the config (e.g. --config.train.batch_size=512); '
                 '--print_config (nplm-train) lists the keys a run sets with their values and meanings (=all: the '
                 'tuning knobs too); defaults and comments: '
                 'nplm_jax/config.py')


class ConfigArgumentParser(ArgumentParser):
  """ArgumentParser for the commands that take an experiment config: --config=FILE[:VARIANT] and any
  number of --config.SECTION.KEY=VALUE overrides, read by ml_collections' config_flags (its types,
  checks and messages) on a FlagValues of their own; args.config is the resolved ConfigDict."""

  def __init__(self, module: str, config_help: str, **kwargs):
    kwargs.setdefault('epilog', CONFIG_EPILOG)
    super().__init__(module, **kwargs)
    self.add_argument('--config', required=True, metavar='FILE[:VARIANT]', help=config_help)

  def parse_args(self, args=None, namespace=None):  # pylint: disable=signature-differs
    argv = with_experiment_files_found(sys.argv[1:] if args is None else list(args))
    overrides = [a for a in argv if a.startswith('--config.')]
    for at, flag in enumerate(argv):
      if flag.startswith('--config.') and '=' not in flag:
        value = argv[at + 1] if at + 1 < len(argv) and not argv[at + 1].startswith('-') else 'VALUE'
        sys.exit(f"error: {flag} has no value; write {flag}={value} (with '=', not a space)")
    parsed = super().parse_args([a for a in argv if not a.startswith('--config.')], namespace)
    parsed.config_args = [f'--config={parsed.config}', *overrides]  # as given (the file found)
    parsed.config = load_config(parsed.config, overrides)
    return parsed


def load_config(config_arg: str, overrides: list[str]):
  """The config of --config=FILE[:VARIANT] with its --config.* overrides; one 'error:' line if bad."""
  try:
    return config_from_flags(config_arg, overrides)
  except UserError as e:
    sys.exit(f'error: {e}')


def config_from_flags(config_arg: str, overrides: list[str]):
  """What load_config reads, raising UserError (launch.sweep checks every point before running any)."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  values = flags.FlagValues()
  argv = with_experiment_files_found(['command', f'--config={config_arg}', *overrides])
  # sys_argv: the override flags config_flags registers are those of this argv (default: sys.argv)
  config_flags.DEFINE_config_file('config', None, 'experiment config', flag_values=values, lock_config=True,
                                  sys_argv=argv)
  try:
    values(argv)
    config = values.config
    config.get('seed')  # config_flags defers loading errors to the first use
  except Exception as e:  # pylint: disable=broad-except  # any parse failure is the user's input
    raise UserError(flag_error_line(e, argv)) from None
  logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO; progress is printed
  return config
