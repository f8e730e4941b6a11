"""The fused Pallas softmax kernels of one vocabulary shard (nplm_jax/parallel/softmax_kernel.py), in interpret
mode, against NumPy; their use inside the sharded softmax is checked on meshes in parallel_checks.py."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplm_jax.parallel import softmax_kernel
from nplm_jax.parallel import softmax_kernel_mosaic
from nplm_jax.parallel import vocab_softmax
from nplm_jax.errors import UserError
from tests import jaxprs

pytestmark = pytest.mark.fast


def reference(f, w, b, targets, log_z, g):
  z = f.astype(np.float64) @ w.astype(np.float64) + b
  columns = w.shape[1]
  owned = (targets >= 0) & (targets < columns)
  picked = np.where(owned, z[np.arange(len(z)), np.clip(targets, 0, columns - 1)], 0.0)
  dz = g[:, None] * (np.exp(z - log_z[:, None]) - (np.arange(columns)[None, :] == targets[:, None]))
  return z.max(-1), np.exp(z - z.max(-1, keepdims=True)).sum(-1), picked, dz @ w.T, f.T.astype(np.float64) @ dz, dz.sum(0)


@pytest.mark.parametrize('batch,k,columns,block_b,block_v', [
    (70, 9, 300, 32, 128),  # short last tiles on both axes
    (64, 16, 256, 32, 128),  # whole tiles
    (5, 3, 7, 8, 8),  # one short tile each way
])
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
@pytest.mark.parametrize('form', ['grid', 'loop'])  # the Mosaic GPU form's own tests: below
def test_shard_passes_equal_numpy(batch, k, columns, block_b, block_v, dtype, form):
  rng = np.random.default_rng(columns)
  f = rng.normal(size=(batch, k)).astype(np.float32)
  w = rng.normal(size=(k, columns)).astype(np.float32)
  b = rng.normal(size=columns).astype(np.float32)
  targets = rng.integers(-20, columns + 20, size=batch).astype(np.int32)  # some owned by other shards
  g = rng.normal(size=batch).astype(np.float32)
  if dtype == 'bfloat16':  # the kernels get bfloat16 operands; the reference their rounded values
    f, w = (np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32)) for x in (f, w))
  cast = lambda x: jnp.asarray(x, dtype)
  shard_max, shard_sum, picked = softmax_kernel.shard_stats(cast(f), cast(w), b, targets, block_b=block_b,
                                                            block_v=block_v, form=form)
  log_z = np.log(np.asarray(shard_sum, np.float64)) + np.asarray(shard_max) + 0.25
  df, dw, db = softmax_kernel.shard_grads(cast(f), cast(w), b, log_z, targets, g, block_b=block_b, block_v=block_v,
                                          form=form)
  expected = reference(f, w, b, targets, log_z, g)
  tolerance = 1e-5 if dtype == 'float32' else 2e-2  # bfloat16: the kernels' dz is rounded for its matmuls
  for got, want in zip((shard_max, shard_sum, picked, df, dw, db), expected):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tolerance, atol=tolerance)
  assert df.dtype == dw.dtype == db.dtype == jnp.float32


@pytest.mark.parametrize('form,backward', [('grid', 'fused'), ('loop', 'fused'), ('loop', 'dz')])
def test_padded_rows_stay_finite_under_a_large_bias(form, backward):
  """20 rows in tiles of 16 (12 padded rows) and a bias of 100 on every column: the padded rows'
  probabilities are exp(bias - log Z); with a log Z of 0 there they overflowed to inf and 0 x inf
  made dW and db NaN. Every gradient finite and equal to NumPy's over the real rows."""
  rng = np.random.default_rng(7)
  batch, k, columns = 20, 5, 24
  f = rng.normal(size=(batch, k)).astype(np.float32)
  w = rng.normal(size=(k, columns)).astype(np.float32)
  b = np.full(columns, 100.0, np.float32)
  targets = rng.integers(0, columns, size=batch).astype(np.int32)
  g = np.ones(batch, np.float32)
  tuning = softmax_kernel.LoopTuning(backward=backward)
  shard_max, shard_sum, _ = softmax_kernel.shard_stats(f, w, b, targets, block_b=16, block_v=8, form=form,
                                                       tuning=tuning)
  log_z = np.log(np.asarray(shard_sum, np.float64)) + np.asarray(shard_max)
  df, dw, db = softmax_kernel.shard_grads(f, w, b, log_z.astype(np.float32), targets, g, block_b=16, block_v=8,
                                          form=form, tuning=tuning)
  for got, want in zip((df, dw, db), reference(f, w, b, targets, log_z, g)[3:]):
    assert np.all(np.isfinite(np.asarray(got)))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-4, atol=1e-4)


def _abstract_passes(k: int, dtype: str, form: str):
  """(function, abstract arguments, pallas_calls) of both passes in `form`, at batch 300 and 1000 columns
  (short last tiles): what the lowering tests build for another platform."""
  import jax  # pylint: disable=g-import-not-at-top
  batch, columns = 300, 1000
  f, w = jax.ShapeDtypeStruct((batch, k), dtype), jax.ShapeDtypeStruct((k, columns), dtype)
  b, rows = jax.ShapeDtypeStruct((columns,), jnp.float32), jax.ShapeDtypeStruct((batch,), jnp.float32)
  targets = jax.ShapeDtypeStruct((batch,), jnp.int32)
  stats = lambda f, w, b, t: softmax_kernel.shard_stats(f, w, b, t, form=form)
  grads = lambda f, w, b, log_z, t, g: softmax_kernel.shard_grads(f, w, b, log_z, t, g, form=form)
  return [(stats, (f, w, b, targets), 1), (grads, (f, w, b, rows, targets, rows), 2)]


