"""One accelerator call for a session lent little device time (15 minutes, of which one call of at most
10 minutes is left once the machine has started): where ROWS has word rows, the revisited step's
deterministic forms of C's gradient timed on the machine (on a GPU where each was timed before,
FORMS_MEASURED_ON, only the fastest, for its rate), the fastest picked (the word rows'); where it has
character rows, the character rows' step timed with CHAR_BASELINE and with every gradient a one-hot
matmul (CHAR_FORMS; where they were measured, CHAR_FORMS_MEASURED_ON, the one-hot alone), the faster kept
for them (Session.char_form); then the rows issue 27 waits for, one at a time: the best character point
over twice its schedule, its seeds, the character ladder's last row, the other character tune points,
each to early stopping or its planned length (ROWS).
Each starts only when its estimated time fits in what is left of the call: a row is never planned to be
cut by the call's end. Each gets the time left as its train.max_seconds (a safety), and one that does not
fit is skipped and said so (and tried again with what the figures leave). The rows leave FIGURES_RESERVE
seconds of the call to issue 28's figures (FIGURES): 'auto''s GPU test and dz in chunks of the
vocabulary beside XLA in the training step (gpu_figures.sh kernel), float32 at |V| 300k there, then the
research size's candidates in the loop (loop); where no row would fit even a whole call, where the step's
time goes (gpu_plan.sh speed).

A later call goes on from the first: no probes, the rows no call has trained, then the parts of the
figures no call has started; SESSION_SECONDS says how long it may run (what the session has left, less a
minute). On the same warm machine (the tool keeps it about 30 s after a call) it reads ROOT/session.json,
beside the rows' workdirs. A call that finds a fresh machine (the H200s of 2026-11-26 and -27: the last
one had gone back) reads the session from SESSION_EARLIER, the last call's OUT/session.json copied into
.carry/; without it a fresh machine takes the first call's path again (probes, figures).

On a lent machine, from the repository root, with .whl/ and .carry/ carried:
  bash launch/gpu_plan.sh session OUT          # source launch/device_env.sh, then python -m launch.session
  # here: cp FILES_AT/session.json .carry/session_earlier.json; then at once, warm machine or not:
  SESSION_EARLIER=.carry/session_earlier.json SESSION_SECONDS=150 bash launch/gpu_plan.sh session OUT
Back here: python -m launch.results collect_pack --pack=OUT/results.tgz (session.json in the pack names the
call), then python -m launch.results render --write; and every call's benchmark lines, with their commands
and calls: python -m launch.bench_lines --tag=TAG --device='NVIDIA H200' FILES_AT_1 FILES_AT_2.

Rows run one at a time rather than side by side: on the H100, eighteen rows side by side each ran at
about 1/18 of its rate alone (RESULTS.md, "The ladders on the H100"), so nothing is lost, and each row's
tokens/s and wall time are its own. OUT gets session.json (the rates, what was picked, run and skipped,
with the estimates), results.tgz (as launch/device_sweeps.sh packs it, refreshed after every row, with
logs/: probe_FORM.log, each form's throughput.py output, and ROOT.log, each row's sweep) and the
benchmarks' bench.jsonl, log.txt and profiles: no more files than the device tool brings back (8; on
the H200 session of 2026-11-26 the logs beside the pack made 12, and the pack was left out).
"""

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from typing import NamedTuple

from launch import sweep as sweep_lib
from nplm_jax import cli as cli_lib
from nplm_jax import config as config_lib
from nplm_jax.models import family

# The forms of C's gradient timed first, all deterministic (model.embedding_gradient: C's window rows;
# model.distant_gradient: the distant block's share), each named in full (their 'auto' resolves by backend):
# on the H100 the scatter of rows that deterministic reductions expand into one sorted index per element
# held the top row at 18,900 tokens/s; on the H200 'sorted_counts' ran 7.2x the scatter.
GRADIENT_FORMS = {
    'scatter': ('model.embedding_gradient=scatter', 'model.distant_gradient=rows'),
    'sorted': ('model.embedding_gradient=sorted', 'model.distant_gradient=rows'),
    'sorted_counts': ('model.embedding_gradient=sorted', 'model.distant_gradient=counts'),
    'one_hot': ('model.embedding_gradient=one_hot', 'model.distant_gradient=one_hot'),
}
WORD_FORMS = ('scatter', 'sorted', 'sorted_counts')  # timed on PTB's top row; the word rows' form is one of them
# The character rows' (|V| 50) forms beside the picked one: every gradient a matmul with a one-hot block, no
# sort or scatter (on the 2-core CPU both one-hot forms trained the top character row 1.16x and evaluated it
# 1.81x: results/bench/cpu_char_distant_forms.jsonl; on the H200 1.40x sorted + counts, results/bench/
# h200c_session.jsonl, and now 'auto''s pair there). Timed at the first call's start on CHAR_PROBE's step.
CHAR_FORMS = ('one_hot',)
CHAR_BASELINE = 'sorted_counts'  # timed beside CHAR_FORMS where they were not measured: the word rows' pick there
# GPUs where CHAR_FORMS were timed against CHAR_BASELINE (the H200: 1.40x / 1.39x, then 1.44x on 2026-11-27,
# results/bench/h200d_session.jsonl): there CHAR_FORMS alone are timed, for their rate (about 15 s each).
CHAR_FORMS_MEASURED_ON = ('NVIDIA H200',)
PROBE_CONFIG = 'experiments/ptb.py:ladder5_dropout'  # every row below has this row's shape
PROBE_VOCAB = 10_000  # PTB's |V|; Brown's 17,905 makes its output layer 1.8x larger (SLOWDOWN covers it)
PROBE_BATCH = 256  # the rows' train.batch_size
PROBE_TIMEOUT = 150  # seconds a form may take, its compile included

# Training tokens an epoch (the paper's Brown split; Mikolov's PTB with a sentence end per line).
BROWN_TRAIN_TOKENS = 800_000
PTB_TRAIN_TOKENS = 929_589
PTB_CHAR_TRAIN_TOKENS = 5_016_961  # the H100 character rows' steps x batch / epochs
PTB_CHAR_VOCAB = 50  # the character rows' |V| (results.json's vocab_size)


@dataclasses.dataclass(frozen=True)
class Row:
  """A sweep point trained in the session: ROOT/POINT with launch.sweep, `epochs` its expected length."""
  root: str  # the sweep root's name, one that launch.results.gpu_plan_sweep knows
  experiment: str
  sweep: str
  point: str
  sets: tuple[str, ...]
  epochs: float
  epoch_tokens: int
  why: str
  relative_rate: float = 1.0  # its tokens/s over the probed row's
  probe_vocab: int = 0  # > 0: its own step is timed at the call's start (a random corpus of this |V|), for its rate

  @property
  def tokens(self) -> float:
    return self.epochs * self.epoch_tokens

  @property
  def key(self) -> str:
    return f'{self.root}/{self.point}'

  @property
  def chars(self) -> bool:
    """A character row: it trains with the character rows' form (Session.char_form)."""
    return self.sweep in ('char_tune', 'char_ladder')


