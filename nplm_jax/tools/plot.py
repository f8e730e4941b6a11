"""Plots of runs and of what they learned, written as PNG (matplotlib, no display needed).

python -m nplm_jax.tools.plot curves --workdir=runs/a [--workdir=runs/b ...] --output=curves.png \
    [--ngram=runs/table1/kneser_ney_5 | --ngram='KN5=347.4']
python -m nplm_jax.tools.plot embeddings --workdir=runs/a --top=300 --output=map.png

curves: validation perplexity by epoch and by training wall time, one line per workdir (finished
or running), each n-gram baseline a horizontal line (an n-gram workdir or results.json, or
LABEL=PERPLEXITY). Workdirs written before evaluations recorded their wall time get it estimated
from the run's total at a uniform rate (the legend says so). embeddings: the `top` most frequent
training words' feature vectors C, projected on their first two principal components, labelled.
"""

import json
import math

import matplotlib
matplotlib.use('Agg')  # files only, also where there is no display
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
from matplotlib import ticker  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

from nplm_jax.files import metrics  # pylint: disable=wrong-import-position
from nplm_jax.files import workdir as workdir_lib  # pylint: disable=wrong-import-position
from nplm_jax.errors import UserError  # pylint: disable=wrong-import-position


def run_curve(path: str) -> dict:
  """{'label', 'epoch', 'wall', 'valid_ppl', 'wall_estimated'} of a workdir's evaluations."""
  workdir = workdir_lib.Workdir(path)
  if not workdir.path.exists():
    raise UserError(f'--workdir={path!r} does not exist; give the folder of a training')
  config = workdir.read_json('config.json')
  if config is None:
    raise UserError(f'--workdir={path!r} holds no config.json; give the folder of a training')
  records = metrics.read_jsonl(workdir.file('metrics.jsonl')) if workdir.file('metrics.jsonl').exists() else []
  evals = {r['step']: r for r in records if 'valid_ppl' in r}
  results = workdir.read_json('results.json') if workdir.file('results.json').exists() else None
  if results and results.get('history'):
    history = results['history']
  else:  # a running training: its evaluations so far
    corpus = workdir.read_json('corpus.json') or {}
    per_epoch = max(corpus.get('train_tokens', 0) / config['train']['batch_size'], 1)
    history = [{'step': s, 'epoch': s / per_epoch, 'valid_ppl': r['valid_ppl']} for s, r in sorted(evals.items())]
  if not history:
    raise UserError(f'--workdir={path!r} has no evaluation yet; plot it after its first one')
  steps = [h['step'] for h in history]
  wall = [evals.get(s, {}).get('wall_seconds') for s in steps]
  estimated = any(w is None for w in wall)
  if estimated:  # older workdirs: spread the run's total wall time evenly over its steps
    total, trained = (results or {}).get('wall_seconds'), (results or {}).get('steps_trained') or max(steps)
    wall = [total * s / trained if total else np.nan for s in steps]
  return {'label': run_label(path), 'epoch': [h['epoch'] for h in history],
          'wall': wall, 'valid_ppl': [h['valid_ppl'] for h in history], 'wall_estimated': estimated}


def run_label(path: str) -> str:
  """A run's name in legends and titles: its workdir's folder name (runs/brown_mlp1 -> brown_mlp1)."""
  return workdir_lib.as_path(path).name


def distinct_labels(curves: list[dict], paths: list[str]) -> None:
  """Runs whose folders share a name are labelled parent/name, so the legend tells them apart."""
  names = [c['label'] for c in curves]
  for c, path in zip(curves, paths):
    if names.count(c['label']) > 1:
      where = workdir_lib.as_path(path)
      c['label'] = f'{where.parent.name}/{where.name}'


def ngram_line(spec: str) -> tuple[str, float]:
  """'LABEL=PPL', or an n-gram workdir / results.json (its valid_ppl)."""
  label, eq, value = spec.partition('=')
  if eq:
    try:
      ppl = float(value)
    except ValueError:
      ppl = math.nan
    if not math.isfinite(ppl) or ppl < 1:  # a perplexity is at least 1; nan or inf would draw nothing
      raise UserError(f'--ngram={spec!r}: {value!r} is not a perplexity (a finite number >= 1); use LABEL=NUMBER or '
                      'an n-gram results.json')
    return label, ppl
  path = workdir_lib.as_path(spec)
  if path.is_dir():
    path = path / 'results.json'
  if not path.exists():
    raise UserError(f'--ngram={spec!r} is neither LABEL=PERPLEXITY nor an n-gram workdir or results.json')
  try:
    results = json.loads(path.read_text())
    return results.get('model') or path.parent.name, float(results['valid_ppl'])
  except (ValueError, KeyError):
    raise UserError(f'--ngram={spec!r}: {path} holds no valid_ppl; give an n-gram results.json') from None


