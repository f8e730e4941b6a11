"""nplm-sample (python -m nplm_jax.tools.sample): text drawn from a trained model, a sample a line; a thin
layer over nplm_jax.load(DIR).generate and .samples."""

import argparse
import sys
import time

from nplm_jax import cli as cli_lib
from nplm_jax import progress as progress_lib
from nplm_jax.files import trained_workdir

# JAX and the model code are imported in main(), after check_flags has answered a wrong flag or workdir.
TOOL = 'nplm_jax.tools.sample'
FLUSH_SECONDS = 0.2  # a streamed sample reaches the terminal at least this often


def _print_streamed(model, prompt: str, words) -> None:
  """One sample's text as its words come: the same line model.sample makes of them all."""
  separator = '' if model.char_level else ' '
  prompt_tokens = model.trained.prompt_tokens(prompt)
  out, last_flush = sys.stdout, time.monotonic()
  out.write(model.detokenize(prompt_tokens))
  first = not prompt_tokens
  for word in words:
    out.write(('' if first else separator) + model.detokenize([word]))
    first = False
    if time.monotonic() - last_flush > FLUSH_SECONDS:
      out.flush()
      last_flush = time.monotonic()
  out.write('\n')
  out.flush()


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser(TOOL, description=cli_lib.module_doc(TOOL))
  parser.add_argument('--workdir', required=True, help='a training workdir with a best checkpoint')
  parser.add_argument('--prompt', default='', help='the words to continue (default: none, the start of a text)')
  parser.add_argument('--num_tokens', type=int, default=50, help='words to draw per sample (at most, with --stop_at_eos)')
  parser.add_argument('--temperature', type=float, default=1.0, help='0 = the most probable word each time')
  parser.add_argument('--top_k', type=int, default=0, help='draw from the k most probable words (0 = all)')
  parser.add_argument('--top_p', type=float, default=1.0, help='draw from the smallest set of this mass (1 = all)')
  parser.add_argument('--num_samples', type=int, default=1, help='samples, one a line')
  parser.add_argument('--seed', type=int, default=0, help='the same seed gives the same samples')
  parser.add_argument('--stop_at_eos', action=argparse.BooleanOptionalAction, default=None,
                      help='end each sample at its first <eos> (default: on when the corpus has <eos>, i.e. '
                           'text and PTB models)')
  parser.add_argument('--allow_unk', action='store_true', help='let the rare-word and boundary symbols be drawn')
  cli_lib.add_devices_flag(parser)
  return parser.parse_args(argv)


def check_flags(argv=None) -> None:
  """What is wrong with the command line's workdir, said before JAX loads (entry.run_command's early check)."""
  trained_workdir.check(parse_args(argv).workdir)


def main(argv=None) -> int:
  from nplm_jax import api  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools import sample as sample_lib  # pylint: disable=g-import-not-at-top
  args = parse_args(argv)
  sample_lib.check_settings(args.num_tokens, args.temperature, args.top_k, args.top_p, args.num_samples, args.seed)
  model = api.LanguageModel.load(args.workdir, flag_messages=True, devices=args.devices)
  progress = progress_lib.StderrProgress('words drawn')
  drawing = dict(num_tokens=args.num_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                 seed=args.seed, allow_unk=args.allow_unk, stop_at_eos=args.stop_at_eos, progress=progress)
  if args.num_samples == 1:  # streamed: each word printed as it is drawn, whatever --num_tokens
    _print_streamed(model, args.prompt, model.generate(args.prompt, **drawing))
    return 0
  for line in model.samples(args.prompt, args.num_samples, **drawing):
    print(line, flush=args.num_samples > sample_lib.SAMPLES_AT_ONCE)  # printed as drawn
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__', early='check_flags')