@pytest.mark.parametrize('k', [9, 64, 200])
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_the_loop_form_lowers_for_cuda_through_triton(monkeypatch, k, dtype):
  """The GPU form built for CUDA on this CPU machine (what can be checked without a GPU): Triton, not
  Mosaic GPU (whose async copies and shared memory the whole-array blocks exceed), with the feature
  width padded to a power of two (Triton's lowering refuses any other array size). The GPU is named
  as an abstract device: JAX from 0.11 reads its compute capability from it where no GPU is present."""
  import jax  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(softmax_kernel, '_platform', lambda: 'gpu')
  gpu = jax.sharding.AbstractDevice(device_kind='NVIDIA H100 80GB HBM3', num_cores=132, platform='gpu')
  with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ('x',), abstract_device=gpu)):
    for function, args, _ in _abstract_passes(k, dtype, 'loop'):
      lowered = jax.jit(function).trace(*args).lower(lowering_platforms=('cuda',)).as_text()
      assert 'triton' in lowered and 'mosaic' not in lowered.lower()


@pytest.mark.parametrize('device_kind', ['TPU v4', 'TPU v5 lite', 'TPU v6 lite'])
@pytest.mark.parametrize('k,dtype', [(201, 'float32'), (200, 'bfloat16')])
def test_the_grid_form_lowers_for_tpu_through_mosaic(monkeypatch, device_kind, k, dtype):
  """The TPU form built for a TPU on this CPU machine (jax.sharding.AbstractDevice names the chip
  Mosaic lowers for): a Mosaic custom call a pass, its first grid axis parallel and its last (the one
  each kernel accumulates over) in order. Mosaic's own compiler and a run on a TPU are not checked."""
  import jax  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(softmax_kernel, '_platform', lambda: 'tpu')
  assert softmax_kernel._grid_compiler_params().dimension_semantics == ('parallel', 'arbitrary')  # pylint: disable=protected-access
  chip = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=1, platform='tpu')
  with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ('x',), abstract_device=chip)):
    for function, args, calls in _abstract_passes(k, dtype, 'grid'):
      lowered = jax.jit(function).trace(*args).lower(lowering_platforms=('tpu',)).as_text()
      assert lowered.count('tpu_custom_call(') == calls


def test_a_folded_bias_gives_no_bias_gradient():
  f, w = np.ones((4, 3), np.float32), np.ones((3, 10), np.float32)
  *_, db = softmax_kernel.shard_grads(f, w, None, np.zeros(4, np.float32), np.zeros(4, np.int32),
                                      np.ones(4, np.float32), block_b=8, block_v=8)
  assert db is None


def test_softmax_kernel_choice_by_backend():
  assert vocab_softmax.softmax_kernel_for('auto', 'cpu') == 'xla'
  assert vocab_softmax.softmax_kernel_for('auto', 'tpu') == 'xla'
  assert vocab_softmax.softmax_kernel_for('auto', 'gpu') == 'auto'  # one GPU: by each call's shapes (auto_kernel)
  assert vocab_softmax.softmax_kernel_for('auto', 'gpu', 8) == 'xla'  # measured on one GPU alone
  assert vocab_softmax.softmax_kernel_for('pallas', 'tpu') == 'pallas'
  with pytest.raises(UserError) as e:
    vocab_softmax.softmax_kernel_for('pallas', 'gpu')
  assert '\n' not in str(e.value) and 'softmax_kernel' in str(e.value)


@pytest.mark.parametrize('platform,batch,columns,features,dtype,kernel', [
    ('gpu', 4096, 100_000, 290, 'bfloat16', 'pallas_mosaic'),  # H200: 1.73x XLA in the training step
    ('gpu', 8192, 17_920, 290, 'bfloat16', 'pallas_mosaic'),  # Brown's 17,905 padded: 1.31x
    ('gpu', 4096, 300_000, 290, 'float32', 'xla'),  # float32: not measured in the training step
    ('gpu', 2048, 300_000, 290, 'bfloat16', 'xla'),  # fewer examples a shard: not measured
    ('gpu', 4096, 10_000, 290, 'bfloat16', 'xla'),  # PTB's vocabulary: not measured
    ('gpu', 4096, 100_000, 2048, 'bfloat16', 'xla'),  # its tiles of K = 2048 do not fit shared memory
    ('cpu', 4096, 100_000, 290, 'bfloat16', 'xla'),
    ('tpu', 4096, 100_000, 290, 'bfloat16', 'xla'),
])
def test_auto_picks_the_mosaic_form_where_it_was_measured_faster(platform, batch, columns, features, dtype, kernel):
  """softmax_kernel='auto' on one GPU: the Mosaic GPU form at the sizes the H200 measured it faster than XLA
  in the training step (backend_defaults.TABLE), XLA elsewhere (here the capability is an H100's: 9.0)."""
  assert vocab_softmax.auto_kernel(platform, batch, columns, features, dtype) == kernel