def _ladder_row(corpus: str, point: str, relative_rate: float, epochs: float = 6.0) -> Row:
  """A ladder's row, seed 0, to early stopping (the words' top row took 5.5-6.5 epochs on the H100, the
  characters' 5.1 on the H200; the characters' rows without dropout ran their 10 on the H200)."""
  experiment, root, sweep, tokens = {
      'ptb': ('experiments/ptb.py', 'ladder', 'ladder', PTB_TRAIN_TOKENS),
      'brown': ('experiments/brown.py', 'brown_ladder', 'ladder', BROWN_TRAIN_TOKENS),
      'chars': ('experiments/ptb.py', 'char_ladder', 'char_ladder', PTB_CHAR_TRAIN_TOKENS)}[corpus]
  return Row(root, experiment, sweep, point, (), epochs, tokens, f'the {corpus} ladder\'s {point} to early stopping',
             relative_rate)


# What the sessions of 2026-11-26 and -27 (RESULTS.md, "The third H200 session", "The fourth H200 session") left,
# the most useful first. The character target (1.40 alone) is 0.11 bits from the best row, char_tune0 (1.509:
# dropout 0.1, a cosine over 8 epochs), and every step toward it so far came from training more, not regularising
# more (less dropout was better; the ladder's rows without dropout were flat from epoch 7 at AdamW's constant rate).
# First a residual stream four times wider (m 512 where C and the stream were 128, the first layer at its weights;
# CHAR_SHAPE's quarter-width points on the CPU favoured it, RESULTS.md "Where the character row's parameters sit")
# with four times the blocks (16) over 6 epochs, without the distant block, the first layer's branch added to the
# last character's vector and an 11-character window (char_tune19; over one epoch of all the characters at a
# quarter of the width, 0.160 bits below the sum of a 41-character window's vectors, two seeds: ptb.py
# char_shape); where a call has the room, 16 blocks with the first layer's inner width at 1,024 (char_tune22:
# over the GPU rows' 6 epochs on a sixteenth of the characters the two gains add up, though with the GPU rows'
# share of warm-up the wider first layer adds only 0.005 bits to 16 blocks, ptb.py char_overfit);
# then 12 blocks with the first layer's inner width at 1,024 (char_tune20, 0.164 below over one
# epoch, but over-fitted where the networks fit their data over 12 epochs), at 512 (char_tune18, 0.147
# below; there the best point but one) and at 2,048 (char_tune21, 0.183 below; over-fitted more), at 21
# characters (char_tune17), the sum at 11 (char_tune15: over two epochs the last character's lead fell from 0.026
# bits to 0.015), the last character at 41 (char_tune16), the sum at 21 (char_tune14) and 41 (char_tune13: the
# proxy's best before them), 8 blocks (char_tune12) and with the distant block (char_tune11); a first call fits
# each (ptb.py char_overfit). Then at 4 blocks over 8 (char_tune9), and where a call has the room, twice the
# blocks over 8 (char_tune10); then char_tune0 over twice the schedule (16 epochs, about 316 s at the one-hot
# step's rate);
# then char_tune0's seeds 1 and 2 (the issue's three seeds of the best row; a second call fits one); the ladder's
# last row without dropout (tied) to its planned 10 epochs (rows 2 and 3 ran theirs: 1.563, 1.555); the parameters'
# moving average and a stronger weight decay; 16 epochs at four times the batch; whole context characters dropped
# (model.word_dropout 0.1: char_tune0 trains 0.17 bits below validation). Done: the 81-character window (1.557:
# worse than 41), Brown tune11's seeds and PTB's 15-word window.
# Relative rates: each row's loop tokens/s over PTB's top row's on the H200 (results/*_h200*.json: ladder4
# 1.0, characters 1.41); a character row's estimate is CHAR_PROBE's step rate times its rate over CHAR_PROBE's
# (1.41 / 1.41: on the H200 ladder rows 2 and 3 trained 377,960 and 337,781 characters/s in the loop, the
# probe's step 332,359).
_CHAR_TUNE0 = 'char_tune0_dropout0.1_cosine8'


def _char_tune_row(point: str, epochs: float, relative_rate: float, why: str, root: str = 'char_tune',
                   sets: tuple[str, ...] = (), eval_every: int = 2000, probe_vocab: int = 0) -> Row:
  """A character tune point, evaluated every `eval_every` steps (2,000 at batch 512: 0.2 epoch)."""
  return Row(root, 'experiments/ptb.py', 'char_tune', point, (*sets, f'train.eval_every={eval_every}'), epochs,
             PTB_CHAR_TRAIN_TOKENS, why, relative_rate, probe_vocab)


# The character rows' step the forms are timed on (probe_char_forms): the best character point's, at its
# batch (512), on a random corpus of the characters' |V|.
CHAR_PROBE = _char_tune_row(_CHAR_TUNE0, 8.0, 1.41, "the character rows' forms", probe_vocab=PTB_CHAR_VOCAB)

# The wider stream at 8 blocks (char_tune10, 11): char_tune9's rate (1.8x char_tune0's step) over their
# multiply-adds' ratio (28.6 M weights against 20.2 M); without the distant block, the H200's ratio between the
# ladder's rows without and with it (377,960 / 337,781 characters/s).
_WIDE_DEPTH8_RATE = 1.41 / 1.8 / 1.42
_NO_DISTANT_SPEEDUP = 377_960 / 337_781
_CHAR_TUNE12_RATE = _WIDE_DEPTH8_RATE * _NO_DISTANT_SPEEDUP
_CHAR_TUNE12 = 'char_tune12_dropout0.1_cosine6_m512_first512_depth8_no_distant'


@functools.cache
def _char_tune_points() -> dict:
  return {p['name']: p for p in config_lib.load_experiment('experiments/ptb.py').get_sweep('char_tune')}


@functools.cache
def _char_tune_parameters(point: str) -> int:
  """A char_tune point's parameter count, from its resolved config's shapes (nothing allocated)."""
  found = _char_tune_points()[point]
  config = cli_lib.config_from_flags(found['config'], sweep_lib.override_flags(found, {}))
  return family.num_parameters(family.from_config(config.model, PTB_CHAR_VOCAB))


def _no_distant_rate(point: str) -> float:
  """A wide row without the distant block: char_tune12's rate over their multiply-adds' ratio (about their
  parameters' ratio: nearly all of them are the first layer's and the blocks' weights)."""
  return _CHAR_TUNE12_RATE * _char_tune_parameters(_CHAR_TUNE12) / _char_tune_parameters(point)


def _no_distant_row(point: str, why: str) -> Row:
  """A wide char_tune row without the distant block over 6 epochs, at _no_distant_rate."""
  return _char_tune_row(point, 6.0, _no_distant_rate(point), why)


