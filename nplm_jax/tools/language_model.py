"""A trained model as a Python object: what nplm-score, nplm-sample and nplm-embeddings do, as calls.

    with nplm_jax.load('runs/brown_quick') as lm:   # lm.close() at the end frees it
      lm.score(sentences)[0].log_probs         # each sentence alone, natural log
      lm.perplexity(pathlib.Path('test.txt'))  # a file is one stream: what nplm-score prints for it
      lm.kenlm.score('the jury said', bos=True, eos=True)   # kenlm.Model's calls and units (log10)
      lm.next_words('the jury said', topn=5)   # [(word, probability), ...]
      lm.sample('The jury said', num_tokens=20, seed=0)
      lm.vectors.most_similar('Monday')        # gensim KeyedVectors' habits (word_vectors.py)

The commands are thin layers over these calls (nplm_jax/commands/), so the two cannot disagree. A
bad argument, an unknown word or a bad workdir raises nplm_jax.UserError with the one line the
commands print, naming the argument rather than the flag; nothing here installs signal handlers or exits
the process.
"""

import functools
import io
import math
import numbers
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence

import ml_collections
import numpy as np

from nplm_jax.data import corpora as data_lib
from nplm_jax.data import text_input
from nplm_jax.errors import UserError, a_kind
from nplm_jax.tools import extend as extend_lib
from nplm_jax.tools import sample as sample_lib
from nplm_jax.tools import score as score_lib
from nplm_jax.tools import trained as trained_lib
from nplm_jax.tools import word_vectors as word_vectors_lib

Scored = trained_lib.Scored
Progress = Callable[[int, int], None]  # (done, total)


Text = str | Sequence[str] | os.PathLike | io.TextIOBase


def _lines(text, argument: str = 'text') -> list[str]:
  """A string's lines, a list's items, or a file's lines (a pathlib.Path or an open file), each without a
  byte-order mark at its start; one line of error for anything else."""
  if _is_file(text):
    return _file_lines(text, argument)
  if isinstance(text, (bytes, bytearray)):
    raise UserError(f"{argument} is bytes; decode it first ({argument}.decode('utf-8')) or give a pathlib.Path")
  if isinstance(text, str):
    if '\n' not in text and text.strip() and ' ' not in text.strip() and os.path.isfile(text):
      warnings.warn(f'{argument}={text!r} is read as text, not as the file of that name; pass '
                    f'pathlib.Path({text!r}) to read the file', UserWarning, stacklevel=3)
    return text.removeprefix('\ufeff').splitlines()
  if not isinstance(text, Sequence):
    raise UserError(f'{argument} is {a_kind(text)}; give a string, a list of strings, a pathlib.Path or an open file')
  lines = list(text)
  for line in lines:
    if not isinstance(line, str):
      raise UserError(f'{argument} is a list holding {a_kind(line)}; give a string or a list of strings')
  return [line.removeprefix('\ufeff') for line in lines]


def _file_lines(file, argument: str) -> list[str]:
  """An open file's or a path's lines, read as the commands read --text (text_input.read_lines)."""
  if isinstance(file, os.PathLike):
    return text_input.read_lines(os.fspath(file), argument)
  content = file.read()
  if isinstance(content, bytes):
    content = content.decode('utf-8')
  return content.removeprefix('\ufeff').splitlines()


def _is_file(text) -> bool:
  return isinstance(text, (os.PathLike, io.IOBase)) or hasattr(text, 'read')


