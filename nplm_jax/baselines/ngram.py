"""n-gram baselines on the project's own vocabulary and token stream, vectorised with NumPy.

- `KneserNey`: interpolated Kneser-Ney with modified discounts (Chen & Goodman 1998: three
  discounts D1, D2, D3+ per order from count-of-counts), lower orders on continuation counts,
  the unigram interpolated with the uniform distribution, as SRILM's and KenLM's `-o N`
  estimate it (except that the stream is continuous, so there is no sentence-start symbol).
- `DeletedInterpolation`: the paper's interpolated trigram (any order): uniform + maximum-
  likelihood unigram, bigram, trigram, with weights per bin of context frequency fitted by EM on
  the validation split (Jelinek & Mercer 1980).

Both score exactly the stream the network sees (the same boundary padding before the corpus,
contexts crossing split boundaries), and both give a full distribution over the vocabulary for any
context: `distribution(context)`.

CLI: python -m nplm_jax.baselines.ngram --config=experiments/brown.py --order=5 --smoothing=kneser_ney
"""

import math
import time

import numpy as np

from nplm_jax.data import corpora as data_lib
from nplm_jax.errors import UserError
from nplm_jax.progress import StderrProgress, format_duration


# Corpora from this size on get an ETA before their first order is counted (each order is one
# np.unique over the whole stream: a minute at 100M tokens, with no progress inside it).
SAMPLED_ETA_FROM = 10_000_000
ETA_SAMPLE = 1_000_000


# The sample's rate holds less well as the stream outgrows the caches: np.unique over 32M and 126M
# tokens took 1.75x and 2.26x the n log n extrapolation from 1M; the estimate takes 2x.
BEYOND_THE_SAMPLE = 2.0


