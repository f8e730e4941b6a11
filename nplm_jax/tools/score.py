"""Log-probabilities of text under a trained model, as KenLM's `query` gives them.

python -m nplm_jax.tools.score --workdir=runs/brown_mlp1_tuned --text=FILE [--verbosity=word|line|summary]
    [--log_base=e|2|10] [--independent_lines] [--format=text|json|kenlm] [--mix]

FILE ('-' = stdin) is tokenised as the workdir's corpus was (whitespace; `<eos>` after every line
for text and PTB corpora); a word outside the vocabulary is scored as the rare-word symbol and
counted as OOV. By default the text is one stream, as the corpus was evaluated: each token's
context is the tokens before it, across lines, and the first tokens' context is boundary symbols.
--independent_lines scores every line from boundary symbols (for rescoring sentences or n-best
lists). Perplexity including OOVs is exp(-mean log P) over every token; excluding OOVs, over the
others only (KenLM's definitions; --format=kenlm prints KenLM query's layout). An OOV word is
charged the probability of the whole rare-word class it was merged into in training, the most a
word can get, so text with many OOVs can score a lower perplexity including them (docs/tools.md, "Scoring
text"). --mix scores with the workdir's network + n-gram mixture
(config.mix: the n-gram's order and smoothing; the network's weight as the workdir's mixture was fitted
on validation, or config.mix.weight). The command is
nplm_jax/commands/score.py; from Python, nplm_jax.load(DIR).score and .perplexity.
"""

if __name__ == '__main__':  # python -m here is the command (nplm_jax/commands/score.py), before the imports
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top  # below: it checks the flags before JAX's
  entry.run_command('nplm_jax.commands.score', early='check_flags')  # exits

import dataclasses
import json
import math
import sys

import numpy as np

from nplm_jax.baselines import ngram
from nplm_jax.tools import mix as mix_lib
from nplm_jax.tools import trained as trained_lib

LOG_BASES = {'e': math.e, '2': 2.0, '10': 10.0}


@dataclasses.dataclass
class Mixture:
  """The workdir's n-gram (config.mix: order, smoothing) and the network's weight beside it."""
  ngram_model: object
  weight: float


def mixed_nll(model: trained_lib.TrainedModel, mixture: Mixture, ids: np.ndarray, nll: np.ndarray) -> np.ndarray:
  """-log of weight * P_network + (1 - weight) * P_ngram per token of a sequence that starts after
  boundary symbols."""
  order = model.config.mix.ngram_order
  history = [model.boundary_id] * (order - 1) + [int(i) for i in ids]
  p_ngram = np.array([mixture.ngram_model.distribution(history[t:t + order - 1])[ids[t]] for t in range(len(ids))])
  return -np.log(ngram.mixture_probs(np.exp(-nll), p_ngram, mixture.weight))


def summary(nll: np.ndarray, oov: np.ndarray, log_base: str) -> dict:
  """KenLM's summary: tokens, OOVs, total log-probability, perplexity with and without OOVs."""
  kept = nll[~oov]
  return {'tokens': int(len(nll)), 'oov': int(oov.sum()), 'log_prob': log_prob(nll, log_base), 'log_base': log_base,
          'perplexity': math.exp(float(nll.mean())) if len(nll) else math.nan,
          'perplexity_excluding_oov': math.exp(float(kept.mean())) if len(kept) else math.nan}


def log_prob(nll, log_base: str) -> float:
  """The total log-probability of tokens in `log_base` (0.0, not -0.0, for none)."""
  return float(-np.sum(nll) / math.log(LOG_BASES[log_base])) + 0.0


def workdir_mixture(model: trained_lib.TrainedModel) -> Mixture:
  """The workdir's mixture: its n-gram estimated from the training corpus, and the weight its mixture
  was fitted to (mix.recorded_weight; a note on stderr when none is recorded yet)."""
  mix = model.config.mix
  ngram_model = ngram.build(model.training_corpus('--mix'), mix.ngram_order, mix.smoothing, mix.max_memory_gb)
  weight, note = mix_lib.recorded_weight(model.run.workdir, mix)
  if note:  # after the corpus was read: a refusal stays one line
    print(f'note: {note}', file=sys.stderr, flush=True)
  return Mixture(ngram_model, weight)


