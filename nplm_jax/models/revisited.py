"""The NPLM revisited (Sun & Iyyer, NAACL 2021): the 2003 model with modern parts.

The context is the n-1 words before the target (the local window, their vectors concatenated as
in 2003) and, before those, a distant block of `distant_tokens` words that `distant_kernels` learned
weightings summarise, each into one m-vector (a kernel is a weight per distant position, started
uniform: the block's mean). Their concatenation x goes through a ReLU layer of width h back to
width m, added to the sum of x's m-vectors (the residual of Sun & Iyyer's first layer), then
`depth` residual blocks s <- s + W2 relu(W1 s + b1) + b2, each sum followed by LayerNorm (post-norm,
as theirs) and dropout on each branch. The output layer is the 2003 one, b + U s, vocabulary-sharded
as before; tied, U is C (Press & Wolf 2017), and the stored output layer holds the bias row alone.

Differences from Sun & Iyyer's code (SimengSun/revisit-nplm), for a simpler model that keeps their
parts: an exact vocabulary-sharded softmax instead of an adaptive one (and so one output embedding
width), the distant block's kernels at the first layer only (they also add the distant summary after
every layer), no label smoothing. Their initialisation is the default (embeddings and linear kernels
from N(0, 0.02); initialiser='lecun' gives C ~ N(0, 1/m) and lecun-normal kernels), chosen on PTB
(RESULTS.md). Their other choices are options, off by default (on PTB they changed nothing measurable
at 0.41 epoch): input vectors scaled by sqrt(m) (embed_scale), a first layer with its own inner width
(first_hidden; they use 1500 there and 2100 in the blocks), and the input dropout on each embedding
before the kernels (feature_dropout_at='embeddings'; here on x after them). Their training differs
too: gradients clipped to global norm 0.25 (optimizer.clip_norm, off by default) and the rate decayed
along a cosine to 0 over a fixed number of steps (optimizer.cosine_decay_steps, off by default), where
this project keeps it constant after the warm-up and halves it from the best parameters at each stall
(train.anneal_factor); plain Adam where the project uses AdamW's decoupled weight decay. An option
of this project's own, off by default: word_dropout drops whole input words (window and distant block)
in training; first_residual='last' adds the first layer's branch to the most recent input vector alone
instead of the sum of them all.

C's gradient from the distant block can be made as a matmul instead of a scatter of its rows
(distant_gradient='counts': lookup.weighted_sums), the same numbers, for deterministic GPU steps; for a
small vocabulary (characters) the block's sums and all their gradients can be matmuls with a one-hot block
(distant_gradient='one_hot': lookup.weighted_sums_one_hot), no gather, scatter or sort.

The module has the interface of model.NPLM that training and the tools use: context_size,
features(contexts, deterministic), output_layer(params), __call__ (dense logits).
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from nplm_jax.models import lookup
from nplm_jax.models import output_layer


# model.initialiser: the initialisers of C and of the linear kernels.
INITIALISERS = {
    'lecun': lambda m: (nn.initializers.normal(1.0 / math.sqrt(m)), nn.initializers.lecun_normal()),
    'normal_0.02': lambda m: (nn.initializers.normal(0.02), nn.initializers.normal(0.02)),
}


# model.first_residual: the first layer's residual from x [batch, window (+ kernels), m], most recent first.
# 'sum' is Sun & Iyyer's (a bag of the context's vectors); 'last' the most recent vector alone: on characters
# the bag of a 40-character window drowns the one that matters most (0.108 bits lower on test over one epoch
# of PTB's characters at a quarter of the width: docs/studies/revisited_parts.md, "Where the character row's parameters sit"; 0.026
# at 11 characters). On PTB's words the sum is better ('last' 7.0% higher in test perplexity after 1.5
# epochs), so it is the default.
FIRST_RESIDUALS = {
    'sum': lambda x: x.sum(axis=1),
    'last': lambda x: x[:, 0],
}


class ResidualBlock(nn.Module):
  """LayerNorm(residual + dropout(W2 relu(W1 inputs + b1) + b2)): a block (inputs = residual = s), or the
  first layer (inputs: the concatenated x, logical axis 'context'; residual: the sum of x's m-vectors)."""
  width: int
  hidden_dim: int
  compute_dtype: str
  dropout: float
  layer_norm: bool
  in_axis: str = 'embed'
  initialiser: str = 'normal_0.02'

  @nn.compact
  def __call__(self, residual, inputs, deterministic: bool):
    kernel_init = INITIALISERS[self.initialiser](self.width)[1]
    inner = _dense(self, 'in', inputs, self.hidden_dim, (self.in_axis, 'hidden'), self.compute_dtype, kernel_init)
    branch = _dense(self, 'out', jax.nn.relu(inner), self.width, ('hidden', 'embed'), self.compute_dtype,
                    kernel_init)
    return _norm(residual + nn.Dropout(self.dropout)(branch, deterministic=deterministic), self.layer_norm)


def _dense(module: nn.Module, name: str, x, features: int, axes: tuple[str, str], compute_dtype: str, kernel_init):
  """x W + b with W [in, features] (logical axes `axes`), operands in compute_dtype, float32 sums."""
  kernel = module.param(f'{name}_kernel', output_layer.with_axes(kernel_init, axes), (x.shape[-1], features))
  bias = module.param(f'{name}_bias', output_layer.with_axes(nn.initializers.zeros, axes[1:]), (features,))
  dtype = jnp.dtype(compute_dtype)
  return jnp.matmul(x.astype(dtype), kernel.astype(dtype), preferred_element_type=jnp.float32) + bias


def _norm(x, enabled: bool):
  """LayerNorm of x (a submodule of the module being called), or x."""
  if not enabled:
    return x
  return nn.LayerNorm(scale_init=output_layer.with_axes(nn.initializers.ones, ('embed',)),
                      bias_init=output_layer.with_axes(nn.initializers.zeros, ('embed',)))(x)


class RevisitedNPLM(output_layer.OutputLayerModel, nn.Module):
  vocab_size: int
  window: int  # n - 1 words whose vectors are concatenated
  embed_dim: int  # m: word vectors and the residual stream
  hidden_dim: int  # h: the inner width of the first layer and of each block
  depth: int = 0  # residual blocks after the first layer
  layer_norm: bool = True
  distant_tokens: int = 0  # words before the window, summarised by the kernels
  distant_kernels: int = 0
  tied: bool = False
  vocab_pad_multiple: int = 1
  compute_dtype: str = 'float32'
  feature_dropout: float = 0.0  # on x, the concatenated window and distant summaries (or each embedding)
  hidden_dropout: float = 0.0  # on every residual branch
  word_dropout: float = 0.0  # each input word's whole vector (window and distant block), before the kernels
  embed_scale: bool = False  # input vectors times sqrt(m)
  initialiser: str = 'normal_0.02'  # INITIALISERS
  first_hidden: int = 0  # the first layer's inner width; 0 = hidden_dim
  feature_dropout_at: str = 'features'  # 'features' (x) or 'embeddings' (each input vector, before the kernels)
  first_residual: str = 'sum'  # FIRST_RESIDUALS: what the first layer's branch is added to
  embedding_gradient: str = 'scatter'  # how C's gradient is made (lookup.EMBEDDING_GRADIENTS)
  distant_gradient: str = 'rows'  # the distant block's share of it: as the rows', 'counts' (lookup.weighted_sums) or
  # 'one_hot' (lookup.weighted_sums_one_hot: small vocabularies)

  @property
  def context_size(self) -> int:
    """Ids a context holds, most recent first: the window, then the distant block."""
    return self.window + self.distant_tokens

  @property
  def feature_dim(self) -> int:
    """K: the output layer's weight rows (0 when tied: they are C)."""
    return 0 if self.tied else self.embed_dim

  def setup(self):
    m = self.embed_dim
    self.C = self.param('C', output_layer.with_axes(INITIALISERS[self.initialiser](m)[0], ('words', 'embed')),
                        (self.vocab_size, m))
    if self.distant_tokens:
      # a weight per distant position for each kernel, started uniform (the block's mean)
      self.kernels = self.param('distant_kernels', output_layer.with_axes(nn.initializers.constant(1.0 / self.distant_tokens),
                                                              ('kernels', 'distant')),
                                (self.distant_kernels, self.distant_tokens))
    # the 2003 hidden layer made residual (Sun & Iyyer's first layer)
    self.first = ResidualBlock(m, self.first_hidden or self.hidden_dim, self.compute_dtype, self.hidden_dropout,
                               self.layer_norm, in_axis='context', initialiser=self.initialiser)
    self.blocks = [ResidualBlock(m, self.hidden_dim, self.compute_dtype, self.hidden_dropout, self.layer_norm,
                                 initialiser=self.initialiser, name=f'block_{i}') for i in range(self.depth)]
    self.output = self.param(output_layer.OUTPUT, output_layer.with_axes(
        lambda key, shape: output_layer.initial_output_layer(shape, self.vocab_size), ('features', 'vocab')),
        (self.feature_dim + 1, self.padded_vocab_size))
    self.drop_features = nn.Dropout(self.feature_dropout)
    self.drop_words = output_layer.word_dropout(self.word_dropout)

  def features(self, contexts: jax.Array, deterministic: bool = True) -> jax.Array:
    """s [batch, m]: the residual stream after the last block (the output layer's input)."""
    local = self._input_vectors(contexts[:, :self.window], deterministic)  # [batch, window, m]
    if self.distant_tokens:
      # The distant block gathered position-major, [distant, batch, m], so that the kernels' weighted sums
      # are one matmul [kernels, distant] x [distant, batch * m]: gathered [batch, distant, m], the block
      # (hundreds of vectors an example) is transposed for the contraction, forward and backward (a
      # training step 1.16-1.27x slower on CPU, evaluation 1.45x; docs/revisited.md, "Placement by logical axes (both families)").
      summaries = self._distant_summaries(contexts[:, self.window:].T, deterministic)
      local = jnp.concatenate([local, summaries.transpose(1, 0, 2)], axis=1)
    x = local if self.feature_dropout_at == 'embeddings' else self.drop_features(local, deterministic=deterministic)
    s = self.first(FIRST_RESIDUALS[self.first_residual](x), x.reshape(x.shape[0], -1), deterministic)
    for block in self.blocks:
      s = block(s, s, deterministic)
    return s

  def _distant_summaries(self, ids: jax.Array, deterministic: bool) -> jax.Array:
    """The kernels' weighted sums of the distant block's vectors [kernels, batch, m], ids [distant, batch]."""
    if self.distant_gradient == 'rows':
      return lookup.weigh(self.kernels, self._input_vectors(ids, deterministic))
    # 'counts' or 'one_hot' (config refuses them with dropout on each embedding's features): word dropout's mask is the
    # one _input_vectors would draw (the same module and shape but m), a weight per vector
    mask = self.drop_words(jnp.ones((*ids.shape, 1), self.C.dtype), deterministic=deterministic)[..., 0]
    sums = lookup.weighted_sums_one_hot if self.distant_gradient == 'one_hot' else lookup.weighted_sums
    summaries = sums(self.C, ids, self.kernels, mask)
    return summaries * math.sqrt(self.embed_dim) if self.embed_scale else summaries

  def _input_vectors(self, ids: jax.Array, deterministic: bool) -> jax.Array:
    """C's rows for ids ([*ids.shape, m]), dropped out whole, scaled and dropped out as the options say."""
    vectors = self.drop_words(lookup.rows(self.C, ids, self.embedding_gradient), deterministic=deterministic)
    if self.embed_scale:
      vectors = vectors * math.sqrt(self.embed_dim)
    if self.feature_dropout_at == 'embeddings':
      vectors = self.drop_features(vectors, deterministic=deterministic)
    return vectors

  def output_layer(self, params) -> jax.Array:
    """[U; b] [K + 1, padded |V|] as vocab_softmax takes it; tied, U is C's rows as columns."""
    stored = params[output_layer.OUTPUT]
    if not self.tied:
      return stored
    padding = self.padded_vocab_size - self.vocab_size
    columns = jnp.pad(params['C'].T, ((0, 0), (0, padding)))  # padded columns: 0 weights, bias PADDING_LOGIT
    if not jax.sharding.get_abstract_mesh().empty:
      # C is whole on every device: padded there, each device then keeps its vocabulary columns. Left to
      # itself, XLA pads the vocabulary-split transpose, a halo exchange between the shards every step
      # (2-core CPU, Brown ladder5_dropout: a 340 -> 310 ms step).
      columns = jax.lax.with_sharding_constraint(columns, jax.sharding.PartitionSpec())
    return jnp.concatenate([columns.astype(stored.dtype), stored], axis=0)

  def __call__(self, contexts: jax.Array) -> jax.Array:
    """Dense logits [batch, padded |V|], padding at -inf (for tests and small vocabularies)."""
    output = self.output_layer({'C': self.C, output_layer.OUTPUT: self.output})
    logits = output_layer.dense_logits(self.features(contexts), output)
    return jnp.where(jnp.arange(logits.shape[-1]) < self.vocab_size, logits, -jnp.inf)


def from_config(model_config, vocab_size: int, compute_dtype: str, embedding_gradient: str = 'scatter',
                distant_gradient: str = 'rows') -> RevisitedNPLM:
  """The module of a config with model.kind = 'revisited' (compute_dtype and the forms of C's gradient
  resolved for the backend: family.from_config)."""
  return RevisitedNPLM(vocab_size=vocab_size, window=model_config.n - 1, embed_dim=model_config.m,
                       hidden_dim=model_config.h, depth=model_config.depth, layer_norm=model_config.layer_norm,
                       distant_tokens=model_config.distant_tokens, distant_kernels=model_config.distant_kernels,
                       tied=model_config.tied, vocab_pad_multiple=model_config.vocab_pad_multiple,
                       compute_dtype=compute_dtype, feature_dropout=model_config.feature_dropout,
                       hidden_dropout=model_config.hidden_dropout, word_dropout=model_config.word_dropout,
                       embed_scale=model_config.embed_scale,
                       initialiser=model_config.initialiser, first_hidden=model_config.first_hidden,
                       feature_dropout_at=model_config.feature_dropout_at,
                       first_residual=model_config.get('first_residual', 'sum'),
                       embedding_gradient=embedding_gradient, distant_gradient=distant_gradient)
