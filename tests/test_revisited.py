"""The revisited feed-forward family (nplm_jax/models/revisited.py): its forward pass against NumPy, its
parameters, placement and configuration, and every tool on a tiny trained revisited workdir."""

import functools
import json
import math
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplm_jax import config as config_lib
from nplm_jax.training import evaluation
from nplm_jax.training import memory
from nplm_jax.models import bengio2003 as model_lib
from nplm_jax.models import lookup
from nplm_jax.models import output_layer
from nplm_jax.models import family as model_family
from nplm_jax.training import optim
from nplm_jax.models import revisited
from nplm_jax.tools import score as score_lib
from nplm_jax.parallel import sharding
from nplm_jax.tools import trained as trained_lib
from nplm_jax.errors import UserError
from tests import jaxprs
from tests import numpy_reference
from tests import warm_python

pytestmark = pytest.mark.fast

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 37


def make(**kw):
  args = dict(vocab_size=VOCAB, window=3, embed_dim=8, hidden_dim=12, depth=2, distant_tokens=5, distant_kernels=2,
              tied=False, vocab_pad_multiple=8)
  args.update(kw)
  return revisited.RevisitedNPLM(**args)


def perturbed(params, seed=0):
  """Parameters away from their initial values (LayerNorm and kernels included), so every part matters."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  return jax.tree.unflatten(tree, [x + 0.2 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])


def contexts_for(model, rows=6, seed=1):
  return np.random.default_rng(seed).integers(0, VOCAB, size=(rows, model.context_size)).astype(np.int32)


def perturbed_logits(model):
  """Perturbed parameters (a tied model's padded bias columns kept at PADDING_LOGIT, -inf in the dense
  logits), contexts and the model's logits for them."""
  params = perturbed(output_layer.init_params(model, np.arange(VOCAB) + 1.0))
  if model.tied:
    params[output_layer.OUTPUT] = params[output_layer.OUTPUT].at[:, VOCAB:].set(output_layer.PADDING_LOGIT)
  contexts = contexts_for(model)
  return params, contexts, np.asarray(model.apply({'params': params}, contexts))


@pytest.mark.parametrize('kw', [{}, {'tied': True}, {'distant_tokens': 0, 'distant_kernels': 0}, {'depth': 0},
                                {'layer_norm': False}], ids=['full', 'tied', 'no_distant', 'depth0', 'no_layer_norm'])
@pytest.mark.unit
def test_logits_equal_a_numpy_forward(kw):
  model = make(**kw)
  params, contexts, logits = perturbed_logits(model)
  reference = numpy_reference.revisited_logits(jax.device_get(params), contexts, model.window, model.layer_norm)
  np.testing.assert_allclose(logits[:, :VOCAB], reference[:, :VOCAB], rtol=2e-5, atol=2e-5)
  assert np.all(np.isneginf(logits[:, VOCAB:]))


@pytest.mark.parametrize('kw', [{'embed_scale': True}, {'initialiser': 'lecun'}, {'first_hidden': 20},
                                {'embed_scale': True, 'tied': True, 'first_hidden': 20, 'initialiser': 'normal_0.02'}],
                         ids=['embed_scale', 'init_lecun', 'first_hidden', 'all_tied'])
@pytest.mark.unit
def test_reference_options_equal_the_numpy_forward(kw):
  """The reference code's choices (embeddings x sqrt(m) on the input side only, N(0, 0.02) initialisation,
  the first layer's own inner width) against the NumPy forward."""
  model = make(**kw)
  params, contexts, logits = perturbed_logits(model)
  reference = numpy_reference.revisited_logits(jax.device_get(params), contexts, model.window, model.layer_norm,
                                               embed_scale=model.embed_scale)
  np.testing.assert_allclose(logits[:, :VOCAB], reference[:, :VOCAB], rtol=2e-5, atol=2e-5)
  if 'first_hidden' in kw:
    assert params['first']['in_kernel'].shape[-1] == 20 and params['block_0']['in_kernel'].shape[-1] == model.hidden_dim


