"""The fused softmax kernel's Mosaic GPU form: its passes written for Hopper's tensor cores (WGMMA) and
TMA copies, the lowering JAX keeps for Pallas on GPUs (JAX 0.11 deprecates Pallas's Triton backend, which
the loop form uses).

Two kernels over one vocabulary shard's inputs, already padded by softmax_kernel._prepared (the batch to
program_rows, the feature width K to a multiple of mosaic_features' swizzle, the columns to block_v).
Each program owns program_rows of the batch and one split of the vocabulary tiles: it copies its rows of
f into shared memory once, then streams the split's [K, block_v] tiles of w (and of the bias) through
`stages` buffers while the tensor cores multiply the tile before (_pipelined): either one warpgroup of
MOSAIC_BLOCK_B rows issues the copies and computes (warpgroups=0), or, warp-specialised as Pallas's
Hopper attention kernel, a warpgroup issues the copies while compute warpgroups of MOSAIC_BLOCK_B rows
each share every tile (warpgroups=1: the copies beside the products; the kernels are written for more,
but LoopTuning refuses 2: softmax_kernel.WRONG_DB). Per tile, a warpgroup's logits [64, block_v] live in registers
(float32 accumulation), the bias added, columns past the shard's masked to -inf:

- stats: the online log-sum-exp (running max and sum of exponentials) and the target's logit per row,
  carried through the pipeline; [splits, batch] of each, combined outside as the loop form's splits;
- dz_tiles: dz = g (exp(z - log Z) - onehot) per tile, written to memory in the operands' dtype with its
  column sums (db's share of the row tile, float32), for XLA's matmuls to make dW = f^T dz and df = dz w^T
  (softmax_kernel._dz_grads: what the loop form's backward='dz' does with Triton).

bfloat16 or float16 operands, or float32 ones multiplied in TF32 where the step asks for the backend's own
products (model.matmul_precision='default', as XLA's matmuls beside it; WGMMA has no IEEE float32 product:
that float32 is the loop form's). WGMMA takes a TF32 operand only with its contraction axis fastest (no
transposed layout), so in float32 the kernels read the shard's layer transposed, w^T [V, K] (a copy XLA
makes for each pass: 0.8 GB read and written at |V| 300k and K 320), and its tiles [block_v, K].
On a CPU both kernels run in Mosaic GPU's interpret mode (threads and shared memory simulated), where the
tests check them against NumPy; JAX 0.10's interpreter has no layout casts, so there the register layouts
are left out (they place values in registers and change no number), and a float32 tile's product is a dot of
the same shared-memory tiles (its WGMMA reads no transposed view; IEEE products, where a GPU's are TF32).
Lowering for CUDA is checked on the CPU too (tests/test_softmax_kernel.py: the TF32 WGMMA included); compiling
and running need a GPU with WGMMA (compute capability 9).
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from nplm_jax.errors import UserError

MOSAIC_BLOCK_B = 64  # rows a program: one warpgroup's WGMMA tile
MOSAIC_DTYPES = ('bfloat16', 'float16', 'float32')  # float32: TF32 products only
MOSAIC_STAGES = 2  # w tiles in flight (emit_pipeline's buffers)
SWIZZLE_BYTES = 128  # shared-memory swizzle of the operand tiles: 64 two-byte or 32 four-byte elements a row
_WGMMA = plgpu.Layout.WGMMA


def check_dtype(f, w, tf32_allowed: bool) -> None:
  """One line of UserError unless f and w share a dtype the tensor cores take: float32 only where TF32
  products are allowed (tf32_allowed: the step asks for the backend's own, model.matmul_precision='default')."""
  name = jnp.dtype(f.dtype).name
  if f.dtype != w.dtype or name not in MOSAIC_DTYPES:
    raise UserError(f"the fused softmax kernel's Mosaic GPU form multiplies bfloat16, float16 or float32 (TF32) "
                    f"operands, not {name} x {jnp.dtype(w.dtype).name}; use --config.model.compute_dtype="
                    "bfloat16, or --config.train.softmax_kernel=pallas_loop or xla")
  if name == 'float32' and not tf32_allowed:
    raise UserError("the fused softmax kernel's Mosaic GPU form multiplies float32 operands in TF32 (the tensor "
                    "cores have no IEEE float32 product), and this step asks for IEEE float32; add "
                    "--config.model.matmul_precision=default (TF32 in XLA's matmuls too), or use "
                    "--config.train.softmax_kernel=pallas_loop or xla")


def k_major(dtype) -> bool:
  """Whether the kernels take the layer transposed, w^T [V, K]: WGMMA's TF32 operands (float32) have their
  contraction axis fastest; two-byte ones are read as the layer lies, [K, V]."""
  return jnp.dtype(dtype).itemsize == 4


def check_capability(capability: tuple[int, int] | None) -> None:
  """One line of UserError on a GPU without WGMMA (before Hopper: compute capability below 9.0)."""
  if capability is not None and capability < (9, 0):
    raise UserError(f"the fused softmax kernel's Mosaic GPU form needs Hopper's tensor-core instructions (compute "
                    f"capability 9.0 or later), not {capability[0]}.{capability[1]}; use "
                    "--config.train.softmax_kernel=pallas_loop or xla")


def swizzle_elements(dtype) -> int:
  """Elements of one swizzled row: the tiles' last axis is a multiple of it."""
  return SWIZZLE_BYTES // jnp.dtype(dtype).itemsize


def mosaic_features(k: int, dtype) -> int:
  """The feature width K padded with zeros to a multiple of the swizzle (exact: zero products)."""
  return -(-k // swizzle_elements(dtype)) * swizzle_elements(dtype)


def shared_bytes_needed(features: int, block_v: int, itemsize: int, stages: int = MOSAIC_STAGES,
                        warpgroups: int = 0) -> int:
  """A program's shared memory: its rows of f and a dz tile for each compute warpgroup, and `stages` w
  tiles (bias and rows: small)."""
  rows = program_rows(warpgroups)
  return itemsize * (rows * features + stages * features * block_v + rows * block_v) + 4096


def mosaic_block_v(features: int, itemsize: int, shared_bytes: int, stages: int = MOSAIC_STAGES,
                   warpgroups: int = 0) -> int:
  """The widest vocabulary tile of 128, 64 and 32 whose program fits in shared memory by shared_bytes_needed's
  count (256 holds a [64, 256] float32 tile in a warpgroup's registers: a tuning to time, not a default;
  32 is for float32 operands, whose tiles are twice the bytes: 32 at K = 320 in 2 stages, 172 KiB);
  UserError where none does. No margin beyond the count's own 4 KiB: on an H100 tiles of
  128 at K = 320 in bfloat16, 2 stages (225 of its 227 KiB by this count), compiled and ran the output
  layer 1.6x as fast as tiles of 64, which a 10% margin had chosen."""
  for block_v in (128, 64, 32):
    if shared_bytes_needed(features, block_v, itemsize, stages, warpgroups) <= shared_bytes:
      return block_v
  raise UserError(f"the fused softmax kernel's Mosaic GPU form cannot tile a feature width of {features} in this "
                  f"GPU's {shared_bytes // 1024} KiB of shared memory; use --config.train.softmax_kernel=xla")


def _transforms(dtype):
  elements = swizzle_elements(dtype)
  return plgpu.TilingTransform((8, elements)), plgpu.SwizzleTransform(SWIZZLE_BYTES)


def _registers(interpret: bool):
  """(cast to a register layout, column iota in the WGMMA layout): identities in interpret mode."""
  if interpret:
    return (lambda x, layout: x), (lambda shape: lax.broadcasted_iota(jnp.int32, shape, 1))
  return plgpu.layout_cast, lambda shape: plgpu.broadcasted_iota(jnp.int32, shape, 1, layout=_WGMMA)


def _tile_logits(f_smem, w_smem, b_smem, column0, columns: int, interpret: bool):
  """A tile's logits [rows, block_v] in float32 (f w on the tensor cores, plus the bias), columns past the
  shard's at -inf, and the tile's column ids. w_smem: a [K, block_v] tile, or [block_v, K] (k_major)."""
  cast, column_iota = _registers(interpret)
  transposed = k_major(w_smem.dtype)
  rows, block_v = f_smem.shape[0], w_smem.shape[0 if transposed else 1]

  def product(acc_ref):
    plgpu.wgmma(acc_ref, f_smem, plgpu.transpose_ref(w_smem, (1, 0)) if transposed else w_smem)
    return acc_ref[...]

  if transposed and interpret:  # the interpreter's WGMMA reads no transposed view: the same product here
    z = jnp.dot(f_smem[...], w_smem[...].T, preferred_element_type=jnp.float32)
  else:
    z = pl.run_scoped(product, plgpu.ACC((rows, block_v), jnp.float32))
  z = z + lax.broadcast_in_dim(cast(b_smem[...], _WGMMA.reduce(0)), z.shape, [1])
  ids = column0 + column_iota(z.shape)
  return jnp.where(ids < columns, z, -jnp.inf), ids


def _load_rows(gmems, smems, barriers, rows):
  """Copies each per-row input's rows into shared memory (a barrier each) and waits for all."""
  for gmem, smem, barrier in zip(gmems, smems, barriers):
    plgpu.copy_gmem_to_smem(gmem.at[rows], smem, barrier)
  for barrier in barriers:
    plgpu.barrier_wait(barrier)


def _interpret_params(interpret: bool):
  if not interpret:
    return None
  # JAX 0.10 exports no public name for Mosaic GPU's interpreter settings
  from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams  # pylint: disable=g-import-not-at-top
  return InterpretGPUParams()


def _split_columns(split, per_split: int, block_v: int):
  return pl.ds(split * (per_split * block_v), per_split * block_v)


def _owned(t, columns: int):
  """Target column ids with those outside [0, columns) (other shards', the padded columns) at -1: the kernels
  compare ids without masking them again in every tile."""
  return jnp.where((t >= 0) & (t < columns), t, -1)


def program_rows(warpgroups: int) -> int:
  """Rows of the batch a program owns: MOSAIC_BLOCK_B for each compute warpgroup (one without warp
  specialisation)."""
  return MOSAIC_BLOCK_B * max(warpgroups, 1)


def _warpgroup(warpgroups: int):
  return lax.axis_index('wg') if warpgroups else 0


def _pipelined(tile, *, specs, steps: int, stages: int, warpgroups: int, begin, end, views):
  """Streams `views` (the split's w and bias) through shared memory in tiles of `specs`, tile(indices,
  w_smem, b_smem, carry) -> carry in each compute warpgroup, begin(wg) -> the first carry (its rows
  loaded), end(wg, carry). warpgroups 0: one warpgroup issues the copies and computes (emit_pipeline);
  n: n compute warpgroups share each tile that a memory warpgroup copies, so the copies run beside the
  products (emit_pipeline_warp_specialized, as Pallas's Hopper attention kernel). With n = 2 dz_tiles'
  column sums were wrong on an H100 (softmax_kernel.WRONG_DB): LoopTuning takes 0 or 1."""
  if not warpgroups:
    carry = plgpu.emit_pipeline(tile, grid=(steps,), in_specs=specs, max_concurrent_steps=min(stages, steps),
                                init_carry=begin(0))(*views)
    end(0, carry)
    return

  def context(run):
    wg = lax.axis_index('wg')
    end(wg, run(begin(wg)))

  plgpu.emit_pipeline_warp_specialized(
      tile, grid=(steps,), in_specs=specs, max_concurrent_steps=min(stages, steps), num_compute_wgs=warpgroups,
      memory_registers=40, wg_axis='wg', compute_context=context)(*views)


def _kernel(body, out_type, grid, scratch, warpgroups: int, interpret: bool):
  threads = {'num_threads': warpgroups + 1, 'thread_name': 'wg'} if warpgroups else {}
  return plgpu.kernel(body, out_type=out_type, grid=grid, grid_names=('rows', 'split'), scratch_types=scratch,
                      interpret=_interpret_params(interpret), **threads)


def _w_specs(features: int, block_v: int, dtype):
  tile = (plgpu.BlockSpec((block_v, features), lambda j: (j, 0), transforms=_transforms(dtype)) if k_major(dtype)
          else plgpu.BlockSpec((features, block_v), lambda j: (0, j), transforms=_transforms(dtype)))
  return [tile, plgpu.BlockSpec((block_v,), lambda j: (j,))]


def kernel_layout(w):
  """The layer [K, V] as the kernels take it: as it is, or transposed, [V, K], where k_major (a copy: callers
  looping over chunks of the batch make it once, outside the loop; on the CPU XLA left it inside)."""
  return w.T if k_major(w.dtype) else w


def _columns(w) -> int:
  """The columns (V) of a layer in kernel_layout."""
  return w.shape[0] if k_major(w.dtype) else w.shape[1]


def _split_views(w_gmem, b_gmem, columns_of_split, dtype):
  """The split's w (either layout) and bias, as _pipelined streams them."""
  w_split = w_gmem.at[columns_of_split, :] if k_major(dtype) else w_gmem.at[:, columns_of_split]
  return w_split, b_gmem.at[columns_of_split]


def stats(f, w, b, t, *, block_v: int, splits: int, columns: int, stages: int = MOSAIC_STAGES,
          warpgroups: int = 0, interpret: bool = False):
  """(max, sum of exp(z - max), the target's z or 0) of each split's vocabulary tiles, float32 [splits, B]
  each, for padded f [B, K], w [K, V] in kernel_layout (transposed where k_major), b [V] (float32), t [B]
  (int32 column ids, any outside the shard's).
  warpgroups: _pipelined's (B a multiple of program_rows)."""
  batch, features = f.shape
  per_split, slots = _columns(w) // block_v // splits, max(warpgroups, 1)
  row_layout = _WGMMA.reduce(1)
  cast, _ = _registers(interpret)

  def body(f_gmem, w_gmem, b_gmem, t_gmem, max_gmem, sum_gmem, pick_gmem, f_smems, t_smems, out_smems, barriers):
    program, split = lax.axis_index('rows'), lax.axis_index('split')
    rows_of = lambda wg: pl.ds(program * program_rows(warpgroups) + wg * MOSAIC_BLOCK_B, MOSAIC_BLOCK_B)

    def begin(wg):
      _load_rows((f_gmem, t_gmem), (f_smems.at[wg], t_smems.at[wg]), [b.at[wg] for b in barriers], rows_of(wg))
      return (cast(t_smems.at[wg][...], row_layout),
              *(cast(jnp.full((MOSAIC_BLOCK_B,), value, jnp.float32), row_layout) for value in (-jnp.inf, 0.0, 0.0)))

    def tile(indices, w_smem, b_smem, carry):
      targets, old_max, total, pick = carry
      z, ids = _tile_logits(f_smems.at[_warpgroup(warpgroups)], w_smem, b_smem,
                            (split * per_split + indices[0]) * block_v, columns, interpret)
      new_max = jnp.maximum(old_max, z.max(axis=1))
      total = (total * jnp.exp(old_max - new_max)
               + jnp.exp(z - lax.broadcast_in_dim(new_max, z.shape, [0])).sum(axis=1))
      hit = ids == lax.broadcast_in_dim(targets, z.shape, [0])
      return targets, new_max, total, pick + jnp.where(hit, z, 0.0).sum(axis=1)

    def end(wg, carry):
      smems = [smem.at[wg] for smem in out_smems]
      for value, smem in zip(carry[1:], smems):
        smem[...] = value
      plgpu.commit_smem()
      for smem, gmem in zip(smems, (max_gmem, sum_gmem, pick_gmem)):
        plgpu.copy_smem_to_gmem(smem, gmem.at[split, rows_of(wg)])
      plgpu.wait_smem_to_gmem(0)

    columns_of_split = _split_columns(split, per_split, block_v)
    _pipelined(tile, specs=_w_specs(features, block_v, w.dtype), steps=per_split, stages=stages,
               warpgroups=warpgroups, begin=begin, end=end,
               views=_split_views(w_gmem, b_gmem, columns_of_split, w.dtype))

  rows_smem = lambda dtype: plgpu.SMEM((slots, MOSAIC_BLOCK_B), dtype)
  scratch = [plgpu.SMEM((slots, MOSAIC_BLOCK_B, features), f.dtype, transforms=_transforms(f.dtype)),
             rows_smem(jnp.int32), [rows_smem(jnp.float32)] * 3, [plgpu.Barrier(num_barriers=slots)] * 2]
  return _kernel(body, [jax.ShapeDtypeStruct((splits, batch), jnp.float32)] * 3,
                 (batch // program_rows(warpgroups), splits), scratch, warpgroups,
                 interpret)(f, w, b, _owned(t, columns))


def dz_tiles(f, w, b, log_z, t, g, *, block_v: int, splits: int, columns: int, stages: int = MOSAIC_STAGES,
             warpgroups: int = 0, interpret: bool = False):
  """(dz [B, V] in f's dtype, db's share of each 64-row tile [B / MOSAIC_BLOCK_B, V] float32) for padded
  f, w in kernel_layout, b (float32) and per-row log Z, t (int32) and g: dz = g (exp(z - log Z) - onehot(t)),
  0 in padded columns and in padded rows (log Z = +inf, g = 0). warpgroups: _pipelined's."""
  batch, features = f.shape
  per_split, slots = _columns(w) // block_v // splits, max(warpgroups, 1)
  row_layout = _WGMMA.reduce(1)
  cast, _ = _registers(interpret)

  def body(f_gmem, w_gmem, b_gmem, log_z_gmem, t_gmem, g_gmem, dz_gmem, db_gmem, f_smems, row_smems, dz_smems,
           db_smems, barriers):
    program, split = lax.axis_index('rows'), lax.axis_index('split')
    tile_of = lambda wg: program * max(warpgroups, 1) + wg  # the 64-row tile of the batch
    rows_of = lambda wg: pl.ds(tile_of(wg) * MOSAIC_BLOCK_B, MOSAIC_BLOCK_B)

    def begin(wg):
      smems = [smem.at[wg] for smem in row_smems]
      _load_rows((f_gmem, log_z_gmem, t_gmem, g_gmem), (f_smems.at[wg], *smems), [b.at[wg] for b in barriers],
                 rows_of(wg))
      return tuple(cast(smem[...], row_layout) for smem in smems)

    def tile(indices, w_smem, b_smem, carry):
      log_z, targets, scale = carry
      wg = _warpgroup(warpgroups)
      column0 = (split * per_split + indices[0]) * block_v
      z, ids = _tile_logits(f_smems.at[wg], w_smem, b_smem, column0, columns, interpret)
      onehot = jnp.where(ids == lax.broadcast_in_dim(targets, z.shape, [0]), 1.0, 0.0)
      probabilities = jnp.exp(z - lax.broadcast_in_dim(log_z, z.shape, [0]))
      dz = lax.broadcast_in_dim(scale, z.shape, [0]) * (probabilities - onehot)
      column_sums = dz.sum(axis=0)
      dz_smem, db_smem = dz_smems.at[wg], db_smems.at[wg]
      plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last tile's copies have read the buffers
      dz_smem[...] = dz.astype(dz_smem.dtype)
      db_smem[...] = column_sums
      plgpu.commit_smem()
      tile_columns = pl.ds(column0, block_v)
      plgpu.copy_smem_to_gmem(dz_smem, dz_gmem.at[rows_of(wg), tile_columns])
      plgpu.copy_smem_to_gmem(db_smem, db_gmem.at[tile_of(wg), tile_columns])
      return carry

    columns_of_split = _split_columns(split, per_split, block_v)
    _pipelined(tile, specs=_w_specs(features, block_v, w.dtype), steps=per_split, stages=stages,
               warpgroups=warpgroups, begin=begin, end=lambda wg, carry: plgpu.wait_smem_to_gmem(0),
               views=_split_views(w_gmem, b_gmem, columns_of_split, w.dtype))

  rows_smem = lambda dtype: plgpu.SMEM((slots, MOSAIC_BLOCK_B), dtype)
  scratch = [plgpu.SMEM((slots, MOSAIC_BLOCK_B, features), f.dtype, transforms=_transforms(f.dtype)),
             [rows_smem(jnp.float32), rows_smem(jnp.int32), rows_smem(jnp.float32)],
             plgpu.SMEM((slots, MOSAIC_BLOCK_B, block_v), f.dtype, transforms=_transforms(f.dtype)),
             plgpu.SMEM((slots, block_v), jnp.float32), [plgpu.Barrier(num_barriers=slots)] * 4]
  out_type = [jax.ShapeDtypeStruct((batch, _columns(w)), f.dtype),
              jax.ShapeDtypeStruct((batch // MOSAIC_BLOCK_B, _columns(w)), jnp.float32)]
  return _kernel(body, out_type, (batch // program_rows(warpgroups), splits), scratch, warpgroups,
                 interpret)(f, w, b, log_z, _owned(t, columns), g)


def dividing_splits(num_v: int, wanted: int) -> int:
  """The most splits, at most `wanted`, that divide the vocabulary tiles evenly (each program's pipeline
  has one static length)."""
  return max(s for s in range(1, max(1, min(wanted, num_v)) + 1) if num_v % s == 0)

