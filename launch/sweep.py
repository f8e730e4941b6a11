"""Runs a sweep: each point in its own process and workdir, N at a time, finished points skipped;
then every results.json is collected into ROOT/results.md and ROOT/results.csv.

A named sweep from the experiment file (its get_sweep(name)):
  python -m launch.sweep --config=experiments/brown.py --sweep=table1 --root=runs/table1
A grid over config keys (cartesian product), from the command line:
  python -m launch.sweep --config=experiments/brown.py:mlp1 --grid='model.h=0,50,100;model.m=30,60' --root=runs/hm
--set applies overrides to every training point (e.g. --set=train.num_epochs=5).
"""

import argparse
import concurrent.futures
import csv
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time

COLUMNS = ['name', 'kind', 'n', 'h', 'm', 'direct', 'optimizer', 'order', 'smoothing', 'valid_ppl', 'test_ppl',
           'mix_valid_ppl', 'mix_test_ppl', 'mix_fitted_weight', 'mix_fitted_test_ppl', 'epochs', 'wall_seconds']


class SweepError(ValueError):
  pass


def load_experiment(config_arg: str):
  path = config_arg.split(':', 1)[0]
  if not os.path.isfile(path):
    raise SweepError(f'--config={config_arg!r}: no such experiment file')
  spec = importlib.util.spec_from_file_location('experiment', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


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


def command(point: dict, workdir: str, common_overrides: dict) -> list[str]:
  if point['kind'] == 'ngram':
    return [sys.executable, '-m', 'nplm_jax.ngram', f'--config={point["config"]}', f'--order={point["order"]}',
            f'--smoothing={point["smoothing"]}', f'--output={os.path.join(workdir, "results.json")}']
  if point['kind'] != 'train':
    raise SweepError(f'point {point["name"]!r} has kind {point["kind"]!r}; use train or ngram')
  overrides = {**common_overrides, **point.get('overrides', {})}
  return [sys.executable, '-m', 'nplm_jax.main', f'--config={point["config"]}', f'--workdir={workdir}',
          *(f'--config.{k}={v}' for k, v in overrides.items())]


def run_point(point: dict, root: str, common_overrides: dict) -> tuple[str, str, float]:
  """(name, 'done' | 'skipped' | 'failed: ...', seconds)."""
  workdir = os.path.join(root, point['name'])
  if os.path.exists(os.path.join(workdir, 'results.json')):
    return point['name'], 'skipped (finished before)', 0.0
  os.makedirs(workdir, exist_ok=True)
  start = time.time()
  with open(os.path.join(workdir, 'log.txt'), 'a', encoding='utf-8') as log:
    proc = subprocess.run(command(point, workdir, common_overrides), stdout=log, stderr=subprocess.STDOUT,
                          cwd=os.getcwd(), check=False)
  seconds = time.time() - start
  if proc.returncode:
    with open(os.path.join(workdir, 'log.txt'), encoding='utf-8') as log:
      last = (log.read().strip().splitlines() or ['(no output)'])[-1]
    return point['name'], f'failed (exit {proc.returncode}): {last}', seconds
  return point['name'], 'done', seconds


def run_sweep(points: list[dict], root: str, parallel: int, common_overrides: dict) -> list[tuple]:
  names = [p['name'] for p in points]
  if len(set(names)) != len(names):
    raise SweepError(f'point names repeat: {names}')
  os.makedirs(root, exist_ok=True)
  outcomes, started = [], time.time()
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
    futures = [pool.submit(run_point, p, root, common_overrides) for p in points]
    for done, future in enumerate(concurrent.futures.as_completed(futures), start=1):
      name, status, seconds = future.result()
      outcomes.append((name, status, seconds))
      elapsed = time.time() - started
      eta = elapsed / done * (len(points) - done)
      print(f'[{done}/{len(points)}] {name}: {status} ({seconds:.0f} s; sweep {elapsed:.0f} s, ETA {eta:.0f} s)',
            flush=True)
  return outcomes


def collect(points: list[dict], root: str) -> list[dict]:
  """One row per point that has a results.json, in sweep order."""
  rows = []
  for point in points:
    path = os.path.join(root, point['name'], 'results.json')
    if not os.path.exists(path):
      continue
    with open(path, encoding='utf-8') as f:
      results = json.load(f)
    model = results.get('config', {}).get('model', {})
    row = {'name': point['name'], 'kind': point['kind'], 'n': model.get('n'), 'h': model.get('h'), 'm': model.get('m'),
           'direct': model.get('direct'), 'optimizer': results.get('config', {}).get('optimizer', {}).get('name'),
           'order': results.get('order'), 'smoothing': results.get('smoothing')}
    row.update({k: results.get(k) for k in COLUMNS if k not in row})
    rows.append(row)
  return rows


def _cell(value) -> str:
  if value is None:
    return ''
  return f'{value:.2f}' if isinstance(value, float) else str(value)


def write_tables(rows: list[dict], root: str) -> None:
  used = [c for c in COLUMNS if any(r.get(c) is not None for r in rows)]
  with open(os.path.join(root, 'results.csv'), 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=used, extrasaction='ignore')
    writer.writeheader()
    writer.writerows(rows)
  lines = ['| ' + ' | '.join(used) + ' |', '|' + ' --- |' * len(used)]
  lines += ['| ' + ' | '.join(_cell(r.get(c)) for c in used) + ' |' for r in rows]
  with open(os.path.join(root, 'results.md'), 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines) + '\n')


def parse_set(items: list[str]) -> dict:
  out = {}
  for item in items:
    key, eq, value = item.partition('=')
    if not eq or '.' not in key:
      raise SweepError(f'--set {item!r} is not of the form section.key=value')
    out[key] = value
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description='Run a sweep of trainings / n-gram baselines and tabulate them.')
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
    if args.sweep:
      experiment = load_experiment(args.config)
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
    outcomes = [] if args.collect_only else run_sweep(to_run, args.root, args.parallel, common)
  except (SweepError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  rows = collect(points, args.root)
  write_tables(rows, args.root)
  print(f'{len(rows)}/{len(points)} points have results: {os.path.join(args.root, "results.md")}')
  return 1 if any(status.startswith('failed') for _, status, _ in outcomes) else 0


if __name__ == '__main__':
  sys.exit(main())