ROWS = (
    # char_tune18 (below) with 16 blocks (36.5 M parameters, about 351 s: near the edge of a first call's rows;
    # where the probe says it does not fit, the next row that fits takes its place: char_tune20, whose 307 s a
    # first call fits where char_tune22's 379 do not). Both proxies favour the depth: over one epoch of all
    # the characters at a quarter of the width 1.644 bits on test at two seeds, 0.013 below 12
    # blocks' two seeds, in 1.24x the CPU time (ptb.py char_shape's shape14), and where the networks fit their
    # data 0.011 below 12 at 41 characters and the sum (char_overfit's over24 against over23's two seeds) and
    # 0.003 at 11 with 'last' over 12 epochs (over33 against over29, two seeds each: a tie, no over-fitting).
    # Over the GPU rows' own 6 epochs there (their parameters a character and their epochs at once) 1.903
    # against 1.919, two seeds each, the lowest of that proxy's single changes (over37 against over35; with the
    # first layer wider too, 1.891: char_tune22), and 1.893 against 1.909 with the GPU rows' share of warm-up
    # (over41 against over40)
    _no_distant_row('char_tune19_dropout0.1_cosine6_m512_first512_depth16_no_distant_window11_last',
                    'char_tune18 with 16 blocks: at a quarter of the width over one epoch of all the characters, '
                    '0.013 bits below it; where the networks fit their data, 0.016 below it over 6 epochs and '
                    'level over 12 (two seeds each)'),
    # char_tune19 with char_tune20's first layer (1,024; 39.4 M parameters, about 379 s on an H200 by its
    # parameters: past a first call's rows, so it runs where a call has the room, a later call of a longer
    # session, or a first call whose probe finds the step faster). Where the networks fit a sixteenth of the
    # characters over the GPU rows' 6 epochs the two gains about add up: 1.891 bits on test at two seeds, 0.012
    # below 16 blocks alone and 0.028 below neither (ptb.py char_overfit's over39, over37, over35); with the GPU
    # rows' share of warm-up (100 steps of the proxy's 3,690) 1.888, 0.005 below 16 blocks alone (over42, over41)
    _no_distant_row('char_tune22_dropout0.1_cosine6_m512_first1024_depth16_no_distant_window11_last',
                    "char_tune19 with the first layer's inner width doubled: where the networks fit their data, "
                    '0.012 bits below it over 6 epochs at a quarter of the width, 0.005 with a warm-up as short '
                    "as the GPU rows' (two seeds each)"),
    # char_tune18 (below) with the first layer's inner width doubled (1,024; 31.0 M parameters, about 307 s on an
    # H200). The two proxies disagree: over one epoch of all the characters at a quarter of the width 1.640 bits
    # on test at two seeds, 0.017 below char_tune18's proxy in its CPU time (ptb.py char_shape's shape15 against
    # shape11), and at 512 the lead held over two epochs (0.032 bits: shape21 against shape19); where the
    # networks fit their data over 12 epochs 1.865 against 1.846, over-fitted from epoch 10 (char_overfit's
    # over31 against over29), a proxy that has ranked the GPU's settled changes rightly with about three times
    # their gaps; over the GPU rows' 6 epochs there 1.905 against 1.919 (over38 against over35), two seeds
    # each, and 1.904 against 1.909 with the GPU rows' share of warm-up (over43 against over40: the wider
    # layer's faster start had made up for the proxy's long warm-up; over one epoch of all the characters the
    # same change left its 0.017, shape23 against shape22). So it goes before char_tune18, and before
    # char_tune21, which gains no more over 6 epochs (1.906) and loses three times as much over 12 (1.906)
    _no_distant_row('char_tune20_dropout0.1_cosine6_m512_first1024_depth12_no_distant_window11_last',
                    "char_tune18 with the first layer's inner width doubled: at a quarter of the width 0.017 bits "
                    'below it over one epoch of all the characters; where the networks fit their data 0.014 '
                    'below it over 6 epochs, 0.019 above it over 12 (two seeds each)'),
    # char_tune13 (below) at an 11-character window with the first layer's branch added to the last character's
    # vector, not the sum of the window's (model.first_residual='last'): over one epoch of all the characters at
    # a quarter of the width 1.657 bits on test over two seeds (1.659, 1.655) against 1.669 at 21 characters
    # (1.670, 1.669), 1.694 at 6 and the sum's 1.804 at 41 (ptb.py char_shape's shape11, shape10, shape12
    # against shape6), then the lowest of any CPU point; the distant block back beside it gave 1.657 again in
    # 1.3x the CPU time (shape13); where the networks fit their data, 1.849 bits on test against the sum's 1.873
    # (char_overfit's over29 against over26; 1.846 over two seeds), the best point there but one (6 characters
    # at the sum: 1.847).
    # 28.1 M parameters, about 282 s on an H200, which a first call's rows fit (about 375 s: 570 less one
    # character probe, the figures' 150 and the pack's 15)
    _no_distant_row('char_tune18_dropout0.1_cosine6_m512_first512_depth12_no_distant_window11_last',
                    "12 blocks, an 11-character window, the first layer added to the last character's vector: at a "
                    'quarter of the width over one epoch of all the characters, 0.147 bits below the sum at 41 '
                    '(two seeds)'),
    # char_tune20 doubled again (2,048; 36.8 M parameters, about 353 s): over one epoch 1.621 bits at two seeds,
    # 0.036 below char_tune18's proxy (shape16), 0.032 over two epochs (shape21); where the networks fit their
    # data over 12 epochs 1.906, best at epoch 8 and 0.060 above (over30, two seeds; at dropout 0.2, 1.883:
    # over32), over 6 epochs 1.906, 0.013 below (over36, two seeds) and level with char_tune20's proxy
    _no_distant_row('char_tune21_dropout0.1_cosine6_m512_first2048_depth12_no_distant_window11_last',
                    "char_tune18 at four times the first layer's inner width: at a quarter of the width 0.036 "
                    'bits below it over one epoch of all the characters; where the networks fit their data '
                    '0.013 below it over 6 epochs, 0.060 above it over 12 (two seeds each)'),
    # char_tune18 at 21 characters (30.7 M parameters, about 304 s): over one epoch 0.012 bits above 11 at two
    # seeds each
    _no_distant_row('char_tune17_dropout0.1_cosine6_m512_first512_depth12_no_distant_window21_last',
                    "char_tune18 with a 21-character window: at a quarter of the width over one epoch of all the "
                    'characters, 0.012 bits above it (two seeds each)'),
    # char_tune13 (below) with an 11-character window at the sum (28.1 M parameters, about 282 s): over one
    # epoch of all the characters 1.683 bits (shape8), 0.026 above the last character's residual at 11 but
    # below it at 41 (1.696): the window counts for more than the residual, so this row before char_tune16. The
    # 2003 network's 11 characters also beat its 41 by 0.106 bits (char_ladder0 against char_ladder1, on the CPU)
    _no_distant_row('char_tune15_dropout0.1_cosine6_m512_first512_depth12_no_distant_window11',
                    'char_tune13 with an 11-character window: at a quarter of the width over one epoch of all the '
                    'characters, 0.121 bits below char_tune13 there'),
    # the last character's residual at 41 characters (char_tune13 with it: shape9, 1.696 bits, 0.108 below the
    # sum), 36.0 M parameters, about 347 s: near the edge of a first call's rows; where the probe says it does
    # not fit, a later row takes its place
    _no_distant_row('char_tune16_dropout0.1_cosine6_m512_first512_depth12_no_distant_last',
                    "char_tune13 with the first layer added to the last character's vector: at a quarter of the "
                    'width over one epoch of all the characters, 0.108 bits below the sum of the window'),
    # char_tune13 (below) with a 21-character window: 30.7 M parameters, about 304 s on an H200. Where the
    # networks fit a sixteenth of the characters 0.093 bits below char_tune13 there (over25 against over23),
    # a proxy that favours short contexts; on all of them at a quarter of the width over one epoch, 0.065
    # bits below the 41-character sum too (shape7: 1.739 against shape6's 1.804)
    _no_distant_row('char_tune14_dropout0.1_cosine6_m512_first512_depth12_no_distant_window21',
                    'char_tune13 with a 21-character window: at a quarter of the width where the networks fit a '
                    'sixteenth of the data, 0.093 bits below char_tune13 there'),
    # 12 blocks without the distant block: where the networks fit their data the proxy's best at a
    # 41-character window over two seeds (over23: 2.035 bits on test against over22's 2.066 and over14's
    # 2.077); about 347 s
    _no_distant_row('char_tune13_dropout0.1_cosine6_m512_first512_depth12_no_distant',
                    'char_tune12 with 12 blocks: at a quarter of the width where the networks fit a sixteenth of '
                    "the data, 0.031 bits below char_tune12 there (two seeds' means)"),
    # char_tune11 without the distant block: where the networks fit their data (ptb.py char_overfit's over22)
    # 0.011 bits lower at a quarter of the width over two seeds, its step 1.14-1.20x char_tune11's on the CPU;
    # its rate taken as char_tune11's times the H200's ratio between the ladder's rows without and with the
    # block (377,960 / 337,781 characters/s): about 278 s, so before char_tune11 (305 s), which a 15-minute
    # session's second call may not fit
    _no_distant_row(_CHAR_TUNE12,
                    'char_tune11 without the distant block: at a quarter of the width where the networks fit a '
                    "sixteenth of the data, 0.011 bits lower over two seeds; its step 1.14-1.20x char_tune11's on "
                    'the CPU'),
    # char_tune10 (below) over 6 epochs, not 8: about 305 s, which a first call's rows have (390 s do not). At a
    # quarter of the width where the networks fit their data (ptb.py char_overfit, 2026-11-28) the depth-8
    # network over three quarters of the schedule ended 0.038 bits below the wider stream at 4 blocks over the
    # whole (2.079 against 2.117; 0.015 above its own whole schedule), so it comes before char_tune9
    _char_tune_row('char_tune11_dropout0.1_cosine6_m512_first512_depth8', 6.0, _WIDE_DEPTH8_RATE,
                   'the wider stream with twice the blocks (8) over 6 epochs: at a quarter of the width where the '
                   'networks fit a sixteenth of the data, 0.038 bits below the wider stream over its whole schedule'),
    # its step taken as 1.8x char_tune0's: its multiply-adds a character are 1.45x (20.2 M weights against
    # 13.9 M), and on the CPU the quarter-width pair's steps took 1.8x (the wider gathers and C's scatter too)
    _char_tune_row('char_tune9_dropout0.1_cosine8_m512_first512', 8.0, 1.41 / 1.8,
                   'the best character point with a residual stream four times wider (m 512), the first layer '
                   'at its weights: at a quarter of the width on the CPU, 0.21 bits lower after one epoch, 0.18 '
                   'where the networks fit a sixteenth of the data'),
    # its step taken as char_tune9's times their multiply-adds' ratio (28.6 M weights against 20.2 M): about
    # 390 s on an H200, more than the first call's rows leave beside the probes and figures, so it runs where a
    # call has the room (skipped otherwise, said so) and the rows below take the time it leaves
    _char_tune_row('char_tune10_dropout0.1_cosine8_m512_first512_depth8', 8.0, _WIDE_DEPTH8_RATE,
                   'the wider stream with twice the blocks (8): at a quarter of the width where the networks fit a '
                   'sixteenth of the data, 0.05 bits below the wider stream (as the stream wider again)'),
    _char_tune_row('char_tune4_dropout0.1_cosine16', 16.0, 1.41,
                   'the best character point over twice the schedule (16 epochs): it underfits'),
    *(_char_tune_row(_CHAR_TUNE0, 8.0, 1.41, f'the best character point (1.509 at seed 0), seed {seed}: over three '
                     'seeds', root=f'char_seed{seed}', sets=(f'seed={seed}',)) for seed in (1, 2)),
    _ladder_row('chars', 'char_ladder4_tied', 1.41, epochs=10.0),
    # char_tune6, 7 and 8: at a quarter of the width where the networks fit their data (ptb.py char_overfit) each moved
    # the test figure by under 0.02 bits, so they come after the rows above
    _char_tune_row('char_tune6_dropout0.1_cosine8_ema0.999', 8.0, 1.41,
                   "the best character point with the parameters' moving average (Brown's best points had it)"),
    _char_tune_row('char_tune7_dropout0.1_cosine8_ema0.999_weight_decay0.1', 8.0, 1.41,
                   'the same with weight decay 0.1 (1e-4 in the character rows)'),
    # its step at batch 2048 ran 463,161 characters/s on the H200 (timed there, 2026-11-27): 1.39x CHAR_PROBE's;
    # at a quarter of the width where the networks fit their data four times the batch at twice the rate
    # ended 0.042 bits worse at equal characters (ptb.py char_overfit's over16), so it stays near the end
    _char_tune_row('char_tune5_dropout0.1_cosine16_batch2048_lr2e-3', 16.0, 1.41 * 1.39,
                   'the best character point at 16 epochs, four times the batch, twice the rate', eval_every=500),
    _char_tune_row('char_tune8_dropout0.1_cosine8_token0.1', 8.0, 1.41,
                   'the best character point with whole context characters dropped (0.1): it trains 0.17 bits '
                   'below validation'),
)

