"""Brown corpus, Bengio et al. (2003) Table 1. Variants: brown.py:mlp1 (default) ... brown.py:mlp9.

python -m nplm_jax.main --config=experiments/brown.py:mlp1 --workdir=runs/brown_mlp1
"""

from nplm_jax.config import base_config

# The paper's network rows (without the trigram mixture): n, h, m, direct connections.
VARIANTS = {
    'mlp1': dict(n=5, h=50, m=60, direct=True),
    'mlp3': dict(n=5, h=0, m=60, direct=True),
    'mlp5': dict(n=5, h=50, m=30, direct=True),
    'mlp7': dict(n=3, h=50, m=30, direct=True),
    'mlp9': dict(n=5, h=100, m=30, direct=False),
}


def get_config(variant: str = 'mlp1'):
  variant = variant or 'mlp1'
  if variant not in VARIANTS:
    raise ValueError(f'unknown Brown variant {variant!r}; use one of {", ".join(VARIANTS)}')
  config = base_config()
  config.data.corpus = 'brown'
  config.model.update(VARIANTS[variant])
  return config
