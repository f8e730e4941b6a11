"""The Flax model against a NumPy implementation of the paper's equation, and its parameter count."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplm_jax.models import bengio2003 as model_lib
from nplm_jax.models import output_layer
from nplm_jax.parallel import softmax_kernel_mosaic
from nplm_jax.parallel import vocab_softmax
from tests import dense_reference
from tests import jaxprs
from tests import numpy_reference
from nplm_jax import backend_defaults
from nplm_jax import config as config_lib
from nplm_jax.errors import UserError

pytestmark = pytest.mark.fast

AUTO_VOCAB_BLOCK = backend_defaults.TABLE["train.vocab_block"].cpu[1]


def random_params(model, seed=0):
  """The model's parameter tree with every entry random (init zeros the output layer), the padded
  columns' bias at PADDING_LOGIT as the model keeps it."""
  params = output_layer.init_params(model)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(params))
  out = {k: 0.5 * jax.random.normal(key, v.shape) for key, (k, v) in zip(keys, sorted(params.items()))}
  out[output_layer.OUTPUT] = out[output_layer.OUTPUT].at[-1, model.vocab_size:].set(output_layer.PADDING_LOGIT)
  return out


def separate(model, params) -> dict:
  """The paper's U, W, b out of the output layer's rows (for the NumPy reference)."""
  out = {k: np.asarray(v) for k, v in params.items() if k != output_layer.OUTPUT}
  for name, rows in model.output_rows().items():
    out[name] = np.asarray(params[output_layer.OUTPUT])[rows]
  out['b'] = out['b'][0]
  return out


@pytest.mark.parametrize('h,direct,distant', [(12, True, 0), (12, False, 0), (0, True, 0), (12, True, 6), (12, False, 6)])
@pytest.mark.unit
def test_logits_match_numpy_equation(h, direct, distant):
  """The paper's equation; with a distant block (6 words before the window, 2 kernels) x ends with each
  kernel's weighted sum of their vectors."""
  model = model_lib.NPLM(vocab_size=37, window=3, embed_dim=5, hidden_dim=h, direct=direct, distant_tokens=distant,
                         distant_kernels=2 if distant else 0)
  params = random_params(model)
  contexts = np.random.default_rng(1).integers(0, 37, size=(16, model.context_size)).astype(np.int32)
  logits = model.apply({'params': params}, contexts)
  expected = numpy_reference.logits(separate(model, params), contexts)
  np.testing.assert_allclose(np.asarray(logits), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.unit
def test_padding_columns_are_minus_infinity_and_real_ones_match():
  unpadded = model_lib.NPLM(vocab_size=37, window=2, embed_dim=4, hidden_dim=6, direct=True)
  padded = unpadded.clone(vocab_pad_multiple=16)
  assert padded.padded_vocab_size == 48
  params = random_params(padded)
  contexts = np.random.default_rng(2).integers(0, 37, size=(8, 2)).astype(np.int32)
  logits = np.asarray(padded.apply({'params': params}, contexts))
  assert np.all(np.isneginf(logits[:, 37:]))
  trimmed = {k: (v[..., :37] if k == output_layer.OUTPUT else v) for k, v in params.items()}
  np.testing.assert_allclose(logits[:, :37], np.asarray(unpadded.apply({'params': trimmed}, contexts)), rtol=1e-6)


@pytest.mark.parametrize('n,m,h,direct', [(5, 60, 50, True), (5, 60, 0, True), (5, 30, 50, True),
                                          (3, 30, 50, True), (5, 30, 100, False)])
@pytest.mark.unit
def test_parameter_count_formula(n, m, h, direct):
  vocab = 101
  model = model_lib.NPLM(vocab_size=vocab, window=n - 1, embed_dim=m, hidden_dim=h, direct=direct)
  counted = sum(x.size for x in jax.tree.leaves(output_layer.init_params(model)))
  paper = vocab * (1 + n * m + h) + h * (1 + (n - 1) * m) if direct else vocab * (1 + m + h) + h * (1 + (n - 1) * m)
  assert counted == paper == model_lib.num_parameters(vocab, n, m, h, direct)


@pytest.mark.unit
def test_unigram_bias_init_is_log_unigram():
  model = model_lib.NPLM(vocab_size=4, window=1, embed_dim=2, hidden_dim=0, direct=True, vocab_pad_multiple=8)
  counts = np.array([10, 0, 5, 85])
  output = np.asarray(output_layer.init_params(model, counts)[output_layer.OUTPUT])
  p = (counts + 0.5) / (counts + 0.5).sum()
  np.testing.assert_allclose(output[-1, :4], np.log(p), rtol=1e-6)
  np.testing.assert_array_equal(output[-1, 4:], np.float32(output_layer.PADDING_LOGIT))  # padded: no probability
  np.testing.assert_array_equal(output[:-1], 0)


@pytest.mark.unit
def test_single_device_vocab_softmax_equals_dense_log_softmax():
  model = model_lib.NPLM(vocab_size=50, window=2, embed_dim=4, hidden_dim=8, direct=True, vocab_pad_multiple=8)
  params = random_params(model)
  contexts = np.random.default_rng(3).integers(0, 50, size=(12, 2)).astype(np.int32)
  targets = np.random.default_rng(4).integers(0, 50, size=(12,)).astype(np.int32)
  mesh = jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  feats = model.apply({'params': params}, contexts, method=model_lib.NPLM.features)
  sharded = vocab_softmax.token_nll(feats, params[output_layer.OUTPUT], jnp.asarray(targets), mesh=mesh)
  dense = dense_reference.dense_token_nll(model.apply({'params': params}, contexts), targets)
  np.testing.assert_allclose(np.asarray(sharded), np.asarray(dense), rtol=1e-5)
  expected = numpy_reference.token_nll(separate(model, params), contexts, targets, vocab_size=50)
  np.testing.assert_allclose(np.asarray(sharded), expected, rtol=1e-5)


def test_bfloat16_compute_stays_close_to_float32():
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,reimported
  from nplm_jax.training import steps  # pylint: disable=g-import-not-at-top
  model = model_lib.NPLM(vocab_size=50, window=2, embed_dim=8, hidden_dim=16, direct=True, vocab_pad_multiple=8)
  params = random_params(model)
  contexts = np.random.default_rng(5).integers(0, 50, size=(32, 2)).astype(np.int32)
  targets = np.random.default_rng(6).integers(0, 50, size=(32,)).astype(np.int32)
  mesh = jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  f32 = steps.token_nll(model, mesh, params, contexts, targets)
  bf16 = steps.token_nll(model.clone(compute_dtype='bfloat16'), mesh, params, contexts, targets)
  assert bf16.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(bf16), np.asarray(f32), rtol=3e-2, atol=3e-2)
  assert not np.array_equal(np.asarray(bf16), np.asarray(f32))  # the option really changes the compute


