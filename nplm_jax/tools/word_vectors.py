"""A model's word feature vectors C, with gensim KeyedVectors' habits.

    vectors['king']                                   # [m] float32
    vectors.most_similar('king', topn=5)              # [(word, cosine), ...]
    vectors.most_similar(positive=['king', 'woman'], negative=['man'])
    vectors.similarity('Monday', 'Tuesday')
    vectors.save_word2vec_format('vectors.txt')      # gensim.models.KeyedVectors.load_word2vec_format reads it

Similarity is the cosine of two rows, computed for all words at once (one matmul, no loop over the
vocabulary). As in gensim, a query of several words is the sum of their unit vectors, those under
`negative` subtracted, and the words of the query are never among the answers.
"""

import os
from collections.abc import Sequence

import numpy as np

from nplm_jax.errors import UnknownWordError, UserError
from nplm_jax.files import workdir as workdir_lib


def unknown_word_message(word: str, vocab_size: int, corpus: str) -> str:
  return (f'{word!r} is not in the vocabulary ({vocab_size:,} words of the {corpus} corpus, case-sensitive); '
          'choose another word')


def unit_rows(vectors: np.ndarray) -> np.ndarray:
  norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
  return vectors / np.maximum(norms, 1e-12)


def nearest(vectors: np.ndarray, queries: np.ndarray, topn: int, exclude: list[list[int]]) -> list[list[tuple[int, float]]]:
  """For each query vector, the `topn` rows of `vectors` of highest cosine, minus the ids in `exclude`
  (fewer when fewer remain)."""
  cosines = unit_rows(queries) @ unit_rows(vectors).T  # [queries, |V|]
  out = []
  for row, skip in zip(cosines, exclude):
    row = row.copy()
    row[skip] = -np.inf
    best = np.argsort(-row, kind='stable')[:topn]
    out.append([(int(i), float(row[i])) for i in best if row[i] > -np.inf])  # topn past |V|: the words there are
  return out


class WordVectors:
  """The rows of C by word: `index_to_key` (the vocabulary in id order), `key_to_index`, `vectors`
  ([|V|, m] float32) and `counts` (each word's occurrences in the training tokens; 0 for a word
  added to the model after training)."""

  def __init__(self, words: Sequence[str], vectors: np.ndarray, counts: np.ndarray, corpus: str = 'training'):
    self.index_to_key = tuple(words)
    self.key_to_index = {w: i for i, w in enumerate(self.index_to_key)}
    self.vectors = np.asarray(vectors, np.float32)
    self.counts = np.asarray(counts)
    self._corpus = corpus

  def __len__(self) -> int:
    return len(self.index_to_key)

  def __contains__(self, word: str) -> bool:
    return word in self.key_to_index

  def get_index(self, word: str) -> int:
    """The word's id; UserError naming it when it is not in the vocabulary."""
    if not isinstance(word, str):
      raise UserError(f'{word!r} is not a word; give a string')
    if word not in self.key_to_index:
      raise UnknownWordError(unknown_word_message(word, len(self), self._corpus))
    return self.key_to_index[word]

  def __getitem__(self, words: str | Sequence[str]) -> np.ndarray:
    """A word's vector [m], or [len(words), m] for a list of words."""
    if isinstance(words, str):
      return self.vectors[self.get_index(words)]
    return self.vectors[[self.get_index(w) for w in words]]

  @property
  def vector_size(self) -> int:
    return self.vectors.shape[1]

  def most_similar(self, positive: str | Sequence[str | np.ndarray] = (), negative: Sequence[str | np.ndarray] = (),
                   topn: int = 10) -> list[tuple[str, float]]:
    """The `topn` words of highest cosine to sum(unit vectors of positive) - sum(those of negative),
    the query's words left out: most_similar('king'), or an analogy a : b :: c : ? as
    most_similar(positive=[b, c], negative=[a]). Entries may be words or vectors [m]."""
    positive = [positive] if isinstance(positive, (str, np.ndarray)) else list(positive)
    negative = [negative] if isinstance(negative, (str, np.ndarray)) else list(negative)
    if not positive and not negative:
      raise UserError('most_similar needs at least one word or vector, e.g. most_similar("king")')
    if isinstance(topn, bool) or not isinstance(topn, (int, np.integer)):
      raise UserError(f'topn={topn!r} is not a whole number; give an int')
    if topn < 1:
      raise UserError(f'topn={topn} is invalid; list at least 1 word')
    query, skip = np.zeros(self.vector_size, np.float32), []
    for sign, entries in ((1.0, positive), (-1.0, negative)):
      for entry in entries:
        if isinstance(entry, str):
          skip.append(self.get_index(entry))
          entry = self.vectors[skip[-1]]
        query = query + sign * unit_rows(self._query_vector(entry))
    if not np.any(query):
      raise UserError('the query vector is zero (the words or vectors given cancel out); give another query')
    found = nearest(self.vectors, query[None], topn, [skip])[0]
    return [(self.index_to_key[i], s) for i, s in found]

  def _query_vector(self, entry) -> np.ndarray:
    """A vector of a query: [m] numbers, finite, not all zero (a cosine needs a direction)."""
    if isinstance(entry, (bool, np.bool_)) or not isinstance(entry, (np.ndarray, list, tuple)):
      raise UserError(f'{entry!r} is neither a word nor a vector; give a string or an array of {self.vector_size} numbers')
    vector = np.asarray(entry)
    if vector.dtype.kind not in 'iuf' or vector.shape != (self.vector_size,):
      raise UserError(f'a query vector must be {self.vector_size} numbers (shape ({self.vector_size},)); this one has '
                      f'shape {vector.shape} and dtype {vector.dtype}')
    if not np.all(np.isfinite(vector)):
      raise UserError('a query vector holds NaN or infinity; give finite numbers')
    if not np.any(vector):
      raise UserError('a query vector is all zeros, which has no direction to compare; give another vector')
    return vector.astype(np.float32)

  def similar_by_vector(self, vector: np.ndarray, topn: int = 10) -> list[tuple[str, float]]:
    """The `topn` words of highest cosine to a vector [m] (none left out)."""
    return self.most_similar(positive=[np.asarray(vector)], topn=topn)

  def similarity(self, first: str, second: str) -> float:
    """The cosine of two words' vectors."""
    a, b = unit_rows(self[[first, second]])
    return float(a @ b)

  def save_word2vec_format(self, path: str | os.PathLike) -> str:
    """The word2vec text format: an "N D" header, then a word and its D numbers a line (gensim's
    KeyedVectors.load_word2vec_format reads it); written atomically. Returns the path."""
    lines = [f'{len(self)} {self.vector_size}']
    lines += [f'{w} ' + ' '.join(f'{x:.6g}' for x in row) for w, row in zip(self.index_to_key, self.vectors)]
    target = workdir_lib.as_path(path)
    workdir_lib.write_text_atomically(target, '\n'.join(lines) + '\n')
    return str(target)
