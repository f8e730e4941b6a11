"""Penn Treebank (Mikolov's split): python -m nplm_jax.main --config=experiments/ptb.py --workdir=runs/ptb

Set --config.data.path to the folder holding ptb.{train,valid,test}.txt (default: $PTB_DIR).
Variant 'char' (experiments/ptb.py:char) is the character-level model: the same text as
characters ('_' for a space, <eos> per line), n = 11, results also in bits per character.

The revisited family's ablation ladder (LADDER, CHAR_LADDER): experiments/ptb.py:ladder3_distant,
... one change at a time from the 2003 table network; the sweep 'ladder' trains every row.
experiments/ptb.py:best and experiments/ptb.py:char_best are the lowest test figures recorded (BEST).
"""

import os

from nplm_jax.config import CHAR_REVISITED, COSINE_TO_ZERO, apply_overrides, base_config, char_level, cumulative_overrides


def get_config(arg: str = ''):
  if arg in BEST:
    row, overrides = BEST[arg]
    config = apply_overrides(ladder_config(row), overrides)
    config.name = f'ptb_{arg}'
    return config
  if arg in LADDER_NAMES or arg in CHAR_LADDER_NAMES:
    return ladder_config(arg)
  if arg not in ('', 'char'):
    raise ValueError(f"unknown PTB variant {arg!r}; use experiments/ptb.py, experiments/ptb.py:char, "
                     f"{', '.join(BEST)} or a ladder row ({', '.join(LADDER_NAMES + CHAR_LADDER_NAMES)})")
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


# The PTB network's setting (optimizer.weight_decay is AdamW's decoupled decay, lr x decay a step; the
# regularised sweep measures it against 0).
REGULARISED = {'model.m': 200, 'model.h': 500, 'model.hidden_dropout': 0.5, 'optimizer.name': 'adamw',
               'train.batch_size': 256, 'train.eval_every': 1815, 'train.patience': 3, 'train.num_epochs': 20,
               'mix.enabled': True, 'mix.ngram_order': 5, 'mix.smoothing': 'kneser_ney'}

ANNEALED = {'train.anneal_factor': 0.5, 'train.anneal_threshold': 0.01, 'train.patience': 1,
            'model.feature_dropout': 0.2, 'optimizer.weight_decay': 0.01}
# The table network (RESULTS.md, "Penn Treebank, words"): the best point of the annealed sweep that changed
# one thing at a time from n = 8 with annealing; every point of that sweep and of the regularised grid before
# it retrains from its results file (results/ptb_annealed_*.json, results/ptb_regularised_*.json).
TABLE_NETWORK = {**REGULARISED, **ANNEALED, 'model.n': 8, 'model.h': 1000, 'model.feature_dropout': 0.3,
                 'optimizer.weight_decay': 0.2}

# The NPLM revisited (Sun & Iyyer 2021), one change at a time from the table network (each row keeps the
# rows above it); every row mixed with KN5 too. The family's rows: model.kind='revisited' with AdamW
# warmed up over 500 steps (post-LayerNorm residual blocks start unstable at the full rate), the blocks'
# inner width and the distant block split over 'model' (on a mesh with a 'model' axis, a faster step than
# replicated: docs/revisited.md, "Placement by logical axes (both families)").
REVISITED = {'model.kind': 'revisited', 'model.depth': 4, 'model.m': 256, 'model.h': 1024,
             'model.feature_dropout': 0.3, 'model.hidden_dropout': 0.3, 'optimizer.warmup_steps': 500,
             'mesh.axis_rules.hidden': 'model', 'mesh.axis_rules.distant': 'model'}