@pytest.mark.parametrize('kw', [{}, {'tied': True, 'embed_scale': True}, {'distant_tokens': 0, 'distant_kernels': 0}],
                         ids=['full', 'tied_scaled', 'no_distant'])
@pytest.mark.unit
def test_the_first_layer_added_to_the_last_vector_equals_the_numpy_forward(kw):
  """first_residual='last': the first layer's branch added to the most recent input vector alone, not the
  sum of the window's and the distant summaries'; the sum stays the default."""
  model = make(first_residual='last', **kw)
  params, contexts, logits = perturbed_logits(model)
  reference = numpy_reference.revisited_logits(jax.device_get(params), contexts, model.window, model.layer_norm,
                                               embed_scale=model.embed_scale, first_residual='last')
  np.testing.assert_allclose(logits[:, :VOCAB], reference[:, :VOCAB], rtol=2e-5, atol=2e-5)
  summed = numpy_reference.revisited_logits(jax.device_get(params), contexts, model.window, model.layer_norm,
                                            embed_scale=model.embed_scale)
  assert np.abs(summed[:, :VOCAB] - reference[:, :VOCAB]).max() > 1e-3
  assert config_lib.base_config().model.first_residual == 'sum'
  config = config_lib.base_config()
  config.model.first_residual = 'first'
  with pytest.raises(UserError, match='first_residual'):
    config_lib.validate(config)


def test_the_reference_initialisation_is_the_default_and_draws_from_n_0_002():
  for params in (output_layer.init_params(make(hidden_dim=64, embed_dim=32), None),
                 output_layer.init_params(make(initialiser='normal_0.02', hidden_dim=64, embed_dim=32), None)):
    for leaf in (params['C'], params['first']['in_kernel'], params['block_1']['out_kernel']):
      assert abs(float(np.std(np.asarray(leaf))) - 0.02) < 0.003
  lecun = output_layer.init_params(make(initialiser='lecun', hidden_dim=64, embed_dim=32), None)
  assert abs(float(np.std(np.asarray(lecun['C']))) - 1 / math.sqrt(32)) < 0.03
  assert config_lib.base_config().model.initialiser == 'normal_0.02'


@pytest.mark.parametrize('where,shapes', [('features', [(6, 3 + 2, 8)]), ('embeddings', [(6, 3, 8), (5, 6, 8)])])
def test_input_dropout_sits_where_asked(where, shapes, monkeypatch):
  """feature_dropout_at='features' drops x after the distant kernels ([B, window + kernels, m]);
  'embeddings' drops each input vector before them, as the reference does: the window's ([B, window, m])
  and the distant block's (gathered position-major: [distant, B, m])."""
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  seen = []
  original = nn.Dropout.__call__

  def recording(self, inputs, *args, **kwargs):
    seen.append((self.rate, inputs.shape))
    return original(self, inputs, *args, **kwargs)
  monkeypatch.setattr(nn.Dropout, '__call__', recording)
  model = make(feature_dropout=0.5, hidden_dropout=0.25, feature_dropout_at=where)
  params = output_layer.init_params(model)
  seen.clear()  # the initialisation's own call
  model.apply({'params': params}, contexts_for(model), False, method='features', rngs={'dropout': jax.random.PRNGKey(0)})
  assert [s for rate, s in seen if rate == 0.5] == shapes


def test_the_context_is_the_window_then_the_distant_block():
  model = make()
  assert model.context_size == 3 + 5
  params = perturbed(output_layer.init_params(model))
  contexts = contexts_for(model)
  base = np.asarray(model.apply({'params': params}, contexts))
  for position in (0, 2, 3, 7):  # a window word, the oldest window word, distant words
    changed = contexts.copy()
    changed[:, position] = (changed[:, position] + 1) % VOCAB
    assert not np.allclose(np.asarray(model.apply({'params': params}, changed)), base), position


