"""Corpora, vocabularies and the continuous token stream the model reads.

Every corpus becomes one token stream (train, then valid, then test, as in the paper: sentences
are not isolated). A token at stream position t is predicted from the n-1 tokens before it, so
the first tokens of valid and test take their context from the end of the split before them.
The stream is preceded by n-1 copies of a boundary symbol (`<eos>` where the corpus has
end-of-line tokens, else the rare-word symbol), which gives the corpus's very first tokens a
context. Every token of a split is predicted exactly once when that split is evaluated.
"""

import collections
import contextlib
import dataclasses
import hashlib
import io
import os
import re
import sys
import threading
from typing import Iterator, Sequence

import numpy as np

from nplm_jax.errors import UserError
from nplm_jax.progress import StderrProgress

RARE = '<unk>'
EOS = '<eos>'
SPLITS = ('train', 'valid', 'test')


PIECE_TOKENS = 1 << 22  # whole-split passes go a piece at a time: a memory-mapped split is never copied whole


def _pieces(ids: np.ndarray):
  for begin in range(0, len(ids), PIECE_TOKENS):
    yield ids[begin:begin + PIECE_TOKENS]


class DataError(UserError):
  """A corpus cannot be read; the message says what is wrong and how to fix it."""


@dataclasses.dataclass(frozen=True)
class Corpus:
  """Integer token ids for the three splits over one vocabulary."""
  vocab: tuple[str, ...]
  splits: dict[str, np.ndarray]  # split name -> ids (int32, or uint32 memory-mapped from a prepared corpus)
  boundary_id: int  # fills the context before the first token of the stream
  # A prepared corpus's stored train counts and fingerprint (nplm_jax.data.prepare computed them from
  # these ids), so that start-up need not read a memory-mapped split whole; None: computed.
  stored_train_counts: np.ndarray | None = None
  stored_fingerprint: str | None = None

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  def num_tokens(self, split: str) -> int:
    return int(self.splits[split].shape[0])

  def rare_rate(self, split: str) -> float:
    """Fraction of a split's tokens that are the rare-word / unknown symbol."""
    if RARE not in self.vocab:
      return 0.0
    size = self.num_tokens(split)
    return float(self.unigram_counts(split)[self.vocab.index(RARE)]) / size if size else 0.0

  def unigram_counts(self, split: str = 'train') -> np.ndarray:
    if split == 'train' and self.stored_train_counts is not None:
      return self.stored_train_counts.copy()
    counts = np.zeros(self.vocab_size, np.int64)
    for piece in _pieces(self.splits[split]):  # bincount copies its input as int64: a piece at a time
      counts += np.bincount(piece, minlength=self.vocab_size)
    return counts

  def fingerprint(self) -> str:
    """A hash of the vocabulary and every split's token ids: equal iff the model sees the same data
    (the same for a corpus read directly and its prepared, memory-mapped copy)."""
    if self.stored_fingerprint:
      return self.stored_fingerprint
    digest = hashlib.sha256('\n'.join(self.vocab).encode('utf-8'))
    for s in SPLITS:
      for piece in _pieces(self.splits[s]):
        digest.update(np.ascontiguousarray(piece, np.int32).tobytes())
    return digest.hexdigest()

  def description(self) -> dict:
    """What a workdir records of its corpus (corpus.json), to refuse resuming on another."""
    return {'fingerprint': self.fingerprint(), 'vocab_size': self.vocab_size,
            **{f'{s}_tokens': self.num_tokens(s) for s in SPLITS}}

  def summary(self) -> str:
    parts = [f'|V|={self.vocab_size}']
    for s in SPLITS:
      parts.append(f'{s}={self.num_tokens(s)} tokens (rare {100 * self.rare_rate(s):.2f}%)')
    return ', '.join(parts)


def build_vocab(counted: Sequence[str], max_rare_count: int, first: Sequence[str] = (RARE,)) -> tuple[str, ...]:
  """`first`, then the words seen more than `max_rare_count` times in `counted`.

  Frequent words come by decreasing count (ties by first appearance), so ids are deterministic.
  """
  return vocab_from_counts(collections.Counter(counted), max_rare_count, first)


