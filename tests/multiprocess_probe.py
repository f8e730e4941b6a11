"""A start-up error found on some processes only, for tests/test_multiprocess.py:

MODULE=tests.multiprocess_probe launch/local.sh 2 --config=experiments/text.py:tiny --failing=1
"""

import jax
from absl import app
from absl import flags
from ml_collections import config_flags

from nplm_jax import cli
from nplm_jax.parallel import distributed
from nplm_jax.errors import UserError

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Any experiment config (for config.distributed).')
flags.DEFINE_list('failing', [], 'Indices of the processes that find an error.')


def main(argv):
  del argv
  try:
    distributed.maybe_initialize(FLAGS.config)

    def start():
      if str(jax.process_index()) in FLAGS.failing:
        raise UserError('the corpus is unreadable here')
    distributed.agree_on_errors(start)
    print(f'process {jax.process_index()}: started', flush=True)
  except UserError as e:
    cli.exit_with_error(e, FLAGS.config)


if __name__ == '__main__':
  app.run(main)
