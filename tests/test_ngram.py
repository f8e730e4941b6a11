"""n-gram baselines: normalisation, a hand-worked Kneser-Ney example, a naive reference, EM, mixtures."""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from nplm_jax.data import corpora as data
from nplm_jax.baselines import ngram
from tests import corpora

pytestmark = pytest.mark.fast

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hand_corpus():
  """x is the boundary symbol; train a b a b c a c b d, valid b c, test a."""
  ids = {'x': 0, 'a': 1, 'b': 2, 'c': 3, 'd': 4}
  split = lambda text: np.array([ids[w] for w in text.split()], np.int32)
  return data.Corpus(vocab=tuple(ids), boundary_id=0,
                     splits={'train': split('a b a b c a c b d'), 'valid': split('b c'), 'test': split('a')})


@pytest.mark.unit
def test_modified_kneser_ney_bigram_by_hand():
  # Bigram counts: (x,a) (b,a) (b,c) (c,a) (a,c) (c,b) (b,d) once, (a,b) twice: n1 = 7, n2 = 1.
  # Y = 7/9, D1 = 1 - 2Y n2/n1 = 7/9, D2 = 2 - 3Y n3/n2 = 2.
  # Unigram continuation counts: a 3 (after x, b, c), b 2, c 2, d 1, x 0; 8 bigram types.
  # n1 = 1, n2 = 2, n3 = 1, n4 = 0: Y = 1/5, D1 = 0.2, D2 = 2 - 3(0.2)(1/2) = 1.7, D3+ = 3.
  # gamma() = (0.2*1 + 1.7*2 + 3*1) / 8 = 0.825, so P1(w) = max(cc - D, 0)/8 + 0.825/5:
  p1 = {'x': 0.165, 'a': 0.165, 'b': 0.3 / 8 + 0.165, 'c': 0.3 / 8 + 0.165, 'd': 0.8 / 8 + 0.165}
  assert abs(sum(p1.values()) - 1) < 1e-12
  # Context a: (a,b) = 2, (a,c) = 1; gamma(a) = (D1*1 + D2*1) / 3 = 25/27.
  after_a = {w: 25 / 27 * p for w, p in p1.items()}
  after_a['b'] += max(2 - 2, 0) / 3
  after_a['c'] += (1 - 7 / 9) / 3
  # Valid: b after d (d has no train follower: back off to P1), then c after b (3 singletons,
  # gamma(b) = 7/9). Test: a after c ((c,a), (c,b) singletons, gamma(c) = 7/9).
  valid = [p1['b'], (1 - 7 / 9) / 3 + 7 / 9 * p1['c']]
  test = [(1 - 7 / 9) / 2 + 7 / 9 * p1['a']]

  model = ngram.KneserNey(ngram.StreamNgrams(hand_corpus(), order=2))
  np.testing.assert_allclose(model.levels[1]['discounts'][1:3], [7 / 9, 2.0], rtol=1e-12)
  np.testing.assert_allclose(model.levels[0]['discounts'][1:4], [0.2, 1.7, 3.0], rtol=1e-12)
  np.testing.assert_allclose(model.distribution([1]), [after_a[w] for w in 'xabcd'], rtol=1e-12)
  np.testing.assert_allclose(model.distribution([4]), [p1[w] for w in 'xabcd'], rtol=1e-12)
  np.testing.assert_allclose(model.token_probs('valid'), valid, rtol=1e-12)
  np.testing.assert_allclose(model.token_probs('test'), test, rtol=1e-12)


def random_corpus(seed=0, vocab=12, sizes=(600, 80, 80)):
  rng = np.random.default_rng(seed)
  # a skewed, partly predictable stream so every order has repeated n-grams
  zipf = 1.0 / np.arange(1, vocab + 1)
  draw = lambda n: rng.choice(vocab, size=n, p=zipf / zipf.sum()).astype(np.int32)
  return data.Corpus(vocab=tuple(f'w{i}' for i in range(vocab)), boundary_id=0,
                     splits={s: draw(n) for s, n in zip(data.SPLITS, sizes)})


