"""The model of Bengio et al. (2003): y = b + W x + U tanh(d + H x), P(w_t | context) = softmax(y).

x = [C(w_{t-1}), ..., C(w_{t-n+1})]. The output layer is one parameter, `output` = [U; W; b]
([h + (n-1)m + 1, |V|]): with features f = [tanh(d + H x), x, 1] the logits are one matmul
f @ output, with no per-step copy to stack U, W and b. The module creates the parameters and
computes the features; `vocab_softmax` applies the output layer block by block, so the [batch, |V|]
logits never need to exist on one device. Calling the module gives the dense logits, the plain
reference for tests and small vocabularies.

The output layer spans a padded vocabulary (a multiple of `vocab_pad_multiple`, so the vocabulary
axis splits evenly over devices). Padded columns hold zero weights and a bias of PADDING_LOGIT:
exp() gives them no probability, so they receive no gradient and keep those values.
"""

import math
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

OUTPUT = 'output'  # the output layer [U; W; b]: its last axis is the vocabulary's
# Parameters are created with the names of their axes (flax's logical partitioning): 'vocab', 'words'
# (C's rows), 'embed', 'context' (x's features), 'hidden', 'features' (the output layer's rows);
# config.mesh.axis_rules places each on the mesh (sharding.param_specs).
_with_axes = nn.with_logical_partitioning
# The bias of padded vocabulary columns: exp() of it is 0, and unlike -inf, 0 times it is 0.
PADDING_LOGIT = -1e30


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
  compute_dtype: str = 'float32'  # of every matmul's operands, float32 accumulation ('bfloat16' for accelerators)
  feature_dropout: float = 0.0  # dropout on the word features x (training only)
  hidden_dropout: float = 0.0  # dropout on the hidden layer tanh(d + H x) (training only)

  @property
  def has_dropout(self) -> bool:
    return bool(self.feature_dropout or self.hidden_dropout)

  @property
  def padded_vocab_size(self) -> int:
    return padded_size(self.vocab_size, self.vocab_pad_multiple)

  @property
  def x_dim(self) -> int:
    return self.context_size * self.embed_dim

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
    self.C = self.param('C', _with_axes(nn.initializers.normal(1.0 / math.sqrt(self.embed_dim)), ('words', 'embed')),
                        (v, self.embed_dim))
    if self.hidden_dim:
      self.H = self.param('H', _with_axes(nn.initializers.lecun_normal(), ('context', 'hidden')),
                          (self.x_dim, self.hidden_dim))
      self.d = self.param('d', _with_axes(nn.initializers.zeros, ('hidden',)), (self.hidden_dim,))
    self.output = self.param(OUTPUT, _with_axes(lambda key, shape: initial_output_layer(shape, v), ('features', 'vocab')),
                             (self.feature_dim + 1, vp))
    self.drop_features = nn.Dropout(self.feature_dropout)
    self.drop_hidden = nn.Dropout(self.hidden_dropout)

  def features(self, contexts: jax.Array, deterministic: bool = True) -> jax.Array:
    """f = [tanh(d + H x), x] [batch, K]: the inputs of the output layer's U and W rows.

    deterministic=False (training) applies dropout, drawn from the 'dropout' rng, to x before
    both H and W, and to the hidden layer's output.
    """
    x = self.drop_features(self.C[contexts].reshape(contexts.shape[0], -1), deterministic=deterministic)
    parts = []
    if self.hidden_dim:
      dtype = jnp.dtype(self.compute_dtype)  # the matmul's operands; its sum and tanh stay float32
      hidden = jnp.matmul(x.astype(dtype), self.H.astype(dtype), preferred_element_type=jnp.float32)
      parts.append(self.drop_hidden(jnp.tanh(self.d + hidden), deterministic=deterministic))
    if self.direct:
      parts.append(x)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)

  def output_layer(self, params) -> jax.Array:
    """[U; W; b] [K + 1, padded |V|]: the stored output layer itself."""
    return params[OUTPUT]

  def __call__(self, contexts: jax.Array) -> jax.Array:
    """Dense logits [batch, padded |V|], padding at -inf (for tests and small vocabularies)."""
    logits = dense_logits(self.features(contexts), self.output)
    return jnp.where(jnp.arange(logits.shape[-1]) < self.vocab_size, logits, -jnp.inf)


def initial_output_layer(shape, vocab_size: int) -> jax.Array:
  """Zeros, with the bias of padded columns at PADDING_LOGIT."""
  out = jnp.zeros(shape, jnp.float32)
  return out.at[-1, vocab_size:].set(PADDING_LOGIT)


def dense_logits(f: jax.Array, output: jax.Array) -> jax.Array:
  """b + [U; W] f for whatever block of the vocabulary `output` holds; float32 whatever the inputs."""
  return output[-1].astype(jnp.float32) + jnp.matmul(f, output[:-1], preferred_element_type=jnp.float32)


