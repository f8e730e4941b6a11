"""Results as data: a finished run kept as a small JSON file under results/, and RESULTS.md's tables
rendered from those files, so every figure there traces to its run.

  python -m launch.results collect --workdir=runs/own_text/quick --name=own_text_quick --table=own_text \
      --label='text.py:quick' --command='nplm-train --config=experiments/text.py:quick ...' [--commit=SHA]
  python -m launch.results collect --sweep_root=runs/ptb_ladder --name=ptb --table=ladder --label=PTB \
      --command='python -m launch.sweep --config=experiments/ptb.py --sweep=ladder --root=runs/ptb_ladder' \
      --device='NVIDIA H100 80GB HBM3'   # every finished point
  python -m launch.results render            # print every table
  python -m launch.results render --table=char_overfit   # print one
  python -m launch.results render --write    # rewrite RESULTS.md's rendered tables in place
  python -m launch.results render --check    # exit 1 when RESULTS.md differs from results/ (CI runs this)
  python -m launch.results plot --table=own_text_budget --corpus='PTB as text' --output=docs/own_text_budget.png
  python -m launch.results curves --output=docs/studies/training_curves.png   # Brown's runs by epoch

A results file holds the run's figures (results.json and mix_results.json), the command, the resolved
config, the commit, the device, the seed and the wall time; never checkpoints. In RESULTS.md a table
lives between the lines `<!-- results:TABLE -->` and `<!-- /results -->`, and only there is it
rewritten; the GPU speed tables are rendered the same way from the benchmark lines under results/bench/, and
README's headline table too. Any recorded run trains again with
nplm-train --config=experiments/recorded.py:results/NAME.json.
"""

import argparse
import json
import math
import os
import platform as platform_lib
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO, 'results')
RESULTS_MD = os.path.join(REPO, 'RESULTS.md')
README_MD = os.path.join(REPO, 'README.md')  # its headline table
STUDIES_DIR = os.path.join(REPO, 'docs', 'studies')  # a page per study, its tables rendered as RESULTS.md's


def rendered_documents() -> list[str]:
  """The documents whose marked tables are rendered from results/: RESULTS.md, README.md, the study pages."""
  studies = sorted(os.path.join(STUDIES_DIR, n) for n in os.listdir(STUDIES_DIR) if n.endswith('.md')) if (
      os.path.isdir(STUDIES_DIR)) else []
  return [RESULTS_MD, README_MD, *studies]

# Each table's columns: (header, a function of a results record giving the cell).
class _Figure:
  """A column of one figure (results' figures[key]), which a seed summary can average."""

  def __init__(self, key: str, digits: int = 2, of=None, per_device: bool = False):
    self.key, self.digits, self.of = key, digits, of or (lambda value: value)
    self.per_device = per_device  # a speed: a summary over seeds run on different devices leaves it out

  def value(self, record: dict):
    figure = record['figures'].get(self.key)
    return None if figure is None else self.of(figure)

  def __call__(self, record: dict) -> str:
    return _fmt(self.value(record), self.digits)


_num = _Figure


def _fmt(value, digits: int = 2) -> str:
  if value is None:
    return ''
  if isinstance(value, int) or (isinstance(value, float) and digits == 0):
    return f'{value:,.0f}'
  return f'{value:,.{digits}f}'


# A figure transcribed from RESULTS.md as first written (the run's own results.json was not kept): marked where it is
# read, with the note under its table.
TRANSCRIBED = '†'
TRANSCRIBED_NOTE = (f"{TRANSCRIBED} transcribed: copied from RESULTS.md as first written, the run's own results.json "
                    'not kept; the config in its results file was rebuilt afterwards (its `config_rebuilt_at`).')


def _transcribed(record) -> bool:
  return isinstance(record, dict) and bool(record.get('transcribed'))


def _marked(text: str, records) -> str:
  """`text` with the transcribed mark when any of `records` was transcribed."""
  return f'{text} {TRANSCRIBED}' if any(_transcribed(r) for r in records) else text


_label = lambda r: f'`{r["label"]}`'
_device_of = lambda r: r['device']
def _mixture_test(r: dict) -> str:
  """The mixture's test perplexity, its weight named when it is not the paper's 0.5."""
  f = r['figures']
  weight = f.get('mix_weight', 0.5)
  return _fmt(f.get('mix_test_ppl')) + ('' if weight == 0.5 or 'mix_test_ppl' not in f else f' (weight {weight:.2f})')


_MIX_KN5 = ('+ KN5 test ppl (weight 0.5 unless named)', _mixture_test)


def _over_kn5(key: str):
  """A test perplexity over the run's own KN5's."""
  return lambda r: _fmt(r['figures'][key] / r['figures']['ngram_test_ppl']) if key in r['figures'] else ''


_CHECKS = [('run', _label), ('parameters', _num('num_parameters', 0)), ('steps', _num('step', 0)),
           ('epochs', _num('epochs', 2)), ('tokens/s', _num('tokens_per_sec', 0)), ('wall s', _num('wall_seconds', 0)),
           ('valid ppl', _num('valid_ppl')), ('test ppl', _num('test_ppl')), ('device', _device_of)]


def _paired_columns(header: str) -> list:
  """A table of short runs that differ in one option: the row (under `header`), _CHECKS' figures but their
  rates (the runs shared the machine with other work), the device."""
  return [(header, _label)] + [c for c in _CHECKS[1:-1] if c[0] not in ('tokens/s', 'wall s')] + [('device', _device_of)]


_SEED = ('seed', lambda r: str(r['seed']))  # a table's seed column


def _ladder_columns(*figures) -> list:
  """A ladder table's columns: the row, its size and cost, then `figures` (header, cell), seed, device."""
  return [('row', _label), ('parameters', _num('num_parameters', 0)), ('epochs', _num('epochs', 2)),
          ('stopped by', lambda r: r['figures'].get('stop_reason') or '-'),
          ('tokens/s', _num('tokens_per_sec', 0, per_device=True)),
          ('wall s', _num('wall_seconds', 0, per_device=True)), *figures, _SEED,
          ('device', _device_of)]


_BITS_PER_CHAR = (('valid bits/char', _num('valid_bpc', 3)), ('test bits/char', _num('test_bpc', 3)))

def _config_value(key: str):
  """A column of the run's resolved config (section.key)."""
  section, name = key.split('.')
  return lambda r: f'{r["config"][section][name]:,}'


def _validation_share(r: dict) -> str:
  """The validations during training over the run's train.max_seconds, where the run timed them."""
  seconds = r['figures'].get('validation_seconds')
  return '' if seconds is None else f"{seconds / r['config']['train']['max_seconds']:.1%}"


