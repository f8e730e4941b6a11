"""nplm-plot (python -m nplm_jax.tools.plot): validation curves and word maps as PNG; a thin layer over
nplm_jax.tools.plot."""

import numpy as np

from nplm_jax import cli as cli_lib
from nplm_jax.errors import UserError
from nplm_jax.tools import plot as plot_lib


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser('nplm_jax.tools.plot', description=plot_lib.__doc__)
  commands = parser.add_subparsers(dest='command', required=True, metavar='{curves,embeddings}',
                                   parser_class=cli_lib.ArgumentParser)
  about = 'validation perplexity by epoch and by wall time, a line per workdir'
  curves = commands.add_parser('curves', help=about, description=about)
  curves.add_argument('--workdir', action='append', default=[], help='a training workdir (repeat to overlay runs)')
  curves.add_argument('--output', required=True, help='the PNG file to write')
  curves.add_argument('--ngram', action='append', default=[],
                      help='a baseline: LABEL=PERPLEXITY, or an n-gram workdir / results.json (repeatable)')
  about = "the most frequent words' feature vectors C on their first two principal components"
  embeddings = commands.add_parser('embeddings', help=about, description=about)
  embeddings.add_argument('--workdir', action='append', default=[], help='a training workdir')
  embeddings.add_argument('--output', required=True, help='the PNG file to write')
  embeddings.add_argument('--top', type=int, default=300, help='how many of the most frequent words')
  cli_lib.add_devices_flag(embeddings)
  args = parser.parse_args(argv)
  args.ngram, args.top = getattr(args, 'ngram', []), getattr(args, 'top', 300)
  args.devices = getattr(args, 'devices', None)
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  if not args.workdir:
    raise UserError('--workdir is required; give the folder of a training (curves: one or more)')
  if not args.output.lower().endswith('.png'):
    raise UserError(f'--output={args.output!r} does not end in .png; plots are written as PNG')
  if args.command == 'curves':
    curves = [plot_lib.run_curve(w) for w in args.workdir]
    plot_lib.distinct_labels(curves, args.workdir)
    plot_lib.plot_curves(curves, [plot_lib.ngram_line(s) for s in args.ngram], args.output)
  else:
    if len(args.workdir) > 1:
      raise UserError('embeddings plots one workdir; give --workdir once')
    if args.top < 2:
      raise UserError(f'--top={args.top} is invalid; plot at least 2 words')
    from nplm_jax.tools import trained as trained_lib  # pylint: disable=g-import-not-at-top  # JAX only here
    model = trained_lib.TrainedModel.load(args.workdir[0], args.devices)
    counts = model.train_counts
    skip = {model.rare_id, model.boundary_id}
    top = [int(i) for i in np.argsort(-counts, kind='stable') if int(i) not in skip][:args.top]
    plot_lib.plot_embeddings([model.vocab[i] for i in top], model.embeddings[top], args.output,
                    f'{plot_lib.run_label(args.workdir[0])}: the {len(top)} most frequent words, C projected by PCA')
  print(f'wrote {args.output}')
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
