"""Penn Treebank (Mikolov's split): python -m nplm_jax.main --config=experiments/ptb.py --workdir=runs/ptb

Set --config.data.path to the folder holding ptb.{train,valid,test}.txt (default: $PTB_DIR).
Variant 'char' (experiments/ptb.py:char) is the character-level model: the same text as
characters ('_' for a space, <eos> per line), n = 11, results also in bits per character.
"""

import os

from nplm_jax.config import base_config, char_level


def get_config(arg: str = ''):
  if arg not in ('', 'char'):
    raise ValueError(f"unknown PTB variant {arg!r}; use experiments/ptb.py or experiments/ptb.py:char")
  config = base_config()
  config.name = 'ptb'
  config.data.corpus = 'ptb'
  config.data.path = os.environ.get('PTB_DIR', '')
  config.data.max_rare_count = 0  # PTB already maps rare words to <unk>
  config.data.vocab_scope = 'train'
  config.model.update(n=5, h=100, m=60, direct=True)
  if arg == 'char':
    config.name = 'ptb_char'
    char_level(config)
  return config


# The PTB network's setting (optimizer.weight_decay is AdamW's decoupled decay, lr x decay a step:
# 0.01 measured better than 0 at every point of the regularised sweep).
REGULARISED = {'model.m': 200, 'model.h': 500, 'model.hidden_dropout': 0.5, 'optimizer.name': 'adamw',
               'train.batch_size': 256, 'train.eval_every': 1815, 'train.patience': 3, 'train.num_epochs': 20,
               'mix.enabled': True, 'mix.ngram_order': 5, 'mix.smoothing': 'kneser_ney'}


def get_sweep(name: str):
  """PTB beside Mikolov et al.: n-gram baselines, and the network with its KN5 mixture."""
  ngrams = [dict(name=f'kneser_ney_{n}', kind='ngram', config='experiments/ptb.py', order=n, smoothing='kneser_ney')
            for n in (3, 5)]
  if name == 'ngrams':
    return ngrams
  if name == 'table':
    # The network beside Mikolov et al.'s: the regularised sweep's best point alone (RESULTS.md), with
    # its KN5 mixture. AdamW converges in a few epochs here; evaluation every half epoch lets early
    # stopping catch the peak before it overfits.
    return ngrams + [dict(name='nplm_kn5_mix', kind='train', config='experiments/ptb.py',
                          overrides={**REGULARISED, 'model.feature_dropout': 0.2, 'optimizer.weight_decay': 0.01})]
  if name == 'regularised':
    # Wider, with dropout; context length, feature dropout and weight decay measured (RESULTS.md).
    return [dict(name=f'n{n}_feature_dropout{fd}_weight_decay{wd}', kind='train', config='experiments/ptb.py',
                 overrides={**REGULARISED, 'model.n': n, 'model.feature_dropout': fd, 'optimizer.weight_decay': wd})
            for n in (5, 8) for fd in (0.2, 0.4) for wd in (0.0, 0.01)]
  raise ValueError(f"unknown PTB sweep {name!r}; use 'ngrams', 'table' or 'regularised'")
