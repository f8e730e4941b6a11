"""Brown corpus, Bengio et al. (2003) Table 1. Variants: brown.py:mlp1 (default) ... brown.py:mlp10.
Also brown.py:smoke (about a minute on a 2-core CPU) and brown.py:quick (a usable model in about
five minutes): MLP1 tuned trained with noise-contrastive estimation (QUICK below); brown.py:best, the
lowest test perplexity recorded (BEST below).

python -m nplm_jax.main --config=experiments/brown.py:mlp1 --workdir=runs/brown_mlp1

Any variant with the suffix _tuned (brown.py:mlp1_tuned) trains with a faster optimiser setting
than the paper's: 4x the learning rate, weight decay 3e-5, and the learning rate halved from the
best parameters whenever validation improves by less than 1% (RESULTS.md, the tuned setting).

Even rows are the odd row's network mixed 0.5/0.5 with the interpolated trigram (config.mix);
the mixture of a finished odd-row run needs no retraining: python -m nplm_jax.tools.mix --workdir=...
Sweeps (python -m launch.sweep --config=experiments/brown.py --sweep=NAME): see get_sweep.
"""

from nplm_jax.config import COSINE_TO_ZERO, apply_overrides, base_config, cumulative_overrides

# The paper's network rows (without the trigram mixture): n, h, m, direct connections.
VARIANTS = {
    'mlp1': dict(n=5, h=50, m=60, direct=True),
    'mlp3': dict(n=5, h=0, m=60, direct=True),
    'mlp5': dict(n=5, h=50, m=30, direct=True),
    'mlp7': dict(n=3, h=50, m=30, direct=True),
    'mlp9': dict(n=5, h=100, m=30, direct=False),
}


MIXTURES = {f'mlp{k + 1}': f'mlp{k}' for k in (1, 3, 5, 7, 9)}  # mlp2 = mlp1 + trigram, ...

TUNED_SUFFIX = '_tuned'
TUNED = {'optimizer.learning_rate': 4e-3, 'optimizer.weight_decay': 3e-5, 'train.anneal_factor': 0.5,
         'train.anneal_threshold': 0.01, 'train.patience': 1}


# Beyond the paper: the same model (y = b + W x + U tanh(d + H x), exact evaluation), regularised
# and larger, from MLP9 tuned one change at a time; each mixed with the interpolated trigram too.
REGULARISED = [
    ('reg0_mlp9', {}),
    ('reg1_dropout', {'model.feature_dropout': 0.1, 'model.hidden_dropout': 0.3}),
    ('reg2_h300', {'model.h': 300}),
    ('reg3_m100', {'model.m': 100}),
    ('reg4_n7', {'model.n': 7}),
]


def regularised_changes(variant: str) -> dict:
  """The cumulative changes of a regularised variant (reg2_h300 = reg1's changes and h=300)."""
  return cumulative_overrides(REGULARISED, variant)


# The NPLM revisited (Sun & Iyyer 2021), one change at a time from reg4_n7 (each row keeps the rows
# above it), each mixed with the interpolated trigram too: a 15-word window, then the revisited family
# (4 residual blocks, width 256, AdamW warmed up over 500 steps, evaluation every half epoch), distant-context
# kernels, tied vectors, more dropout. As experiments/ptb.py's LADDER.
REVISITED = {'model.kind': 'revisited', 'model.depth': 4, 'model.m': 256, 'model.h': 1024,
             'model.feature_dropout': 0.3, 'model.hidden_dropout': 0.3, 'optimizer.name': 'adamw',
             'optimizer.learning_rate': 1e-3, 'optimizer.weight_decay': 0.1, 'optimizer.warmup_steps': 500,
             'train.batch_size': 256, 'train.eval_every': 1563, 'mesh.axis_rules.hidden': 'model',
             'mesh.axis_rules.distant': 'model'}
LADDER = [
    ('ladder0_nplm2003', {}),  # reg4_n7
    ('ladder1_window15', {'model.n': 16}),
    ('ladder2_depth4', REVISITED),
    ('ladder3_distant', {'model.distant_tokens': 240, 'model.distant_kernels': 4}),
    ('ladder4_tied', {'model.tied': True}),
    ('ladder5_dropout', {'model.feature_dropout': 0.4, 'model.hidden_dropout': 0.4}),
]

# README's first runs: MLP1 tuned with noise-contrastive estimation (k = 1000 noise words, batch
# 512; the fastest to validation 300 of the search in docs/studies/time_to_quality.md). 'smoke' checks an installation in
# about a minute on a 2-core CPU; 'quick' is a usable model in about five.
QUICK = {'loss.name': 'nce', 'loss.num_samples': 1000, 'train.batch_size': 512, 'train.num_epochs': 8}
SMOKE = {**QUICK, 'train.max_steps': 300, 'train.log_every': 100}


# The lowest test perplexity on Brown (RESULTS.md, three seeds): the revisited family's top row with
# dropout 0.5, weight decay 0.4, a cosine over 6 epochs and a moving average of the parameters.
BEST = ('ladder5_dropout', {'model.feature_dropout': 0.5, 'model.hidden_dropout': 0.5, 'optimizer.weight_decay': 0.4,
                            **COSINE_TO_ZERO, 'train.num_epochs': 6, 'optimizer.ema_decay': 0.999})


