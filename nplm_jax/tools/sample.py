"""Text drawn from a trained model, word by word.

python -m nplm_jax.tools.sample --workdir=runs/brown_mlp1_tuned --prompt="The jury said" --num_tokens=50
    [--temperature=1.0] [--top_k=0] [--top_p=1.0] [--num_samples=1] [--seed=0] [--[no-]stop_at_eos] [--allow_unk]

Each next word is drawn from P(w | the n-1 words before it), reshaped as fairseq and Flax's lm1b
do: divided by the temperature in log space (0 = always the most probable word), cut to the
top_k most probable words (0 = all) and to the smallest set whose probability reaches top_p
(1 = all). For corpora whose lines end with <eos> (text, PTB), a sample ends at its first <eos>
(--stop_at_eos, the default there; --no-stop_at_eos draws --num_tokens words, <eos> never among
them). The rare-word and boundary symbols are never drawn unless --allow_unk. A prompt is
tokenised as the corpus was; its words outside the vocabulary are read as the rare-word symbol.
The samples are drawn together, one batched step per word; sample i is a function of (--seed, i)
alone, the same whatever --num_samples. The command is nplm_jax/commands/sample.py; from Python,
nplm_jax.load(DIR).sample, .samples and .generate.
"""

if __name__ == '__main__':  # python -m here is the command (nplm_jax/commands/sample.py), before the imports
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top  # below: it checks the flags before JAX's
  entry.run_command('nplm_jax.commands.sample', early='check_flags')  # exits

import math
import sys

import numpy as np

from nplm_jax.data import corpora as data_lib
from nplm_jax.tools import trained as trained_lib
from nplm_jax.errors import UserError


