"""What checksums add to a checkpoint: save (to committed) and restore times of a config's train
state with and without them, alternating, medians over rounds.

python benchmarks/checkpoint_cost.py --config=experiments/brown.py:mlp1 [--vocab=17905] [--rounds=5]

Prints one JSON line: the state's MiB, save_s and restore_s with and without checksums, and the
checksum computation alone.
"""

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from nplm_jax import cli  # pylint: disable=g-import-not-at-top,wrong-import-position

config_flags.DEFINE_config_file('config', 'experiments/brown.py:mlp1', 'Experiment config.', lock_config=True)
flags.DEFINE_integer('vocab', 17_905, '|V| of the state (Brown: 17,905).')
flags.DEFINE_integer('rounds', 5, 'Rounds, each saving and restoring with and without checksums.')
FLAGS = flags.FLAGS


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import checkpoint as ckpt_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import integrity  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import run_state as run_state_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  mesh = sharding.make_mesh(FLAGS.config.mesh)
  _, compiled, state = common.build_train_step(FLAGS.config, FLAGS.vocab, mesh)
  abstract = ckpt_lib.abstract_with_shardings(compiled.abstract_state, compiled.state_shardings)
  real_checksums = integrity.checksums
  times = {key: [] for key in ('save_with', 'save_without', 'restore_with', 'restore_without', 'checksums')}
  with jax.set_mesh(mesh):
    for round_ in range(FLAGS.rounds):
      for with_checksums in (True, False):
        integrity.checksums = real_checksums if with_checksums else (lambda tree: {})
        checkpoints = ckpt_lib.Checkpoints(workdir_lib.Workdir(tempfile.mkdtemp(prefix='nplm_ckpt_')))
        started = time.perf_counter()
        checkpoints.save_latest(round_ + 1, state, run_state_lib.RunState())
        checkpoints.wait()
        saved = time.perf_counter()
        restored, _ = checkpoints.restore_latest(abstract)
        jax.block_until_ready(restored)
        done = time.perf_counter()
        checkpoints.close()
        suffix = 'with' if with_checksums else 'without'
        times[f'save_{suffix}'].append(saved - started)
        times[f'restore_{suffix}'].append(done - saved)
      started = time.perf_counter()
      real_checksums(state)
      times['checksums'].append(time.perf_counter() - started)
  integrity.checksums = real_checksums
  state_mib = sum(x.nbytes for x in jax.tree.leaves(state)) / 2**20
  common.emit({'platform': jax.devices()[0].platform, 'state_mib': round(state_mib, 1),
               **{f'{k}_s': round(statistics.median(v), 4) for k, v in times.items()}})


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags_and_configure_backend)
