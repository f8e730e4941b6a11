"""The model of Bengio et al. (2003): y = b + W x + U tanh(d + H x), P(w_t | context) = softmax(y).

x = [C(w_{t-1}), ..., C(w_{t-n+1})], and with a distant block (model.distant_tokens, beyond the paper;
Sun and Iyyer 2021's distant-context kernels) x also holds, after the window, one m-vector per kernel:
its learned weighting of the vectors of the `distant_tokens` words before the window. The output
layer is one parameter, `output` = [U; W; b] ([h + dim(x) + 1, |V|], W's rows only with direct
connections): with features f = [tanh(d + H x), x, 1] the logits are one matmul
f @ output, with no per-step copy to stack U, W and b. The module creates the parameters and
computes the features; `vocab_softmax` applies the output layer block by block, so the [batch, |V|]
logits never need to exist on one device. Calling the module gives the dense logits, the plain
reference for tests and small vocabularies.

The output layer, its padding and the parameters' creation are shared with the revisited family
(output_layer.py).
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from nplm_jax import backend_defaults
from nplm_jax.models import lookup
from nplm_jax.models.output_layer import (OUTPUT, OutputLayerModel, dense_logits, initial_output_layer,
                                          with_axes, word_dropout)

def num_parameters(vocab_size: int, n: int, m: int, h: int, direct: bool) -> int:
  """The paper's count: |V|(1 + nm + h) + h(1 + (n-1)m) with direct connections."""
  per_word = 1 + m + h + ((n - 1) * m if direct else 0)
  return vocab_size * per_word + h * (1 + (n - 1) * m)


class NPLM(OutputLayerModel, nn.Module):
  vocab_size: int
  window: int  # n - 1
  embed_dim: int  # m
  hidden_dim: int  # h; 0 means no hidden layer
  direct: bool  # direct connections W from x to the output
  vocab_pad_multiple: int = 1
  compute_dtype: str = 'float32'  # of every matmul's operands, float32 accumulation ('bfloat16' for accelerators)
  feature_dropout: float = 0.0  # dropout on the word features x (training only)
  hidden_dropout: float = 0.0  # dropout on the hidden layer tanh(d + H x) (training only)
  word_dropout: float = 0.0  # each context word's whole vector dropped (training only)
  embedding_gradient: str = 'scatter'  # how C's gradient is made (lookup.EMBEDDING_GRADIENTS)
  distant_tokens: int = 0  # words before the window, summarised by the kernels (as the revisited family's)
  distant_kernels: int = 0

  @property
  def context_size(self) -> int:
    """Ids a context holds, most recent first: the window, then the distant block."""
    return self.window + self.distant_tokens

  @property
  def x_dim(self) -> int:
    """x's size: the window's vectors, then one m-vector per distant kernel."""
    return (self.window + self.distant_kernels) * self.embed_dim

  @property
  def feature_dim(self) -> int:
    """K: the rows of the output layer before its bias row (h for U, (n-1)m for W)."""
    return self.hidden_dim + (self.x_dim if self.direct else 0)

  def output_rows(self) -> dict[str, slice]:
    """Where U, W and b lie in the output layer's rows (the paper's names for its parts)."""
    rows, start = {}, 0
    for name, size in (('U', self.hidden_dim), ('W', self.x_dim if self.direct else 0), ('b', 1)):
      if size:
        rows[name] = slice(start, start + size)
        start += size
    return rows

  def setup(self):
    v, vp = self.vocab_size, self.padded_vocab_size
    self.C = self.param('C', with_axes(nn.initializers.normal(1.0 / math.sqrt(self.embed_dim)), ('words', 'embed')),
                        (v, self.embed_dim))
    if self.distant_tokens:
      # a weight per distant position for each kernel, started uniform (the block's mean)
      self.kernels = self.param('distant_kernels', with_axes(nn.initializers.constant(1.0 / self.distant_tokens),
                                                             ('kernels', 'distant')),
                                (self.distant_kernels, self.distant_tokens))
    if self.hidden_dim:
      self.H = self.param('H', with_axes(nn.initializers.lecun_normal(), ('context', 'hidden')),
                          (self.x_dim, self.hidden_dim))
      self.d = self.param('d', with_axes(nn.initializers.zeros, ('hidden',)), (self.hidden_dim,))
    self.output = self.param(OUTPUT, with_axes(lambda key, shape: initial_output_layer(shape, v), ('features', 'vocab')),
                             (self.feature_dim + 1, vp))
    self.drop_features = nn.Dropout(self.feature_dropout)
    self.drop_hidden = nn.Dropout(self.hidden_dropout)
    self.drop_words = word_dropout(self.word_dropout)

  def features(self, contexts: jax.Array, deterministic: bool = True, context_rows=None) -> jax.Array:
    """f = [tanh(d + H x), x] [batch, K]: the inputs of the output layer's U and W rows.

    deterministic=False (training) applies dropout, drawn from the 'dropout' rng, to whole word
    vectors (word_dropout), to x's features before both H and W, and to the hidden layer's output.
    context_rows: C's rows of the contexts as gather_context_rows gives them, gathered by the caller and read
    instead of C (whose gradient is then theirs alone: steps.sampled_columns_step).
    """
    if context_rows is None:
      context_rows = gather_context_rows(self.C, contexts, self)
    if self.distant_tokens:
      vectors = self._window_and_summaries(*context_rows, deterministic=deterministic)
    else:
      vectors = self.drop_words(context_rows, deterministic=deterministic)
    x = self.drop_features(vectors.reshape(contexts.shape[0], -1), deterministic=deterministic)
    parts = []
    if self.hidden_dim:
      dtype = jnp.dtype(self.compute_dtype)  # the matmul's operands; its sum and tanh stay float32
      hidden = jnp.matmul(x.astype(dtype), self.H.astype(dtype), preferred_element_type=jnp.float32)
      parts.append(self.drop_hidden(jnp.tanh(self.d + hidden), deterministic=deterministic))
    if self.direct:
      parts.append(x)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)

  def _window_and_summaries(self, window_rows, distant_rows, deterministic: bool) -> jax.Array:
    """[batch, window + kernels, m]: the window's vectors, then the distant block's kernel-weighted sums.

    The block is read position-major ([distant, batch, m]) so that its kernels weigh it over batch x m
    (lookup.weigh), forward and back, with no copy of the block into a matmul's layout (a batched matmul per
    example did that both ways). Word dropout draws one mask for the whole context, as for a window alone."""
    distant, batch, _ = distant_rows.shape
    if self.word_dropout and not deterministic:
      keep = self.drop_words(jnp.ones((batch, self.window + distant, 1), window_rows.dtype), deterministic=False)
      window_rows = window_rows * keep[:, :self.window]
      distant_rows = distant_rows * keep[:, self.window:].transpose(1, 0, 2)
    summaries = lookup.weigh(self.kernels, distant_rows)
    return jnp.concatenate([window_rows, summaries.transpose(1, 0, 2)], axis=1)

  def output_layer(self, params) -> jax.Array:
    """[U; W; b] [K + 1, padded |V|]: the stored output layer itself."""
    return params[OUTPUT]

  def __call__(self, contexts: jax.Array) -> jax.Array:
    """Dense logits [batch, padded |V|], padding at -inf (for tests and small vocabularies)."""
    logits = dense_logits(self.features(contexts), self.output)
    return jnp.where(jnp.arange(logits.shape[-1]) < self.vocab_size, logits, -jnp.inf)


