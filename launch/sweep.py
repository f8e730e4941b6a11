"""Runs a sweep: each point in its own process and workdir, N at a time, finished points skipped
(a point that stopped at its train.max_seconds goes on when --set gives it a larger one);
then every results.json is collected into ROOT/results.md and ROOT/results.csv.

A named sweep from the experiment file (its get_sweep(name)):
  python -m launch.sweep --config=experiments/brown.py --sweep=table1 --root=runs/table1
A grid over config keys (cartesian product), from the command line:
  python -m launch.sweep --config=experiments/brown.py:mlp1 --grid='model.h=0,50,100;model.m=30,60' --root=runs/hm
--set applies overrides to every training point (e.g. --set=train.num_epochs=5).
"""

import concurrent.futures
import csv
import itertools
import json
import io
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
from etils import epath

from nplm_jax import cli as cli_lib
from nplm_jax import config as config_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.training import run_state as run_state_lib
from nplm_jax.errors import UserError

COLUMNS = ['name', 'kind', 'seed', 'n', 'h', 'm', 'direct', 'optimizer', 'order', 'smoothing', 'valid_ppl', 'test_ppl',
           'mix_valid_ppl', 'mix_test_ppl', 'mix_fitted_weight', 'mix_fitted_test_ppl', 'epochs', 'wall_seconds']


# Files of a finished run that a `start_from` copy leaves behind: it is a new run, not finished.
SOURCE_ONLY_FILES = ('results.json', 'mix_results.json', 'log.txt')


class SweepError(ValueError):
  pass


def parse_grid(grid: str) -> list[tuple[str, list[str]]]:
  """'a.b=1,2;c.d=x,y' -> [('a.b', ['1', '2']), ('c.d', ['x', 'y'])]."""
  axes = []
  for part in filter(None, (p.strip() for p in grid.split(';'))):
    key, eq, values = part.partition('=')
    if not eq or '.' not in key or not values:
      raise SweepError(f'--grid part {part!r} is not of the form section.key=v1,v2')
    axes.append((key.strip(), [v.strip() for v in values.split(',')]))
  return axes


def grid_points(config_arg: str, grid: str) -> list[dict]:
  axes = parse_grid(grid)
  points = []
  for values in itertools.product(*(v for _, v in axes)):
    overrides = dict(zip((k for k, _ in axes), values))
    name = '_'.join(f'{k.split(".")[-1]}{v}' for k, v in overrides.items())
    points.append(dict(name=name, kind='train', config=config_arg, overrides=overrides))
  return points


def check_points(points: list[dict], common_overrides: dict) -> None:
  """Every training point's config, read as its run will read it (the same --config.* flags) and
  validated, before any point starts: a misspelt --set or --grid key or a bad value is one line."""
  for point in points:
    if point['kind'] != 'train':
      continue
    try:
      config_lib.validate(cli_lib.config_from_flags(point['config'], override_flags(point, common_overrides)))
    except UserError as e:
      raise SweepError(f'point {point["name"]!r}: {e}') from None


def command(point: dict, workdir: str, common_overrides: dict) -> list[str]:
  if point['kind'] == 'ngram':
    return [sys.executable, '-m', 'nplm_jax.baselines.ngram', f'--config={point["config"]}', f'--order={point["order"]}',
            f'--smoothing={point["smoothing"]}', f'--output={workdir / "results.json"}']
  if point['kind'] != 'train':
    raise SweepError(f'point {point["name"]!r} has kind {point["kind"]!r}; use train or ngram')
  return [sys.executable, '-m', 'nplm_jax.main', f'--config={point["config"]}', f'--workdir={workdir}',
          *override_flags(point, common_overrides)]


def override_flags(point: dict, common_overrides: dict) -> list[str]:
  """A training point's --config.KEY=VALUE flags: --set's, then the point's own."""
  return [f'--config.{k}={v}' for k, v in {**common_overrides, **point.get('overrides', {})}.items()]


