"""The fused softmax kernel's GPU forms (nplm_jax/parallel/softmax_kernel.py: the loop form through Triton,
the Mosaic GPU form) at several settings (LoopTuning: tiles, vocabulary splits, chunks of the feature
width, Triton's warps and stages, the pipeline's stages), each beside XLA's softmax all at once and
streamed, on one device: the output layer's loss and gradients alone, no model around it, each through
vocab_softmax.token_nll on a 1 x 1 mesh as the training step calls it (the same casts, bias row, custom
gradients and matmul precision), so the settings are compared where they differ and each is checked
against XLA's numbers (error_vs_xla: the largest difference over the loss and both gradients, relative to
XLA's largest value of each).

python benchmarks/softmax_kernel_tiles.py --vocab=100000 --batch=4096 --features=290 --dtype=bfloat16
python benchmarks/softmax_kernel_tiles.py --settings='chosen;k_chunk=64;backward=dz,k_chunk=64'   # the loop form
python benchmarks/softmax_kernel_tiles.py --settings='mosaic;mosaic,block_v=64'   # the Mosaic GPU form
python benchmarks/softmax_kernel_tiles.py --settings='xla,vocab_block=8192'   # XLA streamed, other blocks
python benchmarks/softmax_kernel_tiles.py --dtype=float32 --matmul_precision=default --settings='mosaic'   # TF32

A setting is 'chosen' (the loop form, LoopTuning()), LoopTuning's fields ('k_chunk=64,num_warps=8'; with
backward=dz the loop form's pallas_loop_dz), 'mosaic[,fields]' (the Mosaic GPU form, pallas_mosaic:
bfloat16, or float32 in TF32 at --matmul_precision=default) or 'xla,vocab_block=N' (XLA streamed over N columns at a time). Prints one JSON line a
setting (setting, tokens_per_sec, vs_xla: over all at once, vs_best_xla: over the faster of all at once
and the streamed settings, temp_mib, error_vs_xla; or error: the first line of why it did not compile or
run), XLA all at once first, then a table. On a CPU the kernels run interpreted: only to check the script
(tests/test_benchmarks.py), not their speed. On the H100 (2026-11-26) an earlier form of this script
timed XLA with float32 backward matmuls (autodiff of a hand-written loss), which the training step does not
run: its XLA rate (249,459 tokens/s at |V| 100k in bfloat16) was too low, and the ratios over it too high.
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks import common  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import timing  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax.errors import UserError  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax.parallel import softmax_kernel  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax.parallel import vocab_softmax  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax.training import steps as steps_lib  # pylint: disable=g-import-not-at-top,wrong-import-position

# The settings tried by default: XLA streamed (in training on the H100 all at once was the faster XLA path,
# 550,649 against 328,633 tokens/s at |V| 100k in bfloat16), the Mosaic GPU form's (its tiles of 128
# columns, chosen where they fit, ran 1.6x as fast as 64 there at K = 320), then the loop form's best there
# and its chosen settings.
DEFAULT_SETTINGS = (
    'xla,vocab_block=4096',
    'mosaic',  # 64 rows a program, the widest vocabulary tile that fits (128 at K = 320), 2 stages
    'mosaic,block_v=64',  # the tile chosen before 2026-11-26
    'mosaic,warpgroups=1',  # warp-specialised: a warpgroup issues the copies beside a compute warpgroup
    'mosaic,num_stages=1', 'mosaic,splits=1',
    # dz a quarter of the batch at a time (the default), all at once, an eighth, a sixteenth: temporaries
    # against speed (on the H100 at |V| 100k: 372 MiB, about dW's float32 accumulator, a bfloat16 copy of W
    # and a quarter's dz; 906 all at once, where XLA's all at once took 2,407 in the training step)
    'mosaic,dz_chunks=1', 'mosaic,dz_chunks=8', 'mosaic,dz_chunks=16',
    # dz in chunks of the vocabulary rather than the batch: no float32 accumulator of dW over the chunks (on
    # the H200 at |V| 100k, eight chunks of the batch ran 0.89x four in 63% of their temporaries)
    'mosaic,dz_axis=vocab,dz_chunks=2', 'mosaic,dz_axis=vocab', 'mosaic,dz_axis=vocab,dz_chunks=8',
    'backward=dz,k_chunk=64', 'k_chunk=64,num_warps=8', 'chosen',
)

flags.DEFINE_integer('vocab', 100_000, 'Columns of the output layer (one vocabulary shard).')
flags.DEFINE_integer('batch', 4096, 'Examples a step.')
flags.DEFINE_integer('features', 290, 'The output layer\'s input width K (brown.py:mlp1: h 50 + 4 x m 60).')
flags.DEFINE_enum('dtype', 'bfloat16', ['bfloat16', 'float32'], 'The matmuls\' operand type.')
flags.DEFINE_enum('matmul_precision', 'highest', ['highest', 'default'],
                  'model.matmul_precision: float32 products exact, or the backend\'s own (TF32 on NVIDIA GPUs, '
                  'XLA\'s and the kernels\' alike; the Mosaic GPU form takes float32 only so).')
flags.DEFINE_string('settings', ';'.join(DEFAULT_SETTINGS),
                    "Settings separated by ';': 'chosen', LoopTuning's fields (k_chunk=64,backward=dz), "
                    "'mosaic[,fields]' or 'xla,vocab_block=N'.")
flags.DEFINE_integer('steps', 10, 'Steps a timed repeat.')
flags.DEFINE_integer('repeats', 3, 'Timed repeats; the median is reported.')
FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Setting:
  """One path through vocab_softmax.token_nll: train.softmax_kernel, its tuning text, train.vocab_block."""
  kernel: str
  tuning: str = ''
  vocab_block: int = 0


def parse_setting(text: str) -> Setting:
  """The Setting of 'chosen', 'field=value,...' (the loop form; backward=dz: pallas_loop_dz), 'mosaic[,...]'
  (pallas_mosaic) or 'xla,vocab_block=N'; UserError naming the bad part, before anything runs."""
  head, _, rest = text.strip().partition(',')
  if head == 'xla':
    name, _, value = rest.partition('=')
    if name.strip() != 'vocab_block' or not value.strip().isdigit():
      raise UserError(f"'{text}' is not xla,vocab_block=N (XLA's softmax streamed over N columns at a time)")
    return Setting('xla', vocab_block=int(value))
  fields = softmax_kernel.tuning_fields('' if text.strip() == 'chosen' else rest if head == 'mosaic' else text)
  softmax_kernel.LoopTuning(**fields)  # its own one-line checks
  backward = fields.pop('backward', 'fused')
  kernel = 'pallas_mosaic' if head == 'mosaic' else 'pallas_loop_dz' if backward == 'dz' else 'pallas_loop'
  return Setting(kernel, ','.join(f'{name}={value}' for name, value in fields.items()))


def loss_and_grads(setting: Setting, mesh, dtype: str):
  """(loss, (df, d_output)) of a mean -log P(target) through token_nll as the training step runs it: f and
  the output layer [W; b] float32, the matmuls in `dtype`, float32 products at --matmul_precision."""
  def loss(f, output, targets):
    return jnp.mean(vocab_softmax.token_nll(f, output, targets, mesh=mesh, compute_dtype=dtype,
                                            vocab_block=setting.vocab_block, kernel=setting.kernel,
                                            kernel_tuning=setting.tuning))
  return steps_lib.with_matmul_precision(jax.value_and_grad(loss, argnums=(0, 1)), FLAGS.matmul_precision,
                                         jax.default_backend())


def relative_error(got, want) -> float:
  """The largest |got - want| over each array, relative to want's largest |value|, the worst of them."""
  pairs = zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want))
  return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))
                   / max(float(np.max(np.abs(np.asarray(b, np.float64)))), 1e-30)) for a, b in pairs)


