"""Does feeding real data slow the training step? Brown MLP1's step on a fixed batch, against real
batches gathered in the loop (experiment.Experiment.train_batch, the host path), against real batches read
ahead by grain threads (nplm_jax.data.input_pipeline). Rounds alternate; medians and ratios printed.

python benchmarks/input_pipeline.py --config=experiments/brown.py:mlp1 --batch_size=1024 --steps=20 --rounds=3
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

from nplm_jax.training import in_flight as in_flight_lib
from nplm_jax import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top,wrong-import-position

config_flags.DEFINE_config_file('config', 'experiments/brown.py:mlp1', 'Experiment config.', lock_config=True)
flags.DEFINE_integer('batch_size', 1024, 'Global batch size.')
flags.DEFINE_integer('steps', 20, 'Steps per timed stretch.')
flags.DEFINE_integer('rounds', 3, 'Alternating rounds; medians are reported.')
flags.DEFINE_integer('threads', 2, 'grain reader threads.')
FLAGS = flags.FLAGS


def main(argv):
  del argv
  config = FLAGS.config
  config.train.batch_size = FLAGS.batch_size
  sharding.configure_host_devices(config)
  import jax  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from nplm_jax.data import input_pipeline  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

  run = experiment_lib.Experiment(config, workdir_lib.Workdir(tempfile.mkdtemp()))
  b, mesh = config.train.batch_size, run.mesh
  with jax.set_mesh(mesh):
    state = run.steps.init()
    fixed = run.train_batch(0)
    state, metrics = run.steps.train(state, *fixed)  # compile
    jax.block_until_ready(metrics['loss'])

    def stretch(next_batch) -> float:
      nonlocal state
      in_flight = in_flight_lib.InFlightLimit()
      start = time.perf_counter()
      for _ in range(FLAGS.steps):
        state, metrics = run.steps.train(state, *next_batch())
        in_flight.push(metrics)
      in_flight.drain()
      jax.block_until_ready(metrics['loss'])
      return FLAGS.steps * b / (time.perf_counter() - start)

    rates = {'fixed batch': [], 'real data, gathered in the loop': [], 'real data, grain threads': []}
    step = 1
    for _ in range(FLAGS.rounds):
      rates['fixed batch'].append(stretch(lambda: fixed))
      counter = iter(range(step, step + FLAGS.steps))
      rates['real data, gathered in the loop'].append(stretch(lambda: run.train_batch(next(counter))))
      step += FLAGS.steps
      batches = input_pipeline.train_batches(run.step_batches, step, num_threads=FLAGS.threads)
      rates['real data, grain threads'].append(stretch(lambda: run.on_mesh(*next(batches))))
      step += FLAGS.steps
  base = statistics.median(rates['fixed batch'])
  print(f'{config.name}, batch {b}, mesh {dict(mesh.shape)}, {FLAGS.steps} steps x {FLAGS.rounds} rounds')
  print('| feed | train tokens/s (median) | vs fixed batch |\n| --- | --- | --- |')
  for name, values in rates.items():
    print(f'| {name} | {statistics.median(values):,.0f} | {statistics.median(values) / base:.3f} |')
  for name, values in rates.items():
    common.emit({'feed': name, 'tokens_per_sec': statistics.median(values),
                 'ratio_to_fixed': statistics.median(values) / base, 'batch_size': b})


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
