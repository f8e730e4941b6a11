"""nplm-prepare (python -m nplm_jax.data.prepare): a corpus read once into memory-mapped token ids."""

from nplm_jax import cli
from nplm_jax.data import prepare
from nplm_jax.files import metrics


def parse_args(argv=None):
  parser = cli.ConfigArgumentParser('nplm_jax.data.prepare', 'the corpus config to prepare (its data section is used)',
                                    description=prepare.__doc__)
  parser.add_argument('--output', required=True, help='the folder to write the prepared corpus to (new or empty)')
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  meta = prepare.prepare(args.config.data, args.output)
  metrics.log(f'prepared {args.output}: |V|={meta["vocab_size"]:,}, train {meta["train_tokens"]:,}, valid '
              f'{meta["valid_tokens"]:,}, test {meta["test_tokens"]:,} tokens in {meta["seconds"]} s; train from it with '
              f'--config=experiments/prepared.py --config.data.path={args.output}')


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