def get_config(variant: str = 'mlp1'):
  variant = variant or 'mlp1'
  if variant == 'best':
    row, overrides = BEST
    config = apply_overrides(get_config(row), overrides)
    config.name = 'brown_best'
    return config
  if variant in ('quick', 'smoke'):
    config = apply_overrides(get_config('mlp1_tuned'), QUICK if variant == 'quick' else SMOKE)
    config.name = f'brown_{variant}'
    return config
  if variant in dict(LADDER):
    config = get_config('reg4_n7')
    config.name = f'brown_{variant}'
    return apply_overrides(config, cumulative_overrides(LADDER, variant))
  if variant in dict(REGULARISED):
    config = get_config('mlp10_tuned')
    config.name = f'brown_{variant}'
    config.mix.fit_weight = True  # beyond Table 1: the weight fitted on validation
    return apply_overrides(config, regularised_changes(variant))
  tuned = variant.endswith(TUNED_SUFFIX)
  row = variant[:-len(TUNED_SUFFIX)] if tuned else variant
  if row not in VARIANTS and row not in MIXTURES:
    raise ValueError(f'unknown Brown variant {variant!r}; use one of mlp1 ... mlp10, optionally with '
                     f'{TUNED_SUFFIX} (mlp1{TUNED_SUFFIX}), best, smoke, quick, or '
                     f'{", ".join(n for n, _ in REGULARISED + LADDER)}')
  config = base_config()
  config.name = f'brown_{variant}'
  config.data.corpus = 'brown'
  config.model.update(VARIANTS[MIXTURES.get(row, row)])
  config.mix.enabled = row in MIXTURES
  config.mix.fit_weight = row not in MIXTURES  # Table 1's mixture rows: the paper's fixed 0.5/0.5
  if tuned:
    apply_overrides(config, TUNED)
  return config


# The paper's setting annealed at the end: a converged run, resumed with annealing on, halves the
# rate from its best parameters at each stall (at most 4 times), as RESULTS.md's MLP1 row.
ANNEAL_AT_THE_END = {'train.anneal_factor': 0.5, 'train.patience': 1}
NGRAM_POINTS = [dict(name='interpolated_3', kind='ngram', config='experiments/brown.py', order=3,
                     smoothing='interpolated')] + [
    dict(name=f'kneser_ney_{n}', kind='ngram', config='experiments/brown.py', order=n, smoothing='kneser_ney')
    for n in (3, 4, 5)]
SEEDS = (1, 2)  # besides seed 0: the spread over three initialisations and data orders


def get_sweep(name: str):
  """Named sweeps for launch/sweep.py: lists of points (name, kind, config, overrides or n-gram args).

  A point with start_from begins from a copy of that point's finished workdir.
  """
  if name == 'table1':
    # Five trainings give all ten MLP rows (each even row's run reports its network alone too),
    # trained to convergence (patience 3, at most 60 epochs); then each is annealed at the end.
    points = [dict(name=f'mlp{k + 1}', kind='train', config=f'experiments/brown.py:mlp{k + 1}',
                   overrides={'train.num_epochs': 60}) for k in (1, 3, 5, 7, 9)]
    points += [dict(name=f'mlp{k + 1}_annealed', kind='train', config=f'experiments/brown.py:mlp{k + 1}',
                    overrides={'train.num_epochs': 60, **ANNEAL_AT_THE_END}, start_from=f'mlp{k + 1}')
               for k in (1, 3, 5, 7, 9)]
    return points + NGRAM_POINTS
  if name == 'table1_tuned':
    # The same rows with the tuned setting, and MLP1/MLP2 tuned over two more seeds.
    points = [dict(name=f'mlp{k + 1}', kind='train', config=f'experiments/brown.py:mlp{k + 1}_tuned')
              for k in (1, 3, 5, 7, 9)]
    points += [dict(name=f'mlp2_seed{s}', kind='train', config='experiments/brown.py:mlp2_tuned',
                    overrides={'seed': s}) for s in SEEDS]
    return points + NGRAM_POINTS
  if name == 'regularised':
    # The family one change at a time, and its best member (reg4_n7) over two more seeds.
    points = [dict(name=n, kind='train', config=f'experiments/brown.py:{n}') for n, _ in REGULARISED]
    return points + [dict(name=f'reg4_n7_seed{s}', kind='train', config='experiments/brown.py:reg4_n7',
                          overrides={'seed': s}) for s in SEEDS]
  if name == 'ladder':
    return [dict(name=n, kind='train', config=f'experiments/brown.py:{n}') for n, _ in LADDER]
  if name == 'ablation_h':
    return [dict(name=f'h{h}', kind='train', config='experiments/brown.py:mlp1', overrides={'model.h': h})
            for h in (0, 25, 50, 100)]
  if name == 'ablation_n':
    return [dict(name=f'n{n}', kind='train', config='experiments/brown.py:mlp1', overrides={'model.n': n})
            for n in (2, 3, 4, 5, 6)]
  if name == 'ablation_optimizer':
    return [dict(name='paper_sgd', kind='train', config='experiments/brown.py:mlp1'),
            dict(name='adamw', kind='train', config='experiments/brown.py:mlp1',
                 overrides={'optimizer.name': 'adamw', 'train.batch_size': 256})]
  raise ValueError(f"unknown Brown sweep {name!r}; use 'table1', 'table1_tuned', 'regularised', 'ladder', "
                   "'ablation_h', 'ablation_n' or 'ablation_optimizer'")