# A row's estimated seconds: its tokens at its share of the probe's step rate times SLOWDOWN (the loop's
# logging and half-epoch evaluations; Brown's larger output layer), plus START_AND_FINISH (start-up and compiles,
# the final evaluation, the n-gram mixture, the results). The character rows' share is their loop's rate
# (Row.relative_rate): on the H100 (2026-11-26) char_tune0 and char_tune2 took 46 and 48 s beyond their
# tokens at the loop's rate (220 and 224 s, estimated 281 at SLOWDOWN), so theirs is CHAR_SLOWDOWN.
SLOWDOWN = 1.3
CHAR_SLOWDOWN = 1.1
START_AND_FINISH = 50.0  # the H200's rows took 31-46 s beyond their tokens at the loop's rate
# Seconds a row is left after its train.max_seconds (the final evaluation, the test set, the mixture, the
# process's exit): on the H100 (2026-11-26) 2 s for Brown's trigram, 10 s for PTB characters' KN11. It must
# stay below START_AND_FINISH, so that a row whose estimate fits the time left is never cut by its safety
# budget: at 60 it was, and Brown tune11's seed 1 stopped at 4.85 of its 6 epochs (budget 47 s, estimate 89).
FINISH_RESERVE = 25.0
PACK_RESERVE = 15.0  # seconds kept at the call's end for the last pack
MIN_FALLBACK_SECONDS = 90  # the least time left after the rows worth spending on benchmarks
MIN_PART_SECONDS = 60  # the least time worth starting a part of FIGURES with (a profile takes about 40 s)
# Seconds of the first call the rows leave to FIGURES (issue 28): the first part (150 s); the others get what
# the rows leave beyond that. The rows come first (the revisited family's
# training is the scarcer work): at 300 s, the 81-character window (about 290 s) fitted in no call of a
# 15-minute session, beside the probes (about 60 s) and the pack; at 150 it trained (H200, 2026-11-26).
FIGURES_RESERVE = 150.0
# The most hours an earlier call's session.json (SESSION_EARLIER) may be old: a session lends at most half an
# hour of device time, so an older one is a past session's, whose rows and figures this one must not skip.
EARLIER_HOURS = 3.0


