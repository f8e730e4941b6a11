"""Multi-device checks. Run only through tests/test_parallel.py, which starts pytest on this file in
a subprocess with 8 host CPU devices (XLA_FLAGS must be set before JAX starts)."""

import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh

from nplm_jax.training import evaluation
from nplm_jax.models import bengio2003 as model_lib
from nplm_jax.models import output_layer
from nplm_jax.training import optim
from nplm_jax.models import revisited
from nplm_jax.parallel import softmax_kernel
from nplm_jax.parallel import sharding
from nplm_jax.training import steps as steps_lib
from nplm_jax.training import train
from nplm_jax.parallel import vocab_softmax
from nplm_jax.config import base_config
from nplm_jax.errors import UserError
from tests import corpora
from tests.dense_reference import dense_token_nll

MESHES = [(1, 1), (8, 1), (1, 8), (2, 4), (4, 2)]
VOCAB, PAD, BATCH = 61, 8, 16  # |V| = 61 pads to 64: every model-axis size here gets padding


def mesh_of(shape) -> Mesh:
  devices = np.asarray(jax.devices()[:shape[0] * shape[1]]).reshape(shape)
  return Mesh(devices, ('data', 'model'), axis_types=(AxisType.Auto,) * 2)


def small_model(**kw):
  args = dict(vocab_size=VOCAB, window=3, embed_dim=6, hidden_dim=10, direct=True, vocab_pad_multiple=PAD)
  args.update(kw)
  return model_lib.NPLM(**args)


def random_params(model, seed=0):
  params = output_layer.init_params(model)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(params))
  out = {k: 0.3 * jax.random.normal(key, v.shape) for key, (k, v) in zip(keys, sorted(params.items()))}
  # the padded columns hold what init gives them (zero weights, PADDING_LOGIT bias), to check they keep it
  out[output_layer.OUTPUT] = out[output_layer.OUTPUT].at[:, model.vocab_size:].set(
      params[output_layer.OUTPUT][:, model.vocab_size:])
  return out


def batch(seed, size=BATCH):
  rng = np.random.default_rng(seed)
  return (rng.integers(0, VOCAB, size=(size, 3)).astype(np.int32), rng.integers(0, VOCAB, size=size).astype(np.int32))


def dense_loss(model, params, contexts, targets):
  return jnp.mean(dense_token_nll(model.apply({'params': params}, contexts), targets))


