"""The output layer's gradient matmul and the update that reads it, alone, at the research size's shapes:
which form of them a GPU runs near its bandwidth.

python benchmarks/gradient_matmul.py [--batch=256 --features=2400 --vocab=33280 --repeats=20]

Profiled on an H200 (results/bench/mosaic_kernel_and_character_forms.jsonl) the research size's step spent 0.32 ms in this
matmul, f^T dlogits [2401, 33280] with the contraction over the batch of 256: 1.15 TB/s and 127 TFLOP/s, far
from both of the GPU's bounds. Two suspects, timed here one at a time beside the step's own form:
- the rows: the step gives f a column of zeros, so that the matmul makes the layer's shape, bias row
  included (vocab_softmax._layer_gradient): K + 1 = 2,401 rows, an odd leading dimension for f's bfloat16
  operand, which tensor-core matmuls want in multiples of 8. `aligned` makes K rows (the bias row left
  out: the matmul's bound), `padded` K + 1 rounded up to a multiple of 8 (K + 8 here) whose first K + 1 rows
  the update reads;
- the dlogits: `given` takes them made (bfloat16, as a separate pass would leave them), `from_logits`
  makes them from the float32 logits inside the same program (softmax - one-hot, as the step's backward
  does), which XLA may fuse into the matmul and then recompute for each tile of its rows.
The training step's own forms of them are train.output_layer_gradient_form's: 'as_traced' is zero_column/
from_logits here, 'rows_padded' padded/from_logits, 'dlogits_apart' zero_column/given (its dlogits made once,
behind a barrier), 'dlogits_apart_rows_padded' padded/given.
Each in float32 and in bfloat16 (train.output_layer_gradient_dtype), followed by an AdamW-like update of
float32 parameters and moments that reads the gradient (widened), as the step's: so a slice or a widening
XLA fuses into the update costs nothing here either. Prints one JSON line for the update alone on a
float32 gradient given (update_only: the bandwidth's reference), then one a form: form, rows, dlogits,
gradient_dtype, ms (a call's median), gbytes (what the form must move at least), tbps (gbytes over ms),
tflops and error_vs_step (the largest difference of its first update from the step's own form's,
zero_column/given/float32, relative to that update's largest: bfloat16 forms round the gradient); then a
table. On a CPU the figures only check the script (tests/test_benchmarks.py): XLA there makes every matmul's
result in float32, and where a bfloat16 result is widened at once (no slice between) it drops the rounding
(excess precision, which XLA allows by default), so some bfloat16 forms' error_vs_step is 0 on a CPU.
"""

import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks import common  # pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import timing  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_integer('batch', 256, 'Examples a step (the contraction).')
flags.DEFINE_integer('features', 2400, 'K, the output layer\'s weight rows (research size: 7 x 200 + 1000).')
flags.DEFINE_integer('vocab', 33_280, '|V| padded (research size: 33,278 padded to a multiple of 128).')
flags.DEFINE_integer('repeats', 20, 'Timed calls (the median is kept).')
flags.DEFINE_string('forms', '', "Comma-separated ROWS/DLOGITS/DTYPE forms ('zero_column/given/bfloat16'); '' = all.")
FLAGS = flags.FLAGS

ROWS = ('zero_column', 'aligned', 'padded')
DLOGITS = ('given', 'from_logits')
DTYPES = ('float32', 'bfloat16')


