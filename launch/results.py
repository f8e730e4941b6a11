"""Results as data: a finished run kept as a small JSON file under results/, and RESULTS.md's tables
rendered from those files, so every figure there traces to its run.

  python -m launch.results collect --workdir=runs/own_text/quick --name=own_text_quick --table=own_text \
      --label='text.py:quick' --command='nplm-train --config=experiments/text.py:quick ...' [--commit=SHA]
  python -m launch.results collect --sweep_root=runs/device/ptb_ladder --name=ptb --table=ladder --label=PTB \
      --command='bash launch/gpu_plan.sh ptb OUT' --device='NVIDIA H100 80GB HBM3'   # every finished point
  python -m launch.results collect_pack --pack=OUT/results.tgz   # every finished point of a gpu_plan.sh call
  python -m launch.results render            # print every table
  python -m launch.results render --write    # rewrite RESULTS.md's rendered tables in place
  python -m launch.results render --check    # exit 1 when RESULTS.md differs from results/ (CI runs this)

A results file holds the run's figures (results.json and mix_results.json), the command, the resolved
config, the commit, the device, the seed and the wall time; never checkpoints. In RESULTS.md a table
lives between the lines `<!-- results:TABLE -->` and `<!-- /results -->`, and only there is it
rewritten.
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


_label = lambda r: f'`{r["label"]}`'
_device_of = lambda r: r['device']
_MIX_KN5 = ('+ KN5 test ppl (weight 0.5)', _num('mix_test_ppl'))
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

TABLES = {
    'own_text': [('recipe', _label)] + [c for c in _CHECKS[1:-1] if c[0] != 'steps'] + [_MIX_KN5, ('device', _device_of)],
    # The short runs README and the issues quote to show a change kept the numbers (smoke, quick, PTB).
    'checks': _CHECKS,
    # The reference code's options on the ladder's top row, each at the same number of steps (their
    # rates left out: they shared the machine with other work).
    'reference_options': [('option', _label)] + [c for c in _CHECKS[1:-1] if c[0] not in ('tokens/s', 'wall s')] + [
        _MIX_KN5, ('device', _device_of)],
    # AdamW's moments in bfloat16 against float32 on one short training (issue 28: a faster step may move
    # the test perplexity by at most 0.5%).
    'moment_dtypes': _paired_columns('moments'),
    # The output layer's gradient in bfloat16 against float32, alone and with every other byte-saving option
    # (issue 28's 0.5% again).
    'layer_gradient_dtypes': _paired_columns('run'),
    # The revisited family's ladders trained to early stopping (issue 27): words, and characters in bits.
    'ladder': _ladder_columns(('valid ppl', _num('valid_ppl')), ('test ppl', _num('test_ppl')),
                              ('+ n-gram test ppl', _num('mix_test_ppl'))),
    # Character rows of different shapes at the same schedule on the CPU (issue 27): where the parameters sit.
    # Their wall time is shown (the question is partly cost); they ran one at a time, beside light work.
    'char_shape': [('point', _label), *(c for c in _CHECKS if c[0] in ('parameters', 'steps', 'epochs', 'wall s')),
                   *_BITS_PER_CHAR, ('device', _device_of)],
    # The same at a sixteenth of the characters (issue 27), where they fit their data as the GPU rows do: the
    # best step against the steps trained says when validation stopped improving (no rates: the points
    # shared the CPU with other work); a point run with several seeds has a row each and one of their means.
    'char_overfit': [('point', _label), ('parameters', _num('num_parameters', 0)), ('best step', _num('step', 0)),
                     ('steps trained', _num('steps_trained', 0)), *_BITS_PER_CHAR, _SEED, ('device', _device_of)],
    'char_ladder': _ladder_columns(*_BITS_PER_CHAR,
                                   ('+ n-gram test bits/char', _Figure('mix_test_ppl', 3, of=math.log2))),
}


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


# The sweep roots launch/gpu_plan.sh's steps write (device_sweeps.sh: one folder a sweep, named by its
# --name): the results files' name prefix, table and label prefix, and the step that trained them.
GPU_PLAN_SWEEPS = {
    'ladder': ('ptb_ladder', 'ladder', 'PTB', 'ptb'),
    'char_ladder': ('ptb_char_ladder', 'char_ladder', 'PTB characters', 'chars'),
    'brown_ladder': ('brown_ladder', 'ladder', 'Brown', 'brown'),
    'reference_options': ('ptb_reference_gpu', 'reference_options', 'ladder5_dropout +', 'reference'),
    'ptb_tune': ('ptb_tune', 'ladder', 'PTB', 'tune'),
    'brown_tune': ('brown_tune', 'ladder', 'Brown', 'tune'),
    'char_tune': ('ptb_char_tune', 'char_ladder', 'PTB characters', 'session'),
}
# The seeds step's roots (ptb_seed1, char_seed2, ...) hold rows of those sweeps under other seeds: they
# take their sweep's name and label, so that the seeds of a row render as one summary.
_SEED_ROOT = re.compile(r'(ptb|char|brown)_seed\d+')
_SEED_SWEEPS = {'ptb': ('ladder', 'ptb_tune'), 'char': ('char_ladder', 'char_tune'), 'brown': ('brown_ladder', 'brown_tune')}


def gpu_plan_sweep(root_name: str, point: str) -> tuple[str, str, str, str] | None:
  """(name prefix, table, label prefix, step) of a point in a sweep root gpu_plan.sh writes, or None."""
  seeds = _SEED_ROOT.fullmatch(root_name)
  if seeds:
    ladder, tune = _SEED_SWEEPS[seeds.group(1)]
    return GPU_PLAN_SWEEPS[tune if point.startswith(('tune', 'char_tune')) else ladder][:3] + ('seeds',)
  return GPU_PLAN_SWEEPS.get(root_name)


def record(workdir: str, name: str, table: str, label: str, command: str, commit: str | None = None,
           device: str | None = None) -> dict:
  """A finished workdir's results as a results/ record."""
  def read(file):
    path = os.path.join(workdir, file)
    if not os.path.exists(path):
      return {}
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  results = read('results.json')
  if not results:
    raise SystemExit(f'error: {workdir} holds no results.json; collect a finished run')
  mix = read('mix_results.json')
  rates = []
  metrics_path = os.path.join(workdir, 'metrics.jsonl')
  if os.path.exists(metrics_path):
    with open(metrics_path, encoding='utf-8') as f:
      rates = [r['tokens_per_sec'] for r in map(json.loads, f) if r.get('tokens_per_sec')]
  figures = {k: results[k] for k in ('valid_ppl', 'test_ppl', 'valid_bpc', 'test_bpc', 'num_parameters', 'epochs',
                                     'steps_trained', 'step', 'wall_seconds', 'stop_reason') if k in results}
  figures['tokens_per_sec'] = round(statistics.median(rates), 1) if rates else None
  for source in (results, mix):  # the mixture: in results.json when trained with it, else from nplm-mix
    figures.update({k: source[k] for k in ('mix_valid_ppl', 'mix_test_ppl', 'mix_ngram', 'mix_weight',
                                           'mix_fitted_weight', 'mix_fitted_test_ppl') if k in source})
  config = results.get('config', {})
  return {'name': name, 'table': table, 'label': label, 'command': command, 'commit': commit or _git_commit(),
          'device': device or _device(results), 'seed': config.get('seed'), 'figures': figures, 'config': config}


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
  columns = TABLES[table]
  rows = [r for r in records if r['table'] == table]
  lines = ['| ' + ' | '.join(h for h, _ in columns) + ' |', '| ' + ' | '.join('---' for _ in columns) + ' |']
  lines += ['| ' + ' | '.join(cell(r) for _, cell in columns) + ' |' for r in rows]
  lines += [_seed_summary(label, group, columns) for label, group in _seed_groups(rows)]
  lines.append('')
  lines.append('Rendered by `python -m launch.results render --write` from ' +
               ', '.join(f'`results/{r["name"]}.json`' for r in rows) + '.')
  return '\n'.join(lines)


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
      cells.append(f'`{label}`: mean ± sd of {len(group)} seeds')
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
    if m.group(2) not in TABLES:
      raise SystemExit(f'error: RESULTS.md marks a table {m.group(2)!r} that launch/results.py does not know')
    return m.group(1) + render_table(m.group(2), records) + '\n' + m.group(4)
  return _SECTION.sub(replace, text)