def vocab_from_counts(counts: collections.Counter, max_rare_count: int, first: Sequence[str] = (RARE,)) -> tuple[str, ...]:
  """build_vocab from counts made in order of first appearance (Counter.update line by line)."""
  frequent = [w for w, c in counts.most_common() if c > max_rare_count and w not in first]
  return (*first, *frequent)


def to_ids(words: Sequence[str], vocab: Sequence[str]) -> np.ndarray:
  index = {w: i for i, w in enumerate(vocab)}
  rare = index.get(RARE)  # every caller's vocabulary has it when some word is out of vocabulary
  return np.fromiter((index.get(w, rare) for w in words), dtype=np.int32, count=len(words))


def load_brown_words() -> list[str]:
  """The tokens of the Brown corpus in file order, through NLTK (honours NLTK_DATA).

  NLTK's reader parses the tagged files (6 s on a 2-core CPU, 20 s with a cold start); the words
  are kept in a cache file beside the user's other caches, keyed by the zip's path, size and time,
  and read from there (0.3 s) as long as the zip is unchanged.
  """
  import nltk  # pylint: disable=g-import-not-at-top
  try:
    found = nltk.data.find('corpora/brown.zip')
    cache = _brown_cache_path(str(getattr(found, 'path', found)))
    if cache and os.path.isfile(cache):
      with open(cache, encoding='utf-8') as f:
        return f.read().split('\n')
  except LookupError:
    try:
      with contextlib.redirect_stdout(io.StringIO()):
        ok = nltk.download('brown', quiet=True, raise_on_error=True, print_error_to=io.StringIO())
    except Exception:  # pylint: disable=broad-except  # offline: any network error
      ok = False
    if not ok:
      raise DataError(brown_not_found_message()) from None
    cache = None
  from nltk.corpus import brown  # pylint: disable=g-import-not-at-top
  words = list(brown.words())
  if cache:
    _write_cache(cache, words)
  return words


def _cache_folder() -> str:
  return os.environ.get('NPLM_CACHE_DIR') or os.path.join(os.path.expanduser('~'), '.cache', 'nplm_jax')


def _brown_cache_path(zip_path: str) -> str | None:
  """NPLM_CACHE_DIR (default ~/.cache/nplm_jax)/brown-<hash of the zip's path, size, mtime>.txt."""
  try:
    stat = os.stat(zip_path)
  except OSError:
    return None
  key = hashlib.sha256(f'{os.path.abspath(zip_path)}:{stat.st_size}:{stat.st_mtime_ns}'.encode()).hexdigest()[:16]
  return os.path.join(_cache_folder(), f'brown-{key}.txt')


def cached_brown_words() -> tuple[list[str], str] | None:
  """(words, cache file) of the newest Brown cache, for a tool that needs the corpus where NLTK finds
  none (its caller checks the words against the workdir's corpus fingerprint); None without one."""
  import glob  # pylint: disable=g-import-not-at-top
  caches = sorted(glob.glob(os.path.join(_cache_folder(), 'brown-*.txt')), key=os.path.getmtime)
  if not caches:
    return None
  with open(caches[-1], encoding='utf-8') as f:
    return f.read().split('\n'), caches[-1]


def brown_not_found_message() -> str:
  """Why NLTK finds no Brown corpus, as one line: NLTK_DATA names no folder, or a folder without the zip."""
  fetch = '`python -m nltk.downloader -d DIR brown` fetches it into DIR'
  folders = [f for f in os.environ.get('NLTK_DATA', '').split(os.pathsep) if f]
  missing = [f for f in folders if not os.path.isdir(f)]
  if missing:
    return f'NLTK_DATA={missing[0]!r} names no folder; set it to the folder holding corpora/brown.zip ({fetch})'
  if folders:
    return (f"NLTK_DATA={os.environ['NLTK_DATA']!r} holds no corpora/brown.zip and it could not be downloaded; "
            f'{fetch}, or point NLTK_DATA at the folder that holds it')
  return (f'the NLTK Brown corpus was not found and could not be downloaded; {fetch} and set NLTK_DATA=DIR, or '
          'set NLTK_DATA to a folder holding corpora/brown.zip')


