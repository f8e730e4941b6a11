"""Checksums of a tree of arrays, computed on the devices: what a checkpoint records to prove later
that its arrays are the ones saved.

Each array's bits, read as unsigned integers x_i (float32 as uint32, bfloat16 as uint16, ...), give
two sums modulo 2^32: sum of x_i (2 i + 1) and sum of x_i rotated left by i mod 32 bits. Integer
sums are exact and order-free, so the result does not depend on the mesh an array is split over;
the odd weights make every single changed bit change the first sum. Computing them is one pass over
the arrays on their devices and 8 bytes an array back to the host.
"""

import jax
import jax.numpy as jnp
import numpy as np

_UNSIGNED = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}


def _flat_index(shape) -> jax.Array:
  """Each element's row-major position modulo 2^32, in the array's own shape (no reshape, so a
  sharded array stays where it is)."""
  index, stride = jnp.zeros(shape, jnp.uint32), 1
  for axis in reversed(range(len(shape))):
    index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride % 2**32)
    stride *= shape[axis]
  return index


def _sums(x: jax.Array) -> jax.Array:
  """[2] uint32 checksums of one array's bits."""
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  bits = jax.lax.bitcast_convert_type(x, _UNSIGNED[x.dtype.itemsize]).astype(jnp.uint32)
  index = _flat_index(bits.shape)
  weighted = jnp.sum(bits * (2 * index + 1), dtype=jnp.uint32)
  shift = index % 32
  rotated = jnp.sum((bits << shift) | (bits >> ((32 - shift) % 32)), dtype=jnp.uint32)
  return jnp.stack([weighted, rotated])


_tree_sums = jax.jit(lambda tree: jax.tree.map(_sums, tree))


def checksums(tree) -> dict[str, str]:
  """{path in the tree: 16 hex digits} for every array leaf."""
  sums = jax.device_get(_tree_sums(tree))
  flat, _ = jax.tree_util.tree_flatten_with_path(sums)
  return {jax.tree_util.keystr(path): ''.join(f'{int(v):08x}' for v in np.asarray(s)) for path, s in flat}


def mismatches(tree, expected: dict[str, str]) -> list[str]:
  """The paths whose arrays no longer have their recorded checksum (or that the record lacks)."""
  found = checksums(tree)
  return sorted(k for k in found.keys() | expected.keys() if found.get(k) != expected.get(k))