@pytest.mark.parametrize('compute_dtype', ['float32', 'bfloat16'])
def test_streaming_the_vocabulary_gives_the_same_nll_and_gradients(compute_dtype):
  """vocab_block: sub-blocks of 24 columns (24, 24, 8 of 56) with an online log-sum-exp give the
  NLL and every gradient of the all-at-once softmax, in float32 and with bfloat16 matmuls."""
  model = model_lib.NPLM(vocab_size=50, window=2, embed_dim=8, hidden_dim=16, direct=True, vocab_pad_multiple=8,
                         compute_dtype=compute_dtype)
  params = random_params(model)
  contexts = np.random.default_rng(5).integers(0, 50, size=(32, 2)).astype(np.int32)
  targets = np.random.default_rng(6).integers(0, 50, size=(32,)).astype(np.int32)
  targets[:3] = [0, 49, 30]  # in the first, the last and the short sub-block
  mesh = jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)

  def loss(p, vocab_block):
    feats = model.apply({'params': p}, contexts, method=model_lib.NPLM.features)
    return vocab_softmax.token_nll(feats, p[output_layer.OUTPUT], jnp.asarray(targets), mesh=mesh,
                                   compute_dtype=compute_dtype, vocab_block=vocab_block)

  with jax.set_mesh(mesh):
    at_once, streamed = (jax.jit(lambda p, b=b: loss(p, b))(params) for b in (0, 24))
    grads = [jax.jit(jax.grad(lambda p, b=b: jnp.sum(loss(p, b))))(params) for b in (0, 24)]
  np.testing.assert_allclose(np.asarray(streamed), np.asarray(at_once), rtol=1e-5)
  for name in grads[0]:
    np.testing.assert_allclose(np.asarray(grads[1][name]), np.asarray(grads[0][name]), rtol=1e-4, atol=1e-6)


MOSAIC_BY_COLUMNS = 'dz_axis=vocab,dz_chunks=2'  # the Mosaic GPU form with dz in chunks of the vocabulary


def random_output_layer_problem(seed: int, batch: int = 32, k: int = 24, vocab: int = 56):
  """(features f [batch, k], output layer [k + 1, vocab], targets, a 1 x 1 mesh), random from `seed`."""
  rng = np.random.default_rng(seed)
  f = jnp.asarray(rng.normal(size=(batch, k)), jnp.float32)
  out = jnp.asarray(rng.normal(size=(k + 1, vocab)) * 0.3, jnp.float32)
  targets = jnp.asarray(rng.integers(0, vocab, batch), jnp.int32)
  return f, out, targets, jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)


BFLOAT16_SIGNIFICAND_BITS = 8  # 7 stored and the implicit one: a value's ulp is 2^(exponent - 7)


def bfloat16_ulp(x: np.ndarray) -> np.ndarray:
  """The spacing of bfloat16 values at |x| (0 where x is 0)."""
  magnitude = np.abs(np.asarray(x, np.float64))
  exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
  return np.where(magnitude > 0, 2.0 ** (exponent - (BFLOAT16_SIGNIFICAND_BITS - 1)), 0.0)


@pytest.mark.parametrize('kernel,vocab_block', [('xla', 0), ('xla', 24), ('pallas', 0)])
def test_bfloat16_output_layer_gradient_is_float32_and_one_array(kernel, vocab_block):
  """With bfloat16 matmuls the output layer's gradient is the float32 the matmuls accumulated, not
  rounded to bfloat16, and db is the float32 sum of dz.

  The reference is dW = f^T dz with f and dz rounded to bfloat16 (as the step computes them), summed in
  float64. Its bound comes from the arithmetic, not from one machine: the program makes dz in float32
  (its softmax's exp, sums and the logits' matmul in an order the CPU's kernels choose: with native
  bfloat16, as AVX-512 BF16 and AMX, another than without), so where its float32 dz and the reference's
  float64 one fall on either side of a bfloat16 rounding boundary, the two bfloat16 dz differ by one ulp.
  dW[i, j] may then differ by sum_b |f[b, i]| ulp(dz[b, j]), plus float32 accumulation over the batch
  (batch x 2^-24 of sum_b |f[b, i] dz[b, j]|). That bound is loose enough to miss a dW rounded to bfloat16
  (2^-9 of |dW|), so that is checked apart: a float32 accumulation almost never lands on a bfloat16 value,
  a rounded one always does."""
  f, out, targets, mesh = random_output_layer_problem(seed=0)
  vocab = out.shape[-1]
  loss = lambda o: jnp.sum(vocab_softmax.token_nll(f, o, targets, mesh=mesh, compute_dtype='bfloat16', kernel=kernel,
                                                   vocab_block=vocab_block))
  with jax.set_mesh(mesh):
    grad = jax.jit(jax.grad(loss))(out)
  assert grad.dtype == jnp.float32 and grad.shape == out.shape
  as_bf16 = lambda x: np.asarray(jnp.asarray(x, jnp.bfloat16), np.float64)
  f16, w16, b = as_bf16(f), as_bf16(out[:-1]), np.asarray(out[-1], np.float64)
  logits = f16 @ w16 + b
  p = np.exp(logits - logits.max(-1, keepdims=True))
  dz = p / p.sum(-1, keepdims=True) - np.eye(vocab)[np.asarray(targets)]
  np.testing.assert_allclose(np.asarray(grad[-1]), dz.sum(0), rtol=1e-4, atol=1e-5)
  dz16 = as_bf16(dz)
  d_weights = np.asarray(grad[:-1], np.float64)
  one_ulp_of_dz = np.abs(f16).T @ bfloat16_ulp(dz16)
  float32_sums = f.shape[0] * 2.0 ** -24 * (np.abs(f16).T @ np.abs(dz16))
  excess = np.abs(d_weights - f16.T @ dz16) - (one_ulp_of_dz + float32_sums)
  assert excess.max() <= 0, f'dW off by more than one bfloat16 ulp of dz at {np.argwhere(excess > 0)[:5].tolist()}'
  on_bfloat16_values = np.mean(d_weights == as_bf16(d_weights))
  assert on_bfloat16_values < 0.1, f'{on_bfloat16_values:.0%} of dW is on bfloat16 values: rounded to bfloat16'


def layer_shaped_concatenations(hlo_text: str, rows: int, columns: int) -> list[str]:
  """The compiled program's instructions that make an f32[rows, columns] array by a concatenation."""
  made = re.compile(rf'= f32\[{rows},{columns}\]')
  return [line for line in hlo_text.splitlines() if made.search(line) and 'concatenate' in line]