def test_token_nll_resolves_auto_by_the_shards_shapes(monkeypatch):
  """kernel='auto' is resolved when the step is traced, from a shard's examples and columns, K and the dtype."""
  import jax  # pylint: disable=g-import-not-at-top
  asked = []
  monkeypatch.setattr(vocab_softmax, 'auto_kernel', lambda *args: asked.append(args) or 'xla')
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ('data', 'model'))
  f, output = jnp.ones((16, 6), jnp.float32), jnp.zeros((7, 256), jnp.float32)
  nll = vocab_softmax.token_nll(f, output, jnp.zeros(16, jnp.int32), mesh=mesh, compute_dtype='bfloat16',
                                kernel='auto', kernel_tuning='num_stages=2')
  np.testing.assert_allclose(np.asarray(nll), np.log(256.0), rtol=1e-6)
  assert asked == [('cpu', 16, 256, 6, 'bfloat16', 'num_stages=2')]


def test_the_loop_form_tiles_fit_the_gpus_shared_memory():
  """loop_tile: 128 x 128 where a program fits in an H100's 227 KiB of shared memory (bfloat16 at K = 256,
  which compiled there), smaller where it did not (float32 at K = 256 and bfloat16 at K = 512 asked for
  384 KiB), smaller still on chips with less; one line naming the XLA path where no tile fits."""
  h100, a10 = 227 * 1024, 99 * 1024
  assert softmax_kernel.loop_tile(256, 2, h100) == 128
  assert softmax_kernel.loop_tile(256, 4, h100) == 64
  assert softmax_kernel.loop_tile(512, 2, h100) == 64
  assert softmax_kernel.loop_tile(1024, 4, h100) == 16
  assert softmax_kernel.loop_tile(256, 2, a10) == 32
  for tile, features, itemsize in ((128, 256, 2), (64, 256, 4), (64, 512, 2), (16, 1024, 4)):
    # what Triton asked for on the H100: one [tile, K] operand and two [K, tile] in flight
    assert itemsize * features * tile * 3 <= 232448
  with pytest.raises(ValueError, match='softmax_kernel=xla'):
    softmax_kernel.loop_tile(4096, 4, h100)


@pytest.mark.parametrize('backward', softmax_kernel.BACKWARDS)
@pytest.mark.parametrize('splits,k_chunk', [(1, None), (2, None), (4, None), (9, None), (1, 4), (3, 8), (2, 16)])
def test_the_loop_forms_vocabulary_splits_and_feature_chunks_give_the_same_numbers(splits, k_chunk, backward):
  """The loop form's statistics and df passes split the vocabulary tiles over several programs a batch
  tile (LoopTuning.splits; 5 tiles here: 4 splits become 3 of 2, 2 and 1 tiles, 9 become 5), their
  shares combined outside the kernel; and with LoopTuning.k_chunk the feature width (12) is padded to a
  multiple of the chunk (12, 16, 16), not to a power of two, and multiplied chunk by chunk; the
  gradients fused in the kernels or from dz written by one (backward='dz', its batch in chunks). The
  same numbers as NumPy every way, short tiles included."""
  rng = np.random.default_rng(splits)
  batch, k, columns = 40, 12, 300  # 2 batch tiles of 32, 5 vocabulary tiles of 64 (the last short)
  f = rng.normal(size=(batch, k)).astype(np.float32)
  w = rng.normal(size=(k, columns)).astype(np.float32)
  b = rng.normal(size=columns).astype(np.float32)
  targets = rng.integers(-20, columns + 20, size=batch).astype(np.int32)
  g = rng.normal(size=batch).astype(np.float32)
  batch = 70 if backward == 'dz' else batch  # 3 batch tiles: 2 dz chunks become 1 (a divisor of the tiles)
  f, targets, g = (np.resize(x, (batch, *x.shape[1:])) for x in (f, targets, g))
  tuning = softmax_kernel.LoopTuning(block_b=32, block_v=64, splits=splits, k_chunk=k_chunk, backward=backward,
                                     dz_chunks=2)
  stats = softmax_kernel.shard_stats(f, w, b, targets, form='loop', tuning=tuning)
  log_z = np.log(np.asarray(stats[1], np.float64)) + np.asarray(stats[0])
  grads = softmax_kernel.shard_grads(f, w, b, log_z.astype(np.float32), targets, g, form='loop', tuning=tuning)
  for got, want in zip((*stats, *grads), reference(f, w, b, targets, log_z, g)):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('dz_chunks', [1, 2, 3, 8])
