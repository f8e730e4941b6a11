"""Rows of the word-vector table C for a batch of contexts, with a choice of how their gradient is made.

C[ids]'s gradient is a scatter-add of each context position's gradient into its word's row. On GPUs,
XLA's deterministic mode (train.deterministic) makes that sum in a fixed order by expanding the
scatter to one index per element and sorting those (its ScatterDeterminismExpander): the H100's
figures (docs/accelerators.md) name it among the costs of a step (38% of reg4_n7's rate, 6 words a context), and the
revisited family gathers 255 words a context (16.7 M elements a step at batch 256, m = 256). Two
other forms give the same gradient (tests/test_model.py), deterministic without a scatter:
- 'one_hot': one_hot(ids)^T @ g, a matmul (float32 accumulation) with a [batch x context, |V|]
  one-hot operand: for short windows (the 2003 model), not hundreds of distant words;
- 'sorted': the ids sorted once (a stable sort), the rows' gradients summed along runs of one word by
  a segmented scan (a fixed tree of additions), and each word's total read at the end of its run
  (a binary search and a gather): memory linear in batch x context, whatever |V|. On one device, or
  data-parallel at the cost of gathering the batch's ids and gradients for the sort.

The revisited family's distant block reads hundreds of words a context only through learned weighted
sums (its kernels): weighted_sums gives those sums with C's share of the gradient made as a matmul,
A^T G, where A [batch x kernels, |V|] holds each example's kernel weights per word (built by a scatter
of scalars: batch x kernels x distant of them, not as many rows of m) and G the sums' gradients: the
same gradient (tests/test_revisited.py), deterministic without a scatter of rows. For a small vocabulary
(characters: |V| 50), weighted_sums_one_hot builds A from a one-hot block instead, and the sums as A C:
no gather, no scatter and no sort anywhere, forward or backward, only matmuls; its one-hot operand holds
distant x batch x |V| numbers (41 MB at 400 x 512 x 50 in float32), so it is refused past
ONE_HOT_LIMIT_BYTES (a vocabulary of words).
"""

import functools

import jax
import jax.numpy as jnp

from nplm_jax.errors import UserError

EMBEDDING_GRADIENTS = ('scatter', 'one_hot', 'sorted')
ONE_HOT_LIMIT_BYTES = 2**30  # weighted_sums_one_hot's one-hot block at most (float32)


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
  flat_ids = jnp.asarray(ids).reshape(-1).astype(jnp.int32)  # NumPy ids too: they are indexed with a traced order
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


def weighted_sums(table: jax.Array, ids: jax.Array, weights: jax.Array, scale: jax.Array) -> jax.Array:
  """sum_p weights[k, p] scale[p, b] table[ids[p, b]]: [kernels, batch, m] for ids [positions, batch]
  (position-major), weights [kernels, positions] and a scale per vector [positions, batch] (word
  dropout's mask, or ones), with C's gradient made as a matmul with the weights per word (the module
  docstring): model.distant_gradient='counts'. 'rows' is the gather and its gradient as any other."""
  return _weighted_sums_by_counts(table, ids, weights, scale)


@jax.custom_vjp
def weigh(weights, vectors):
  """weights [kernels, positions] times vectors [positions, batch, m]: [kernels, batch, m].

  The block is read as [positions, batch x m] by one matrix-vector product a kernel, forward and for the
  weights' gradient, and the vectors' gradient is made elementwise (`kernels` multiply-adds an element, one
  pass writing the block): XLA's CPU matmul ran the shapes autodiff gives (an output of, or a contraction
  over, 2-4 rows) at a fraction of the bandwidth (docs/performance.md)."""
  return _kernel_products(weights, vectors)


def _kernel_products(weights, vectors):
  """[kernels, batch, m]: weights[k] @ vectors, as matrix-vector products over batch x m."""
  positions, batch, m = vectors.shape
  block = vectors.reshape(positions, batch * m)
  return jnp.stack([weights[k] @ block for k in range(weights.shape[0])]).reshape(-1, batch, m)


def _weigh_forward(weights, vectors):
  return _kernel_products(weights, vectors), (weights, vectors)