def naive_kneser_ney(corpus, order):
  """Interpolated modified Kneser-Ney written plainly with dictionaries, for cross-checking."""
  stream = [corpus.boundary_id] * (order - 1) + [int(w) for s in data.SPLITS for w in corpus.splits[s]]
  first_train, n_train = order - 1, corpus.num_tokens('train')
  raw = [collections.Counter() for _ in range(order + 1)]
  for t in range(first_train, first_train + n_train):
    for j in range(1, order + 1):
      raw[j][tuple(stream[t - j + 1:t + 1])] += 1
  counts = [None] * (order + 1)
  counts[order] = raw[order]
  for j in range(1, order):
    counts[j] = collections.Counter(g[1:] for g in raw[j + 1])
  discounts = [None] + [ngram.modified_discounts(np.array(list(counts[j].values()), float))
                        for j in range(1, order + 1)]

  def prob(t):
    p = 1.0 / corpus.vocab_size
    for j in range(1, order + 1):
      h = tuple(stream[t - j + 1:t])
      followers = {g[-1]: c for g, c in counts[j].items() if g[:-1] == h}
      total = sum(followers.values())
      if total == 0:
        continue
      d = discounts[j]
      gamma = sum(d[min(c, 3)] for c in followers.values()) / total
      c = followers.get(stream[t], 0)
      p = max(c - d[min(c, 3)], 0) / total + gamma * p
    return p

  start = first_train + n_train
  return np.array([prob(t) for t in range(start, start + corpus.num_tokens('valid'))])


@pytest.mark.parametrize('order', [1, 2, 3, 4, 5])
@pytest.mark.unit
def test_kneser_ney_matches_naive_reference(order):
  corpus = random_corpus(seed=order)
  model = ngram.KneserNey(ngram.StreamNgrams(corpus, order))
  np.testing.assert_allclose(model.token_probs('valid'), naive_kneser_ney(corpus, order), rtol=1e-10)


@pytest.mark.parametrize('smoothing', ngram.SMOOTHINGS)
@pytest.mark.parametrize('order', [1, 2, 3, 4, 5])
@pytest.mark.unit
def test_distributions_sum_to_one_and_match_stream_scores(smoothing, order):
  corpus = random_corpus(seed=10 + order)
  model = ngram.build(corpus, order, smoothing)
  rng = np.random.default_rng(order)
  contexts = [rng.integers(0, corpus.vocab_size, size=order - 1) for _ in range(20)]
  contexts.append(np.full(order - 1, corpus.vocab_size - 1))  # probably never seen
  for context in contexts:
    p = model.distribution(context)
    assert p.shape == (corpus.vocab_size,) and np.all(p > 0)
    assert abs(p.sum() - 1.0) < 1e-6
  # the vectorised scores of a split equal the full distribution at each token's context
  stream = np.concatenate([np.zeros(order - 1, np.int64)] + [corpus.splits[s] for s in data.SPLITS])
  start = order - 1 + corpus.num_tokens('train') + corpus.num_tokens('valid')
  scores = model.token_probs('test')
  for i in range(0, corpus.num_tokens('test'), 7):
    t = start + i
    assert abs(model.distribution(stream[t - order + 1:t])[stream[t]] - scores[i]) < 1e-12


@pytest.mark.unit
def test_em_never_lowers_the_validation_likelihood():
  model = ngram.DeletedInterpolation(ngram.StreamNgrams(random_corpus(seed=3, sizes=(2000, 400, 100)), 3))
  model.fit('valid', tolerance=0.0, max_iterations=30)
  ll = np.array(model.em_log_likelihoods)
  assert len(ll) == 30
  assert np.all(np.diff(ll) >= -1e-9 * np.abs(ll[1:])), np.diff(ll)
  assert ll[-1] > ll[0]


@pytest.mark.unit
def test_mixture_is_never_worse_than_its_worse_part():
  rng = np.random.default_rng(0)
  for _ in range(20):
    a, b = rng.uniform(1e-4, 1, size=500), rng.uniform(1e-4, 1, size=500) ** 3
    worse = max(ngram.perplexity(a), ngram.perplexity(b))
    for w in (0.0, 0.1, 0.5, 0.9, 1.0):
      assert ngram.perplexity(ngram.mixture_probs(a, b, w)) <= worse * (1 + 1e-12)
    fitted = ngram.fit_mixture_weight(a, b)
    best = ngram.perplexity(ngram.mixture_probs(a, b, fitted))
    assert best <= min(ngram.perplexity(a), ngram.perplexity(b), ngram.perplexity(ngram.mixture_probs(a, b, 0.5))) + 1e-9


def test_the_fitted_weight_takes_one_part_alone_when_that_is_likelier():
  """An optimum at an end of [0, 1] is only approached by EM: the fit then returns the end itself, so the
  fitted mixture is never worse than either part on the tokens it was fitted to (no tolerance needed)."""
  rng = np.random.default_rng(1)
  network = rng.uniform(0.2, 1, size=1000)
  for ngram_probs, end in ((network * 0.01, 1.0), (np.minimum(network * 50, 1.0), 0.0)):
    assert ngram.fit_mixture_weight(network, ngram_probs) == end
    assert ngram.perplexity(ngram.mixture_probs(network, ngram_probs, ngram.fit_mixture_weight(network, ngram_probs))) \
        <= min(ngram.perplexity(network), ngram.perplexity(ngram_probs))


