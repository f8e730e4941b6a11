"""nplm-extend (python -m nplm_jax.tools.extend): the paper's feature vectors for new words, written as a new
workdir; a thin layer over nplm_jax.tools.extend."""

from nplm_jax import cli as cli_lib
from nplm_jax.data import text_input
from nplm_jax.errors import UserError
from nplm_jax.files import trained_workdir

# JAX and the model code are imported in main(), after check_flags has answered a wrong flag, workdir or text.
TOOL = 'nplm_jax.tools.extend'


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser(TOOL, description=cli_lib.module_doc(TOOL))
  parser.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint')
  parser.add_argument('--text', required=True, help="text with the new words in context; '-' = stdin")
  parser.add_argument('--output_workdir', required=True, help='the new workdir to write (a new folder)')
  parser.add_argument('--output_columns', default='expected_rare_prior',
                      choices=('expected_rare_prior', 'expected', 'rare_split'),
                      help="the new words' output-layer columns: expected_rare_prior (the default) = the expected "
                           "U and W rows and the rare-word symbol's bias minus log k; expected = U, W and b all "
                           "averaged; rare_split = the rare-word symbol's column, bias minus log k")
  cli_lib.add_devices_flag(parser)
  return parser.parse_args(argv)


def check_flags(argv=None) -> None:
  """What is wrong with the command line, said before JAX loads (entry.run_command's early check)."""
  args = parse_args(argv)
  trained_workdir.check(args.workdir)
  text_input.check_path(args.text, '--text')


def main(argv=None) -> int:
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools import extend as extend_lib  # pylint: disable=g-import-not-at-top
  args = parse_args(argv)
  if workdir_lib.as_path(args.output_workdir).resolve() == workdir_lib.as_path(args.workdir).resolve():
    raise UserError('--output_workdir is --workdir; give a new folder for the extended model')
  summary = extend_lib.extend(args.workdir, text_input.read_lines(args.text, '--text'), args.output_workdir,
                               devices=args.devices, output_columns=args.output_columns)
  print(f'added {summary["added_words"]:,} words ({summary["occurrences"]:,} occurrences) to the vocabulary, now '
        f'{summary["vocab_size"]:,}: {args.output_workdir}')
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__', early='check_flags')