def _fitted_mixture(r: dict) -> str:
  """The mixture at the weight fitted on validation: 'weight: test ppl'."""
  f = r['figures']
  return f'{f["mix_fitted_weight"]:.2f}: {f["mix_fitted_test_ppl"]:.1f}' if 'mix_fitted_weight' in f else ''


TABLES = {
    'own_text': [('recipe', _label)] + [c for c in _CHECKS[1:-1] if c[0] != 'steps'] + [_MIX_KN5, ('device', _device_of)],
    # Test perplexity by time budget: the whole command's seconds (training, evaluation, the mixture) under
    # train.max_seconds, the recipes' rows side by side.
    'own_text_curve': [('recipe', _label), ('train.max_seconds', lambda r: _fmt(r['config']['train']['max_seconds'], 0)),
                       ('command s', _num('command_seconds', 0)), ('epochs', _num('epochs', 2)),
                       ('test ppl', _num('test_ppl')), _MIX_KN5, ('device', _device_of)],
    # The own-text recipe under a time budget on corpora of several sizes, each against its own KN5: the
    # whole command's seconds, the network alone and mixed, and both over KN5's test perplexity.
    'own_text_budget': [('corpus, recipe', _label),
                        ('train.max_seconds', lambda r: _fmt(r['config']['train']['max_seconds'], 0)),
                        ('command s', _num('command_seconds', 0)), ('epochs', _num('epochs', 2)),
                        ('tokens/s', _num('tokens_per_sec', 0)), ('test ppl', _num('test_ppl')),
                        ('KN5 test ppl', _num('ngram_test_ppl')), _MIX_KN5,
                        ('alone / KN5', _over_kn5('test_ppl')), ('mixed / KN5', _over_kn5('mix_test_ppl')),
                        ('validations / budget', _validation_share), ('device', _device_of)],
    # The short runs that show a change kept the numbers (smoke, quick, PTB).
    'checks': _CHECKS,
    # The reference code's options on the ladder's top row, each at the same number of steps (their
    # rates left out: they shared the machine with other work).
    'reference_options': [('option', _label)] + [c for c in _CHECKS[1:-1] if c[0] not in ('tokens/s', 'wall s')] + [
        _MIX_KN5, ('device', _device_of)],
    # AdamW's moments in bfloat16 against float32 on one short training (how far a faster step moves the
    # test perplexity).
    'moment_dtypes': _paired_columns('moments'),
    # The output layer's gradient in bfloat16 against float32, alone and with every other byte-saving option
    # (the same question).
    'layer_gradient_dtypes': _paired_columns('run'),
    # The revisited family's ladders trained to early stopping: words, and characters in bits.
    'ladder': _ladder_columns(('valid ppl', _num('valid_ppl')), ('test ppl', _num('test_ppl')),
                              ('+ n-gram test ppl', _num('mix_test_ppl'))),
    # Character rows of different shapes at the same schedule on the CPU: where the parameters sit.
    # Their wall time is shown (the question is partly cost); they ran one at a time, beside light work.
    'char_shape': [('point', _label), *(c for c in _CHECKS if c[0] in ('parameters', 'steps', 'epochs', 'wall s')),
                   *_BITS_PER_CHAR, ('device', _device_of)],
    # The same at a sixteenth of the characters, where they fit their data as the GPU rows do: the
    # best step against the steps trained says when validation stopped improving (no rates: the points
    # shared the CPU with other work); a point run with several seeds has a row each and one of their means.
    'char_overfit': [('point', _label), ('parameters', _num('num_parameters', 0)), ('best step', _num('step', 0)),
                     ('steps trained', _num('steps_trained', 0)), *_BITS_PER_CHAR, _SEED, ('device', _device_of)],
    # Brown's regularised family, one change at a time from MLP9 tuned, mixed 0.5/0.5 with the trigram.
    'regularised': [('variant', _label), ('n', _config_value('model.n')), ('h', _config_value('model.h')),
                    ('m', _config_value('model.m')), ('feature / hidden dropout', lambda r: (
                        f'{r["config"]["model"]["feature_dropout"]} / {r["config"]["model"]["hidden_dropout"]}')),
                    ('valid', _num('valid_ppl', 1)), ('test', _num('test_ppl', 1)),
                    ('mixed valid', _num('mix_valid_ppl', 1)), ('mixed test', _num('mix_test_ppl', 1)),
                    ('fitted weight: test', _fitted_mixture), ('epochs', _num('epochs', 0)), ('device', _device_of)],
    # PTB words: the 2003 network's regularised grid (AdamW at a constant rate) and the annealed points from
    # its n = 8 point, each mixed 0.5 / 0.5 with KN5.
    'ptb_regularised': [('point', _label), ('valid', _num('valid_ppl', 1)), ('test', _num('test_ppl', 1)),
                        ('mixed valid', _num('mix_valid_ppl', 1)), ('mixed test', _num('mix_test_ppl', 1)),
                        ('device', _device_of)],
    'ptb_annealed': [('point', _label), ('valid', _num('valid_ppl', 1)), ('test', _num('test_ppl', 1)),
                     ('mixed valid', _num('mix_valid_ppl', 1)), ('mixed test', _num('mix_test_ppl', 1)),
                     ('fitted weight: test', _fitted_mixture), ('epochs', _num('epochs', 1)), ('device', _device_of)],
    # The same run retrained with bfloat16 matmuls against float32 (one GPU): end to end from the command to
    # results.json.
    'compute_dtype_retrained': [('run', _label), ('compute dtype', lambda r: r['config']['model']['compute_dtype']),
                                ('valid', _num('valid_ppl')), ('test', _num('test_ppl')),
                                ('mixed valid', _num('mix_valid_ppl')), ('mixed test', _num('mix_test_ppl')),
                                ('epochs', _num('epochs', 1)), ('end to end s', _num('wall_seconds', 1)),
                                ('device', _device_of)],
    # Brown MLP1 tuned with the exact softmax, sampled softmax or NCE: epochs to validation 300 and where each ends.
    'time_to_quality': [('point', _label), ('loss', lambda r: _LOSS_NAMES[r['config']['loss']['name']]),
                        ('k', lambda r: '' if r['config']['loss']['name'] == 'softmax' else
                         _fmt(r['config']['loss']['num_samples'])),
                        ('batch', _config_value('train.batch_size')),
                        ('lr', lambda r: f"{r['config']['optimizer']['learning_rate']:g}"),
                        ('first epoch < 300', lambda r: _fmt(r['figures']['first_epoch_below_300']) or 'never'),
                        ('best valid', _num('valid_ppl', 1)), ('test', _num('test_ppl', 1)),
                        ('epochs', _num('epochs', 0)), ('device', _device_of)],
    'char_ladder': _ladder_columns(*_BITS_PER_CHAR,
                                   ('+ n-gram test bits/char', _Figure('mix_test_ppl', 3, of=math.log2))),
}
# The own-text recipe's explorations under a budget (other sizes, no annealing): printed alone by render --table.
TABLES['own_text_budget_points'] = TABLES['own_text_budget']
# A transcribed row trained again from today's code, each seed its own results file: beside the seeds' summary.
TABLES['seeds_rerun'] = [('run', _label), ('epochs', _num('epochs', 0)), ('valid ppl', _num('valid_ppl')),
                         ('test ppl', _num('test_ppl')), _SEED, ('device', _device_of)]
