"""The paper's parameter-parallel softmax: the output layer split by vocabulary blocks.

Each 'model' shard holds a block of columns of U, W and b and computes only its block of the
logits. Shards exchange per-example scalars alone: the maximum (pmax), the sum of exponentials
(psum), and the target's logit, which only its owner contributes (masked psum). The [batch, |V|]
logits are never gathered. On a (1, 1) mesh this is the ordinary log-softmax.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from nplm_jax import model as model_lib


def _block_nll(feats, out, targets, *, vocab_size):
  """Per-example -log P(target) from this shard's block of the vocabulary."""
  block = out['b'].shape[-1]
  first = lax.axis_index('model') * block
  logits = model_lib.mask_padding(model_lib.output_block_logits(feats, out), first, vocab_size)
  # The max only stabilises exp; log-sum-exp's gradient does not depend on it.
  block_max = lax.stop_gradient(jnp.max(logits, axis=-1))
  global_max = lax.pmax(block_max, 'model')
  sum_exp = lax.psum(jnp.sum(jnp.exp(logits - global_max[:, None]), axis=-1), 'model')
  local = targets - first
  owned = (local >= 0) & (local < block)
  picked = jnp.take_along_axis(logits, jnp.clip(local, 0, block - 1)[:, None], axis=-1)[:, 0]
  target_logit = lax.psum(jnp.where(owned, picked, 0.0), 'model')
  return jnp.log(sum_exp) + global_max - target_logit


def token_nll(feats, out, targets, *, mesh, vocab_size):
  """-log P(target | context) per example, batch sharded on 'data', vocabulary on 'model'."""
  feat_specs = {k: P('data', None) for k in feats}
  out_specs = {k: (P('model') if k == 'b' else P(None, 'model')) for k in out}
  fn = jax.shard_map(functools.partial(_block_nll, vocab_size=vocab_size), mesh=mesh,
                     in_specs=(feat_specs, out_specs, P('data')), out_specs=P('data'))
  return fn(feats, out, targets)


def dense_token_nll(logits, targets):
  """The reference: -log_softmax(logits)[target] on the full logits."""
  log_p = jax.nn.log_softmax(logits, axis=-1)
  return -jnp.take_along_axis(log_p, targets[:, None], axis=-1)[:, 0]