LADDER = [
    ('ladder0_nplm2003', {}),  # the table network: n = 8, m = 200, h = 1000
    ('ladder1_window15', {'model.n': 16}),
    ('ladder2_depth4', REVISITED),
    ('ladder3_distant', {'model.distant_tokens': 240, 'model.distant_kernels': 4}),
    ('ladder4_tied', {'model.tied': True}),
    ('ladder5_dropout', {'model.feature_dropout': 0.4, 'model.hidden_dropout': 0.4}),
]
LADDER_NAMES = [name for name, _ in LADDER]
# The same ladder on characters, from ptb.py:char (n = 11, m = 32, h = 512) to config.CHAR_REVISITED.
CHAR_MIX = {'mix.enabled': True}  # with the Kneser-Ney 11-gram (ptb.py:char's mix settings)
_CHAR_PARTS = ('model.n', 'model.distant_tokens', 'model.distant_kernels', 'model.tied')  # rows of their own
CHAR_BLOCKS = {k: v for k, v in CHAR_REVISITED.items() if k not in _CHAR_PARTS}
CHAR_LADDER = [
    ('char_ladder0_nplm2003', CHAR_MIX),
    ('char_ladder1_window40', {'model.n': CHAR_REVISITED['model.n']}),
    ('char_ladder2_depth4', CHAR_BLOCKS),
    ('char_ladder3_distant', {k: CHAR_REVISITED[k] for k in ('model.distant_tokens', 'model.distant_kernels')}),
    ('char_ladder4_tied', {'model.tied': True}),
    ('char_ladder5_dropout', {'model.feature_dropout': 0.2, 'model.hidden_dropout': 0.2}),
]
CHAR_LADDER_NAMES = [name for name, _ in CHAR_LADDER]

# What the reference code (SimengSun/revisit-nplm) does differently, each alone on the ladder's top row
# and all together: the sweep that chose the family's defaults (the first layer's inner width at the
# reference's ratio to the block width, 1500 / 2100). Each point names its initialiser, so that it measures
# the same thing whatever the default.
_NONE = {'model.initialiser': 'lecun'}
REFERENCE_OPTIONS = [
    ('reference0_none', _NONE),
    ('reference1_embed_scale', {**_NONE, 'model.embed_scale': True}),
    ('reference2_normal_init', {'model.initialiser': 'normal_0.02'}),
    ('reference3_dropout_at_embeddings', {**_NONE, 'model.feature_dropout_at': 'embeddings'}),
    ('reference4_first_hidden', {**_NONE, 'model.first_hidden': 768}),
    ('reference5_all', {'model.embed_scale': True, 'model.initialiser': 'normal_0.02',
                        'model.feature_dropout_at': 'embeddings', 'model.first_hidden': 768}),
    # Their training: gradients clipped to global norm 0.25, on today's defaults (reference2's initialiser).
    ('reference6_clip_norm', {'model.initialiser': 'normal_0.02', 'optimizer.clip_norm': 0.25}),
]

# The lowest test figures on PTB (RESULTS.md): words, the revisited ladder's top row to early stopping (three
# seeds); characters, the character ladder's top row with dropout 0.1 and a cosine over 8 epochs, evaluated
# every 2,000 steps as the recorded run was.
BEST = {'best': ('ladder5_dropout', {}),
        'char_best': ('char_ladder5_dropout', {'model.feature_dropout': 0.1, 'model.hidden_dropout': 0.1,
                                               **COSINE_TO_ZERO, 'train.num_epochs': 8, 'train.eval_every': 2000})}


def ladder_config(row: str):
  char = row in CHAR_LADDER_NAMES
  config = get_config('char' if char else '')
  if not char:
    apply_overrides(config, TABLE_NETWORK)
  config.name = f'ptb_{row}'
  return apply_overrides(config, cumulative_overrides(CHAR_LADDER if char else LADDER, row))


def get_sweep(name: str):
  """PTB beside Mikolov et al.: n-gram baselines, and the network with its KN5 mixture."""
  ngrams = [dict(name=f'kneser_ney_{n}', kind='ngram', config='experiments/ptb.py', order=n, smoothing='kneser_ney')
            for n in (3, 5)]
  if name == 'ngrams':
    return ngrams
  if name == 'table':
    # The network beside Mikolov et al.'s: the annealed sweep's best point, with its KN5 mixture. Evaluation every half epoch; the rate halves from the best parameters at each stall.
    return ngrams + [dict(name='nplm_kn5_mix', kind='train', config='experiments/ptb.py', overrides=TABLE_NETWORK)]
  if name in ('ladder', 'char_ladder'):
    rows = LADDER_NAMES if name == 'ladder' else CHAR_LADDER_NAMES
    return [dict(name=row, kind='train', config=f'experiments/ptb.py:{row}') for row in rows]
  if name == 'reference_options':
    return [dict(name=point, kind='train', config='experiments/ptb.py:ladder5_dropout', overrides=o)
            for point, o in REFERENCE_OPTIONS]
  raise ValueError(f"unknown PTB sweep {name!r}; use 'ngrams', 'table', 'ladder', 'char_ladder' or "
                   "'reference_options'")