@pytest.mark.parametrize('vocab_block', [0, 24])
def test_the_bfloat16_layer_gradient_is_made_in_the_layers_shape(vocab_block):
  """In bfloat16 the output layer's gradient comes out of the matmul in the layer's shape, db written over
  its last row in place: no concatenation of dW and db, which costs a copy of the whole layer's gradient
  each step (vocab_softmax._layer_gradient). Positive control: the detector finds such a concatenation."""
  batch, k, vocab = 32, 40, 96
  mesh = jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  f, out = jnp.ones((batch, k), jnp.float32), jnp.ones((k + 1, vocab), jnp.float32)
  targets = jnp.zeros((batch,), jnp.int32)
  loss = lambda o: jnp.sum(vocab_softmax.token_nll(f, o, targets, mesh=mesh, compute_dtype='bfloat16',
                                                   vocab_block=vocab_block))
  with jax.set_mesh(mesh):
    hlo = jax.jit(jax.grad(loss)).lower(out).compile().as_text()
  assert not layer_shaped_concatenations(hlo, k + 1, vocab), layer_shaped_concatenations(hlo, k + 1, vocab)
  control = jax.jit(lambda dw, db: jnp.concatenate([2 * dw, 3 * db[None]])).lower(out[:-1], out[-1]).compile()
  assert layer_shaped_concatenations(control.as_text(), k + 1, vocab)


def whole_layer_casts(jaxpr, shape) -> int:
  """convert_element_type equations anywhere in `jaxpr` (sub-jaxprs included) that make a bfloat16 array of
  `shape` (the output layer's weight rows'): copies of those rows in the matmuls' dtype."""
  return sum(eqn.primitive.name == 'convert_element_type' and eqn.outvars[0].aval.shape == tuple(shape)
             and eqn.outvars[0].aval.dtype == jnp.bfloat16 for eqn in jaxprs.equations(jaxpr))


@pytest.mark.parametrize('form', ['whole', 'rows'])
@pytest.mark.parametrize('kernel,vocab_block,recompute,tuning', [
    ('xla', 0, False, ''), ('xla', 0, True, ''), ('xla', 24, False, ''), ('pallas_loop', 0, False, ''),
    ('pallas_mosaic', 0, False, MOSAIC_BY_COLUMNS)])
def test_a_cast_layer_given_gives_the_same_nll_and_gradients_without_a_cast(kernel, vocab_block, recompute, tuning,
                                                                             form):
  """token_nll(cast_layer=the layer or its weight rows in bfloat16), as a training loop carries them from one
  step's update to the next (steps.cast_output_layer): the NLL and gradients of casting the rows in the step,
  every path (all at once, recomputed, streamed, the kernels' loop and Mosaic forms; the all-at-once path
  multiplies a whole cast layer with f given a column of zeros: float32 sums of one more term, 0), and no
  cast of the layer's rows in the traced program. Control: without the cast layer, the same program casts them."""
  f, out, targets, mesh = random_output_layer_problem(seed=1)
  k, vocab = f.shape[-1], out.shape[-1]

  def loss(f, o, cast):
    return jnp.sum(vocab_softmax.token_nll(f, o, targets, mesh=mesh, compute_dtype='bfloat16', kernel=kernel,
                                           vocab_block=vocab_block, recompute=recompute, kernel_tuning=tuning,
                                           cast_layer=cast))
  grad = jax.value_and_grad(loss, argnums=(0, 1))
  cast = (out if form == 'whole' else out[:-1]).astype(jnp.bfloat16)
  with jax.set_mesh(mesh):
    (value, grads), (want_value, want_grads) = jax.jit(grad)(f, out, cast), jax.jit(grad)(f, out, None)
    assert whole_layer_casts(jax.make_jaxpr(grad)(f, out, cast).jaxpr, (k, vocab)) == 0
    assert whole_layer_casts(jax.make_jaxpr(grad)(f, out, None).jaxpr, (k, vocab)) >= 1
  np.testing.assert_allclose(float(value), float(want_value), rtol=1e-6)
  for got, want in zip(grads, want_grads):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('kernel,vocab_block,recompute,form,tuning,gradient_form', [
    ('xla', 0, False, None, '', 'as_traced'), ('xla', 0, True, None, '', 'as_traced'),
    ('xla', 24, False, None, '', 'as_traced'), ('xla', 0, False, 'whole', '', 'as_traced'),
    ('xla', 24, False, 'rows', '', 'as_traced'), ('pallas_loop', 0, False, None, '', 'as_traced'),
    ('pallas', 0, False, None, '', 'as_traced'), ('pallas_mosaic', 0, False, None, MOSAIC_BY_COLUMNS, 'as_traced'),
    ('pallas_mosaic', 0, False, 'rows', MOSAIC_BY_COLUMNS, 'as_traced'),
    ('xla', 0, False, 'whole', '', 'dlogits_apart_rows_padded'), ('xla', 24, False, None, '', 'rows_padded')])
def test_a_bfloat16_layer_gradient_is_the_float32_one_rounded(kernel, vocab_block, recompute, form, tuning,
                                                              gradient_form):
  """token_nll(gradient_dtype='bfloat16') (train.output_layer_gradient_dtype): the output layer's gradient is
  the float32 one rounded to bfloat16 (float32 sums, one rounding) on every path, with a carried cast layer
  too, and in the gradient matmul's other forms (train.output_layer_gradient_form); it reaches autodiff in
  the layer's float32; the loss and the features' gradient are unchanged. On
  the all-at-once path the gradient matmul itself writes bfloat16 (the bytes the option saves), and so does
  the Mosaic form's with dz in chunks of the vocabulary (3 tiles in 2 chunks: the last one repeats a tile,
  whose columns must keep the first chunk's values); control: the default's write float32."""
  f, out, targets, mesh = random_output_layer_problem(seed=2, vocab=300 if tuning else 56)
  k, vocab = f.shape[-1], out.shape[-1]
  cast = None if form is None else (out if form == 'whole' else out[:-1]).astype(jnp.bfloat16)

  def loss(f, o, gradient_dtype):
    return jnp.sum(vocab_softmax.token_nll(f, o, targets, mesh=mesh, compute_dtype='bfloat16', kernel=kernel,
                                           vocab_block=vocab_block, recompute=recompute, cast_layer=cast,
                                           gradient_dtype=gradient_dtype, kernel_tuning=tuning,
                                           gradient_form=gradient_form))
  grad = lambda dtype: jax.jit(jax.value_and_grad(functools.partial(loss, gradient_dtype=dtype), argnums=(0, 1)))
  with jax.set_mesh(mesh):
    (value, (df, d_layer)), (want_value, (want_df, want_layer)) = grad('bfloat16')(f, out), grad('float32')(f, out)
    lowered = {dtype: grad(dtype).lower(f, out).as_text() for dtype in ('bfloat16', 'float32')}
  assert d_layer.dtype == jnp.float32 and d_layer.shape == out.shape
  assert float(value) == float(want_value)
  np.testing.assert_array_equal(np.asarray(df), np.asarray(want_df))
  rounded = np.asarray(want_layer.astype(jnp.bfloat16).astype(jnp.float32))
  np.testing.assert_allclose(np.asarray(d_layer), rounded, rtol=2.0**-8, atol=1e-30)
  assert np.mean(np.asarray(d_layer) == rounded) > 0.95  # one rounding, not several
  if kernel == 'xla' and not vocab_block and gradient_form == 'as_traced':
    written = lambda text, dtype: re.search(rf'dot_general.*-> tensor<{k + 1}x{vocab}x{dtype}>', text)
    assert written(lowered['bfloat16'], 'bf16') and not written(lowered['bfloat16'], 'f32')
    assert written(lowered['float32'], 'f32')
  if tuning:  # each chunk's matmul f^T dz (K padded to the swizzle; a chunk's 2 tiles of 128 columns) as asked
    padded_k = softmax_kernel_mosaic.mosaic_features(k, jnp.bfloat16)
    written = lambda text, dtype: re.search(rf'dot_general.*-> tensor<{padded_k}x256x{dtype}>', text)
    assert written(lowered['bfloat16'], 'bf16') and not written(lowered['bfloat16'], 'f32')
    assert written(lowered['float32'], 'f32') and not written(lowered['float32'], 'bf16')


