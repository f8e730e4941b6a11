"""A trained model as a Python object: what nplm-score, nplm-sample and nplm-embeddings do, as calls.

    lm = nplm_jax.load('runs/brown_quick')
    lm.perplexity(text)                      # what nplm-score prints for the same text
    lm.score(sentences, independent_lines=True)[0].log_probs
    lm.next_words('the jury said', topn=5)   # [(word, probability), ...]
    lm.sample('The jury said', num_tokens=20, seed=0)
    lm.vectors.most_similar('Monday')        # gensim KeyedVectors' habits (word_vectors.py)

The commands are thin layers over these calls (nplm_jax/commands/), so the two cannot disagree. A
bad argument, an unknown word or a bad workdir raises nplm_jax.UserError with the one line the
commands print; nothing here installs signal handlers or exits the process.
"""

import functools
import os
from collections.abc import Callable, Iterator, Sequence

import ml_collections
import numpy as np

from nplm_jax.errors import UserError
from nplm_jax.tools import extend as extend_lib
from nplm_jax.tools import sample as sample_lib
from nplm_jax.tools import score as score_lib
from nplm_jax.tools import trained as trained_lib
from nplm_jax.tools import word_vectors as word_vectors_lib

Scored = trained_lib.Scored
Progress = Callable[[int, int], None]  # (done, total)


def _lines(text: str | Sequence[str]) -> list[str]:
  """A string's lines (as a file's), or a list of lines as given."""
  if isinstance(text, str):
    return text.splitlines()
  lines = list(text)
  for line in lines:
    if not isinstance(line, str):
      raise UserError(f'the text is a list holding a {type(line).__name__}; give a string or a list of strings')
  return lines