def padded_rows(features: int) -> int:
  """K + 1 rounded up to a multiple of 8."""
  return -(-(features + 1) // 8) * 8


def operand_rows(rows: str, features: int) -> int:
  """The gradient matmul's rows for a form: K + 1 (the step's), K, or K + 1 padded to a multiple of 8."""
  return {'zero_column': features + 1, 'aligned': features, 'padded': padded_rows(features)}[rows]


def updated_rows(rows: str, features: int) -> int:
  """The rows of the layer the update writes: the layer's K + 1, or K for `aligned` (no bias row)."""
  return features if rows == 'aligned' else features + 1


def adam_like(p, mu, nu, g):
  """An AdamW-like update of float32 state from a gradient of any dtype, widened inside the update."""
  g = g.astype(jnp.float32)
  mu = 0.9 * mu + 0.1 * g
  nu = 0.999 * nu + 0.001 * g * g
  return p - 1e-3 * (mu / (jnp.sqrt(nu) + 1e-8) + 0.01 * p), mu, nu


def gradient_step(rows: str, dlogits: str, gradient_dtype: str, features: int):
  """(f, dlogits or logits, log_z, targets, p, mu, nu) -> (p, mu, nu): the form's matmul, then the update."""
  out_dtype, kept = jnp.dtype(gradient_dtype), updated_rows(rows, features)
  width = operand_rows(rows, features)

  def step(f, d_or_z, log_z, targets, p, mu, nu):
    if dlogits == 'from_logits':  # softmax - one-hot from float32 logits, as the step's backward makes them
      columns = jnp.arange(d_or_z.shape[-1])
      d = jnp.exp(d_or_z - log_z[:, None]) - (columns[None, :] == targets[:, None])
    else:
      d = d_or_z
    operand = jnp.pad(f, ((0, 0), (0, width - features))) if width > features else f
    grad = jnp.matmul(operand.T, d.astype(f.dtype), preferred_element_type=out_dtype)
    return adam_like(p, mu, nu, grad[:kept])
  return step


def moved_gbytes(rows: str, dlogits: str, gradient_dtype: str, batch: int, features: int, vocab: int) -> float:
  """What a form must move at least: the gradient written and read in its dtype, the state read and written
  in float32 (parameters and two moments), the dlogits read (bfloat16 given, float32 logits made from)."""
  written = operand_rows(rows, features) * vocab * jnp.dtype(gradient_dtype).itemsize
  read = updated_rows(rows, features) * vocab * jnp.dtype(gradient_dtype).itemsize
  state = updated_rows(rows, features) * vocab * 4 * 3 * 2
  return (written + read + state + batch * vocab * (4 if dlogits == 'from_logits' else 2)) / 1e9


def timed(fn, args, repeats: int):
  """(a call's median milliseconds, the parameters after the first call), the state donated and carried from
  call to call as training does."""
  fn = jax.jit(fn, donate_argnums=(4, 5, 6))
  head, state = args[:4], args[4:]
  state = fn(*head, *state)
  first = jax.device_get(state[0])
  box = [state]

  def run():
    box[0] = fn(*head, *box[0])
    jax.block_until_ready(box[0])
  return timing.median_seconds(run, repeats) * 1e3, first


def forms(selected: str) -> list[tuple[str, str, str]]:
  every = list(itertools.product(ROWS, DLOGITS, DTYPES))
  if not selected:
    return every
  chosen = [tuple(s.split('/')) for s in selected.split(',')]
  unknown = [c for c in chosen if c not in every]
  if unknown:
    raise SystemExit(f'error: --forms: {"/".join(unknown[0])} is not a form; use ROWS/DLOGITS/DTYPE with ROWS in '
                     f'{ROWS}, DLOGITS in {DLOGITS}, DTYPE in {DTYPES}')
  return chosen


def main(argv):
  del argv
  selected = forms(FLAGS.forms)  # refused before anything is measured
  batch, features, vocab = FLAGS.batch, FLAGS.features, FLAGS.vocab
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  f = jax.random.normal(keys[0], (batch, features), jnp.bfloat16)
  z = jax.random.normal(keys[1], (batch, vocab), jnp.float32)
  log_z = jax.nn.logsumexp(z, axis=-1)
  targets = jax.random.randint(keys[2], (batch,), 0, vocab)
  d = (jax.nn.softmax(z, axis=-1) - jax.nn.one_hot(targets, vocab)).astype(jnp.bfloat16)
  device = jax.devices()[0]
  print(f'{device.platform}, {device.device_kind}: f [{batch}, {features}], dlogits [{batch}, {vocab}]', flush=True)
  lines = []

  def state(rows):  # the same parameters for every form: `aligned` updates the first K rows of the others'
    shape, kept = (features + 1, vocab), updated_rows(rows, features)
    return (jax.random.normal(keys[3], shape, jnp.float32)[:kept], jnp.zeros(shape, jnp.float32)[:kept],
            jnp.ones(shape, jnp.float32)[:kept])

  grad = jax.random.normal(keys[3], (features + 1, vocab), jnp.float32)
  ms, _ = timed(lambda g, _, __, ___, p, mu, nu: adam_like(p, mu, nu, g),
                (grad, None, None, None, *state('zero_column')), FLAGS.repeats)
  only = moved_gbytes('zero_column', 'given', 'float32', 0, features, vocab) - (features + 1) * vocab * 4 / 1e9
  lines.append({'form': 'update_only', 'ms': round(ms, 4), 'gbytes': round(only, 4), 'tbps': round(only / ms, 3)})
  common.emit(lines[-1])
  start = jax.device_get(state('zero_column')[0])
  # the step's own form's first update: every form's is checked against it (error_vs_step)
  want = jax.device_get(jax.jit(gradient_step('zero_column', 'given', 'float32', features))(
      f, d, log_z, targets, *state('zero_column'))[0]) - start
  for rows, dlogits, dtype in selected:
    step = gradient_step(rows, dlogits, dtype, features)
    ms, first = timed(step, (f, z if dlogits == 'from_logits' else d, log_z, targets, *state(rows)), FLAGS.repeats)
    kept = updated_rows(rows, features)
    error = float(abs((first - start[:kept]) - want[:kept]).max() / abs(want[:kept]).max())
    gbytes = moved_gbytes(rows, dlogits, dtype, batch, features, vocab)
    flops = 2.0 * batch * operand_rows(rows, features) * vocab
    lines.append({'form': f'{rows}/{dlogits}/{dtype}', 'rows': operand_rows(rows, features), 'dlogits': dlogits,
                  'gradient_dtype': dtype, 'ms': round(ms, 4), 'gbytes': round(gbytes, 4),
                  'tbps': round(gbytes / ms, 3), 'tflops': round(flops / ms / 1e9, 1), 'error_vs_step': error})
    common.emit(lines[-1])
  print('form | ms | GB | TB/s')
  for line in lines:
    print(f"{line['form']} | {line['ms']:.3f} | {line['gbytes']:.3f} | {line['tbps']:.3f}")


if __name__ == '__main__':
  app.run(main)