def test_kernels_start_as_the_distant_blocks_mean():
  model = make()
  params = output_layer.init_params(model)
  np.testing.assert_allclose(np.asarray(params['distant_kernels']), np.full((2, 5), 0.2))


@pytest.mark.unit
def test_tied_output_layer_is_C_and_stores_only_the_bias():
  model = make(tied=True)
  params = perturbed(output_layer.init_params(model))
  assert params[output_layer.OUTPUT].shape == (1, model.padded_vocab_size)
  output = np.asarray(model.output_layer(params))
  np.testing.assert_array_equal(output[:-1, :VOCAB], np.asarray(params['C']).T)
  np.testing.assert_array_equal(output[:-1, VOCAB:], 0.0)
  # the vectors get gradient from both their uses: as inputs and as output columns
  contexts = contexts_for(model)
  never_in_a_context = sorted(set(range(VOCAB)) - set(contexts.ravel().tolist()))[0]
  loss = lambda p: jnp.sum(jax.nn.log_softmax(model.apply({'params': p}, contexts)[:, :VOCAB])[:, never_in_a_context])
  assert np.abs(np.asarray(jax.jit(jax.grad(loss))(params)['C'])[never_in_a_context]).sum() > 0


@pytest.mark.parametrize('overrides', [
    {}, {'model.tied': True}, {'model.distant_tokens': 0, 'model.distant_kernels': 0}, {'model.depth': 0},
    {'model.kind': 'bengio2003'}, {'model.kind': 'bengio2003', 'model.direct': False}])
def test_parameter_count_and_memory_estimate_match_the_parameters(overrides):
  config = config_lib.base_config()
  config.model.update(kind='revisited', n=4, m=8, h=12, depth=2, distant_tokens=5, distant_kernels=2)
  config_lib.apply_overrides(config, overrides)
  model = model_family.from_config(config.model, VOCAB)
  params = output_layer.init_params(model)
  counted = sum(x.size for x in jax.tree.leaves(params))
  output_rows = params[output_layer.OUTPUT].shape[0]
  assert model_family.num_parameters(model) == counted - output_rows * (model.padded_vocab_size - VOCAB)
  replicated, rows = memory.parameter_shapes(config.model, VOCAB)
  assert rows == output_rows and replicated == counted - params[output_layer.OUTPUT].size


@pytest.mark.unit
def test_weight_decay_skips_biases_layer_norm_and_kernels():
  model = make()
  params = jax.tree.map(jnp.ones_like, output_layer.init_params(model))
  decay = optim.decay_weights_not_biases(0.5)
  updates, _ = decay.update(jax.tree.map(jnp.zeros_like, params), decay.init(params), params)
  decayed = {jax.tree_util.keystr(p): float(np.asarray(u).max())
             for p, u in jax.tree_util.tree_flatten_with_path(updates)[0]}
  assert decayed["['C']"] == decayed["['first']['in_kernel']"] == decayed["['block_1']['out_kernel']"] == 0.5
  for name in ("['first']['in_bias']", "['block_0']['LayerNorm_0']['scale']", "['block_0']['LayerNorm_0']['bias']",
               "['distant_kernels']"):
    assert decayed[name] == 0.0, name
  assert np.asarray(updates[output_layer.OUTPUT])[-1].max() == 0.0 and np.asarray(updates[output_layer.OUTPUT])[0].max() == 0.5