# A ladder's tuning and time-budget points: the study page's table, with the ladder's columns.
TABLES.update({f'{table}_points': TABLES[table] for table in ('ladder', 'char_ladder')})


def _ladder_split(records: list[dict], table: str) -> tuple[list[dict], list[dict]]:
  """A ladder's records as (one row per rung and the headline's best rows, every other point). A rung's row is
  its last run not stopped by a time budget (else its longest); the best rows keep all their seeds."""
  rows = [r for r in records if r['table'] == table]
  best = {name for _, _, names, _, _ in HEADLINE for name in names}
  rungs = {}
  for r in rows:
    rung = re.match(r'(\w+?_ladder)_(?:\d+s_)?((?:char_)?ladder\d+)(?:_|$)', r['name'])  # ptb_ladder_[360s_]ladder4_...
    if rung:
      rungs.setdefault(rung.groups(), []).append(r)
  kept = {r['name'] for r in rows if r['name'] in best}
  for group in rungs.values():
    if any(r['name'] in best for r in group):
      continue
    converged = [r for r in group if not r['figures'].get('stop_reason', '').startswith('train.max_seconds')]
    kept.add((converged[-1] if converged else max(group, key=lambda r: r['figures'].get('epochs', 0)))['name'])
  rung_of = {r['name']: key for key, group in rungs.items() for r in group}
  def ladder_order(r):  # by corpus, then rung by rung, the tuned rows last
    corpus, rung = rung_of.get(r['name'], (r['name'].split('_')[0], 'ladder99'))
    return corpus.split('_')[0], int(re.sub(r'\D', '', rung)), r['name']
  return sorted((r for r in rows if r['name'] in kept), key=ladder_order), [r for r in rows if r['name'] not in kept]


# Tables whose rows are a selection of another table's records.
ROWS_OF = {**{table: (lambda records, table=table: _ladder_split(records, table)[0]) for table in ('ladder', 'char_ladder')},
           **{f'{table}_points': (lambda records, table=table: _ladder_split(records, table)[1])
              for table in ('ladder', 'char_ladder')}}


SUPERSEDED_SUFFIX = '_transcribed'  # a transcribed record kept beside the rerun that replaced it in its table


def _table1_of(table: str):
  """The paper's Table 1 beside ours (launch/table1.py's table), from the records of `table`: each named
  brown_TABLE_POINT after its sweep point (mlp2, mlp2_annealed, kneser_ney_5, ...). A point trained again
  renders from its rerun; the transcribed record it replaced (brown_TABLE_POINT_transcribed, an earlier
  device's figures) stays in results/ and is cited only where it is the point's one record."""
  def render(records: list[dict]) -> tuple[str, list[dict]]:
    from launch import table1  # pylint: disable=g-import-not-at-top
    rows = {}
    for r in sorted((r for r in records if r['table'] == table), key=_transcribed):  # own runs first
      rows.setdefault(r['name'][len(f'brown_{table}_'):].removesuffix(SUPERSEDED_SUFFIX), r)
    kept = {id(r) for r in rows.values()}
    cited = [r for r in records if id(r) in kept]
    label = lambda row: _marked(row, [rows[p] for p in table1.points_of(row) if p in rows])
    return table1.render(lambda point: rows[point]['figures'] if point in rows else None,
                         label=label).rstrip('\n'), cited
  return render


_LOSS_NAMES = {'softmax': 'exact', 'sampled_softmax': 'sampled softmax', 'nce': 'NCE'}


def _markdown_table(header, rows) -> str:
  """A Markdown table of `header`'s cells and each row's cells."""
  return '\n'.join('| ' + ' | '.join(cells) + ' |' for cells in [header, ['---'] * len(header), *rows])


def _finalists(records: list[dict]) -> tuple[str, list[dict]]:
  """The time-to-quality finalists alone on a CPU: the time to the first validation below 300, each as a
  ratio of the first row's."""
  rows = [r for r in records if r['table'] == 'time_to_quality_finalists']
  first = rows[0]['figures']['seconds_to_below_300']
  cells = [[f'`{r["label"]}`', f'epoch {f["first_epoch_below_300"]}: {f["first_valid_below_300"]:.2f}',
            f'{_fmt(f["seconds_to_below_300"], 0)} s',
            f'{_fmt(f["epoch_seconds_min"], 0)}-{_fmt(f["epoch_seconds_max"], 0)} s',
            f'{f["seconds_to_below_300"] / first:.2f}', r['device']] for r, f in ((r, r['figures']) for r in rows)]
  return _markdown_table(['run', 'first valid < 300', 'wall time to it', 'epoch time (train + evaluation)', 'ratio',
                          'device'], cells), rows


# Validation perplexity by epoch: each table's rows (row name, record, epochs shown or 0 for all); a table of one
# run with a learning_rate_curve adds its row (the multiple of the starting rate each epoch trained at).
CURVES = {
    'curve_mlp1_paper': [('valid', 'brown_curve_mlp1_paper', 0)],
    'curve_mlp1_tuned': [('valid', 'brown_curve_mlp1_tuned', 0)],
    'curve_mlp1_paper_annealed': [('valid', 'brown_curve_mlp1_paper_annealed', 0)],
    'curve_mlp10_paper': [('valid', 'brown_curve_mlp10_paper', 0)],
    'curve_sampled': [('exact', 'brown_curve_mlp1_paper', 6), ('sampled softmax, k = 100', 'brown_curve_mlp1_sampled', 0)],
    'curve_tuned_sampled': [('exact', 'brown_curve_mlp1_tuned', 0),
                            ('sampled softmax, k = 100', 'brown_curve_mlp1_tuned_sampled', 0)],
    'curve_sampled_rates': [('lr 4e-3, decay 1e-4', 'brown_curve_mlp1_sampled_lr4', 0),
                            ('lr 4e-3, decay 1e-5', 'brown_curve_mlp1_sampled_lr4_wd5', 0)],
    'curve_exact_rate': [('exact, lr 4e-3, decay 1e-5', 'brown_curve_mlp1_lr4_wd5', 0)],
    'curve_mlp1_tuned_seeds': [('seed 0', 'brown_curve_mlp1_tuned_seed0', 0), ('seed 1', 'brown_curve_mlp1_tuned_seed1', 0),
                               ('seed 2', 'brown_curve_mlp1_tuned_seed2', 0)],
}