@pytest.mark.parametrize('form', ['loop', 'mosaic'])
def test_dz_in_chunks_of_the_vocabulary_gives_the_same_numbers(form, dz_chunks):
  """LoopTuning.dz_axis='vocab': dz written a chunk of the vocabulary's tiles at a time (8 tiles of 64, the
  last short: in 3 chunks, two of 3 tiles in the loop and a last of 2 apart), each chunk's columns of dW
  made whole, df summed over the chunks, padded columns given a bias of -inf; targets in every chunk,
  outside the shard and in padded rows. The same numbers as NumPy, in the loop form (float32) and the
  Mosaic GPU form (bfloat16, within its dz's rounding)."""
  f, w, b, targets, g = _rounded_problem(70, 9, 500, seed=dz_chunks)  # 500 = 7 x 64 + 52; 70 rows: padded
  tuning = softmax_kernel.LoopTuning(block_v=64, dz_chunks=dz_chunks, dz_axis='vocab', backward='dz',
                                     **({'block_b': 32} if form == 'loop' else {}))
  cast = (lambda x: jnp.asarray(x, jnp.bfloat16)) if form == 'mosaic' else (lambda x: x)
  stats = softmax_kernel.shard_stats(cast(f), cast(w), b, targets, form=form, tuning=tuning)
  log_z = np.log(np.asarray(stats[1], np.float64)) + np.asarray(stats[0])
  grads = softmax_kernel.shard_grads(cast(f), cast(w), b, log_z.astype(np.float32), targets, g, form=form,
                                     tuning=tuning)
  tolerance = 2e-2 if form == 'mosaic' else 1e-5
  df, dw, db = reference(f, w, b, targets, log_z, g)[3:]
  for name, got, want in zip(('df', 'dw', 'db'), grads, (df, dw, db)):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tolerance, atol=tolerance, err_msg=name)
  # the output layer's shape [dW; db] (bias_row: written so, no copy), and without a bias none
  layer_df, layer, none = softmax_kernel.shard_grads(cast(f), cast(w), b, log_z.astype(np.float32), targets, g,
                                                     form=form, tuning=tuning, bias_row=True)
  assert none is None and layer.shape == (10, 500)
  np.testing.assert_allclose(np.asarray(layer, np.float64), np.concatenate([dw, db[None]]), rtol=tolerance,
                             atol=tolerance)
  np.testing.assert_array_equal(np.asarray(layer_df), np.asarray(grads[0]))
  no_bias = lambda *args: softmax_kernel.shard_grads(*args, form=form, tuning=tuning, bias_row=True)
  *_, no_db = jax.eval_shape(no_bias, cast(f), cast(w), None, log_z.astype(np.float32), targets, g)  # traced, not run
  assert no_db is None