@pytest.mark.parametrize('compute_dtype,vocab_block,recompute,form', [
    ('bfloat16', 0, False, None), ('bfloat16', 0, True, None), ('bfloat16', 24, False, None),
    ('bfloat16', 0, False, 'whole'), ('float32', 0, False, None), ('float32', 24, False, None)])
def test_every_layer_gradient_form_gives_the_same_numbers(compute_dtype, vocab_block, recompute, form):
  """token_nll(gradient_form=...) (train.output_layer_gradient_form) on XLA's paths (all at once, recomputed,
  streamed, with a whole cast layer; bfloat16 and float32 matmuls, K + 1 = 21 rows): the loss and both
  gradients bit-equal to 'as_traced''s; 'rows_padded' multiplies f with its rows padded to 24 (the product's
  extra rows dropped), 'dlogits_apart' puts the dlogits behind an optimisation barrier; control: 'as_traced'
  has neither. The padded forms' sums are the same terms, but a CPU without AVX-512 (XLA's Eigen kernels
  tile a product of 24 rows otherwise) adds them in another order: within a few float32 roundings there."""
  f, out, targets, mesh = random_output_layer_problem(seed=3, batch=40, k=20)  # no other product has 24 rows
  cast = None if form is None else out.astype(jnp.bfloat16)

  def loss(f, o, gradient_form):
    return jnp.sum(vocab_softmax.token_nll(f, o, targets, mesh=mesh, compute_dtype=compute_dtype,
                                           vocab_block=vocab_block, recompute=recompute, cast_layer=cast,
                                           gradient_form=gradient_form))
  grad = lambda gradient_form: jax.jit(jax.value_and_grad(functools.partial(loss, gradient_form=gradient_form),
                                                          argnums=(0, 1)))
  with jax.set_mesh(mesh):
    want = grad('as_traced')(f, out)
    lowered = {name: grad(name).lower(f, out).as_text() for name in vocab_softmax.GRADIENT_FORMS}
    for name in vocab_softmax.GRADIENT_FORMS:
      for got, expected in zip(jax.tree.leaves(grad(name)(f, out)), jax.tree.leaves(want)):
        if name.endswith('rows_padded'):
          np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6, err_msg=name)
        else:
          np.testing.assert_array_equal(np.asarray(got), np.asarray(expected), err_msg=name)
  padded_rows = lambda text: re.search(r'dot_general.*-> tensor<24x\d+x', text)
  barrier = lambda text: 'optimization_barrier' in text
  for name, text in lowered.items():
    assert bool(padded_rows(text)) == name.endswith('rows_padded'), name
    assert barrier(text) == name.startswith('dlogits_apart'), name


def test_the_layer_gradient_forms_are_the_configs_choices():
  """config's choices for train.output_layer_gradient_form (config imports no model code) are
  vocab_softmax.GRADIENT_FORMS; an unknown form given to token_nll is refused."""
  assert dict(config_lib._CHOICES)['train.output_layer_gradient_form'] == vocab_softmax.GRADIENT_FORMS
  f, out, targets, mesh = random_output_layer_problem(seed=3)
  with pytest.raises(ValueError, match='gradient_form'):
    vocab_softmax.token_nll(f, out, targets, mesh=mesh, gradient_form='padded')


def test_a_bfloat16_layer_gradient_is_refused_for_float32_matmuls():
  """A float32 matmul's gradient rounded to bfloat16 would save nothing: token_nll refuses it, and so does
  compile_steps, in one line naming the keys (train.output_layer_gradient_dtype, model.compute_dtype)."""
  mesh = jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  with pytest.raises(ValueError, match='bfloat16 matmuls, not float32'):
    vocab_softmax.token_nll(jnp.ones((4, 4)), jnp.ones((5, 8)), jnp.zeros((4,), jnp.int32), mesh=mesh,
                            gradient_dtype='bfloat16')
  from nplm_jax.training import steps  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match='add --config.model.compute_dtype=bfloat16'):
    steps.check_output_layer_gradient_dtype('bfloat16', 'float32')
  steps.check_output_layer_gradient_dtype('bfloat16', 'bfloat16')
  steps.check_output_layer_gradient_dtype('float32', 'float32')


def test_a_cast_layer_is_refused_for_float32_matmuls():
  mesh = jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  out = jnp.ones((5, 8), jnp.float32)
  with pytest.raises(ValueError, match='compute dtype other than float32'):
    vocab_softmax.token_nll(jnp.ones((4, 4)), out, jnp.zeros((4,), jnp.int32), mesh=mesh, cast_layer=out)


def layer_shaped_all_reduces(hlo_text: str, rows: int, columns: int) -> list[str]:
  """The compiled program's all-reduces of an f32[rows, columns] array (alone or in a tuple)."""
  return [line for line in hlo_text.splitlines() if 'all-reduce(' in line and f'f32[{rows},{columns}]' in line]


@pytest.mark.parametrize('compute_dtype,vocab_block,kernel', [('float32', 0, 'xla'), ('bfloat16', 0, 'xla'),
                                                               ('float32', 24, 'xla'), ('float32', 0, 'pallas')])