def _curves_of(table: str):
  def render(records: list[dict]) -> tuple[str, list[dict]]:
    by_name = {r['name']: r for r in records}
    rows = [(label, by_name[name]['figures'], shown) for label, name, shown in CURVES[table]]
    first = rows[0][1]['first_epoch']
    width = max(shown or len(f['valid_curve']) for _, f, shown in rows)
    cells = []
    for label, f, shown in rows:
      for row_label, values in ((label, [_fmt(v, 1) for v in f['valid_curve']]),
                                ('learning rate', f.get('learning_rate_curve') if len(rows) == 1 else None)):
        if values:
          values = values[:shown or width]
          cells.append([row_label, *values, *[''] * (width - len(values))])
    used = list(dict.fromkeys(name for _, name, _ in CURVES[table]))
    return _markdown_table(['epoch', *(str(first + i) for i in range(width))], cells), [by_name[name] for name in used]
  return render


def _bench_lines(file: str) -> list[dict]:
  with open(os.path.join(RESULTS_DIR, 'bench', file), encoding='utf-8') as f:
    return [json.loads(line) for line in f if line.strip()]


def _bench(lines: list[dict], name: str, kernel: str = 'xla') -> list[dict]:
  """The lines of one measurement (its name and softmax kernel), one per run, in the file's order."""
  found = [r for r in lines if r['name'] == name and r.get('softmax_kernel') == kernel]
  if not found:
    raise SystemExit(f'error: no line {name!r} ({kernel}) in the benchmark file; RESULTS.md names a figure it lacks')
  return found


_GPU_VOCABS = (17_905, 100_000, 300_000)


def _bench_table(file: str, header: list[str], rows_of) -> tuple[str, list[str]]:
  """A table of results/bench/FILE's lines: `header`'s cells, then rows_of(the file's lines)' rows of cells."""
  return _markdown_table(header, rows_of(_bench_lines(file))), [f'results/bench/{file}']


def _loop_kernel_rows(lines):
  """The fused kernel's loop form against XLA all at once and streamed: training tokens/s and temporaries."""
  for vocab in _GPU_VOCABS:
    runs = (_bench(lines, f'kernel_v{vocab}_bfloat16')[0], _bench(lines, f'streamed_v{vocab}_bfloat16')[0],
            _bench(lines, f'kernel_v{vocab}_bfloat16', 'pallas_loop')[0])
    rates = [r['train_tokens_per_sec'] for r in runs]
    yield [f'{vocab:,}', *(_fmt(v, 0) for v in rates), f'{rates[2] / max(rates[:2]):.2f}x',
           ' / '.join(_fmt(r['train_temp_mib'], 0) for r in runs)]


def _both(values, form) -> str:
  return ' / '.join(form(v) for v in values)


_rate = lambda v: _fmt(v, 0)
_times = lambda v: f'{v:.2f}x'


def _mosaic_kernel_rows(lines):
  """The Mosaic GPU form against XLA all at once, both runs of each: rates, ratios, temporaries."""
  for vocab in _GPU_VOCABS:
    xla, mosaic = _bench(lines, f'kernel_v{vocab}_bfloat16'), _bench(lines, f'kernel_v{vocab}_bfloat16', 'pallas_mosaic')
    ratio = lambda key: [m[key] / x[key] for x, m in zip(xla, mosaic)]  # pylint: disable=cell-var-from-loop
    yield [f'{vocab:,} (Brown)' if vocab == 17_905 else f'{vocab:,}',
           _both([x['train_tokens_per_sec'] for x in xla], _rate),
           _both([m['train_tokens_per_sec'] for m in mosaic], _rate),
           f'**{_both(ratio("train_tokens_per_sec"), _times)}**',
           f'{_fmt(xla[0]["train_temp_mib"], 0)} / {_fmt(mosaic[0]["train_temp_mib"], 0)} '
           f'({mosaic[0]["train_temp_mib"] / xla[0]["train_temp_mib"]:.0%})',
           _both(ratio('eval_tokens_per_sec'), _times)]
  chunks, xla = _bench(lines, 'kernel_mosaic_chunks8_v300000_bfloat16', 'pallas_mosaic'), _bench(lines, 'kernel_v300000_bfloat16')
  yield ['300,000, Mosaic with `dz_chunks=8`', '', _both([c['train_tokens_per_sec'] for c in chunks], _rate),
         _times(chunks[0]['train_tokens_per_sec'] / xla[0]['train_tokens_per_sec']),
         f'{_fmt(chunks[0]["train_temp_mib"], 0)} ({chunks[0]["train_temp_mib"] / xla[0]["train_temp_mib"]:.0%})', '']


def _vocabulary_chunks_rows(lines):
  """dz in chunks of the vocabulary against the Mosaic form's default and XLA: tokens/s, ratio to XLA, temporaries."""
  for vocab in _GPU_VOCABS[1:]:
    xla = _bench(lines, f'kernel_v{vocab}_bfloat16')[0]
    cells = [f'{vocab:,}', f'{_rate(xla["train_tokens_per_sec"])} ({_fmt(xla["train_temp_mib"], 0)} MiB)']
    for name in (f'kernel_v{vocab}_bfloat16', f'kernel_mosaic_vocab4_v{vocab}_bfloat16',
                 f'kernel_mosaic_vocab8_v{vocab}_bfloat16'):
      m = _bench(lines, name, 'pallas_mosaic')[0]
      cells.append(f'{_rate(m["train_tokens_per_sec"])}, {_times(m["train_tokens_per_sec"] / xla["train_tokens_per_sec"])} '
                   f'({_fmt(m["train_temp_mib"], 0)} MiB, {m["train_temp_mib"] / xla["train_temp_mib"]:.0%})')
    yield cells


_V = '\\|V\\|'
BENCH_TABLES = {
    'gpu_loop_kernel': ('loop_kernel_and_gradient_forms.jsonl',
                        [_V, 'XLA all at once', 'XLA streamed (4,096 columns)', 'kernel (`pallas_loop`)', 'kernel / best XLA',
                         'temporaries MiB: all at once / streamed / kernel'], _loop_kernel_rows),
    'gpu_mosaic_kernel': ('mosaic_kernel_and_character_forms.jsonl',
                          [_V, 'XLA all at once', '`pallas_mosaic`', 'ratio', 'temporaries MiB (XLA / Mosaic)',
                           'evaluation ratio'], _mosaic_kernel_rows),
    'gpu_vocabulary_chunks': ('mosaic_kernel_vocabulary_chunks.jsonl',
                              [_V, 'XLA all at once', 'Mosaic, default', '`dz_axis=vocab,dz_chunks=4`',
                               '`dz_axis=vocab,dz_chunks=8`'], _vocabulary_chunks_rows),
}