def start_workdir(point: dict, root: epath.Path, workdir: epath.Path) -> None:
  """A `start_from` point begins as a copy of its source's finished workdir (results excluded).

  The copy is made under a temporary name and renamed, so an interrupted copy is never resumed.
  """
  if (workdir / 'config.json').exists():
    return  # started before: resume it
  partial = workdir.parent / f'{workdir.name}.copying'
  if partial.exists():
    partial.rmtree()
  copy_tree(root / point['start_from'], partial, skip=SOURCE_ONLY_FILES)
  if workdir.exists():
    workdir.rmtree()
  partial.rename(workdir)


def copy_tree(source: epath.Path, destination: epath.Path, skip=()) -> None:
  """Copies a folder on any filesystem, leaving out its top-level entries named in `skip`."""
  destination.mkdir(parents=True, exist_ok=True)
  for path in source.iterdir():
    if path.name in skip:
      continue
    if path.is_dir():
      copy_tree(path, destination / path.name)
    else:
      path.copy(destination / path.name)


def run_point(point: dict, root: epath.Path, common_overrides: dict) -> tuple[str, str, float]:
  """(name, 'done' | 'skipped' | 'failed: ...', seconds)."""
  workdir = root / point['name']
  budget = {**common_overrides, **point.get('overrides', {})}.get('train.max_seconds')
  if finished(root, point['name']) and not out_of_time(root, point['name'], budget):
    return point['name'], 'skipped (finished before)', 0.0
  if point.get('start_from'):
    start_workdir(point, root, workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  start = time.time()
  returncode = run_logged(command(point, workdir, common_overrides), workdir / 'log.txt')
  seconds = time.time() - start
  if returncode:
    last = ((workdir / 'log.txt').read_text().strip().splitlines() or ['(no output)'])[-1]
    return point['name'], f'failed (exit {returncode}): {last}', seconds
  return point['name'], 'done', seconds


def run_logged(args: list[str], log: epath.Path) -> int:
  """Runs a command with its output appended to `log`: as it comes for a local log, at the end
  for one in a bucket (objects cannot be appended to)."""
  if '://' not in str(log):
    with open(log, 'a', encoding='utf-8') as f:
      return subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, cwd=os.getcwd(), check=False).returncode
  with tempfile.TemporaryFile('w+', encoding='utf-8') as f:
    returncode = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, cwd=os.getcwd(), check=False).returncode
    f.seek(0)
    earlier = log.read_text() if log.exists() else ''
    log.write_text(earlier + f.read())
  return returncode


def finished(root: epath.Path, name: str) -> bool:
  return (root / name / 'results.json').exists()


def out_of_time(root: epath.Path, name: str, budget) -> bool:
  """Whether a finished point stopped at its time budget and `budget` (this sweep's
  train.max_seconds, None when it sets none) gives it more: it then runs again and goes on from its
  last checkpoint (a larger budget reopens a run, nplm_jax.training.train)."""
  if budget is None:
    return False
  results = workdir_lib.Workdir(root / name).read_json('results.json')
  spent = run_state_lib.spent_budget(str(results.get('stop_reason', '')))
  return spent is not None and (float(budget) == 0 or float(budget) > spent)


def run_sweep(points: list[dict], root: str, parallel: int, common_overrides: dict) -> list[tuple]:
  """Runs the points, `parallel` at a time; a `start_from` point waits for its source to finish."""
  root = workdir_lib.as_path(root)
  names = [p['name'] for p in points]
  if len(set(names)) != len(names):
    raise SweepError(f'point names repeat: {names}')
  for p in points:
    source = p.get('start_from')
    if source and source not in names and not finished(root, source):
      raise SweepError(f'point {p["name"]!r} starts from {source!r}, which is neither in this run nor finished '
                       f'in {root}; run {source!r} first')
  root.mkdir(parents=True, exist_ok=True)
  outcomes, started = [], time.time()
  waiting = [p for p in points if p.get('start_from') in names]
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
    running = {pool.submit(run_point, p, root, common_overrides): p for p in points if p not in waiting}
    while running:
      done_now, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
      for future in done_now:
        del running[future]
        name, status, seconds = future.result()
        outcomes.append((name, status, seconds))
        for follower in [p for p in waiting if p['start_from'] == name]:
          waiting.remove(follower)
          if finished(root, name):
            running[pool.submit(run_point, follower, root, common_overrides)] = follower
          else:
            outcomes.append((follower['name'], f'failed: its source {name!r} did not finish', 0.0))
        elapsed = time.time() - started
        eta = elapsed / len(outcomes) * (len(points) - len(outcomes))
        print(f'[{len(outcomes)}/{len(points)}] {name}: {status} ({seconds:.0f} s; sweep {elapsed:.0f} s, '
              f'ETA {eta:.0f} s)', flush=True)
  return outcomes