def test_a_one_device_data_axis_sums_no_layer_gradient(compute_dtype, vocab_block, kernel):
  """Where the mesh's 'data' axis has one device (the CPU's 1 x 2, one GPU), the output layer's gradient
  is not summed over it: XLA compiles a psum over one device as an all-reduce, a copy of the layer's
  gradient each step (15% of the research size's CPU step). Positive control: the same psum is kept
  as an all-reduce. The sum over a data axis of several devices: tests/parallel_checks.py."""
  batch, k, vocab = 32, 40, 96
  mesh = jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  f, out = jnp.ones((batch, k), jnp.float32), jnp.ones((k + 1, vocab), jnp.float32)
  targets = jnp.zeros((batch,), jnp.int32)
  loss = lambda f, o: jnp.sum(vocab_softmax.token_nll(jnp.tanh(f), o, targets, mesh=mesh, compute_dtype=compute_dtype,
                                                      vocab_block=vocab_block, kernel=kernel))
  with jax.set_mesh(mesh):
    hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(f, out).compile().as_text()
    assert not layer_shaped_all_reduces(hlo, k + 1, vocab), layer_shaped_all_reduces(hlo, k + 1, vocab)
    spec = jax.sharding.PartitionSpec
    summed = jax.shard_map(lambda x: jax.lax.psum(2 * x, 'data'), mesh=mesh, in_specs=spec('data', 'model'),
                           out_specs=spec(None, 'model'))
    control = jax.jit(summed).lower(out).compile().as_text()
  assert layer_shaped_all_reduces(control, k + 1, vocab)


def test_the_automatic_vocab_block_streams_only_large_shards():
  assert vocab_softmax.streamed_vocab_block(-1, 8_960) == 0  # Brown on 2 devices: all at once (faster)
  assert vocab_softmax.streamed_vocab_block(-1, 50_000) == AUTO_VOCAB_BLOCK
  assert vocab_softmax.streamed_vocab_block(0, 150_000) == 0 and vocab_softmax.streamed_vocab_block(512, 8_960) == 512


def test_accelerators_stream_the_vocabulary_only_for_memory():
  """On GPUs and TPUs all of a shard's columns at once (measured faster at every size), unless the
  [batch, columns] float32 logits would pass the accelerator's bound (backend_defaults)."""
  for platform in ('gpu', 'tpu'):
    assert vocab_softmax.streamed_vocab_block(-1, 300_032, batch=4096, platform=platform) == 0  # 4.9 GB of logits
    assert vocab_softmax.streamed_vocab_block(-1, 1_000_064, batch=4096, platform=platform) == (
        AUTO_VOCAB_BLOCK)  # 16 GB
    assert vocab_softmax.streamed_vocab_block(4096, 300_032, batch=4096, platform=platform) == 4096  # asked for
  assert vocab_softmax.streamed_vocab_block(-1, 50_000, batch=4096, platform='cpu') == AUTO_VOCAB_BLOCK


def test_the_automatic_compute_dtype_is_bfloat16_on_accelerators_only():
  assert [model_lib.compute_dtype('auto', p) for p in ('cpu', 'gpu', 'tpu')] == ['float32', 'bfloat16', 'bfloat16']
  assert model_lib.compute_dtype('float32', 'gpu') == 'float32' and model_lib.compute_dtype('bfloat16', 'cpu') == 'bfloat16'


def test_bfloat16_runs_the_hidden_layer_matmul_in_bfloat16():
  """The mixed-precision policy covers the hidden layer too: its matmul takes bfloat16 operands with
  float32 accumulation, and tanh stays float32."""
  model32 = model_lib.NPLM(vocab_size=50, window=3, embed_dim=8, hidden_dim=16, direct=False)
  model16 = model32.clone(compute_dtype='bfloat16')
  params = output_layer.init_params(model32, seed=1)
  contexts = np.arange(30, dtype=np.int32).reshape(10, 3)
  text = jax.jit(lambda p: model16.apply({'params': p}, contexts, method=model_lib.NPLM.features)).lower(
      params).as_text()
  assert re.search(r'dot_general.*bf16.*bf16.*-> tensor<10x16xf32>', text), text
  f32, f16 = (m.apply({'params': params}, contexts, method=model_lib.NPLM.features) for m in (model32, model16))
  assert f16.dtype == jnp.float32 and 1e-5 < float(jnp.max(jnp.abs(f16 - f32))) < 2e-2


def test_seed_draws_the_initialisation():
  model = model_lib.NPLM(vocab_size=11, window=2, embed_dim=3, hidden_dim=4, direct=True)
  default, zero, one = (output_layer.init_params(model), output_layer.init_params(model, seed=0),
                        output_layer.init_params(model, seed=1))
  np.testing.assert_array_equal(default['C'], zero['C'])  # seed 0 is the initialisation runs had before
  assert not np.allclose(zero['C'], one['C']) and not np.allclose(zero['H'], one['H'])


def test_bfloat16_keeps_the_bias_and_its_gradient_in_float32():
  """The output-layer matmuls run in bfloat16, the bias is added in float32: a bias near -10 lies
  between bfloat16 values 0.0625 apart, so a bfloat16 bias would not see a move of 0.02."""
  from jax.sharding import AxisType, Mesh  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import steps  # pylint: disable=g-import-not-at-top
  mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ('data', 'model'), axis_types=(AxisType.Auto,) * 2)
  model32 = model_lib.NPLM(vocab_size=50, window=2, embed_dim=8, hidden_dim=16, direct=True,
                           vocab_pad_multiple=8)
  model16 = model32.clone(compute_dtype='bfloat16')
  params = random_params(model32)
  params[output_layer.OUTPUT] = params[output_layer.OUTPUT].at[-1, :50].set(-10.0 + 0.3 * params[output_layer.OUTPUT][-1, :50])
  contexts = np.random.default_rng(3).integers(0, 50, size=(8, 2)).astype(np.int32)
  targets = np.arange(8, dtype=np.int32) * 5

  nll = lambda model, p: steps.token_nll(model, mesh, p, contexts, targets)
  moved = dict(params, output=params[output_layer.OUTPUT].at[-1, targets].add(0.02))
  with jax.set_mesh(mesh):
    shift = lambda model: np.asarray(jax.jit(lambda p, q: nll(model, q) - nll(model, p))(params, moved))
    float32_shift = shift(model32)
    assert np.all(float32_shift < -0.005)  # about -0.02: each example's normaliser moves a little too
    np.testing.assert_allclose(shift(model16), float32_shift, atol=1e-3)
    grad = lambda model: jax.jit(jax.grad(lambda p: jnp.sum(nll(model, p))))(params)[output_layer.OUTPUT][-1]
    g16, g32 = grad(model16), grad(model32)
  assert g16.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(g16), np.asarray(g32), atol=2e-2)


