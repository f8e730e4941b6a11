"""nplm-mix (python -m nplm_jax.tools.mix): a finished workdir's network mixed with an n-gram, without
retraining; a thin layer over nplm_jax.tools.mix."""

import json

import numpy as np

from nplm_jax import cli as cli_lib
from nplm_jax import config as config_lib
from nplm_jax.baselines import ngram
from nplm_jax.errors import UserError
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.parallel import backend
from nplm_jax.tools import mix as mix_lib
from nplm_jax.training import evaluation


def parse_args(argv=None):
  parser = cli_lib.ArgumentParser('nplm_jax.tools.mix', description=mix_lib.__doc__)
  parser.add_argument('--workdir', required=True, help='a finished training workdir (with best/ and config.json)')
  parser.add_argument('--order', type=int, default=3, help='n-gram order of the mixed-in model')
  parser.add_argument('--smoothing', default='interpolated', choices=list(ngram.SMOOTHINGS), help='its smoothing')
  parser.add_argument('--weight', type=float, default=None,
                      help="the network's fixed weight, e.g. the paper's 0.5 (default: the weight fitted on "
                           "validation; its figures are reported either way)")
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  config = evaluation.load_config(args.workdir)
  config.mix.update(ngram_order=args.order, smoothing=args.smoothing, fit_weight=args.weight is None)
  if args.weight is not None:
    config.mix.weight = args.weight
  try:
    config_lib.validate(config)
  except UserError as e:  # name the flag the user gave, not the config key it sets
    raise UserError(str(e).replace('mix.ngram_order', '--order').replace('mix.weight', '--weight')
                    .replace('--config.--', '--')) from None
  backend.configure(config)
  corpus = mix_lib.workdir_corpus(config.data, workdir_lib.Workdir(args.workdir))
  nll = evaluation.evaluate_workdir(args.workdir, corpus=corpus)
  results = mix_lib.mixture_results(corpus, nll, config.mix)
  results.update(valid_ppl=ngram.perplexity(np.exp(-nll['valid'])), test_ppl=ngram.perplexity(np.exp(-nll['test'])))
  workdir_lib.Workdir(args.workdir).write_json('mix_results.json', results)
  print(json.dumps(results), flush=True)


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