def collect(points: list[dict], root: str) -> list[dict]:
  """One row per point that has a results.json, in sweep order."""
  rows = []
  for point in points:
    results = workdir_lib.Workdir(workdir_lib.as_path(root) / point['name']).read_json('results.json')
    if results is None:
      continue
    model = results.get('config', {}).get('model', {})
    row = {'name': point['name'], 'kind': point['kind'], 'seed': results.get('config', {}).get('seed'),
           'n': model.get('n'), 'h': model.get('h'), 'm': model.get('m'),
           'direct': model.get('direct'), 'optimizer': results.get('config', {}).get('optimizer', {}).get('name'),
           'order': results.get('order'), 'smoothing': results.get('smoothing')}
    row.update({k: results.get(k) for k in COLUMNS if k not in row})
    rows.append(row)
  return rows


def _cell(value) -> str:
  if value is None:
    return ''
  return f'{value:.2f}' if isinstance(value, float) else str(value)


SEED_SUFFIX = re.compile(r'_seed\d+$')
SPREAD_COLUMNS = ('valid_ppl', 'test_ppl', 'mix_valid_ppl', 'mix_test_ppl')


def seed_groups(rows: list[dict]) -> list[dict]:
  """Mean, standard deviation and range of each perplexity over rows that differ only in a _seedN suffix.

  'mlp2', 'mlp2_seed1' and 'mlp2_seed2' form the group 'mlp2'; groups of one row are left out.
  """
  groups = {}
  for row in rows:
    groups.setdefault(SEED_SUFFIX.sub('', row['name']), []).append(row)
  summaries = []
  for name, members in groups.items():
    if len(members) < 2:
      continue
    summary = {'group': name, 'runs': len(members), 'seeds': [m.get('seed') for m in members]}
    for column in SPREAD_COLUMNS:
      values = np.array([m[column] for m in members if m.get(column) is not None], np.float64)
      if len(values) == len(members):
        summary[column] = {'mean': float(values.mean()), 'std': float(values.std(ddof=1)),
                           'min': float(values.min()), 'max': float(values.max())}
    summaries.append(summary)
  return summaries


def _spread_cell(stats: dict | None) -> str:
  if not stats:
    return ''
  return f'{stats["mean"]:.1f} ± {stats["std"]:.1f} ({stats["min"]:.1f}-{stats["max"]:.1f})'


def write_tables(rows: list[dict], root: str) -> None:
  root = workdir_lib.Workdir(root)
  root.path.mkdir(parents=True, exist_ok=True)
  used = [c for c in COLUMNS if any(r.get(c) is not None for r in rows)]
  table = io.StringIO()
  writer = csv.DictWriter(table, fieldnames=used, extrasaction='ignore')
  writer.writeheader()
  writer.writerows(rows)
  workdir_lib.write_text_atomically(root.file('results.csv'), table.getvalue())
  lines = ['| ' + ' | '.join(used) + ' |', '|' + ' --- |' * len(used)]
  lines += ['| ' + ' | '.join(_cell(r.get(c)) for c in used) + ' |' for r in rows]
  groups = seed_groups(rows)
  if groups:
    spread = [c for c in SPREAD_COLUMNS if any(c in g for g in groups)]
    lines += ['', 'Over seeds: mean ± standard deviation (min-max).', '',
              '| group | runs | seeds | ' + ' | '.join(spread) + ' |', '|' + ' --- |' * (3 + len(spread))]
    lines += [f'| {g["group"]} | {g["runs"]} | {", ".join(map(str, g["seeds"]))} | '
              + ' | '.join(_spread_cell(g.get(c)) for c in spread) + ' |' for g in groups]
  workdir_lib.write_text_atomically(root.file('results.md'), '\n'.join(lines) + '\n')
  if groups:  # only a sweep with seed groups has their spread to record
    workdir_lib.write_text_atomically(root.file('seeds.json'), json.dumps(groups, indent=2) + '\n')