def test_logical_axis_rules_place_both_families():
  P = jax.sharding.PartitionSpec
  for model in (make(), model_lib.NPLM(vocab_size=VOCAB, window=3, embed_dim=8, hidden_dim=12, direct=True)):
    default = sharding.param_specs(output_layer.logical_specs(model), config_lib.base_config().mesh.axis_rules)
    assert default[output_layer.OUTPUT] == P(None, 'model')
    assert all(spec == P(*[None] * len(spec)) for path, spec in jax.tree_util.tree_flatten_with_path(
        default, is_leaf=lambda x: isinstance(x, P))[0] if path[0].key != output_layer.OUTPUT)
    split = sharding.param_specs(output_layer.logical_specs(model), {'vocab': 'model', 'hidden': 'model', 'words': 'model'})
    assert split['C'] == P('model', None)
    hidden = split['H'] if 'H' in split else split['block_0']['in_kernel']
    assert hidden == P(None, 'model')


@pytest.mark.parametrize('overrides,names', [
    ({'model.h': 0}, 'model.h'),
    ({'model.distant_tokens': 10}, 'model.distant_kernels'),
    ({'model.depth': -1}, 'model.depth'),
    ({'mesh.axis_rules.hidden': 'data'}, 'mesh.axis_rules.hidden'),
    ({'mesh.axis_rules.vocab': ''}, 'mesh.axis_rules.vocab'),
    ({'model.kind': 'transformer'}, 'model.kind'),
])
def test_bad_revisited_settings_are_one_line_errors(overrides, names):
  config = config_lib.base_config()
  config.model.update(kind='revisited', depth=1)
  config_lib.apply_overrides(config, overrides)
  with pytest.raises(UserError) as e:
    config_lib.validate(config)
  assert '\n' not in str(e.value) and names in str(e.value)


# ------------------------------------------------------------------- a tiny trained revisited workdir