def _seed_statistics(records) -> tuple[str, list[dict]]:
  """Summaries over seeds (mean ± standard deviation, least-most) of runs whose own records were not kept."""
  rows = [r for r in records if r['table'] == 'seeds']
  keys = ('valid_ppl', 'test_ppl', 'mix_valid_ppl', 'mix_test_ppl')
  summary = lambda s: f'{s["mean"]:.1f} ± {s["sd"]:.1f} ({s["min"]:.1f}-{s["max"]:.1f})'
  cells = [[r['label'], ', '.join(map(str, r['figures']['seeds'])), *(summary(r['figures']['over_seeds'][k]) for k in keys)]
           for r in rows]
  return _markdown_table(['model', 'seeds', 'valid', 'test', 'mixed valid', 'mixed test'], cells), rows


# README's headline: (corpus, the anchor's figure, the records of our best config's seeds, the n-gram mixed in,
# the config). One record of kind 'seeds' is a summary already; several records are seeds averaged here.
HEADLINE = [
    ("Brown, the paper's MLP1", '268 (paper)',
     ['brown_mlp1_tuned_seed0', 'brown_mlp1_tuned_seed1', 'brown_mlp1_tuned_seed2'], '', 'brown.py:mlp1_tuned'),
    ('Brown, best', "252 (paper's best, MLP10 mixed)",
     ['brown_tune_tune11_dropout0.5_weight_decay0.4_cosine6_ema0.999_seed0',
      'brown_tune_243s_tune11_dropout0.5_weight_decay0.4_cosine6_ema0.999_seed1',
      'brown_tune_tune11_dropout0.5_weight_decay0.4_cosine6_ema0.999_seed2'], 'trigram', 'brown.py:best'),
    ('Penn Treebank, words', '140.2 (Mikolov et al. 2011, feed-forward)',
     ['ptb_ladder_1170s_ladder5_dropout_seed0', 'ptb_ladder_ladder5_dropout_seed1', 'ptb_ladder_ladder5_dropout_seed2'],
     'KN5', 'ptb.py:best'),
    ('Penn Treebank, characters', '1.427 (Kneser-Ney 11-gram)', ['ptb_char_tune_char_tune0_dropout0.1_cosine8_seed0'],
     'KN11', 'ptb.py:char_best'),
]


def _headline_cell(group: list[dict], key: str, count_seeds: bool = True) -> str:
  """A figure of the group: bits per character for characters (3 digits), perplexity (1 digit); mean ± sd over
  several seeds, and how many when `count_seeds`."""
  seeds = lambda n: f' ({n} seeds)' if count_seeds else ''
  if group[0]['table'] == 'seeds':
    stats = group[0]['figures']['over_seeds'].get(key)
    return f'{stats["mean"]:.1f} ± {stats["sd"]:.1f}{seeds(len(group[0]["figures"]["seeds"]))}' if stats else ''
  chars = 'test_bpc' in group[0]['figures']
  values = [r['figures'].get(key) for r in group]
  if any(v is None for v in values):
    return ''
  values, digits = ([math.log2(v) for v in values], 3) if chars else (values, 1)
  if len(values) == 1:
    return f'{values[0]:.{digits}f}'
  return f'{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}{seeds(len(values))}'


def _headline(records) -> tuple[str, list[dict]]:
  by_name = {r['name']: r for r in records}
  cells, used = [], []
  for corpus, anchor, names, ngram, config in HEADLINE:
    group = [by_name[name] for name in names]
    used += group
    mixed = _headline_cell(group, 'mix_test_ppl', count_seeds=False)
    cells.append([corpus, anchor, _marked(_headline_cell(group, 'test_ppl'), group),
                  _marked(f'{mixed} ({ngram})', group) if mixed and ngram else '',
                  f'`{config}`'])
  return _markdown_table(['corpus', 'anchor', 'ours, network alone', 'ours, mixed with an n-gram', 'config'], cells), used


def _char_network_and_ngram(records) -> tuple[str, list[dict]]:
  """The character run mixed with its n-gram, in bits per character: the network, the n-gram alone, their mixture
  at the run's weight and at the weight fitted on validation."""
  r = next(r for r in records if r['table'] == 'char_network_and_ngram')
  f, bits = r['figures'], lambda key: _fmt(math.log2(r['figures'][key]), 3) if key in r['figures'] else ''
  order = r['config']['model']['n']
  return _markdown_table(['model', 'valid bits/char', 'test bits/char'], [
      [f'network (n = {order})', _fmt(f['valid_bpc'], 3), _fmt(f['test_bpc'], 3)],
      [f'Kneser-Ney {order}-gram (interpolated, modified)', bits('ngram_valid_ppl'), bits('ngram_test_ppl')],
      [f'network + KN{order}, weight {f["mix_weight"]}', bits('mix_valid_ppl'), bits('mix_test_ppl')],
      [f'network + KN{order}, weight fitted on valid ({f["mix_fitted_weight"]:.2f})', '', bits('mix_fitted_test_ppl')],
  ]), [r]


OOV_RECORD = 'brown_oov_output_columns_mlp1_tuned_seed0'  # the candidate output columns of the test split's new words
OOV_POS_RECORD = 'brown_oov_pos_agreement_mlp1_tuned_seed0'  # nplm_jax.tools.extend's vectors for them, by tag


def _oov_pos_agreement(records) -> tuple[str, list[dict]]:
  """launch.pos_agreement's rows: how often a word's nearest neighbour shares its most frequent tag."""
  r = next(r for r in records if r['name'] == OOV_POS_RECORD)
  return _markdown_table(['words, nearest among', 'count', 'the nearest shares the most frequent tag'],
                         [[row, _fmt(words), f'{100 * share:.1f}%'] for row, words, share in r['figures']['pos_agreement']]
                         ), [r]


def _oov_output_columns(records) -> tuple[str, list[dict]]:
  """The candidate output columns of the new words, scored on the test split: known and new tokens' perplexity."""
  r = next(r for r in records if r['name'] == OOV_RECORD)
  rows = r['figures']['output_columns']
  base = rows[0][1]
  cells = [[row, _fmt(known, 1) + (f' (+{known / base - 1:.1%})' if '(the default)' in row else ''),
            _fmt(new, 1 if new is not None and new < 10_000 else 0)] for row, known, new in rows]
  return _markdown_table(["new words' output columns", "known tokens' perplexity", "new words' tokens' perplexity"],
                         cells), [r]