class LanguageModel:
  """A finished or running training's best parameters, read from its workdir as the commands read it
  (config.json, vocab.tsv, tokenizer.json and best/; never the corpus), on the mesh its config asks
  for on this machine. Load it with nplm_jax.load(workdir)."""

  def __init__(self, trained: trained_lib.TrainedModel):
    self.trained = trained

  @classmethod
  def load(cls, workdir: str | os.PathLike) -> 'LanguageModel':
    return cls(trained_lib.TrainedModel.load(os.fspath(workdir)))

  # ------------------------------------------------------------------------------- what it is

  @property
  def config(self) -> ml_collections.ConfigDict:
    """The config it was trained with (config.json)."""
    return self.trained.config

  @property
  def step(self) -> int:
    """The training step of the parameters loaded (the best on validation so far)."""
    return self.trained.step

  @property
  def vocabulary(self) -> tuple[str, ...]:
    """The words in id order, the rare-word (<unk>) and boundary symbols among them."""
    return self.trained.vocab

  @property
  def context_size(self) -> int:
    """How many preceding tokens a prediction reads (n - 1; the revisited family's distant block included)."""
    return self.trained.context_size

  @property
  def char_level(self) -> bool:
    """Whether its tokens are characters (data.unit='char'; a space is the token <space>)."""
    return self.trained.char_level

  def tokenize(self, line: str) -> list[str]:
    """A line's tokens as the corpus reader made them (text and PTB corpora: <eos> at the end)."""
    return self.trained.line_tokens(line)

  def detokenize(self, tokens: Sequence[str]) -> str:
    """Tokens back to text: words with spaces between; characters together."""
    return self.trained.join(list(tokens))

  # --------------------------------------------------------------------------------- scoring

  @functools.cached_property
  def _mixture(self) -> score_lib.Mixture:
    return score_lib.workdir_mixture(self.trained)

  def score(self, text: str | Sequence[str], independent_lines: bool = False, mix: bool = False) -> list[Scored]:
    """One Scored per line (a string's lines, or a list's items; an empty line gives an empty Scored):
    its tokens as the model saw them (.words, .ids), .oov flags (scored as the rare-word symbol, as
    KenLM's full_scores marks them), .log_probs (natural log, one per token) and .total.

    By default the lines are one stream, as the corpus was evaluated (each token's context runs back
    across lines); independent_lines=True scores each line from boundary symbols (rescoring sentences),
    all of them in batches on the devices. mix=True: the network mixed with the workdir's n-gram
    (config.mix: order and smoothing; the weight the workdir's mixture was fitted to on validation, or
    config.mix.weight), which reads the training corpus once."""
    return score_lib.score_text(self.trained, _lines(text), independent_lines,
                                self._mixture if mix else None)

  def perplexity(self, text: str | Sequence[str], independent_lines: bool = False, mix: bool = False) -> float:
    """exp(mean -log P) over every token, OOVs included: the perplexity nplm-score prints for the same text."""
    scored = self.score(text, independent_lines, mix)
    nll = np.concatenate([s.nll for s in scored]) if scored else np.zeros(0)
    if not len(nll):
      raise UserError('the text holds no tokens; give non-empty text')
    return score_lib.summary(nll, np.zeros(len(nll), bool), 'e')['perplexity']

  # ---------------------------------------------------------------------- next-word distribution

  def _context_ids(self, contexts: Sequence[str]) -> np.ndarray:
    """[batch, context_size]: each context's last tokens, most recent first, boundary symbols before the text."""
    rows = []
    for context in contexts:
      ids, _ = self.trained.to_ids(self.trained.prompt_tokens(context))
      history = np.concatenate([np.full(self.context_size, self.trained.boundary_id, np.int32), ids])
      rows.append(history[::-1][:self.context_size])
    return np.stack(rows) if rows else np.zeros((0, self.context_size), np.int32)

  def next_word_log_probs(self, contexts: str | Sequence[str]) -> np.ndarray:
    """log P(w | context) for every word of the vocabulary, exactly normalised, float64: [|V|] for one
    context, [len(contexts), |V|] for a list. A context is text tokenised as a prompt (no <eos> added);
    the tokens before its start are boundary symbols, its words outside the vocabulary the rare-word
    symbol. Columns follow lm.vocabulary."""
    single = isinstance(contexts, str)
    batch = self._context_ids([contexts] if single else _lines(contexts))
    out = self.trained.next_word_log_probs(batch)
    return out[0] if single else out

  def next_words(self, context: str, topn: int = 10) -> list[tuple[str, float]]:
    """The `topn` most likely next words after `context`, with their probabilities, most likely first."""
    if topn < 1:
      raise UserError(f'topn={topn} is invalid; list at least 1 word')
    log_probs = self.next_word_log_probs(context)
    best = np.argsort(-log_probs, kind='stable')[:topn]
    return [(self.vocabulary[i], float(np.exp(log_probs[i]))) for i in best]

  # --------------------------------------------------------------------------------- sampling

  def generate(self, prompt: str = '', num_tokens: int = 50, temperature: float = 1.0, top_k: int = 0,
               top_p: float = 1.0, seed: int = 0, allow_unk: bool = False, stop_at_eos: bool | None = None,
               progress: Progress | None = None) -> Iterator[str]:
    """The words drawn after `prompt`, one at a time as each is drawn (nplm-sample's sample 0 for the
    same arguments): temperature (0 = the most probable word), top_k (0 = all) and top_p (1 = all)
    reshape each distribution; stop_at_eos (None: when lines end with <eos>) ends at the first <eos>;
    the rare-word and boundary symbols are never drawn unless allow_unk."""
    sample_lib.check_settings(num_tokens, temperature, top_k, top_p, 1, seed)  # here, not at the first word drawn
    return sample_lib.stream_words(self.trained, prompt, num_tokens, temperature, top_k, top_p, seed, allow_unk,
                                   stop_at_eos, progress)

  def sample(self, prompt: str = '', num_tokens: int = 50, temperature: float = 1.0, top_k: int = 0,
             top_p: float = 1.0, seed: int = 0, allow_unk: bool = False, stop_at_eos: bool | None = None) -> str:
    """The prompt and its continuation as one string: the line nplm-sample prints."""
    words = list(self.generate(prompt, num_tokens, temperature, top_k, top_p, seed, allow_unk, stop_at_eos))
    return self.detokenize(self.trained.prompt_tokens(prompt) + words)

  def samples(self, prompt: str = '', num_samples: int = 1, num_tokens: int = 50, temperature: float = 1.0,
              top_k: int = 0, top_p: float = 1.0, seed: int = 0, allow_unk: bool = False,
              stop_at_eos: bool | None = None, progress: Progress | None = None) -> Iterator[str]:
    """`num_samples` lines as sample() makes them, drawn together in batches; sample i depends on (seed, i)
    alone, so samples(...)'s first is sample(...) for the same seed."""
    sample_lib.check_settings(num_tokens, temperature, top_k, top_p, num_samples, seed)  # here, not when iterated
    prompt_tokens = self.trained.prompt_tokens(prompt)
    drawn = sample_lib.iter_samples(self.trained, prompt, num_tokens, temperature, top_k, top_p, num_samples, seed,
                                    allow_unk, stop_at_eos, progress)
    return (self.detokenize(prompt_tokens + words) for words in drawn)

  # ---------------------------------------------------------------------------- word features

  @functools.cached_property
  def vectors(self) -> word_vectors_lib.WordVectors:
    """C, the learned feature vector of every word, with gensim KeyedVectors' habits."""
    return word_vectors_lib.WordVectors(self.vocabulary, self.trained.embeddings, self.trained.train_counts,
                                        self.config.data.corpus)

  def oov_vectors(self, text: str | Sequence[str]) -> dict[str, np.ndarray]:
    """Feature vectors [m] for the words of `text` outside the vocabulary, by the paper's recipe (section 5):
    C(j) = sum_i C(i) P(i | context), averaged over j's occurrences in the text; in first-appearance order.
    nplm-extend adds the same vectors to a new workdir."""
    words, _, features, _ = extend_lib.unknown_word_rows(self.trained, _lines(text), with_columns=False)
    return {w: np.asarray(row, np.float32) for w, row in zip(words, features if words else [])}