def measure(function, args, batch: int) -> tuple[dict, object]:
  """(tokens/s (median of FLAGS.repeats, FLAGS.steps calls each) and compiled temporaries, the outputs) of a
  jitted function."""
  compiled = jax.jit(function).lower(*args).compile()
  outputs = jax.block_until_ready(compiled(*args))

  def run():
    for _ in range(FLAGS.steps):
      out = compiled(*args)
    jax.block_until_ready(out)
  seconds = timing.median_seconds(run, FLAGS.repeats) / FLAGS.steps
  return {'tokens_per_sec': round(batch / seconds, 1), 'temp_mib': common.memory_mib(compiled).get('temp_mib')}, outputs


def three_figures(x: float) -> float:
  """x to three significant figures, not three decimals: an interpreted kernel on a CPU runs at under a
  thousandth of XLA's rate, which three decimals would print as 0.0."""
  return float(f'{x:.3g}')


def main(argv):
  del argv
  settings = [s for s in FLAGS.settings.split(';') if s.strip()]
  try:
    parsed = [parse_setting(s) for s in settings]  # every setting checked before anything runs
  except UserError as e:
    sys.exit(f'error: {e}')
  rng = np.random.default_rng(0)
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ('data', 'model'))
  f = jnp.asarray(rng.normal(size=(FLAGS.batch, FLAGS.features)) / np.sqrt(FLAGS.features), jnp.float32)
  output = jnp.asarray(rng.normal(size=(FLAGS.features + 1, FLAGS.vocab)), jnp.float32)  # [W; b]
  targets = jnp.asarray(rng.integers(0, FLAGS.vocab, size=FLAGS.batch), jnp.int32)
  args = (f, output, targets)
  shape = {'vocab': FLAGS.vocab, 'batch': FLAGS.batch, 'features': FLAGS.features, 'dtype': FLAGS.dtype,
           'matmul_precision': FLAGS.matmul_precision,
           'platform': jax.default_backend(), 'device': jax.devices()[0].device_kind}
  xla, reference = measure(loss_and_grads(Setting('xla'), mesh, FLAGS.dtype), args, FLAGS.batch)
  common.emit({'setting': 'xla', **shape, **xla, 'vs_xla': 1.0})
  rows, best_xla = [('xla', xla['tokens_per_sec'], 1.0, xla['temp_mib'], 0.0, '')], xla['tokens_per_sec']
  for text, setting in zip(settings, parsed):
    try:
      got, outputs = measure(loss_and_grads(setting, mesh, FLAGS.dtype), args, FLAGS.batch)
    except Exception as e:  # pylint: disable=broad-except  # noqa: BLE001
      # a setting Triton or Mosaic GPU cannot build (shared memory, registers; IEEE float32 in the Mosaic
      # GPU form) is a finding, not the end of the run
      reason = common.error_line(e)
      common.emit({'setting': text, **shape, 'error': reason})
      rows.append((text, None, None, None, None, reason))
      continue
    if setting.kernel == 'xla':
      best_xla = max(best_xla, got['tokens_per_sec'])
    error = relative_error(outputs, reference)
    ratio = three_figures(got['tokens_per_sec'] / xla['tokens_per_sec'])
    common.emit({'setting': text, **shape, **got, 'vs_xla': ratio,
                 'vs_best_xla': three_figures(got['tokens_per_sec'] / best_xla), 'error_vs_xla': three_figures(error)})
    rows.append((text, got['tokens_per_sec'], ratio, got['temp_mib'], error, ''))
  print(f"\n{shape['device']}, |V| {FLAGS.vocab:,}, batch {FLAGS.batch}, K {FLAGS.features}, {FLAGS.dtype} "
        f"(matmul precision {FLAGS.matmul_precision})")
  print('setting | tokens/s | vs XLA all at once | temporaries MiB | error vs XLA | why it did not run')
  for text, rate, ratio, temp, error, reason in rows:
    cells = (rate, ratio, temp, None if error is None else f'{error:.2g}')
    print(' | '.join([text, *('-' if c is None else str(c) for c in cells), reason]))


if __name__ == '__main__':
  app.run(main)