# PTB words beside Mikolov et al. (2011)'s test figures: (row, their figure, the record, which of its figures).
PTB_BEST = 'ptb_annealed_n8_h1000_feature_dropout0.3_weight_decay0.2'  # experiments/ptb.py's TABLE_NETWORK
PTB_WORDS_ROWS = [
    ('Kneser-Ney 3-gram (modified, interpolated)', '148.3', 'ptb_ngrams_kneser_ney_3', ''),
    ('Kneser-Ney 5-gram (modified, interpolated)', '141.2', 'ptb_ngrams_kneser_ney_5', ''),
    ('feed-forward NNLM', '140.2', PTB_BEST, ''),
    ('NNLM + KN5, weight 0.5', '116.7', PTB_BEST, 'mix_'),
    ('NNLM + KN5, weight fitted on valid', '', PTB_BEST, 'mix_fitted_'),
    ("before annealing: the regularised grid's best alone (n = 5)", '',
     'ptb_regularised_n5_feature_dropout0.2_weight_decay0.01', ''),
    ("before annealing: the regularised grid's best mixture (n = 8)", '',
     'ptb_regularised_n8_feature_dropout0.2_weight_decay0.01', 'mix_'),
]


def _ptb_words(records: list[dict]) -> tuple[str, list[dict]]:
  by_name = {r['name']: r for r in records}
  cells = []
  for row, theirs, name, prefix in PTB_WORDS_ROWS:
    figures = by_name[name]['figures']
    if prefix == 'mix_fitted_':
      row = f'{row} ({figures["mix_fitted_weight"]:.2f})'
    cells.append([_marked(row, [by_name[name]]), theirs, _fmt(figures.get(prefix + 'valid_ppl'), 1),
                  _fmt(figures.get(prefix + 'test_ppl'), 1)])
  used = list(dict.fromkeys(name for _, _, name, _ in PTB_WORDS_ROWS))
  return _markdown_table(['model', 'Mikolov et al. test', 'ours valid', 'ours test'], cells), [by_name[name] for name in used]


# Tables with a layout of their own: a function of the records giving the table's text and the records it used.
RENDERERS = {'table1': _table1_of('table1'), 'table1_tuned': _table1_of('table1_tuned'), 'ptb_words': _ptb_words,
             'time_to_quality_finalists': _finalists, **{table: _curves_of(table) for table in CURVES},
             **{table: lambda records, spec=spec: _bench_table(*spec) for table, spec in BENCH_TABLES.items()},
             'oov_pos_agreement': _oov_pos_agreement, 'oov_output_columns': _oov_output_columns,
             'seeds': _seed_statistics, 'headline': _headline,
             'char_network_and_ngram': _char_network_and_ngram}


def _git_commit() -> str:
  try:
    return subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return 'unknown'


def _device(results: dict) -> str:
  where = results.get('platform', 'cpu')
  if where == 'cpu':
    return f'CPU, {os.cpu_count()} cores ({platform_lib.machine()})'
  return results.get('device_kind') or where.upper()  # results.json older than device_kind: the platform alone


def record(workdir: str, name: str, table: str, label: str, command: str, commit: str | None = None,
           device: str | None = None, command_seconds: float | None = None) -> dict:
  """A finished workdir's results as a results/ record; command_seconds: the whole command's, timed
  outside it (start-up included), where the question is a time budget."""
  def read(file):
    path = os.path.join(workdir, file)
    if not os.path.exists(path):
      return {}
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  if os.path.isfile(workdir):  # nplm-ngram --output's file
    workdir, results = os.path.dirname(workdir), read(workdir)
  else:
    results = read('results.json')
  if not results:
    raise SystemExit(f'error: {workdir} holds no results.json; collect a finished run')
  if 'smoothing' in results:  # an n-gram baseline's (nplm-ngram)
    return ngram_record(results, name, table, label, command, commit, device)
  mix = read('mix_results.json')
  rates = []
  metrics_path = os.path.join(workdir, 'metrics.jsonl')
  if os.path.exists(metrics_path):
    with open(metrics_path, encoding='utf-8') as f:
      rates = [r['tokens_per_sec'] for r in map(json.loads, f) if r.get('tokens_per_sec')]
  figures = {k: results[k] for k in ('valid_ppl', 'test_ppl', 'valid_bpc', 'test_bpc', 'num_parameters', 'epochs',
                                     'steps_trained', 'step', 'wall_seconds', 'validation_seconds', 'stop_reason')
             if k in results}
  figures['tokens_per_sec'] = round(statistics.median(rates), 1) if rates else None
  for source in (results, mix):  # the mixture: in results.json when trained with it, else from nplm-mix
    figures.update({k: source[k] for k in ('mix_valid_ppl', 'mix_test_ppl', 'mix_ngram', 'mix_weight',
                                           'mix_weight_fitted', 'mix_fitted_weight', 'mix_fitted_test_ppl',
                                           'ngram_valid_ppl', 'ngram_test_ppl') if k in source})
  if command_seconds is not None:
    figures['command_seconds'] = round(command_seconds, 1)
  config = results.get('config', {})
  return {'name': name, 'table': table, 'label': label, 'command': command, 'commit': commit or _git_commit(),
          'device': device or _device(results), 'seed': config.get('seed'), 'figures': figures, 'config': config}


def ngram_record(results: dict, name: str, table: str, label: str, command: str, commit: str | None = None,
                 device: str | None = None) -> dict:
  """An n-gram baseline's results (nplm-ngram --output, or a sweep's ngram point) as a results/ record."""
  figures = {k: results[k] for k in ('order', 'smoothing', 'valid_ppl', 'test_ppl', 'valid_bpc', 'test_bpc')
             if k in results}
  figures['wall_seconds'] = results.get('seconds')
  return {'name': name, 'table': table, 'label': label, 'command': command, 'commit': commit or _git_commit(),
          'device': device or _device({}), 'seed': 0, 'figures': figures, 'config': results.get('config', {}),
          'kind': 'ngram'}


def _natural_order(name: str) -> list:
  """A sort key that orders the numbers in a name by value: over9 before over10."""
  return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', name)]


def load_records() -> list[dict]:
  records = []
  for name in sorted(os.listdir(RESULTS_DIR), key=_natural_order) if os.path.isdir(RESULTS_DIR) else []:
    if name.endswith('.json'):
      with open(os.path.join(RESULTS_DIR, name), encoding='utf-8') as f:
        records.append(json.load(f))
  return records


def render_table(table: str, records: list[dict]) -> str:
  if table in RENDERERS:
    text, rows = RENDERERS[table](records)  # records, or the paths of the benchmark files read
    return text + '\n\n' + _sources_line(table, rows)
  columns = TABLES[table]
  rows = ROWS_OF[table](records) if table in ROWS_OF else [r for r in records if r['table'] == table]
  lines = ['| ' + ' | '.join(h for h, _ in columns) + ' |', '| ' + ' | '.join('---' for _ in columns) + ' |']
  lines += ['| ' + ' | '.join([_marked(columns[0][1](r), [r]), *(cell(r) for _, cell in columns[1:])]) + ' |'
            for r in rows]
  lines += [_seed_summary(label, group, columns) for label, group in _seed_groups(rows)]
  lines.append('')
  lines.append(_sources_line(table, rows))
  return '\n'.join(lines)