def shape_distribution(log_probs: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
  """Probabilities [batch, |V|] to draw from, after temperature, top-k and top-p; rows sum to 1.

  Words already at probability 0 (-inf) stay there. Temperature 0 puts all mass on the argmax.
  """
  log_probs = np.asarray(log_probs, np.float64)
  if temperature == 0:
    out = np.zeros_like(log_probs)
    out[np.arange(len(log_probs)), np.argmax(log_probs, axis=-1)] = 1.0
    return out
  scaled = log_probs / temperature
  order = np.argsort(-scaled, axis=-1, kind='stable')
  ranked = np.take_along_axis(scaled, order, axis=-1)
  probs = np.exp(ranked - ranked[:, :1])
  probs /= probs.sum(axis=-1, keepdims=True)
  keep = np.ones_like(probs, bool)
  if top_k > 0:
    keep[:, top_k:] = False
  if top_p < 1.0:  # the smallest prefix whose mass reaches top_p: keep a word if the mass before it is < top_p
    before = np.cumsum(probs, axis=-1) - probs
    keep &= before < top_p
  probs = np.where(keep, probs, 0.0)
  probs /= probs.sum(axis=-1, keepdims=True)
  out = np.zeros_like(probs)
  np.put_along_axis(out, order, probs, axis=-1)
  return out


def draw(probs: np.ndarray, rng: np.random.Generator | list[np.random.Generator]) -> np.ndarray:
  """One word per row, by inverting each row's CDF at a uniform draw (from one generator, or one
  generator a row)."""
  cdf = np.cumsum(probs, axis=-1)
  uniform = rng.random(len(probs)) if isinstance(rng, np.random.Generator) else np.array([r.random() for r in rng])
  u = uniform * cdf[:, -1]
  return np.minimum((cdf <= u[:, None]).sum(axis=-1), probs.shape[-1] - 1)


def check_settings(num_tokens: int, temperature: float, top_k: int, top_p: float, num_samples: int, seed: int):
  if num_tokens < 1:
    raise UserError(f'--num_tokens={num_tokens} is invalid; draw at least 1 word')
  if not (math.isfinite(temperature) and temperature >= 0):  # NaN passes every comparison's negation
    raise UserError(f'--temperature={temperature} is invalid; use 0 (most probable word) or a finite number above')
  if top_k < 0:
    raise UserError(f'--top_k={top_k} is invalid; use 0 (all words) or a positive count')
  if not 0 < top_p <= 1:
    raise UserError(f'--top_p={top_p} is invalid; use a probability mass in (0, 1]')
  if num_samples < 1:
    raise UserError(f'--num_samples={num_samples} is invalid; draw at least 1 sample')
  if seed < 0:
    raise UserError(f'--seed={seed} is invalid; use a seed >= 0')


# Samples drawn together, at most this many at a time: memory stays [SAMPLES_AT_ONCE, |V|] whatever
# --num_samples (each sample is a function of (seed, its index) alone, so chunks change nothing).
SAMPLES_AT_ONCE = 256
# Host bytes a drawn word costs while its chunk of samples is drawn: its id in the histories (int32)
# and among the drawn rows (int64), and the text it becomes (a word and a space, 16 bytes on average).
BYTES_A_WORD = 4 + 8 + 16


def check_memory(model, num_tokens: int, num_samples: int, prompt_words: int) -> None:
  """Refuses in one line a draw whose chunk of samples cannot be held (e.g. --num_tokens=10**12)."""
  from nplm_jax.training import memory  # pylint: disable=g-import-not-at-top
  words = min(num_samples, SAMPLES_AT_ONCE) * (model.context_size + prompt_words + num_tokens)
  needed, available = words * BYTES_A_WORD, memory.host_available_bytes()
  if available is not None and needed > available:
    raise UserError(f'--num_tokens={num_tokens:,} x {min(num_samples, SAMPLES_AT_ONCE)} samples at a time needs about '
                    f'{needed / 2**30:,.1f} GiB and this host has {available / 2**30:,.1f} GiB available; draw fewer '
                    'words a sample')


def sample(model: trained_lib.TrainedModel, prompt: str, num_tokens: int, temperature: float = 1.0, top_k: int = 0,
           top_p: float = 1.0, num_samples: int = 1, seed: int = 0, allow_unk: bool = False,
           stop_at_eos: bool | None = None) -> list[list[str]]:
  """`num_samples` continuations of `prompt`, `num_tokens` words each, or (stop_at_eos; None = when
  the model's lines end with <eos>) up to their first <eos>, which is not returned."""
  return list(iter_samples(model, prompt, num_tokens, temperature, top_k, top_p, num_samples, seed, allow_unk,
                           stop_at_eos))


def _prepared(model, prompt: str, num_tokens: int, temperature: float, top_k: int, top_p: float, num_samples: int,
              seed: int, allow_unk: bool, stop_at_eos: bool | None):
  """(history, banned ids, the stop id or None) for drawing continuations of `prompt`: the settings
  checked, the prompt's words outside the vocabulary noted on stderr."""
  check_settings(num_tokens, temperature, top_k, top_p, num_samples, seed)
  eos = model.word_ids.get(data_lib.EOS) if model.vocabulary.tokenizer.end_of_line else None
  if stop_at_eos is None:
    stop_at_eos = eos is not None
  if stop_at_eos and eos is None:
    raise UserError("--stop_at_eos: this model's corpus has no <eos> (Brown is a plain word stream); use "
                    '--no-stop_at_eos')
  prompt_words = model.prompt_tokens(prompt)
  prompt_ids, oov = model.to_ids(prompt_words)
  if oov.any():  # on stderr: the samples stay the only output
    unknown = sorted({w for w, out in zip(prompt_words, oov) if out})
    print(f'note: prompt word(s) outside the vocabulary, read as {model.vocab[model.rare_id]}: {", ".join(unknown)}',
          file=sys.stderr, flush=True)
  history = np.concatenate([np.full(model.context_size, model.boundary_id, np.int32), prompt_ids])
  symbols = {model.rare_id, model.boundary_id, eos} - ({eos} if stop_at_eos else set())
  banned = [] if allow_unk else sorted(i for i in symbols if i is not None)
  if len(banned) >= len(model.vocab):
    raise UserError('the vocabulary holds only the rare-word and boundary symbols; use --allow_unk')
  return history, banned, (eos if stop_at_eos else None)


def iter_samples(model: trained_lib.TrainedModel, prompt: str, num_tokens: int, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, num_samples: int = 1, seed: int = 0, allow_unk: bool = False,
                 stop_at_eos: bool | None = None, progress=None):
  """sample()'s samples in order, SAMPLES_AT_ONCE at a time; `progress(words_done, words_total)`
  after every drawn word of a chunk, if given."""
  history, banned, stop_id = _prepared(model, prompt, num_tokens, temperature, top_k, top_p, num_samples, seed,
                                       allow_unk, stop_at_eos)
  check_memory(model, num_tokens, num_samples, len(prompt.split()))
  for first in range(0, num_samples, SAMPLES_AT_ONCE):
    indices = range(first, min(first + SAMPLES_AT_ONCE, num_samples))
    steps = _draw_steps(model, history, indices, num_tokens, temperature, top_k, top_p, seed, banned, stop_id)
    drawn = []
    for t, words in enumerate(steps, 1):
      drawn.append(words)
      if progress is not None:
        progress(first * num_tokens + t * len(indices), num_samples * num_tokens)
    rows = np.stack(drawn, axis=1)
    yield from ([model.vocab[i] for i in row if i >= 0 and i != stop_id] for row in rows)


def stream_words(model: trained_lib.TrainedModel, prompt: str, num_tokens: int, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, allow_unk: bool = False,
                 stop_at_eos: bool | None = None, progress=None):
  """Sample 0 of sample(), word by word as it is drawn, in memory that does not grow with num_tokens."""
  history, banned, stop_id = _prepared(model, prompt, num_tokens, temperature, top_k, top_p, 1, seed, allow_unk,
                                       stop_at_eos)
  for t, (word,) in enumerate(_draw_steps(model, history, range(1), num_tokens, temperature, top_k, top_p, seed,
                                          banned, stop_id), 1):
    if word < 0 or word == stop_id:
      return
    if progress is not None:
      progress(t, num_tokens)
    yield model.vocab[word]


def _draw_steps(model, history, indices, num_tokens, temperature, top_k, top_p, seed, banned, stop_id):
  """The drawn word ids [len(indices)] of samples `indices`, a step at a time (-1 after a sample's stop
  word); only the last n-1 words of each history are kept."""
  keep = max(model.context_size, 1)
  histories = np.tile(history[-keep:], (len(indices), 1))
  rngs = [np.random.default_rng([seed, i]) for i in indices]  # sample i: a function of (seed, i)
  ended = np.zeros(len(indices), bool)
  for _ in range(num_tokens):
    contexts = histories[:, ::-1][:, :model.context_size]  # most recent word first
    log_probs = model.next_word_log_probs(contexts)
    log_probs[:, banned] = -np.inf
    words = draw(shape_distribution(log_probs, temperature, top_k, top_p), rngs)
    yield np.where(ended, -1, words)
    if stop_id is not None:
      ended |= words == stop_id
    histories = np.concatenate([histories[:, 1:], words[:, None].astype(np.int32)], axis=1)
    if ended.all():
      return
