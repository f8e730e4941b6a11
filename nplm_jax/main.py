"""Entry point: python -m nplm_jax.main --config=experiments/brown.py:mlp1 --workdir=DIR"""

from absl import app
from absl import flags
from ml_collections import config_flags

from nplm_jax import cli
from nplm_jax import distributed
from nplm_jax import sharding
from nplm_jax import train
from nplm_jax.errors import UserError

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Experiment config file, e.g. experiments/brown.py:mlp1.',
                                lock_config=True)
flags.DEFINE_string('workdir', None, 'Folder for checkpoints, metrics and results.json.')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  try:
    sharding.configure_host_devices(FLAGS.config.mesh)  # before anything starts JAX's backends
    distributed.maybe_initialize(FLAGS.config)
    train.train_and_evaluate(FLAGS.config, FLAGS.workdir)
  except UserError as e:
    cli.exit_with_error(e, FLAGS.config)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