def brown_zip_found() -> bool:
  import nltk  # pylint: disable=g-import-not-at-top
  try:
    nltk.data.find('corpora/brown.zip')
    return True
  except LookupError:
    return False


def _write_cache(path: str, words: list[str]) -> None:
  """Writes the words one a line, atomically; a cache that cannot be written is simply not kept."""
  if any('\n' in w for w in words):
    return
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f'{path}.tmp{os.getpid()}'
    with open(temporary, 'w', encoding='utf-8') as f:
      f.write('\n'.join(words))
    os.replace(temporary, path)
  except OSError:
    pass


def brown_corpus(train_tokens: int = 800_000, valid_tokens: int = 200_000,
                 max_rare_count: int = 3, vocab_scope: str = 'corpus', words: list[str] | None = None) -> Corpus:
  """Bengio et al.'s protocol: corpus order, case kept, first 800k train, next 200k valid. `words`:
  Brown's tokens when the caller has them (else read through NLTK)."""
  words = load_brown_words() if words is None else words
  if train_tokens + valid_tokens >= len(words):
    raise DataError(f'data.train_tokens + data.valid_tokens = {train_tokens + valid_tokens} leaves '
                    f'no test tokens in Brown ({len(words)} tokens); lower them')
  cut = {'train': (0, train_tokens), 'valid': (train_tokens, train_tokens + valid_tokens),
         'test': (train_tokens + valid_tokens, len(words))}
  split_words = {s: words[a:b] for s, (a, b) in cut.items()}
  counted = _scope_words(vocab_scope, words, split_words['train'])
  vocab = build_vocab(counted, max_rare_count)
  return Corpus(vocab, {s: to_ids(w, vocab) for s, w in split_words.items()}, boundary_id=0)


def _scope_words(scope: str, corpus_words: Sequence[str], train_words: Sequence[str]):
  if scope == 'corpus':
    return corpus_words
  if scope == 'train':
    return train_words
  raise DataError(f"data.vocab_scope={scope!r} is unknown; use 'corpus' or 'train'")


SPACE = '_'  # a space, as a character-level token (Mikolov's character-level PTB writes it so)


# How a blank line is read (data.blank_lines): 'eos', one end-of-line token as after any other line
# (the field's word-level protocol: the WikiText data, the AWD-LSTM and fairseq readers), or 'skip', no
# token (how nplm_jax read text before it had this setting; workdirs and prepared corpora made then
# keep it).
BLANK_LINES = ('eos', 'skip')


def line_tokens(line: str, unit: str = 'word', blank_lines: str = 'eos') -> list[str]:
  """A line's tokens: its whitespace-separated words, or (unit 'char') its characters with single
  spaces as SPACE, then an end-of-line token; a blank line is that token alone, or nothing when
  blank_lines is 'skip'. Training, scoring and the n-gram models all tokenise through here."""
  words = line.split()
  if not words:
    return [EOS] if blank_lines == 'eos' else []
  tokens = words if unit == 'word' else list(SPACE.join(words))
  return tokens + [EOS]


# Control characters no text corpus holds (tab, newline, vertical tab, form feed and carriage return
# are whitespace): a binary file, or text in another encoding (UTF-16 without a byte-order mark reads
# as UTF-8 with a NUL after every ASCII character).
_CONTROL = re.compile('[\x00-\x08\x0e-\x1f\x7f]')


# The first bytes of common binary files, and what they are.
_BINARY_MAGIC = ((b'\x89PNG', 'a PNG image'), (b'\x7fELF', 'an ELF executable'), (b'%PDF', 'a PDF document'),
                 (b'PK\x03\x04', 'a zip archive'), (b'\x1f\x8b', 'a gzip archive'), (b'GIF8', 'a GIF image'),
                 (b'\xff\xd8\xff', 'a JPEG image'), (b'\x93NUMPY', 'a NumPy array'))
HEAD_BYTES = 4096  # what encoding_hint reads of a file