@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  from tests import corpora  # pylint: disable=g-import-not-at-top
  base = tmp_path_factory.mktemp('revisited')
  files = corpora.write_markov_corpus(str(base))
  with open(files['valid'], 'a', encoding='utf-8') as f:
    f.write('w1 w2 never_in_train\n')  # the vocabulary gets <unk>, which extend reads unknown words as
  path = base / 'run'
  proc = subprocess.run(
      [sys.executable, '-m', 'nplm_jax.main', '--config=experiments/text.py:tiny_revisited', f'--workdir={path}',
       *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')), '--config.train.num_epochs=3',
       '--config.mix.enabled=True', '--config.mesh.cpu_devices=2'],
      cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return dict(path=str(path), files=files, base=base)


def tool(module, *args, check=True):
  proc = warm_python.shared().run([module, *args], env=dict(os.environ, JAX_PLATFORMS='cpu'))
  if check:
    assert proc.returncode == 0, proc.stderr
  return proc


def test_training_learns_and_mixes(workdir):
  results = json.loads(pathlib.Path(workdir['path'], 'results.json').read_text(encoding='utf-8'))
  assert results['config']['model']['kind'] == 'revisited'
  unigram = 60  # a 60-word Markov chain with two likely successors: far below |V| once learned
  assert results['test_ppl'] < unigram / 3, results['test_ppl']
  assert results['mix_test_ppl'] > 0


def test_scoring_the_test_file_gives_the_evaluation(workdir):
  model = trained_lib.TrainedModel.load(workdir['path'])
  with open(workdir['files']['test'], encoding='utf-8') as f:
    lines = f.read().splitlines()
  nll = np.concatenate([s.nll for s in score_lib.score_text(model, lines, independent_lines=False)])
  evaluated = evaluation.evaluate_workdir(workdir['path'], splits=('test',))['test']
  n = model.context_size  # the window and the distant block: boundary symbols vs the end of valid
  assert n == 2 + 6
  np.testing.assert_allclose(nll[n:], evaluated[n:], rtol=1e-5)
  results = json.loads(pathlib.Path(workdir['path'], 'results.json').read_text(encoding='utf-8'))
  assert math.exp(nll.mean()) == pytest.approx(results['test_ppl'], rel=2e-2)


def test_sample_embeddings_plot_and_extend_work_on_it(workdir):
  out = tool('nplm_jax.tools.sample', f'--workdir={workdir["path"]}', '--prompt=w1 w2', '--num_tokens=6',
             '--num_samples=2', '--seed=3').stdout
  assert out == tool('nplm_jax.tools.sample', f'--workdir={workdir["path"]}', '--prompt=w1 w2', '--num_tokens=6',
                     '--num_samples=2', '--seed=3').stdout
  assert all(line.startswith('w1 w2') for line in out.splitlines()) and len(out.splitlines()) == 2
  neighbours = tool('nplm_jax.tools.embeddings', 'neighbours', f'--workdir={workdir["path"]}', '--words=w1', '--topn=3').stdout
  assert neighbours.startswith('w1: ') and neighbours.count(',') == 2
  png = workdir['base'] / 'map.png'
  tool('nplm_jax.tools.plot', 'embeddings', f'--workdir={workdir["path"]}', f'--output={png}')
  assert png.read_bytes()[:4] == b'\x89PNG'
  text = workdir['base'] / 'new.txt'
  text.write_text('w1 w2 brand_new w3 w4\nw5 brand_new w6\n', encoding='utf-8')
  extended = workdir['base'] / 'extended'
  tool('nplm_jax.tools.extend', f'--workdir={workdir["path"]}', f'--text={text}', f'--output_workdir={extended}')
  before = trained_lib.TrainedModel.load(workdir['path'])
  after = trained_lib.TrainedModel.load(str(extended))
  assert after.vocab[-1] == 'brand_new' and len(after.vocab) == len(before.vocab) + 1
  # tied: the new word's output weights are its new C row, and its bias is <unk>'s less log 1
  new = np.asarray(after.params['C'])[-1]
  np.testing.assert_allclose(np.asarray(after.run.model.output_layer(after.params))[:-1, len(before.vocab)], new)
  unk = before.word_ids['<unk>']
  assert float(np.asarray(after.params[output_layer.OUTPUT])[-1, len(before.vocab)]) == pytest.approx(
      float(np.asarray(before.params[output_layer.OUTPUT])[-1, unk]))


def test_export_says_it_writes_the_2003_model_only(workdir):
  proc = tool('nplm_jax.tools.export', f'--workdir={workdir["path"]}', f'--output={workdir["base"] / "exported"}', check=False)
  assert proc.returncode == 1 and proc.stderr.count('\n') == 1 and "model.kind='revisited'" in proc.stderr



@pytest.mark.parametrize('form', ['counts', 'one_hot'])
@pytest.mark.parametrize('kw', [{}, {'tied': True, 'embed_scale': True}, {'word_dropout': 0.3}],
                         ids=['untied', 'tied_embed_scale', 'word_dropout'])
def test_the_distant_gradient_by_counts_equals_the_rows(kw, form):
  """model.distant_gradient='counts' (lookup.weighted_sums: C's share from the distant block as a matmul with
  each example's kernel weights per word) and 'one_hot' (those weights from a one-hot block, the sums as
  their matmul with C) give the rows' loss and every parameter's gradient, in training (dropout, the same
  masks: word dropout's too) with words repeated inside a distant block."""
  rows_model = make(distant_tokens=9, hidden_dropout=0.1, **kw)
  counts_model = rows_model.clone(distant_gradient=form)
  params = perturbed(output_layer.init_params(rows_model))
  contexts = contexts_for(rows_model, rows=8)
  contexts[:, 5] = contexts[:, 7] = contexts[:, 9]  # one word three times in each distant block
  targets = np.arange(8, dtype=np.int32) % VOCAB

  def loss(model, p):
    feats = model.apply({'params': p}, contexts, False, method='features', rngs={'dropout': jax.random.PRNGKey(2)})
    logits = output_layer.dense_logits(feats, model.output_layer(p))[:, :VOCAB]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[:, None], axis=1))
  (rows_loss, rows_grad), (counts_loss, counts_grad) = (jax.jit(jax.value_and_grad(functools.partial(loss, m)))(params)
                                                        for m in (rows_model, counts_model))
  np.testing.assert_allclose(float(counts_loss), float(rows_loss), rtol=1e-6)
  for (path, value), (_, expected) in zip(jax.tree_util.tree_flatten_with_path(counts_grad)[0],
                                          jax.tree_util.tree_flatten_with_path(rows_grad)[0]):
    np.testing.assert_allclose(np.asarray(value), np.asarray(expected), rtol=2e-5, atol=2e-6,
                               err_msg=jax.tree_util.keystr(path))
  assert float(jnp.abs(counts_grad['distant_kernels']).max()) > 0