def test_dropout_only_while_training():
  model = model_lib.NPLM(vocab_size=11, window=2, embed_dim=50, hidden_dim=40, direct=True,
                         feature_dropout=0.5, hidden_dropout=0.25)
  params = output_layer.init_params(model)
  contexts = np.zeros((64, 2), np.int32)
  plain = model.apply({'params': params}, contexts, method=model_lib.NPLM.features)
  again = model.apply({'params': params}, contexts, True, method=model_lib.NPLM.features)
  np.testing.assert_array_equal(plain, again)  # evaluation: no dropout
  dropped = model.apply({'params': params}, contexts, False, method=model_lib.NPLM.features,
                        rngs={'dropout': jax.random.PRNGKey(1)})
  hidden, x = slice(0, 40), slice(40, None)  # f = [tanh(d + H x), x]
  plain_x, dropped_x = np.asarray(plain[:, x]), np.asarray(dropped[:, x])
  kept = dropped_x != 0
  assert 0.4 < kept.mean() < 0.6  # about half the features kept ...
  np.testing.assert_allclose(dropped_x[kept], 2 * plain_x[kept], rtol=1e-6)  # ... and scaled by 1/(1-p)
  assert 0.65 < (np.asarray(dropped[:, hidden]) != 0).mean() < 0.85


def test_weight_decay_spares_the_bias_row_and_d():
  from nplm_jax.training import optim  # pylint: disable=g-import-not-at-top
  model = model_lib.NPLM(vocab_size=10, window=2, embed_dim=3, hidden_dim=4, direct=True)
  params = random_params(model)
  zeros = jax.tree.map(jnp.zeros_like, params)
  updates, _ = optim.decay_weights_not_biases(0.1).update(zeros, optax_empty(), params)
  np.testing.assert_allclose(updates['C'], 0.1 * params['C'], rtol=1e-6)
  np.testing.assert_allclose(updates[output_layer.OUTPUT][:-1], 0.1 * params[output_layer.OUTPUT][:-1], rtol=1e-6)
  np.testing.assert_array_equal(updates[output_layer.OUTPUT][-1], 0)
  np.testing.assert_array_equal(updates['d'], 0)


def optax_empty():
  import optax  # pylint: disable=g-import-not-at-top
  return optax.EmptyState()


@pytest.mark.parametrize('clip_norm', [0.5, 100.0])
def test_gradient_clipping_scales_every_gradient_by_the_global_norm_before_the_decay(clip_norm):
  """optimizer.clip_norm: gradients of norm sqrt(18) scaled together to 0.5 (all parameters by one
  factor), the weight decay added after at full strength; a norm under the limit leaves them as
  they are. The optimiser's state is the same with and without clipping (a workdir's layout)."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import optim  # pylint: disable=g-import-not-at-top
  config = config_lib.base_config().optimizer
  config.update(name='paper_sgd', learning_rate=0.1, decay_rate=0.0, weight_decay=0.01, clip_norm=clip_norm)
  params = {'C': jnp.full((2, 3), 2.0), 'd': jnp.ones(3)}
  grads = {'C': jnp.ones((2, 3)), 'd': jnp.full(3, 2.0)}  # global norm sqrt(6 + 12)
  scale = min(1.0, clip_norm / np.sqrt(18.0))
  updates, _ = optim.make_optimizer(config, 4).update(grads, optim.make_optimizer(config, 4).init(params), params)
  step = 4 * 0.1  # the paper's per-example rate, a batch of 4
  np.testing.assert_allclose(updates['C'], -step * (scale * 1.0 + 0.01 * 2.0), rtol=1e-6)
  np.testing.assert_allclose(updates['d'], -step * scale * 2.0, rtol=1e-6)  # d is not decayed
  config.update(name='adamw', clip_norm=0.0)
  plain = jax.tree.structure(optim.make_optimizer(config, 4).init(params))
  config.clip_norm = clip_norm
  assert jax.tree.structure(optim.make_optimizer(config, 4).init(params)) == plain


@pytest.mark.unit
def test_cosine_decay_falls_from_the_rate_after_the_warm_up_to_zero_and_stays():
  """optimizer.cosine_decay_steps: Sun & Iyyer's schedule, to a given step or (-1) to the run's end; the
  optimiser's state keeps its layout (a constant-rate workdir resumes with the cosine), and configs
  without the key keep the constant rate."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import optim  # pylint: disable=g-import-not-at-top
  config = config_lib.base_config().optimizer
  config.update(name='adamw', learning_rate=1e-3, warmup_steps=10)
  rate = lambda step: optim.learning_rate_at(config, 4, step)
  assert [rate(s) for s in (0, 5, 10, 1000)] == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])
  params = {'C': jnp.ones((2, 3))}
  constant = jax.tree.structure(optim.make_optimizer(config, 4).init(params))
  config.cosine_decay_steps = 110
  expected = [0.0, 5e-4, 1e-3, 1e-3 * 0.5 * (1 + np.cos(np.pi * 25 / 100)), 5e-4, 0.0, 0.0]
  assert [rate(s) for s in (0, 5, 10, 35, 60, 110, 500)] == pytest.approx(expected, abs=1e-9)
  assert jax.tree.structure(optim.make_optimizer(config, 4).init(params)) == constant
  config.cosine_decay_steps = -1  # at the end of the run, whose length the caller gives
  assert optim.learning_rate_at(config, 4, 60, run_steps=110) == pytest.approx(5e-4)
  with pytest.raises(ValueError, match='needs run_steps'):
    optim.make_optimizer(config, 4)
  del config.cosine_decay_steps  # an older workdir's config
  assert rate(1000) == pytest.approx(1e-3)


def test_stochastic_rounding_to_bfloat16_is_exact_in_expectation():
  """optim.round_to_bfloat16_stochastically: 1/3 goes to one of its two bfloat16 neighbours, in
  proportion to nearness (mean within 1e-5 of 1/3, where rounding to nearest is 6.5e-4 off); numbers
  bfloat16 holds, signed zeros, infinities and NaN are cast as they are; the same key gives the same bits."""
  from nplm_jax.training import optim  # pylint: disable=g-import-not-at-top
  third = jnp.full((100_000,), 1 / 3, jnp.float32)
  rounded = np.asarray(optim.round_to_bfloat16_stochastically(jax.random.key(0), third).astype(jnp.float32))
  below, above = np.float32(0.33203125), np.float32(0.33398438)  # bfloat16's two numbers around 1/3
  assert set(np.unique(rounded)) == {below, above}
  assert abs(rounded.mean() - 1 / 3) < 1e-5 < abs(float(jnp.bfloat16(1 / 3)) - 1 / 3)
  np.testing.assert_array_equal(optim.round_to_bfloat16_stochastically(jax.random.key(0), third), rounded)
  special = jnp.array([np.inf, -np.inf, np.nan, 0.0, -0.0, -2.5, 3.0], jnp.float32)
  kept = np.asarray(optim.round_to_bfloat16_stochastically(jax.random.key(1), special).astype(jnp.float32))
  np.testing.assert_array_equal(kept, np.asarray(special))
  assert np.signbit(kept[4]) and not np.signbit(kept[3])