def encoding_hint(head: bytes) -> str:
  """How to fix a text that is not UTF-8 text, from its first bytes: a binary file (named where its first
  bytes say what it is), UTF-16 without a byte-order mark (a NUL beside every ASCII character), or else an
  8-bit encoding such as Latin-1."""
  for magic, kind in _BINARY_MAGIC:
    if head.startswith(magic):
      return f'it is {kind}, not text; give a UTF-8 text file'
  if head.startswith((b'\xff\xfe', b'\xfe\xff')):  # a byte-order mark
    return 'UTF-16 text; convert it, e.g. iconv -f utf-16 -t utf-8'
  pairs = len(head) // 2
  if pairs:
    nul_second, nul_first = head[1:2 * pairs:2].count(0) / pairs, head[0:2 * pairs:2].count(0) / pairs
    for share, other, order in ((nul_second, nul_first, 'le'), (nul_first, nul_second, 'be')):
      if share > 0.3 and other < 0.05:
        return f'UTF-16 text without a byte-order mark; convert it, e.g. iconv -f utf-16{order} -t utf-8'
  controls = sum(b < 9 or 13 < b < 32 or b == 127 for b in head)
  if head and (controls / len(head) > 0.05 or b'\x00' in head):
    return 'binary data, not text; give a UTF-8 text file'
  return 'an 8-bit encoding such as Latin-1? convert it, e.g. iconv -f latin1 -t utf-8'


def file_head(path: str) -> bytes:
  try:
    with open(path, 'rb') as f:
      return f.read(HEAD_BYTES)
  except OSError:
    return b''


def check_text_line(line: str, path: str, number: int, source: str = '', head: bytes | None = None) -> None:
  """One line of error for a line holding a control character (line numbers from 1), naming the text as
  `source` (default: corpus file 'PATH'), with a hint from its first bytes (`head`, else read from `path`)."""
  found = _CONTROL.search(line)
  if found is None:
    return
  code = ord(found.group())
  hint = encoding_hint(file_head(path) if head is None else head)
  raise DataError(f'{source or f"corpus file {path!r}"} holds control character U+{code:04X} on line {number} '
                  f'({hint})')


def not_utf8_error(error: UnicodeDecodeError, path: str, source: str = '', head: bytes | None = None) -> DataError:
  """The one line for a text that does not decode as UTF-8 (named as check_text_line names it), with a
  hint from its first bytes."""
  hint = encoding_hint(file_head(path) if head is None else head)
  return DataError(f'{source or f"corpus file {path!r}"} is not UTF-8 text (byte 0x{error.object[error.start]:02x} '
                   f'at offset {error.start}): {hint}')


PROGRESS_LINES = 1024  # lines read between progress checks (a check a line cost 14% of counting PTB)


def stream_lines(path: str, what: str = 'read') -> Iterator[str]:
  """A text file's lines (universal newlines), each checked (check_text_line), with a progress line
  on stderr while reading takes long (bytes read, the rate, the time left): training, prepare and the
  n-gram tools read every text corpus through here."""
  check_text_file(path)
  total = os.path.getsize(path)
  progress = StderrProgress(f'bytes of {os.path.basename(path)} {what}')
  with open(path, encoding='utf-8-sig') as f:  # a byte-order mark at the start is not a word
    try:
      for i, line in enumerate(f):
        if not i % PROGRESS_LINES:
          progress(f.buffer.tell(), total)  # the bytes read ahead of the decoder: within a chunk
        check_text_line(line, path, i + 1)
        yield line
    except UnicodeDecodeError as e:
      raise not_utf8_error(e, path) from None


def read_lines_with_eos(path: str, unit: str = 'word', blank_lines: str = 'eos') -> list[str]:
  """The tokens of a text file (line_tokens of each line)."""
  words = []
  for line in stream_lines(path):
    words.extend(line_tokens(line, unit, blank_lines))
  if all(w == EOS for w in words):
    raise DataError(f'corpus file {path!r} holds no tokens; give a non-empty text file')
  return words


def check_text_file(path: str) -> None:
  if os.path.isdir(path):
    raise DataError(f'corpus file {path!r} is a folder; give a text file')
  if not os.path.isfile(path):
    raise DataError(f'corpus file {path!r} does not exist; point the config at an existing file')