def test_the_mosaic_forms_chunks_of_the_vocabulary_run_every_split_they_want():
  """The Mosaic GPU form's dz pass runs as many splits as divide a chunk's tiles: at |V| 300,032 (2,344
  tiles of 128) and batch 4096 (64 programs of rows) on 132 multiprocessors it wants 5; 8 chunks of 293
  tiles (a prime) ran 1 on the H200. Chunks of 295 (7, and 279 tiles apart) run 5; 16 chunks 150 (15, and
  94 apart); at 100k (782 tiles) 8 chunks of 100. The loop form's splits need not divide: its chunks stay
  as even as the count allows. Given splits are what the chunks are made whole in."""
  tuning = lambda chunks, **kw: softmax_kernel.LoopTuning(dz_axis='vocab', dz_chunks=chunks, **kw)
  for num_v, chunks, want in ((2344, 8, 295), (2344, 16, 150), (2344, 4, 590), (782, 8, 100), (782, 4, 200)):
    tiles = softmax_kernel.vocab_chunk_tiles(num_v, 64, tuning(chunks), whole_splits=True)
    assert tiles == want, (num_v, chunks, tiles)
    assert -(-num_v // tiles) == chunks  # as many chunks as asked, the last shorter
    wanted = softmax_kernel.loop_splits(64, tiles)
    assert softmax_kernel_mosaic.dividing_splits(tiles, wanted) == wanted == 5
  assert softmax_kernel.vocab_chunk_tiles(2344, 64, tuning(8), whole_splits=False) == 293
  assert softmax_kernel.vocab_chunk_tiles(2344, 64, tuning(8, splits=2), whole_splits=True) == 294
  assert softmax_kernel.vocab_chunk_tiles(7, 64, tuning(1), whole_splits=True) == 7  # never past the tiles (8)


def test_loop_splits_fill_the_gpu_and_give_every_split_a_tile():
  """At batch 4096 in tiles of 64 (64 programs), |V| 100k in tiles of 64: 5 splits, 320 programs on
  the H100's 132 multiprocessors; a per-shard batch of 256 (4 tiles) splits 80 tiles into 40 of 2; a
  batch that fills the chip alone is not split; no split is ever empty."""
  assert softmax_kernel.loop_splits(64, 1563, 132) == 5
  assert softmax_kernel.loop_splits(4, 80, 132) == 40
  assert softmax_kernel.loop_splits(512, 1563, 132) == 1
  assert softmax_kernel.loop_splits(1, 3, 132) == 3
  for num_b in (1, 3, 7, 64):
    for num_v in (1, 2, 9, 100, 1563):
      splits = softmax_kernel.loop_splits(num_b, num_v, 132)
      per_split = -(-num_v // splits)
      assert 1 <= splits <= num_v and (splits - 1) * per_split < num_v


@pytest.mark.parametrize('form,backward', [('grid', 'fused'), ('loop', 'fused'), ('loop', 'dz')])
def test_float32_matmuls_in_the_kernels_ask_for_full_precision(form, backward):
  """Every matmul inside the kernels names Precision.HIGHEST for float32 operands (Triton's dot
  otherwise multiplies in TF32: on the H100 the float32 max logit missed NumPy by 2.5e-4), and none
  for bfloat16, whose products are exact in float32 either way; so do XLA's matmuls of backward='dz'.
  Traced for model.matmul_precision='default' (its context), none: the backend's own, TF32 on a GPU."""
  import jax  # pylint: disable=g-import-not-at-top

  def dot_precisions(dtype):
    f, w = jnp.ones((40, 12), dtype), jnp.ones((12, 300), dtype)
    rows, targets = jnp.zeros(40, jnp.float32), jnp.zeros(40, jnp.int32)
    tuning = softmax_kernel.LoopTuning(backward=backward)
    traced = [jax.make_jaxpr(lambda f, w: softmax_kernel.shard_stats(f, w, None, targets, form=form,
                                                                     tuning=tuning))(f, w),
              jax.make_jaxpr(lambda f, w: softmax_kernel.shard_grads(f, w, None, rows, targets, rows, form=form,
                                                                     tuning=tuning))(f, w)]
    return [eqn.params['precision'] for closed in traced for eqn in jaxprs.equations(closed)
            if eqn.primitive.name == 'dot_general']

  highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
  float32, bfloat16 = dot_precisions(jnp.float32), dot_precisions(jnp.bfloat16)
  assert len(float32) >= 4 and all(p == highest for p in float32)  # logits in each pass, dW and df
  assert len(bfloat16) == len(float32) and all(p is None for p in bfloat16)
  # model.matmul_precision='default' (steps.with_matmul_precision on a GPU): the backend's own, as XLA's
  with jax.default_matmul_precision('default'):
    backends = dot_precisions(jnp.float32)
  default = (jax.lax.Precision.DEFAULT, jax.lax.Precision.DEFAULT)
  assert len(backends) == len(float32) and all(p in (None, default) for p in backends), backends


def test_the_kernels_settings_from_the_config_are_checked_in_one_line():
  """train.softmax_kernel_tuning: LoopTuning's fields as text, checked before any work; the backward is
  the kernel name's, so naming it there is an error too."""
  assert vocab_softmax.checked_kernel_tuning('') == ''
  assert vocab_softmax.checked_kernel_tuning('warpgroups=1, num_stages=1') == 'warpgroups=1, num_stages=1'
  assert softmax_kernel.tuning_fields('warpgroups=1, num_stages=1') == {'warpgroups': 1, 'num_stages': 1}
  assert softmax_kernel.tuning_fields('dz_axis=vocab,dz_chunks=8') == {'dz_axis': 'vocab', 'dz_chunks': 8}
  for text, message in (('tile=64', "'tile=64' is not FIELD=VALUE with a field of LoopTuning"),
                        ('dz_axis=rows', "dz_axis must be one of batch, vocab, not 'rows'"),
                        ('splits=many', "'splits=many' is not FIELD=VALUE"),
                        ('block_v=48', 'block_v must be a power of two'),
                        ('warpgroups=4', 'warpgroups must be 0 or 1, not 4'),
                        ('warpgroups=2', ("must be 0 or 1, not 2 .with two compute warpgroups the Mosaic GPU form's "
                                          'bias gradient was wrong on an H100')),
                        ('backward=dz', "chosen by train.softmax_kernel's name")):
    with pytest.raises(UserError, match=message) as e:
      vocab_softmax.checked_kernel_tuning(text)
    assert '\n' not in str(e.value) and str(e.value).startswith(f"train.softmax_kernel_tuning='{text}'")


def test_the_loop_forms_settings_are_checked_in_one_line():
  for name in ('block_b', 'block_v', 'k_chunk'):
    with pytest.raises(UserError, match=f'{name} must be a power of two') as e:
      softmax_kernel.LoopTuning(**{name: 48})
    assert '\n' not in str(e.value)
  for fields, message in (({'backward': 'dW'}, "backward must be one of fused, dz, not 'dW'"),
                          ({'dz_axis': 'rows'}, "dz_axis must be one of batch, vocab, not 'rows'"),
                          ({'dz_chunks': 0}, 'dz_chunks must be at least 1, not 0'),
                          ({'warpgroups': 3}, 'warpgroups must be 0 or 1, not 3$')):
    with pytest.raises(UserError, match=message):
      softmax_kernel.LoopTuning(**fields)


@pytest.mark.parametrize('k,k_chunk,backward', [(200, 32, 'fused'), (290, 64, 'fused'), (200, None, 'dz'),
                                                (290, 64, 'dz')])
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_the_loop_form_in_feature_chunks_lowers_for_cuda_through_triton(monkeypatch, k, k_chunk, backward, dtype):
  """With LoopTuning.k_chunk the feature width is a multiple of the chunk (224 for 200, 320 for 290, not
  256 and 512), which Triton takes because every load is a chunk: built for CUDA here, with the
  vocabulary splits and short tiles, the gradients fused or from dz (one kernel, then XLA's matmuls);
  what a CPU can check: the speed waits for a GPU."""
  import jax  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(softmax_kernel, '_platform', lambda: 'gpu')
  tuning = softmax_kernel.LoopTuning(k_chunk=k_chunk, splits=3, backward=backward)
  gpu = jax.sharding.AbstractDevice(device_kind='NVIDIA H100 80GB HBM3', num_cores=132, platform='gpu')
  batch, columns = 300, 1000
  f, w = jax.ShapeDtypeStruct((batch, k), dtype), jax.ShapeDtypeStruct((k, columns), dtype)
  b, rows = jax.ShapeDtypeStruct((columns,), jnp.float32), jax.ShapeDtypeStruct((batch,), jnp.float32)
  targets = jax.ShapeDtypeStruct((batch,), jnp.int32)
  stats = lambda f, w, b, t: softmax_kernel.shard_stats(f, w, b, t, form='loop', tuning=tuning)
  grads = lambda f, w, b, z, t, g: softmax_kernel.shard_grads(f, w, b, z, t, g, form='loop', tuning=tuning)
  with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ('x',), abstract_device=gpu)):
    for function, args, calls in ((stats, (f, w, b, targets), 1),
                                  (grads, (f, w, b, rows, targets, rows), 1 if backward == 'dz' else 2)):
      lowered = jax.jit(function).trace(*args).lower(lowering_platforms=('cuda',)).as_text()
      assert lowered.count('xla.gpu.triton') == calls and 'mosaic' not in lowered.lower()