def score_text(model: trained_lib.TrainedModel, lines: list[str], independent_lines: bool,
               mixture: Mixture | None = None) -> list[trained_lib.Scored]:
  """One Scored per input line (empty lines give empty results): each line from boundary symbols,
  or the lines as one stream, scored whole and cut back into lines; with `mixture` (workdir_mixture)
  if given."""
  tokens = [model.line_tokens(line) for line in lines]
  scored = model.score(tokens if independent_lines else [[w for t in tokens for w in t]])
  if mixture is not None:
    scored = [dataclasses.replace(s, nll=mixed_nll(model, mixture, s.ids, s.nll)) for s in scored]
  if independent_lines:
    return scored
  whole, cuts = scored[0], np.cumsum([0] + [len(t) for t in tokens])
  return [trained_lib.Scored(t, whole.ids[a:b], whole.oov[a:b], whole.nll[a:b]) for t, a, b in zip(tokens, cuts, cuts[1:])]


def report(scored: list[trained_lib.Scored], verbosity: str, log_base: str, output_format: str, order: int = 0,
           out=sys.stdout) -> dict:
  """Prints the scores (text, json or kenlm: format_*) and returns the summary."""
  printer = {'text': _print_text, 'json': _print_json, 'kenlm': _print_kenlm}[output_format]
  total = summary(np.concatenate([s.nll for s in scored]), np.concatenate([s.oov for s in scored]), log_base)
  printer(scored, verbosity, log_base, total, order, out)
  return total


def _print_text(scored, verbosity, log_base, total, order, out):
  del order
  name = 'ln' if log_base == 'e' else f'log{log_base}'
  for number, s in enumerate(scored, start=1):
    if verbosity == 'word':
      for word, i, oov, nll in zip(s.words, s.ids, s.oov, s.nll):
        print(f'{word}\t{int(i)}\t{log_prob(nll, log_base):.4f}' + ('\tOOV' if oov else ''), file=out)
    if verbosity == 'line' or (verbosity == 'word' and s.words):
      print(f'line {number}: {name} P = {log_prob(s.nll, log_base):.4f}, tokens {len(s.nll)}, OOV {int(s.oov.sum())}',
            file=out)
  print(f'tokens {total["tokens"]}, OOV {total["oov"]}, {name} P = {total["log_prob"]:.4f}, perplexity '
        f'{total["perplexity"]:.2f}, perplexity excluding OOVs {total["perplexity_excluding_oov"]:.2f}', file=out)


def _print_json(scored, verbosity, log_base, total, order, out):
  """One object a line; every record names its log-probability log_prob, in base log_base."""
  del order
  for number, s in enumerate(scored, start=1):
    if verbosity == 'word':
      for word, i, oov, nll in zip(s.words, s.ids, s.oov, s.nll):
        print(json.dumps({'line': number, 'word': word, 'id': int(i), 'log_prob': log_prob(nll, log_base),
                          'log_base': log_base, 'oov': bool(oov)}), file=out)
    if verbosity == 'line' or (verbosity == 'word' and s.words):
      print(json.dumps({'line': number, 'tokens': len(s.nll), 'oov': int(s.oov.sum()),
                        'log_prob': log_prob(s.nll, log_base), 'log_base': log_base}), file=out)
  print(json.dumps(total), file=out)


def _print_kenlm(scored, verbosity, log_base, total, order, out):
  """KenLM query's layout (log10): per line `word=id n log10p` pairs and `Total: T OOV: N`
  (verbosity word; line: the Total parts only), then the four summary lines. n is the model's
  order: every word is predicted from n-1 words (KenLM prints the n-gram length it matched)."""
  del log_base
  for s in scored:
    if verbosity in ('word', 'line'):
      words = ''.join(f'{w}={int(i)} {order} {log_prob(nll, "10"):.7g}\t' for w, i, nll in zip(s.words, s.ids, s.nll))
      print(f'{words if verbosity == "word" else ""}Total: {log_prob(s.nll, "10"):.8g} OOV: {int(s.oov.sum())}', file=out)
  print(f'Perplexity including OOVs:\t{total["perplexity"]:.16g}\nPerplexity excluding OOVs:\t'
        f'{total["perplexity_excluding_oov"]:.16g}\nOOVs:\t{total["oov"]}\nTokens:\t{total["tokens"]}', file=out)
