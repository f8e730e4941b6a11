"""A fused output layer for one vocabulary shard, in Pallas: the logits only ever exist a tile at a time.

vocab_softmax's shard_map gives each 'model' shard its block of the output layer's columns. Per shard,
the softmax needs from the [B, columns] logits z = f w + b only per-example scalars (their max, the
sum of exp(z - max), the target's logit), and its gradient only f^T dz, sum_rows dz and dz w^T with
dz = g (softmax - onehot). Written with XLA, the logits (or each streamed block of them) go to memory
and back; here three kernels go over [block_b, block_v] tiles, each tile's logits computed in the
kernel, used and dropped:

- shard_stats: grid (batch tiles, vocabulary tiles), the vocabulary innermost: a running max and sum
  of exponentials (online log-sum-exp) and the target's logit, per example;
- shard_grads, in two kernels: grid (vocabulary tiles, batch tiles), each tile's logits recomputed,
  its dz made, dw[:, tile] += f_tile^T dz and db[tile] += sum dz over the batch tiles; then grid
  (batch tiles, vocabulary tiles), df[tile] += dz w_tile^T over the vocabulary.

Matmuls take f and w in their dtype (bfloat16 or float32) and accumulate in float32; the softmax, the
bias and every gradient are float32. The cross-shard combine (pmax, psum) stays in vocab_softmax (whose
shard_map runs these kernels with check_vma=False: Pallas's interpreter does not type its iota as
varying over the mesh axes). A shard whose columns (or batch) are not a multiple of the tile is padded
up to one (a copy of w: the default vocab_pad_multiple of 128 and block_v of 128 never need it);
padded columns are masked to -inf; padded rows carry g = 0 and a log-normaliser of +inf, so their
probabilities are exp(-inf) = 0 whatever the bias (a normaliser of 0 overflowed exp above a bias of
about 88 and made dW and db NaN through 0 x inf).

Two forms of the same passes (`form`):
- 'grid': each kernel accumulates into its output block over the last grid axis, which Mosaic TPU
  runs in order (the TPU form);
- 'loop': each program owns its output tile and loops over the other axis with lax.fori_loop inside
  the program (statistics and df per batch tile over the vocabulary tiles, dW and db per vocabulary
  tile over the batch tiles), as Pallas's GPU attention kernels do: GPU grids run their programs in
  parallel, so nothing may accumulate across them (the GPU form).
On a CPU both run in Pallas's interpret mode, where the tests check them against NumPy and the XLA
path. On a GPU, pallas_call would lower through Mosaic GPU by default (jax_pallas_use_mosaic_gpu),
whose async copies and shared memory these kernels' whole-array blocks exceed; the loop form names
Triton through its compiler parameters instead and pads the feature width K with zeros to a power of
two (Triton's lowering takes no other array size; JAX 0.11 deprecates Pallas's Triton backend, so a
later JAX will need a Mosaic GPU form). It lowers for CUDA (a CPU test builds it). On an H100 (JAX
0.11.2, tests/test_gpu.py) it compiled and matched NumPy in bfloat16 with 128 x 128 tiles at K = 256,
while float32 (and bfloat16 at K = 512) asked Triton for 384 KiB of shared memory where the chip has
227: its tiles now shrink with K and the operand size to fit the chip's shared memory (loop_tile),
which has not run on a GPU yet. Nor has the kernel been timed there, so 'auto' never picks it
(backend_defaults). The grid form is for TPUs only (vocab_softmax refuses it elsewhere): its first
grid axis parallel, its last in order; it lowers through Mosaic for TPU v4, v5e and v6e (a CPU test
builds it for an abstract TPU device) but has not been compiled or run on a TPU.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pl_tpu
from jax.experimental.pallas import triton as pl_triton

from nplm_jax.errors import UserError

BLOCK_B = 128  # examples a tile
BLOCK_V = 128  # vocabulary columns a tile
FORMS = ('grid', 'loop')
# The loop form on a GPU: Triton pipelines each loop's loads over LOOP_STAGES buffers in shared memory,
# whose size a program may use depends on the chip (KiB by compute capability; others: LOOP_SHARED_KIB_OTHER).
LOOP_STAGES = 2
LOOP_SHARED_KIB = {(9, 0): 227, (10, 0): 227, (8, 0): 163, (8, 7): 163}
LOOP_SHARED_KIB_OTHER = 99


def online_logsumexp_step(running_max, running_sum, logits):
  """(max, sum of exp(z - max)) per row after one more block of logits [rows, columns]: the online
  log-sum-exp that the streamed XLA path and both kernel forms share."""
  new_max = jnp.maximum(running_max, jnp.max(logits, axis=-1))
  return new_max, running_sum * jnp.exp(running_max - new_max) + jnp.sum(jnp.exp(logits - new_max[:, None]), axis=-1)


def _pad_to(x, axis: int, multiple: int, value=0):
  size = x.shape[axis]
  extra = -size % multiple
  if not extra:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, extra)
  return jnp.pad(x, widths, constant_values=value)


def _logits_of(f, w, b, column0, columns: int):
  """A tile's logits [rows, block_v] in float32 from loaded values, columns past the shard's at -inf."""
  logits = jnp.dot(f, w, preferred_element_type=jnp.float32) + b[None, :]
  ids = column0 + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
  return jnp.where(ids < columns, logits, -jnp.inf), ids


def _dlogits_of(f, w, b, log_z, t, g, column0, columns: int):
  """g (softmax - onehot) for the tile, float32 (0 in padded rows and columns)."""
  logits, ids = _logits_of(f, w, b, column0, columns)
  onehot = ((ids == t[:, None]) & (ids < columns)).astype(jnp.float32)
  return g[:, None] * (jnp.exp(logits - log_z[:, None]) - onehot)


def _tile_dlogits(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, column0, columns: int):
  """_dlogits_of of the grid form's whole blocks."""
  return _dlogits_of(f_ref[...], w_ref[...], b_ref[...], log_z_ref[...], t_ref[...], g_ref[...], column0, columns)