# ------------------------------------------------------------------ the Mosaic GPU form

def _rounded_problem(batch, k, columns, seed, bias=None):
  """f, w (bfloat16-rounded float32), b, targets (some owned by other shards) and unequal g."""
  rng = np.random.default_rng(seed)
  f = rng.normal(size=(batch, k)).astype(np.float32)
  w = (rng.normal(size=(k, columns)) * 0.5).astype(np.float32)
  f, w = (np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32)) for x in (f, w))
  b = rng.normal(size=columns).astype(np.float32) if bias is None else np.full(columns, bias, np.float32)
  targets = rng.integers(-20, columns + 20, size=batch).astype(np.int32)
  return f, w, b, targets, rng.uniform(0.5, 1.5, size=batch).astype(np.float32)


@pytest.mark.parametrize('batch,k,columns,block_v,splits,warpgroups,dtype,dz_axis', [
    # a short row tile (70 = 64 + 6), 5 column tiles in 1 split (5 is prime), the last short
    (70, 9, 300, 64, 2, 0, 'bfloat16', 'batch'),
    (130, 70, 200, 64, 4, 0, 'bfloat16', 'batch'),  # K = 70 padded to 128, 4 tiles in 4 splits, 3 row tiles
    (5, 3, 7, None, None, 0, 'bfloat16', 'batch'),  # one short tile each way, the tile and splits chosen
    (70, 9, 300, 64, 2, 1, 'bfloat16', 'batch'),  # warp-specialised: one compute warpgroup beside the one that copies
    (70, 70, 200, 64, 4, 1, 'bfloat16', 'batch'),  # the same with 2 row tiles, the last short, K padded and 4 splits
    # float32 operands (TF32 on a GPU; the layer read transposed): tiles of 32 columns, 10 in 2 splits, the last
    # short; K = 70 padded to 96 (swizzled rows of 32), the tile chosen (32 for float32 in 2 stages), warp-specialised,
    # dz in chunks of the vocabulary; one short tile each way
    (70, 9, 300, 32, 2, 0, 'float32', 'batch'),
    (130, 70, 200, None, None, 1, 'float32', 'vocab'),
    (5, 3, 7, None, None, 0, 'float32', 'batch'),
])
def test_the_mosaic_form_equals_numpy(batch, k, columns, block_v, splits, warpgroups, dtype, dz_axis):
  """Both Mosaic GPU kernels in its interpret mode (threads, shared memory, barriers and TMA copies
  simulated): the statistics, and the gradients from dz (written in bfloat16, so df and dW within 2e-2 as
  the other forms' bfloat16 gradients; in float32, within 1e-5: the interpreter's products are IEEE, where a
  GPU's are TF32), padded rows, padded columns and targets outside the shard included, with one warpgroup a
  program or warp-specialised. Float32 runs under the backend's own products (model.matmul_precision=
  'default'), the only float32 the form takes."""
  f, w, b, targets, g = _rounded_problem(batch, k, columns, seed=columns)
  tuning = softmax_kernel.LoopTuning(block_v=block_v, splits=splits, warpgroups=warpgroups, dz_chunks=2,
                                     dz_axis=dz_axis)
  operand = lambda x: jnp.asarray(x, dtype)
  with jax.default_matmul_precision('default'):
    stats = softmax_kernel.shard_stats(operand(f), operand(w), b, targets, form='mosaic', tuning=tuning)
    log_z = np.log(np.asarray(stats[1], np.float64)) + np.asarray(stats[0]) + 0.25
    grads = softmax_kernel.shard_grads(operand(f), operand(w), b, log_z.astype(np.float32), targets, g,
                                       form='mosaic', tuning=tuning)
  expected = reference(f, w, b, targets, log_z, g)
  gradient_tolerance = 2e-2 if dtype == 'bfloat16' else 1e-5
  for name, got, want, tolerance in zip(('max', 'sum', 'picked', 'df', 'dw', 'db'), (*stats, *grads), expected,
                                        (1e-5,) * 3 + (gradient_tolerance, gradient_tolerance, 1e-5)):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tolerance, atol=tolerance, err_msg=name)
  assert all(x.dtype == jnp.float32 for x in (*stats, *grads))


def test_the_mosaic_forms_float32_layer_is_transposed_once_outside_the_loop_over_the_batch():
  """In float32 the Mosaic GPU form's kernels read the layer transposed (TF32 WGMMA operands are K-major): with
  dz in chunks of the batch the transpose is made once, before the loop over the chunks (in it, XLA on the
  CPU kept it there: a copy of the layer a chunk); with dz in chunks of the vocabulary each chunk transposes
  its own columns (no copy of the whole layer)."""
  batch, k, columns = 256, 64, 512
  f, w = jnp.ones((batch, k), jnp.float32), jnp.ones((k, columns), jnp.float32)
  b, rows, t = jnp.zeros(columns, jnp.float32), jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.int32)

  def transposes(jaxpr, shape):  # the layer's transposes in jaxpr (not its sub-jaxprs) read by other than a matmul
    eqns = getattr(jaxpr, 'jaxpr', jaxpr).eqns  # (a matmul's w.T is its dimension numbers, no copy)
    made = [eqn.outvars[0] for eqn in eqns if eqn.primitive.name == 'transpose' and eqn.outvars[0].aval.shape == shape]
    return sum(any(var in eqn.invars for eqn in eqns if eqn.primitive.name != 'dot_general') for var in made)

  for axis, outside, inside in (('batch', 1, 0), ('vocab', 0, 1)):
    tuning = softmax_kernel.LoopTuning(dz_chunks=4, dz_axis=axis, splits=1)
    grads = lambda *args, tuning=tuning: softmax_kernel.shard_grads(*args, form='mosaic', tuning=tuning)
    jaxpr = jax.make_jaxpr(grads)(f, w, b, rows, t, rows)
    scan = next(eqn for eqn in jaxprs.equations(jaxpr) if eqn.primitive.name == 'scan')
    width = columns if axis == 'batch' else columns // 4
    assert transposes(jaxpr, (columns, k)) == outside, axis
    assert transposes(scan.params['jaxpr'], (width, k)) == inside, axis