def text_corpus(files: dict[str, str], max_rare_count: int = 0, vocab_scope: str = 'train', unit: str = 'word',
                blank_lines: str = 'eos') -> Corpus:
  """A whitespace-tokenised corpus, one sentence or paragraph a line (PTB's format)."""
  split_words = {s: read_lines_with_eos(files[s], unit, blank_lines) for s in SPLITS}
  vocab = text_vocab({s: collections.Counter(split_words[s]) for s in SPLITS}, max_rare_count, vocab_scope)
  ids = {s: to_ids(split_words[s], vocab) for s in SPLITS}
  return Corpus(vocab, ids, boundary_id=vocab.index(EOS))


def text_vocab(counts: dict[str, collections.Counter], max_rare_count: int, vocab_scope: str) -> tuple[str, ...]:
  """The vocabulary of a text corpus from each split's word counts (in order of first appearance):
  <eos>, then the words of the scope seen more than `max_rare_count` times. With `max_rare_count`
  = 0 every counted word is kept (PTB already maps rare words to `<unk>`, which is then an
  ordinary word). The rare-word symbol joins the vocabulary only when some token falls outside it.
  """
  if vocab_scope == 'corpus':
    counted = counts['train'] + counts['valid'] + counts['test']  # keeps the order of first appearance
  else:
    counted = _scope_words(vocab_scope, None, counts['train'])  # 'train', or one line of error
  vocab = vocab_from_counts(counted, max_rare_count, first=(EOS,))
  known = set(vocab)
  if RARE not in known and any(w not in known for s in SPLITS for w in counts[s]):
    vocab = (RARE, *vocab)
  return vocab


def ptb_files(path: str) -> dict[str, str]:
  if not path or not os.path.isdir(path):
    hint = (f' (PTB_DIR is {os.environ["PTB_DIR"]!r})' if os.environ.get('PTB_DIR') else
            ', or set PTB_DIR to it (experiments/ptb.py reads it)')
    raise DataError(f'data.path={path!r} is not a folder; set --config.data.path to the folder holding '
                    f'ptb.train.txt, ptb.valid.txt and ptb.test.txt{hint}')
  return {s: os.path.join(path, f'ptb.{s}.txt') for s in SPLITS}


def ptb_corpus(path: str, unit: str = 'word', blank_lines: str = 'eos') -> Corpus:
  return text_corpus(ptb_files(path), unit=unit, blank_lines=blank_lines)  # Mikolov's files have no blank line


def split_files(data_config) -> dict[str, str]:
  """The text files of a ptb or text config's three splits (one line of error when they are not given)."""
  if data_config.corpus == 'ptb':
    return ptb_files(data_config.path)
  files = {s: data_config.get(f'{s}_file') for s in SPLITS}
  missing = [f'data.{s}_file' for s, f in files.items() if not f]
  if missing:
    raise DataError(f'{", ".join(missing)} not set; give --config.data.train_file=... etc.')
  return files


def check_corpus_files(data_config) -> None:
  """The text files a ptb or text config names exist and are files (one line of error otherwise): what a
  command checks before its heavy imports, so that a misspelt path is answered at once."""
  if data_config.corpus in ('ptb', 'text'):
    for path in split_files(data_config).values():
      check_text_file(path)


def load_corpus(data_config) -> Corpus:
  """The corpus a config's `data` section names (its training split cut to data.train_limit tokens)."""
  return limit_train(_whole_corpus(data_config), data_config.get('train_limit', 0))


def limit_train(corpus: Corpus, limit: int) -> Corpus:
  """The corpus with only the first `limit` tokens of its training split (0: unchanged). The vocabulary
  and the other splits are kept, so that figures compare across limits; a prepared corpus's stored
  train counts and fingerprint describe the whole split, so they are computed again."""
  if not limit:
    return corpus
  whole = corpus.num_tokens('train')
  if limit >= whole:
    raise DataError(f'data.train_limit={limit:,} is not below the training split\'s {whole:,} tokens; use 0 for the '
                    'whole split or a smaller limit')
  return dataclasses.replace(corpus, splits={**corpus.splits, 'train': corpus.splits['train'][:limit]},
                             stored_train_counts=None, stored_fingerprint=None)