def estimate_seconds(row: Row, tokens_per_sec: float) -> float:
  """A row's seconds at its step rate `tokens_per_sec` (row_rate)."""
  return row.tokens / tokens_per_sec * (CHAR_SLOWDOWN if row.chars else SLOWDOWN) + START_AND_FINISH


def row_rate(row: Row, rates: dict, form: str, char_form: str = '') -> float | None:
  """A row's step rate: its own, timed at the call's start (Row.probe_vocab); a character row's, CHAR_PROBE's
  step with the character rows' form times the row's relative rate over CHAR_PROBE's; else the probed
  word row's with the picked form times its relative rate; None where none was measured."""
  if row.probe_vocab and rates.get(row.key):
    return rates[row.key]
  if row.chars and char_form and rates.get(char_probe_key(char_form)):
    return rates[char_probe_key(char_form)] * row.relative_rate / CHAR_PROBE.relative_rate
  return rates[form] * row.relative_rate if rates.get(form) else None


def char_probe_key(form: str) -> str:
  """Where Session.rates holds CHAR_PROBE's step rate with `form`."""
  return f'chars:{form}'


# Devices where every form was timed (twice on the H200: 'sorted_counts' 7.2x and 6.7x the scatter; on the
# H100 8.7x, results/bench/h100_session_kernel.jsonl): there the forms are timed fastest first and only until
# one runs (about 12 s each of the call), for its rate.
FORMS_MEASURED_ON = ('NVIDIA H200', 'NVIDIA H100 80GB HBM3')
_FASTEST_FIRST = ('sorted_counts', 'sorted', 'scatter')


def gpu_name() -> str:
  """The machine's first GPU as nvidia-smi names it ('NVIDIA H200'), '' without one."""
  smi = shutil.which('nvidia-smi')
  if not smi:
    return ''
  try:
    proc = subprocess.run([smi, '--query-gpu=name', '--format=csv,noheader'], capture_output=True, text=True,
                          timeout=30, check=False)
  except (OSError, subprocess.TimeoutExpired):
    return ''
  return proc.stdout.splitlines()[0].strip() if proc.returncode == 0 and proc.stdout.strip() else ''


def probe_forms(device: str, logs: str) -> dict[str, float | None]:
  """Each form's rate (probe): all of them, except on a device where every form was measured before,
  where they go fastest first and stop at the first that runs."""
  measured_before = device in FORMS_MEASURED_ON
  rates = {}
  for name in _FASTEST_FIRST if measured_before else WORD_FORMS:
    rates[name] = probe(name, logs)
    print(f'probe {name}: {rates[name] or "failed"} tokens/s at batch {PROBE_BATCH}', flush=True)
    if rates[name] and measured_before:
      break
  return rates


def pick_form(rates: dict[str, float | None]) -> str:
  """The fastest form measured; 'scatter' (the default) when none was (rates also holds rows' own rates)."""
  measured = {name: rate for name, rate in rates.items() if rate and name in WORD_FORMS}
  return max(measured, key=measured.get) if measured else 'scatter'


def probe(name: str, logs: str) -> float | None:
  """The top row's training step rate (tokens/s at PROBE_BATCH) with a form of C's gradient, None if it
  failed or ran past PROBE_TIMEOUT (its output is in LOGS/probe_NAME.log either way)."""
  return _step_rate(*probe_arguments(name), os.path.join(logs, f'{_form_log(name)}.log'))


def probe_arguments(name: str) -> tuple[list[str], int, int]:
  """(config arguments, |V|, batch) of probe's step: the top row with a form of C's gradient."""
  return [f'--config={PROBE_CONFIG}', *(f'--config.{s}' for s in GRADIENT_FORMS[name])], PROBE_VOCAB, PROBE_BATCH


def probe_row(row: Row, form: str, logs: str, log_name: str = '') -> float | None:
  """A row's own training step rate (tokens/s at its batch size) with a form, as it will train: its sweep
  point's config and overrides and the row's settings (LOGS/probe_ROOT_POINT.log, or LOGS/LOG_NAME.log)."""
  return _step_rate(*row_probe_arguments(row, form), os.path.join(logs, f'{log_name or _row_log(row)}.log'))


def row_probe_arguments(row: Row, form: str) -> tuple[list[str], int, int]:
  """(config arguments, |V|, batch) of probe_row's step: the row's sweep point as run_rows trains it."""
  point = {p['name']: p for p in config_lib.load_experiment(row.experiment).get_sweep(row.sweep)}[row.point]
  flags = sweep_lib.override_flags(point, sweep_lib.parse_set([*row.sets, *GRADIENT_FORMS[form]]))  # as run_rows
  batch = cli_lib.config_from_flags(point['config'], flags).train.batch_size
  return [f'--config={point["config"]}', *flags], row.probe_vocab, batch


def probe_command(log_name: str, session: 'Session') -> str | None:
  """The command a probe's log (LOGS/LOG_NAME.log, without .log) came from, as `session` ran it; None for a
  log of no probe this code makes (a row no longer in ROWS)."""
  arguments = None
  for form in GRADIENT_FORMS:
    if log_name == _form_log(form):
      arguments = probe_arguments(form)
    elif log_name == _char_log(form):
      arguments = row_probe_arguments(CHAR_PROBE, form)
  for row in ROWS:
    if row.probe_vocab and log_name == _row_log(row):  # a row timed on its own
      arguments = row_probe_arguments(row, session.form_for(row))
  return ' '.join(['python', *step_rate_arguments(*arguments)]) if arguments else None


def _form_log(form: str) -> str:
  return f'probe_{form}'  # probe's log: the top row with a form of C's gradient


def _char_log(form: str) -> str:
  return f'probe_chars_{form}'  # probe_char_forms': CHAR_PROBE's step with a form


def _row_log(row: Row) -> str:
  return f'probe_{row.root}_{row.point}'  # probe_row's: a row's own step


def step_rate_arguments(config_args: list[str], vocab: int, batch: int) -> list[str]:
  """benchmarks/throughput.py's arguments for a config's training step rate at one batch size (_step_rate)."""
  return ['benchmarks/throughput.py', *config_args, f'--vocab={vocab}', f'--batch_sizes={batch}', '--steps=10',
          '--repeats=3', '--peak_size=1024']


