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


def _block_specs(feats, out):
  """Features split on the batch ('data'); U, W, b on the vocabulary ('model')."""
  return ({k: P('data', None) for k in feats}, {k: (P('model') if k == 'b' else P(None, 'model')) for k in out})


def token_nll(feats, out, targets, *, mesh, vocab_size):
  """-log P(target | context) per example, batch sharded on 'data', vocabulary on 'model'."""
  feat_specs, out_specs = _block_specs(feats, out)
  fn = jax.shard_map(functools.partial(_block_nll, vocab_size=vocab_size), mesh=mesh,
                     in_specs=(feat_specs, out_specs, P('data')), out_specs=P('data'))
  return fn(feats, out, targets)


def dense_token_nll(logits, targets):
  """The reference: -log_softmax(logits)[target] on the full logits."""
  log_p = jax.nn.log_softmax(logits, axis=-1)
  return -jnp.take_along_axis(log_p, targets[:, None], axis=-1)[:, 0]


def _owned_columns(ids, first, block):
  local = ids - first
  return (local >= 0) & (local < block), jnp.clip(local, 0, block - 1)


def _block_sampled_logits(feats, out, targets, samples):
  """Logits of each example's target [B] and of the shared noise samples [B, k], from all shards.

  Each shard scores only the columns it owns; a psum of per-example scalars combines them.
  """
  block = out['b'].shape[-1]
  first = lax.axis_index('model') * block
  t_owned, t_idx = _owned_columns(targets, first, block)
  s_owned, s_idx = _owned_columns(samples, first, block)
  target_logit = out['b'][t_idx]
  sample_logits = jnp.broadcast_to(out['b'][s_idx], (targets.shape[0], samples.shape[0]))
  for name, f in feats.items():
    target_logit = target_logit + jnp.einsum('bk,kb->b', f, out[name][:, t_idx], preferred_element_type=jnp.float32)
    sample_logits = sample_logits + jnp.matmul(f, out[name][:, s_idx], preferred_element_type=jnp.float32)
  target_logit = lax.psum(jnp.where(t_owned, target_logit, 0.0), 'model')
  sample_logits = lax.psum(jnp.where(s_owned[None, :], sample_logits, 0.0), 'model')
  return target_logit, sample_logits


def sampled_loss_from_logits(kind, target_logit, sample_logits, targets, samples, log_q):
  """Per-example sampled loss; `log_q` holds log noise probabilities over the vocabulary.

  sampled_softmax: importance-sampled softmax over {target} + samples, logits corrected by
  -log(k q(w)), samples equal to the target removed. nce: noise-contrastive estimation with k
  noise words per example and the network's logits taken as self-normalised log-probabilities.
  """
  k = samples.shape[0]
  log_kq_t = jnp.log(k) + log_q[targets]
  log_kq_s = jnp.log(k) + log_q[samples]
  if kind == 'sampled_softmax':
    t = target_logit - log_kq_t
    s = jnp.where(samples[None, :] == targets[:, None], -jnp.inf, sample_logits - log_kq_s[None, :])
    return jax.nn.logsumexp(jnp.concatenate([t[:, None], s], axis=1), axis=1) - t
  if kind == 'nce':
    return jax.nn.softplus(-(target_logit - log_kq_t)) + jnp.sum(
        jax.nn.softplus(sample_logits - log_kq_s[None, :]), axis=1)
  raise ValueError(f'unknown sampled loss {kind!r}')


def sampled_token_loss(feats, out, targets, samples, log_q, *, mesh, kind):
  """A sampled training loss per example, batch on 'data', vocabulary on 'model'.

  Costs O(B k) output-layer work instead of O(B |V|); `samples` [k] are shared by the batch.
  """
  feat_specs, out_specs = _block_specs(feats, out)
  logits = jax.shard_map(_block_sampled_logits, mesh=mesh,
                         in_specs=(feat_specs, out_specs, P('data'), P()), out_specs=(P('data'), P('data', None)))
  target_logit, sample_logits = logits(feats, out, targets, samples)
  return sampled_loss_from_logits(kind, target_logit, sample_logits, targets, samples, log_q)