def test_the_mosaic_forms_padded_rows_stay_finite_under_a_large_bias():
  """20 rows in a program of 64 (44 padded rows) under a bias of 100 on every column: the padded rows'
  log Z is +inf, so their probabilities are 0 and every gradient finite."""
  f, w, b, targets, g = _rounded_problem(20, 5, 24, seed=7, bias=100.0)
  targets = targets % 24
  bf16 = lambda x: jnp.asarray(x, jnp.bfloat16)
  shard_max, shard_sum, _ = softmax_kernel.shard_stats(bf16(f), bf16(w), b, targets, form='mosaic')
  log_z = np.log(np.asarray(shard_sum, np.float64)) + np.asarray(shard_max)
  grads = softmax_kernel.shard_grads(bf16(f), bf16(w), b, log_z.astype(np.float32), targets, g, form='mosaic')
  for got, want in zip(grads, reference(f, w, b, targets, log_z, g)[3:]):
    assert np.all(np.isfinite(np.asarray(got)))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-2, atol=2e-2)


def test_the_mosaic_form_takes_its_dtypes_and_its_own_rows_in_one_line(monkeypatch):
  """Float32 operands only where the step takes TF32 products (the tensor cores have none in IEEE float32;
  on a GPU, as here: on a CPU the interpreter's products are IEEE, so it takes them), no mixed or integer
  operands, and its own rows a program: each a one-line error."""
  monkeypatch.setattr(softmax_kernel, '_platform', lambda: 'gpu')
  f, w = np.ones((8, 3), np.float32), np.ones((3, 10), np.float32)
  for args, tuning, message in (((f, w), None, 'float32 operands in TF32.*matmul_precision=default'),
                                ((f, jnp.asarray(w, jnp.bfloat16)), None,
                                 'bfloat16, float16 or float32 \\(TF32\\) operands, not float32 x bfloat16'),
                                ((jnp.asarray(f, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)),
                                 softmax_kernel.LoopTuning(block_b=32), '64 rows a program'),
                                ((jnp.asarray(f, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)),
                                 softmax_kernel.LoopTuning(block_b=128, warpgroups=1), '64 rows a program')):
    with pytest.raises(UserError, match=message) as e:
      softmax_kernel.shard_stats(*args, None, np.zeros(8, np.int32), form='mosaic', tuning=tuning)
    assert '\n' not in str(e.value)
  with jax.default_matmul_precision('default'):  # the step's model.matmul_precision='default'
    assert softmax_kernel._backend_products()  # pylint: disable=protected-access
    softmax_kernel._tiles(None, None, f, w, 'mosaic', softmax_kernel.LoopTuning())  # pylint: disable=protected-access
  for platform, devices, message in (('tpu', 1, 'pallas_mosaic'), ('cpu', 2, 'mesh.cpu_devices=1')):
    with pytest.raises(UserError, match=message) as e:
      vocab_softmax.softmax_kernel_for('pallas_mosaic', platform, devices)
    assert '\n' not in str(e.value)
  assert vocab_softmax.softmax_kernel_for('pallas_mosaic', 'gpu', 8) == 'pallas_mosaic'
  assert vocab_softmax.softmax_kernel_for('pallas_mosaic', 'cpu', 1) == 'pallas_mosaic'


def test_the_mosaic_forms_tiles_fit_the_gpus_shared_memory_and_its_splits_divide_the_tiles():
  """On an H100 (227 KiB): 128 columns a tile at K = 256 (f, two w tiles and a dz tile: 180 KiB) and at
  K = 320 (mlp1's 290, padded: 220 KiB, which compiled and ran there), 64 at K = 320 in 3 stages, float32's
  32 at K = 320 (64 in one stage); the
  splits always divide the vocabulary tiles, so every program's pipeline has the same static length."""
  from nplm_jax.parallel import softmax_kernel_mosaic as mosaic  # pylint: disable=g-import-not-at-top
  h100 = 227 * 1024
  assert mosaic.mosaic_features(290, jnp.bfloat16) == 320 and mosaic.mosaic_features(64, jnp.bfloat16) == 64
  # float32 (TF32): swizzled rows of 32 elements; its tiles twice the bytes, 32 columns at K = 320 in 2 stages
  assert mosaic.mosaic_features(290, jnp.float32) == 320 and mosaic.mosaic_features(70, jnp.float32) == 96
  assert mosaic.mosaic_block_v(320, 4, h100) == 32 and mosaic.mosaic_block_v(320, 4, h100, stages=1) == 64
  assert mosaic.mosaic_block_v(256, 2, h100) == 128 and mosaic.mosaic_block_v(320, 2, h100) == 128
  assert mosaic.mosaic_block_v(320, 2, h100, stages=3) == 64 and mosaic.mosaic_block_v(512, 2, h100) == 64
  assert mosaic.program_rows(0) == mosaic.program_rows(1) == 64
  with pytest.raises(UserError, match='softmax_kernel=xla'):
    mosaic.mosaic_block_v(2048, 2, h100)
  with pytest.raises(UserError, match='compute capability 9.0 or later.*not 8.0.*pallas_loop'):
    mosaic.check_capability((8, 0))
  mosaic.check_capability((9, 0))
  mosaic.check_capability(None)
  assert mosaic.dividing_splits(2344, 9) == 8 and mosaic.dividing_splits(5, 3) == 1 and mosaic.dividing_splits(7, 9) == 7
  for num_v in (1, 5, 12, 1563, 2344):
    for wanted in (1, 3, 8, 40):
      assert num_v % mosaic.dividing_splits(num_v, wanted) == 0