def _sources_line(table: str, rows: list) -> str:
  """Where a table comes from: its results files (README's headline: how many, named in launch/results.py), each
  transcribed one marked, and the note on transcribed figures when there is one."""
  if table == 'headline':
    sources = f'{len(rows)} results files (launch/results.py, HEADLINE)'
  else:
    sources = ', '.join(f'`{r}`' if isinstance(r, str) else _marked(f'`results/{r["name"]}.json`', [r]) for r in rows)
  line = f'Rendered by `python -m launch.results render --write` from {sources}.'
  if rows and all(_transcribed(r) for r in rows):
    return f'{line} Every figure of this table is {TRANSCRIBED_NOTE[2:]}'
  return line + (' ' + TRANSCRIBED_NOTE if any(_transcribed(r) for r in rows) else '')


def _seed_groups(rows: list[dict]) -> list[tuple[str, list[dict]]]:
  """The rows run under one label with several seeds, in order of first appearance."""
  groups = {}
  for r in rows:
    groups.setdefault(r['label'], []).append(r)
  return [(label, group) for label, group in groups.items() if len({r['seed'] for r in group}) > 1]


def _seed_summary(label: str, group: list[dict], columns) -> str:
  """A row of means ± sample standard deviations over the group's seeds (figure columns only; speeds only
  where every seed ran on one device)."""
  one_device = len({r['device'] for r in group}) == 1
  cells = []
  for header, cell in columns:
    if header == columns[0][0]:
      cells.append(_marked(f'`{label}`: mean ± sd of {len(group)} seeds', group))
      continue
    averaged = isinstance(cell, _Figure) and (one_device or not cell.per_device)
    values = [cell.value(r) for r in group] if averaged else []
    if not values or any(v is None for v in values):
      cells.append('')
      continue
    cells.append(f'{_fmt(statistics.mean(values), cell.digits)} ± {_fmt(statistics.stdev(values), cell.digits)}')
  return '| ' + ' | '.join(cells) + ' |'


_SECTION = re.compile(r'(<!-- results:(\w+) -->\n)(.*?)(<!-- /results -->)', re.S)


def rendered_markdown(text: str, records: list[dict]) -> str:
  """RESULTS.md's text with every marked table rendered anew."""
  def replace(m):
    if m.group(2) not in TABLES and m.group(2) not in RENDERERS:
      raise SystemExit(f'error: RESULTS.md marks a table {m.group(2)!r} that launch/results.py does not know')
    return m.group(1) + render_table(m.group(2), records) + '\n' + m.group(4)
  return _SECTION.sub(replace, text)


def _corpus_rows(records: list[dict], table: str, corpus: str) -> list[dict]:
  """A budget table's rows for one corpus: labels 'CORPUS, RECIPE'."""
  return [r for r in records if r['table'] == table and r['label'].startswith(corpus + ', ')]


def budget_curves(records: list[dict], table: str, corpus: str) -> dict[str, list[tuple[float, float, float]]]:
  """A budget table's rows for one corpus by recipe: (minutes of train.max_seconds, test ppl, mixed test ppl)
  in order of budget; the recipes with at least two budgets, a curve each."""
  curves = {}
  for r in _corpus_rows(records, table, corpus):
    figures = r['figures']
    curves.setdefault(r['label'][len(corpus) + 2:], []).append(
        (r['config']['train']['max_seconds'] / 60, figures['test_ppl'], figures.get('mix_test_ppl', math.nan)))
  return {recipe: sorted(points) for recipe, points in curves.items() if len(points) > 1}


def plot_budget_curves(records: list[dict], table: str, corpus: str, output: str) -> str:
  """Test perplexity by time budget, each recipe alone (solid) and mixed with KN5 (dashed), KN5 a line."""
  from nplm_jax.tools import plot  # pylint: disable=g-import-not-at-top  # matplotlib only for a plot
  curves = budget_curves(records, table, corpus)
  if not curves:
    raise SystemExit(f'error: no recipe of table {table!r} has rows for {corpus!r} at two budgets or more')
  ngram = [r['figures']['ngram_test_ppl'] for r in _corpus_rows(records, table, corpus)
           if 'ngram_test_ppl' in r['figures']]
  fig, ax = plot.plt.subplots(figsize=(7, 4.5))
  for recipe, points in curves.items():
    minutes, alone, mixed = zip(*points)
    line, = ax.plot(minutes, alone, marker='o', label=f'{recipe}, alone')
    ax.plot(minutes, mixed, marker='o', linestyle='--', color=line.get_color(), label=f'{recipe}, mixed with KN5')
  if ngram:
    ax.axhline(ngram[0], linestyle=':', color='grey', linewidth=1)
    ax.annotate(f'KN5 {ngram[0]:.1f}', (1, ngram[0]), xycoords=('axes fraction', 'data'), ha='right', va='bottom',
                fontsize=8, color='grey')
  ax.set_xlabel('train.max_seconds (minutes): the whole command, training, evaluation and mixture')
  ax.set_ylabel('test perplexity')
  ax.set_title(f'{corpus}: test perplexity by time budget', fontsize=10)
  budgets = sorted({m for points in curves.values() for m, _, _ in points})
  ax.set_xticks(budgets)
  ax.xaxis.set_major_formatter(plot.ticker.FuncFormatter(plot.plain_tick))
  ax.yaxis.set_major_formatter(plot.ticker.FuncFormatter(plot.plain_tick))
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  return plot.save_figure(fig, output)


def training_curves(records: list[dict], prefix: str = 'curve_') -> dict[str, list[tuple[int, float]]]:
  """The validation perplexity by epoch of every run kept with its curve (figures' valid_curve, from first_epoch)
  in the tables named PREFIX...: '{label} ({table})' -> [(epoch, valid ppl), ...], ' †' after a transcribed
  run's; a run resumed from another's epoch (first_epoch above 1) is its own line."""
  curves = {}
  for r in records:
    figures = r['figures']
    if r['table'].startswith(prefix) and figures.get('valid_curve'):
      first = int(figures.get('first_epoch', 1))
      line = _marked(f"{r['label']} ({r['table']})", [r])
      curves[line] = [(first + i, v) for i, v in enumerate(figures['valid_curve'])]
  return curves


