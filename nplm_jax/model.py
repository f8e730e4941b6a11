"""The model of Bengio et al. (2003): y = b + W x + U tanh(d + H x), P(w_t | context) = softmax(y).

x = [C(w_{t-1}), ..., C(w_{t-n+1})]. The module only creates parameters and computes features;
the output layer (U, W, b) is applied block by block by `vocab_softmax`, so the [batch, |V|]
logits never need to exist on one device. Calling the module gives the dense logits, the plain
reference for tests and small vocabularies.

The output parameters span a padded vocabulary (a multiple of `vocab_pad_multiple`, so the
vocabulary axis splits evenly over devices); padded columns start at zero, are masked to -inf
logits and so never receive probability or gradient.
"""

import math
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

# Parameters sharded on the vocabulary axis (the last axis); the rest are replicated.
VOCAB_SHARDED = ('U', 'W', 'b')
NOT_DECAYED = ('b', 'd')  # the paper decays weights and C, not biases


def padded_size(vocab_size: int, multiple: int) -> int:
  return -(-vocab_size // multiple) * multiple


def num_parameters(vocab_size: int, n: int, m: int, h: int, direct: bool) -> int:
  """The paper's count: |V|(1 + nm + h) + h(1 + (n-1)m) with direct connections."""
  per_word = 1 + m + h + ((n - 1) * m if direct else 0)
  return vocab_size * per_word + h * (1 + (n - 1) * m)


class NPLM(nn.Module):
  vocab_size: int
  context_size: int  # n - 1
  embed_dim: int  # m
  hidden_dim: int  # h; 0 means no hidden layer
  direct: bool  # direct connections W from x to the output
  vocab_pad_multiple: int = 1
  compute_dtype: str = 'float32'  # of the output layer's matmuls ('bfloat16' for accelerators)
  feature_dropout: float = 0.0  # dropout on the word features x (training only)
  hidden_dropout: float = 0.0  # dropout on the hidden layer tanh(d + H x) (training only)

  @property
  def has_dropout(self) -> bool:
    return bool(self.feature_dropout or self.hidden_dropout)

  @property
  def padded_vocab_size(self) -> int:
    return padded_size(self.vocab_size, self.vocab_pad_multiple)

  def setup(self):
    v, vp = self.vocab_size, self.padded_vocab_size
    x_dim = self.context_size * self.embed_dim
    self.C = self.param('C', nn.initializers.normal(1.0 / math.sqrt(self.embed_dim)), (v, self.embed_dim))
    if self.hidden_dim:
      self.H = self.param('H', nn.initializers.lecun_normal(), (x_dim, self.hidden_dim))
      self.d = self.param('d', nn.initializers.zeros, (self.hidden_dim,))
      self.U = self.param('U', nn.initializers.zeros, (self.hidden_dim, vp))
    if self.direct:
      self.W = self.param('W', nn.initializers.zeros, (x_dim, vp))
    self.b = self.param('b', nn.initializers.zeros, (vp,))
    self.drop_features = nn.Dropout(self.feature_dropout)
    self.drop_hidden = nn.Dropout(self.hidden_dropout)

  def features(self, contexts: jax.Array, deterministic: bool = True) -> dict[str, jax.Array]:
    """The inputs of the output layer: x for W and, with a hidden layer, tanh(d + H x) for U.

    deterministic=False (training) applies dropout, drawn from the 'dropout' rng, to x before
    both H and W, and to the hidden layer's output.
    """
    x = self.drop_features(self.C[contexts].reshape(contexts.shape[0], -1), deterministic=deterministic)
    feats = {}
    if self.direct:
      feats['W'] = x
    if self.hidden_dim:
      feats['U'] = self.drop_hidden(jnp.tanh(self.d + x @ self.H), deterministic=deterministic)
    return feats

  def output_params(self) -> dict[str, jax.Array]:
    return {k: getattr(self, k) for k in VOCAB_SHARDED if hasattr(self, k)}

  def __call__(self, contexts: jax.Array) -> jax.Array:
    """Dense logits [batch, padded |V|], padding at -inf (for tests and small vocabularies)."""
    logits = output_block_logits(self.features(contexts), self.output_params())
    return mask_padding(logits, 0, self.vocab_size)


def stack_output_layer(feats: dict[str, jax.Array], out: dict[str, jax.Array]):
  """([x, a], [W; U]): W x + U a as one matmul.

  One [B, (n-1)m + h] x [(n-1)m + h, |V|] product instead of two: the h = 50 one alone is memory
  bound, and their [B, |V|] sum is one more pass (the training step 1.2x faster at batch 1024).
  """
  names = sorted(feats)
  if len(names) == 1:
    return feats[names[0]], out[names[0]]
  return (jnp.concatenate([feats[k] for k in names], axis=-1),
          jnp.concatenate([out[k] for k in names], axis=0))


def output_block_logits(feats: dict[str, jax.Array], out: dict[str, jax.Array]) -> jax.Array:
  """b + W x + U a for whatever block of the vocabulary `out` holds; float32 whatever the inputs."""
  f, w = stack_output_layer(feats, out)
  return out['b'] + jnp.matmul(f, w, preferred_element_type=jnp.float32)


def cast_for_compute(model: 'NPLM', feats: dict[str, jax.Array], out: dict[str, jax.Array]):
  """Features and output weights in the compute dtype; the bias (and so the logits) stay float32."""
  if model.compute_dtype == 'float32':
    return feats, out
  dtype = jnp.dtype(model.compute_dtype)
  return ({k: v.astype(dtype) for k, v in feats.items()},
          {k: (v if k == 'b' else v.astype(dtype)) for k, v in out.items()})


def mask_padding(logits: jax.Array, first_column: jax.Array | int, vocab_size: int) -> jax.Array:
  """-inf for the columns past the real vocabulary (`first_column` = this block's offset)."""
  columns = first_column + jnp.arange(logits.shape[-1])
  return jnp.where(columns < vocab_size, logits, -jnp.inf)


def split_params(params: dict[str, jax.Array]):
  """(feature params: C, H, d) and (output params: U, W, b)."""
  out = {k: v for k, v in params.items() if k in VOCAB_SHARDED}
  return {k: v for k, v in params.items() if k not in VOCAB_SHARDED}, out


def from_config(model_config, vocab_size: int) -> NPLM:
  return NPLM(vocab_size=vocab_size, context_size=model_config.n - 1, embed_dim=model_config.m,
              hidden_dim=model_config.h, direct=model_config.direct,
              vocab_pad_multiple=model_config.vocab_pad_multiple, compute_dtype=model_config.compute_dtype,
              feature_dropout=model_config.get('feature_dropout', 0.0),
              hidden_dropout=model_config.get('hidden_dropout', 0.0))


def init_params(model: NPLM, unigram_counts: Optional[jax.Array] = None, seed: int = 0) -> dict[str, jax.Array]:
  """Parameters drawn from PRNGKey(seed), with b set to the log unigram distribution when counts are given.

  A unigram bias starts the network at the unigram model's perplexity instead of |V|'s.
  """
  params = model.init(jax.random.PRNGKey(seed), jnp.zeros((1, model.context_size), jnp.int32))['params']
  params = dict(params)
  if unigram_counts is not None:
    counts = jnp.asarray(unigram_counts, jnp.float32) + 0.5  # no word at -inf
    log_p = jnp.log(counts / counts.sum())
    params['b'] = params['b'].at[:model.vocab_size].set(log_p)
  return params