@pytest.mark.parametrize('warpgroups,dtype', [(0, 'bfloat16'), (1, 'bfloat16'), (0, 'float32'), (1, 'float32')])
def test_the_mosaic_form_lowers_for_cuda(monkeypatch, warpgroups, dtype):
  """Both passes built for CUDA on this CPU machine (Mosaic GPU's lowering runs in Python: register
  layouts, TMA boxes and shared memory are checked here), with K = 290 padded to 320, short tiles and
  splits, tiled for an H100, with one warpgroup a program or warp-specialised (a compute warpgroup
  beside one that copies); no Triton. Float32 (under the backend's own products) multiplies TF32 operands
  from the transposed layer: WGMMA takes no transposed TF32 operand, which Mosaic GPU refuses as it
  lowers. Compiling to PTX and running need a GPU with WGMMA (compute capability 9)."""
  import jax  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(softmax_kernel, '_platform', lambda: 'gpu')
  monkeypatch.setattr(softmax_kernel, '_shared_memory_bytes', lambda: 227 * 1024)
  monkeypatch.setattr(softmax_kernel, '_core_count', lambda: 132)
  batch, columns, k = 300, 1000, 290
  f, w = jax.ShapeDtypeStruct((batch, k), dtype), jax.ShapeDtypeStruct((k, columns), dtype)
  b, rows = jax.ShapeDtypeStruct((columns,), jnp.float32), jax.ShapeDtypeStruct((batch,), jnp.float32)
  targets = jax.ShapeDtypeStruct((batch,), jnp.int32)
  tuning = softmax_kernel.LoopTuning(splits=3, warpgroups=warpgroups)
  stats = lambda f, w, b, t: softmax_kernel.shard_stats(f, w, b, t, form='mosaic', tuning=tuning)
  grads = lambda f, w, b, z, t, g: softmax_kernel.shard_grads(f, w, b, z, t, g, form='mosaic', tuning=tuning)
  product = 'm64n32k8.f32.tf32.tf32' if dtype == 'float32' else 'm64n128k16.f32.bf16.bf16'
  for function, args in ((stats, (f, w, b, targets)), (grads, (f, w, b, rows, targets, rows))):
    with jax.default_matmul_precision('default'):
      lowered = jax.jit(function).trace(*args).lower(lowering_platforms=('cuda',)).as_text()
    assert 'mosaic_gpu' in lowered and 'triton' not in lowered and product in lowered


def _whole_layer_casts(jaxpr, columns: int, dtype) -> int:
  """convert_element_type equations anywhere in `jaxpr` (sub-jaxprs included) that make an array of
  `columns` columns in `dtype`: copies of the whole output layer in the matmuls' dtype."""
  return sum(eqn.primitive.name == 'convert_element_type' and eqn.outvars[0].aval.ndim == 2
             and eqn.outvars[0].aval.shape[-1] == columns and eqn.outvars[0].aval.dtype == dtype
             for eqn in jaxprs.equations(jaxpr))


@pytest.mark.parametrize('tuning,casts', [('', 2), ('dz_axis=vocab,dz_chunks=2', 1)])
def test_dz_in_chunks_of_the_vocabulary_casts_the_layer_a_chunk_at_a_time(tuning, casts):
  """In bfloat16 the forward pass casts the output layer's rows whole for the statistics kernel; the
  backward with dz in chunks of the batch casts them whole again (a copy of the layer alive through the
  backward: 183 MiB at |V| 300k, K 290 padded to 320), with dz in chunks of the vocabulary only a chunk at
  a time; the loss and gradients are the same."""
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ('data', 'model'))
  rng = np.random.default_rng(3)
  f = jnp.asarray(rng.normal(size=(64, 20)), jnp.float32)
  output = jnp.asarray(rng.normal(size=(21, 512)) * 0.1, jnp.float32)
  targets = jnp.asarray(rng.integers(0, 500, size=64), jnp.int32)

  def loss(f, output, tuning):
    return jnp.mean(vocab_softmax.token_nll(f, output, targets, mesh=mesh, compute_dtype='bfloat16',
                                            kernel='pallas_mosaic', kernel_tuning=tuning))
  grad = jax.value_and_grad(loss, argnums=(0, 1))
  jaxpr = jax.make_jaxpr(functools.partial(grad, tuning=tuning))(f, output).jaxpr
  assert _whole_layer_casts(jaxpr, 512, jnp.bfloat16) == casts
  compiled_grad = jax.jit(grad, static_argnums=2)
  (value, grads), (want_value, want_grads) = compiled_grad(f, output, tuning), compiled_grad(f, output, '')
  np.testing.assert_allclose(float(value), float(want_value), rtol=1e-6)
  for got, want in zip(grads, want_grads):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-2, atol=2e-4)