def _stats_kernel(f_ref, w_ref, b_ref, t_ref, max_ref, sum_ref, pick_ref, *, block_v: int, columns: int):
  j = pl.program_id(1)

  @pl.when(j == 0)
  def _():
    max_ref[...] = jnp.full(max_ref.shape, -jnp.inf, jnp.float32)
    sum_ref[...] = jnp.zeros(sum_ref.shape, jnp.float32)
    pick_ref[...] = jnp.zeros(pick_ref.shape, jnp.float32)

  logits, ids = _logits_of(f_ref[...], w_ref[...], b_ref[...], j * block_v, columns)
  max_ref[...], sum_ref[...] = online_logsumexp_step(max_ref[...], sum_ref[...], logits)
  hit = (ids == t_ref[...][:, None]) & (ids < columns)
  pick_ref[...] += jnp.sum(jnp.where(hit, logits, 0.0), axis=-1)


def _weight_grads_kernel(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, dw_ref, db_ref, *, block_v: int,
                         columns: int):
  j, i = pl.program_id(0), pl.program_id(1)

  @pl.when(i == 0)
  def _():
    dw_ref[...] = jnp.zeros(dw_ref.shape, jnp.float32)
    db_ref[...] = jnp.zeros(db_ref.shape, jnp.float32)

  dz = _tile_dlogits(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, j * block_v, columns)
  db_ref[...] += jnp.sum(dz, axis=0)
  dw_ref[...] += jnp.dot(f_ref[...].T, dz.astype(f_ref.dtype), preferred_element_type=jnp.float32)


def _feature_grads_kernel(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, df_ref, *, block_v: int, columns: int):
  j = pl.program_id(1)

  @pl.when(j == 0)
  def _():
    df_ref[...] = jnp.zeros(df_ref.shape, jnp.float32)

  dz = _tile_dlogits(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, j * block_v, columns)
  df_ref[...] += jnp.dot(dz.astype(w_ref.dtype), w_ref[...].T, preferred_element_type=jnp.float32)


def _stats_loop_kernel(f_ref, w_ref, b_ref, t_ref, max_ref, sum_ref, pick_ref, *, block_v: int, columns: int,
                       num_v: int):
  """One batch tile's statistics, its program looping over every vocabulary tile."""
  f, t = f_ref[...], t_ref[...]

  def tile(j, carry):
    old_max, total, pick = carry
    cols = pl.ds(pl.multiple_of(j * block_v, block_v), block_v)
    logits, ids = _logits_of(f, w_ref[:, cols], b_ref[cols], j * block_v, columns)
    new_max, total = online_logsumexp_step(old_max, total, logits)
    hit = (ids == t[:, None]) & (ids < columns)
    return new_max, total, pick + jnp.sum(jnp.where(hit, logits, 0.0), axis=-1)

  rows = f.shape[0]
  start = (jnp.full((rows,), -jnp.inf, jnp.float32), jnp.zeros((rows,), jnp.float32), jnp.zeros((rows,), jnp.float32))
  max_ref[...], sum_ref[...], pick_ref[...] = jax.lax.fori_loop(0, num_v, tile, start)