def plot_curves(curves: list[dict], ngrams: list[tuple[str, float]], output: str) -> str:
  fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
  for c in curves:
    label = c['label'] + (' (wall time estimated)' if c['wall_estimated'] else '')
    by_epoch.plot(c['epoch'], c['valid_ppl'], marker='.', label=c['label'])
    by_time.plot(np.asarray(c['wall'], float) / 60, c['valid_ppl'], marker='.', label=label)
  for label, ppl in ngrams:
    for ax in (by_epoch, by_time):
      ax.axhline(ppl, linestyle='--', color='grey', linewidth=1)
      ax.annotate(f'{label} {ppl:.1f}', (1, ppl), xycoords=('axes fraction', 'data'), ha='right', va='bottom',
                  fontsize=8, color='grey')
  lowest = min([min(c['valid_ppl']) for c in curves] + [p for _, p in ngrams])
  highest = max(max(c['valid_ppl']) for c in curves)
  for ax, xlabel in ((by_epoch, 'epoch'), (by_time, 'training wall time (minutes)')):
    ax.set_xlabel(xlabel)
    ax.set_ylabel('validation perplexity')
    # A linear axis with plain numbers at round values (a log axis labels 320-415 as 4x10^2); the
    # first epochs' perplexities, far above the rest, are cut off at 3x the lowest.
    ax.set_ylim(lowest * 0.97, min(highest, lowest * 3) * 1.03)
    ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=10, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(plain_tick))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, title='run (workdir)', title_fontsize=8)
  fig.tight_layout()
  return save_figure(fig, output)


def plain_tick(value: float, position=None) -> str:
  """A tick label as a plain number: 320, 42.5 (never 3.2x10^2)."""
  del position
  return f'{value:g}'


def plot_embeddings(words: list[str], vectors: np.ndarray, output: str, title: str) -> str:
  centred = vectors - vectors.mean(axis=0)
  _, singular, vt = np.linalg.svd(centred, full_matrices=False)
  xy = centred @ vt[:2].T
  explained = singular[:2] ** 2 / np.sum(singular ** 2)
  fig, ax = plt.subplots(figsize=(14, 12))
  ax.scatter(xy[:, 0], xy[:, 1], s=4, color='tab:blue')
  labelled = place_labels(fig, ax, words, xy)
  ax.set_xlabel(f'first principal component ({100 * explained[0]:.1f}% of the variance)')
  ax.set_ylabel(f'second principal component ({100 * explained[1]:.1f}%)')
  ax.set_title(f'{title} ({labelled} labelled where they fit)' if labelled < len(words) else title)
  fig.tight_layout()
  return save_figure(fig, output)


# Where a word's label may sit around its point (offsets in points): right, left, above, below.
LABEL_OFFSETS = ((3, 2, 'left', 'bottom'), (-3, 2, 'right', 'bottom'), (3, -2, 'left', 'top'), (-3, -2, 'right', 'top'))


def place_labels(fig, ax, words: list[str], xy: np.ndarray) -> int:
  """Labels each point, in the order given (most frequent first), at the first offset where its
  text overlaps no label placed before; a word with no free place keeps its point unlabelled.
  Returns the number labelled. Text is taken literally (a '$' is no mathtext)."""
  fig.tight_layout()
  renderer = fig.canvas.get_renderer()
  taken = []
  for word, (x, y) in zip(words, xy):
    for dx, dy, ha, va in LABEL_OFFSETS:
      text = ax.annotate(word, (x, y), xytext=(dx, dy), textcoords='offset points', ha=ha, va=va, fontsize=7,
                         alpha=0.9, annotation_clip=True, parse_math=False)
      box = text.get_window_extent(renderer).expanded(1.05, 1.1)
      if not any(box.overlaps(other) for other in taken):
        taken.append(box)
        break
      text.remove()
  return len(taken)


def save_figure(fig, output: str) -> str:
  """`fig` written as a PNG at `output` (any filesystem etils.epath reaches), then closed; returns the path."""
  path = workdir_lib.as_path(output)
  if path.is_dir():
    raise UserError(f'--output={output!r} is a folder; give the path of the PNG file to write')
  path.parent.mkdir(parents=True, exist_ok=True)
  with path.open('wb') as f:
    fig.savefig(f, format='png', dpi=110)
  plt.close(fig)
  return str(path)


if __name__ == '__main__':  # the command: nplm_jax/commands/plot.py (python -m here keeps working)
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('nplm_jax.commands.plot')