def probe_char_forms(rates: dict, logs: str, device: str = '') -> str:
  """The character rows' form: CHAR_PROBE's step timed with CHAR_BASELINE and each of CHAR_FORMS
  (rates[char_probe_key(f)]; LOGS/probe_chars_FORM.log), the fastest that ran; on a device where they were
  measured (CHAR_FORMS_MEASURED_ON), CHAR_FORMS alone unless none of them ran; CHAR_BASELINE if none ran."""
  measured_before = device in CHAR_FORMS_MEASURED_ON
  rounds = [CHAR_FORMS, (CHAR_BASELINE,)] if measured_before else [(CHAR_BASELINE, *CHAR_FORMS)]
  measured = {}
  for candidates in rounds:
    for candidate in candidates:
      rates[char_probe_key(candidate)] = probe_row(CHAR_PROBE, candidate, logs, _char_log(candidate))
      print(f'probe chars {candidate}: {rates[char_probe_key(candidate)] or "failed"} tokens/s', flush=True)
      if rates[char_probe_key(candidate)]:
        measured[candidate] = rates[char_probe_key(candidate)]
    if measured:
      break
  return max(measured, key=measured.get) if measured else CHAR_BASELINE


def _step_rate(config_args: list[str], vocab: int, batch: int, log: str) -> float | None:
  """benchmarks/throughput.py's training step rate for a config at one batch size, None if it failed or ran
  past PROBE_TIMEOUT (its output in LOG either way)."""
  args = [sys.executable, *step_rate_arguments(config_args, vocab, batch)]
  with open(log, 'w', encoding='utf-8') as f:
    try:
      subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, timeout=PROBE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
      return None
  with open(log, encoding='utf-8') as f:
    rows = [json.loads(line) for line in f if line.startswith('{')]
  rates = [r['train_tokens_per_sec'] for r in rows if r.get('batch_size') == batch]
  return rates[0] if rates else None


def logs_folder(root: str) -> str:
  """Where the call's logs go: packed into results.tgz (logs/), not left in OUT beside it."""
  return os.path.join(root, 'logs')


def cache_folder(root: str) -> str:
  """JAX's persistent compilation cache the rows share (JAX_COMPILATION_CACHE_DIR): a seed's row compiles
  what its first seed's compiled (14 s of a 57-s Brown row on the H200); never packed."""
  return os.path.join(root, 'jax_cache')


def pack(root: str, out: str) -> None:
  """OUT/results.tgz as launch/device_sweeps.sh packs it (each point's results, metrics, config and log,
  each sweep's results.md), with OUT/session.json beside the sweep roots and the call's logs in logs/."""
  patterns = ('results.json', 'mix_results.json', 'metrics.jsonl', 'config.json', 'log.txt')
  part = os.path.join(out, 'results.tgz.part')
  with tarfile.open(part, 'w:gz') as tar:
    logs = logs_folder(root)
    for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
      tar.add(os.path.join(logs, name), f'logs/{name}')
    for sweep in sorted(os.listdir(root)) if os.path.isdir(root) else []:
      folder = os.path.join(root, sweep)
      if not os.path.isdir(folder) or folder in (logs, cache_folder(root)):
        continue
      if os.path.exists(os.path.join(folder, 'results.md')):
        tar.add(os.path.join(folder, 'results.md'), f'{sweep}/results.md')
      for point in sorted(os.listdir(folder)):
        for name in patterns:
          path = os.path.join(folder, point, name)
          if os.path.isfile(path):
            tar.add(path, f'{sweep}/{point}/{name}')
    summary = os.path.join(out, 'session.json')
    if os.path.exists(summary):
      tar.add(summary, 'session.json')
  os.replace(part, os.path.join(out, 'results.tgz'))


def sweep_command(row: Row, root: str, sets: list[str]) -> list[str]:
  return [sys.executable, '-m', 'launch.sweep', f'--config={row.experiment}', f'--sweep={row.sweep}',
          f'--root={os.path.join(root, row.root)}', f'--only={row.point}', '--parallel=1',
          *(f'--set={s}' for s in sets)]


@dataclasses.dataclass
class Session:
  """What the calls picked and did, written to OUT/session.json (and ROOT/session.json, which a later call
  on the same warm machine goes on from) after every step."""
  command: str = 'bash launch/gpu_plan.sh session OUT'
  device: str = ''  # nvidia-smi's name of the GPU
  rates: dict = dataclasses.field(default_factory=dict)
  form: str = 'scatter'
  char_form: str = ''  # the character rows' form (probe_char_forms); '' = `form`
  rows: list = dataclasses.field(default_factory=list)
  rest: str = ''  # what the time after the rows went to
  figures: list = dataclasses.field(default_factory=list)  # the FIGURES parts started (Figures.name), any call
  calls: int = 1  # the session's calls: the first probes; each trains the rows left, then the figures left
  started: float = 0.0  # the first call's start (seconds since the epoch): an earlier session is refused

  def form_for(self, row: Row) -> str:
    """The form `row` trains with: the character rows' for a character row, else the picked one."""
    return (self.char_form or self.form) if row.chars else self.form

  def record(self, entry: dict) -> None:
    """A row's entry, in place of an earlier call's skip of the same row (a failure stays on record)."""
    self.rows = [r for r in self.rows if not (
        (r.get('root'), r.get('point')) == (entry['root'], entry['point']) and r['status'].startswith('skipped'))]
    self.rows.append(entry)

  def write(self, *folders: str) -> None:
    for folder in folders:
      with open(os.path.join(folder, 'session.json'), 'w', encoding='utf-8') as f:
        json.dump(dataclasses.asdict(self), f, indent=1)

  @classmethod
  def earlier(cls, root: str) -> 'Session | None':
    """The session an earlier call on this machine left in ROOT (its workdirs are there too), or None."""
    path = os.path.join(root, 'session.json')
    return cls.read(path) if os.path.exists(path) else None

  @classmethod
  def read(cls, path: str) -> 'Session':
    """A session.json as written (fields it lacks, from older calls, take their defaults)."""
    with open(path, encoding='utf-8') as f:
      return cls.from_fields(json.load(f))

  @classmethod
  def from_fields(cls, fields: dict) -> 'Session':
    """A session from session.json's fields (those it lacks take their defaults; unknown ones are left out)."""
    return cls(**{k: v for k, v in fields.items() if k in {f.name for f in dataclasses.fields(cls)}})