def rel_err(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def optimizer():
  config = base_config().optimizer
  config.learning_rate = 5e-3
  return optim.make_optimizer(config, BATCH)


@pytest.fixture(scope='module')
def dense_reference():
  """Loss, gradients and parameters over 3 steps of the plain single-device dense computation."""
  model, opt = small_model(), optimizer()
  params = random_params(model)
  opt_state = opt.init(params)
  losses, grads_first = [], None
  loss_and_grads = jax.jit(jax.value_and_grad(lambda p, contexts, targets: dense_loss(model, p, contexts, targets)))
  for step in range(3):
    loss, grads = loss_and_grads(params, *batch(step))
    grads_first = grads if grads_first is None else grads_first
    updates, opt_state = opt.update(grads, opt_state, params)
    params = jax.tree.map(lambda p, u: p + u, params, updates)
    losses.append(float(loss))
  return {'losses': losses, 'grads': grads_first, 'params': params}


# (mesh, chunk_size, vocab_block): vocab_block streams each shard's columns in sub-blocks, with a
# shorter last one (64 columns on (1,1): 24, 24, 16; 16 a shard on (2,4): 6, 6, 4; 8 on (1,8): 3, 3, 2).
CASES = [(s, 0, 0) for s in MESHES] + [((1, 1), 4, 0), ((2, 4), 8, 0), ((1, 1), 0, 24), ((2, 4), 8, 6), ((1, 8), 0, 3)]


@pytest.mark.parametrize('shape,chunk,vocab_block', CASES, ids=[f'mesh{s[0]}x{s[1]}-chunk{c}-vb{v}' for s, c, v in CASES])
def test_sharded_training_matches_dense(shape, chunk, vocab_block, dense_reference):
  model, mesh = small_model(), mesh_of(shape)
  compiled = steps_lib.compile_steps(model, optimizer(), mesh, chunk_size=chunk, vocab_block=vocab_block)
  params = jax.device_put(random_params(model), compiled.param_shardings)
  with jax.set_mesh(mesh):
    grad_fn = jax.jit(jax.grad(lambda p, c, t: jnp.mean(steps_lib.token_nll(model, mesh, p, c, t))),
                      out_shardings=compiled.param_shardings)
    grads = grad_fn(params, *(sharding.put_batch(mesh, x) for x in batch(0)))
    state = compiled.state_from_params(params)
    losses = []
    for step in range(3):
      state, metrics = compiled.train(state, *(sharding.put_batch(mesh, x) for x in batch(step)))
      losses.append(float(metrics['loss']))
  np.testing.assert_allclose(losses, dense_reference['losses'], rtol=1e-5)
  with jax.set_mesh(mesh):  # the (chunked) eval step gives the dense per-token NLL, in batch order
    contexts, targets = batch(9)
    nll = compiled.eval(state.params, sharding.put_batch(mesh, contexts), sharding.put_batch(mesh, targets))
  dense_nll = dense_token_nll(model.apply({'params': dense_reference['params']}, contexts), targets)
  np.testing.assert_allclose(np.asarray(nll), np.asarray(dense_nll), rtol=1e-4)
  for k, g in dense_reference['grads'].items():
    assert rel_err(grads[k], g) <= 1e-5, (k, rel_err(grads[k], g))
  for k, p in dense_reference['params'].items():
    assert rel_err(state.params[k], p) <= 1e-5, (k, rel_err(state.params[k], p))
    if k == output_layer.OUTPUT:  # padded columns got no gradient and kept their initial values
      np.testing.assert_array_equal(np.asarray(state.params[k])[:, VOCAB:],
                                    np.asarray(output_layer.init_params(model)[k])[:, VOCAB:])


@pytest.mark.parametrize('shape', [(1, 8), (2, 4)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
@pytest.mark.parametrize('vocab', [64, 61, 57])
def test_vocab_parallel_softmax_equals_dense(shape, vocab):
  model, mesh = small_model(vocab_size=vocab), mesh_of(shape)
  params = random_params(model, seed=3)
  contexts, targets = batch(7)
  targets = targets % vocab
  targets[:3] = [0, vocab - 1, vocab // 2]  # first, last and a middle shard own a target
  feats = model.apply({'params': params}, contexts, method=model_lib.NPLM.features)
  out = params[output_layer.OUTPUT]
  masked = lambda lg: jnp.where(jnp.arange(lg.shape[-1]) < vocab, lg, -jnp.inf)
  logits = masked(output_layer.dense_logits(feats, out))

  def sharded(f, o):
    return jnp.sum(vocab_softmax.token_nll(f, o, targets, mesh=mesh) * jnp.arange(1.0, BATCH + 1))

  def dense(f, o):
    return jnp.sum(dense_token_nll(masked(output_layer.dense_logits(f, o)), targets) *
                   jnp.arange(1.0, BATCH + 1))

  with jax.set_mesh(mesh):
    nll = jax.jit(lambda f, o: vocab_softmax.token_nll(f, o, targets, mesh=mesh))(feats, out)
    g_sharded = jax.jit(jax.grad(sharded, argnums=(0, 1)))(feats, out)
  np.testing.assert_allclose(np.asarray(nll), np.asarray(dense_token_nll(logits, targets)), rtol=1e-5)
  g_dense = jax.jit(jax.grad(dense, argnums=(0, 1)))(feats, out)
  for a, b in zip(jax.tree.leaves(g_sharded), jax.tree.leaves(g_dense)):
    assert rel_err(a, b) <= 1e-5
  np.testing.assert_array_equal(np.asarray(g_sharded[1])[:, vocab:], 0)  # no gradient reaches a padded column


def test_bfloat16_streamed_gradient_is_summed_over_data_in_float32():
  """On a mesh with data > 1 the streamed backward pass sums the output layer's gradient over 'data'
  in float32 before rounding it to bfloat16, as the all-at-once pass does: the two agree far below
  bfloat16's rounding (summed in bfloat16, the shards' partial gradients differed by ~1e-3)."""
  model, mesh = small_model(vocab_size=64), mesh_of((4, 2))
  params = random_params(model, seed=5)
  contexts, targets = batch(11, size=64)
  feats = model.apply({'params': params}, contexts, method=model_lib.NPLM.features)
  grads = {}
  for vocab_block in (0, 8):
    loss = lambda o, vb=vocab_block: jnp.sum(vocab_softmax.token_nll(feats, o, targets, mesh=mesh, compute_dtype='bfloat16',
                                                                     vocab_block=vb))
    with jax.set_mesh(mesh):
      grads[vocab_block] = jax.jit(jax.grad(loss))(params[output_layer.OUTPUT])
  assert rel_err(grads[8], grads[0]) < 3e-4, rel_err(grads[8], grads[0])


@pytest.mark.parametrize('shape,form,vocab_block', [((2, 4), 'whole', 0), ((4, 2), 'whole', 8), ((2, 4), 'rows', 8),
                                                    ((4, 2), 'rows', 0)])
def test_a_carried_cast_layer_gives_the_loss_and_gradients_of_the_casts_on_meshes(shape, form, vocab_block):
  """token_nll(cast_layer=...): the output layer (whole, or its weight rows) in bfloat16, as a training loop
  carries it (train.carry_cast_layer), split over 'model' as the layer is: the loss and gradients of the
  shards casting their block of the layer's rows themselves."""
  model, mesh = small_model(vocab_size=64), mesh_of(shape)
  params = random_params(model, seed=6)
  contexts, targets = batch(12, size=64)
  feats = model.apply({'params': params}, contexts, method=model_lib.NPLM.features)
  out = params[output_layer.OUTPUT]

  def loss(f, o, cast):
    return jnp.sum(vocab_softmax.token_nll(f, o, targets, mesh=mesh, compute_dtype='bfloat16', vocab_block=vocab_block,
                                           cast_layer=cast))
  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
  with jax.set_mesh(mesh):
    cast = jax.device_put((out if form == 'whole' else out[:-1]).astype(jnp.bfloat16),
                          jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, 'model')))
    got, want = grad(feats, out, cast), grad(feats, out, None)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert a.shape == b.shape
    assert rel_err(a, b) <= 1e-6, rel_err(a, b)


@pytest.mark.parametrize('shape,vocab_block', [((4, 2), 0), ((2, 4), 8)])
def test_a_bfloat16_layer_gradient_on_meshes_is_the_float32_one_rounded(shape, vocab_block):
  """token_nll(gradient_dtype='bfloat16') (train.output_layer_gradient_dtype) split over 'model' and summed
  over 'data' in bfloat16: within a few bfloat16 roundings of the float32 gradient (each shard's part rounded,
  then their sum), the loss and the features' gradient unchanged."""
  model, mesh = small_model(vocab_size=64), mesh_of(shape)
  params = random_params(model, seed=7)
  contexts, targets = batch(13, size=64)
  feats = model.apply({'params': params}, contexts, method=model_lib.NPLM.features)

  def loss(f, o, gradient_dtype):
    return jnp.sum(vocab_softmax.token_nll(f, o, targets, mesh=mesh, compute_dtype='bfloat16', vocab_block=vocab_block,
                                           gradient_dtype=gradient_dtype))
  with jax.set_mesh(mesh):
    got, want = (jax.jit(jax.value_and_grad(functools.partial(loss, gradient_dtype=dtype), argnums=(0, 1)))(
        feats, params[output_layer.OUTPUT]) for dtype in ('bfloat16', 'float32'))
  (value, (df, d_layer)), (want_value, (want_df, want_layer)) = got, want
  assert d_layer.dtype == jnp.float32 and float(value) == float(want_value)
  assert rel_err(df, want_df) <= 1e-6, rel_err(df, want_df)
  assert 1e-4 < rel_err(d_layer, want_layer) <= 8e-3, rel_err(d_layer, want_layer)


def test_checksums_do_not_depend_on_the_mesh():
  """A checkpoint's checksums (nplm_jax.training.integrity) are the same whatever mesh holds the arrays."""
  from nplm_jax.training import integrity  # pylint: disable=g-import-not-at-top
  params = random_params(small_model(vocab_size=64), seed=2)
  found = set()
  for shape in MESHES:
    mesh = mesh_of(shape)
    placed = jax.device_put(params, sharding.named_shardings(
        mesh, output_layer.logical_specs(small_model(vocab_size=64)), {'vocab': 'model'}))
    found.add(tuple(sorted(integrity.checksums(placed).items())))
  assert len(found) == 1


def all_gather_shapes(hlo_text: str) -> list[list[int]]:
  """Result shapes of every all-gather in an HLO module's text."""
  shapes = []
  for line in hlo_text.splitlines():
    m = re.search(r'=\s*\(?\s*[a-z0-9]+\[([0-9,]*)\][^=]*?\ball-gather(-start)?\(', line)
    if m:
      shapes.append([int(d) for d in m.group(1).split(',') if d])
  return shapes


def test_train_step_never_gathers_the_vocabulary():
  vocab, mesh = 997, mesh_of((2, 4))  # pads to 1000: a size no other dimension has
  model = small_model(vocab_size=vocab)
  compiled = steps_lib.compile_steps(model, optimizer(), mesh)
  contexts, targets = batch(0)
  with jax.set_mesh(mesh):
    state = compiled.init()
    hlo = compiled.lower_train(state, sharding.put_batch(mesh, contexts), sharding.put_batch(mesh, targets % vocab)
                               ).compile().as_text()
    assert 'all-reduce' in hlo  # the pmax/psum of the softmax are there
    assert not [s for s in all_gather_shapes(hlo) if {vocab, 1000} & set(s)], all_gather_shapes(hlo)
    # the detector does find a gather of the full logits when one is asked for
    gather = jax.jit(lambda p, c: model.apply({'params': p}, c), out_shardings=sharding.replicated(mesh))
    gathered = gather.lower(state.params, sharding.put_batch(mesh, contexts)).compile().as_text()
  assert [s for s in all_gather_shapes(gathered) if 1000 in s]


def test_output_layer_bytes_split_over_the_model_axis():
  mesh = mesh_of((2, 4))
  model = small_model(vocab_size=997)
  compiled = steps_lib.compile_steps(model, optimizer(), mesh)
  with jax.set_mesh(mesh):
    state = compiled.init()
  for name in (output_layer.OUTPUT,):
    array = state.params[name]
    per_device = {}
    for shard in array.addressable_shards:
      per_device[shard.device] = per_device.get(shard.device, 0) + shard.data.nbytes
    assert len(per_device) == 8
    assert set(per_device.values()) == {array.nbytes // 4}, (name, per_device)  # 1000 / 4 columns each
  assert state.params['C'].addressable_shards[0].data.nbytes == state.params['C'].nbytes  # replicated


def test_bad_mesh_and_batch_shapes_are_one_line_errors():
  with pytest.raises(UserError, match=r'does not fit 8 devices'):
    sharding.make_mesh(_mesh(3, -1))
  with pytest.raises(UserError, match='train.batch_size=12 is not divisible by mesh.data=8'):
    sharding.check_divisibility(mesh_of((8, 1)), 12, 64, 64)
  with pytest.raises(UserError, match='vocab_pad_multiple'):
    sharding.check_divisibility(mesh_of((1, 8)), 16, 64, 60)
  assert dict(sharding.make_mesh(_mesh(-1, 2)).shape) == {'data': 4, 'model': 2}


def _mesh(data, model):
  config = base_config().mesh
  config.data, config.model = data, model
  return config


def test_checkpoint_moves_between_meshes(tmp_path):
  files = corpora.write_markov_corpus(str(tmp_path))
  config = corpora.tiny_config(files, max_steps=30, eval_every=30)
  config.mesh.data, config.mesh.model = 2, 4
  workdir = str(tmp_path / 'run')
  results = train.train_and_evaluate(config, workdir)
  ppl = {}
  for shape in [(1, 1), (8, 1), (2, 4), (4, 2)]:
    nll = evaluation.evaluate_workdir(workdir, splits=('valid',), mesh=shape, devices=jax.devices()[:shape[0] * shape[1]])
    ppl[shape] = evaluation.perplexity(nll['valid'])
  for shape, value in ppl.items():
    assert abs(value - results['valid_ppl']) <= 1e-6 * results['valid_ppl'], (shape, value, results['valid_ppl'])


def reference_sampled_loss(kind, logits, targets, samples, log_q):
  """The sampled losses from their definitions, written apart from vocab_softmax: with k samples
  from q, each logit is corrected by -log(k q(w)); the sampled softmax drops samples equal to the
  target (accidental hits), NCE sums softplus terms."""
  k = samples.shape[0]
  corrected_target = jnp.take_along_axis(logits, targets[:, None], axis=1)[:, 0] - (jnp.log(k) + log_q[targets])
  corrected_samples = logits[:, samples] - (jnp.log(k) + log_q[samples])[None, :]
  if kind == 'nce':
    return (jnp.log1p(jnp.exp(-corrected_target)) + jnp.sum(jnp.log1p(jnp.exp(corrected_samples)), axis=1))
  hit = samples[None, :] == targets[:, None]
  exp_samples = jnp.where(hit, 0.0, jnp.exp(corrected_samples))
  return jnp.log(jnp.exp(corrected_target) + jnp.sum(exp_samples, axis=1)) - corrected_target


@pytest.mark.parametrize('shape', [(1, 1), (1, 8), (2, 4)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
@pytest.mark.parametrize('kind', ['sampled_softmax', 'nce'])
def test_sampled_losses_match_dense(shape, kind):
  model, mesh = small_model(), mesh_of(shape)
  params = random_params(model, seed=5)
  contexts, targets = batch(11)
  samples = jnp.asarray(np.random.default_rng(2).integers(0, VOCAB, size=9).astype(np.int32))
  samples = samples.at[0].set(targets[0])  # an accidental hit
  q = np.random.default_rng(4).uniform(0.1, 10.0, size=VOCAB)  # far from uniform: the correction matters
  log_q = jnp.log(jnp.asarray(q / q.sum(), jnp.float32))
  feats = model.apply({'params': params}, contexts, method=model_lib.NPLM.features)
  out = params[output_layer.OUTPUT]

  def sharded(f, o):
    return jnp.mean(vocab_softmax.sampled_token_loss(f, o, targets, samples, log_q, mesh=mesh, kind=kind))

  def dense(f, o):
    return jnp.mean(reference_sampled_loss(kind, output_layer.dense_logits(f, o), targets, samples, log_q))

  with jax.set_mesh(mesh):
    value, grads = jax.jit(jax.value_and_grad(sharded, argnums=(0, 1)))(feats, out)
  ref_value, ref_grads = jax.jit(jax.value_and_grad(dense, argnums=(0, 1)))(feats, out)
  np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-5)
  for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
    assert rel_err(a, b) <= 1e-5


@pytest.mark.parametrize('shape', [(1, 8), (2, 4), (8, 1)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
def test_the_sampled_columns_update_on_meshes_takes_the_dense_update_s_steps(shape):
  """Each shard of the vocabulary gathers and adds the sampled columns it owns (vocab_softmax.gather_columns,
  add_to_columns), a batch split on 'data' gives one gradient of them: the dense update's steps on the same
  mesh, within the rounding of the two orders (tests/test_steps.py's bound)."""
  from tests import test_steps  # pylint: disable=g-import-not-at-top
  mesh = mesh_of(shape)
  dense, columns = test_steps.sampled_steps('nce', False, mesh), test_steps.sampled_steps('nce', True, mesh)
  for name in dense:
    np.testing.assert_allclose(columns[name], dense[name], rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize('shape', [(1, 8), (2, 4)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
def test_the_deferred_weight_decay_on_meshes_takes_the_steps_one_a_call(shape):
  """A dispatch's deferred weight decay (steps.DeferredDecay) scales the output layer split by vocabulary and
  the replicated C alike: the steps run one a call on the same mesh (tests/test_steps.py's bound)."""
  from tests import test_steps  # pylint: disable=g-import-not-at-top
  mesh = mesh_of(shape)
  one, six = test_steps.deferred_dispatch(1, 0.3, mesh=mesh), test_steps.deferred_dispatch(6, 0.3, mesh=mesh)
  for name in one:
    np.testing.assert_allclose(six[name], one[name], rtol=1e-5, atol=1e-5, err_msg=name)


# ------------------------------------------------------------------- hidden layers split on 'model'

def small_revisited(**kw):
  args = dict(vocab_size=VOCAB, window=3, embed_dim=8, hidden_dim=16, depth=2, distant_tokens=16,
              distant_kernels=2, tied=False, vocab_pad_multiple=PAD, hidden_dropout=0.1)
  args.update(kw)
  return revisited.RevisitedNPLM(**args)


def adamw(moment_dtype='float32'):
  config = base_config().optimizer
  config.update(name='adamw', learning_rate=1e-2, weight_decay=0.01, mu_dtype=moment_dtype, nu_dtype=moment_dtype)
  return optim.make_optimizer(config, BATCH)


def train_three_steps(model, shape, axis_rules=None, softmax_kernel='xla', ema_decay=0.0, keep_state=None,
                      moment_dtype='float32', keep_hlo=None):
  """Per-step losses and the parameters after three AdamW steps (dropout on) on a mesh, its moments in
  `moment_dtype`. keep_state: a list the final train state is appended to; keep_hlo: one the step's
  compiled program (per device, as text) is appended to, the one it trained with (no compile more)."""
  mesh = mesh_of(shape)
  compiled = steps_lib.compile_steps(model, adamw(moment_dtype), mesh, axis_rules=axis_rules,
                                     softmax_kernel=softmax_kernel, ema_decay=ema_decay)
  rng = np.random.default_rng(4)
  losses = []
  with jax.set_mesh(mesh):
    state = compiled.init()
    for _ in range(3):
      contexts = rng.integers(0, VOCAB, size=(BATCH, model.context_size)).astype(np.int32)
      targets = rng.integers(0, VOCAB, size=BATCH).astype(np.int32)
      state, metrics = compiled.train(state, sharding.put_batch(mesh, contexts), sharding.put_batch(mesh, targets))
      losses.append(float(metrics['loss']))
    if keep_hlo is not None:
      keep_hlo.append(compiled.lower_train(state, sharding.put_batch(mesh, contexts),
                                           sharding.put_batch(mesh, targets)).compile().as_text())
  if keep_state is not None:
    keep_state.append(state)
  return losses, jax.device_get(state.params), compiled.param_shardings


HIDDEN_SPLIT = {'vocab': 'model', 'hidden': 'model'}


def hidden_split_model(family: str):
  return {'revisited': small_revisited(), 'revisited_tied': small_revisited(tied=True),
          'bengio2003': small_model(hidden_dim=16)}[family]


@functools.cache
def one_device_reference(model):
  """train_three_steps of a model on one device: the reference every mesh shape is checked against (made
  once per model: a module is a hashable dataclass, and each compile on these meshes takes seconds)."""
  return train_three_steps(model, (1, 1), {'vocab': 'model'})[:2]


def assert_trains_as_one_device(training, reference_training):
  """The (losses, params) of train_three_steps equal the one-device run's (float rounding)."""
  (losses, params), (reference_losses, reference) = training, reference_training
  np.testing.assert_allclose(losses, reference_losses, rtol=1e-5)
  reference_flat = dict(jax.tree_util.tree_flatten_with_path(reference)[0])
  for path, value in jax.tree_util.tree_flatten_with_path(params)[0]:
    assert rel_err(value, reference_flat[path]) <= 1e-5, (jax.tree_util.keystr(path), rel_err(value, reference_flat[path]))


@functools.cache
def hidden_split_training(family: str, shape):
  """train_three_steps of hidden_split_model(family) on `shape` with the hidden layers split, and the compiled
  step it trained with (as text): the distant block's check reads that step's gathers as its control."""
  hlo = []
  return (*train_three_steps(hidden_split_model(family), shape, HIDDEN_SPLIT, keep_hlo=hlo), hlo[0])


@pytest.mark.parametrize('family', ['revisited', 'revisited_tied', 'bengio2003'])
@pytest.mark.parametrize('shape', [(2, 4), (1, 8)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
def test_hidden_layers_split_on_model_match_one_device(family, shape):
  """With mesh.axis_rules.hidden='model' the hidden layers' inner width is split over 'model' (each
  device holds 1/model of every hidden kernel), and training gives what one device gives."""
  losses, params, param_sh, _ = hidden_split_training(family, shape)
  assert_trains_as_one_device((losses, params), one_device_reference(hidden_split_model(family)))
  hidden_kernel = param_sh['block_0']['in_kernel'] if family != 'bengio2003' else param_sh['H']
  assert hidden_kernel.spec == jax.sharding.PartitionSpec(None, 'model')
  assert hidden_kernel.shard_shape((40, 16)) == (40, 16 // shape[1])


@pytest.mark.parametrize('shape', [(8, 1), (2, 4)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
def test_the_sorted_embedding_gradient_trains_on_meshes_as_the_scatter(shape):
  """model.embedding_gradient='sorted' (a sort of the batch's words, sums along runs) on a data- and
  model-split mesh trains as the scatter does on one device: the sort sees the whole batch's words."""
  reference = one_device_reference(small_revisited(tied=True))
  training = train_three_steps(small_revisited(tied=True, embedding_gradient='sorted'), shape, HIDDEN_SPLIT)[:2]
  assert_trains_as_one_device(training, reference)


def test_the_moving_average_and_bfloat16_moments_are_split_as_the_parameters_and_train_as_one_device():
  """optimizer.ema_decay with optimizer.mu_dtype / nu_dtype='bfloat16' on a 2x4 mesh with the hidden layers
  and the vocabulary split: each array of the average and each moment has its parameter's sharding, and
  training (the second moment's stochastic rounding included: its random bits do not depend on the mesh)
  and the average are what one device's are. (One run for both options: each compile takes seconds.)"""
  reference, states = [], []
  options = {'ema_decay': 0.5, 'moment_dtype': 'bfloat16'}
  reference_training = train_three_steps(small_revisited(tied=True), (1, 1), {'vocab': 'model'}, keep_state=reference,
                                         **options)[:2]
  training = train_three_steps(small_revisited(tied=True), (2, 4), HIDDEN_SPLIT, keep_state=states, **options)[:2]
  (state,), (reference_state,) = states, reference
  assert_trains_as_one_device(training, reference_training)
  jax.tree.map(assert_same_sharding, state.average, state.params)
  assert sum(not a.sharding.is_fully_replicated for a in jax.tree.leaves(state.average)) >= 3  # output, hidden
  assert_trains_as_one_device(([0.0], jax.device_get(state.average)), ([0.0], jax.device_get(reference_state.average)))
  adam = state.opt_state[0]
  for moments in (adam.mu, adam.nu):
    assert {a.dtype for a in jax.tree.leaves(moments)} == {jnp.dtype(jnp.bfloat16)}
    jax.tree.map(assert_same_sharding, moments, state.params)
  assert_trains_as_one_device(([0.0], jax.device_get(adam.nu)), ([0.0], jax.device_get(reference_state.opt_state[0].nu)))


def assert_same_sharding(a, b):
  assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (a.sharding, b.sharding)


DISTANT_SPLIT = {**HIDDEN_SPLIT, 'distant': 'model'}


@pytest.mark.parametrize('form', ['counts', 'one_hot'])
@pytest.mark.parametrize('shape', [(8, 1), (2, 4)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
def test_the_distant_gradient_by_counts_trains_on_meshes_as_the_rows(shape, form):
  """model.distant_gradient='counts' (C's share from the distant block as a matmul with the kernels'
  weights per word) and 'one_hot' (those weights from a one-hot block, the sums as their matmul with C) on
  a data-split mesh, and with the distant block split over 'model', train as the rows' scatter does on one
  device."""
  reference = one_device_reference(small_revisited(tied=True))
  training = train_three_steps(small_revisited(tied=True, distant_gradient=form), shape, DISTANT_SPLIT)[:2]
  assert_trains_as_one_device(training, reference)


def train_step_hlo(model, mesh, axis_rules) -> str:
  """The compiled AdamW training step of `model` on `mesh` (its per-device program, as text), compiled
  without training (train_three_steps' keep_hlo gives a trained step's)."""
  compiled = steps_lib.compile_steps(model, adamw(), mesh, axis_rules=axis_rules)
  contexts = np.zeros((BATCH, model.context_size), np.int32)
  with jax.set_mesh(mesh):
    state = compiled.init()
    return compiled.lower_train(state, sharding.put_batch(mesh, contexts),
                                sharding.put_batch(mesh, contexts[:, 0])).compile().as_text()


def rows_gathered(hlo: str) -> set[int]:
  """How many rows of C each gather of the compiled program fetches (per device): the product of its
  result's dimensions but the last (XLA's CPU emitters write it [rows, 1, m], its older ones [positions,
  examples, m])."""
  return {math.prod(int(d) for d in dims.split(',')[:-1])
          for dims in re.findall(r'= f32\[([\d,]+)\]\S* gather\(', hlo)}


def whole_distant_block_gathers(shape) -> set[int]:
  """rows_gathered of the step with the distant block whole on each device (mesh.axis_rules.distant unset,
  the hidden layers split): the control of the split's check (tying does not change the block's gather)."""
  return rows_gathered(hidden_split_training('revisited', shape)[3])


@pytest.mark.parametrize('tied', [False, True], ids=['untied', 'tied'])
@pytest.mark.parametrize('shape', [(2, 4), (1, 8)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
def test_distant_block_split_on_model_matches_one_device(shape, tied):
  """With mesh.axis_rules.distant='model' the kernels are split by distant position over 'model': each
  device gathers and weighs its share of the distant block (its gather fetches 1/model of the rows)
  and XLA sums the partial summaries. Training gives what one device gives."""
  model, split_hlo = small_revisited(tied=tied), []
  losses, params, param_sh = train_three_steps(model, shape, DISTANT_SPLIT, keep_hlo=split_hlo)
  assert_trains_as_one_device((losses, params), one_device_reference(model))
  assert param_sh['distant_kernels'].spec == jax.sharding.PartitionSpec(None, 'model')
  gathers = {'split': rows_gathered(split_hlo[0]), 'whole': whole_distant_block_gathers(shape)}
  # whole: the 16 distant words of each of the device's examples; split: 16 / model of them
  examples = BATCH // shape[0]
  assert 16 * examples in gathers['whole'] and 16 // shape[1] * examples not in gathers['whole'], gathers
  assert 16 * examples not in gathers['split'] and 16 // shape[1] * examples in gathers['split'], gathers


def test_tied_output_layer_is_padded_without_an_exchange_between_devices():
  """Tied, the output layer is C's transpose padded to the padded vocabulary and split over 'model'.
  C is whole on every device, so each pads it there and keeps its columns: the layer makes no
  collective-permute in the step (XLA's halo exchange for a pad of the split array, forward and
  backward, which it made every step before on mesh 1x2, the CPU default)."""
  mesh = mesh_of((1, 2))
  hlo = train_step_hlo(small_revisited(tied=True), mesh, DISTANT_SPLIT)
  with jax.set_mesh(mesh):  # the detector finds the exchange where the split array is padded
    split_pad = jax.jit(lambda c: jnp.pad(c.T, ((0, 0), (0, 3))),
                        out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, 'model')))
    control = split_pad.lower(jnp.ones((VOCAB, 8))).compile().as_text()
  exchanges = lambda text: [line for line in text.splitlines() if 'collective-permute(' in line]
  assert [line for line in exchanges(control) if '/pad' in line]
  assert not [line for line in exchanges(hlo) if 'output_layer' in line], exchanges(hlo)


def test_a_hidden_width_that_does_not_split_is_a_one_line_error():
  with pytest.raises(UserError) as e:
    steps_lib.compile_steps(small_model(hidden_dim=10), adamw(), mesh_of((2, 4)), axis_rules=HIDDEN_SPLIT)
  assert '\n' not in str(e.value) and "mesh.axis_rules.hidden='model'" in str(e.value) and 'H' in str(e.value)


# ------------------------------------------------------------------ the fused Pallas softmax kernel

# (mesh, kernel, dtype): the Mosaic GPU form on one device only (its interpreter simulates one GPU: kernels on
# several CPU devices at once collide in its state); its cross-shard combine is the other forms'
KERNEL_CASES = [(shape, kernel, dtype) for shape in ((1, 1), (2, 4), (1, 8))
                for kernel in ('pallas', 'pallas_loop', 'pallas_loop_dz') for dtype in ('float32', 'bfloat16')]
KERNEL_CASES += [((1, 1), 'pallas_mosaic', 'bfloat16'), ((1, 1), 'pallas_mosaic', 'float32')]  # float32: TF32 on a GPU
# dz in chunks of the vocabulary (LoopTuning.dz_axis, after ':'): each shard's chunks, targets of other shards
KERNEL_CASES += [((2, 4), 'pallas_loop_dz:dz_axis=vocab,dz_chunks=3,block_b=16,block_v=16', 'float32'),
                 ((1, 1), 'pallas_mosaic:dz_axis=vocab,dz_chunks=3,block_v=64', 'bfloat16'),
                 ((1, 1), 'pallas_mosaic:dz_axis=vocab,dz_chunks=3,block_v=32', 'float32')]


@pytest.mark.parametrize('shape,kernel,dtype', KERNEL_CASES,
                         ids=lambda x: f'mesh{x[0]}x{x[1]}' if isinstance(x, tuple) else str(x))
def test_pallas_softmax_kernel_equals_dense(shape, dtype, kernel, monkeypatch):
  """Values and every gradient of the kernel path (interpret mode) against the dense log-softmax: |V| =
  197 padded to 200, tiles of 16 columns, so every shard ends in a short tile (200 = 12 x 16 + 8; 50 =
  3 x 16 + 2; 25 = 16 + 9) and holds padded columns or none; 24 rows in tiles of 16 (a short row tile).
  float32 within 1e-5; bfloat16 (its matmul operands rounded) equal to the XLA bfloat16 path within 1e-4
  and to float32 within 2e-2. A kernel named 'NAME:SETTINGS' runs with train.softmax_kernel_tuning's SETTINGS."""
  kernel, _, tuning = kernel.partition(':')
  monkeypatch.setattr(softmax_kernel, 'BLOCK_V', 16)
  monkeypatch.setattr(softmax_kernel, 'BLOCK_B', 16)
  vocab, mesh = 197, mesh_of(shape)
  model = small_model(vocab_size=vocab)
  params = random_params(model, seed=6)
  contexts, targets = batch(12, size=24)
  targets = targets % vocab
  targets[:3] = [0, vocab - 1, 100]
  feats = model.apply({'params': params}, contexts, method=model_lib.NPLM.features)

  def loss(f, out, kernel, compute_dtype):
    nll = vocab_softmax.token_nll(f, out, targets, mesh=mesh, compute_dtype=compute_dtype, kernel=kernel,
                                  kernel_tuning=tuning if kernel != 'xla' else '')
    return jnp.sum(nll * jnp.linspace(0.5, 1.5, len(targets))), nll  # unequal weights: g differs per row

  def dense(f, out):
    nll = dense_token_nll(output_layer.dense_logits(f, out)[:, :vocab], targets)
    return jnp.sum(nll * jnp.linspace(0.5, 1.5, len(targets))), nll

  with jax.set_mesh(mesh):
    grad = lambda fn, *a: jax.jit(jax.grad(fn, argnums=(0, 1), has_aux=True), static_argnums=(2, 3))(*a)
    (df, dout), nll = grad(loss, feats, params[output_layer.OUTPUT], kernel, dtype)
    (ref_df, ref_dout), ref_nll = jax.jit(jax.grad(dense, argnums=(0, 1), has_aux=True))(feats, params[output_layer.OUTPUT])
    if dtype == 'bfloat16':
      (xla_df, xla_dout), xla_nll = grad(loss, feats, params[output_layer.OUTPUT], 'xla', dtype)
  bound = 1e-5 if dtype == 'float32' else 2e-2
  assert rel_err(nll, ref_nll) <= bound and rel_err(df, ref_df) <= bound and rel_err(dout, ref_dout) <= bound, (
      rel_err(nll, ref_nll), rel_err(df, ref_df), rel_err(dout, ref_dout))
  np.testing.assert_array_equal(np.asarray(dout)[:, vocab:], 0.0)  # padded columns get no gradient
  if dtype == 'bfloat16':
    assert max(rel_err(nll, xla_nll), rel_err(df, xla_df), rel_err(dout, xla_dout)) <= 1e-4


@pytest.mark.parametrize('shape', [(2, 4), (1, 8)], ids=lambda s: f'mesh{s[0]}x{s[1]}')
def test_pallas_kernel_trains_as_the_xla_path(shape, monkeypatch):
  """Three AdamW steps of the revisited model (dropout on) with softmax_kernel='pallas' on the mesh give what
  'xla' gives on one device (as 'xla' on the meshes does: the checks above)."""
  monkeypatch.setattr(softmax_kernel, 'BLOCK_V', 16)
  model = small_revisited()
  assert_trains_as_one_device(train_three_steps(model, shape, softmax_kernel='pallas')[:2], one_device_reference(model))