def test_the_mixture_uses_the_fitted_weight_unless_a_fixed_one_is_asked_for():
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools import mix  # pylint: disable=g-import-not-at-top
  corpus = random_corpus()
  rng = np.random.default_rng(2)
  network = {s: -np.log(rng.uniform(0.01, 0.2, size=corpus.num_tokens(s))) for s in ('valid', 'test')}
  config = config_lib.base_config().mix
  fitted = mix.mixture_results(corpus, network, config)
  assert fitted['mix_weight_fitted'] and fitted['mix_weight'] == fitted['mix_fitted_weight']
  assert fitted['mix_test_ppl'] == fitted['mix_fitted_test_ppl']
  assert fitted['mix_valid_ppl'] <= min(fitted['ngram_valid_ppl'], float(np.exp(network['valid'].mean())))
  config.update(fit_weight=False, weight=0.5)
  fixed = mix.mixture_results(corpus, network, config)
  assert not fixed['mix_weight_fitted'] and fixed['mix_weight'] == 0.5
  assert fixed['mix_fitted_test_ppl'] == fitted['mix_fitted_test_ppl'] and fixed['mix_valid_ppl'] >= fitted['mix_valid_ppl']
  # a config saved before fit_weight existed mixed at its fixed weight, and still does
  saved = config_lib.to_saved(config_lib.base_config())
  del saved['mix']['fit_weight']
  assert config_lib.from_saved(saved).mix.fit_weight is False


def test_ngram_cli_on_ptb(ptb_dir):
  proc = subprocess.run([sys.executable, '-m', 'nplm_jax.baselines.ngram', '--config=experiments/ptb.py',
                         f'--config.data.path={ptb_dir}', '--order=5', '--smoothing=kneser_ney'],
                        cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  # Mikolov et al. report 141.2 for a modified Kneser-Ney 5-gram on these files
  assert 138 < result['test_ppl'] < 144 and result['vocab_size'] == 10_000


def test_ngram_cli_bad_order_is_one_line(tiny_files):
  proc = subprocess.run([sys.executable, '-m', 'nplm_jax.baselines.ngram', '--config=experiments/text.py',
                         f'--config.data.train_file={tiny_files["train"]}', f'--config.data.valid_file={tiny_files["valid"]}',
                         f'--config.data.test_file={tiny_files["test"]}', '--order=0'],
                        cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and proc.stderr.strip() == "error: --order=0 is invalid; use an n-gram order >= 1"


def test_discounts_that_cannot_be_estimated_fall_back_and_no_word_gets_zero(tiny_files):
  """A small, regular corpus gives n3 far above n2, so D2 = 2 - 3 y n3 / n2 < 0: the fixed discounts
  are used instead and every token keeps a positive probability (a zero discount gave some 0)."""
  counts = np.array([1] * 10 + [2] * 2 + [3] * 40 + [4] * 5, np.float64)
  np.testing.assert_array_equal(ngram.modified_discounts(counts), ngram.FIXED_DISCOUNTS)
  config = corpora.tiny_config(tiny_files)
  model = ngram.build(data.load_corpus(config.data), 3, 'kneser_ney')
  for split in ('valid', 'test'):
    assert model.token_probs(split).min() > 0


@pytest.mark.unit
def test_a_large_stream_gets_an_eta_before_its_first_order(monkeypatch, capsys):
  """From SAMPLED_ETA_FROM tokens on, the counting time is estimated on a sample and said first (each
  order is one np.unique, with no progress inside it); smaller streams say nothing."""
  monkeypatch.setattr(ngram, 'SAMPLED_ETA_FROM', 500)
  monkeypatch.setattr(ngram, 'ETA_SAMPLE', 100)
  large = ngram.StreamNgrams(random_corpus(sizes=(600, 80, 80)), 3)
  assert ngram._counting_seconds(large.tokens, large.vocab_size) > 0
  lines = capsys.readouterr().err.splitlines()
  assert len(lines) == 1 and lines[0].startswith('counting 2 n-gram order(s) over 762 tokens: about ')
  assert lines[0].endswith('(timed on a sample)')
  ngram.StreamNgrams(random_corpus(sizes=(300, 80, 80)), 3)
  assert not capsys.readouterr().err
