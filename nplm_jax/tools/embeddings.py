"""The learned word feature vectors C: nearest words, analogies, and export for other tools.

python -m nplm_jax.tools.embeddings neighbours --workdir=DIR --words=Monday,king [--topn=10]
python -m nplm_jax.tools.embeddings analogy --workdir=DIR --words=man,king,woman [--topn=10]
python -m nplm_jax.tools.embeddings export --workdir=DIR --format=word2vec --output=vectors.txt
python -m nplm_jax.tools.embeddings export --workdir=DIR --format=projector [--output=DIR/tensorboard]

Similarity is the cosine of two rows of C, computed for all words at once. `analogy a,b,c` ranks
the words d closest to b - a + c (a is to b as c is to d; gensim's most_similar(positive=[b, c],
negative=[a])), leaving a, b and c out. word2vec export is the text format gensim's
KeyedVectors.load_word2vec_format reads (a "N D" header, then a word and its D numbers a line);
projector export writes tensors.tsv, metadata.tsv and projector_config.pbtxt, which
`tensorboard --logdir=DIR/tensorboard` shows in its Projector tab. From Python, the same vectors are
nplm_jax.load(DIR).vectors (tools/word_vectors.py); this command is nplm_jax/commands/embeddings.py.
"""

if __name__ == '__main__':  # python -m here is the command (nplm_jax/commands/embeddings.py), before the imports
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top  # below: it checks the flags before JAX's
  entry.run_command('nplm_jax.commands.embeddings', early='check_flags')  # exits

from nplm_jax.errors import UserError
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.tools import word_vectors as word_vectors_lib


def neighbours(vectors: word_vectors_lib.WordVectors, words: list[str],
               topn: int) -> dict[str, list[tuple[str, float]]]:
  """Each word's `topn` nearest words by cosine (the word itself left out)."""
  for w in words:
    vectors.get_index(w)  # the first unknown word named before any work
  return {w: vectors.most_similar(w, topn=topn) for w in words}


def analogy(vectors: word_vectors_lib.WordVectors, words: list[str], topn: int) -> list[tuple[str, float]]:
  """a : b :: c : ?, the words closest to b - a + c (a, b and c left out)."""
  if len(words) != 3:
    raise UserError(f'analogy takes three words a,b,c (a is to b as c is to ?), not {len(words)}: '
                    'e.g. --words=man,king,woman')
  a, b, c = words
  return vectors.most_similar(positive=[b, c], negative=[a], topn=topn)


def export_projector(vectors: word_vectors_lib.WordVectors, output: str) -> str:
  """tensors.tsv, metadata.tsv (word, training count) and projector_config.pbtxt in the folder `output`."""
  folder = workdir_lib.as_path(output)
  folder.mkdir(parents=True, exist_ok=True)
  workdir_lib.write_text_atomically(folder / 'tensors.tsv', '\n'.join('\t'.join(f'{x:.6g}' for x in row)
                                                                     for row in vectors.vectors) + '\n')
  workdir_lib.write_text_atomically(folder / 'metadata.tsv', 'word\ttrain_count\n' + '\n'.join(
      f'{w}\t{int(n)}' for w, n in zip(vectors.index_to_key, vectors.counts)) + '\n')
  workdir_lib.write_text_atomically(folder / 'projector_config.pbtxt', (
      'embeddings {\n  tensor_name: "C (word features)"\n  tensor_path: "tensors.tsv"\n'
      '  metadata_path: "metadata.tsv"\n}\n'))
  return str(folder)
