"""nplm-embeddings (python -m nplm_jax.tools.embeddings): nearest words, analogies and exports of a model's
word feature vectors; a thin layer over nplm_jax.load(DIR).vectors."""

from etils import epath

from nplm_jax import cli as cli_lib
from nplm_jax.errors import UserError
from nplm_jax.files import trained_workdir

# JAX and the model code are imported in main(), after check_flags has answered a wrong flag or workdir.
TOOL = 'nplm_jax.tools.embeddings'


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser(TOOL, description=cli_lib.module_doc(TOOL))
  commands = parser.add_subparsers(dest='command', required=True, metavar='{neighbours,analogy,export}',
                                   parser_class=cli_lib.ArgumentParser)
  for name, words_help, about in (
      ('neighbours', 'comma-separated words, e.g. Monday,king', 'the nearest words of each word, by cosine'),
      ('analogy', 'three words a,b,c: a is to b as c is to ?', 'the words d closest to b - a + c')):
    command = commands.add_parser(name, help=about, description=about)
    command.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint')
    command.add_argument('--words', required=True, help=words_help)
    command.add_argument('--topn', type=int, default=10, help='how many words to list')
    cli_lib.add_devices_flag(command)
  export = commands.add_parser('export', help='write C for gensim (word2vec text) or TensorBoard (projector)',
                               description='write C for gensim (word2vec text) or TensorBoard (projector)')
  export.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint')
  export.add_argument('--format', default='word2vec', choices=['word2vec', 'projector'], help='export format')
  export.add_argument('--output', default='', help='the word2vec file (required), or the projector folder '
                                                   '(default WORKDIR/tensorboard)')
  cli_lib.add_devices_flag(export)
  args = parser.parse_args(argv)
  args.words, args.topn = getattr(args, 'words', ''), getattr(args, 'topn', 10)
  args.format, args.output = getattr(args, 'format', 'word2vec'), getattr(args, 'output', '')
  return args


def check_flags(argv=None) -> None:
  """What is wrong with the command line's workdir, said before JAX loads (entry.run_command's early check)."""
  trained_workdir.check(parse_args(argv).workdir)


def main(argv=None) -> int:
  from nplm_jax import api  # pylint: disable=g-import-not-at-top
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools import embeddings  # pylint: disable=g-import-not-at-top
  args = parse_args(argv)
  words = [w for w in args.words.split(',') if w]
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
  model = api.LanguageModel.load(args.workdir, flag_messages=True, devices=args.devices)
  if args.command == 'neighbours':
    for word, found in embeddings.neighbours(model.vectors, words, args.topn).items():
      print(f'{word}: ' + ', '.join(f'{w} {s:.3f}' for w, s in found))
  elif args.command == 'analogy':
    found = embeddings.analogy(model.vectors, words, args.topn)
    print(f'{words[0]} : {words[1]} :: {words[2]} : ' + ', '.join(f'{w} {s:.3f}' for w, s in found))
  elif args.format == 'word2vec':
    model.vectors.save_word2vec_format(args.output)
    print(f'wrote {len(model.vocabulary):,} vectors of {model.config.model.m} to {args.output}')
  else:
    folder = embeddings.export_projector(model.vectors, args.output or str(epath.Path(args.workdir) / 'tensorboard'))
    print(f'wrote tensors.tsv, metadata.tsv and projector_config.pbtxt to {folder}; '
          f'view them with: tensorboard --logdir={folder}')
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__', early='check_flags')