def _weight_grads_loop_kernel(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, dw_ref, db_ref, *, block_b: int,
                              block_v: int, columns: int, num_b: int):
  """One vocabulary tile's dW and db, its program looping over every batch tile."""
  j = pl.program_id(0)
  w, b = w_ref[...], b_ref[...]

  def tile(i, carry):
    dw, db = carry
    rows = pl.ds(pl.multiple_of(i * block_b, block_b), block_b)
    f = f_ref[rows, :]
    dz = _dlogits_of(f, w, b, log_z_ref[rows], t_ref[rows], g_ref[rows], j * block_v, columns)
    return dw + jnp.dot(f.T, dz.astype(f.dtype), preferred_element_type=jnp.float32), db + jnp.sum(dz, axis=0)

  dw_ref[...], db_ref[...] = jax.lax.fori_loop(
      0, num_b, tile, (jnp.zeros(dw_ref.shape, jnp.float32), jnp.zeros(db_ref.shape, jnp.float32)))


def _feature_grads_loop_kernel(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, df_ref, *, block_v: int, columns: int,
                               num_v: int):
  """One batch tile's df, its program looping over every vocabulary tile."""
  f, log_z, t, g = f_ref[...], log_z_ref[...], t_ref[...], g_ref[...]

  def tile(j, df):
    cols = pl.ds(pl.multiple_of(j * block_v, block_v), block_v)
    w = w_ref[:, cols]
    dz = _dlogits_of(f, w, b_ref[cols], log_z, t, g, j * block_v, columns)
    return df + jnp.dot(dz.astype(w.dtype), w.T, preferred_element_type=jnp.float32)

  df_ref[...] = jax.lax.fori_loop(0, num_v, tile, jnp.zeros(df_ref.shape, jnp.float32))


def _loop_features(k: int) -> int:
  """The loop form's feature width: K padded with zeros to a power of two (Triton's arrays need it)."""
  return 1 << max(k - 1, 0).bit_length()


def _prepared(f, w, b, rows, block_b: int, block_v: int, row_pads=None, form: str = 'grid'):
  """Inputs padded to whole tiles: f [B', K'], w [K', V'], b [V'] (float32), per-example rows [B']
  (padded with `row_pads`, one value a row input, default 0). The loop form pads the feature width K
  with zeros to a power of two (K' >= K; exact), which its Triton lowering needs of every array."""
  b = jnp.zeros(w.shape[-1], jnp.float32) if b is None else b.astype(jnp.float32)
  row_pads = row_pads or [0] * len(rows)
  if form == 'loop':
    features = _loop_features(f.shape[1])
    f, w = _pad_to(f, 1, features), _pad_to(w, 0, features)
  return (_pad_to(f, 0, block_b), _pad_to(w, 1, block_v), _pad_to(b, 0, block_v),
          [_pad_to(r, 0, block_b, pad) for r, pad in zip(rows, row_pads)])


def _platform() -> str:
  """The backend the kernels are built for (tests lower them for another: tests/test_softmax_kernel.py)."""
  return jax.default_backend()


def _interpret() -> bool:
  return _platform() == 'cpu'


def _shared_memory_bytes() -> int:
  """Shared memory a program may use on this GPU (on other backends, an H100's: interpret mode then tiles
  as the H100 would)."""
  capability = getattr(jax.devices()[0], 'compute_capability', None) if _platform() == 'gpu' else '9.0'
  try:
    major, minor = (int(x) for x in str(capability).split('.')[:2])
  except ValueError:
    return LOOP_SHARED_KIB_OTHER * 1024
  return LOOP_SHARED_KIB.get((major, minor), LOOP_SHARED_KIB_OTHER) * 1024


def loop_tile(features: int, itemsize: int, shared_bytes: int | None = None) -> int:
  """The loop form's square tile (block_b = block_v) for a padded feature width `features` of operands of
  `itemsize` bytes: the largest of 128, 64, 32, 16 whose program fits in shared memory, about one
  [tile, K] operand held and LOOP_STAGES [K, tile] ones in flight, with 10% to spare (on the H100,
  128 x 128 tiles at K = 256 in float32 asked Triton for 384 KiB of its 227). UserError where none fits."""
  shared_bytes = shared_bytes or _shared_memory_bytes()
  for tile in (128, 64, 32, 16):
    if itemsize * features * tile * (1 + LOOP_STAGES) <= 0.9 * shared_bytes:
      return tile
  raise UserError(f'the fused softmax kernel cannot tile a feature width of {features} ({itemsize}-byte operands) '
                   f'in this GPU\'s {shared_bytes // 1024} KiB of shared memory; use --config.train.softmax_kernel=xla')