def scatter_updates(jaxpr) -> list[tuple[int, ...]]:
  """The updates' shape of every scatter-add in a jaxpr, its inner jaxprs included."""
  return [tuple(eqn.invars[2].aval.shape) for eqn in jaxprs.equations(jaxpr) if eqn.primitive.name == 'scatter-add']


def test_the_distant_gradient_by_counts_scatters_no_rows_of_the_distant_block():
  """In the gradient, 'counts' scatters whole m-rows of C only for the window's words (batch x window of them);
  the distant block's words are scattered as scalars (each example's kernel weights per word). 'rows'
  scatters the distant block's m-rows too."""
  model = make(distant_tokens=9, embed_dim=8)
  params = output_layer.init_params(model)
  contexts = contexts_for(model, rows=4)

  def scatters(m):
    grad = jax.grad(lambda p: jnp.sum(m.apply({'params': p}, contexts, method='features')))
    return scatter_updates(jax.make_jaxpr(grad)(params).jaxpr)
  rows_of_c = lambda found: sorted(int(np.prod(shape[:-1])) for shape in found if shape[-1:] == (8,))
  assert rows_of_c(scatters(model)) == [4 * 3, 9 * 4]  # the window's rows, the distant block's rows
  counts = scatters(model.clone(distant_gradient='counts'))
  assert rows_of_c(counts) == [4 * 3] and (2 * 9 * 4,) in counts  # scalars: kernels x distant x batch


def primitives(jaxpr) -> set[str]:
  """The names of every primitive in a jaxpr, its inner jaxprs included."""
  return {eqn.primitive.name for eqn in jaxprs.equations(jaxpr)}


def test_one_hot_forms_train_with_no_gather_scatter_or_sort():
  """With embedding_gradient='one_hot' and distant_gradient='one_hot' (small vocabularies: characters) the
  training gradient's program reads the window's rows with a gather, and nothing else gathers, scatters
  or sorts: the distant block's sums and every gradient are matmuls."""
  model = make(distant_tokens=9, embed_dim=8, embedding_gradient='one_hot', distant_gradient='one_hot')
  params = output_layer.init_params(model)
  contexts = contexts_for(model, rows=4)
  grad = jax.grad(lambda p: jnp.sum(model.apply({'params': p}, contexts, method='features')))
  jaxpr = jax.make_jaxpr(grad)(params).jaxpr
  found = primitives(jaxpr)
  assert not {name for name in found if 'scatter' in name or 'sort' in name}, found
  gathers = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == 'gather']
  assert [tuple(eqn.outvars[0].aval.shape) for eqn in gathers] == [(4, 3, 8)]  # the window's rows alone


def test_the_one_hot_distant_form_refuses_a_vocabulary_of_words_in_one_line():
  ids = jnp.zeros((400, 256), jnp.int32)
  with pytest.raises(UserError, match="distant_gradient='one_hot'.*use --config.model.distant_gradient=counts") as e:
    jax.eval_shape(lookup.weighted_sums_one_hot, jax.ShapeDtypeStruct((10_000, 8), jnp.float32), ids,
                   jnp.ones((4, 400)), jnp.ones((400, 256)))
  assert '\n' not in str(e.value) and '3.8 GiB' in str(e.value)


WORDS, CHARS = 1000, 50  # |V| of words; of characters (at most family.SMALL_VOCAB)


