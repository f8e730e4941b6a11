"""The paper's mixture: the network's probabilities averaged with an interpolated trigram's.

Inside training (`config.mix.enabled`), or on a finished workdir without retraining:
python -m nplm_jax.tools.mix --workdir=runs/brown_mlp1   (writes WORKDIR/mix_results.json)
"""

import math
import sys

import numpy as np

from nplm_jax.data import corpora as data_lib
from nplm_jax.baselines import ngram
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import UserError


def ngram_probs(corpus: data_lib.Corpus, mix_config) -> dict:
  """The mixture's n-gram, estimated on the training split: P of every validation and test token."""
  model = ngram.build(corpus, mix_config.ngram_order, mix_config.smoothing, mix_config.max_memory_gb)
  return {s: model.token_probs(s) for s in ('valid', 'test')}


class RunMixture:
  """A training run's mixture (train.ExtraResults). The n-gram does not depend on the network, so
  prepare() estimates it and scores validation and test before training (a time budget counts that
  up front); after training only the weight's fit and the perplexities are left."""

  def __init__(self, mix_config):
    self.mix_config = mix_config
    self.ngram_probs = None

  def prepare(self, corpus: data_lib.Corpus) -> None:
    self.ngram_probs = ngram_probs(corpus, self.mix_config)

  def __call__(self, corpus: data_lib.Corpus, network_nll: dict) -> dict:
    return mixture_results(corpus, network_nll, self.mix_config, self.ngram_probs)


def mixture_results(corpus: data_lib.Corpus, network_nll: dict, mix_config, p_ngram: dict | None = None) -> dict:
  """Perplexities of the n-gram alone and of its mixture with the network.

  `network_nll` maps 'valid' and 'test' to the network's per-token -log P, in stream order. The
  mixture (mix_valid_ppl, mix_test_ppl) weighs the network by the weight fitted on validation
  (mix_config.fit_weight, the default: on validation it is no worse than either part alone) or by
  mix_config.weight; mix_weight says which weight, and the fitted weight's figures are always given
  (mix_fitted_*). p_ngram: the n-gram's ngram_probs when the caller has them.
  """
  p_ngram = ngram_probs(corpus, mix_config) if p_ngram is None else p_ngram
  p_net = {s: np.exp(-network_nll[s]) for s in ('valid', 'test')}
  fitted = ngram.fit_mixture_weight(p_net['valid'], p_ngram['valid'])
  weight = fitted if mix_config.fit_weight else mix_config.weight
  out = {'mix_ngram': f'{mix_config.smoothing}_{mix_config.ngram_order}', 'mix_weight': weight,
         'mix_weight_fitted': bool(mix_config.fit_weight), 'mix_fitted_weight': fitted}
  for s in ('valid', 'test'):
    out[f'ngram_{s}_ppl'] = ngram.perplexity(p_ngram[s])
    out[f'mix_{s}_ppl'] = ngram.perplexity(ngram.mixture_probs(p_net[s], p_ngram[s], weight))
    out[f'mix_fitted_{s}_ppl'] = ngram.perplexity(ngram.mixture_probs(p_net[s], p_ngram[s], fitted))
    out[f'mix_{s}_bits'] = math.log2(out[f'mix_{s}_ppl'])  # bits per token: per character at data.unit='char'
  return out


def summary_line(results: dict) -> str:
  head = (f'mixture with {results["mix_ngram"]}: valid ppl {results["mix_valid_ppl"]:.2f}, test ppl '
          f'{results["mix_test_ppl"]:.2f}')
  if results.get('mix_weight_fitted'):
    return f'{head} (the network\'s weight {results["mix_weight"]:.3f}, fitted on validation)'
  return (f'{head} (weight {results["mix_weight"]}); fitted weight {results["mix_fitted_weight"]:.3f}: test ppl '
          f'{results["mix_fitted_test_ppl"]:.2f}')


def recorded_weight(workdir: workdir_lib.Workdir, mix_config) -> tuple[float, str | None]:
  """(the network's weight, a note or None) for mixing this workdir's network with its n-gram outside
  training: mix.weight when fit_weight is off, else the weight its mixture was fitted to (results.json
  from training, or mix_results.json from nplm-mix), else mix.weight with a note saying none is fitted."""
  if not mix_config.fit_weight:
    return mix_config.weight, None
  for name in ('results.json', 'mix_results.json'):
    found = workdir.read_json(name) or {}
    if found.get('mix_weight_fitted') and found.get('mix_ngram') == f'{mix_config.smoothing}_{mix_config.ngram_order}':
      return float(found['mix_weight']), None
  return mix_config.weight, (f"the network's weight in the mixture is mix.weight={mix_config.weight}: no weight "
                             'fitted for this n-gram yet (nplm-mix fits one)')


def workdir_corpus(data_config, workdir: workdir_lib.Workdir) -> data_lib.Corpus:
  """The workdir's corpus for the n-gram. Brown without NLTK_DATA: the words cached by an earlier
  read, taken only when they give the corpus the workdir was trained on (its corpus.json)."""
  if data_config.corpus != 'brown' or data_lib.brown_zip_found():
    return data_lib.load_corpus(data_config)
  cached = data_lib.cached_brown_words()
  if cached is None:
    return data_lib.load_corpus(data_config)  # its one-line error: where to find Brown
  words, path = cached
  corpus = data_lib.brown_corpus(data_config.train_tokens, data_config.valid_tokens, data_config.max_rare_count,
                                 data_config.vocab_scope, words=words)
  trained_on = (workdir.read_json('corpus.json') or {}).get('fingerprint')
  if corpus.description()['fingerprint'] != trained_on:
    raise UserError(f'NLTK finds no Brown corpus and the cached words in {path} are not the corpus {workdir} was '
                    'trained on; set NLTK_DATA to the folder holding corpora/brown.zip')
  print(f'note: NLTK finds no Brown corpus: its words read from the cache {path} (the corpus {workdir} was '
        'trained on)', file=sys.stderr, flush=True)
  return corpus


if __name__ == '__main__':  # the command: nplm_jax/commands/mix.py (python -m here keeps working)
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('nplm_jax.commands.mix')
