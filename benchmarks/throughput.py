"""Training and evaluation throughput of an experiment config at several batch sizes, with the
achieved GFLOP/s, the compiled steps' memory, the peak RSS, and the practical peaks measured in the
same run: a plain fp32 matmul of the output layer's shape on the same backend and mesh, and (for
MFU) large square bf16 and f32 matmuls.

python benchmarks/throughput.py --config=experiments/brown.py:mlp1 --batch_sizes=64,256,1024 [--config.model.h=100]
python benchmarks/throughput.py --config=experiments/brown.py:reg4_n7 --batch_sizes=128 --loop
python benchmarks/throughput.py --config=experiments/brown.py:mlp1 --vocab=100000 --batch_sizes=4096 \
  --softmax_kernels=xla,pallas --config.model.compute_dtype=bfloat16   # the fused kernel beside XLA

--memory_only compiles the steps and reports their memory (XLA's analysis) without running them: a size
too slow to run here (the Pallas kernels interpreted on a CPU) still compiles:
python benchmarks/throughput.py --config=experiments/brown.py:mlp1 --vocab=300032 --batch_sizes=2048 \
  --memory_only --softmax_kernels=xla,pallas_mosaic --config.model.compute_dtype=bfloat16 \
  --config.train.vocab_block=0 --config.mesh.cpu_devices=1 --config.train.softmax_kernel_tuning=dz_axis=vocab

--loop also runs the real training loop (train.train_and_evaluate: resident data, steps per
dispatch, logging, a final evaluation) on a synthetic corpus of the same |V| and reports its
tokens/s beside the step's alone (loop_train_tokens_per_sec).

Prints one JSON line per batch size as each is measured (batch_size, train_tokens_per_sec,
eval_tokens_per_sec, gflops, peak_gflops, mfu_bf16, mfu_f32, ...), then a table. With several
--softmax_kernels, one that does not build or run gets a line {softmax_kernel, error} and the others
still run; the exit status is then 1.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from nplm_jax.training import in_flight as in_flight_lib
from nplm_jax import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top,wrong-import-position

config_flags.DEFINE_config_file('config', 'experiments/brown.py:mlp1', 'Experiment config.', lock_config=True)
flags.DEFINE_list('batch_sizes', ['64', '256', '1024'], 'Batch sizes to measure.')
flags.DEFINE_integer('vocab', 17_905, '|V| (Brown: 17,905); random token ids are used.')
flags.DEFINE_integer('steps', 10, 'Steps per timed repeat.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats; the median is reported.')
flags.DEFINE_bool('loop', False, 'Also time the real training loop on a synthetic corpus of the same |V|.')
flags.DEFINE_integer('loop_steps', 3000, 'Steps of the timed loop (its first tenth, with the compile, is not counted).')
flags.DEFINE_list('softmax_kernels', [], "Output-layer paths to measure side by side ('xla,pallas'); "
                  'default: the config\'s train.softmax_kernel.')
flags.DEFINE_integer('peak_size', -1, 'Side of the square matmuls MFU is measured against (-1: 8192, 2048 on CPU).')
flags.DEFINE_bool('memory_only', False, "Compile the steps and report their memory alone, nothing timed (a GPU's "
                  'sizes on a CPU, where the Pallas kernels would be interpreted).')
FLAGS = flags.FLAGS


def loop_tokens_per_sec(config, batch_size: int) -> float:
  """Median tokens/s of the training loop's progress reports after its first (compile and warm-up),
  on a synthetic prepared corpus of FLAGS.vocab words."""
  import json  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  import statistics  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import train  # pylint: disable=g-import-not-at-top
  folder = tempfile.mkdtemp(prefix='nplm_loop_')
  steps = FLAGS.loop_steps
  loop_config = config.copy_and_resolve_references()
  common.write_synthetic_prepared(f'{folder}/corpus', FLAGS.vocab, batch_size * steps + 1, batch_size * 4)
  loop_config.data.corpus, loop_config.data.path = 'prepared', f'{folder}/corpus'
  loop_config.mix.enabled = False
  loop_config.train.update(batch_size=batch_size, max_steps=steps, eval_every=steps, log_every=steps // 10,
                           patience=0, checkpoint_every_seconds=0.0)
  train.train_and_evaluate(loop_config, f'{folder}/run')
  with open(f'{folder}/run/metrics.jsonl', encoding='utf-8') as f:
    rates = [r['tokens_per_sec'] for r in map(json.loads, f) if 'tokens_per_sec' in r]
  return statistics.median(rates[1:])


def measure(config, batch_size: int) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from benchmarks import timing  # pylint: disable=g-import-not-at-top
  from nplm_jax.models import family  # pylint: disable=g-import-not-at-top

  config.train.batch_size = batch_size
  mesh = sharding.make_mesh(config.mesh)
  sharding.check_divisibility(mesh, batch_size, batch_size, -(-FLAGS.vocab // config.model.vocab_pad_multiple) *
                              config.model.vocab_pad_multiple)
  model, compiled, state = common.build_train_step(config, FLAGS.vocab, mesh)
  batches = [tuple(sharding.put_batch(mesh, x) for x in b)
             for b in common.random_batches(FLAGS.vocab, model.context_size, batch_size, FLAGS.steps)]
  m = config.model
  train_flops = common.train_flops_per_token(model.padded_vocab_size, m.n, m.m, m.h, m.direct)
  with jax.set_mesh(mesh):
    train_exe = compiled.lower_train(state, *batches[0]).compile()
    eval_exe = compiled.eval.lower(state.params, *batches[0]).compile()
  tuning = config.train.get('softmax_kernel_tuning', '')
  named = {'batch_size': batch_size, 'softmax_kernel': common.softmax_kernel_ran(config, mesh, model, state.params,
                                                                                batch_size),
           **({'softmax_kernel_tuning': tuning} if tuning else {})}
  memory = {'mesh': f'{mesh.shape["data"]}x{mesh.shape["model"]}', 'platform': jax.devices()[0].platform,
            **{f'train_{k}': v for k, v in common.memory_mib(train_exe).items()},
            'eval_temp_mib': common.memory_mib(eval_exe).get('temp_mib')}
  if FLAGS.memory_only:
    return {**named, **memory}
  with jax.set_mesh(mesh):
    holder = [state]

    def train_steps():
      s, in_flight = holder[0], in_flight_lib.InFlightLimit()
      for b in batches:
        s, metrics = compiled.train(s, *b)
        in_flight.push(metrics)
      jax.block_until_ready(metrics)
      holder[0] = s

    def eval_steps():
      in_flight = in_flight_lib.InFlightLimit()
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

    def products(fn=fn, args=args):  # two [B, |V|] results alive at most (they may finish out of order)
      in_flight = in_flight_lib.InFlightLimit()
      for _ in range(FLAGS.steps):
        in_flight.push(fn(*args))
      in_flight.drain()
    seconds = timing.median_seconds(products, FLAGS.repeats) / FLAGS.steps
    peaks.append(2.0 * batch_size * k * model.padded_vocab_size / seconds / 1e9)
  del a, w, a1, w1
  train_tps, eval_tps = batch_size / train_s, batch_size / eval_s
  gflops = train_tps * train_flops / 1e9

  def counted(value, digits):  # train_flops_per_token counts the 2003 model's matmuls: the other family's stay blank
    return round(value, digits) if family.kind(m) == family.BENGIO2003 else None
  size = FLAGS.peak_size if FLAGS.peak_size > 0 else (2048 if jax.devices()[0].platform == 'cpu' else 8192)
  peak_tflops = {dtype: common.peak_matmul_tflops(dtype, size) for dtype in ('bfloat16', 'float32')}
  loop = {}
  if FLAGS.loop:
    loop_tps = loop_tokens_per_sec(config, batch_size)
    loop = {'loop_train_tokens_per_sec': round(loop_tps, 1), 'loop_vs_step': round(loop_tps / train_tps, 3)}
  return {**named, 'train_tokens_per_sec': round(train_tps, 1), **loop,
          'eval_tokens_per_sec': round(eval_tps, 1), 'gflops': counted(gflops, 2),
          'eval_gflops': counted(eval_tps * train_flops / 3 / 1e9, 2), 'peak_gflops': round(max(peaks), 2),
          'mfu_bf16': counted(gflops / 1e3 / peak_tflops['bfloat16'], 4),
          'mfu_f32': counted(gflops / 1e3 / peak_tflops['float32'], 4),
          'peak_bf16_tflops': round(peak_tflops['bfloat16'], 3), 'peak_f32_tflops': round(peak_tflops['float32'], 3),
          **memory, 'peak_rss_mib': round(common.peak_rss_mib(), 1)}


def main(argv):
  del argv
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from nplm_jax.models import family  # pylint: disable=g-import-not-at-top
  config = FLAGS.config
  kernels = FLAGS.softmax_kernels or [config.train.softmax_kernel]
  rows, failed = [], []
  for kernel in kernels:
    config.train.softmax_kernel = kernel
    try:
      measured = [measure(config, int(b)) for b in FLAGS.batch_sizes]
    except Exception as e:  # pylint: disable=broad-except
      if len(kernels) == 1:
        raise
      # beside others, a path that does not build or run is a finding: the others' lines still come
      common.emit({'softmax_kernel': kernel, 'error': common.error_line(e)})
      failed.append(kernel)
      continue
    for r in measured:  # each line as it is measured: a run cut short (a GPU call's limit) keeps them
      common.emit(r)
    rows += measured
  if not rows:
    sys.exit(f'error: none of {", ".join(kernels)} ran (their lines say why)')
  header = ['batch_size', 'softmax_kernel', 'train_tokens_per_sec', 'loop_train_tokens_per_sec', 'loop_vs_step', 'eval_tokens_per_sec',
            'gflops', 'peak_gflops', 'mfu_bf16', 'mfu_f32', 'train_temp_mib', 'peak_rss_mib']
  print(f'{rows[0]["platform"]}, mesh {rows[0]["mesh"]}, |V|={FLAGS.vocab}, {family.kind(config.model)} n={config.model.n} '
        f'm={config.model.m} h={config.model.h} direct={config.model.direct}, loss {config.loss.name}, compute_dtype {config.model.compute_dtype} '
        f'(matmul precision {config.model.matmul_precision}), vocab_block {config.train.vocab_block}')
  print(' | '.join(header))
  for r in rows:
    print(' | '.join(str(r.get(h)) for h in header))
  if failed:
    sys.exit(f'error: {", ".join(failed)} did not run (their lines say why); the others\' figures are above')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags_and_configure_backend)
