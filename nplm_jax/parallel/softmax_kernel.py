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

Three forms of the same passes (`form`):
- 'grid': each kernel accumulates into its output block over the last grid axis, which Mosaic TPU
  runs in order (the TPU form);
- 'loop': each program owns its output tile and loops over the other axis with lax.fori_loop inside
  the program (statistics and df per batch tile over the vocabulary tiles, dW and db per vocabulary
  tile over the batch tiles), as Pallas's GPU attention kernels do: GPU grids run their programs in
  parallel, so nothing may accumulate across them (the GPU form). Its statistics and df passes also
  split the vocabulary tiles over several programs a batch tile (loop_splits: with one program a batch
  tile, batch 4096 in tiles of 64 gave 64 programs for the H100's 132 multiprocessors), the splits'
  shares combined outside the kernel (an online log-sum-exp of their statistics, a sum of their df).
  LoopTuning names its settings (tiles, splits, a chunk of the feature width, Triton's warps and
  stages, the backward); benchmarks/softmax_kernel_tiles.py times them against XLA on a GPU. Its
  gradients come two ways: 'fused' (the passes above, each dW and df program holding a [K, tile]
  float32 accumulator: 128 KiB at K = 512 and tiles of 64, past a multiprocessor's registers for one
  program of 4 warps) or 'dz' (one kernel writes dz tile by tile in the operands' dtype, a chunk of
  the batch at a time, or of the vocabulary with LoopTuning.dz_axis='vocab', and XLA's matmuls make
  dW = f^T dz and df = dz w^T from it: dz is written once and read twice, where XLA's own path writes
  float32 logits and reads them several times);
- 'mosaic': the statistics and dz passes for Hopper's tensor cores through Mosaic GPU, the lowering
  JAX keeps for Pallas on GPUs (softmax_kernel_mosaic: one warpgroup of 64 rows a program, w's tiles
  streamed through a pipeline of TMA copies, WGMMA products), its gradients from dz as the loop form's
  backward='dz'; bfloat16 or float16 operands, or float32 ones in TF32 (model.matmul_precision='default'
  only: read transposed, softmax_kernel_mosaic.k_major). Checked on CPUs (its interpret mode, its CUDA
  lowering); on an H100 it compiled and matched NumPy (tests/test_gpu.py); in the training
  step on an H200 it ran 1.31x-2.09x XLA all at once at |V| 17,905-300k in bfloat16 (batch 4096), and
  train.softmax_kernel='auto' takes it there (vocab_softmax.auto_kernel).
On a CPU every form runs in an interpret mode (Pallas's; Mosaic GPU's for the 'mosaic' form), where the
tests check them against NumPy and the XLA path. On a GPU, pallas_call would lower through Mosaic GPU by
default (jax_pallas_use_mosaic_gpu), whose async copies and shared memory the loop form's whole-array blocks
exceed; the loop form names Triton through its compiler parameters instead and pads the feature width K with
zeros to a power of two (Triton loads no other size), or with LoopTuning.k_chunk to a multiple of that
chunk, loaded and multiplied chunk by chunk (290 becomes 320 rather than 512). JAX 0.11 deprecates Pallas's
Triton backend: the 'mosaic' form is the one a later JAX keeps. Float32 matmuls name full precision (Triton's
dot defaults to TF32). The loop form runs about a third of XLA's rate on an H100, so 'auto' never picks it
(docs/accelerators.md, "What has run where"). Its tiles shrink with K and the operand size to fit the chip's
shared memory (loop_tile). The grid form is for TPUs only (vocab_softmax refuses it elsewhere): its first grid axis
parallel, its last in order; it lowers through Mosaic for TPU v4, v5e and v6e (a CPU test builds it for an
abstract TPU device) but has not been compiled or run on a TPU.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from nplm_jax.errors import UserError

# Pallas's backend modules (Mosaic GPU's, TPU's, Triton's) are imported where a kernel of theirs is built:
# together they took about 0.7 s of every command's 2.9 s start on 2 cores, and most runs build none.

BLOCK_B = 128  # examples a tile
BLOCK_V = 128  # vocabulary columns a tile
FORMS = ('grid', 'loop', 'mosaic')
# The loop form on a GPU: Triton pipelines each loop's loads over LOOP_STAGES buffers in shared memory,
# whose size a program may use depends on the chip (KiB by compute capability; others: LOOP_SHARED_KIB_OTHER).
LOOP_STAGES = 2
LOOP_SHARED_KIB = {(9, 0): 227, (10, 0): 227, (8, 0): 163, (8, 7): 163}
LOOP_SHARED_KIB_OTHER = 99
H100_CORES = 132  # multiprocessors
PROGRAMS_PER_CORE = 2  # loop_splits' aim for the statistics and df passes
BACKWARDS = ('fused', 'dz')
DZ_AXES = ('batch', 'vocab')  # what the dz backwards chunk: the batch's rows or the vocabulary's tiles
# Why the Mosaic GPU form takes one compute warpgroup at most: its kernels are written for several, but with
# two the bias gradient came out wrong on an H100 (tests/test_gpu.py; one warpgroup was right).
WRONG_DB = ("with two compute warpgroups the Mosaic GPU form's bias gradient was wrong on an H100: Mosaic GPU's "
            "reductions across a warpgroup's warps (db's column sums) share one scratch buffer between "
            "warpgroups; it was also the slowest setting, 0.78x of warpgroups=1")


@dataclasses.dataclass(frozen=True)
class LoopTuning:
  """The GPU forms' settings; None: chosen (loop_tile or mosaic_block_v for the tiles, loop_splits for the
  splits). The loop form reads them all but warpgroups; the Mosaic GPU form block_v, splits, num_stages
  (its pipeline's w tiles in flight), dz_chunks and warpgroups (0: one warpgroup of 64 rows a program;
  1: a compute warpgroup of 64 rows beside a warpgroup that issues the copies; not 2: WRONG_DB), its
  backward always 'dz'.
  benchmarks/softmax_kernel_tiles.py times them against each other on a GPU."""
  block_b: int | None = None  # examples a tile
  block_v: int | None = None  # vocabulary columns a tile
  splits: int | None = None  # programs a batch tile in the statistics and df passes, over the vocabulary
  num_warps: int = 4
  num_stages: int = LOOP_STAGES  # Triton's pipelined loads; loop_tile sizes shared memory for them
  k_chunk: int | None = None  # a power of two: K padded to a multiple of it (not to a power of two), in chunks
  # the gradients: 'fused' (dW and df accumulated inside the kernels, [K, tile] a program) or 'dz' (the
  # kernel writes dz in the operands' dtype, dz_chunks rows of the batch at a time, and XLA's matmuls make
  # dW and df from it: no [K, tile] accumulator a program, dz's [batch / dz_chunks, columns] in memory)
  backward: str = 'fused'
  dz_chunks: int = 4
  # the dz backwards' chunks: of the batch ('batch': dW accumulated over them in float32, [K, columns]) or of
  # the vocabulary tiles ('vocab': each chunk's columns of dW made whole by one matmul, df's [B, K] float32
  # accumulated instead: at |V| 300k, batch 4096, K 290 that is 5 MB rather than 348)
  dz_axis: str = 'batch'
  warpgroups: int = 0  # the Mosaic GPU form's compute warpgroups with warp specialisation (0: none; at most 1)

  def __post_init__(self):
    if self.backward not in BACKWARDS:
      raise UserError(f"the fused softmax kernel's backward must be one of {', '.join(BACKWARDS)}, not "
                      f"'{self.backward}'")
    if self.warpgroups not in (0, 1):
      raise UserError(f"the fused softmax kernel's warpgroups must be 0 or 1, not {self.warpgroups}"
                      + (f' ({WRONG_DB})' if self.warpgroups == 2 else ''))
    if self.dz_chunks < 1:
      raise UserError(f"the fused softmax kernel's dz_chunks must be at least 1, not {self.dz_chunks}")
    if self.dz_axis not in DZ_AXES:
      raise UserError(f"the fused softmax kernel's dz_axis must be one of {', '.join(DZ_AXES)}, not "
                      f"'{self.dz_axis}'")
    for name in ('block_b', 'block_v', 'k_chunk'):
      value = getattr(self, name)
      if value is not None and (value < 1 or value & (value - 1)):
        raise UserError(f'the fused softmax kernel\'s {name} must be a power of two (Triton loads no other '
                        f'size), not {value}')


_WORD_FIELDS = ('backward', 'dz_axis')  # LoopTuning's fields that are words; the others are integers


def tuning_fields(text: str) -> dict:
  """LoopTuning's fields from 'field=value,...' ('' for none): backward and dz_axis words, the others integers;
  one line of UserError naming the bad part (the fields' own checks come when LoopTuning is made)."""
  fields = {}
  for part in (p.strip() for p in text.split(',') if p.strip()):
    name, _, value = (x.strip() for x in part.partition('='))
    if name not in LoopTuning.__dataclass_fields__ or not (value.isdigit() or (name in _WORD_FIELDS and value)):
      raise UserError(f"the fused softmax kernel's setting '{part}' is not FIELD=VALUE with a field of LoopTuning "
                      f"({', '.join(LoopTuning.__dataclass_fields__)}), an integer but for "
                      f"{' and '.join(_WORD_FIELDS)}")
    fields[name] = value if name in _WORD_FIELDS else int(value)
  return fields


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


def _backend_products() -> bool:
  """Whether the traced step asks for the backend's own float32 products (model.matmul_precision='default':
  TF32 on NVIDIA GPUs) rather than IEEE ones."""
  return jax.config.jax_default_matmul_precision == 'default'


def _dot(a, b, out_dtype=jnp.float32):
  """a @ b accumulated in float32 (and written in out_dtype: bfloat16 rounds the sums once); float32 operands
  at full precision, the project's float32 (model.matmul_precision='highest'), unless the traced step asks for
  the backend's own (model.matmul_precision='default': steps.with_matmul_precision's 'default' context), as
  XLA's matmuls beside the kernels then do: TF32 in Triton's dot on NVIDIA GPUs (on the H100 the max logit
  missed NumPy by 2.5e-4 relative), bfloat16 passes on TPUs. Bfloat16 operands are exact products either way."""
  full = a.dtype == b.dtype == jnp.float32 and not _backend_products()
  return jnp.dot(a, b, preferred_element_type=out_dtype, precision=jax.lax.Precision.HIGHEST if full else None)


def _logits_of(f, w, b, column0, columns: int):
  """A tile's logits [rows, block_v] in float32 from loaded values, f and w each a list of chunks of the
  feature width (one for the grid form), columns past the shard's at -inf."""
  logits = functools.reduce(jnp.add, [_dot(f_chunk, w_chunk) for f_chunk, w_chunk in zip(f, w)]) + b[None, :]
  ids = column0 + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
  return jnp.where(ids < columns, logits, -jnp.inf), ids


def _dlogits_of(f, w, b, log_z, t, g, column0, columns: int):
  """g (softmax - onehot) for the tile, float32 (0 in padded rows and columns)."""
  logits, ids = _logits_of(f, w, b, column0, columns)
  onehot = ((ids == t[:, None]) & (ids < columns)).astype(jnp.float32)
  return g[:, None] * (jnp.exp(logits - log_z[:, None]) - onehot)


def _tile_dlogits(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, column0, columns: int):
  """_dlogits_of of the grid form's whole blocks."""
  return _dlogits_of([f_ref[...]], [w_ref[...]], b_ref[...], log_z_ref[...], t_ref[...], g_ref[...], column0, columns)


def _stats_kernel(f_ref, w_ref, b_ref, t_ref, max_ref, sum_ref, pick_ref, *, block_v: int, columns: int):
  j = pl.program_id(1)

  @pl.when(j == 0)
  def _():
    max_ref[...] = jnp.full(max_ref.shape, -jnp.inf, jnp.float32)
    sum_ref[...] = jnp.zeros(sum_ref.shape, jnp.float32)
    pick_ref[...] = jnp.zeros(pick_ref.shape, jnp.float32)

  logits, ids = _logits_of([f_ref[...]], [w_ref[...]], b_ref[...], j * block_v, columns)
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
  dw_ref[...] += _dot(f_ref[...].T, dz.astype(f_ref.dtype))


def _feature_grads_kernel(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, df_ref, *, block_v: int, columns: int):
  j = pl.program_id(1)

  @pl.when(j == 0)
  def _():
    df_ref[...] = jnp.zeros(df_ref.shape, jnp.float32)

  dz = _tile_dlogits(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, j * block_v, columns)
  df_ref[...] += _dot(dz.astype(w_ref.dtype), w_ref[...].T)


def _split_range(num_v: int, per_split: int):
  """The vocabulary tiles [first, end) of this program's split (grid axis 1): each split at least one."""
  first = pl.program_id(1) * per_split
  return first, jnp.minimum(first + per_split, num_v)


def _k(chunk: int, k_chunk: int, num_k: int):
  """The feature columns of one chunk: the whole width where there is one chunk (the power-of-two form)."""
  return slice(None) if num_k == 1 else pl.ds(chunk * k_chunk, k_chunk)


def _stats_loop_kernel(f_ref, w_ref, b_ref, t_ref, max_ref, sum_ref, pick_ref, *, block_v: int, columns: int,
                       num_v: int, per_split: int, k_chunk: int, num_k: int):
  """One batch tile's statistics over one split's vocabulary tiles, its program looping over them."""
  f, t = [f_ref[:, _k(c, k_chunk, num_k)] for c in range(num_k)], t_ref[...]

  def tile(j, carry):
    old_max, total, pick = carry
    cols = pl.ds(pl.multiple_of(j * block_v, block_v), block_v)
    w = [w_ref[_k(c, k_chunk, num_k), cols] for c in range(num_k)]
    logits, ids = _logits_of(f, w, b_ref[cols], j * block_v, columns)
    new_max, total = online_logsumexp_step(old_max, total, logits)
    hit = (ids == t[:, None]) & (ids < columns)
    return new_max, total, pick + jnp.sum(jnp.where(hit, logits, 0.0), axis=-1)

  rows = t.shape[0]
  start = (jnp.full((rows,), -jnp.inf, jnp.float32), jnp.zeros((rows,), jnp.float32), jnp.zeros((rows,), jnp.float32))
  max_ref[...], sum_ref[...], pick_ref[...] = jax.lax.fori_loop(*_split_range(num_v, per_split), tile, start)


def _weight_grads_loop_kernel(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, dw_ref, db_ref, *, block_b: int,
                              block_v: int, columns: int, num_b: int, k_chunk: int, num_k: int):
  """One vocabulary tile's dW and db, its program looping over every batch tile (dW a chunk at a time)."""
  j = pl.program_id(0)
  w, b = [w_ref[_k(c, k_chunk, num_k), :] for c in range(num_k)], b_ref[...]

  def tile(i, carry):
    dw, db = carry
    rows = pl.ds(pl.multiple_of(i * block_b, block_b), block_b)
    f = [f_ref[rows, _k(c, k_chunk, num_k)] for c in range(num_k)]
    dz = _dlogits_of(f, w, b, log_z_ref[rows], t_ref[rows], g_ref[rows], j * block_v, columns)
    dz_operand = dz.astype(f[0].dtype)
    return tuple(dw_c + _dot(f_c.T, dz_operand) for dw_c, f_c in zip(dw, f)), db + jnp.sum(dz, axis=0)

  zeros = tuple(jnp.zeros((w_c.shape[0], dw_ref.shape[1]), jnp.float32) for w_c in w)
  dw, db_ref[...] = jax.lax.fori_loop(0, num_b, tile, (zeros, jnp.zeros(db_ref.shape, jnp.float32)))
  for c, dw_c in enumerate(dw):
    dw_ref[_k(c, k_chunk, num_k), :] = dw_c


def _feature_grads_loop_kernel(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, df_ref, *, block_v: int, columns: int,
                               num_v: int, per_split: int, k_chunk: int, num_k: int):
  """One batch tile's share of df from one split's vocabulary tiles, its program looping over them."""
  f = [f_ref[:, _k(c, k_chunk, num_k)] for c in range(num_k)]
  log_z, t, g = log_z_ref[...], t_ref[...], g_ref[...]

  def tile(j, df):
    cols = pl.ds(pl.multiple_of(j * block_v, block_v), block_v)
    w = [w_ref[_k(c, k_chunk, num_k), cols] for c in range(num_k)]
    dz = _dlogits_of(f, w, b_ref[cols], log_z, t, g, j * block_v, columns).astype(w[0].dtype)
    return tuple(df_c + _dot(dz, w_c.T) for df_c, w_c in zip(df, w))

  zeros = tuple(jnp.zeros(f_c.shape, jnp.float32) for f_c in f)
  df = jax.lax.fori_loop(*_split_range(num_v, per_split), tile, zeros)
  for c, df_c in enumerate(df):
    df_ref[:, _k(c, k_chunk, num_k)] = df_c


def _dz_kernel(f_ref, w_ref, b_ref, log_z_ref, t_ref, g_ref, dz_ref, db_ref, *, block_v: int, columns: int,
               k_chunk: int, num_k: int):
  """One [batch tile, vocabulary tile] of dz, in the operands' dtype for XLA's matmuls, and its column
  sums in float32 (db's share): every program independent, none holding more than its tile."""
  f = [f_ref[:, _k(c, k_chunk, num_k)] for c in range(num_k)]
  w = [w_ref[_k(c, k_chunk, num_k), :] for c in range(num_k)]
  dz = _dlogits_of(f, w, b_ref[...], log_z_ref[...], t_ref[...], g_ref[...], pl.program_id(1) * block_v, columns)
  dz_ref[...] = dz.astype(dz_ref.dtype)
  db_ref[...] = jnp.sum(dz, axis=0)


def _loop_features(k: int, k_chunk: int | None = None) -> int:
  """The loop form's feature width: K padded with zeros to a power of two (Triton's arrays need it), or to
  a multiple of k_chunk (itself a power of two), which the kernels then load and multiply chunk by chunk."""
  return -(-k // k_chunk) * k_chunk if k_chunk else 1 << max(k - 1, 0).bit_length()


def _k_chunks(features: int, k_chunk: int | None) -> tuple[int, int]:
  """(chunk width, chunks) of a padded feature width: one chunk of it all without k_chunk."""
  return (k_chunk, features // k_chunk) if k_chunk else (features, 1)


def _prepared(f, w, b, rows, block_b: int, block_v: int, row_pads=None, form: str = 'grid',
              k_chunk: int | None = None, pad_w: bool = True):
  """Inputs padded to whole tiles: f [B', K'], w [K', V'], b [V'] (float32), per-example rows [B']
  (padded with `row_pads`, one value a row input, default 0). The loop form pads the feature width K
  with zeros to a power of two or a multiple of k_chunk (K' >= K; exact): Triton loads no other size;
  the Mosaic GPU form to a multiple of its swizzled rows (mosaic_features). pad_w False: w as it is (its
  chunks padded as they are cast: _dz_grads_by_columns)."""
  b = jnp.zeros(w.shape[-1], jnp.float32) if b is None else b.astype(jnp.float32)
  row_pads = row_pads or [0] * len(rows)
  if form in ('loop', 'mosaic'):
    features = _loop_features(f.shape[1], k_chunk) if form == 'loop' else _mosaic().mosaic_features(f.shape[1], f.dtype)
    f, w = _pad_to(f, 1, features), (_pad_to(w, 0, features) if pad_w else w)
  return (_pad_to(f, 0, block_b), _pad_to(w, 1, block_v) if pad_w else w, _pad_to(b, 0, block_v),
          [_pad_to(r, 0, block_b, pad) for r, pad in zip(rows, row_pads)])


def _platform() -> str:
  """The backend the kernels are built for (tests lower them for another: tests/test_softmax_kernel.py)."""
  return jax.default_backend()


def _interpret() -> bool:
  return _platform() == 'cpu'


def _compute_capability() -> tuple[int, int] | None:
  """This GPU's (major, minor) (on other backends an H100's 9.0: interpret mode then tiles as the H100
  would); None where the device does not say."""
  capability = getattr(jax.devices()[0], 'compute_capability', None) if _platform() == 'gpu' else '9.0'
  try:
    major, minor = (int(x) for x in str(capability).split('.')[:2])
  except ValueError:
    return None
  return major, minor


def _shared_memory_bytes() -> int:
  """Shared memory a program may use on this GPU (on other backends, an H100's)."""
  return LOOP_SHARED_KIB.get(_compute_capability(), LOOP_SHARED_KIB_OTHER) * 1024


def mosaic_fits(features: int, dtype, tuning: LoopTuning) -> bool:
  """Whether the Mosaic GPU form runs here as it was measured: on a Hopper GPU (compute capability 9; on
  other backends an H100's, as interpret mode tiles), with tiles of `features` (K) in `dtype` that fit its
  shared memory (mosaic_block_v)."""
  capability = _compute_capability()
  if capability is None or capability[0] != 9:
    return False
  mosaic = _mosaic()
  try:
    mosaic.mosaic_block_v(mosaic.mosaic_features(features, dtype), jnp.dtype(dtype).itemsize, _shared_memory_bytes(),
                          tuning.num_stages, tuning.warpgroups)
  except UserError:
    return False
  return True


def loop_tile(features: int, itemsize: int, shared_bytes: int | None = None, stages: int = LOOP_STAGES) -> int:
  """The loop form's square tile (block_b = block_v) for a padded feature width `features` of operands of
  `itemsize` bytes: the largest of 128, 64, 32, 16 whose program fits in shared memory, about one
  [tile, K] operand held and LOOP_STAGES [K, tile] ones in flight, with 10% to spare (on the H100,
  128 x 128 tiles at K = 256 in float32 asked Triton for 384 KiB of its 227). UserError where none fits."""
  shared_bytes = shared_bytes or _shared_memory_bytes()
  for tile in (128, 64, 32, 16):
    if itemsize * features * tile * (1 + stages) <= 0.9 * shared_bytes:
      return tile
  raise UserError(f'the fused softmax kernel cannot tile a feature width of {features} ({itemsize}-byte operands) '
                   f'in this GPU\'s {shared_bytes // 1024} KiB of shared memory; use --config.train.softmax_kernel=xla')


def _tiles(block_b, block_v, f, w, form: str, tuning: LoopTuning) -> tuple[int, int]:
  """(block_b, block_v): those given (as arguments or in tuning), else BLOCK_B x BLOCK_V (grid form),
  loop_tile's (loop form) or MOSAIC_BLOCK_B x mosaic_block_v's (Mosaic GPU form)."""
  block_b, block_v = block_b or tuning.block_b, block_v or tuning.block_v
  if form == 'mosaic':
    mosaic = _mosaic()
    # float32 in TF32 where the step takes the backend's products; on a CPU the interpreter's are IEEE
    mosaic.check_dtype(f, w, tf32_allowed=_backend_products() or _interpret())
    mosaic.check_capability(_compute_capability())
    rows = mosaic.program_rows(tuning.warpgroups)
    if block_b not in (None, rows):
      raise UserError(f"the fused softmax kernel's Mosaic GPU form takes {rows} rows a program ({mosaic.MOSAIC_BLOCK_B} "
                      f"a compute warpgroup), not block_b={block_b}")
    features = mosaic.mosaic_features(f.shape[1], f.dtype)
    return rows, block_v or mosaic.mosaic_block_v(features, jnp.dtype(f.dtype).itemsize, _shared_memory_bytes(),
                                                  tuning.num_stages, tuning.warpgroups)
  if form == 'loop' and not (block_b and block_v):
    itemsize = max(jnp.dtype(f.dtype).itemsize, jnp.dtype(w.dtype).itemsize)
    tile = loop_tile(_loop_features(f.shape[1], tuning.k_chunk), itemsize, stages=tuning.num_stages)
    return block_b or tile, block_v or tile
  return block_b or BLOCK_B, block_v or BLOCK_V


def _loop_compiler_params(tuning: LoopTuning):
  """The loop form's lowering on a GPU: Triton (named by its compiler parameters; pallas_call would
  take Mosaic GPU otherwise, whose async copies and shared memory these whole-array blocks exceed)."""
  if _platform() != 'gpu':
    return None
  from jax.experimental.pallas import triton as pl_triton  # pylint: disable=g-import-not-at-top
  return pl_triton.CompilerParams(num_warps=tuning.num_warps, num_stages=tuning.num_stages)


def _core_count() -> int:
  """The GPU's multiprocessors (on other backends an H100's 132: interpret mode then splits as it would)."""
  cores = getattr(jax.devices()[0], 'core_count', None) if _platform() == 'gpu' else None
  return cores if isinstance(cores, int) and cores > 0 else H100_CORES


def _whole_splits(num_v: int, wanted: int) -> tuple[int, int]:
  """(splits, vocabulary tiles a split) nearest `wanted` (1 to num_v) with every split at least one tile."""
  per_split = -(-num_v // wanted)
  return -(-num_v // per_split), per_split


def _loop_split(num_b: int, num_v: int, tuning: LoopTuning) -> tuple[int, int]:
  """(splits, vocabulary tiles a split) for the loop form: tuning.splits (at most num_v) or loop_splits'."""
  return _whole_splits(num_v, min(tuning.splits, num_v) if tuning.splits else loop_splits(num_b, num_v))


def _mosaic_splits(num_b: int, num_v: int, tuning: LoopTuning) -> int:
  """Vocabulary splits for the Mosaic GPU form: _wanted_splits', made a divisor of the tiles."""
  return _mosaic().dividing_splits(num_v, _wanted_splits(num_b, num_v, tuning))


def _wanted_splits(num_b: int, num_v: int, tuning: LoopTuning) -> int:
  """The vocabulary splits the Mosaic GPU form wants over num_v tiles: tuning.splits or loop_splits'."""
  return tuning.splits or loop_splits(num_b, num_v)


def loop_splits(num_b: int, num_v: int, cores: int | None = None) -> int:
  """Vocabulary splits of the loop form's statistics and df passes: enough that their num_b x splits
  programs fill PROGRAMS_PER_CORE programs a multiprocessor (one a batch tile left 64 programs on the
  H100's 132 at batch 4096), each split at least one vocabulary tile."""
  wanted = max(1, min(num_v, -(-PROGRAMS_PER_CORE * (cores or _core_count()) // num_b)))
  return _whole_splits(num_v, wanted)[0]


def _grid_compiler_params():
  """The grid form's lowering on a TPU (Mosaic): the first grid axis independent (a chip with two
  TensorCores may split it between them), the last in order (each kernel accumulates over it)."""
  if _platform() != 'tpu':
    return None
  from jax.experimental.pallas import tpu as pl_tpu  # pylint: disable=g-import-not-at-top
  return pl_tpu.CompilerParams(dimension_semantics=('parallel', 'arbitrary'))


def _mosaic():
  """softmax_kernel_mosaic (the Mosaic GPU form), imported at its first use: Mosaic GPU's Pallas module
  takes about 0.4 s to import."""
  from nplm_jax.parallel import softmax_kernel_mosaic  # pylint: disable=g-import-not-at-top
  return softmax_kernel_mosaic


def _combined_splits(part_max, part_sum, part_pick, batch: int):
  """The vocabulary splits' statistics [splits, B'] combined as the online log-sum-exp combines tiles
  (each split has a column), cut to the batch's rows."""
  shard_max = jnp.max(part_max, axis=0)
  shard_sum = jnp.sum(part_sum * jnp.exp(part_max - shard_max[None, :]), axis=0)
  return shard_max[:batch], shard_sum[:batch], jnp.sum(part_pick, axis=0)[:batch]


def shard_stats(f, w, b, local_targets, *, block_b: int | None = None, block_v: int | None = None,
                form: str = 'grid', tuning: LoopTuning | None = None):
  """(max, sum of exp(z - max), z of the target or 0 where the shard does not own it) per example,
  float32 [B] each, for z = f w + b over this shard's columns; local_targets are column indices
  (outside [0, columns): not this shard's). Tiles of block_b x block_v (default BLOCK_B x BLOCK_V in the
  grid form, loop_tile's in the loop form, 64 x mosaic_block_v's in the Mosaic GPU form), in the 'grid'
  (TPU), 'loop' or 'mosaic' (GPU) form; the GPU forms' tiles, splits and compiler settings may be given
  in `tuning` (default: LoopTuning())."""
  tuning = tuning or LoopTuning()
  block_b, block_v = _tiles(block_b, block_v, f, w, form, tuning)
  batch, columns = f.shape[0], w.shape[-1]
  f, w, b, (t,) = _prepared(f, w, b, [local_targets.astype(jnp.int32)], block_b, block_v, form=form,
                            k_chunk=tuning.k_chunk)
  if form == 'loop':
    nb, nv = f.shape[0] // block_b, w.shape[-1] // block_v
    splits, per_split = _loop_split(nb, nv, tuning)
    k_chunk, num_k = _k_chunks(f.shape[1], tuning.k_chunk)
    part = pl.BlockSpec((None, block_b), lambda i, s: (s, i))
    part_max, part_sum, part_pick = pl.pallas_call(
        functools.partial(_stats_loop_kernel, block_v=block_v, columns=columns, num_v=nv, per_split=per_split,
                          k_chunk=k_chunk, num_k=num_k),
        grid=(nb, splits),
        in_specs=[pl.BlockSpec((block_b, f.shape[1]), lambda i, s: (i, 0)), pl.BlockSpec(w.shape, lambda i, s: (0, 0)),
                  pl.BlockSpec(b.shape, lambda i, s: (0,)), pl.BlockSpec((block_b,), lambda i, s: (i,))],
        out_specs=[part, part, part],
        out_shape=[jax.ShapeDtypeStruct((splits, f.shape[0]), jnp.float32)] * 3,
        interpret=_interpret(), compiler_params=_loop_compiler_params(tuning))(f, w, b, t)
    return _combined_splits(part_max, part_sum, part_pick, batch)
  if form == 'mosaic':
    mosaic = _mosaic()
    splits = _mosaic_splits(f.shape[0] // block_b, w.shape[-1] // block_v, tuning)
    parts = mosaic.stats(f, mosaic.kernel_layout(w), b, t, block_v=block_v, splits=splits, columns=columns,
                         stages=tuning.num_stages, warpgroups=tuning.warpgroups, interpret=_interpret())
    return _combined_splits(*parts, batch)
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
                form: str = 'grid', tuning: LoopTuning | None = None, bias_row: bool = False,
                gradient_dtype=jnp.float32):
  """(df [B, K], dw [K, columns], db [columns] or None) of sum(g * -log P(target)) from this shard's
  columns, float32, given the global log Z per example (the logits recomputed tile by tile), in the
  'grid' (TPU), 'loop' or 'mosaic' (GPU) form, tiled as shard_stats. bias_row (with a bias): dw with db as
  its last row, [K + 1, columns], and db None, as the output layer [U; W; b] holds them: written in place
  where dz comes in chunks of the vocabulary (_dz_grads_by_columns), else one concatenation. w may be wider
  than f (the layer's float32 rows beside bfloat16 features): where dz comes in chunks of the vocabulary
  over whole tiles it is cast a chunk at a time (no copy of the whole layer in f's dtype), else here.
  gradient_dtype: bfloat16 (train.output_layer_gradient_dtype) makes dz in chunks of the vocabulary write
  dW (with bias_row, [dW; db]) in bfloat16, each chunk's float32 sums rounded once: no float32 array of the
  layer's size (at |V| 300k and K 290, 348 MB of temporaries, half of it saved); the other forms accumulate
  dW over passes or chunks in float32 and return it so (the caller casts it)."""
  tuning = tuning or LoopTuning()
  block_b, block_v = _tiles(block_b, block_v, f, jax.ShapeDtypeStruct(w.shape, f.dtype), form, tuning)
  from_dz = form == 'mosaic' or (form == 'loop' and tuning.backward == 'dz')  # Mosaic: always from dz
  by_columns = from_dz and tuning.dz_axis == 'vocab'
  cast_chunks = w.dtype != f.dtype and by_columns and w.shape[-1] % block_v == 0
  w = w if cast_chunks else w.astype(f.dtype)
  batch, columns, has_bias = f.shape[0], w.shape[-1], b is not None
  rows = [log_z.astype(jnp.float32), local_targets.astype(jnp.int32), g.astype(jnp.float32)]
  # padded rows: log Z = +inf and g = 0, so their probabilities are 0 and their dz 0 whatever the bias
  features = f.shape[1]
  f, w, b, rows = _prepared(f, w, b, rows, block_b, block_v, row_pads=[jnp.inf, 0, 0], form=form,
                            k_chunk=tuning.k_chunk, pad_w=not cast_chunks)
  k, nb, nv = f.shape[1], f.shape[0] // block_b, w.shape[-1] // block_v
  if form in ('loop', 'mosaic'):
    dz_pass_for = _mosaic_dz_pass if form == 'mosaic' else _loop_dz_pass
    if by_columns:
      return _dz_grads_by_columns(f, w, b, rows, block_b, block_v, columns, batch, features, has_bias,
                                  has_bias and bias_row, tuning, dz_pass_for, gradient_dtype)
    if from_dz:
      df, dw, db = _dz_grads_by_rows(f, w, b, rows, block_b, block_v, columns, batch, has_bias, tuning, dz_pass_for)
    else:
      df, dw, db = _loop_grads(f, w, b, rows, block_b, block_v, columns, batch, has_bias, tuning)
    return _with_bias_row(df[:, :features], dw[:features], db, bias_row)
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
  return _with_bias_row(df[:batch], dw[:, :columns], db[:columns] if has_bias else None, bias_row)


def _with_bias_row(df, dw, db, bias_row: bool):
  """shard_grads' result, db below dw where bias_row asks for it (and there is a bias)."""
  if bias_row and db is not None:
    return df, jnp.concatenate([dw, db[None, :]], axis=0), None
  return df, dw, db


def _loop_dz_pass(f_shape, w, block_b: int, block_v: int, columns: int, tuning: LoopTuning):
  """The loop form's dz kernel (Triton) over a chunk of f_shape[0] rows: (f, w, b, log_z, t, g) -> (dz in
  w's dtype, db's share of each row tile [rows / block_b, columns'] float32)."""
  k, nv = f_shape[1], w.shape[-1] // block_v
  k_chunk, num_k = _k_chunks(k, tuning.k_chunk)
  row = pl.BlockSpec((block_b,), lambda i, j: (i,))
  return pl.pallas_call(
      functools.partial(_dz_kernel, block_v=block_v, columns=columns, k_chunk=k_chunk, num_k=num_k),
      grid=(f_shape[0] // block_b, nv),
      in_specs=[pl.BlockSpec((block_b, k), lambda i, j: (i, 0)), pl.BlockSpec((k, block_v), lambda i, j: (0, j)),
                pl.BlockSpec((block_v,), lambda i, j: (j,))] + [row] * 3,
      out_specs=[pl.BlockSpec((block_b, block_v), lambda i, j: (i, j)),
                 pl.BlockSpec((None, block_v), lambda i, j: (i, j))],
      out_shape=[jax.ShapeDtypeStruct((f_shape[0], w.shape[-1]), w.dtype),
                 jax.ShapeDtypeStruct((f_shape[0] // block_b, w.shape[-1]), jnp.float32)],
      interpret=_interpret(), compiler_params=_loop_compiler_params(tuning))


def _mosaic_dz_pass(f_shape, w, block_b: int, block_v: int, columns: int, tuning: LoopTuning):
  """The Mosaic GPU form's dz kernel over a chunk of f_shape[0] rows, as _loop_dz_pass, but for the layer in
  its kernel_layout (_pass_layer: transposed in float32)."""
  splits = _mosaic_splits(f_shape[0] // block_b, w.shape[-1] // block_v, tuning)  # block_b: its program_rows
  return functools.partial(_mosaic().dz_tiles, block_v=block_v, splits=splits, columns=columns,
                           stages=tuning.num_stages, warpgroups=tuning.warpgroups, interpret=_interpret())


def _pass_layer(dz_pass_for, w):
  """The layer [K, V] as dz_pass_for's kernel takes it (the Mosaic GPU form's kernel_layout)."""
  return _mosaic().kernel_layout(w) if dz_pass_for is _mosaic_dz_pass else w


def _dz_grads_by_rows(f, w, b, rows, block_b: int, block_v: int, columns: int, batch: int, has_bias: bool,
                      tuning: LoopTuning, dz_pass_for):
  """shard_grads with the gradients from dz (the loop form's backward='dz', the Mosaic GPU form's only
  one) in chunks of the batch (LoopTuning.dz_axis='batch'): over the batch in dz_chunks chunks (a divisor
  of the batch tiles, at most dz_chunks), a kernel (dz_pass_for's) writes the chunk's dz tile by tile and
  XLA's matmuls add f^T dz to dW and make dz w^T, the chunk's df (float32 accumulation, as the fused passes)."""
  nb = f.shape[0] // block_b
  chunks = max(c for c in range(1, min(tuning.dz_chunks, nb) + 1) if nb % c == 0)
  dz_pass = dz_pass_for((f.shape[0] // chunks, f.shape[1]), w, block_b, block_v, columns, tuning)
  w_pass = _pass_layer(dz_pass_for, w)  # made once, outside the loop (the Mosaic form's float32: a transpose)

  def chunk(carry, inputs):
    dw, db = carry
    f_chunk, *rows_chunk = inputs
    dz, db_parts = dz_pass(f_chunk, w_pass, b, *rows_chunk)
    return (dw + _dot(f_chunk.T, dz), db + jnp.sum(db_parts, axis=0)), _dot(dz, w.T)

  by_chunk = lambda x: x.reshape(chunks, x.shape[0] // chunks, *x.shape[1:])
  start = (jnp.zeros(w.shape, jnp.float32), jnp.zeros(w.shape[-1], jnp.float32))
  (dw, db), df = jax.lax.scan(chunk, start, (by_chunk(f), *(by_chunk(r) for r in rows)))
  return df.reshape(f.shape)[:batch], dw[:, :columns], (db[:columns] if has_bias else None)


def vocab_chunk_tiles(num_v: int, num_b: int, tuning: LoopTuning, whole_splits: bool) -> int:
  """Vocabulary tiles in each chunk of dz_axis='vocab' but a shorter last one: num_v in at most dz_chunks
  chunks; whole_splits (the Mosaic GPU form, whose dz pass runs as many vocabulary splits as divide a chunk's
  tiles evenly): rounded up to a multiple of the splits it wants, so that it runs them all. On an H200
  300,032 columns (2,344 tiles) in 8 chunks of 293, a prime, ran one split, 64 programs on 132
  multiprocessors: 0.71x the speed of 4 chunks, where 2 of the 4 splits of 586 tiles ran."""
  per_chunk = -(-num_v // min(tuning.dz_chunks, num_v))
  if whole_splits:
    wanted = _wanted_splits(num_b, per_chunk, tuning)
    per_chunk = min(num_v, -(-per_chunk // wanted) * wanted)
  return per_chunk


def _dz_grads_by_columns(f, w, b, rows, block_b: int, block_v: int, columns: int, batch: int, features: int,
                         has_bias: bool, bias_row: bool, tuning: LoopTuning, dz_pass_for, gradient_dtype=jnp.float32):
  """shard_grads from dz in chunks of the vocabulary (LoopTuning.dz_axis='vocab'): dz_chunks chunks at most,
  each of as many whole tiles (vocab_chunk_tiles), one after another in a loop, one chunk's dz alive at a
  time. Where the chunks pass the shard's tiles, the last starts early, over columns the one before took:
  those get a bias of -inf and no target there, so its dz is 0 on them and adds nothing (no padded copy of
  the layer, and one kernel shape: on the CPU a shorter last chunk apart took 205-435 MiB more). A kernel
  writes the chunk's dz [B, its columns] for every row, one matmul makes the chunk's columns of dW whole
  (f^T dz, added in place into dW, or [dW; db] with bias_row), another adds dz w^T to df ([B, K] float32):
  no float32 accumulator the size of the layer, and no copy of it to add db's row (one to trim the tiles'
  padded columns, where the shard has them, which also get a bias of -inf). Each chunk sees the targets
  shifted to its columns. w in a wider dtype than f (shard_grads' cast_chunks): each chunk's columns cast to
  f's and padded to its feature width as the loop takes them. dW (or [dW; db]) is made in gradient_dtype: each
  column is written by one chunk's matmul (the last chunk's repeated columns add dz's zeros), so a bfloat16
  one is its float32 sums rounded once."""
  nv = w.shape[-1] // block_v
  per_chunk = vocab_chunk_tiles(nv, f.shape[0] // block_b, tuning, whole_splits=dz_pass_for is _mosaic_dz_pass)
  chunks, width = -(-nv // per_chunk), per_chunk * block_v
  log_z, targets, g = rows
  b = jnp.where(jnp.arange(b.shape[0]) < columns, b, -jnp.inf)  # padded columns: probability 0, dz 0
  dz_pass = dz_pass_for(f.shape, jax.ShapeDtypeStruct((f.shape[1], width), f.dtype), block_b, block_v, width,
                        tuning)

  def chunk(carry, index):
    layer, db, df = carry
    start = jnp.minimum(index * width, w.shape[-1] - width)  # the last chunk ends at the shard's last tile
    taken = index * width - start  # its first columns, which the chunk before took
    w_chunk = jax.lax.dynamic_slice_in_dim(w, start, width, axis=1)
    if w_chunk.dtype != f.dtype:  # the layer's float32 rows (shard_grads' cast_chunks): cast and padded here
      w_chunk = _pad_to(w_chunk.astype(f.dtype), 0, f.shape[1])
    b_chunk = jnp.where(jnp.arange(width) < taken, -jnp.inf, jax.lax.dynamic_slice_in_dim(b, start, width))
    local = targets - start
    targets_here = jnp.where(local < taken, -1, local)
    dz, db_parts = dz_pass(f, _pass_layer(dz_pass_for, w_chunk), b_chunk, log_z, targets_here, g)
    piece, db_piece = _dot(f.T, dz, gradient_dtype)[:features], jnp.sum(db_parts, axis=0)
    if bias_row:
      piece = jnp.concatenate([piece, db_piece.astype(gradient_dtype)[None, :]], axis=0)
    add_in_place = lambda whole, part, axis: jax.lax.dynamic_update_slice_in_dim(
        whole, jax.lax.dynamic_slice_in_dim(whole, start, width, axis=axis) + part, start, axis=axis)
    layer = add_in_place(layer, piece, 1)
    if db is not None:
      db = add_in_place(db, db_piece, 0)
    return (layer, db, df + _dot(dz, w_chunk.T)), None

  carry = (jnp.zeros((features + bias_row, w.shape[-1]), gradient_dtype),
           jnp.zeros(w.shape[-1], jnp.float32) if has_bias and not bias_row else None,
           jnp.zeros(f.shape, jnp.float32))
  (layer, db, df), _ = jax.lax.scan(chunk, carry, jnp.arange(chunks, dtype=jnp.int32))
  if columns < w.shape[-1]:  # the tiles pass the shard's columns: a copy of the layer to trim them
    layer, db = layer[:, :columns], (None if db is None else db[:columns])
  return df[:batch, :features], layer, db


def _loop_grads(f, w, b, rows, block_b: int, block_v: int, columns: int, batch: int, has_bias: bool,
                tuning: LoopTuning):
  """shard_grads' two passes in the loop form: a program a vocabulary tile (dW, db over the batch
  tiles), then a program a batch tile and vocabulary split (its share of df over the split's tiles,
  the shares summed here)."""
  k, nb, nv = f.shape[1], f.shape[0] // block_b, w.shape[-1] // block_v
  chunks = dict(zip(('k_chunk', 'num_k'), _k_chunks(k, tuning.k_chunk)))
  whole_rows = [pl.BlockSpec((f.shape[0],), lambda j: (0,))] * 3
  dw, db = pl.pallas_call(
      functools.partial(_weight_grads_loop_kernel, block_b=block_b, block_v=block_v, columns=columns, num_b=nb,
                        **chunks),
      grid=(nv,),
      in_specs=[pl.BlockSpec(f.shape, lambda j: (0, 0)), pl.BlockSpec((k, block_v), lambda j: (0, j)),
                pl.BlockSpec((block_v,), lambda j: (j,))] + whole_rows,
      out_specs=[pl.BlockSpec((k, block_v), lambda j: (0, j)), pl.BlockSpec((block_v,), lambda j: (j,))],
      out_shape=[jax.ShapeDtypeStruct(w.shape, jnp.float32), jax.ShapeDtypeStruct(b.shape, jnp.float32)],
      interpret=_interpret(), compiler_params=_loop_compiler_params(tuning))(f, w, b, *rows)
  splits, per_split = _loop_split(nb, nv, tuning)
  row = pl.BlockSpec((block_b,), lambda i, s: (i,))
  df_parts = pl.pallas_call(
      functools.partial(_feature_grads_loop_kernel, block_v=block_v, columns=columns, num_v=nv, per_split=per_split,
                        **chunks),
      grid=(nb, splits),
      in_specs=[pl.BlockSpec((block_b, k), lambda i, s: (i, 0)), pl.BlockSpec(w.shape, lambda i, s: (0, 0)),
                pl.BlockSpec(b.shape, lambda i, s: (0,))] + [row] * 3,
      out_specs=pl.BlockSpec((None, block_b, k), lambda i, s: (s, i, 0)),
      out_shape=jax.ShapeDtypeStruct((splits, *f.shape), jnp.float32),
      interpret=_interpret(), compiler_params=_loop_compiler_params(tuning))(f, w, b, *rows)
  return jnp.sum(df_parts, axis=0)[:batch], dw[:, :columns], (db[:columns] if has_bias else None)