def _whole_corpus(data_config) -> Corpus:
  name = data_config.corpus
  if name == 'brown':
    return brown_corpus(data_config.train_tokens, data_config.valid_tokens,
                        data_config.max_rare_count, data_config.vocab_scope)
  if name == 'ptb':
    return ptb_corpus(data_config.path, data_config.unit, data_config.blank_lines)
  if name == 'text':
    return text_corpus(split_files(data_config), data_config.max_rare_count, data_config.vocab_scope,
                       data_config.unit, data_config.blank_lines)
  if name == 'prepared':
    return prepared_corpus(data_config.path)
  raise DataError(f"data.corpus={name!r} is unknown; use 'brown', 'ptb', 'text' or 'prepared'")


# A prepared corpus (python -m nplm_jax.data.prepare): DIR/vocab.txt, DIR/{train,valid,test}.npy, DIR/meta.json.
PREPARED_META = 'meta.json'


def prepared_corpus(path: str) -> Corpus:
  """A corpus written by nplm_jax.data.prepare, its token ids memory-mapped (read as they are used)."""
  import json  # pylint: disable=g-import-not-at-top
  meta_path = os.path.join(path or '', PREPARED_META)
  if not path or not os.path.isfile(meta_path):
    raise DataError(f'data.path={path!r} holds no prepared corpus ({PREPARED_META}); make one with python -m '
                    'nplm_jax.data.prepare --config=CONFIG --output=DIR')
  try:
    with open(meta_path, encoding='utf-8') as f:
      meta = json.load(f)
    with open(os.path.join(path, 'vocab.txt'), encoding='utf-8') as f:
      rows = [line.rstrip('\n').split('\t') for line in f]
    vocab = tuple(row[0] for row in rows)
    if len(set(vocab)) != len(vocab):
      twice = next(w for w, n in collections.Counter(vocab).items() if n > 1)
      raise DataError(f'the prepared corpus in {path!r} lists {twice!r} twice in vocab.txt (each word must have one '
                      'id); prepare it again')
    splits = {s: np.load(os.path.join(path, f'{s}.npy'), mmap_mode='r') for s in SPLITS}
    # Folders prepared before meta.json held a fingerprint counted words, not ids: counted again here.
    stored = meta.get('fingerprint')
    counts = np.array([int(row[1]) for row in rows], np.int64) if stored else None
  except (OSError, ValueError, KeyError, IndexError) as e:
    raise DataError(f'the prepared corpus in {path!r} cannot be read ({e}); prepare it again') from None
  if len(vocab) != meta['vocab_size'] or any(len(splits[s]) != meta[f'{s}_tokens'] for s in SPLITS):
    raise DataError(f'the prepared corpus in {path!r} is incomplete (sizes differ from {PREPARED_META}); prepare it again')
  for s in SPLITS:  # a piece at a time: a memory-mapped split is never read whole into memory
    largest = max((int(piece.max()) for piece in _pieces(splits[s]) if len(piece)), default=-1)
    if largest >= len(vocab):
      raise DataError(f'the prepared corpus in {path!r} holds id {largest} in {s}.npy, beyond its {len(vocab)}-word '
                      'vocabulary; prepare it again')
  source = meta.get('source', {})
  if source.get('corpus') in ('text', 'ptb') and 'blank_lines' not in source:
    print(f'note: {path} was prepared before blank lines were read as <eos>: its blank lines have none '
          '(prepare it again for the current protocol, data.blank_lines)', file=sys.stderr, flush=True)
  return Corpus(vocab, splits, boundary_id=meta['boundary_id'], stored_train_counts=counts, stored_fingerprint=stored)


def prepared_source(path: str) -> dict:
  """The data config a prepared corpus was made from (its meta.json 'source')."""
  import json  # pylint: disable=g-import-not-at-top
  with open(os.path.join(path, PREPARED_META), encoding='utf-8') as f:
    return json.load(f)['source']


def text_unit(data_config) -> str | None:
  """How a line of text becomes tokens for this corpus: None for Brown (a plain word stream),
  else the unit ('word' or 'char') of line_tokens, which ends a line with <eos>."""
  source = prepared_source(data_config.path) if data_config.corpus == 'prepared' else data_config
  return None if source['corpus'] == 'brown' else source.get('unit', 'word')


