"""nplm-ngram (python -m nplm_jax.baselines.ngram): an n-gram baseline's validation and test perplexity."""

import json
import math

from nplm_jax import cli
from nplm_jax import config as config_lib
from nplm_jax.baselines import ngram
from nplm_jax.data import corpora as data_lib
from nplm_jax.errors import UserError
from nplm_jax.files import workdir as workdir_lib


def parse_args(argv=None):
  parser = cli.ConfigArgumentParser('nplm_jax.baselines.ngram', 'experiment config; only its data section is used',
                                    description=ngram.__doc__)
  parser.add_argument('--order', type=int, default=3, help='n-gram order (1-5 and up)')
  parser.add_argument('--smoothing', default='kneser_ney', choices=list(ngram.SMOOTHINGS), help='smoothing method')
  parser.add_argument('--output', default='', help='also write the result as JSON to this file')
  parser.add_argument('--max_memory_gb', type=float, default=ngram.DEFAULT_MAX_MEMORY_GB,
                      help='stop at once when the model would need more GiB')
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  if args.output:
    workdir_lib.output_file(args.output, '--output')
  if args.order < 1:
    raise UserError(f'--order={args.order} is invalid; use an n-gram order >= 1')
  corpus = data_lib.load_corpus(args.config.data)
  result = ngram.evaluate(corpus, args.order, args.smoothing, args.max_memory_gb)
  result['corpus'] = args.config.data.corpus
  # what made the figures, as a training's results.json keeps its config (launch.results collect reads both)
  result['config'] = {'data': config_lib.to_saved(args.config)['data'],
                      'ngram': {'order': args.order, 'smoothing': args.smoothing}}
  if data_lib.text_unit(args.config.data) == 'char':
    result.update(valid_bpc=math.log2(result['valid_ppl']), test_bpc=math.log2(result['test_ppl']))
  print(json.dumps(result), flush=True)
  if args.output:
    workdir_lib.write_text_atomically(workdir_lib.as_path(args.output), json.dumps(result, indent=2) + '\n')


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