@pytest.mark.parametrize('kind,platform,deterministic,overrides,vocab,forms', [
    ('revisited', 'cpu', True, {}, WORDS, ('scatter', 'rows')),  # 2-core CPU: the scatter measured fastest
    ('revisited', 'gpu', True, {}, WORDS, ('sorted', 'counts')),  # H200: 7.2x the scatter
    ('revisited', 'gpu', False, {}, WORDS, ('scatter', 'rows')),  # atomic scatters: not measured, the default stays
    ('revisited', 'tpu', True, {}, WORDS, ('scatter', 'rows')),  # not measured on TPUs
    ('revisited', 'gpu', True, {'model.feature_dropout_at': 'embeddings'}, WORDS, ('sorted', 'rows')),  # counts can't
    ('revisited', 'gpu', True, {'model.embedding_gradient': 'scatter'}, WORDS, ('scatter', 'rows')),  # counts: with sorted
    ('revisited', 'cpu', True, {'model.embedding_gradient': 'one_hot', 'model.distant_gradient': 'counts'}, WORDS,
     ('one_hot', 'counts')),  # named forms are kept
    ('revisited', 'cpu', True, {}, CHARS, ('scatter', 'one_hot')),  # 2-core CPU, characters: 1.21x, eval 1.84x
    ('revisited', 'cpu', True, {}, 129, ('scatter', 'rows')),  # past SMALL_VOCAB (at 256: 0.91x)
    ('revisited', 'cpu', True, {'model.feature_dropout_at': 'embeddings'}, CHARS, ('scatter', 'rows')),  # can't
    ('revisited', 'cpu', True, {'model.distant_gradient': 'counts'}, CHARS, ('scatter', 'counts')),  # named: kept
    ('revisited', 'gpu', True, {}, CHARS, ('one_hot', 'one_hot')),  # H200, characters: 1.40x sorted + counts
    ('revisited', 'gpu', False, {}, CHARS, ('scatter', 'rows')),  # atomic scatters: not measured
    ('revisited', 'gpu', True, {'model.distant_gradient': 'counts'}, CHARS, ('sorted', 'counts')),  # the pair or none
    ('revisited', 'gpu', True, {'model.feature_dropout_at': 'embeddings'}, CHARS, ('sorted', 'rows')),  # can't
    ('bengio2003', 'gpu', True, {}, CHARS, ('sorted', 'rows')),  # measured on the revisited family alone
    ('revisited', 'tpu', True, {}, CHARS, ('scatter', 'rows')),
    ('bengio2003', 'gpu', True, {}, WORDS, ('sorted', 'rows')),  # H200, research size: 1.09x-1.15x; no distant block
    ('bengio2003', 'gpu', False, {}, WORDS, ('scatter', 'rows')),  # atomic scatters: not measured
    ('bengio2003', 'cpu', True, {}, WORDS, ('scatter', 'rows')),
    ('bengio2003', 'cpu', True, {}, CHARS, ('scatter', 'rows')),  # no distant block
])
def test_auto_gradient_forms_resolve_by_backend(kind, platform, deterministic, overrides, vocab, forms):
  """model.embedding_gradient / distant_gradient 'auto' (the defaults): the forms measured fastest on the
  backend (backend_defaults.TABLE), for a vocabulary of characters those measured for those,
  the scatter and the rows where nothing else was measured; the module built for that backend carries them."""
  config = config_lib.base_config()
  config.model.update(kind=kind, n=4, m=8, h=12, depth=1, distant_tokens=5 if kind == 'revisited' else 0,
                      distant_kernels=2 if kind == 'revisited' else 0)
  config_lib.apply_overrides(config, overrides)
  assert model_family.gradient_forms(config.model, platform, deterministic, vocab) == forms
  model = model_family.from_config(config.model, vocab, platform, deterministic)
  assert model.embedding_gradient == forms[0]
  if kind == 'revisited':
    assert model.distant_gradient == forms[1]