def test_a_bfloat16_second_moment_follows_float32_where_rounding_to_nearest_stalls():
  """optimizer.nu_dtype='bfloat16': AdamW's state keeps optax's layout with nu in bfloat16. Fed a gradient
  of 1 for 3,000 steps, float32's nu reaches 1 - 0.999**3000 = 0.9503; the stochastically rounded nu's
  mean is within 0.1% of it, where rounding to nearest stops at 0.25 (b2's 0.1% a step under half of
  bfloat16's step there). The steps it makes are float32's within 5% each and 0.1% on average, and the
  rounding repeats bit for bit for a seed (and differs for another)."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import optim  # pylint: disable=g-import-not-at-top
  config = config_lib.base_config().optimizer
  config.update(name='adamw', learning_rate=1e-3, weight_decay=0.0)
  params = {'w': jnp.zeros((4096,)), 'b': jnp.zeros((3, 5))}
  ones = jax.tree.map(jnp.ones_like, params)

  def run(nu_dtype, seed=0):
    config.nu_dtype = nu_dtype
    optimizer = optim.make_optimizer(config, 4, seed=seed)
    step = lambda _, carry: optimizer.update(ones, carry[1], params)
    return jax.jit(lambda: jax.lax.fori_loop(0, 3000, step, (ones, optimizer.init(params))))()

  exact_updates, exact = run('float32')
  updates, state = run('bfloat16')
  assert jax.tree.structure(state) == jax.tree.structure(exact)
  assert state[0].nu['w'].dtype == jnp.bfloat16 and state[0].mu['w'].dtype == jnp.float32
  expected = 1 - 0.999**3000
  np.testing.assert_allclose(exact[0].nu['w'], expected, rtol=1e-4)
  assert float(jnp.mean(state[0].nu['w'].astype(jnp.float32))) == pytest.approx(expected, rel=1e-3)
  np.testing.assert_allclose(updates['w'], exact_updates['w'], rtol=5e-2)  # sqrt(nu)'s noise: 0.7% (sd)
  assert float(jnp.mean(updates['w'])) == pytest.approx(float(jnp.mean(exact_updates['w'])), rel=1e-3)
  nearest = jnp.zeros((), jnp.bfloat16)
  for _ in range(3000):
    nearest = (0.999 * nearest.astype(jnp.float32) + 0.001).astype(jnp.bfloat16)
  assert float(nearest) == 0.25
  again = run('bfloat16')[1][0].nu['w']
  np.testing.assert_array_equal(again, state[0].nu['w'])
  assert not np.array_equal(run('bfloat16', seed=1)[1][0].nu['w'], state[0].nu['w'])


def test_the_older_separate_layout_stacks_into_the_output_layer():
  model = model_lib.NPLM(vocab_size=13, window=2, embed_dim=3, hidden_dim=4, direct=True, vocab_pad_multiple=8)
  params = random_params(model)
  old = separate(model, params)
  old['b'] = np.where(np.arange(16) < 13, old['b'], 0.0)  # the older layout kept zeros in padded columns
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  stacked = output_layer.stack_separate_output_layer(model, old, device)
  np.testing.assert_array_equal(stacked[output_layer.OUTPUT], params[output_layer.OUTPUT])
  mesh = jax.make_mesh((1, 1), ('data', 'model'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  spec = lambda k: jax.sharding.PartitionSpec(None, 'model') if k == output_layer.OUTPUT else jax.sharding.PartitionSpec()
  abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=jax.sharding.NamedSharding(mesh, spec(k)))
              for k, v in params.items()}
  target = output_layer.separate_output_layer_target(model, abstract)
  assert {k: v.shape for k, v in target.items() if k in 'UWb'} == {'U': (4, 16), 'W': (6, 16), 'b': (16,)}


def test_chunked_or_streamed_training_holds_a_block_of_logits():
  """With train.chunk_size the backward pass recomputes each chunk's logits: the step's temporary
  memory follows the chunk, not the batch; with train.vocab_block (automatic at this |V|) it
  follows [batch, vocab_block] (compiled memory analysis, 1 device)."""
  import jax  # pylint: disable=g-import-not-at-top
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import optim
  from nplm_jax.parallel import sharding
  from nplm_jax.training import steps  # pylint: disable=g-import-not-at-top
  config = config_lib.base_config()
  vocab, batch = 50_000, 4096
  model = model_lib.from_config(config.model, vocab)
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  temp = {}
  for chunk, vocab_block in ((0, 0), (128, 0), (0, -1)):
    compiled = steps.compile_steps(model, optim.make_optimizer(config.optimizer, batch), mesh, chunk_size=chunk,
                                   vocab_block=vocab_block)
    with jax.set_mesh(mesh):
      state = jax.eval_shape(compiled.init)
      contexts = jax.ShapeDtypeStruct((batch, model.context_size), jax.numpy.int32)
      targets = jax.ShapeDtypeStruct((batch,), jax.numpy.int32)
      temp[chunk, vocab_block] = compiled.lower_train(state, contexts, targets).compile().memory_analysis(
      ).temp_size_in_bytes
  logits_block = batch * vocab * 4
  assert temp[0, 0] >= logits_block  # all at once: the whole batch's logits are kept for the backward pass
  # chunked: one chunk's logits (128 x |V|) and the output layer's gradient, whatever the batch;
  # streamed: [4096, 4096] logits at a time and the gradient
  for key in ((128, 0), (0, -1)):
    assert temp[key] < temp[0, 0] / 3 and temp[key] < logits_block / 3, temp


@pytest.mark.parametrize('kind', ['bengio2003', 'revisited'])
@pytest.mark.parametrize('compute_dtype', ['float32', 'bfloat16'])
def test_the_one_hot_and_sorted_embedding_gradients_equal_the_scatter(kind, compute_dtype):
  """model.embedding_gradient='one_hot' (C's gradient as a matmul) and 'sorted' (sums along runs of sorted
  ids) give every gradient the scatter gives, contexts with a word repeated and words absent included,
  in both families, inside jit with the contexts a NumPy constant (the sorted form's backward indexed them
  with a tracer)."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.models import family  # pylint: disable=g-import-not-at-top
  config = config_lib.base_config()
  config.model.update(kind=kind, n=4, m=8, h=12, compute_dtype=compute_dtype)
  if kind == 'revisited':
    config.model.update(depth=2, distant_tokens=5, distant_kernels=2, tied=True)
  vocab = 23
  rng = np.random.default_rng(0)
  contexts = rng.integers(0, 4, size=(16, family.from_config(config.model, vocab).context_size))  # repeats
  targets = jnp.asarray(rng.integers(0, vocab, size=16))

  def gradients(embedding_gradient):
    config.model.embedding_gradient = embedding_gradient
    model = family.from_config(config.model, vocab)
    leaves, tree = jax.tree.flatten(output_layer.init_params(model))
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    params = jax.tree.unflatten(tree, [x + 0.3 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])
    loss = lambda p: -jnp.mean(jax.nn.log_softmax(model.apply({'params': p}, contexts))[jnp.arange(16), targets])
    return jax.jit(jax.grad(loss))(params)  # compiled: the NumPy contexts are constants inside a trace

  scatter = gradients('scatter')
  assert np.abs(np.asarray(scatter['C'])).sum() > 0
  for form in ('one_hot', 'sorted'):
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(scatter), jax.tree.leaves(gradients(form))):
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6, err_msg=f'{form} {path}')