def _tiles(block_b, block_v, f, w, form: str) -> tuple[int, int]:
  """(block_b, block_v): those given, else BLOCK_B x BLOCK_V (grid form) or loop_tile's (loop form)."""
  if form == 'loop' and not (block_b and block_v):
    tile = loop_tile(_loop_features(f.shape[1]), max(jnp.dtype(f.dtype).itemsize, jnp.dtype(w.dtype).itemsize))
    return block_b or tile, block_v or tile
  return block_b or BLOCK_B, block_v or BLOCK_V


def _loop_compiler_params():
  """The loop form's lowering on a GPU: Triton (named by its compiler parameters; pallas_call would
  take Mosaic GPU otherwise, whose async copies and shared memory these whole-array blocks exceed)."""
  return pl_triton.CompilerParams(num_warps=4, num_stages=LOOP_STAGES) if _platform() == 'gpu' else None


def _grid_compiler_params():
  """The grid form's lowering on a TPU (Mosaic): the first grid axis independent (a chip with two
  TensorCores may split it between them), the last in order (each kernel accumulates over it)."""
  return pl_tpu.CompilerParams(dimension_semantics=('parallel', 'arbitrary')) if _platform() == 'tpu' else None


def shard_stats(f, w, b, local_targets, *, block_b: int | None = None, block_v: int | None = None,
                form: str = 'grid'):
  """(max, sum of exp(z - max), z of the target or 0 where the shard does not own it) per example,
  float32 [B] each, for z = f w + b over this shard's columns; local_targets are column indices
  (outside [0, columns): not this shard's). Tiles of block_b x block_v (default BLOCK_B x BLOCK_V in the
  grid form, loop_tile's in the loop form), in the 'grid' (TPU) or 'loop' (GPU) form."""
  block_b, block_v = _tiles(block_b, block_v, f, w, form)
  batch, columns = f.shape[0], w.shape[-1]
  f, w, b, (t,) = _prepared(f, w, b, [local_targets.astype(jnp.int32)], block_b, block_v, form=form)
  if form == 'loop':
    row = pl.BlockSpec((block_b,), lambda i: (i,))
    stats = pl.pallas_call(
        functools.partial(_stats_loop_kernel, block_v=block_v, columns=columns, num_v=w.shape[-1] // block_v),
        grid=(f.shape[0] // block_b,),
        in_specs=[pl.BlockSpec((block_b, f.shape[1]), lambda i: (i, 0)), pl.BlockSpec(w.shape, lambda i: (0, 0)),
                  pl.BlockSpec(b.shape, lambda i: (0,)), row],
        out_specs=[row, row, row],
        out_shape=[jax.ShapeDtypeStruct((f.shape[0],), jnp.float32)] * 3,
        interpret=_interpret(), compiler_params=_loop_compiler_params())(f, w, b, t)
    return tuple(s[:batch] for s in stats)
  grid = (f.shape[0] // block_b, w.shape[-1] // block_v)
  row = pl.BlockSpec((block_b,), lambda i, j: (i,))
  kernel = functools.partial(_stats_kernel, block_v=block_v, columns=columns)
  stats = pl.pallas_call(
      kernel, grid=grid,
      in_specs=[pl.BlockSpec((block_b, f.shape[1]), lambda i, j: (i, 0)),
                pl.BlockSpec((w.shape[0], block_v), lambda i, j: (0, j)),
                pl.BlockSpec((block_v,), lambda i, j: (j,)), row],
      out_specs=[row, row, row],
      out_shape=[jax.ShapeDtypeStruct((f.shape[0],), jnp.float32)] * 3,
      interpret=_interpret(), compiler_params=_grid_compiler_params())(f, w, b, t)
  return tuple(s[:batch] for s in stats)


def shard_grads(f, w, b, log_z, local_targets, g, *, block_b: int | None = None, block_v: int | None = None,
                form: str = 'grid'):
  """(df [B, K], dw [K, columns], db [columns] or None) of sum(g * -log P(target)) from this shard's
  columns, float32, given the global log Z per example (the logits recomputed tile by tile), in the
  'grid' (TPU) or 'loop' (GPU) form, tiled as shard_stats."""
  block_b, block_v = _tiles(block_b, block_v, f, w, form)
  batch, columns, has_bias = f.shape[0], w.shape[-1], b is not None
  rows = [log_z.astype(jnp.float32), local_targets.astype(jnp.int32), g.astype(jnp.float32)]
  # padded rows: log Z = +inf and g = 0, so their probabilities are 0 and their dz 0 whatever the bias
  features = f.shape[1]
  f, w, b, rows = _prepared(f, w, b, rows, block_b, block_v, row_pads=[jnp.inf, 0, 0], form=form)
  k, nb, nv = f.shape[1], f.shape[0] // block_b, w.shape[-1] // block_v
  if form == 'loop':
    df, dw, db = _loop_grads(f, w, b, rows, block_b, block_v, columns, batch, has_bias)
    return df[:, :features], dw[:features], db
  options = dict(block_v=block_v, columns=columns)
  dw, db = pl.pallas_call(
      functools.partial(_weight_grads_kernel, **options), grid=(nv, nb),
      in_specs=[pl.BlockSpec((block_b, k), lambda j, i: (i, 0)), pl.BlockSpec((k, block_v), lambda j, i: (0, j)),
                pl.BlockSpec((block_v,), lambda j, i: (j,))] + [pl.BlockSpec((block_b,), lambda j, i: (i,))] * 3,
      out_specs=[pl.BlockSpec((k, block_v), lambda j, i: (0, j)), pl.BlockSpec((block_v,), lambda j, i: (j,))],
      out_shape=[jax.ShapeDtypeStruct(w.shape, jnp.float32), jax.ShapeDtypeStruct(b.shape, jnp.float32)],
      interpret=_interpret(), compiler_params=_grid_compiler_params())(f, w, b, *rows)
  df = pl.pallas_call(
      functools.partial(_feature_grads_kernel, **options), grid=(nb, nv),
      in_specs=[pl.BlockSpec((block_b, k), lambda i, j: (i, 0)), pl.BlockSpec((k, block_v), lambda i, j: (0, j)),
                pl.BlockSpec((block_v,), lambda i, j: (j,))] + [pl.BlockSpec((block_b,), lambda i, j: (i,))] * 3,
      out_specs=pl.BlockSpec((block_b, k), lambda i, j: (i, 0)),
      out_shape=jax.ShapeDtypeStruct(f.shape, jnp.float32),
      interpret=_interpret(), compiler_params=_grid_compiler_params())(f, w, b, *rows)
  return df[:batch], dw[:, :columns], (db[:columns] if has_bias else None)


def _loop_grads(f, w, b, rows, block_b: int, block_v: int, columns: int, batch: int, has_bias: bool):
  """shard_grads' two passes in the loop form: a program a vocabulary tile (dW, db over the batch
  tiles), then a program a batch tile (df over the vocabulary tiles)."""
  k, nb, nv = f.shape[1], f.shape[0] // block_b, w.shape[-1] // block_v
  whole_rows = [pl.BlockSpec((f.shape[0],), lambda j: (0,))] * 3
  dw, db = pl.pallas_call(
      functools.partial(_weight_grads_loop_kernel, block_b=block_b, block_v=block_v, columns=columns, num_b=nb),
      grid=(nv,),
      in_specs=[pl.BlockSpec(f.shape, lambda j: (0, 0)), pl.BlockSpec((k, block_v), lambda j: (0, j)),
                pl.BlockSpec((block_v,), lambda j: (j,))] + whole_rows,
      out_specs=[pl.BlockSpec((k, block_v), lambda j: (0, j)), pl.BlockSpec((block_v,), lambda j: (j,))],
      out_shape=[jax.ShapeDtypeStruct(w.shape, jnp.float32), jax.ShapeDtypeStruct(b.shape, jnp.float32)],
      interpret=_interpret(), compiler_params=_loop_compiler_params())(f, w, b, *rows)
  row = pl.BlockSpec((block_b,), lambda i: (i,))
  df = pl.pallas_call(
      functools.partial(_feature_grads_loop_kernel, block_v=block_v, columns=columns, num_v=nv),
      grid=(nb,),
      in_specs=[pl.BlockSpec((block_b, k), lambda i: (i, 0)), pl.BlockSpec(w.shape, lambda i: (0, 0)),
                pl.BlockSpec(b.shape, lambda i: (0,))] + [row] * 3,
      out_specs=pl.BlockSpec((block_b, k), lambda i: (i, 0)),
      out_shape=jax.ShapeDtypeStruct(f.shape, jnp.float32),
      interpret=_interpret(), compiler_params=_loop_compiler_params())(f, w, b, *rows)
  return df[:batch], dw[:, :columns], (db[:columns] if has_bias else None)