def bias_row_mask(output_shape) -> np.ndarray:
  """1 on the output layer's weight rows, 0 on its bias row: the paper decays weights, not biases."""
  mask = np.ones((output_shape[0], 1), np.float32)
  mask[-1] = 0.0
  return mask


# model.compute_dtype = 'auto', by backend: bfloat16 on GPUs and TPUs, where it trained Brown reg4_n7
# and the PTB table network to within 0.01% of float32's test perplexity, 1.3x faster end to end
# and 2.3x a step at |V| 33k on an H100 (README, "GPUs and TPUs"); float32 on CPUs (no bf16 matmul units).
AUTO_COMPUTE_DTYPE = {'cpu': 'float32', 'accelerator': 'bfloat16'}


def compute_dtype(name: str, platform: str) -> str:
  """model.compute_dtype with 'auto' resolved for the backend `platform` ('cpu', 'gpu', 'tpu')."""
  if name != 'auto':
    return name
  return AUTO_COMPUTE_DTYPE['cpu' if platform == 'cpu' else 'accelerator']


def from_config(model_config, vocab_size: int, platform: str = 'cpu') -> NPLM:
  return NPLM(vocab_size=vocab_size, context_size=model_config.n - 1, embed_dim=model_config.m,
              hidden_dim=model_config.h, direct=model_config.direct,
              vocab_pad_multiple=model_config.vocab_pad_multiple,
              compute_dtype=compute_dtype(model_config.compute_dtype, platform),
              feature_dropout=model_config.feature_dropout,
              hidden_dropout=model_config.hidden_dropout)


def _boxed_params(model: nn.Module, seed: int = 0):
  """The parameters as flax creates them: each in a box naming its logical axes."""
  return model.init(jax.random.PRNGKey(seed), jnp.zeros((1, model.context_size), jnp.int32))['params']


def logical_specs(model: nn.Module) -> dict:
  """A PartitionSpec of logical axis names per parameter (PartitionSpec() where none was named)."""
  return nn.get_partition_spec(jax.eval_shape(lambda: _boxed_params(model)))


def init_params(model: nn.Module, unigram_counts: Optional[jax.Array] = None, seed: int = 0) -> dict[str, jax.Array]:
  """Parameters drawn from PRNGKey(seed), with b set to the log unigram distribution when counts are given.

  A unigram bias starts the network at the unigram model's perplexity instead of |V|'s. Any model
  family: the module's context_size, vocab_size and OUTPUT parameter (bias in its last row).
  """
  params = dict(nn.meta.unbox(_boxed_params(model, seed)))
  if unigram_counts is not None:
    counts = jnp.asarray(unigram_counts, jnp.float32) + 0.5  # no word at -inf
    log_p = jnp.log(counts / counts.sum())
    params[OUTPUT] = params[OUTPUT].at[-1, :model.vocab_size].set(log_p)
  return params


# Workdirs written before the output layer was one parameter hold U, W and b separately.
SEPARATE_OUTPUT_LAYER = ('U', 'W', 'b')


def has_separate_output_layer(param_names) -> bool:
  return 'b' in param_names and OUTPUT not in param_names


def separate_output_layer_target(model: NPLM, abstract_params: dict) -> dict:
  """The older layout's abstract parameters (U, W, b), placed like the output layer of `abstract_params`."""
  output = abstract_params[OUTPUT]
  bias_sharding = jax.sharding.NamedSharding(output.sharding.mesh, jax.sharding.PartitionSpec('model'))
  target = {k: v for k, v in abstract_params.items() if k != OUTPUT}
  for name, rows in model.output_rows().items():
    if name == 'b':
      target['b'] = jax.ShapeDtypeStruct(output.shape[-1:], output.dtype, sharding=bias_sharding)
    else:
      target[name] = jax.ShapeDtypeStruct((rows.stop - rows.start, output.shape[-1]), output.dtype,
                                          sharding=output.sharding)
  return target


def stack_separate_output_layer(model: NPLM, params: dict, output_sharding) -> dict:
  """Parameters of the older layout in this one: output = [U; W; b], the padded bias at PADDING_LOGIT."""
  def stack(parts):
    b = parts['b']
    b = jnp.where(jnp.arange(b.shape[-1]) < model.vocab_size, b, PADDING_LOGIT)
    return jnp.concatenate([parts[k] for k in ('U', 'W') if k in parts] + [b[None, :]], axis=0)
  separate = {k: params[k] for k in SEPARATE_OUTPUT_LAYER if k in params}
  stacked = {k: v for k, v in params.items() if k not in SEPARATE_OUTPUT_LAYER}
  stacked[OUTPUT] = jax.jit(stack, out_shardings=output_sharding)(separate)
  return stacked