def finished_points(sweep_root: str) -> list[str]:
  return sorted(p for p in os.listdir(sweep_root) if os.path.exists(os.path.join(sweep_root, p, 'results.json')))


def point_record(sweep_root: str, point: str, name: str, table: str, label: str, command: str, commit, device) -> dict:
  """A sweep point's record: results/NAME_POINT_seedS, labelled 'LABEL POINT'."""
  value = record(os.path.join(sweep_root, point), '', table, f'{label} {point}', f'{command}  # point {point}',
                 commit, device)
  value['name'] = f'{name}_{point}_seed{value["seed"]}'
  return value


def how_it_stopped(figures: dict, config: dict) -> str:
  """A row's training as its label says it: 'to early stopping', 'its 8 epochs' (its planned length) or
  '158 s (9.7 of 10 epochs)' (its time budget spent), from its results' stop reason."""
  reason, epochs = figures.get('stop_reason') or '', figures.get('epochs')
  planned = (config.get('train') or {}).get('num_epochs')
  if reason.startswith('no improvement'):
    return 'to early stopping'
  budget = re.fullmatch(r'train\.max_seconds=([\d.]+) spent', reason)
  if budget and epochs is not None and planned:
    return f'{float(budget.group(1)):g} s ({epochs:.1f} of {planned:g} epochs)'
  if not reason and planned:
    return f'its {planned:g} epochs'
  return reason or 'to its end'