def next_order(previous_ids: np.ndarray, tokens: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
  """(ids, sorted keys) of the j-grams ending at each position, from the (j-1)-gram ids: the key of
  the j-gram ending at t is previous_ids[t-1] * |V| + tokens[t] (-1 where there is none)."""
  prefix = np.full_like(tokens, -1)
  prefix[1:] = previous_ids[:-1]
  valid = prefix >= 0
  keys, inverse = np.unique(prefix[valid] * vocab_size + tokens[valid], return_inverse=True)
  ids = np.full_like(tokens, -1)
  ids[valid] = inverse
  return ids, keys


def _counting_seconds(tokens: np.ndarray, vocab_size: int) -> float:
  """One order's counting time over `tokens` (next_order), timed on a sample and scaled as n log n."""
  sample = np.asarray(tokens[:ETA_SAMPLE], np.int64)
  started = time.perf_counter()
  next_order(sample, sample, vocab_size)
  seconds = time.perf_counter() - started
  n = len(tokens)
  return BEYOND_THE_SAMPLE * seconds * n / len(sample) * math.log(n) / math.log(len(sample))


class StreamNgrams:
  """An id for every j-gram (j = 1..order) ending at every stream position, and train counts.

  The stream is the corpus preceded by order-1 boundary symbols. The j-gram ending at position t
  is keyed by (id of the (j-1)-gram ending at t-1) * |V| + w_t, so ids come from one np.unique per
  order; keys are sorted, which makes looking up an arbitrary context a binary search.
  """

  def __init__(self, corpus: data_lib.Corpus, order: int):
    if order < 1:
      raise UserError(f'--order={order} is invalid; use an n-gram order >= 1')
    self.order, self.vocab_size = order, corpus.vocab_size
    pad = np.full(order - 1, corpus.boundary_id, np.int64)
    self.tokens = np.concatenate([pad] + [corpus.splits[s].astype(np.int64) for s in data_lib.SPLITS])
    self.split_positions = {}
    start = order - 1
    for s in data_lib.SPLITS:
      self.split_positions[s] = np.arange(start, start + corpus.num_tokens(s))
      start += corpus.num_tokens(s)
    v = self.vocab_size
    self.ids = [None, self.tokens]  # ids[j][t]: the j-gram ending at t (-1 where t < j-1)
    self.keys = [None, np.arange(v, dtype=np.int64)]
    progress = StderrProgress(f'n-gram orders counted over {len(self.tokens):,} tokens')
    if order > 1 and len(self.tokens) >= SAMPLED_ETA_FROM:
      seconds = _counting_seconds(self.tokens, v) * (order - 1)
      progress.emit(f'counting {order - 1} n-gram order(s) over {len(self.tokens):,} tokens: about '
                    f'{format_duration(seconds)} (timed on a sample)')
    for j in range(2, order + 1):
      progress(j - 2, order - 1)
      ids, keys = next_order(self.ids[j - 1], self.tokens, v)
      self.ids.append(ids)
      self.keys.append(keys)
    train = self.split_positions['train']
    self.raw_counts = [None] + [np.bincount(self.ids[j][train], minlength=len(self.keys[j])).astype(np.float64)
                                for j in range(1, order + 1)]

  def num_types(self, j: int) -> int:
    return 1 if j == 0 else len(self.keys[j])

  def prefix(self, j: int) -> np.ndarray:
    """The context ((j-1)-gram id) of every j-gram type."""
    return np.zeros(self.vocab_size, np.int64) if j == 1 else self.keys[j] // self.vocab_size

  def word(self, j: int) -> np.ndarray:
    return self.keys[j] % self.vocab_size

  def continuation_counts(self, j: int) -> np.ndarray:
    """N1+(. g): distinct words seen before each j-gram g in train (from (j+1)-gram types)."""
    train = self.split_positions['train']
    suffix_of = np.zeros(self.num_types(j + 1), np.int64)
    suffix_of[self.ids[j + 1][train]] = self.ids[j][train]
    seen = self.raw_counts[j + 1] > 0
    return np.bincount(suffix_of[seen], minlength=self.num_types(j)).astype(np.float64)

  def context_ids(self, j: int, positions: np.ndarray) -> np.ndarray:
    """The (j-1)-gram context id of the token at each position (0, the empty context, for j = 1)."""
    return np.zeros(len(positions), np.int64) if j == 1 else self.ids[j - 1][positions - 1]

  def lookup_context(self, context) -> list[int]:
    """Ids of the contexts of every order for a context given oldest word first; -1 if never seen.

    Returns [h_1, ..., h_order]: h_j is the (j-1)-gram id that order j conditions on.
    """
    context = [int(w) for w in context][-(self.order - 1):] if self.order > 1 else []
    if any(not 0 <= w < self.vocab_size for w in context):
      raise UserError(f'context {context} holds ids outside the vocabulary [0, {self.vocab_size})')
    ids = [0]
    for j in range(2, self.order + 1):
      if len(context) < j - 1:
        ids.append(-1)
        continue
      words = context[len(context) - (j - 1):]
      g = words[0]  # a unigram's id is the word
      for k, w in enumerate(words[1:], start=2):
        key = g * self.vocab_size + w
        at = int(np.searchsorted(self.keys[k], key))
        if at >= len(self.keys[k]) or self.keys[k][at] != key:
          g = -1
          break
        g = at
      ids.append(g)
    return ids

  def followers(self, j: int, h: int) -> tuple[np.ndarray, np.ndarray]:
    """(j-gram ids, words) of every j-gram type whose context is h."""
    if j == 1:
      ids = np.arange(self.vocab_size)
      return ids, ids
    lo, hi = np.searchsorted(self.keys[j], [h * self.vocab_size, (h + 1) * self.vocab_size])
    ids = np.arange(lo, hi)
    return ids, self.keys[j][lo:hi] % self.vocab_size


FIXED_DISCOUNTS = np.array([0.0, 0.5, 1.0, 1.5])  # mild discounts where the estimate cannot be made


def modified_discounts(counts: np.ndarray) -> np.ndarray:
  """[0, D1, D2, D3+] from the count-of-counts n1..n4 (Chen & Goodman), clipped to [0, k].

  Where the counts cannot give them (no n1 or n2: too little data), or the estimate of a class some
  n-gram falls in is not positive (small, regular corpora: n3 far above n2), the fixed FIXED_DISCOUNTS:
  a zero discount would leave a context no mass for unseen words, whose probability would then be 0
  (an infinite perplexity).
  Brown's, PTB's and PTB characters' estimates are all positive (0.25-2.0).
  """
  n = [np.sum(counts == k) for k in range(1, 5)]
  if n[0] == 0 or n[1] == 0:
    return FIXED_DISCOUNTS.copy()
  y = n[0] / (n[0] + 2.0 * n[1])
  d = [1 - 2 * y * n[1] / n[0], 2 - 3 * y * n[2] / n[1], 3 - 4 * y * n[3] / n[2] if n[2] else 3 - 4 * y]
  used = [n[0] > 0, n[1] > 0, bool(np.any(counts >= 3))]  # discount classes some n-gram falls in
  if any(x <= 0 and u for x, u in zip(d, used)):
    return FIXED_DISCOUNTS.copy()
  return np.array([0.0] + [float(np.clip(x, 0.0, k)) for k, x in enumerate(d, start=1)])


class KneserNey:
  """Interpolated modified Kneser-Ney of any order."""

  def __init__(self, ngrams: StreamNgrams):
    self.ngrams = ngrams
    self.levels = []  # per order j: counts, discounts, context totals and back-off weights
    progress = StderrProgress('Kneser-Ney orders estimated')
    for j in range(1, ngrams.order + 1):
      progress(j - 1, ngrams.order)
      counts = ngrams.raw_counts[j] if j == ngrams.order else ngrams.continuation_counts(j)
      discounts = modified_discounts(counts[counts > 0])
      prefix, contexts = ngrams.prefix(j), ngrams.num_types(j - 1)
      total = np.bincount(prefix, weights=counts, minlength=contexts)
      mass = sum(discounts[k] * np.bincount(prefix, weights=(np.minimum(counts, 3) == k), minlength=contexts)
                 for k in (1, 2, 3))
      gamma = np.divide(mass, total, out=np.ones_like(total), where=total > 0)
      self.levels.append(dict(counts=counts, discounts=discounts, total=total, gamma=gamma))

  def _discounted(self, level, counts):
    return np.maximum(counts - level['discounts'][np.minimum(counts, 3).astype(np.int64)], 0.0)

  def token_probs(self, split: str) -> np.ndarray:
    """P(w_t | context) for every token of a split, in stream order."""
    positions = self.ngrams.split_positions[split]
    p = np.full(len(positions), 1.0 / self.ngrams.vocab_size)
    for j, level in enumerate(self.levels, start=1):
      h = self.ngrams.context_ids(j, positions)
      total = level['total'][h]
      seen = total > 0
      c = level['counts'][self.ngrams.ids[j][positions]]
      higher = self._discounted(level, c) / np.where(seen, total, 1.0) + level['gamma'][h] * p
      p = np.where(seen, higher, p)
    return p

  def distribution(self, context) -> np.ndarray:
    """P(. | context) over the whole vocabulary; `context` oldest word first."""
    p = np.full(self.ngrams.vocab_size, 1.0 / self.ngrams.vocab_size)
    for j, (level, h) in enumerate(zip(self.levels, self.ngrams.lookup_context(context)), start=1):
      if h < 0 or level['total'][h] <= 0:
        continue
      ids, words = self.ngrams.followers(j, h)
      p = level['gamma'][h] * p
      p[words] += self._discounted(level, level['counts'][ids]) / level['total'][h]
    return p


class DeletedInterpolation:
  """Uniform + ML unigram ... ML n-gram, mixed with weights per context-frequency bin (EM on valid).

  A token's bin is (k, b): k the highest order whose context was seen in train, b = floor(log2 of
  that context's count), capped. Components above k have no estimate there and get no weight.
  """

  def __init__(self, ngrams: StreamNgrams, max_bucket: int = 10):
    self.ngrams, self.max_bucket = ngrams, max_bucket
    self.totals = [None] + [np.bincount(ngrams.prefix(j), weights=ngrams.raw_counts[j],
                                        minlength=ngrams.num_types(j - 1)) for j in range(1, ngrams.order + 1)]
    self.num_bins = (ngrams.order + 1) * (max_bucket + 1)
    self.weights = self._initial_weights()
    self.em_log_likelihoods = []

  def _initial_weights(self) -> np.ndarray:
    w = np.zeros((self.num_bins, self.ngrams.order + 1))
    for b in range(self.num_bins):
      k = b // (self.max_bucket + 1)
      w[b, :k + 1] = 1.0 / (k + 1)
    return w

  def _bin(self, k: np.ndarray, context_count: np.ndarray) -> np.ndarray:
    bucket = np.minimum(np.floor(np.log2(np.maximum(context_count, 1))), self.max_bucket).astype(np.int64)
    return k * (self.max_bucket + 1) + bucket

  def components(self, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-token component probabilities [tokens, order+1] and bins [tokens]."""
    ng = self.ngrams
    positions = ng.split_positions[split]
    comp = np.zeros((len(positions), ng.order + 1))
    comp[:, 0] = 1.0 / ng.vocab_size
    k = np.zeros(len(positions), np.int64)
    context_count = np.ones(len(positions))
    for j in range(1, ng.order + 1):
      h = ng.context_ids(j, positions)
      total = self.totals[j][h]
      seen = total > 0
      comp[:, j] = np.where(seen, ng.raw_counts[j][ng.ids[j][positions]] / np.where(seen, total, 1.0), 0.0)
      k = np.where(seen, j, k)
      context_count = np.where(seen, total, context_count)
    return comp, self._bin(k, context_count)

  def fit(self, split: str = 'valid', max_iterations: int = 200, tolerance: float = 1e-7) -> 'DeletedInterpolation':
    """EM on the split's likelihood; each iteration's log-likelihood is kept (it never decreases)."""
    comp, bins = self.components(split)
    counts = np.bincount(bins, minlength=self.num_bins)
    self.em_log_likelihoods = []
    progress = StderrProgress(f'interpolation EM iterations over {len(bins):,} {split} tokens (at most)')
    for iteration in range(max_iterations):
      progress(iteration, max_iterations)
      weighted = self.weights[bins] * comp
      mix = weighted.sum(axis=1)
      self.em_log_likelihoods.append(float(np.sum(np.log(mix))))
      posterior = weighted / mix[:, None]
      sums = np.stack([np.bincount(bins, weights=posterior[:, c], minlength=self.num_bins)
                       for c in range(comp.shape[1])], axis=1)
      has_data = counts > 0
      self.weights[has_data] = sums[has_data] / counts[has_data, None]
      if len(self.em_log_likelihoods) > 1 and (
          self.em_log_likelihoods[-1] - self.em_log_likelihoods[-2] <= tolerance * abs(self.em_log_likelihoods[-1])):
        break
    return self

  def token_probs(self, split: str) -> np.ndarray:
    comp, bins = self.components(split)
    return np.sum(self.weights[bins] * comp, axis=1)

  def distribution(self, context) -> np.ndarray:
    ng = self.ngrams
    hs = ng.lookup_context(context)
    k, context_count, dense = 0, 1.0, [np.full(ng.vocab_size, 1.0 / ng.vocab_size)]
    for j, h in enumerate(hs, start=1):
      p = np.zeros(ng.vocab_size)
      if h >= 0 and self.totals[j][h] > 0:
        ids, words = ng.followers(j, h)
        p[words] = ng.raw_counts[j][ids] / self.totals[j][h]
        k, context_count = j, self.totals[j][h]
      dense.append(p)
    w = self.weights[self._bin(np.array(k), np.array(context_count))]
    return np.sum(w[:, None] * np.stack(dense), axis=0)


SMOOTHINGS = ('kneser_ney', 'interpolated')


# Peak memory of estimating and scoring: the interpreter and libraries, then per token of the whole
# stream int64 ids of every order, their sorted keys and np.unique's temporaries. Measured peak RSS on a
# 32M-token corpus (|V| 50,001): 28 bytes a token plus 28 per order (prepared: order 2 2.68 GB, order
# 5 5.38 GB; read as text, order 5 5.72 GB); on PTB (1.09M tokens) the fixed part dominates. Rounded
# up: the estimate refuses only what is sure not to fit, and lets 100M-token corpora run on a 24 GiB
# machine (a fixed per-token figure measured on PTB alone refused them at twice their real need).
FIXED_BYTES = 256 * 2**20
BYTES_PER_TOKEN = 40
BYTES_PER_TOKEN_AND_ORDER = 32
DEFAULT_MAX_MEMORY_GB = 16.0


def memory_estimate(num_tokens: int, order: int) -> int:
  """Bytes an n-gram model of this order over this many tokens takes at its peak (an estimate)."""
  return FIXED_BYTES + num_tokens * (BYTES_PER_TOKEN + BYTES_PER_TOKEN_AND_ORDER * order)


def check_memory(corpus: data_lib.Corpus, order: int, max_memory_gb: float = DEFAULT_MAX_MEMORY_GB,
                 flag: str = '--max_memory_gb') -> None:
  """One line, before any work, when the model would not fit in `max_memory_gb` GiB."""
  if not (math.isfinite(max_memory_gb) and max_memory_gb >= 0):  # NaN would turn the guard off
    raise UserError(f'{flag}={max_memory_gb} is invalid; give the GiB the n-gram model may use, a finite number >= 0')
  tokens = sum(corpus.num_tokens(s) for s in data_lib.SPLITS)
  need = memory_estimate(tokens, order) / 2**30
  if need > max_memory_gb:
    raise UserError(f'the order-{order} n-gram model of {tokens:,} tokens needs about {need:.1f} GiB, over the '
                    f'{max_memory_gb:g} GiB allowed ({flag}); use a lower order, a smaller corpus, or allow more')


def build(corpus: data_lib.Corpus, order: int, smoothing: str, max_memory_gb: float = DEFAULT_MAX_MEMORY_GB):
  """A fitted n-gram model (the interpolated one's weights are fitted on validation)."""
  if smoothing not in SMOOTHINGS:
    raise UserError(f'--smoothing={smoothing!r} is unknown; use {" or ".join(SMOOTHINGS)}')
  check_memory(corpus, order, max_memory_gb)
  ngrams = StreamNgrams(corpus, order)
  return KneserNey(ngrams) if smoothing == 'kneser_ney' else DeletedInterpolation(ngrams).fit('valid')


def perplexity(probs: np.ndarray) -> float:
  return float(math.exp(-np.mean(np.log(probs))))


def mixture_probs(p_network: np.ndarray, p_ngram: np.ndarray, weight: float) -> np.ndarray:
  """The paper's mixture: weight * network + (1 - weight) * n-gram, per token."""
  return weight * p_network + (1.0 - weight) * p_ngram


def fit_mixture_weight(p_network: np.ndarray, p_ngram: np.ndarray, iterations: int = 100) -> float:
  """The network's weight maximising the likelihood of (validation) tokens, by EM; 0 or 1 (one part
  alone) when that is likelier than where EM stopped (an optimum at an end is only approached), so
  that on these tokens the mixture is never worse than either part."""
  weight = 0.5
  for _ in range(iterations):
    mix = mixture_probs(p_network, p_ngram, weight)
    new = float(np.mean(weight * p_network / mix))
    if abs(new - weight) < 1e-9:
      break
    weight = new
  log_likelihood = lambda w: float(np.sum(np.log(mixture_probs(p_network, p_ngram, w))))
  return max((weight, 0.0, 1.0), key=log_likelihood)


def evaluate(corpus: data_lib.Corpus, order: int, smoothing: str, max_memory_gb: float = DEFAULT_MAX_MEMORY_GB) -> dict:
  start = time.time()
  model = build(corpus, order, smoothing, max_memory_gb)
  return {'model': f'{smoothing}_{order}', 'order': order, 'smoothing': smoothing,
          'vocab_size': corpus.vocab_size, 'valid_ppl': perplexity(model.token_probs('valid')),
          'test_ppl': perplexity(model.token_probs('test')), 'seconds': round(time.time() - start, 2)}


if __name__ == '__main__':  # the command: nplm_jax/commands/ngram.py (python -m here keeps working)
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('nplm_jax.commands.ngram')