def run_rows(rows, session: Session, out: str, root: str, deadline: float, run=None, clock=time.time,
             extra_sets=(), only_skipped: bool = False) -> None:
  """Each row in order that fits in the time left before `deadline` (a clock() time), at the picked
  form's rate; a row that does not fit is skipped and a later, shorter one may still run. only_skipped:
  none that session has run already (done or failed), only those it skipped. A row an earlier call trained
  (its results in ROOT, or 'done' in session: on a fresh machine its results came back with that call's
  pack) is not trained again."""
  run = run or subprocess.run
  os.makedirs(logs_folder(root), exist_ok=True)
  ran = {(r['root'], r['point']) for r in session.rows if not r['status'].startswith('skipped')}
  done = {(r['root'], r['point']) for r in session.rows if r['status'] == 'done'}
  for row in rows:
    if (row.root, row.point) in done or os.path.exists(os.path.join(root, row.root, row.point, 'results.json')):
      print(f'{row.root}/{row.point}: trained by an earlier call', flush=True)
      continue
    if only_skipped and (row.root, row.point) in ran:
      continue
    left = deadline - clock() - PACK_RESERVE
    rate = row_rate(row, session.rates, session.form, session.char_form)
    estimate = estimate_seconds(row, rate) if rate else None
    entry = {'root': row.root, 'point': row.point, 'why': row.why,
             'estimate_s': round(estimate) if estimate else None, 'left_s': round(left)}
    if estimate is None or estimate > left:
      entry['status'] = ('skipped: no rate was measured' if estimate is None else
                         f'skipped: about {estimate:.0f} s, {left:.0f} s left')
      print(f'{row.root}/{row.point}: {entry["status"]}', flush=True)
      session.record(entry)
      continue
    budget = int(left - FINISH_RESERVE)
    sets = [*row.sets, *GRADIENT_FORMS[session.form_for(row)], *extra_sets, f'train.max_seconds={budget}']
    print(f'{row.root}/{row.point}: about {estimate:.0f} s of {left:.0f} s left ({row.why})', flush=True)
    started = clock()
    env = {'JAX_COMPILATION_CACHE_DIR': cache_folder(root), **os.environ}  # one set outside wins
    with open(os.path.join(logs_folder(root), f'{row.root}.log'), 'a', encoding='utf-8') as log:
      returncode = run(sweep_command(row, root, sets), stdout=log, stderr=subprocess.STDOUT, check=False,
                       env=env).returncode
    entry.update(status='done' if returncode == 0 else f'failed (exit {returncode})', seconds=round(clock() - started),
                 sets=sets)
    print(f'{row.root}/{row.point}: {entry["status"]} in {entry["seconds"]} s', flush=True)
    session.record(entry)
    session.write(out, root)
    pack(root, out)


class Figures(NamedTuple):
  """A part of issue 28's figures: gpu_figures.sh's `part` with `settings` (its environment), for at most
  `most_seconds` (None: all that is left); `name` is what Session.figures records once it has started."""
  name: str
  part: str
  settings: dict
  most_seconds: int | None


# Issue 28's figures after the rows. The Mosaic GPU form's training-step figures in bfloat16 are in, and dz
# in chunks of the vocabulary timed at 100k and 300k (the H200, 2026-11-27, RESULTS.md "The fourth H200
# session": 4 chunks 2.03x / 2.19x XLA, 8 chunks 1.94x / 1.55x in 14% / 13% of XLA's temporaries, the
# issue's tenth not yet met). Since then the chunks are made of whole vocabulary splits (vocab_chunk_tiles:
# 8 chunks at 300k had run one split) and the backward casts the layer a chunk at a time (no bfloat16 copy
# of it all, 183 MiB at 300k). First, at most 180 s: the GPU tests that 'auto' takes the Mosaic form and
# that dz in chunks of the vocabulary gives XLA's numbers (the first failed there on a detail of the test,
# now mended), then beside XLA and the default in one process, at 300k 8 and 16 chunks of the vocabulary
# (the splits and the tenth), then 8 with the layer's gradient written in bfloat16 by XLA and the kernel
# side by side (no float32 array of the layer's size in the kernel's backward: 167 MiB fewer temporaries at
# 300k, about what the tenth still lacks), at Brown's 17,905 4 chunks (whether it could be the default), at
# 100k 16. At most 210 s (180 before that line).
# Then, at most 240 s, the research size's decisive line (issue 28's 250,000 tokens/s at batch 256, whose
# candidates had waited three sessions behind the kernel's figures), at batch 256 alone (each loop line at
# 256 and 1024 took 60-80 s on the H200, and a 15-minute session's second call has about 150 s; the
# research part has 1024): the loop as it is and with every candidate at once (the whole layer's
# bfloat16 copy carried, both moments and the layer's gradient in bfloat16), that gradient's matmul
# alone in its forms (benchmarks/gradient_matmul.py), and every candidate with that matmul's dlogits made
# apart and its rows padded (train.output_layer_gradient_form) at batch 256.
# Then float32 at 300k (the 1.2x target): the GPU test of the Mosaic form's float32 against XLA's TF32
# (test_gpu.py, its two cases, new), then TF32 products first (model.matmul_precision=default, which
# the kernels follow too): XLA beside the Mosaic GPU form, whose float32 operands are TF32 WGMMA products of the
# layer read transposed (since 2026-11-27; a two-byte form before), then it with dz in 8 chunks of the
# vocabulary; then IEEE products (matmul-bound: the dz form makes four matmuls of the layer's size to XLA's
# three; the Mosaic form refuses them), XLA beside the loop form with its gradients from dz (the fused loop
# form, 0.35x XLA at 100k, kept the three-form line past 95 s there), then the Mosaic form's float32 tiles
# on the output layer alone (benchmarks/softmax_kernel_tiles.py), at most 210 s; then, at most 150 s, the research size trained for 1,500 steps on PTB as it is and with every candidate
# (issue 28's test perplexity within 0.5%, on the GPU; +0.10% on the CPU); then each research candidate alone,
# beside the default again (its own call may be on another
# machine): the output layer's bfloat16 copy, its rows or all of it, carried from step to step instead of
# its rows cast at each step's start, AdamW's first moment in bfloat16, both moments (the second
# stochastically rounded), both with the whole layer's copy carried, the layer's gradient written in
# bfloat16, and XLA's command buffers capturing the step loop's while too (the profile put 1.4-2.3 ms of
# the step between operations and 1.14 ms at the memory traffic's bound), then the loop profiled as it is,
# with every candidate, with each carried copy (whether XLA writes the copy in the update's pass) and with
# both bfloat16 moments beside the carried layer. The H200 of 2026-11-27 ran the research candidates on a
# machine at half its matmul peak.
_VOCAB_CHUNK_FIGURES = ('kernel_v300000_bfloat16', 'kernel_mosaic_vocab8_v300000_bfloat16',
                        'kernel_mosaic_vocab16_v300000_bfloat16', 'kernel_mosaic_vocab8_gradient_bf16_v300000_bfloat16',
                        'kernel_v17905_bfloat16',
                        'kernel_mosaic_vocab4_v17905_bfloat16', 'kernel_mosaic_vocab16_v100000_bfloat16')
_FLOAT32_FIGURES = ('kernel_v300000_float32_tf32', 'kernel_mosaic_vocab8_v300000_float32_tf32', 'kernel_v300000_float32',
                    'tiles_mosaic_v300000_float32_tf32')
_RESEARCH_CANDIDATES = ('research_bf16', 'research_bf16_carried_moments_gradient_bf16', 'gradient_matmul_research',
                        'research_bf16_carried_moments_gradient_bf16_apart_padded')
_RESEARCH_FIGURES = ('research_bf16', 'research_bf16_carried_rows',
                     'research_bf16_carried_layer', 'research_bf16_mu_bf16', 'research_bf16_moments_bf16',
                     'research_bf16_carried_moments_bf16', 'research_bf16_gradient_bf16',
                     'research_bf16_dlogits_apart', 'research_bf16_rows_padded',
                     'research_bf16_while_command_buffers', 'profile_research_bf16_loop_256',
                     'profile_research_bf16_loop_carried_moments_gradient_256', 'profile_research_bf16_loop_rows_256',
                     'profile_research_bf16_loop_whole_256', 'profile_research_bf16_loop_carried_moments_256')
