"""The paper's parameter-parallel softmax: the output layer split by vocabulary blocks.

Each 'model' shard holds a block of columns of the output layer [U; W; b] and computes only its
block of the logits. In the forward pass shards exchange per-example scalars alone: the maximum (pmax), the sum
of exponentials (psum), and the target's logit, which only its owner contributes (masked psum);
the backward pass sums the shards' [batch, K] feature gradients. The [batch, |V|] logits are
never gathered. On a (1, 1) mesh this is the ordinary log-softmax.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from nplm_jax import backend_defaults
from nplm_jax.parallel import softmax_kernel
from nplm_jax.errors import UserError



def _sum_over_data(x):
  """x summed over the mesh's 'data' axis, or x itself where that axis has one device: XLA keeps a psum
  over one device as an all-reduce, a copy of x (the layer's gradient, a pass over the output layer's size:
  15% of the research size's step on the 2-core CPU, whose mesh is 1 x 2). The shard passes that call it
  run without shard_map's replication check there (_check_vma), which cannot see that a one-device axis
  needs no sum."""
  return x if lax.axis_size('data') == 1 else lax.psum(x, 'data')


def _check_vma(mesh, check: bool = True) -> bool:
  """shard_map's check_vma for a backward pass whose layer gradient _sum_over_data sums."""
  return check and mesh.shape['data'] > 1


def _block_forward(f, w, b, targets):
  """This shard's raw logits block z = f w [B, |V|/model], and per example -log P(target) and log Z.

  b is the float32 bias of the block, or None when it is folded into f and w.
  """
  block = w.shape[-1]
  first = lax.axis_index('model') * block
  z = jnp.matmul(f, w, preferred_element_type=jnp.float32)
  logits = z if b is None else z + b
  global_max = lax.pmax(jnp.max(logits, axis=-1), 'model')  # only stabilises exp
  log_z = jnp.log(lax.psum(jnp.sum(jnp.exp(logits - global_max[:, None]), axis=-1), 'model')) + global_max
  local = targets - first
  owned = (local >= 0) & (local < block)
  column = jnp.clip(local, 0, block - 1)
  picked = jnp.take_along_axis(z, column[:, None], axis=-1)[:, 0] + (0.0 if b is None else b[column])
  target_logit = lax.psum(jnp.where(owned, picked, 0.0), 'model')
  return log_z - target_logit, z, log_z


def _dlogits(logits, first, log_z, targets, g):
  """g (softmax - onehot) for a block of logits [B, size] whose first column is word `first`."""
  columns = first + jnp.arange(logits.shape[-1])
  return g[:, None] * (jnp.exp(logits - log_z[:, None]) - (columns[None, :] == targets[:, None]))


# How XLA's paths make the output layer's gradient matmul (train.output_layer_gradient_form; every form gives
# the same numbers): 'as_traced', the dlogits made in the program of both matmuls that read them (XLA may fuse
# their making into each, and then remake them for each tile of the product), f given one column of zeros
# (K + 1 rows: the layer's shape); 'dlogits_apart', the dlogits made once, in the matmuls' dtype, behind an
# optimisation barrier, which both matmuls read; 'rows_padded', f given zero columns up to a multiple of
# LAYER_GRADIENT_ROW_MULTIPLE (tensor cores take two-byte operands whose rows are multiples of 8), the product's
# extra rows dropped by a slice; 'dlogits_apart_rows_padded', both. On an H200 the research size's gradient
# matmul ran 1.15 TB/s and 127 TFLOP/s, far from both bounds (benchmarks/gradient_matmul.py times the forms
# alone). The fused kernels make dz themselves: the form is XLA's paths' only.
GRADIENT_FORMS = ('as_traced', 'dlogits_apart', 'rows_padded', 'dlogits_apart_rows_padded')
LAYER_GRADIENT_ROW_MULTIPLE = 8


def _layer_gradient(f, b, dlogits, cast_dlogits, padded: bool = False, gradient_dtype=jnp.float32,
                    rows_padded: bool = False):
  """The output layer's gradient [dW; db] from a block's float32 dlogits, before the sum over 'data':
  f^T dlogits with both in f's dtype (cast_dlogits: dlogits so) and float32 accumulation, written in
  gradient_dtype (bfloat16: the matmul writes half the bytes and the update reads half;
  train.output_layer_gradient_dtype). Where the bias b is apart (f has no column of ones), f gets a column
  of zeros (padded: it has it already), so the matmul makes the layer's shape and db, the float32 sum of
  dlogits (then in gradient_dtype), is written over its last row in place: no copy of dW into a larger
  array (which a concatenation of dW and db costs: the size of the layer read and written again each
  step). rows_padded: f's columns padded with zeros to a multiple of LAYER_GRADIENT_ROW_MULTIPLE, and the
  product's extra rows (zeros) dropped (GRADIENT_FORMS)."""
  rows = f if b is None or padded else jnp.pad(f, ((0, 0), (0, 1)))
  kept = rows.shape[-1]
  if rows_padded:
    rows = jnp.pad(rows, ((0, 0), (0, -kept % LAYER_GRADIENT_ROW_MULTIPLE)))
  d_layer = jnp.matmul(rows.T, cast_dlogits, preferred_element_type=gradient_dtype)
  if b is not None:
    db = jnp.sum(dlogits, axis=0).astype(gradient_dtype)
    d_layer = lax.dynamic_update_slice_in_dim(d_layer, db[None, :], kept - 1, axis=0)
  return d_layer[:kept] if d_layer.shape[0] > kept else d_layer


def _gradients_of_dlogits(f, w, b, dlogits, padded: bool = False, gradient_dtype=jnp.float32, form='as_traced'):
  """(this shard's share of df, before the sum over 'model'; the layer's gradient, _layer_gradient) from a
  block's float32 dlogits and its columns w of the layer, made in `form` (GRADIENT_FORMS)."""
  cast = dlogits.astype(f.dtype)
  if form.startswith('dlogits_apart'):
    cast = lax.optimization_barrier(cast)
  df = jnp.matmul(cast, w.T, preferred_element_type=jnp.float32)
  return df, _layer_gradient(f, b, dlogits, cast, padded, gradient_dtype, form.endswith('rows_padded'))


def _block_backward(f, w, b, z, log_z, targets, g, padded: bool = False, gradient_dtype=jnp.float32,
                    form='as_traced'):
  """Gradients of sum(g * nll) from this shard's block: dlogits = g (softmax - onehot), in one pass,
  then df and the layer's gradient [dW; db] (_layer_gradient, in `form`: _gradients_of_dlogits): float32
  whatever the matmuls' dtype (they accumulate in it), or gradient_dtype; a separate bias gets its gradient
  summed from the float32 dlogits.
  padded: f ends with a column of zeros and w is the whole cast layer (_whole_cast_operands); df then has
  one column more, which _on_output_layer drops.
  """
  block = z.shape[-1]
  dlogits = _dlogits(z if b is None else z + b, lax.axis_index('model') * block, log_z, targets, g)
  df, d_layer = _gradients_of_dlogits(f, w, b, dlogits, padded, gradient_dtype, form)
  return lax.psum(df, 'model'), _sum_over_data(d_layer)


def _block_backward_recomputed(f, w, b, log_z, targets, g, **options):
  """_block_backward with the logits block recomputed (f w) instead of saved."""
  return _block_backward(f, w, b, jnp.matmul(f, w, preferred_element_type=jnp.float32), log_z, targets, g, **options)


def _sub_blocks(block: int, vocab_block: int) -> list[tuple[int, int]]:
  """(count, size) runs of sub-blocks covering a shard's `block` columns: full ones, then the rest."""
  full, rest = divmod(block, vocab_block)
  return [(n, size) for n, size in ((full, vocab_block), (1, rest)) if n and size]


def _for_each_sub_block(block, vocab_block, body, carry, offset=0):
  """carry = body(start, size, carry) for the sub-blocks of a shard, a loop over each run of equal sizes."""
  for count, size in _sub_blocks(block, vocab_block):
    carry = lax.fori_loop(0, count, lambda i, c, size=size, offset=offset: body(offset + i * size, size, c), carry)
    offset += count * size
  return carry


def _varying(tree):
  """Loop carries that will hold per-shard values: typed as varying over both mesh axes."""
  return jax.tree.map(lambda x: lax.pcast(x, ('data', 'model'), to='varying'), tree)


def _sub_block_logits(f, w, b, start, size):
  """Columns [start, start + size) of the shard's block: raw z = f w and logits z (+ b)."""
  z = jnp.matmul(f, lax.dynamic_slice_in_dim(w, start, size, axis=1), preferred_element_type=jnp.float32)
  return z if b is None else z + lax.dynamic_slice_in_dim(b, start, size)


def _streamed_forward(f, w, b, targets, *, vocab_block):
  """_block_forward a sub-block of `vocab_block` columns at a time, with a running max and sum
  (online log-sum-exp): the [B, block] logits never exist, only one [B, vocab_block] piece, which
  stays in cache on a CPU. Returns -log P(target) and log Z (nothing to save for the backward)."""
  block = w.shape[-1]
  local = targets - lax.axis_index('model') * block

  def body(start, size, carry):
    running_max, running_sum, picked = carry
    logits = _sub_block_logits(f, w, b, start, size)
    new_max, running_sum = softmax_kernel.online_logsumexp_step(running_max, running_sum, logits)
    inside = (local >= start) & (local < start + size)
    value = jnp.take_along_axis(logits, jnp.clip(local - start, 0, size - 1)[:, None], axis=-1)[:, 0]
    return new_max, running_sum, jnp.where(inside, value, picked)

  batch = f.shape[0]
  init = (jnp.full((batch,), -jnp.inf, jnp.float32), jnp.zeros((batch,), jnp.float32), jnp.zeros((batch,), jnp.float32))
  shard_max, shard_sum, picked = _for_each_sub_block(block, vocab_block, body, _varying(init))
  owned = (local >= 0) & (local < block)
  return _combine_shards(shard_max, shard_sum, jnp.where(owned, picked, 0.0))


def _combine_shards(shard_max, shard_sum, target_part):
  """(-log P(target), log Z) from each shard's max, sum of exp(z - max) and target logit (0 on the
  shards that do not own the target): the per-example scalars the shards exchange."""
  global_max = lax.pmax(shard_max, 'model')
  log_z = jnp.log(lax.psum(shard_sum * jnp.exp(shard_max - global_max), 'model')) + global_max
  return log_z - lax.psum(target_part, 'model'), log_z


def _streamed_backward(f, w, b, log_z, targets, g, *, vocab_block, gradient_dtype=jnp.float32, form='as_traced'):
  """_block_backward a sub-block at a time: each piece's logits recomputed, its dlogits made and
  used at once for its columns of the layer's gradient and its share of df (in `form`). The layer's
  gradient is made and summed over 'data' in float32 whatever the matmuls' dtype, or in gradient_dtype
  (as the all-at-once path does)."""
  block = w.shape[-1]
  first = lax.axis_index('model') * block

  def body(start, size, carry):
    df, d_layer = carry
    dlogits = _dlogits(_sub_block_logits(f, w, b, start, size), first + start, log_z, targets, g)
    df_part, layer_part = _gradients_of_dlogits(f, lax.dynamic_slice_in_dim(w, start, size, axis=1), b, dlogits,
                                                gradient_dtype=gradient_dtype, form=form)
    return df + df_part, lax.dynamic_update_slice_in_dim(d_layer, layer_part, start, axis=1)

  rows = f.shape[-1] + (b is not None)
  init = (jnp.zeros(f.shape, jnp.float32), jnp.zeros((rows, block), gradient_dtype))
  df, d_layer = _for_each_sub_block(block, vocab_block, body, _varying(init))
  return lax.psum(df, 'model'), _sum_over_data(d_layer)


# Where each kernel form runs: Mosaic TPU runs the grid form's grid in order (its accumulation over
# the last grid axis), CPUs interpret every form. GPUs run their grid programs in parallel, so they
# take the loop form ('pallas_loop', built through Triton: softmax_kernel's docstring) or the Mosaic GPU
# form ('pallas_mosaic'); the grid form is refused there, and the Mosaic GPU form on TPUs.
PALLAS_PLATFORMS = ('cpu', 'tpu')
MOSAIC_PLATFORMS = ('cpu', 'gpu')


def softmax_kernel_for(name: str, platform: str, devices: int = 1) -> str:
  """train.softmax_kernel with 'auto' resolved for the backend `platform` and a mesh of `devices`: the
  backend's value (backend_defaults.TABLE), except on one GPU, where it stays 'auto' and token_nll resolves it
  by each call's shapes (auto_kernel: the Mosaic GPU form where it was measured faster); one line of error
  for 'pallas' and 'pallas_mosaic' where they have no lowering, and for 'pallas_mosaic' on a CPU mesh of
  several `devices` (Mosaic GPU's interpreter simulates one GPU: kernels on several CPU devices at once
  collide in its shared state)."""
  if name == 'pallas' and platform not in PALLAS_PLATFORMS:
    raise UserError(f"train.softmax_kernel='pallas' (the kernel's grid form) runs on TPUs, and on CPUs in interpret "
                    f"mode, not on a {platform.upper()}; use --config.train.softmax_kernel=pallas_loop or "
                    "pallas_mosaic (its GPU forms), auto or xla")
  if name == 'pallas_mosaic' and platform not in MOSAIC_PLATFORMS:
    raise UserError(f"train.softmax_kernel='pallas_mosaic' (the kernel's Mosaic GPU form) runs on GPUs, and on CPUs "
                    f"in interpret mode, not on a {platform.upper()}; use --config.train.softmax_kernel=pallas (its "
                    "TPU form), auto or xla")
  if name == 'pallas_mosaic' and platform == 'cpu' and devices > 1:
    raise UserError(f"train.softmax_kernel='pallas_mosaic' runs on a CPU in Mosaic GPU's interpret mode, which "
                    f"simulates one GPU, not a mesh of {devices} devices; use --config.train.softmax_kernel=xla or "
                    "--config.mesh.cpu_devices=1")
  if name != 'auto':
    return name
  value = backend_defaults.backend_default('train.softmax_kernel', platform)
  if isinstance(value, str):
    return value
  return 'auto' if devices == 1 else 'xla'  # measured on one GPU: a mesh of several keeps XLA


def auto_kernel(platform: str, shard_batch: int, shard_columns: int, features: int, compute_dtype: str,
                kernel_tuning: str = '') -> str:
  """train.softmax_kernel='auto' for one call of the output layer: on a GPU, the Mosaic GPU form where it
  was measured faster than XLA (backend_defaults.TABLE: bfloat16, at least its examples and vocabulary
  columns a shard, a Hopper GPU, tiles of this feature width that fit its shared memory), else 'xla';
  on other backends their value."""
  value = backend_defaults.backend_default('train.softmax_kernel', platform)
  if isinstance(value, str):
    return value
  kernel, least_examples, least_columns = value
  fits = (compute_dtype == 'bfloat16' and shard_batch >= least_examples and shard_columns >= least_columns
          and softmax_kernel.mosaic_fits(features, jnp.bfloat16, _kernel_tuning('dz', kernel_tuning)))
  return kernel if fits else 'xla'


def streamed_vocab_block(vocab_block: int, shard_columns: int, batch: int = 0, platform: str = 'cpu') -> int:
  """The sub-block size a shard of `shard_columns` goes over its columns with (0: all at once,
  also when the sub-block would hold them all); -1 is resolved for the backend `platform`."""
  if vocab_block < 0:  # backend_defaults: from a shard's columns on CPUs, its logits' bytes on accelerators
    threshold, block = backend_defaults.backend_default('train.vocab_block', platform)
    stream = shard_columns >= threshold if platform == 'cpu' else 4 * batch * shard_columns > threshold
    vocab_block = block if stream else 0
  return vocab_block if vocab_block < shard_columns else 0


# vocab_softmax's kernel names, each (form, backward): 'pallas', the kernels' grid form (TPUs; CPUs in
# interpret mode); 'pallas_loop', their loop form (for GPUs; CPUs in interpret mode); 'pallas_loop_dz', the
# loop form with its gradients from dz (LoopTuning.backward='dz': the kernel writes dz, XLA's matmuls
# make dW and df); 'pallas_mosaic', the Mosaic GPU form (Hopper's tensor cores; its gradients from dz).
KERNEL_FORMS = {'pallas': ('grid', 'fused'), 'pallas_loop': ('loop', 'fused'), 'pallas_loop_dz': ('loop', 'dz'),
                'pallas_mosaic': ('mosaic', 'dz')}


def _kernel_tuning(backward: str, text: str) -> softmax_kernel.LoopTuning:
  """The kernel's settings: train.softmax_kernel_tuning's fields, the backward the kernel's name's."""
  return softmax_kernel.LoopTuning(**{**softmax_kernel.tuning_fields(text), 'backward': backward})


def checked_kernel_tuning(text: str) -> str:
  """train.softmax_kernel_tuning, checked before any work: one line of UserError for a field that is not
  LoopTuning's, a bad value, or a backward (train.softmax_kernel's name chooses it)."""
  try:
    fields = softmax_kernel.tuning_fields(text)
    if 'backward' in fields:
      raise UserError("the backward is chosen by train.softmax_kernel's name (pallas_loop_dz for dz), not by "
                      "its tuning")
    softmax_kernel.LoopTuning(**fields)
  except UserError as e:
    raise UserError(f"train.softmax_kernel_tuning='{text}': {e}; set --config.train.softmax_kernel_tuning="
                    "'FIELD=VALUE,...' or ''") from None
  return text


def _kernel_forward(f, w, b, targets, form='grid', backward='fused', tuning=''):
  """_streamed_forward with the shard's pass in the fused Pallas kernel (softmax_kernel.shard_stats)."""
  local = targets - lax.axis_index('model') * w.shape[-1]
  shard_max, shard_sum, target_part = softmax_kernel.shard_stats(f, w, b, local, form=form,
                                                                 tuning=_kernel_tuning(backward, tuning))
  return _combine_shards(shard_max, shard_sum, target_part)


def _kernel_backward(f, w, b, log_z, targets, g, form='grid', backward='fused', tuning='', gradient_dtype=jnp.float32):
  """_streamed_backward with the shard's pass in the fused Pallas kernels (softmax_kernel.shard_grads)."""
  local = targets - lax.axis_index('model') * w.shape[-1]
  # the layer's gradient [dW; db] as the output layer holds them (bias_row: made in that shape where the form can;
  # in gradient_dtype where dz comes in chunks of the vocabulary, else float32, cast by _on_output_layer)
  df, d_layer, _ = softmax_kernel.shard_grads(f, w, b, log_z, local, g, form=form, tuning=_kernel_tuning(backward, tuning),
                                              bias_row=True, gradient_dtype=gradient_dtype)
  return lax.psum(df, 'model'), _sum_over_data(d_layer)


class CastLayer(NamedTuple):
  """The output layer [U; W; b] beside its copy in the matmuls' dtype, which a training loop's steps carry
  from one update to the next (steps.cast_output_layer) and a shard's passes take instead of casting the
  layer's rows themselves. The copy is the layer's weight rows ([K, |V|]: the matmuls' operand, sliced by
  nothing) or the whole layer ([K + 1, |V|], bias row included: the shape of the update that writes the
  layer, so that XLA can make both in one pass), which the all-at-once path multiplies whole with f given
  a column of zeros (_whole_cast_operands). A pytree: shard_map's spec for the layer places both."""
  layer: jax.Array  # [K + 1, |V|], float32: the bias row, and the shape and dtype of the layer's gradient
  cast: jax.Array  # layer[:-1] or layer, in the matmuls' dtype


def _layer_of(output):
  return output.layer if isinstance(output, CastLayer) else output


def _whole_cast(output) -> bool:
  """A CastLayer whose copy is the whole layer, bias row included."""
  return isinstance(output, CastLayer) and output.cast.shape[0] == output.layer.shape[0]


def _shard_operands(f, output, dtype, cast_rows: bool = True):
  """A shard's matmul operands and bias from the whole output layer [U; W; b] (or CastLayer): dtype None, f
  (its last column ones) and the layer as it is, the bias folded into the matmul; else f and the weight
  rows cast to dtype (cast_rows False: as the layer holds them, float32), and the bias row apart, float32."""
  if dtype is None:
    return f, output, None
  if isinstance(output, CastLayer):
    return f.astype(dtype), output.cast[:-1] if _whole_cast(output) else output.cast, output.layer[-1]
  return f.astype(dtype), output[:-1].astype(dtype) if cast_rows else output[:-1], output[-1]


def _whole_cast_operands(f, output, dtype):
  """The all-at-once path's operands from a whole CastLayer: f with a column of zeros, so that f's products with
  the whole cast layer are its products with the weight rows (the bias row's term is 0) and no slice of
  the cast layer is made (a copy of it on the GPU); the bias row apart, float32."""
  return jnp.pad(f.astype(dtype), ((0, 0), (0, 1))), output.cast, output.layer[-1]


def _on_output_layer(forward_body, backward_body, dtype, backward_casts_rows: bool = False, whole_cast: bool = False,
                     gradient_dtype=jnp.float32):
  """A shard's passes written for (f, w, b) taking (f, output) instead: the backward body gives the
  output layer's gradient as one array (dW's rows, then db's) in gradient_dtype: float32, as the matmul
  accumulated it, or bfloat16 (as the XLA bodies and the kernels' dz in chunks of the vocabulary, given
  gradient_dtype, write it; the other kernel forms' float32 one is cast).
  Taking the layer whole (not its rows and bias row as two slices) spares autodiff a full-size
  zero-padded copy of each slice's gradient, and dW any rounding to the matmuls' dtype; making it in
  the layer's shape (_layer_gradient) spares a copy of dW into it (a concatenation).
  backward_casts_rows: the backward body gets the weight rows as the layer holds them (float32) and
  casts them itself (the fused kernel's dz in chunks of the vocabulary, a chunk at a time).
  whole_cast: the bodies of a whole CastLayer get _whole_cast_operands (written for f with its column of
  zeros: their df has one column more, dropped here)."""
  def operands(f, output, cast_rows=True):
    if whole_cast and _whole_cast(output):
      return _whole_cast_operands(f, output, dtype)
    return _shard_operands(f, output, dtype, cast_rows)

  def forward(f, output, *rest):
    return forward_body(*operands(f, output), *rest)

  def backward(f, output, *rest):
    df, d_output = backward_body(*operands(f, output, cast_rows=not backward_casts_rows), *rest)
    return df[:, :f.shape[-1]].astype(f.dtype), d_output.astype(gradient_dtype)
  return forward, backward


def _vocab_parallel_nll(f, output, targets, *, mesh, dtype=None, recompute=False, vocab_block=0, kernel='xla',
                        kernel_tuning='', cast_layer=None, gradient_dtype=jnp.float32, gradient_form='as_traced'):
  """-log P(target) for features f [B, K'] and the output layer [U; W; b] ([K + 1, |V|]): dtype None,
  f ends with a column of ones (K' = K + 1) and the bias is folded into the matmul; else the matmuls
  run in dtype (f and the weight rows cast, float32 accumulation) and the bias row stays float32.

  A custom VJP: autodiff of the log-softmax makes several [B, |V|] passes (exp, normalise, the
  target's scatter, the sum for the bias); here the gradient of the logits is one fused pass over
  the saved raw logits, followed by the two matmuls; the softmax and the layer's gradient are float32.
  recompute: save only f, log Z and the targets, and recompute the logits block in the backward
  pass (one more matmul): a step over chunks then holds one chunk's [chunk, |V| / model] logits at
  a time instead of every chunk's.
  vocab_block > 0 (and below a shard's |V| / model): each pass goes over a shard's block
  `vocab_block` columns at a time (_streamed_forward/_backward), so it holds [B, vocab_block]
  logits instead of [B, |V| / model], and recomputes them in the backward pass; -1: resolved by
  streamed_vocab_block.
  kernel 'pallas', 'pallas_loop', 'pallas_loop_dz' or 'pallas_mosaic': each shard's passes in the fused
  Pallas kernels (softmax_kernel, its grid, loop or Mosaic GPU form and its backward: KERNEL_FORMS), which
  never write the logits to memory (the dz backwards write dz, a chunk of the batch at a time); recompute
  and vocab_block then do not apply (the kernels tile the columns); kernel_tuning: their settings
  (train.softmax_kernel_tuning, softmax_kernel.tuning_fields' text; '' for the chosen ones).
  cast_layer: output (whole, or its weight rows) already in dtype (CastLayer), taken instead of a cast of
  the rows; it gets no gradient (the layer's gradient is output's).
  gradient_dtype: the layer's gradient's dtype until the custom VJP hands it back (in the layer's dtype):
  bfloat16 rounds it once, where the matmul writes it (XLA's paths and the kernels' dz in chunks of the
  vocabulary; the other kernel forms' float32 one is cast), and sums it over 'data' in bfloat16.
  gradient_form: how XLA's paths make the layer's gradient matmul (GRADIENT_FORMS; the same numbers).
  """
  if cast_layer is not None:
    output = CastLayer(output, cast_layer)
  options = dict(mesh=mesh, dtype=dtype, gradient_dtype=gradient_dtype)
  if kernel in KERNEL_FORMS:
    form, backward = KERNEL_FORMS[kernel]
    kernel_options = {'form': form, 'backward': backward, 'tuning': kernel_tuning}
    # dz in chunks of the vocabulary casts the layer's rows a chunk at a time: no copy of them all in dtype
    casts_rows = softmax_kernel.tuning_fields(kernel_tuning).get('dz_axis') == 'vocab'
    return _tiled_nll(f, output, targets, forward_body=functools.partial(_kernel_forward, **kernel_options),
                      backward_body=functools.partial(_kernel_backward, **kernel_options,
                                                      gradient_dtype=gradient_dtype),
                      check_vma=False, backward_casts_rows=casts_rows, **options)
  vocab_block = streamed_vocab_block(vocab_block, _layer_of(output).shape[-1] // mesh.shape['model'],
                                     f.shape[0] // mesh.shape['data'], mesh.devices.flat[0].platform)
  if vocab_block:
    return _tiled_nll(f, output, targets, forward_body=functools.partial(_streamed_forward, vocab_block=vocab_block),
                      backward_body=functools.partial(_streamed_backward, vocab_block=vocab_block,
                                                      gradient_dtype=gradient_dtype, form=gradient_form), **options)
  whole = _whole_cast(output)  # f with a column of zeros against the whole cast layer
  backward_options = {'padded': whole, 'gradient_dtype': gradient_dtype, 'form': gradient_form}
  block_forward, block_backward = _on_output_layer(_block_forward, functools.partial(_block_backward, **backward_options),
                                                   dtype, whole_cast=whole, gradient_dtype=gradient_dtype)
  _, recomputed_backward = _on_output_layer(None, functools.partial(_block_backward_recomputed, **backward_options),
                                            dtype, whole_cast=whole, gradient_dtype=gradient_dtype)
  layer = (P('data', None), P(None, 'model'))
  forward = jax.shard_map(block_forward, mesh=mesh, in_specs=(*layer, P('data')),
                          out_specs=(P('data'), P('data', 'model'), P('data')))
  backward = jax.shard_map(block_backward, mesh=mesh, out_specs=layer, check_vma=_check_vma(mesh),
                           in_specs=(*layer, P('data', 'model'), P('data'), P('data'), P('data')))
  backward_recomputed = jax.shard_map(recomputed_backward, mesh=mesh, out_specs=layer, check_vma=_check_vma(mesh),
                                      in_specs=(*layer, P('data'), P('data'), P('data')))

  @jax.custom_vjp
  def nll(f, output, targets):
    return forward(f, output, targets)[0]

  def nll_fwd(f, output, targets):
    value, z, log_z = forward(f, output, targets)
    return value, (f, output, None if recompute else z, log_z, targets)

  def nll_bwd(residuals, g):
    f, output, z, log_z, targets = residuals
    if z is None:
      return _cotangents(output, *backward_recomputed(f, output, log_z, targets, g))
    return _cotangents(output, *backward(f, output, z, log_z, targets, g))

  nll.defvjp(nll_fwd, nll_bwd)
  return nll(f, output, targets)


def _cotangents(output, df, d_layer):
  """The custom VJPs' cotangents of (f, output, targets) from df and the layer's gradient (in the layer's
  dtype: a bfloat16 one is widened, a cast XLA can fuse into the update that reads it): none for the
  targets, none for a CastLayer's copy (of the layer, whose gradient d_layer is)."""
  d_layer = d_layer.astype(_layer_of(output).dtype)
  return df, CastLayer(d_layer, None) if isinstance(output, CastLayer) else d_layer, None


def _tiled_nll(f, output, targets, *, mesh, dtype, forward_body, backward_body, check_vma=True,
               backward_casts_rows=False, gradient_dtype=jnp.float32):
  """A custom-VJP NLL whose shard passes (forward_body, backward_body, written for (f, w, b))
  recompute the logits: only f, log Z and the targets are saved for the backward pass
  (backward_casts_rows, gradient_dtype: _on_output_layer's)."""
  forward_body, backward_body = _on_output_layer(forward_body, backward_body, dtype, backward_casts_rows,
                                                 gradient_dtype=gradient_dtype)
  layer = (P('data', None), P(None, 'model'))
  forward = jax.shard_map(forward_body, mesh=mesh, in_specs=(*layer, P('data')), out_specs=(P('data'), P('data')),
                          check_vma=check_vma)
  backward = jax.shard_map(backward_body, mesh=mesh, in_specs=(*layer, P('data'), P('data'), P('data')),
                           out_specs=layer, check_vma=_check_vma(mesh, check_vma))

  @jax.custom_vjp
  def nll(f, output, targets):
    return forward(f, output, targets)[0]

  def nll_fwd(f, output, targets):
    value, log_z = forward(f, output, targets)
    return value, (f, output, log_z, targets)

  def nll_bwd(residuals, g):
    return _cotangents(residuals[1], *backward(*residuals, g))

  nll.defvjp(nll_fwd, nll_bwd)
  return nll(f, output, targets)


def with_bias_column(f):
  """[f, 1]: multiplied by the output layer [U; W; b] it gives the logits, bias included."""
  return jnp.concatenate([f, jnp.ones((f.shape[0], 1), f.dtype)], axis=-1)


def token_nll(f, output, targets, *, mesh, compute_dtype='float32', recompute=False, vocab_block=0, kernel='xla',
              kernel_tuning='', cast_layer=None, gradient_dtype='float32', gradient_form='as_traced'):
  """-log P(target | context) per example, batch sharded on 'data', vocabulary on 'model'.

  f [B, K] are the features, output [K + 1, |V|] the output layer [U; W; b]. In float32 the bias
  is folded into the matmul, [f, 1] @ output: no pass of its own over the [B, |V|] logits (a
  separate add made the float32 step 10-17% slower on CPU) and no copy of the output layer. In
  bfloat16 the weight rows are cast (a pass that cast needs anyway) and the bias stays float32 in the
  logits; the layer's gradient is float32 either way (unless gradient_dtype, below), one array made in its
  shape (_layer_gradient).
  recompute: the backward pass recomputes the logits instead of keeping them (_vocab_parallel_nll).
  vocab_block: go over each shard's columns this many at a time (_vocab_parallel_nll); 0 = at once.
  kernel: 'xla', or a name of KERNEL_FORMS for the fused kernels (softmax_kernel), with kernel_tuning's
  settings (_vocab_parallel_nll); 'auto' (softmax_kernel_for's on one GPU): auto_kernel's for these shapes.
  cast_layer: output or output[:-1] already cast to compute_dtype (not float32), taken instead of casting
  its rows here (CastLayer).
  gradient_dtype: 'bfloat16' (with bfloat16 matmuls) rounds the layer's gradient to bfloat16 where its
  matmul writes it (_vocab_parallel_nll; train.output_layer_gradient_dtype); it reaches autodiff in the
  layer's dtype.
  gradient_form: how XLA's paths make that gradient's matmul (GRADIENT_FORMS; train.output_layer_gradient_form).
  """
  if gradient_form not in GRADIENT_FORMS:
    raise ValueError(f'token_nll: gradient_form {gradient_form!r} is not one of {", ".join(GRADIENT_FORMS)}')
  if kernel == 'auto':  # on one GPU (softmax_kernel_for): by this call's shapes
    kernel = auto_kernel(mesh.devices.flat[0].platform, f.shape[0] // mesh.shape['data'],
                         output.shape[-1] // mesh.shape['model'], f.shape[-1], compute_dtype, kernel_tuning)
  if compute_dtype == 'float32':
    if cast_layer is not None:
      raise ValueError('token_nll: a cast layer is for a compute dtype other than float32 (whose matmul takes the '
                       'layer as it is)')
    if gradient_dtype != 'float32':
      raise ValueError(f'token_nll: a {gradient_dtype} layer gradient is for bfloat16 matmuls, not float32 ones')
    return _vocab_parallel_nll(with_bias_column(f), output, targets, mesh=mesh, recompute=recompute,
                               vocab_block=vocab_block, kernel=kernel, kernel_tuning=kernel_tuning,
                               gradient_form=gradient_form)
  return _vocab_parallel_nll(f, output, targets, mesh=mesh, dtype=jnp.dtype(compute_dtype), recompute=recompute,
                             vocab_block=vocab_block, kernel=kernel, kernel_tuning=kernel_tuning, cast_layer=cast_layer,
                             gradient_dtype=jnp.dtype(gradient_dtype), gradient_form=gradient_form)


def _owned_columns(ids, first, block):
  local = ids - first
  return (local >= 0) & (local < block), jnp.clip(local, 0, block - 1)


def _block_sampled_logits(f, output, targets, samples):
  """Logits of each example's target [B] and of the shared noise samples [B, k], from all shards.

  f = [features, 1]; each shard scores only the columns it owns; a psum of per-example scalars
  combines them.
  """
  block = output.shape[-1]
  first = lax.axis_index('model') * block
  t_owned, t_idx = _owned_columns(targets, first, block)
  s_owned, s_idx = _owned_columns(samples, first, block)
  target_logit = jnp.einsum('bk,kb->b', f, output[:, t_idx], preferred_element_type=jnp.float32)
  sample_logits = jnp.matmul(f, output[:, s_idx], preferred_element_type=jnp.float32)
  target_logit = lax.psum(jnp.where(t_owned, target_logit, 0.0), 'model')
  sample_logits = lax.psum(jnp.where(s_owned[None, :], sample_logits, 0.0), 'model')
  return target_logit, sample_logits


def _owned_columns_of(block, ids):
  first = lax.axis_index('model') * block.shape[-1]
  owned, idx = _owned_columns(ids, first, block.shape[-1])
  return lax.psum(jnp.where(owned[None, :], block[:, idx], 0), 'model')  # one shard's, plus zeros: exact


def gather_columns(output, ids, *, mesh):
  """output[:, ids] ([K + 1, len(ids)], replicated) from the output layer split by vocabulary on 'model':
  each shard gathers the columns it owns, and a psum combines them."""
  return jax.shard_map(_owned_columns_of, mesh=mesh, in_specs=(P(None, 'model'), P()), out_specs=P())(output, ids)


def _add_to_owned_columns(block, ids, updates):
  size = block.shape[-1]
  owned, idx = _owned_columns(ids, lax.axis_index('model') * size, size)
  local = jnp.where(owned, idx, size)  # another shard's column: out of range, dropped
  return block.at[:, local].add(updates.astype(block.dtype), mode='drop')


def add_to_columns(output, ids, updates, *, mesh):
  """output with updates [K + 1, len(ids)] added to its columns ids (repeated ids add up), each shard of
  the vocabulary on 'model' adding those it owns, in place: no pass over the other columns."""
  return jax.shard_map(_add_to_owned_columns, mesh=mesh, in_specs=(P(None, 'model'), P(), P()),
                       out_specs=P(None, 'model'))(output, ids, updates)


def sampled_loss_of_columns(f, columns, targets, samples, log_q, *, kind):
  """sampled_token_loss from the output layer's columns gathered already: columns [K + 1, B + k] are the
  batch's targets' then the samples' (gather_columns of the two concatenated)."""
  fb = with_bias_column(f)
  batch = targets.shape[0]
  target_logit = jnp.einsum('bk,kb->b', fb, columns[:, :batch], preferred_element_type=jnp.float32)
  sample_logits = jnp.matmul(fb, columns[:, batch:], preferred_element_type=jnp.float32)
  return sampled_loss_from_logits(kind, target_logit, sample_logits, targets, samples, log_q)


def sampled_loss_from_logits(kind, target_logit, sample_logits, targets, samples, log_q):
  """Per-example sampled loss; `log_q` holds log noise probabilities over the vocabulary.

  sampled_softmax: importance-sampled softmax over {target} + samples, logits corrected by
  -log(k q(w)), samples equal to the target removed. nce: noise-contrastive estimation with k
  noise words per example and the network's logits taken as self-normalised log-probabilities.
  """
  k = samples.shape[0]
  log_kq_t = jnp.log(k) + log_q[targets]
  log_kq_s = jnp.log(k) + log_q[samples]
  if kind == 'sampled_softmax':
    t = target_logit - log_kq_t
    s = jnp.where(samples[None, :] == targets[:, None], -jnp.inf, sample_logits - log_kq_s[None, :])
    return jax.nn.logsumexp(jnp.concatenate([t[:, None], s], axis=1), axis=1) - t
  if kind == 'nce':
    return jax.nn.softplus(-(target_logit - log_kq_t)) + jnp.sum(
        jax.nn.softplus(sample_logits - log_kq_s[None, :]), axis=1)
  raise ValueError(f'unknown sampled loss {kind!r}')


def sampled_token_loss(f, output, targets, samples, log_q, *, mesh, kind):
  """A sampled training loss per example, batch on 'data', vocabulary on 'model'.

  Costs O(B k) output-layer work instead of O(B |V|); `samples` [k] are shared by the batch.
  """
  logits = jax.shard_map(_block_sampled_logits, mesh=mesh,
                         in_specs=(P('data', None), P(None, 'model'), P('data'), P()),
                         out_specs=(P('data'), P('data', None)))
  target_logit, sample_logits = logits(with_bias_column(f), output, targets, samples)
  return sampled_loss_from_logits(kind, target_logit, sample_logits, targets, samples, log_q)
