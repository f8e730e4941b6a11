"""What makes a workdir a model that stands alone: its vocabulary and how text becomes its tokens.

Training writes, before its first step:
- WORKDIR/vocab.tsv: a word and its count among the training tokens a line; line i is id i (the
  layout of a prepared corpus's vocab.txt and, but for the ids, of fairseq's dict.txt);
- WORKDIR/tokenizer.json: how a line of text becomes tokens (TOKENIZER_KEYS below).

score, sample, embeddings, extend and plot read these and never the corpus, so a workdir copied to
another machine, or kept after its corpus moved, still serves. A workdir written before these
files existed gets them from its corpus, read once (with a note), on its first use by a tool.
"""

import dataclasses

import numpy as np

from nplm_jax.data import corpora as data_lib
from nplm_jax.files import metrics as metrics_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import UserError

VOCAB_FILE = 'vocab.tsv'
TOKENIZER_FILE = 'tokenizer.json'
FORMAT_VERSION = 1
# Written by nplm_jax.tools.extend: {'words': [...]} appended to the corpus's vocabulary, in id order.
# A workdir with vocab.tsv holds them there too; this file stays as the record of what was added.
ADDED_WORDS_FILE = 'added_words.json'
BYTE_ORDER_MARK = '\ufeff'


@dataclasses.dataclass(frozen=True)
class Tokenizer:
  """How text becomes a model's tokens."""
  corpus: str  # the kind of corpus trained on: 'brown', 'ptb' or 'text' (a prepared corpus: its source's)
  unit: str | None  # None: a plain stream of words (Brown); 'word' or 'char': each line ends with <eos>
  boundary: str  # the symbol that fills the contexts of a text's first tokens
  rare_word: str | None  # the symbol words outside the vocabulary are read as (None: the corpus had none)
  max_rare_count: int  # training words seen this often or less became rare_word
  vocab_scope: str  # where those counts were taken: 'corpus' or 'train'
  blank_lines: str = 'skip'  # 'eos' or 'skip' (data.blank_lines; tokenizer.json written before it: 'skip')

  @property
  def end_of_line(self) -> str | None:
    return None if self.unit is None else data_lib.EOS

  def line_tokens(self, line: str) -> list[str]:
    """A line's tokens as the corpus reader made them (data.line_tokens for text and PTB)."""
    return line.split() if self.unit is None else data_lib.line_tokens(line, self.unit, self.blank_lines)

  def to_json(self) -> dict:
    return {'format_version': FORMAT_VERSION, **dataclasses.asdict(self), 'end_of_line': self.end_of_line,
            'space': data_lib.SPACE if self.unit == 'char' else None}

  @classmethod
  def from_json(cls, value: dict) -> 'Tokenizer':
    return cls(**{f.name: value[f.name] for f in dataclasses.fields(cls) if f.name in value})

  @classmethod
  def for_corpus(cls, data_config, corpus: data_lib.Corpus) -> 'Tokenizer':
    source = data_lib.prepared_source(data_config.path) if data_config.corpus == 'prepared' else data_config.to_dict()
    unit = data_lib.text_unit(data_config)
    return cls(corpus=source['corpus'], unit=unit, boundary=corpus.vocab[corpus.boundary_id],
               rare_word=data_lib.RARE if data_lib.RARE in corpus.vocab else None,
               max_rare_count=int(source.get('max_rare_count', 0) if source['corpus'] != 'ptb' else 0),
               vocab_scope=source.get('vocab_scope', 'corpus'), blank_lines=source.get('blank_lines', 'skip'))


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """A trained model's words (id = position), their training counts, and its tokenizer."""
  words: tuple[str, ...]
  train_counts: np.ndarray  # int64 [len(words)]
  tokenizer: Tokenizer

  @property
  def boundary_id(self) -> int:
    return self.words.index(self.tokenizer.boundary)

  def as_corpus(self) -> data_lib.Corpus:
    """A corpus of this vocabulary and no tokens: what evaluation-only experiments need."""
    empty = {s: np.zeros(0, np.int32) for s in data_lib.SPLITS}
    return data_lib.Corpus(self.words, empty, self.boundary_id, stored_train_counts=self.train_counts)

  def extended(self, new_words: list[str]) -> 'Vocabulary':
    """With words appended (nplm_jax.tools.extend): never seen in training, so counted 0."""
    counts = np.concatenate([self.train_counts, np.zeros(len(new_words), np.int64)])
    return dataclasses.replace(self, words=self.words + tuple(new_words), train_counts=counts)

  def write(self, workdir: workdir_lib.Workdir) -> None:
    """vocab.tsv, then tokenizer.json (its presence says the pair is complete), on the leader."""
    if any(not w or any(c in w for c in '\t\n\r') for w in self.words):
      raise UserError('a vocabulary word is empty or holds a tab or a line break; such words cannot be stored in '
                      f'{VOCAB_FILE}: clean the corpus')
    workdir.write_text(VOCAB_FILE, ''.join(f'{w}\t{int(c)}\n' for w, c in zip(self.words, self.train_counts)))
    workdir.write_json(TOKENIZER_FILE, {**self.tokenizer.to_json(), 'vocab_size': len(self.words)})

  @classmethod
  def read(cls, workdir: workdir_lib.Workdir) -> 'Vocabulary | None':
    """The stored vocabulary, or None when the workdir predates it; one line for a damaged one."""
    tokenizer = workdir.read_json(TOKENIZER_FILE)
    if tokenizer is None:
      return None
    workdir.check_files((VOCAB_FILE, TOKENIZER_FILE))  # two lines swapped still parse: the digest sees them
    path = workdir.file(VOCAB_FILE)
    try:
      rows = [line.split('\t') for line in path.read_text().splitlines()]
      words, counts = tuple(r[0] for r in rows), np.array([int(r[1]) for r in rows], np.int64)
      vocabulary = cls(words, counts, Tokenizer.from_json(tokenizer))
      ok = len(words) == tokenizer.get('vocab_size') and tokenizer['boundary'] in words
    except (OSError, ValueError, KeyError, IndexError, TypeError):
      ok = False
    if not ok:
      raise UserError(f'{str(path)!r} or {TOKENIZER_FILE} beside it is damaged; restore them from a copy of the workdir')
    return vocabulary.without_byte_order_marks()

  def without_byte_order_marks(self) -> 'Vocabulary':
    """A vocabulary trained before text was read as 'utf-8-sig' may hold its training file's first word with the
    file's byte-order mark ('\ufeffThe'), which text read now never gives: that entry becomes the word without
    it where the vocabulary lacks that word, and is left, unreachable, where it has it (both said once)."""
    marked = [i for i, w in enumerate(self.words) if w.startswith(BYTE_ORDER_MARK)]
    if not marked:
      return self
    words = list(self.words)
    for i in marked:
      bare = words[i].lstrip(BYTE_ORDER_MARK)
      if bare and bare not in self.words:
        words[i] = bare
        metrics_lib.note(f'vocabulary word {i} is {bare!r} with the byte-order mark its training file began with; '
                         f'it is read as {bare!r}')
      else:
        metrics_lib.note(f'vocabulary word {i} is {bare!r} with the byte-order mark its training file began with, '
                         f'and {bare!r} is a word of its own: text gives that one, never the marked entry')
    return dataclasses.replace(self, words=tuple(words))

  @classmethod
  def from_corpus(cls, data_config, corpus: data_lib.Corpus, train_counts: np.ndarray) -> 'Vocabulary':
    return cls(corpus.vocab, np.asarray(train_counts, np.int64), Tokenizer.for_corpus(data_config, corpus))


def load(workdir: workdir_lib.Workdir, config) -> Vocabulary:
  """A workdir's vocabulary; an older workdir's is made from its corpus once and stored."""
  stored = Vocabulary.read(workdir)
  if stored is not None:
    return stored
  metrics_lib.note(f'{workdir} predates stored vocabularies: reading its corpus once to write {VOCAB_FILE} and '
                   f'{TOKENIZER_FILE}; later uses will not need the corpus')
  corpus = data_lib.load_corpus(config.data)
  vocabulary = Vocabulary.from_corpus(config.data, corpus, corpus.unigram_counts('train'))
  added = workdir.read_json(ADDED_WORDS_FILE)
  if added:
    vocabulary = vocabulary.extended(added['words'])
  try:
    vocabulary.write(workdir)
  except (OSError, UserError) as e:  # a read-only copy still serves, reading its corpus each time
    metrics_lib.note(f'could not store the vocabulary in {workdir} ({e}); the corpus will be read again next time')
  return vocabulary