def plot_training_curves(records: list[dict], output: str, prefix: str = 'curve_') -> str:
  """training_curves drawn: validation perplexity by epoch, a line per run; a † in the title when any is
  transcribed (its figures copied from RESULTS.md as first written)."""
  from nplm_jax.tools import plot  # pylint: disable=g-import-not-at-top  # matplotlib only for a plot
  curves = training_curves(records, prefix)
  if not curves:
    raise SystemExit(f'error: no results file of a table named {prefix}* holds a validation curve')
  transcribed = any(_transcribed(r) for r in records if r['table'].startswith(prefix))
  fig, ax = plot.plt.subplots(figsize=(8, 5))
  for label, points in curves.items():
    epochs, valid = zip(*points)
    ax.plot(epochs, valid, marker='.', label=label)
  ax.set_xlabel('epoch')
  ax.set_ylabel('validation perplexity')
  ax.set_title('Brown, validation perplexity by epoch' + (' (†: transcribed figures)' if transcribed else ''),
               fontsize=10)
  ax.yaxis.set_major_formatter(plot.ticker.FuncFormatter(plot.plain_tick))
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  return plot.save_figure(fig, output)


def finished_points(sweep_root: str) -> list[str]:
  return sorted(p for p in os.listdir(sweep_root) if os.path.exists(os.path.join(sweep_root, p, 'results.json')))


def point_record(sweep_root: str, point: str, name: str, table: str, label: str, command: str, commit, device) -> dict:
  """A sweep point's record: results/NAME_POINT_seedS, labelled 'LABEL POINT'."""
  value = record(os.path.join(sweep_root, point), '', table, f'{label} {point}', f'{command}  # point {point}',
                 commit, device)
  value['name'] = f'{name}_{point}_seed{value["seed"]}'
  return value


def _another_run(value: dict) -> bool:
  """Whether results/ holds value's name from a run of another command, commit, device or config."""
  path = os.path.join(RESULTS_DIR, f'{value["name"]}.json')
  if not os.path.exists(path):
    return False
  with open(path, encoding='utf-8') as f:
    old = json.load(f)
  return any(old.get(k) != value.get(k) for k in ('command', 'commit', 'device', 'config'))


def _write(value: dict) -> None:
  os.makedirs(RESULTS_DIR, exist_ok=True)
  path = os.path.join(RESULTS_DIR, f'{value["name"]}.json')
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=1, sort_keys=True)
    f.write('\n')
  print(f'wrote {os.path.relpath(path, REPO)}')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m launch.results', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest='what', required=True)
  collect = sub.add_parser('collect', help='keep a finished workdir (or nplm-ngram --output file) as results/NAME.json')
  where = collect.add_mutually_exclusive_group(required=True)
  where.add_argument('--workdir', help="a finished run, or an n-gram baseline's results (nplm-ngram --output)")
  where.add_argument('--sweep_root', help='a sweep: every point with a results.json, as results/NAME_POINT_seedS.json '
                                          'labelled "LABEL POINT" (seeds of a point share a label: a summary row)')
  collect.add_argument('--name', required=True, help='the file name under results/ (letters, digits, _, - and ., '
                                                        'not first: as the sweep points name theirs)')
  collect.add_argument('--table', required=True, choices=sorted([*TABLES, *RENDERERS]))
  collect.add_argument('--label', required=True, help="the row's label in its table")
  collect.add_argument('--command', required=True, help='the command that trained it, as run')
  collect.add_argument('--commit', default=None, help='the commit it ran at (default: HEAD)')
  collect.add_argument('--device', default=None, help='where it ran (default: from results.json and this machine)')
  collect.add_argument('--command_seconds', type=float, default=None,
                       help="the whole command's wall seconds, timed outside it (a time budget's question)")
  render = sub.add_parser('render', help="print RESULTS.md's tables from results/, or write or check them")
  render.add_argument('--write', action='store_true')
  render.add_argument('--check', action='store_true')
  render.add_argument('--table', choices=sorted([*TABLES, *RENDERERS]),
                      help='print this table alone (an exploration RESULTS.md sums up in a few lines)')
  drawn = sub.add_parser('plot', help="a budget table's test perplexity by train.max_seconds, as a PNG")
  drawn.add_argument('--table', default='own_text_budget', choices=sorted(TABLES))
  drawn.add_argument('--corpus', required=True, help="the rows whose labels start 'CORPUS, ' (e.g. 'PTB as text')")
  drawn.add_argument('--output', required=True, help='the PNG to write')
  curves = sub.add_parser('curves', help='the validation perplexity by epoch of the runs kept with their curves '
                                         '(tables curve_*), as a PNG')
  curves.add_argument('--output', required=True, help='the PNG to write')
  args = parser.parse_args(argv)
  if args.what == 'plot':
    print(f'wrote {plot_budget_curves(load_records(), args.table, args.corpus, args.output)}')
    return 0
  if args.what == 'curves':
    print(f'wrote {plot_training_curves(load_records(), args.output)}')
    return 0
  if args.what == 'collect':
    if not re.fullmatch(r'[\w-][\w.-]*', args.name):
      raise SystemExit(f'error: --name={args.name!r}: use letters, digits, _, - and . only, not . first')
    if args.workdir:
      values = [record(args.workdir, args.name, args.table, args.label, args.command, args.commit, args.device,
                       args.command_seconds)]
    else:
      points = finished_points(args.sweep_root)
      if not points:
        raise SystemExit(f'error: no point of {args.sweep_root} has a results.json; collect a finished sweep')
      values = [point_record(args.sweep_root, point, args.name, args.table, args.label, args.command, args.commit,
                             args.device) for point in points]
    taken = [v['name'] for v in values if _another_run(v)]
    if taken:
      raise SystemExit(f'error: results/ already holds {", ".join(taken)} from another run; choose another --name '
                       'to keep both, or delete the old files to replace them')
    for value in values:
      _write(value)
    return 0
  records = load_records()
  changed = []
  for path in rendered_documents():
    with open(path, encoding='utf-8') as f:
      text = f.read()
    new = rendered_markdown(text, records)
    if new != text:
      changed.append(path)
      if args.write:
        with open(path, 'w', encoding='utf-8') as f:
          f.write(new)
  names = ', '.join(os.path.relpath(p, REPO) for p in changed)
  if args.check:
    if changed:
      print(f'error: {names} differ from the tables results/ renders; run python -m launch.results render --write',
            file=sys.stderr)
      return 1
    print(f'RESULTS.md, README.md and the study pages match results/ ({len(records)} records)')
    return 0
  if args.write:
    print(f'rewrote the rendered tables of {names}' if changed else 'RESULTS.md, README.md and the study pages were up to date')
    return 0
  for table in [args.table] if args.table else [*TABLES, *RENDERERS]:
    print(f'## {table}\n\n{render_table(table, records)}\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