def test_the_sorted_embedding_gradient_sums_every_run_of_a_word():
  """lookup.rows(..., 'sorted'): C's gradient summed along runs of sorted ids equals the scatter-add for
  thousands of ids over a small vocabulary (long runs), its first and last words and absent ones."""
  from nplm_jax.models import lookup  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(5)
  vocab, m = 50, 6
  table = jnp.asarray(rng.normal(size=(vocab, m)), jnp.float32)
  ids = jnp.asarray(np.concatenate([rng.integers(0, 40, size=(64, 38)), np.zeros((64, 1)), np.full((64, 1), vocab - 1)],
                                   axis=1), jnp.int32)  # words 40..48 never seen
  upstream = jnp.asarray(rng.normal(size=(64, 40, m)), jnp.float32)
  grad = lambda form: jax.jit(jax.grad(lambda t: jnp.sum(lookup.rows(t, ids, form) * upstream)))(table)
  scatter, by_runs = np.asarray(grad('scatter')), np.asarray(grad('sorted'))
  np.testing.assert_allclose(by_runs, scatter, rtol=1e-5, atol=1e-5)
  assert not by_runs[40:vocab - 1].any() and by_runs[vocab - 1].any()


@pytest.mark.parametrize('kernels', [1, 2, 4])
def test_the_distant_kernels_weighing_and_its_gradients_are_numpys(kernels):
  """lookup.weigh (matrix-vector products forward, the vectors' gradient elementwise) gives the kernels'
  weighted sums and both gradients of their NumPy products (float64). A float32 sum of n products, its
  inputs rounded to float32, is within (n + 2) eps times the sum of the products' magnitudes."""
  from nplm_jax.models import lookup  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(kernels)
  positions, batch, m = 7, 5, 8
  weights, vectors = rng.normal(size=(kernels, positions)), rng.normal(size=(positions, batch, m))
  upstream = rng.normal(size=(kernels, batch, m))
  sums, pullback = jax.vjp(lookup.weigh, jnp.asarray(weights, jnp.float32), jnp.asarray(vectors, jnp.float32))
  d_weights, d_vectors = pullback(jnp.asarray(upstream, jnp.float32))
  for got, spec, a, b, n in ((sums, 'kp,pbm->kbm', weights, vectors, positions),
                             (d_weights, 'kbm,pbm->kp', upstream, vectors, batch * m),
                             (d_vectors, 'kp,kbm->pbm', weights, upstream, kernels)):
    bound = (n + 2) * np.finfo(np.float32).eps * np.einsum(spec, np.abs(a), np.abs(b))
    assert np.all(np.abs(np.asarray(got, np.float64) - np.einsum(spec, a, b)) <= bound), spec


def _record_word_dropout(monkeypatch) -> list:
  """The outputs of every whole-vector dropout call (output_layer.word_dropout) while training: tracers under
  jit, for the traced function to return."""
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  outputs, original = [], nn.Dropout.__call__

  def recording(self, inputs, *args, **kwargs):
    out = original(self, inputs, *args, **kwargs)
    if tuple(self.broadcast_dims) == (-1,):
      outputs.append(out)
    return out
  monkeypatch.setattr(nn.Dropout, '__call__', recording)
  return outputs


@pytest.mark.parametrize('kind', ['bengio2003', 'revisited'])
def test_word_dropout_drops_whole_context_words(kind, monkeypatch):
  """model.word_dropout: training's logits equal the NumPy forward's on the same contexts with each dropped
  word replaced by a word whose vector is 0 and every kept vector scaled by 1 / (1 - p); in the revisited
  family the distant block's words are dropped too (before its kernels). Evaluation drops nothing."""
  from nplm_jax.models import revisited  # pylint: disable=g-import-not-at-top
  vocab, rate, rows = 37, 0.25, 64
  if kind == 'bengio2003':
    model = model_lib.NPLM(vocab_size=vocab, window=3, embed_dim=5, hidden_dim=12, direct=True,
                           vocab_pad_multiple=8, word_dropout=rate)
    params = random_params(model)
  else:
    model = revisited.RevisitedNPLM(vocab_size=vocab, window=3, embed_dim=8, hidden_dim=12, depth=1, distant_tokens=5,
                                    distant_kernels=2, vocab_pad_multiple=8, word_dropout=rate)
    params = output_layer.init_params(model)
    leaves, tree = jax.tree.flatten(params)  # away from the initial values, so that every part matters
    keys = jax.random.split(jax.random.PRNGKey(0), len(leaves))
    params = jax.tree.unflatten(tree, [x + 0.2 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])
  assert model.has_dropout
  contexts = np.random.default_rng(3).integers(0, vocab, size=(rows, model.context_size)).astype(np.int32)
  recorded = _record_word_dropout(monkeypatch)

  @jax.jit  # op by op, the revisited forward takes 20 s
  def training_logits(params, contexts):
    features = model.apply({'params': params}, contexts, False, method='features', rngs={'dropout': jax.random.PRNGKey(4)})
    return output_layer.dense_logits(features, model.output_layer(params)), list(recorded)

  logits, outputs = jax.device_get(training_logits(params, contexts))
  # the masks: the window's vectors [B, window, m], then (revisited) the distant block's [distant, B, m]
  dropped = np.concatenate([np.all(outputs[0] == 0, axis=-1)] + [np.all(o == 0, axis=-1).T for o in outputs[1:]], axis=1)
  assert dropped.shape == contexts.shape and 0.15 < dropped.mean() < 0.35
  kept = np.concatenate([o[..., 0][np.any(o != 0, axis=-1)] for o in outputs])
  assert np.all(kept != 0)  # a kept vector is kept whole
  C = np.asarray(params['C'], np.float64)
  reference_params = jax.device_get(params)
  reference_params['C'] = np.concatenate([C / (1 - rate), np.zeros((1, C.shape[1]))])  # word `vocab`: a zero vector
  replaced = np.where(dropped, vocab, contexts)
  if kind == 'bengio2003':
    expected = numpy_reference.logits(separate(model, reference_params), replaced)
  else:
    expected = numpy_reference.revisited_logits(reference_params, replaced, model.window, model.layer_norm)
  np.testing.assert_allclose(logits[:, :vocab], expected[:, :vocab], rtol=2e-5, atol=2e-5)
  evaluation = jax.jit(lambda p, c: model.apply({'params': p}, c, True, method='features'))(params, contexts)
  default = jax.jit(lambda p, c: model.apply({'params': p}, c, method='features'))(params, contexts)
  np.testing.assert_array_equal(np.asarray(evaluation), np.asarray(default))
