"""nplm-score (python -m nplm_jax.tools.score): log-probabilities of text, as KenLM's query prints them;
a thin layer over nplm_jax.load(DIR).score."""

from nplm_jax import cli as cli_lib
from nplm_jax.data import text_input
from nplm_jax.errors import UserError
from nplm_jax.files import trained_workdir

# JAX and the model code are imported in main(), after check_flags has answered a wrong flag, workdir or text.
TOOL = 'nplm_jax.tools.score'


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser(TOOL, description=cli_lib.module_doc(TOOL))
  parser.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint (finished or running)')
  parser.add_argument('--text', required=True, help="the text to score, one sentence or paragraph a line; '-' = stdin")
  parser.add_argument('--verbosity', default='summary', choices=['word', 'line', 'summary'],
                      help='what to print besides the summary')
  parser.add_argument('--log_base', default='10', choices=['10', 'e', '2'],
                      help='base of the printed log-probabilities (kenlm: always 10)')
  parser.add_argument('--independent_lines', action='store_true',
                      help='score each line from boundary symbols instead of as one stream')
  parser.add_argument('--format', default='text', choices=['text', 'json', 'kenlm'],
                      help="plain text; one JSON object a line; or KenLM query's layout, for scripts that parse it")
  parser.add_argument('--mix', action='store_true', help="score with the network mixed with the workdir's n-gram")
  cli_lib.add_devices_flag(parser)
  return parser.parse_args(argv)


def check_flags(argv=None) -> None:
  """What is wrong with the command line, said before JAX loads (entry.run_command's early check)."""
  check_args(parse_args(argv))


def check_args(args) -> None:
  if args.format == 'kenlm' and args.log_base != '10':
    raise UserError(f"--format=kenlm prints log10 probabilities, as KenLM's query does; leave out --log_base={args.log_base}")
  trained_workdir.check(args.workdir)
  text_input.check_path(args.text, '--text')


def main(argv=None) -> int:
  from nplm_jax import api  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools import score as score_lib  # pylint: disable=g-import-not-at-top
  args = parse_args(argv)
  check_args(args)
  lines = text_input.read_lines(args.text, '--text')
  model = api.LanguageModel.load(args.workdir, flag_messages=True, devices=args.devices)
  scored = model.score(lines, stream=not args.independent_lines, mix=args.mix)
  if not sum(len(s.ids) for s in scored):
    raise UserError(f'--text={args.text!r} holds no tokens; give non-empty text')
  score_lib.report(scored, args.verbosity, args.log_base, args.format, model.config.model.n)
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__', early='check_flags')
