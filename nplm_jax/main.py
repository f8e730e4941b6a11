"""Entry point: python -m nplm_jax.main --config=experiments/brown.py:mlp1 [--workdir=DIR]"""

import functools
import os
import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from nplm_jax import cli
from nplm_jax import distributed
from nplm_jax import metrics
from nplm_jax import mix
from nplm_jax import backend
from nplm_jax import train
from nplm_jax.errors import UserError

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Experiment config file, e.g. experiments/brown.py:mlp1.',
                                lock_config=True)
flags.DEFINE_string('workdir', None, 'Folder (or gs://...) for checkpoints, metrics and results.json; '
                    'default runs/NAME, NAME from the config (runs/brown_mlp1).')
flags.mark_flags_as_required(['config'])


def default_workdir(config) -> str:
  return os.path.join('runs', config.get('name') or 'run')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  config = FLAGS.config
  workdir = FLAGS.workdir or default_workdir(config)
  try:
    backend.configure(config)  # before anything starts JAX's backends
    distributed.maybe_initialize(config)
    if not FLAGS.workdir:
      metrics.log(f'workdir: {workdir} (the default for this config; --workdir=DIR chooses another)')
    mixture = functools.partial(mix.mixture_results, mix_config=config.mix) if config.mix.enabled else None
    results = train.train_and_evaluate(config, workdir, extra_results=mixture)
    if config.mix.enabled and 'mix_valid_ppl' in results:
      metrics.log(mix.summary_line(results))
  except UserError as e:
    cli.exit_with_error(e, config)
  except train.Preempted as stop:
    if distributed.is_leader():
      print(stop, file=sys.stderr, flush=True)
    sys.exit(128 + stop.signum)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