def _seed0_label(records: list[dict], table: str, point: str) -> str | None:
  """The label of the seed-0 record of `point` in `table` among `records`, which its other seeds take (one
  summary)."""
  return next((r['label'] for r in records if r['table'] == table and r['name'].endswith(f'_{point}_seed0')), None)


def collect_pack(pack: str, commit, device, tag: str = '') -> int:
  """Every finished point of a launch/gpu_plan.sh call's OUT/results.tgz as a results file (names,
  tables and labels from GPU_PLAN_SWEEPS, the command from the pack's session.json where the session step
  made it; `tag` after each name's prefix, to keep an earlier call's rows of the same points); says which
  tables RESULTS.md has no section for yet. A file of another run already under that name is an error,
  before anything is written. A seeds root's row takes the label of its seed 0's record in results/ (its
  seeds render as one summary); the session step's other rows say how they stopped ('PTB characters
  char_ladder2_depth4, its 10 epochs on the GPU alone')."""
  import tarfile  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  if not os.path.isfile(pack):
    raise SystemExit(f'error: --pack={pack!r} is not a file; give the results.tgz a gpu_plan.sh call left in OUT')
  with tempfile.TemporaryDirectory() as unpacked:
    with tarfile.open(pack) as tar:
      tar.extractall(unpacked, filter='data')
    session_path = os.path.join(unpacked, 'session.json')
    session_command = None
    if os.path.isfile(session_path):
      with open(session_path, encoding='utf-8') as f:
        session_command = json.load(f)['command']
    tables, values, kept = set(), [], load_records()
    for root_name in sorted(os.listdir(unpacked)):
      root = os.path.join(unpacked, root_name)
      points = finished_points(root) if os.path.isdir(root) else []
      for point in points:
        where = gpu_plan_sweep(root_name, point)
        if where is None:
          print(f'left out {root_name}/{point}: not a sweep launch/gpu_plan.sh runs (collect it with --sweep_root)')
          continue
        name, table, label, step = where
        command = session_command or f'bash launch/gpu_plan.sh {step} OUT'
        value = point_record(root, point, f'{name}_{tag}' if tag else name, table, label, command, commit, device)
        seed0_label = _seed0_label(kept, table, point) if _SEED_ROOT.fullmatch(root_name) else None
        if seed0_label:
          value['label'] = seed0_label
        elif session_command and not _SEED_ROOT.fullmatch(root_name):
          value['label'] += f', {how_it_stopped(value["figures"], value["config"])} on the GPU alone'
        values.append(value)
        tables.add(table)
  taken = [v['name'] for v in values if _another_run(v)]
  if taken:
    raise SystemExit(f'error: results/ already holds {", ".join(taken)} from another run; pass --tag=WORD (say, the '
                     'device) to keep both, or delete the old files to replace them')
  for value in values:
    _write(value)
  with open(RESULTS_MD, encoding='utf-8') as f:
    marked = {m.group(2) for m in _SECTION.finditer(f.read())}
  for table in sorted(tables - marked):
    print(f'RESULTS.md has no <!-- results:{table} --> section yet: add one (and <!-- /results -->) where the '
          'table belongs, then python -m launch.results render --write')
  return 0


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
  collect = sub.add_parser('collect', help='keep a finished workdir as results/NAME.json')
  where = collect.add_mutually_exclusive_group(required=True)
  where.add_argument('--workdir', help='a finished run')
  where.add_argument('--sweep_root', help='a sweep: every point with a results.json, as results/NAME_POINT_seedS.json '
                                          'labelled "LABEL POINT" (seeds of a point share a label: a summary row)')
  collect.add_argument('--name', required=True, help='the file name under results/ (letters, digits, _, - and ., '
                                                        'not first: as the sweep points name theirs)')
  collect.add_argument('--table', required=True, choices=sorted(TABLES))
  collect.add_argument('--label', required=True, help="the row's label in its table")
  collect.add_argument('--command', required=True, help='the command that trained it, as run')
  collect.add_argument('--commit', default=None, help='the commit it ran at (default: HEAD)')
  collect.add_argument('--device', default=None, help='where it ran (default: from results.json and this machine)')
  pack = sub.add_parser('collect_pack', help="every finished point of a launch/gpu_plan.sh call's results.tgz")
  pack.add_argument('--pack', required=True, help='OUT/results.tgz of the call')
  pack.add_argument('--commit', default=None, help='the commit the call ran at (default: HEAD)')
  pack.add_argument('--device', default=None, help="where it ran (default: each results.json's device_kind)")
  pack.add_argument('--tag', default='', help='a word after each name\'s prefix (ptb_ladder_TAG_ladder4_tied_seed0): '
                                              "keeps an earlier call's rows of the same points")
  render = sub.add_parser('render', help="print RESULTS.md's tables from results/, or write or check them")
  render.add_argument('--write', action='store_true')
  render.add_argument('--check', action='store_true')
  args = parser.parse_args(argv)
  if args.what == 'collect':
    if not re.fullmatch(r'[\w-][\w.-]*', args.name):
      raise SystemExit(f'error: --name={args.name!r}: use letters, digits, _, - and . only, not . first')
    if args.workdir:
      _write(record(args.workdir, args.name, args.table, args.label, args.command, args.commit, args.device))
      return 0
    points = finished_points(args.sweep_root)
    if not points:
      raise SystemExit(f'error: no point of {args.sweep_root} has a results.json; collect a finished sweep')
    for point in points:
      _write(point_record(args.sweep_root, point, args.name, args.table, args.label, args.command, args.commit,
                          args.device))
    return 0
  if args.what == 'collect_pack':
    if not re.fullmatch(r'[\w-]*', args.tag):
      raise SystemExit(f'error: --tag={args.tag!r}: use letters, digits, _ and - only')
    return collect_pack(args.pack, args.commit, args.device, args.tag)
  records = load_records()
  with open(RESULTS_MD, encoding='utf-8') as f:
    text = f.read()
  new = rendered_markdown(text, records)
  if args.check:
    if new != text:
      print('error: RESULTS.md differs from the tables results/ renders; run python -m launch.results render --write',
            file=sys.stderr)
      return 1
    print(f'RESULTS.md matches results/ ({len(records)} records)')
    return 0
  if args.write:
    with open(RESULTS_MD, 'w', encoding='utf-8') as f:
      f.write(new)
    print('rewrote the rendered tables of RESULTS.md')
    return 0
  for table in TABLES:
    print(f'## {table}\n\n{render_table(table, records)}\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
