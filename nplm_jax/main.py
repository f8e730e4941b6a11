"""Entry point: python -m nplm_jax.main --config=experiments/brown.py:mlp1 --workdir=DIR"""

import re
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from nplm_jax import distributed
from nplm_jax import sharding
from nplm_jax import train
from nplm_jax.errors import UserError

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Experiment config file, e.g. experiments/brown.py:mlp1.',
                                lock_config=True)
flags.DEFINE_string('workdir', None, 'Folder for checkpoints, metrics and results.json.')
flags.mark_flags_as_required(['config', 'workdir'])


def flag_error_line(error: Exception, argv: list[str]) -> str:
  """One line for a bad command line: an unknown --config.* key, a bad value or a missing flag."""
  if isinstance(error, (AttributeError, KeyError)):
    key = str(error).strip('"\'')
    bad = [a.split('=')[0] for a in argv if a.startswith('--config.') and re.search(rf'\.{re.escape(key)}\b', a)]
    where = bad[0] if bad else key
    return (f'{where} is not a config key; check its spelling against the config file '
            '(keys: nplm_jax/config.py)')
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  detail = lines[-1] if lines else type(error).__name__  # config_flags puts the cause last
  config_arg = next((a for a in argv if a.startswith('--config=')), '--config')
  return f'{config_arg}: {detail}' if isinstance(error, OSError) or 'config file' in str(error) else detail


def parse_flags(argv: list[str]) -> list[str]:
  try:
    rest = FLAGS(argv)
    FLAGS.config.get('seed')  # config_flags defers loading errors to the first use
    return rest
  except Exception as e:  # pylint: disable=broad-except  # any parse failure is the user's input
    sys.exit(f'error: {flag_error_line(e, argv)}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO; progress is printed
  try:
    sharding.configure_host_devices(FLAGS.config.mesh)  # before anything starts JAX's backends
    distributed.maybe_initialize(FLAGS.config)
    train.train_and_evaluate(FLAGS.config, FLAGS.workdir)
  except UserError as e:
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags)
