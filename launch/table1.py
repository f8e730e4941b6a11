"""Bengio et al. (2003) Table 1 (Brown) beside our numbers, from a table1 sweep's workdirs.

python -m launch.table1 --root=runs/table1      (after python -m launch.sweep ... --sweep=table1)

A row whose run has not finished is shown as such. An even (mixture) row comes from its run's
mix_* results (or from the odd row's workdir after `python -m nplm_jax.tools.mix --workdir=...`); its
odd row is the same run's network alone.
"""

import functools
import sys

from nplm_jax import cli as cli_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import UserError

# (row, n, h, m, direct, mix, paper valid, paper test), from the paper's Table 1.
PAPER = [
    ('MLP1', 5, 50, 60, 'yes', 'no', 284, 268), ('MLP2', 5, 50, 60, 'yes', 'yes', 275, 257),
    ('MLP3', 5, 0, 60, 'yes', 'no', 327, 310), ('MLP4', 5, 0, 60, 'yes', 'yes', 286, 272),
    ('MLP5', 5, 50, 30, 'yes', 'no', 296, 279), ('MLP6', 5, 50, 30, 'yes', 'yes', 273, 259),
    ('MLP7', 3, 50, 30, 'yes', 'no', 309, 293), ('MLP8', 3, 50, 30, 'yes', 'yes', 284, 270),
    ('MLP9', 5, 100, 30, 'no', 'no', 280, 276), ('MLP10', 5, 100, 30, 'no', 'yes', 265, 252),
    ('Del. Int. trigram', 3, '', '', '', '', 352, 336),
    ('Kneser-Ney back-off, n=3', 3, '', '', '', '', 334, 323),
    ('Kneser-Ney back-off, n=4', 4, '', '', '', '', 332, 321),
    ('Kneser-Ney back-off, n=5', 5, '', '', '', '', 332, 321),
]
SOURCES = {'Del. Int. trigram': 'interpolated_3', 'Kneser-Ney back-off, n=3': 'kneser_ney_3',
           'Kneser-Ney back-off, n=4': 'kneser_ney_4', 'Kneser-Ney back-off, n=5': 'kneser_ney_5'}


def load(root: str, name: str) -> dict | None:
  """A sweep point's results (results.json with mix_results.json beside it), or None."""
  merged = None
  workdir = workdir_lib.Workdir(workdir_lib.as_path(root) / name)
  for filename in ('results.json', 'mix_results.json'):
    found = workdir.read_json(filename)
    if found is not None:
      merged = {**(merged or {}), **found}
  return merged


def points_of(row: str) -> tuple[str, ...]:
  """The sweep points whose results a paper row may show (an MLP row: its training, the mlp1-style odd point
  that also serves the even row, and the annealed resumption)."""
  if row in SOURCES:
    return (SOURCES[row],)
  k = int(row[3:])
  odd = k - 1 + k % 2  # the row whose network both rows share
  return f'mlp{odd + 1}', f'mlp{odd}', f'mlp{odd + 1}_annealed'


def our_numbers(root, row: str):
  """(valid, test, note) for a paper row, or None if its run has no results. `root` is a sweep's root, or a
  function of a point's name giving its results (launch.results renders recorded runs so)."""
  read = root if callable(root) else functools.partial(load, root)
  if row in SOURCES:
    r = read(SOURCES[row])
    return (r['valid_ppl'], r['test_ppl'], 'interpolated modified KN' if 'Kneser' in row else '') if r else None
  trained, odd_point, annealed_point = points_of(row)
  r = read(trained) or read(odd_point)  # mlp1's own run + mix_results.json also serves MLP2
  if not r:
    return None
  epochs = f'{r.get("epochs", 0):.1f} epochs' if 'epochs' in r else ''
  annealed = read(annealed_point)  # the table1 sweep's run resumed with annealing
  if int(row[3:]) % 2:
    note = f'{epochs}; annealed at the end: {annealed["valid_ppl"]:.1f} / {annealed["test_ppl"]:.1f}' if annealed else epochs
    return r['valid_ppl'], r['test_ppl'], note
  if 'mix_valid_ppl' not in r:
    return None
  note = f'fitted weight {r["mix_fitted_weight"]:.2f}: test {r["mix_fitted_test_ppl"]:.1f}'
  if annealed and 'mix_valid_ppl' in annealed:
    note += f'; annealed at the end: {annealed["mix_valid_ppl"]:.1f} / {annealed["mix_test_ppl"]:.1f}'
  return r['mix_valid_ppl'], r['mix_test_ppl'], note


def render(root, label=lambda row: row) -> str:
  """The table (our_numbers' `root`: a sweep's root, or a function of a point's name); `label` gives a row's
  first cell from its name (launch.results marks a row whose figures were transcribed)."""
  lines = ['| model | n | h | m | direct | mix | paper valid | paper test | ours valid | ours test | note |',
           '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
  for row, n, h, m, direct, mix, pv, pt in PAPER:
    ours = our_numbers(root, row)
    cells = [f'{ours[0]:.1f}', f'{ours[1]:.1f}', ours[2]] if ours else ['not run', 'not run', '']
    lines.append(f'| {label(row)} | {n} | {h} | {m} | {direct} | {mix} | {pv} | {pt} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  parser = cli_lib.ArgumentParser('launch.table1', description=__doc__.splitlines()[0])
  parser.add_argument('--root', required=True, help='the root of a table1 sweep')
  args = parser.parse_args(argv)
  try:
    if not workdir_lib.as_path(args.root).exists():
      raise UserError(f'--root={args.root!r} does not exist; run nplm-sweep --sweep=table1 '
                      f'--root={args.root} first')
    if not any(our_numbers(args.root, row[0]) for row in PAPER):
      raise UserError(f'--root={args.root!r} holds no run of a Table 1 row (mlp1 ... mlp10, the n-gram points); give '
                      'the root of nplm-sweep --config=experiments/brown.py --sweep=table1')
    print(render(args.root), end='')
  except UserError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
