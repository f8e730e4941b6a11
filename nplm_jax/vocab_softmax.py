"""The paper's parameter-parallel softmax: the output layer split by vocabulary blocks.

Each 'model' shard holds a block of columns of the output layer [U; W; b] and computes only its
block of the logits. In the forward pass shards exchange per-example scalars alone: the maximum (pmax), the sum
of exponentials (psum), and the target's logit, which only its owner contributes (masked psum);
the backward pass sums the shards' [batch, K] feature gradients. The [batch, |V|] logits are
never gathered. On a (1, 1) mesh this is the ordinary log-softmax.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P



def _block_forward(f, w, b, targets):
  """This shard's raw logits block z = f w [B, |V|/model], and per example -log P(target) and log Z.

  b is the float32 bias of the block, or None when it is folded into f and w.
  """
  block = w.shape[-1]
  first = lax.axis_index('model') * block
  z = jnp.matmul(f, w, preferred_element_type=jnp.float32)
  logits = z if b is None else z + b
  global_max = lax.pmax(jnp.max(logits, axis=-1), 'model')  # only stabilises exp
  log_z = jnp.log(lax.psum(jnp.sum(jnp.exp(logits - global_max[:, None]), axis=-1), 'model')) + global_max
  local = targets - first
  owned = (local >= 0) & (local < block)
  column = jnp.clip(local, 0, block - 1)
  picked = jnp.take_along_axis(z, column[:, None], axis=-1)[:, 0] + (0.0 if b is None else b[column])
  target_logit = lax.psum(jnp.where(owned, picked, 0.0), 'model')
  return log_z - target_logit, z, log_z


def _block_backward(f, w, b, z, log_z, targets, g):
  """Gradients of sum(g * nll) from this shard's block: dlogits = g (softmax - onehot), in one pass.

  A separate bias gets its gradient summed from the float32 dlogits, whatever the matmuls' dtype.
  """
  block = z.shape[-1]
  columns = lax.axis_index('model') * block + jnp.arange(block)
  logits = z if b is None else z + b
  dlogits = g[:, None] * (jnp.exp(logits - log_z[:, None]) - (columns[None, :] == targets[:, None]))
  db = None if b is None else lax.psum(jnp.sum(dlogits, axis=0), 'data')
  dlogits = dlogits.astype(f.dtype)
  df = lax.psum(jnp.matmul(dlogits, w.T, preferred_element_type=jnp.float32), 'model')
  dw = lax.psum(jnp.matmul(f.T, dlogits, preferred_element_type=jnp.float32), 'data')
  return df.astype(f.dtype), dw.astype(w.dtype), db


def _block_backward_recomputed(f, w, b, log_z, targets, g):
  """_block_backward with the logits block recomputed (f w) instead of saved."""
  return _block_backward(f, w, b, jnp.matmul(f, w, preferred_element_type=jnp.float32), log_z, targets, g)


def _vocab_parallel_nll(f, w, b, targets, *, mesh, recompute=False):
  """-log P(target) for features f [B, K], output weights w [K, |V|] and a float32 bias b [|V|]
  (None when it is folded into f and w).

  A custom VJP: autodiff of the log-softmax makes several [B, |V|] passes (exp, normalise, the
  target's scatter, the sum for the bias); here the gradient of the logits is one fused pass over
  the saved raw logits, followed by the two matmuls. With bfloat16 f and w the matmuls run in
  bfloat16 (float32 accumulation); the bias, the softmax and the bias gradient stay float32.
  recompute: save only f, log Z and the targets, and recompute the logits block in the backward
  pass (one more matmul): a step over chunks then holds one chunk's [chunk, |V| / model] logits at
  a time instead of every chunk's.
  """
  forward = jax.shard_map(_block_forward, mesh=mesh,
                          in_specs=(P('data', None), P(None, 'model'), P('model'), P('data')),
                          out_specs=(P('data'), P('data', 'model'), P('data')))
  gradients = (P('data', None), P(None, 'model'), P('model'))
  backward = jax.shard_map(_block_backward, mesh=mesh, out_specs=gradients, in_specs=(
      P('data', None), P(None, 'model'), P('model'), P('data', 'model'), P('data'), P('data'), P('data')))
  backward_recomputed = jax.shard_map(_block_backward_recomputed, mesh=mesh, out_specs=gradients, in_specs=(
      P('data', None), P(None, 'model'), P('model'), P('data'), P('data'), P('data')))

  @jax.custom_vjp
  def nll(f, w, b, targets):
    return forward(f, w, b, targets)[0]

  def nll_fwd(f, w, b, targets):
    value, z, log_z = forward(f, w, b, targets)
    return value, (f, w, b, None if recompute else z, log_z, targets)

  def nll_bwd(residuals, g):
    f, w, b, z, log_z, targets = residuals
    if z is None:
      return (*backward_recomputed(f, w, b, log_z, targets, g), None)
    return (*backward(f, w, b, z, log_z, targets, g), None)

  nll.defvjp(nll_fwd, nll_bwd)
  return nll(f, w, b, targets)


def with_bias_column(f):
  """[f, 1]: multiplied by the output layer [U; W; b] it gives the logits, bias included."""
  return jnp.concatenate([f, jnp.ones((f.shape[0], 1), f.dtype)], axis=-1)


def token_nll(f, output, targets, *, mesh, compute_dtype='float32', recompute=False):
  """-log P(target | context) per example, batch sharded on 'data', vocabulary on 'model'.

  f [B, K] are the features, output [K + 1, |V|] the output layer [U; W; b]. In float32 the bias
  is folded into the matmul, [f, 1] @ output: no pass of its own over the [B, |V|] logits (a
  separate add made the float32 step 10-17% slower on CPU) and no copy of the output layer. In
  bfloat16 the weight rows are cast (a pass that cast needs anyway) and the bias stays float32.
  recompute: the backward pass recomputes the logits instead of keeping them (_vocab_parallel_nll).
  """
  if compute_dtype == 'float32':
    return _vocab_parallel_nll(with_bias_column(f), output, None, targets, mesh=mesh, recompute=recompute)
  dtype = jnp.dtype(compute_dtype)
  return _vocab_parallel_nll(f.astype(dtype), output[:-1].astype(dtype), output[-1], targets, mesh=mesh,
                             recompute=recompute)


def dense_token_nll(logits, targets):
  """The reference: -log_softmax(logits)[target] on the full logits."""
  log_p = jax.nn.log_softmax(logits, axis=-1)
  return -jnp.take_along_axis(log_p, targets[:, None], axis=-1)[:, 0]


def _owned_columns(ids, first, block):
  local = ids - first
  return (local >= 0) & (local < block), jnp.clip(local, 0, block - 1)


def _block_sampled_logits(f, output, targets, samples):
  """Logits of each example's target [B] and of the shared noise samples [B, k], from all shards.

  f = [features, 1]; each shard scores only the columns it owns; a psum of per-example scalars
  combines them.
  """
  block = output.shape[-1]
  first = lax.axis_index('model') * block
  t_owned, t_idx = _owned_columns(targets, first, block)
  s_owned, s_idx = _owned_columns(samples, first, block)
  target_logit = jnp.einsum('bk,kb->b', f, output[:, t_idx], preferred_element_type=jnp.float32)
  sample_logits = jnp.matmul(f, output[:, s_idx], preferred_element_type=jnp.float32)
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


def sampled_token_loss(f, output, targets, samples, log_q, *, mesh, kind):
  """A sampled training loss per example, batch on 'data', vocabulary on 'model'.

  Costs O(B k) output-layer work instead of O(B |V|); `samples` [k] are shared by the batch.
  """
  logits = jax.shard_map(_block_sampled_logits, mesh=mesh,
                         in_specs=(P('data', None), P(None, 'model'), P('data'), P()),
                         out_specs=(P('data'), P('data', None)))
  target_logit, sample_logits = logits(with_bias_column(f), output, targets, samples)
  return sampled_loss_from_logits(kind, target_logit, sample_logits, targets, samples, log_q)
