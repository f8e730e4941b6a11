"""A corpus prepared by nplm_jax.data.prepare (memory-mapped token ids), for large corpora:

python -m nplm_jax.data.prepare --config=experiments/ptb.py --output=runs/ptb_prepared
python -m nplm_jax.main --config=experiments/prepared.py --config.data.path=runs/ptb_prepared

The vocabulary, rare-word rule and tokenisation are the prepared folder's (its meta.json); the
model and training are the defaults (MLP1's shape), overridable as usual.
"""

from nplm_jax.config import base_config


def get_config(arg: str = ''):
  if arg:
    raise ValueError(f'unknown prepared variant {arg!r}; use experiments/prepared.py and --config.data.path=DIR')
  config = base_config()
  config.name = 'prepared'
  config.data.corpus = 'prepared'
  return config
