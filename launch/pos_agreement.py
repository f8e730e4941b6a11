"""Do out-of-vocabulary words get meaningful feature vectors? Part-of-speech agreement on Brown.

python -m nplm_jax.tools.extend --workdir=runs/brown_mlp1_tuned --text=TEST_TEXT --output_workdir=runs/extended
python -m launch.pos_agreement --workdir=runs/extended --text=TEST_TEXT

For each word added by nplm_jax.tools.extend (the paper's C(j) = sum_i C(i) P(i | context)), its
nearest in-vocabulary word by cosine: how often do the two share their most frequent
part-of-speech tag in Brown (nltk's brown.tagged_words(), tags cut at the first '-', so NN-TL is
NN)? Measured two ways: against the in-vocabulary words' own rows of C, and against the
in-vocabulary words' vectors made the same way as the new ones (sum_i C(i) P(i | context)
averaged over their occurrences in the same text, by the model extended from), like with like.
Beside them: the same rates for in-vocabulary words (each word's nearest other word), for the
rarest in-vocabulary words, for random vectors drawn from the per-dimension mean and spread, and
the rate of always guessing the most common tag.
"""

import collections
import json

import numpy as np

from nplm_jax import cli as cli_lib
from nplm_jax.data import corpora as data_lib
from nplm_jax.tools import word_vectors
from nplm_jax.data import text_input
from nplm_jax.tools import trained as trained_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.data import workdir_vocab
from nplm_jax.errors import UserError


def simple_tag(tag: str) -> str:
  return tag.split('-')[0] or tag


def most_frequent_tags(tagged_words) -> dict[str, str]:
  counts = collections.defaultdict(collections.Counter)
  for word, tag in tagged_words:
    counts[word][simple_tag(tag)] += 1
  return {w: c.most_common(1)[0][0] for w, c in counts.items()}


def nearest_ids(queries: np.ndarray, candidates: np.ndarray, exclude_self: np.ndarray | None = None,
                chunk: int = 2048) -> np.ndarray:
  """Index of each query's highest-cosine candidate (exclude_self[q]: a candidate index to skip)."""
  unit_c = word_vectors.unit_rows(candidates)
  out = np.empty(len(queries), np.int64)
  for begin in range(0, len(queries), chunk):
    cos = word_vectors.unit_rows(queries[begin:begin + chunk]) @ unit_c.T
    if exclude_self is not None:
      cos[np.arange(len(cos)), exclude_self[begin:begin + chunk]] = -np.inf
    out[begin:begin + chunk] = np.argmax(cos, axis=1)
  return out


def agreement(query_words, query_vectors, vocab_words, vocab_vectors, tags, exclude_self=None) -> dict:
  found = nearest_ids(query_vectors, vocab_vectors, exclude_self)
  pairs = [(tags.get(q), tags.get(vocab_words[i])) for q, i in zip(query_words, found)]
  pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
  return {'words': len(pairs), 'agreement': float(np.mean([a == b for a, b in pairs])) if pairs else float('nan')}


def expected_vectors(model, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
  """(ids, vectors): every in-vocabulary word of the text (not the rare-word symbol) and its
  sum_i C(i) P(i | context) averaged over its occurrences."""
  ids, oov = model.to_ids([w for line in lines for w in model.line_tokens(line)])
  features, _ = model.expected_rows(model.contexts(ids)[~oov], with_columns=False)
  means, counts = trained_lib.group_means(features.astype(np.float64), ids[~oov], len(model.vocab))
  present = np.flatnonzero((counts > 0) & (np.arange(len(model.vocab)) != model.rare_id))
  return present, means[present], counts[present]


def measure(workdir_path: str, lines: list[str], tagged_words=None, rare_max_count: int = 10, seed: int = 0) -> dict:
  workdir = workdir_lib.Workdir(workdir_path)
  added = workdir.read_json(workdir_vocab.ADDED_WORDS_FILE)
  if not added:
    raise UserError(f'{workdir_path!r} holds no {workdir_vocab.ADDED_WORDS_FILE}; give a workdir made by nplm_jax.tools.extend')
  model = trained_lib.TrainedModel.load(workdir_path)
  original = trained_lib.TrainedModel.load(added['extended_from'])
  if tagged_words is None:
    from nltk.corpus import brown  # pylint: disable=g-import-not-at-top
    tagged_words = brown.tagged_words()
  tags = most_frequent_tags(tagged_words)
  c, base = model.embeddings, added['base_vocab_size']
  keep = np.array([w not in (data_lib.RARE, data_lib.EOS) for w in model.vocab[:base]])
  vocab_ids = np.flatnonzero(keep)
  vocab_words = [model.vocab[i] for i in vocab_ids]
  vocab_vectors = c[vocab_ids]
  new_words, new_vectors = list(model.vocab[base:]), c[base:]
  counts = model.run.corpus.unigram_counts('train')[vocab_ids]
  rare = np.flatnonzero(counts <= rare_max_count)
  rng = np.random.default_rng(seed)
  draw = lambda ref: rng.normal(ref.mean(0), ref.std(0), size=(len(new_words), c.shape[1]))
  like_ids, like_vectors, like_counts = expected_vectors(original, lines)
  like_words = [original.vocab[i] for i in like_ids]
  like_rare = np.flatnonzero(like_counts <= 3)
  rows = {
      'new words vs rows of C': agreement(new_words, new_vectors, vocab_words, vocab_vectors, tags),
      'in-vocabulary words vs rows of C': agreement(vocab_words, vocab_vectors, vocab_words, vocab_vectors, tags,
                                                    exclude_self=np.arange(len(vocab_words))),
      f'in-vocabulary words seen <= {rare_max_count} times in train vs rows of C': agreement(
          [vocab_words[i] for i in rare], vocab_vectors[rare], vocab_words, vocab_vectors, tags, exclude_self=rare),
      'random vectors vs rows of C': agreement(new_words, draw(vocab_vectors), vocab_words, vocab_vectors, tags),
      'new words vs expected vectors': agreement(new_words, new_vectors, like_words, like_vectors, tags),
      'in-vocabulary words vs expected vectors': agreement(like_words, like_vectors, like_words, like_vectors, tags,
                                                           exclude_self=np.arange(len(like_words))),
      'in-vocabulary words seen <= 3 times in the text vs expected vectors': agreement(
          [like_words[i] for i in like_rare], like_vectors[like_rare], like_words, like_vectors, tags,
          exclude_self=like_rare),
      'random vectors vs expected vectors': agreement(new_words, draw(like_vectors), like_words, like_vectors, tags),
  }
  tag_counts = collections.Counter(tags[w] for w in new_words if w in tags)
  majority_tag, majority = tag_counts.most_common(1)[0]
  rows[f'new words: always the most common tag ({majority_tag})'] = {
      'words': sum(tag_counts.values()), 'agreement': majority / sum(tag_counts.values())}
  return rows


def main(argv=None) -> int:
  parser = cli_lib.ArgumentParser('launch.pos_agreement', description=__doc__.splitlines()[0])
  parser.add_argument('--workdir', required=True, help='a workdir made by nplm_jax.tools.extend from a Brown model')
  parser.add_argument('--text', required=True, help='the text the workdir was extended with')
  args = parser.parse_args(argv)
  rows = measure(args.workdir, text_input.read_lines(args.text, '--text'))
  print('| words, nearest among | count | the nearest shares the most frequent tag |\n| --- | --- | --- |')
  for name, r in rows.items():
    print(f'| {name} | {r["words"]:,} | {100 * r["agreement"]:.1f}% |')
  print(json.dumps(rows))
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