def write_curves(rows: list[dict], root: str) -> None:
  """ROOT/curves.png: the validation curves of every training point with results, overlaid."""
  from nplm_jax.tools import plot  # pylint: disable=g-import-not-at-top  # matplotlib only when there is a plot
  names = [r['name'] for r in rows if r['kind'] == 'train']
  if not names:
    return
  curves = [plot.run_curve(str(workdir_lib.as_path(root) / name)) for name in names]
  for curve, name in zip(curves, names):
    curve['label'] = name
  plot.plot_curves(curves, [], str(workdir_lib.as_path(root) / 'curves.png'))


def parse_set(items: list[str]) -> dict:
  out = {}
  for item in items:
    key, eq, value = item.partition('=')
    if not eq or not key:  # a top-level key (seed) has no section; check_points rejects unknown keys
      raise SweepError(f'--set {item!r} is not of the form section.key=value (or seed=N)')
    out[key] = value
  return out


def main(argv=None) -> int:
  parser = cli_lib.ArgumentParser('launch.sweep', description=__doc__)
  parser.add_argument('--config', required=True, help='experiment file (with :variant for --grid)')
  parser.add_argument('--sweep', help="name of a sweep in the experiment file's get_sweep()")
  parser.add_argument('--grid', help="'section.key=v1,v2;section.key=v1,v2' over --config")
  parser.add_argument('--root', required=True, help='folder holding one workdir per point')
  parser.add_argument('--parallel', type=int, default=1, help='points run at a time')
  parser.add_argument('--set', action='append', default=[], help='override for every training point')
  parser.add_argument('--only', default='', help='comma-separated point names to run (default: all)')
  parser.add_argument('--collect_only', action='store_true', help='only rebuild the tables')
  args = parser.parse_args(argv)
  try:
    if bool(args.sweep) == bool(args.grid):
      raise SweepError('give exactly one of --sweep=NAME or --grid=...')
    if args.parallel < 1:
      raise SweepError(f'--parallel={args.parallel} runs no point; give 1 or more points at a time')
    if args.sweep:
      experiment = config_lib.load_experiment(args.config.split(':', 1)[0])
      if not hasattr(experiment, 'get_sweep'):
        raise SweepError(f'{args.config} has no get_sweep(); use --grid')
      points = experiment.get_sweep(args.sweep)
    else:
      points = grid_points(args.config, args.grid)
    common = parse_set(args.set)
    only = [n for n in args.only.split(',') if n]
    unknown = sorted(set(only) - {p['name'] for p in points})
    if unknown:
      raise SweepError(f'--only names {unknown} are not points of this sweep: {[p["name"] for p in points]}')
    to_run = [p for p in points if not only or p['name'] in only]
    root = workdir_lib.as_path(args.root)
    if root.exists() and not root.is_dir():
      raise SweepError(f'--root={args.root!r} is a file; give the folder that holds (or will hold) the sweep')
    if not args.collect_only:
      check_points(to_run, common)
    if args.collect_only and not root.exists():
      raise SweepError(f'--root={args.root!r} holds no sweep yet; run it without --collect_only first')
    outcomes = [] if args.collect_only else run_sweep(to_run, args.root, args.parallel, common)
    rows = collect(points, args.root)
    write_tables(rows, args.root)
    write_curves(rows, args.root)
  except (SweepError, UserError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(f'{len(rows)}/{len(points)} points have results: {workdir_lib.as_path(args.root) / "results.md"}')
  return 1 if any(status.startswith('failed') for _, status, _ in outcomes) else 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