class TokenStream:
  """The corpus as one stream, cut into (context, target) examples for any split."""

  def __init__(self, corpus: Corpus, context_size: int):
    self.context_size = context_size
    # Each split is read where it lies (memory-mapped ids stay on disk, no int32 copy of the corpus);
    # the context_size tokens before its start (the boundary symbol before train) are kept apart.
    self._splits = {s: corpus.splits[s] for s in SPLITS}
    self._before = {}
    tail = np.full(context_size, corpus.boundary_id, np.int32)
    for s in SPLITS:
      self._before[s] = tail
      tail = np.concatenate([tail, np.asarray(self._splits[s][-context_size:], np.int32)])[-context_size:]
    self._size = {s: corpus.num_tokens(s) for s in SPLITS}

  def num_examples(self, split: str) -> int:
    return self._size[split]

  def ids_with_context(self, split: str) -> np.ndarray:
    """The context_size tokens before a split, then the split's ids: [context_size + N] int32 (for
    device_data, which gathers the same examples from it on the devices)."""
    return np.concatenate([self._before[split], np.asarray(self._splits[split], np.int32)])

  def examples(self, split: str, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Contexts [B, n-1] (most recent word first: w_{t-1}, ..., w_{t-n+1}) and targets [B], int32."""
    tokens, before = self._splits[split], self._before[split]
    t = np.asarray(positions, np.int64)
    where = t[:, None] - np.arange(1, self.context_size + 1)[None, :]  # < 0: before the split
    contexts = np.where(where >= 0, tokens[np.maximum(where, 0)], before[np.minimum(where, -1) + self.context_size])
    return contexts.astype(np.int32, copy=False), np.asarray(tokens[t], np.int32)

  def train_order(self, seed: int, epoch: int) -> np.ndarray:
    """A permutation of the training positions that depends only on (seed, epoch)."""
    rng = np.random.default_rng([seed, epoch])
    # uint32 (half of int64's memory); numpy draws the same permutation for either type
    return rng.permutation(np.arange(self._size['train'], dtype=np.uint32))

  def eval_positions(self, split: str, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Fixed-size batches of positions covering every token of a split once (padded_positions)."""
    return padded_positions(self._size[split], batch_size)


def context_windows(tokens, t, context_size: int):
  """The n-1 tokens before each position t of `tokens` [B, n-1], most recent first (t >= n-1); NumPy
  arrays on the host, or jax arrays inside a jitted step (device_data)."""
  offsets = np.arange(1, context_size + 1)
  return tokens[t[:, None] - offsets[None, :]]


def padded_positions(n: int, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  """Fixed-size batches of positions 0..n-1, each once, with weights: 0 on the last batch's
  padding (which repeats the last position), so every batch compiles to one shape."""
  for begin in range(0, n, batch_size):
    positions = np.arange(begin, begin + batch_size)
    yield np.minimum(positions, n - 1), (positions < n).astype(np.float32)


class StepBatches:
  """The training batch of every global step: a pure function of (seed, step). Step s of epoch e
  takes positions [i b, (i + 1) b) of the epoch's permutation (TokenStream.train_order), of which
  this process reads only `rows`. Indexable (the training loop, and grain's read-ahead threads)."""

  def __init__(self, stream: TokenStream, seed: int, batch_size: int, steps_per_epoch: int,
               total_steps: int, rows: np.ndarray):
    self.stream, self.seed, self.batch_size = stream, seed, batch_size
    self.steps_per_epoch, self.total_steps, self.rows = steps_per_epoch, total_steps, rows
    self._orders, self._lock = {}, threading.Lock()

  def __len__(self) -> int:
    return self.total_steps

  def _order(self, epoch: int) -> np.ndarray:
    with self._lock:  # one permutation per epoch, made once, whichever thread asks first
      if epoch not in self._orders:
        self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}  # keep at most two
        self._orders[epoch] = self.stream.train_order(self.seed, epoch)
      return self._orders[epoch]

  def __getitem__(self, step: int) -> tuple[np.ndarray, np.ndarray]:
    epoch, index = divmod(int(step), self.steps_per_epoch)
    b = self.batch_size
    return self.stream.examples('train', self._order(epoch)[index * b:(index + 1) * b][self.rows])
