"""Rows of the word-vector table C for a batch of contexts, with a choice of how their gradient is made.

C[ids]'s gradient is a scatter-add of each context position's gradient into its word's row. On GPUs,
XLA's deterministic mode (train.deterministic) makes that sum in a fixed order by expanding the
scatter to one index per element and sorting those (its ScatterDeterminismExpander): README's H100
figures name it among the costs of a step (38% of reg4_n7's rate, 6 words a context), and the
revisited family gathers 255 words a context (16.7 M elements a step at batch 256, m = 256). Two
other forms give the same gradient (tests/test_model.py), deterministic without a scatter:
- 'one_hot': one_hot(ids)^T @ g, a matmul (float32 accumulation) with a [batch x context, |V|]
  one-hot operand: for short windows (the 2003 model), not hundreds of distant words;
- 'sorted': the ids sorted once (a stable sort), the rows' gradients summed along runs of one word by
  a segmented scan (a fixed tree of additions), and each word's total read at the end of its run
  (a binary search and a gather): memory linear in batch x context, whatever |V|. On one device, or
  data-parallel at the cost of gathering the batch's ids and gradients for the sort.
"""

import functools

import jax
import jax.numpy as jnp

EMBEDDING_GRADIENTS = ('scatter', 'one_hot', 'sorted')


def rows(table: jax.Array, ids: jax.Array, gradient: str = 'scatter') -> jax.Array:
  """table[ids] ([*ids.shape, m]), its gradient with respect to the table made as `gradient` says."""
  if gradient == 'scatter':
    return table[ids]
  if gradient in _CUSTOM_GRADIENT_ROWS:
    return _CUSTOM_GRADIENT_ROWS[gradient](table.shape[0], table, ids)
  raise ValueError(f'unknown embedding gradient {gradient!r}; use one of {EMBEDDING_GRADIENTS}')


def _forward(vocab_size, table, ids):
  del vocab_size
  return table[ids], (ids, jnp.zeros((), table.dtype))


def _backward_one_hot(vocab_size, residuals, g):
  ids, like = residuals
  flat_ids, flat_g = ids.reshape(-1), g.reshape(-1, g.shape[-1])
  one_hot = jax.nn.one_hot(flat_ids, vocab_size, dtype=flat_g.dtype)
  d_table = jnp.einsum('nv,nm->vm', one_hot, flat_g, preferred_element_type=jnp.float32).astype(like.dtype)
  return d_table, None


def _backward_sorted(vocab_size, residuals, g):
  ids, like = residuals
  flat_ids = ids.reshape(-1).astype(jnp.int32)
  flat_g = g.reshape(-1, g.shape[-1]).astype(jnp.float32)
  order = jnp.argsort(flat_ids, stable=True)
  sorted_ids, sorted_g = flat_ids[order], flat_g[order]

  def add_within_runs(left, right):
    # right's value sums its elements of its last id; left's, its elements of left's last id. Sorted
    # ids make right all one word when the two last ids agree, so the sum then extends right's run.
    (left_sum, left_id), (right_sum, right_id) = left, right
    return jnp.where((left_id == right_id)[..., None], left_sum + right_sum, right_sum), right_id

  run_sums, _ = jax.lax.associative_scan(add_within_runs, (sorted_g, sorted_ids))
  words = jnp.arange(vocab_size, dtype=jnp.int32)
  run_ends = jnp.maximum(jnp.searchsorted(sorted_ids, words, side='right') - 1, 0)
  present = sorted_ids[run_ends] == words
  d_table = jnp.where(present[:, None], run_sums[run_ends], 0.0).astype(like.dtype)
  return d_table, None


def _rows_with_gradient(backward):
  """table[ids] (arguments: vocab_size, table, ids) whose gradient with respect to the table is `backward`'s."""
  @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
  def rows_(vocab_size, table, ids):
    del vocab_size
    return table[ids]
  rows_.defvjp(_forward, backward)
  return rows_


_CUSTOM_GRADIENT_ROWS = {'one_hot': _rows_with_gradient(_backward_one_hot), 'sorted': _rows_with_gradient(_backward_sorted)}
