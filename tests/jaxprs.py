"""Reading traced programs in tests: every equation of a jaxpr, its inner jaxprs' included (jit, shard_map,
loops, conditionals, custom rules), for tests that count or inspect what a program does."""

from collections.abc import Iterator


def equations(jaxpr) -> Iterator:
  """Each equation of `jaxpr` (a Jaxpr or ClosedJaxpr), then, depth first, those of the jaxprs in its
  parameters (alone, or in lists and tuples such as a conditional's branches)."""
  for eqn in getattr(jaxpr, 'jaxpr', jaxpr).eqns:
    yield eqn
    for value in eqn.params.values():
      for inner in value if isinstance(value, (list, tuple)) else (value,):
        if hasattr(inner, 'jaxpr') or hasattr(inner, 'eqns'):
          yield from equations(inner)
