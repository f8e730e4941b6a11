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
`tensorboard --logdir=DIR/tensorboard` shows in its Projector tab.
"""

import sys

import numpy as np
from etils import epath

from nplm_jax import cli as cli_lib
from nplm_jax.tools import trained as trained_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import UserError


def unit_rows(vectors: np.ndarray) -> np.ndarray:
  norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
  return vectors / np.maximum(norms, 1e-12)


def nearest(vectors: np.ndarray, queries: np.ndarray, topn: int, exclude: list[list[int]]) -> list[list[tuple[int, float]]]:
  """For each query vector, the `topn` rows of `vectors` of highest cosine, minus the ids in `exclude`
  (fewer when fewer remain)."""
  cosines = unit_rows(queries) @ unit_rows(vectors).T  # [queries, |V|]: one matmul, no loop over words
  out = []
  for row, skip in zip(cosines, exclude):
    row = row.copy()
    row[skip] = -np.inf
    best = np.argsort(-row, kind='stable')[:topn]
    out.append([(int(i), float(row[i])) for i in best if row[i] > -np.inf])  # topn past |V|: the words there are
  return out


def neighbours(model: trained_lib.TrainedModel, words: list[str], topn: int) -> dict[str, list[tuple[str, float]]]:
  ids = model.check_words(words)
  c = model.embeddings
  found = nearest(c, c[ids], topn, [[i] for i in ids])
  return {w: [(model.vocab[i], s) for i, s in row] for w, row in zip(words, found)}


def analogy(model: trained_lib.TrainedModel, words: list[str], topn: int) -> list[tuple[str, float]]:
  if len(words) != 3:
    raise UserError(f'analogy takes three words a,b,c (a is to b as c is to ?), not {len(words)}: '
                    'e.g. --words=man,king,woman')
  a, b, c = model.check_words(words)
  unit = unit_rows(model.embeddings)
  found = nearest(unit, (unit[b] - unit[a] + unit[c])[None], topn, [[a, b, c]])[0]
  return [(model.vocab[i], s) for i, s in found]


def export_word2vec(model: trained_lib.TrainedModel, output: str) -> str:
  c = model.embeddings
  lines = [f'{c.shape[0]} {c.shape[1]}']
  lines += [f'{w} ' + ' '.join(f'{x:.6g}' for x in row) for w, row in zip(model.vocab, c)]
  path = workdir_lib.as_path(output)
  workdir_lib.write_text_atomically(path, '\n'.join(lines) + '\n')
  return str(path)


def export_projector(model: trained_lib.TrainedModel, output: str) -> str:
  folder = workdir_lib.as_path(output)
  folder.mkdir(parents=True, exist_ok=True)
  c = model.embeddings
  counts = model.train_counts
  workdir_lib.write_text_atomically(folder / 'tensors.tsv', '\n'.join('\t'.join(f'{x:.6g}' for x in row) for row in c) + '\n')
  workdir_lib.write_text_atomically(folder / 'metadata.tsv', 'word\ttrain_count\n' + '\n'.join(
      f'{w}\t{int(n)}' for w, n in zip(model.vocab, counts)) + '\n')
  workdir_lib.write_text_atomically(folder / 'projector_config.pbtxt', (
      'embeddings {\n  tensor_name: "C (word features)"\n  tensor_path: "tensors.tsv"\n'
      '  metadata_path: "metadata.tsv"\n}\n'))
  return str(folder)


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser('nplm_jax.tools.embeddings', description=__doc__)
  commands = parser.add_subparsers(dest='command', required=True, metavar='{neighbours,analogy,export}',
                                   parser_class=cli_lib.ArgumentParser)
  for name, words_help, about in (
      ('neighbours', 'comma-separated words, e.g. Monday,king', 'the nearest words of each word, by cosine'),
      ('analogy', 'three words a,b,c: a is to b as c is to ?', 'the words d closest to b - a + c')):
    command = commands.add_parser(name, help=about, description=about)
    command.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint')
    command.add_argument('--words', required=True, help=words_help)
    command.add_argument('--topn', type=int, default=10, help='how many words to list')
  export = commands.add_parser('export', help='write C for gensim (word2vec text) or TensorBoard (projector)',
                               description='write C for gensim (word2vec text) or TensorBoard (projector)')
  export.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint')
  export.add_argument('--format', default='word2vec', choices=['word2vec', 'projector'], help='export format')
  export.add_argument('--output', default='', help='the word2vec file (required), or the projector folder '
                                                   '(default WORKDIR/tensorboard)')
  args = parser.parse_args(argv)
  args.words, args.topn = getattr(args, 'words', ''), getattr(args, 'topn', 10)
  args.format, args.output = getattr(args, 'format', 'word2vec'), getattr(args, 'output', '')
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  words = [w for w in args.words.split(',') if w]
  try:
    if args.command in ('neighbours', 'analogy') and not words:
      raise UserError(f'{args.command} needs --words, e.g. --words=' + ('Monday,king' if args.command == 'neighbours'
                                                                          else 'man,king,woman'))
    if args.topn < 1:
      raise UserError(f'--topn={args.topn} is invalid; list at least 1 word')
    if args.command == 'export' and args.format == 'word2vec' and not args.output:
      raise UserError('export --format=word2vec needs --output=FILE')
    if args.output and args.format == 'word2vec':
      workdir_lib.output_file(args.output, '--output')
    elif args.output:
      workdir_lib.output_folder(args.output, '--output')
    model = trained_lib.TrainedModel.load(args.workdir)
    if args.command == 'neighbours':
      for word, found in neighbours(model, words, args.topn).items():
        print(f'{word}: ' + ', '.join(f'{w} {s:.3f}' for w, s in found))
    elif args.command == 'analogy':
      found = analogy(model, words, args.topn)
      print(f'{words[0]} : {words[1]} :: {words[2]} : ' + ', '.join(f'{w} {s:.3f}' for w, s in found))
    elif args.format == 'word2vec':
      export_word2vec(model, args.output)
      print(f'wrote {len(model.vocab):,} vectors of {model.config.model.m} to {args.output}')
    else:
      folder = export_projector(model, args.output or str(epath.Path(args.workdir) / 'tensorboard'))
      print(f'wrote tensors.tsv, metadata.tsv and projector_config.pbtxt to {folder}; '
            f'view them with: tensorboard --logdir={folder}')
  except UserError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