FIGURES = (
    Figures('vocab_chunks', 'kernel', {'GPU_TESTS': 'auto_takes_the_mosaic or vocab', 'VOCAB_CHUNKS': '4 8 16',
                                       'KERNEL_VOCABS': '300000 17905 100000', 'ONLY': ','.join(_VOCAB_CHUNK_FIGURES)},
            210),
    Figures('research_candidates', 'loop', {'ONLY': ','.join(_RESEARCH_CANDIDATES), 'RESEARCH_BATCHES': '256'}, 240),
    Figures('float32', 'kernel', {'GPU_TESTS': 'float32_gives_xlas_tf32', 'DTYPES': 'float32', 'KERNEL_VOCABS': '300000',
                                  'FLOAT32_TF32_KERNELS': 'xla,pallas_mosaic', 'FLOAT32_KERNELS': 'xla,pallas_loop_dz',
                                  'ONLY': ','.join(_FLOAT32_FIGURES)}, 210),
    Figures('research_train', 'research_train', {'ONLY': 'research_train_default,research_train_candidates'}, 150),
    Figures('research', 'loop', {'ONLY': ','.join(_RESEARCH_FIGURES)}, None))
# Where no row would fit even a whole call: where the revisited step's time goes.
SPEED_FIGURES = Figures('speed', 'revisited', {}, None)


def spend_the_rest(session: Session, out: str, left: int, clock=time.time, call_seconds: float = 0.0) -> None:
  """The call's time after its rows, `left` seconds (bench.jsonl keeps each finished benchmark): where no
  row trained and none would fit in a whole call of `call_seconds` (the step too slow for the rows), where
  the step's time goes (gpu_plan.sh speed); else the FIGURES parts no call of the session has started, in
  turn, each cut at its most seconds or the time still left."""
  if left < MIN_FALLBACK_SECONDS:
    return
  rows_fit = any(row.get('seconds') is not None or (row.get('estimate_s') or float('inf')) <= call_seconds
                 for row in session.rows)
  end = clock() + left
  parts = [p for p in (FIGURES if rows_fit else (SPEED_FIGURES,)) if p.name not in session.figures]
  spent = [session.rest] if session.rest else []
  for figures in parts:
    seconds = int(min(end - clock(), figures.most_seconds or float('inf')))
    if seconds < MIN_PART_SECONDS:
      break
    spent.append(f'{seconds} s of benchmarks/gpu_figures.sh {figures.part}' +
                 ''.join(f' ({key}={value})' for key, value in figures.settings.items()))
    session.rest = '; '.join(spent)
    session.figures.append(figures.name)
    print(f'the rest of the call: {spent[-1]}', flush=True)
    subprocess.run(['timeout', str(seconds), 'bash', 'benchmarks/gpu_figures.sh', figures.part, out], check=False,
                   env={**os.environ, 'DTYPES': 'bfloat16', 'ONLY': '', 'GPU_TESTS': '', 'KERNEL_VOCABS': '',
                        'TILES_RUNS': '', 'VOCAB_CHUNKS': '', 'FLOAT32_TF32_KERNELS': '', 'FLOAT32_KERNELS': '',
                        'RESEARCH_BATCHES': '',
                        **figures.settings})


def main(argv=None) -> int:
  parser = cli_lib.ArgumentParser('launch.session', description=__doc__.splitlines()[0])
  parser.add_argument('--out', required=True, help='the folder that comes back ($OUT)')
  parser.add_argument('--root', default=os.environ.get('SWEEP_ROOT', 'runs/device'), help='where the rows train')
  parser.add_argument('--seconds', type=float, default=float(os.environ.get('SESSION_SECONDS', '570')),
                      help='the call\'s time from now (SESSION_SECONDS): the device tool stops a command at 600 s; '
                           'a later call on the same machine gets what the session has left')
  parser.add_argument('--set', action='append', default=[], help='a config override for every row (key=value)')
  parser.add_argument('--earlier', default=os.environ.get('SESSION_EARLIER', ''),
                      help="(SESSION_EARLIER) an earlier call's session.json, brought back and carried here: a "
                           'later call that finds a fresh machine (the last one gone back) goes on from it: no '
                           'probes, no row or figure that call ran (ROOT/session.json, on a warm machine, wins)')
  args = parser.parse_args(argv)
  deadline = time.time() + args.seconds
  session = Session.earlier(args.root)
  where = 'this machine'
  if not session and args.earlier:  # a fresh machine: the earlier calls' rows came back with their packs
    if not os.path.exists(args.earlier):
      parser.error(f'--earlier: no file {args.earlier}: copy the last call\'s OUT/session.json there (in .carry/)')
    session, where = Session.read(args.earlier), f'a fresh machine, going on from {args.earlier}'
    hours = (time.time() - session.started) / 3600
    if not session.started or hours > EARLIER_HOURS:
      parser.error(f'--earlier: {args.earlier} is from a call {hours:.0f} h ago, not this session\'s: copy the last '
                   "call's OUT/session.json there, or leave SESSION_EARLIER unset for a first call")
  os.makedirs(args.out, exist_ok=True)
  os.makedirs(logs_folder(args.root), exist_ok=True)
  if session:  # a later call: the rates measured, the rows left, then the figures left
    session.calls += 1
    print(f'call {session.calls} of the session on {where}: {session.form} at {session.rates.get(session.form)} '
          'tokens/s, measured by the first', flush=True)
  else:
    session = Session(device=gpu_name(), started=time.time())
    if any(not row.chars for row in ROWS):  # the word forms, timed only for word rows
      session.rates = probe_forms(session.device, logs_folder(args.root))
      session.form = pick_form(session.rates)
      print(f'picked {session.form}: {" ".join(GRADIENT_FORMS[session.form])}', flush=True)
    if any(row.chars for row in ROWS):
      session.char_form = probe_char_forms(session.rates, logs_folder(args.root), session.device)
      print(f'the character rows: {" ".join(GRADIENT_FORMS[session.form_for(CHAR_PROBE)])}', flush=True)
    for row in ROWS:  # the rows whose rate is their own, timed with their form
      if row.probe_vocab:
        session.rates[row.key] = probe_row(row, session.form_for(row), logs_folder(args.root))
        print(f'probe {row.key}: {session.rates[row.key] or "failed"} tokens/s', flush=True)
  session.write(args.out, args.root)
  # the rows leave the first part of the figures its time until a call has started it
  reserve = FIGURES_RESERVE if FIGURES[0].name not in session.figures else 0
  run_rows(ROWS, session, args.out, args.root, deadline - reserve, extra_sets=tuple(args.set))
  spend_the_rest(session, args.out, int(deadline - time.time() - PACK_RESERVE),
                 call_seconds=args.seconds - PACK_RESERVE)
  # what the figures left (they often end before their reserve: 126 s of the H100's first call on
  # 2026-11-26), for the rows skipped before them
  run_rows(ROWS, session, args.out, args.root, deadline, extra_sets=tuple(args.set), only_skipped=True)
  session.write(args.out, args.root)
  pack(args.root, args.out)
  return 0


if __name__ == '__main__':
  sys.exit(main())