def _weigh_backward(residuals, g):
  weights, vectors = residuals
  positions, batch, m = vectors.shape
  kernels = weights.shape[0]
  d_vectors = sum(weights[k][:, None, None].astype(g.dtype) * g[k][None] for k in range(kernels))
  block = vectors.reshape(positions, batch * m)
  d_weights = jnp.stack([block @ g[k].reshape(batch * m).astype(vectors.dtype) for k in range(kernels)])
  return d_weights.astype(weights.dtype), d_vectors.astype(vectors.dtype)


weigh.defvjp(_weigh_forward, _weigh_backward)


@jax.custom_vjp
def _weighted_sums_by_counts(table, ids, weights, scale):
  return weigh(weights, table[ids] * scale[..., None])


def _weighted_sums_forward(table, ids, weights, scale):
  # Nothing the size of the gathered block is kept: the backward pass gathers it again (a read, no scatter).
  return _weighted_sums_by_counts(table, ids, weights, scale), (table, ids, weights, scale)


def _weighted_sums_backward(residuals, g):
  table, ids, weights, scale = residuals
  kernels, batch, m = g.shape
  positions = ids.shape[0]
  vectors = table[ids] * scale[..., None]  # [positions, batch, m]
  d_weights = g.reshape(kernels, batch * m) @ vectors.reshape(positions, batch * m).T
  # A[b * kernels + k, v] = sum over the positions p holding word v of weights[k, p] scale[p, b]
  values = weights[:, :, None] * scale[None, :, :]  # [kernels, positions, batch]
  row = jnp.arange(batch)[None, None, :] * kernels + jnp.arange(kernels)[:, None, None]
  word = jnp.broadcast_to(ids[None], values.shape)
  counts = jnp.zeros((batch * kernels, table.shape[0]), jnp.float32).at[
      jnp.broadcast_to(row, values.shape).reshape(-1), word.reshape(-1)].add(values.reshape(-1).astype(jnp.float32))
  sums_grad = g.transpose(1, 0, 2).reshape(batch * kernels, m)  # row b * kernels + k
  d_table = jnp.matmul(counts.T, sums_grad.astype(jnp.float32), preferred_element_type=jnp.float32)
  return d_table.astype(table.dtype), None, d_weights.astype(weights.dtype), None


_weighted_sums_by_counts.defvjp(_weighted_sums_forward, _weighted_sums_backward)


def check_one_hot_block(positions: int, batch: int, vocab: int) -> None:
  """One line of error where weighted_sums_one_hot's one-hot block would pass ONE_HOT_LIMIT_BYTES (a run
  checks its batch sizes before it writes anything; the step checks again as it is traced)."""
  block_bytes = 4 * positions * batch * vocab
  if block_bytes > ONE_HOT_LIMIT_BYTES:
    raise UserError(f"model.distant_gradient='one_hot' would hold a one-hot block of {block_bytes / 2**30:.1f} GiB "
                    f'({positions} distant words x batch {batch} x |V| {vocab}); it is for small vocabularies '
                    '(characters): use --config.model.distant_gradient=counts or rows')


def weighted_sums_one_hot(table: jax.Array, ids: jax.Array, weights: jax.Array, scale: jax.Array) -> jax.Array:
  """weighted_sums' numbers (model.distant_gradient='one_hot') as A C, A [kernels, batch, |V|] each example's
  kernel weights per word made from a one-hot block of the ids: for small vocabularies (the module
  docstring); every gradient is a matmul's. One line of error where the block would pass ONE_HOT_LIMIT_BYTES."""
  vocab = table.shape[0]
  check_one_hot_block(*ids.shape, vocab)
  words = jax.nn.one_hot(ids, vocab, dtype=jnp.float32) * scale[..., None].astype(jnp.float32)  # [positions, batch, |V|]
  per_word = jnp.einsum('kp,pbv->kbv', weights.astype(jnp.float32), words)
  sums = jnp.einsum('kbv,vm->kbm', per_word, table.astype(jnp.float32))
  return sums.astype(table.dtype)