def context_row_ids(contexts: jax.Array, model: 'NPLM'):
  """The ids of C's rows the model reads, in the layout it reads them: the contexts [batch, n - 1], or with a
  distant block the window's ids [batch, window] and the block's position-major [distant, batch]. Where the
  rows' gradient is added back to C."""
  if not model.distant_tokens:
    return contexts
  return contexts[:, :model.window], contexts[:, model.window:].T


def gather_context_rows(table: jax.Array, contexts: jax.Array, model: 'NPLM'):
  """C's rows of the contexts as the model's features read them (their context_rows): table[ids] for each
  array of context_row_ids, its gradient made as model.embedding_gradient says (lookup.rows)."""
  return jax.tree.map(lambda ids: lookup.rows(table, ids, model.embedding_gradient), context_row_ids(contexts, model))


def compute_dtype(name: str, platform: str) -> str:
  """model.compute_dtype with 'auto' resolved for the backend `platform` ('cpu', 'gpu', 'tpu')."""
  return backend_defaults.backend_default('model.compute_dtype', platform) if name == 'auto' else name


def from_config(model_config, vocab_size: int, platform: str = 'cpu', embedding_gradient: str = 'scatter') -> NPLM:
  """The module of a config with model.kind = 'bengio2003' (embedding_gradient resolved: family.from_config)."""
  return NPLM(vocab_size=vocab_size, window=model_config.n - 1, embed_dim=model_config.m,
              hidden_dim=model_config.h, direct=model_config.direct,
              vocab_pad_multiple=model_config.vocab_pad_multiple,
              compute_dtype=compute_dtype(model_config.compute_dtype, platform),
              feature_dropout=model_config.feature_dropout,
              hidden_dropout=model_config.hidden_dropout, word_dropout=model_config.word_dropout,
              embedding_gradient=embedding_gradient, distant_tokens=model_config.get('distant_tokens', 0),
              distant_kernels=model_config.get('distant_kernels', 0))


