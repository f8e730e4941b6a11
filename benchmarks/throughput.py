"""Training and evaluation throughput of an experiment config at several batch sizes, with the
achieved GFLOP/s, the compiled steps' memory, the peak RSS, and the practical peak: a plain fp32
matmul of the output layer's shape on the same backend and mesh, measured in the same run.

python benchmarks/throughput.py --config=experiments/brown.py:mlp1 --batch_sizes=64,256,1024 [--config.model.h=100]

Prints a table and one JSON line per batch size (batch_size, train_tokens_per_sec,
eval_tokens_per_sec, gflops, peak_gflops, ...).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from nplm_jax import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax import sharding  # pylint: disable=g-import-not-at-top,wrong-import-position

config_flags.DEFINE_config_file('config', 'experiments/brown.py:mlp1', 'Experiment config.', lock_config=True)
flags.DEFINE_list('batch_sizes', ['64', '256', '1024'], 'Batch sizes to measure.')
flags.DEFINE_integer('vocab', 17_905, '|V| (Brown: 17,905); random token ids are used.')
flags.DEFINE_integer('steps', 10, 'Steps per timed repeat.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats; the median is reported.')
FLAGS = flags.FLAGS


def measure(config, batch_size: int) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from benchmarks import timing  # pylint: disable=g-import-not-at-top
  from nplm_jax import steps as steps_lib  # pylint: disable=g-import-not-at-top

  config.train.batch_size = batch_size
  mesh = sharding.make_mesh(config.mesh)
  sharding.check_divisibility(mesh, batch_size, batch_size, -(-FLAGS.vocab // config.model.vocab_pad_multiple) *
                              config.model.vocab_pad_multiple)
  model, compiled, state = common.build_train_step(config, FLAGS.vocab, mesh)
  batches = [tuple(steps_lib.put_batch(mesh, x) for x in b)
             for b in common.random_batches(FLAGS.vocab, model.context_size, batch_size, FLAGS.steps)]
  m = config.model
  train_flops = common.train_flops_per_token(model.padded_vocab_size, m.n, m.m, m.h, m.direct)
  with jax.set_mesh(mesh):
    train_exe = compiled.train.lower(state, *batches[0]).compile()
    eval_exe = compiled.eval.lower(state.params, *batches[0]).compile()
    holder = [state]

    def train_steps():
      s, in_flight = holder[0], steps_lib.BoundedDispatch()
      for b in batches:
        s, metrics = compiled.train(s, *b)
        in_flight.push(metrics)
      jax.block_until_ready(metrics)
      holder[0] = s

    def eval_steps():
      in_flight = steps_lib.BoundedDispatch()
      for b in batches:
        in_flight.push(compiled.eval(holder[0].params, *b))
      in_flight.drain()

    train_steps()  # warm-up
    eval_steps()
    train_s = timing.median_seconds(train_steps, FLAGS.repeats) / FLAGS.steps
    eval_s = timing.median_seconds(eval_steps, FLAGS.repeats) / FLAGS.steps

  # The practical peak: [B, K] x [K, |V|] in fp32 on the same mesh, vocabulary split on 'model'
  # as the step splits it, and on one device; the better of the two.
  k = m.h + ((m.n - 1) * m.m if m.direct else 0)
  a = jax.device_put(jnp.ones((batch_size, k), jnp.float32), NamedSharding(mesh, P('data', None)))
  w = jax.device_put(jnp.ones((k, model.padded_vocab_size), jnp.float32), NamedSharding(mesh, P(None, 'model')))
  matmul = jax.jit(jnp.dot, out_shardings=NamedSharding(mesh, P('data', 'model')))
  single = jax.jit(jnp.dot)
  a1, w1 = jax.device_put(a, jax.devices()[0]), jax.device_put(w, jax.devices()[0])
  peaks = []
  for fn, args in ((matmul, (a, w)), (single, (a1, w1))):  # outside set_mesh: one is single-device
    jax.block_until_ready(fn(*args))
    seconds = timing.median_seconds(lambda: jax.block_until_ready([fn(*args) for _ in range(FLAGS.steps)]),
                                    FLAGS.repeats) / FLAGS.steps  # all of them: they may finish out of order
    peaks.append(2.0 * batch_size * k * model.padded_vocab_size / seconds / 1e9)
  train_tps, eval_tps = batch_size / train_s, batch_size / eval_s
  return {'batch_size': batch_size, 'train_tokens_per_sec': round(train_tps, 1),
          'eval_tokens_per_sec': round(eval_tps, 1), 'gflops': round(train_tps * train_flops / 1e9, 2),
          'eval_gflops': round(eval_tps * train_flops / 3 / 1e9, 2), 'peak_gflops': round(max(peaks), 2),
          'mesh': f'{mesh.shape["data"]}x{mesh.shape["model"]}', 'platform': jax.devices()[0].platform,
          **{f'train_{k}': v for k, v in common.memory_mib(train_exe).items()},
          'eval_temp_mib': common.memory_mib(eval_exe).get('temp_mib'), 'peak_rss_mib': round(common.peak_rss_mib(), 1)}


def main(argv):
  del argv
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  config = FLAGS.config
  rows = [measure(config, int(b)) for b in FLAGS.batch_sizes]
  header = ['batch_size', 'train_tokens_per_sec', 'eval_tokens_per_sec', 'gflops', 'eval_gflops', 'peak_gflops',
            'train_temp_mib', 'peak_rss_mib']
  print(f'{rows[0]["platform"]}, mesh {rows[0]["mesh"]}, |V|={FLAGS.vocab}, n={config.model.n} m={config.model.m} '
        f'h={config.model.h} direct={config.model.direct}, loss {config.loss.name}')
  print(' | '.join(header))
  for r in rows:
    print(' | '.join(str(r.get(h)) for h in header))
  for r in rows:
    common.emit(r)


def parse_and_configure(argv):
  rest = cli.parse_flags(argv)
  sharding.configure_host_devices(FLAGS.config.mesh)  # before JAX starts its backends
  return rest


if __name__ == '__main__':
  app.run(main, flags_parser=parse_and_configure)
