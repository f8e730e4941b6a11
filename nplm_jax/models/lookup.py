"""Rows of the word-vector table C for a batch of contexts, with a choice of how their gradient is made.

C[ids]'s gradient is a scatter-add of each context position's gradient into its word's row. On GPUs,
XLA's deterministic mode (train.deterministic) sorts the ids to make that sum in a fixed order, which
README's H100 figures name among the costs of the research-size step. 'one_hot' makes the same sum a
matmul instead, one_hot(ids)^T @ g (float32 accumulation): deterministic without a sort, at the cost
of a [batch x context, |V|] one-hot operand, which suits short windows (the 2003 model), not the
revisited family's hundreds of distant words. Both give the same gradient (tests/test_model.py).
"""

import functools

import jax
import jax.numpy as jnp

EMBEDDING_GRADIENTS = ('scatter', 'one_hot')


def rows(table: jax.Array, ids: jax.Array, gradient: str = 'scatter') -> jax.Array:
  """table[ids] ([*ids.shape, m]), its gradient with respect to the table made as `gradient` says."""
  if gradient == 'scatter':
    return table[ids]
  if gradient == 'one_hot':
    return _rows_one_hot_gradient(table.shape[0], table, ids)
  raise ValueError(f'unknown embedding gradient {gradient!r}; use one of {EMBEDDING_GRADIENTS}')


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _rows_one_hot_gradient(vocab_size, table, ids):
  del vocab_size
  return table[ids]


def _forward(vocab_size, table, ids):
  del vocab_size
  return table[ids], (ids, jnp.zeros((), table.dtype))


def _backward(vocab_size, residuals, g):
  ids, like = residuals
  flat_ids, flat_g = ids.reshape(-1), g.reshape(-1, g.shape[-1])
  one_hot = jax.nn.one_hot(flat_ids, vocab_size, dtype=flat_g.dtype)
  d_table = jnp.einsum('nv,nm->vm', one_hot, flat_g, preferred_element_type=jnp.float32).astype(like.dtype)
  return d_table, None


_rows_one_hot_gradient.defvjp(_forward, _backward)
