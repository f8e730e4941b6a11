"""The fused softmax kernel's GPU forms (nplm_jax/parallel/softmax_kernel.py: the loop form through Triton,
the Mosaic GPU form) at several settings (LoopTuning: tiles, vocabulary splits, chunks of the feature
width, Triton's warps and stages, the pipeline's stages), each beside XLA's all-at-once softmax, on one
device: the output layer's forward and backward alone (statistics, log Z, the three gradients), no model
around it, so the settings are compared where they differ. On the H100 (2026-11-26) the kernel inside
the training step ran a third of XLA's rate with its chosen settings (tiles of 64, the feature width 290
padded to 512, 64 programs a pass); this says which settings close that, for softmax_kernel's defaults
and 'auto'.

python benchmarks/softmax_kernel_tiles.py --vocab=100000 --batch=4096 --features=290 --dtype=bfloat16
python benchmarks/softmax_kernel_tiles.py --settings='chosen;k_chunk=64;k_chunk=64,splits=1'   # some alone
python benchmarks/softmax_kernel_tiles.py --settings='mosaic;mosaic,num_stages=3'   # the Mosaic GPU form

Prints one JSON line a setting (setting, tokens_per_sec, vs_xla, temp_mib, or error: the first line of
why it did not compile or run), XLA's first, then a table. On a CPU the kernel runs interpreted: only
to check the script (tests/test_benchmarks.py), not its speed.
"""

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

# The settings tried by default: the Mosaic GPU form's (WGMMA and TMA: never run on a GPU yet), then the
# loop form's chosen ones, then each suspect of the H100's figures alone, then together. 'chosen' is
# LoopTuning(); the others name its fields; 'mosaic' first names the Mosaic GPU form (bfloat16 only).
DEFAULT_SETTINGS = (
    'mosaic',  # 64 rows a program, the widest vocabulary tile that fits, 2 stages, splits to fill the chip
    # warp-specialised: a warpgroup issues the copies beside 1 or 2 compute warpgroups (Pallas's Hopper attention)
    'mosaic,warpgroups=1', 'mosaic,warpgroups=2',
    # wider tiles (at K = 320 a tile of 128 in 2 stages needs 225 of the H100's 227 KiB), deeper pipelines
    'mosaic,block_v=128,num_stages=1', 'mosaic,block_v=128', 'mosaic,num_stages=3', 'mosaic,splits=1',
    'mosaic,dz_chunks=1',
    # 94 KiB a program at K = 320: two programs a multiprocessor, one's math beside the other's WGMMA
    'mosaic,num_stages=1',
    'chosen',
    'backward=dz',  # dz written by the kernel, dW and df by XLA's matmuls: no [K, tile] accumulator a program
    'splits=1',  # one program a batch tile (before the vocabulary splits)
    'k_chunk=64',  # K padded to a multiple of the chunk, not to a power of two
    'backward=dz,k_chunk=64', 'backward=dz,k_chunk=64,block_b=128,block_v=128', 'backward=dz,dz_chunks=1',
    'block_b=128,block_v=64', 'block_b=32,block_v=32',
    'num_warps=8', 'num_stages=3', 'k_chunk=64,num_warps=8',
)

flags.DEFINE_integer('vocab', 100_000, 'Columns of the output layer (one vocabulary shard).')
flags.DEFINE_integer('batch', 4096, 'Examples a step.')
flags.DEFINE_integer('features', 290, 'The output layer\'s input width K (brown.py:mlp1: h 50 + 4 x m 60).')
flags.DEFINE_enum('dtype', 'bfloat16', ['bfloat16', 'float32'], 'The matmuls\' operand type.')
flags.DEFINE_string('settings', ';'.join(DEFAULT_SETTINGS),
                    "Settings separated by ';', each 'chosen' or comma-separated LoopTuning fields (k_chunk=64,backward=dz).")
flags.DEFINE_integer('steps', 10, 'Steps a timed repeat.')
flags.DEFINE_integer('repeats', 3, 'Timed repeats; the median is reported.')
FLAGS = flags.FLAGS


def parse_setting(text: str) -> tuple[str, softmax_kernel.LoopTuning]:
  """(form, tuning) of 'chosen' or '[mosaic,]field=value,...': the loop form, or the Mosaic GPU form where
  the setting starts with 'mosaic', with LoopTuning's fields (softmax_kernel.tuning_fields, as
  train.softmax_kernel_tuning takes them); UserError naming the bad part."""
  form, _, rest = text.strip().partition(',')
  if form != 'mosaic':
    form, rest = 'loop', text.strip()
  return form, softmax_kernel.LoopTuning(**softmax_kernel.tuning_fields('' if rest == 'chosen' else rest))


