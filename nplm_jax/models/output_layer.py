"""The output layer both model families share: one parameter [U; W; b] ([K + 1, padded |V|], its
last axis the vocabulary's, its last row the bias), its initial values and padding, the dense
reference logits, and the parameters' creation with their logical axis names.

The output layer spans a padded vocabulary (a multiple of `vocab_pad_multiple`, so the vocabulary
axis splits evenly over devices). Padded columns hold zero weights and a bias of PADDING_LOGIT:
exp() gives them no probability, so they receive no gradient and keep those values. vocab_softmax
applies the layer block by block, so the [batch, |V|] logits never need to exist on one device.
"""

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

OUTPUT = 'output'  # the output layer [U; W; b]: its last axis is the vocabulary's
# Parameters are created with the names of their axes (flax's logical partitioning): 'vocab', 'words'
# (C's rows), 'embed', 'context' (x's features), 'hidden', 'features' (the output layer's rows);
# config.mesh.axis_rules places each on the mesh (sharding.named_shardings).
with_axes = nn.with_logical_partitioning
# The bias of padded vocabulary columns: exp() of it is 0, and unlike -inf, 0 times it is 0.
PADDING_LOGIT = -1e30


def padded_size(vocab_size: int, multiple: int) -> int:
  return -(-vocab_size // multiple) * multiple




class OutputLayerModel:
  """What both families' modules share beyond their fields (vocab_size, vocab_pad_multiple, the
  dropout rates feature_dropout, hidden_dropout and word_dropout): mixed into each nn.Module."""

  @property
  def has_dropout(self) -> bool:
    return bool(self.feature_dropout or self.hidden_dropout or self.word_dropout)

  @property
  def padded_vocab_size(self) -> int:
    return padded_size(self.vocab_size, self.vocab_pad_multiple)


def word_dropout(rate: float) -> nn.Dropout:
  """Dropout of whole word vectors: on [..., m] vectors, one draw per vector (its m features share it)."""
  return nn.Dropout(rate, broadcast_dims=(-1,))


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



def boxed_params(model: nn.Module, seed: int = 0):
  """The parameters as flax creates them: each in a box naming its logical axes."""
  return model.init(jax.random.PRNGKey(seed), jnp.zeros((1, model.context_size), jnp.int32))['params']


def logical_specs(model: nn.Module) -> dict:
  """A PartitionSpec of logical axis names per parameter (PartitionSpec() where none was named)."""
  return nn.get_partition_spec(jax.eval_shape(lambda: boxed_params(model)))


def init_params(model: nn.Module, unigram_counts: Optional[jax.Array] = None, seed: int = 0) -> dict[str, jax.Array]:
  """Parameters drawn from PRNGKey(seed), with b set to the log unigram distribution when counts are given.

  A unigram bias starts the network at the unigram model's perplexity instead of |V|'s. Any model
  family: the module's context_size, vocab_size and OUTPUT parameter (bias in its last row).
  """
  params = dict(nn.meta.unbox(boxed_params(model, seed)))
  if unigram_counts is not None:
    counts = jnp.asarray(unigram_counts, jnp.float32) + 0.5  # no word at -inf
    log_p = jnp.log(counts / counts.sum())
    params[OUTPUT] = params[OUTPUT].at[-1, :model.vocab_size].set(log_p)
  return params


# Workdirs written before the output layer was one parameter hold U, W and b separately.
SEPARATE_OUTPUT_LAYER = ('U', 'W', 'b')


def has_separate_output_layer(param_names) -> bool:
  return 'b' in param_names and OUTPUT not in param_names


def separate_output_layer_target(model, abstract_params: dict) -> dict:
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


def stack_separate_output_layer(model, params: dict, output_sharding) -> dict:
  """Parameters of the older layout in this one: output = [U; W; b], the padded bias at PADDING_LOGIT."""
  def stack(parts):
    b = parts['b']
    b = jnp.where(jnp.arange(b.shape[-1]) < model.vocab_size, b, PADDING_LOGIT)
    return jnp.concatenate([parts[k] for k in ('U', 'W') if k in parts] + [b[None, :]], axis=0)
  separate = {k: params[k] for k in SEPARATE_OUTPUT_LAYER if k in params}
  stacked = {k: v for k, v in params.items() if k not in SEPARATE_OUTPUT_LAYER}
  stacked[OUTPUT] = jax.jit(stack, out_shardings=output_sharding)(separate)
  return stacked