def _whole_number(value, argument: str) -> int:
  """An int given as an int (not a bool, a float or a string): one line of error otherwise."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise UserError(f'{argument}={value!r} is not a whole number; give an int')
  return int(value)


def _real_number(value, argument: str) -> float:
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise UserError(f'{argument}={value!r} is not a number; give an int or a float')
  return float(value)


def _flag(value, argument: str) -> bool:
  if not isinstance(value, (bool, np.bool_)):
    raise UserError(f'{argument}={value!r} is not True or False')
  return bool(value)


_FLAG_NAME = re.compile(r'(?<![\w-])--(?!config\.)([a-z]\w*)')


def _in_argument_words(error: UserError) -> UserError:
  """A command's one-line error with its flags named as the API's arguments (--top_p=1.5 -> top_p=1.5)."""
  return type(error)(_FLAG_NAME.sub(r'\1', str(error)))


def _in_api_words(method):
  """The method's errors in the API's words, unless the model serves a command (flag_messages)."""
  @functools.wraps(method)
  def wrapped(self, *args, **kwargs):
    try:
      return method(self, *args, **kwargs)
    except UserError as e:
      if self.flag_messages:
        raise
      raise _in_argument_words(e) from None
  return wrapped


class LanguageModel:
  """A finished or running training's best parameters, read from its workdir as the commands read it
  (config.json, vocab.tsv, tokenizer.json and best/; never the corpus), on the mesh its config asks
  for on this machine. Load it with nplm_jax.load(workdir); close() (or a `with` block) frees it."""

  def __init__(self, trained: trained_lib.TrainedModel, flag_messages: bool = False):
    self._trained = trained
    trained_lib.hold(trained.run)
    self.flag_messages = flag_messages  # the commands' errors name their flags; the API's, its arguments

  @classmethod
  def load(cls, workdir: str | os.PathLike, flag_messages: bool = False, devices=None) -> 'LanguageModel':
    if not isinstance(workdir, (str, os.PathLike)):
      raise UserError(f'workdir is {a_kind(workdir)}; give the folder of a training, e.g. runs/brown_quick')
    try:
      return cls(trained_lib.TrainedModel.load(os.fspath(workdir), devices), flag_messages)
    except UserError as e:
      if flag_messages:
        raise
      raise _in_argument_words(e) from None

  @property
  def trained(self) -> trained_lib.TrainedModel:
    if self._trained is None:
      raise UserError('this model was closed; load it again with nplm_jax.load(workdir)')
    return self._trained

  def close(self) -> None:
    """Frees the parameters, and the functions compiled for this model unless another open model of the same
    workdir uses them (loading it again then recompiles them)."""
    if self._trained is not None:
      trained_lib.let_go(self._trained.run)
      self._trained = None
      self.__dict__.pop('vectors', None)
      self.__dict__.pop('_mixture', None)

  def __enter__(self) -> 'LanguageModel':
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def __repr__(self) -> str:
    if self._trained is None:
      return 'LanguageModel(closed)'
    results = self.trained.run.workdir.read_json('results.json') or {}
    valid = f', valid perplexity {results["valid_ppl"]:.2f}' if results.get('step') == self.step else ''
    return (f'LanguageModel({self.config.name!r}: {self.config.model.kind} model, |V| {len(self.vocabulary):,}, '
            f'order {self.order}, {self.num_parameters:,} parameters, step {self.step}{valid}, '
            f'workdir {str(self.trained.run.workdir)!r})')

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

  def __contains__(self, word) -> bool:
    """Whether `word` is in the vocabulary (kenlm's `'word' in model`)."""
    return isinstance(word, str) and word in self.trained.word_ids

  @property
  def context_size(self) -> int:
    """How many preceding tokens a prediction reads (n - 1, and the distant block's words)."""
    return self.trained.context_size

  @property
  def order(self) -> int:
    """The n of the n-gram its context makes: context_size + 1 (kenlm's model.order)."""
    return self.context_size + 1

  @property
  def num_parameters(self) -> int:
    """Its parameters, the vocabulary's padding left out (results.json's num_parameters)."""
    return self.trained.num_parameters

  @property
  def char_level(self) -> bool:
    """Whether its tokens are characters (data.unit='char'; a space is the token <space>)."""
    return self.trained.char_level

  def tokenize(self, line: str) -> list[str]:
    """A line's tokens as the corpus reader made them (text and PTB corpora: <eos> at the end)."""
    if not isinstance(line, str):
      raise UserError(f'line is {a_kind(line)}; give a string')
    return self.trained.line_tokens(line.removeprefix('\ufeff'))

  def detokenize(self, tokens: Sequence[str]) -> str:
    """Tokens back to text: words with spaces between; characters together."""
    return self.trained.join(list(tokens))

  @functools.cached_property
  def kenlm(self) -> 'KenlmView':
    """kenlm.Model's calls under their names and in their units: score (log10 of a sentence), full_scores,
    perplexity, order and `in`."""
    return KenlmView(self)

  # --------------------------------------------------------------------------------- scoring

  @functools.cached_property
  def _mixture(self) -> score_lib.Mixture:
    return score_lib.workdir_mixture(self.trained)

  @_in_api_words
  def score(self, text: Text, *, stream: bool | None = None, mix: bool = False,
            independent_lines: bool | None = None) -> list[Scored]:
    """One Scored per line (a string's lines, a list's items, or a file's lines; an empty line gives an empty
    Scored): its tokens as the model saw them (.words, .ids), .oov flags (scored as the rare-word symbol, as
    KenLM's full_scores marks them), .log_probs (natural log, one per token) and .total.

    Sentences (a string or a list) are each scored alone from boundary symbols, in batches on the devices, as
    kenlm, fairseq and the Hugging Face pipelines score them; a file (a pathlib.Path or an open file) is one
    stream, as the corpus was evaluated and nplm-score scores it (each token's context runs back across
    lines). stream=True or False chooses either for any input (independent_lines=True is stream=False).
    mix=True: the network mixed with the workdir's n-gram (config.mix: order and smoothing; the weight the
    workdir's mixture was fitted to on validation, or config.mix.weight), built once per loaded model."""
    if independent_lines is not None:
      if stream is not None:
        raise UserError('give stream or independent_lines, not both (independent_lines=True is stream=False)')
      stream = not _flag(independent_lines, 'independent_lines')
    stream = _is_file(text) if stream is None else _flag(stream, 'stream')
    lines = _lines(text)
    return score_lib.score_text(self.trained, lines, not stream, self._mixture if _flag(mix, 'mix') else None)

  @_in_api_words
  def perplexity(self, text: Text, *, stream: bool | None = None, mix: bool = False,
                 independent_lines: bool | None = None) -> float:
    """exp(mean -log P) over every token, OOVs included: for a file, the perplexity nplm-score prints for it;
    sentences are scored as score() scores them."""
    scored = self.score(text, stream=stream, mix=mix, independent_lines=independent_lines)
    if not any(s.words and s.words != [data_lib.EOS] for s in scored):
      raise UserError('text holds no words; give non-empty text')
    nll = np.concatenate([s.nll for s in scored])
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

  @_in_api_words
  def next_word_log_probs(self, contexts: str | Sequence[str], dtype=np.float64) -> np.ndarray:
    """log P(w | context) for every word of the vocabulary, exactly normalised: [|V|] for one context,
    [len(contexts), |V|] for a list (an empty list gives [0, |V|]). Computed in batches of the evaluation's
    size (one compiled shape whatever the count), returned as `dtype` (float64 by default; float32 halves
    the host memory of many contexts). A context is text tokenised as a prompt (no <eos> added); the tokens
    before its start are boundary symbols, its words outside the vocabulary the rare-word symbol. Columns
    follow lm.vocabulary."""
    single = isinstance(contexts, str)
    if not single and _is_file(contexts):
      raise UserError('contexts is a file; give a string or a list of strings')
    dtype = np.dtype(dtype)
    if dtype.kind != 'f':
      raise UserError(f'dtype={dtype} is not a floating-point type; give np.float32 or np.float64')
    batch = self._context_ids([contexts] if single else _lines(contexts, 'contexts'))
    out = self.trained.next_word_log_probs(batch, dtype)
    return out[0] if single else out

  @_in_api_words
  def next_words(self, context: str, topn: int = 10) -> list[tuple[str, float]]:
    """The `topn` most likely next words after `context`, with their probabilities, most likely first."""
    if not isinstance(context, str):
      raise UserError(f'context is {a_kind(context)}; give the text the next word follows, as a string')
    topn = _whole_number(topn, 'topn')
    if topn < 1:
      raise UserError(f'topn={topn} is invalid; list at least 1 word')
    log_probs = self.next_word_log_probs(context)
    best = np.argsort(-log_probs, kind='stable')[:topn]
    return [(self.vocabulary[i], float(np.exp(log_probs[i]))) for i in best]

  # --------------------------------------------------------------------------------- sampling

  @_in_api_words
  def generate(self, prompt: str = '', num_tokens: int = 50, temperature: float = 1.0, top_k: int = 0,
               top_p: float = 1.0, seed: int = 0, allow_unk: bool = False, stop_at_eos: bool | None = None,
               progress: Progress | None = None) -> Iterator[str]:
    """The words drawn after `prompt`, one at a time as each is drawn (nplm-sample's sample 0 for the
    same arguments): temperature (0 = the most probable word), top_k (0 = all) and top_p (1 = all)
    reshape each distribution; stop_at_eos (None: when lines end with <eos>) ends at the first <eos>;
    the rare-word and boundary symbols are never drawn unless allow_unk."""
    num_tokens, temperature, top_k, top_p, _, seed, allow_unk, stop_at_eos = _sample_arguments(
        prompt, num_tokens, temperature, top_k, top_p, 1, seed, allow_unk, stop_at_eos)
    return sample_lib.stream_words(self.trained, prompt, num_tokens, temperature, top_k, top_p, seed, allow_unk,
                                   stop_at_eos, progress)

  @_in_api_words
  def sample(self, prompt: str = '', num_tokens: int = 50, temperature: float = 1.0, top_k: int = 0,
             top_p: float = 1.0, seed: int = 0, allow_unk: bool = False, stop_at_eos: bool | None = None) -> str:
    """The prompt and its continuation as one string: the line nplm-sample prints."""
    words = list(self.generate(prompt, num_tokens, temperature, top_k, top_p, seed, allow_unk, stop_at_eos))
    return self.detokenize(self.trained.prompt_tokens(prompt) + words)

  @_in_api_words
  def samples(self, prompt: str = '', num_samples: int = 1, num_tokens: int = 50, temperature: float = 1.0,
              top_k: int = 0, top_p: float = 1.0, seed: int = 0, allow_unk: bool = False,
              stop_at_eos: bool | None = None, progress: Progress | None = None) -> Iterator[str]:
    """`num_samples` lines as sample() makes them, drawn together in batches; sample i depends on (seed, i)
    alone, so samples(...)'s first is sample(...) for the same seed."""
    num_tokens, temperature, top_k, top_p, num_samples, seed, allow_unk, stop_at_eos = _sample_arguments(
        prompt, num_tokens, temperature, top_k, top_p, num_samples, seed, allow_unk, stop_at_eos)
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

  @_in_api_words
  def oov_vectors(self, text: str | Sequence[str]) -> dict[str, np.ndarray]:
    """Feature vectors [m] for the words of `text` outside the vocabulary, by the paper's recipe (section 5):
    C(j) = sum_i C(i) P(i | context), averaged over j's occurrences in the text; in first-appearance order.
    nplm-extend adds the same vectors to a new workdir."""
    words, _, features, _ = extend_lib.unknown_word_rows(self.trained, _lines(text), with_columns=False)
    return {w: np.asarray(row, np.float32) for w, row in zip(words, features if words else [])}



def _sample_arguments(prompt, num_tokens, temperature, top_k, top_p, num_samples, seed, allow_unk, stop_at_eos):
  """The sampling arguments checked by type (an int as an int, True or False as a bool) and then by value, as
  nplm-sample checks its flags: here, not at the first word drawn."""
  if not isinstance(prompt, str):
    raise UserError(f'prompt is {a_kind(prompt)}; give the text to continue, as a string')
  checked = (_whole_number(num_tokens, 'num_tokens'), _real_number(temperature, 'temperature'),
             _whole_number(top_k, 'top_k'), _real_number(top_p, 'top_p'), _whole_number(num_samples, 'num_samples'),
             _whole_number(seed, 'seed'), _flag(allow_unk, 'allow_unk'),
             None if stop_at_eos is None else _flag(stop_at_eos, 'stop_at_eos'))
  sample_lib.check_settings(*checked[:6])
  return checked


class KenlmView:
  """A loaded model with kenlm.Model's calls and units, for code written against kenlm: log10 probabilities,
  a sentence a string of space-separated words. bos=True starts a sentence's context at boundary symbols, as
  kenlm's <s> does (the network has no other start, so bos=False is the same); eos=True scores the end of the
  sentence, </s> (the corpus's <eos>: only models of text and PTB corpora have one; Brown's word stream has
  none, and its sentences are scored without)."""

  def __init__(self, lm: LanguageModel):
    self._lm = lm

  @property
  def order(self) -> int:
    return self._lm.order

  def __contains__(self, word) -> bool:
    return word in self._lm

  def _scored(self, sentence: str, bos: bool, eos: bool) -> Scored:
    if not isinstance(sentence, str):
      raise UserError(f'sentence is {a_kind(sentence)}; give one sentence as a string')
    _flag(bos, 'bos')
    scored = self._lm.score([sentence.replace('\n', ' ')], stream=False)[0]
    if not _flag(eos, 'eos') and scored.words and scored.words[-1] == data_lib.EOS:
      scored = Scored(scored.words[:-1], scored.ids[:-1], scored.oov[:-1], scored.nll[:-1])
    return scored

  def score(self, sentence: str, bos: bool = True, eos: bool = True) -> float:
    """log10 P(sentence), as kenlm.Model.score."""
    return score_lib.log_prob(self._scored(sentence, bos, eos).nll, '10')

  def full_scores(self, sentence: str, bos: bool = True, eos: bool = True) -> Iterator[tuple[float, int, bool]]:
    """(log10 P, n-gram length, OOV) per word, </s> included with eos, as kenlm.Model.full_scores; the n-gram
    length is the model's order (every word is predicted from context_size words)."""
    scored = self._scored(sentence, bos, eos)
    return ((float(-nll / math.log(10)), self.order, bool(oov)) for nll, oov in zip(scored.nll, scored.oov))

  def perplexity(self, sentence: str) -> float:
    """10 ** (-log10 P / words), </s> counted, as kenlm.Model.perplexity."""
    scored = self._scored(sentence, True, True)
    if not len(scored):
      raise UserError('sentence holds no words; give a non-empty sentence')
    return 10.0 ** (-score_lib.log_prob(scored.nll, '10') / len(scored))