def xla_loss(f, w, b, targets):
  """Mean -log P(target) with the logits all at once (the training step's 'xla' path at vocab_block 0)."""
  logits = jnp.dot(f, w, preferred_element_type=jnp.float32, precision=jax.lax.Precision.HIGHEST) + b
  picked = jnp.take_along_axis(logits, targets[:, None], axis=1)[:, 0]
  return jnp.mean(jax.nn.logsumexp(logits, axis=1) - picked)


def kernel_loss_and_grads(form: str, tuning: softmax_kernel.LoopTuning):
  """(loss, (df, dw, db)) of the same mean through the kernel's two passes, as vocab_softmax runs them."""
  def run(f, w, b, targets):
    shard_max, shard_sum, picked = softmax_kernel.shard_stats(f, w, b, targets, form=form, tuning=tuning)
    log_z = jnp.log(shard_sum) + shard_max
    g = jnp.full(targets.shape, 1.0 / targets.shape[0], jnp.float32)
    return jnp.mean(log_z - picked), softmax_kernel.shard_grads(f, w, b, log_z, targets, g, form=form, tuning=tuning)
  return run


def measure(function, args, batch: int) -> dict:
  """tokens/s (median of FLAGS.repeats, FLAGS.steps calls each) and compiled temporaries of a jitted function."""
  compiled = jax.jit(function).lower(*args).compile()
  jax.block_until_ready(compiled(*args))

  def run():
    for _ in range(FLAGS.steps):
      out = compiled(*args)
    jax.block_until_ready(out)
  seconds = timing.median_seconds(run, FLAGS.repeats) / FLAGS.steps
  return {'tokens_per_sec': round(batch / seconds, 1), 'temp_mib': common.memory_mib(compiled).get('temp_mib')}


def main(argv):
  del argv
  settings = [s for s in FLAGS.settings.split(';') if s.strip()]
  try:
    tunings = [parse_setting(s) for s in settings]  # every setting checked before anything runs
  except UserError as e:
    sys.exit(f'error: {e}')
  rng = np.random.default_rng(0)
  dtype = jnp.dtype(FLAGS.dtype)
  f = jnp.asarray(rng.normal(size=(FLAGS.batch, FLAGS.features)) / np.sqrt(FLAGS.features), dtype)
  w = jnp.asarray(rng.normal(size=(FLAGS.features, FLAGS.vocab)), dtype)
  b = jnp.asarray(rng.normal(size=FLAGS.vocab), jnp.float32)
  targets = jnp.asarray(rng.integers(0, FLAGS.vocab, size=FLAGS.batch), jnp.int32)
  shape = {'vocab': FLAGS.vocab, 'batch': FLAGS.batch, 'features': FLAGS.features, 'dtype': FLAGS.dtype,
           'platform': jax.default_backend(), 'device': jax.devices()[0].device_kind}
  xla = measure(jax.value_and_grad(xla_loss, argnums=(0, 1, 2)), (f, w, b, targets), FLAGS.batch)
  common.emit({'setting': 'xla', **shape, **xla, 'vs_xla': 1.0})
  rows = [('xla', xla['tokens_per_sec'], 1.0, xla['temp_mib'], '')]
  for text, (form, tuning) in zip(settings, tunings):
    try:
      got = measure(kernel_loss_and_grads(form, tuning), (f, w, b, targets), FLAGS.batch)
    except Exception as e:  # pylint: disable=broad-except  # noqa: BLE001
      # a setting Triton or Mosaic GPU cannot build (shared memory, registers; float32 in the Mosaic GPU
      # form) is a finding, not the end of the run
      reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
      common.emit({'setting': text, **shape, 'error': reason})
      rows.append((text, None, None, None, reason))
      continue
    ratio = round(got['tokens_per_sec'] / xla['tokens_per_sec'], 3)
    common.emit({'setting': text, **shape, **got, 'vs_xla': ratio})
    rows.append((text, got['tokens_per_sec'], ratio, got['temp_mib'], ''))
  print(f"\n{shape['device']}, |V| {FLAGS.vocab:,}, batch {FLAGS.batch}, K {FLAGS.features}, {FLAGS.dtype}")
  print('setting | tokens/s | vs XLA | temporaries MiB | error')
  for text, rate, ratio, temp, error in rows:
    print(f'{text} | {rate if rate is not None else "-"} | {ratio if ratio is not None else "-"} | '
          f'{temp if temp is not None else "-"} | {error}')


if __name__ == '__main__':
  app.run(main)
