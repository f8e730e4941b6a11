"""A sampled loss's output-layer update, 'dense' against 'sampled_columns', side by side.

python benchmarks/output_layer_update.py --config=experiments/brown.py:quick --vocabs=10000,33278 --rounds=3

Each round runs benchmarks/throughput.py once per form and |V| (random ids, train.batch_size of the config),
each in its own process, alternating, so load on a shared machine falls on both alike; prints one JSON line
per |V| with the medians over rounds of the training step's tokens/s and their ratio.
"""

import argparse
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import common  # pylint: disable=wrong-import-position
from benchmarks import compare  # pylint: disable=wrong-import-position

FORMS = ('dense', 'sampled_columns')


def train_rate(config: str, vocab: int, batch_size: int, form: str) -> float:
  return compare.json_lines([sys.executable, os.path.join('benchmarks', 'throughput.py'), f'--config={config}',
                             f'--vocab={vocab}', f'--batch_sizes={batch_size}',
                             f'--config.train.output_layer_update={form}'])[0]['train_tokens_per_sec']


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--config', default='experiments/brown.py:quick')
  parser.add_argument('--vocabs', default='10000,33278')
  parser.add_argument('--batch_size', type=int, default=512)
  parser.add_argument('--rounds', type=int, default=3)
  args = parser.parse_args(argv)
  vocabs = [int(v) for v in args.vocabs.split(',')]
  rates = {(v, f): [] for v in vocabs for f in FORMS}
  for _ in range(args.rounds):
    for vocab in vocabs:
      for form in FORMS:
        rates[vocab, form].append(train_rate(args.config, vocab, args.batch_size, form))
  for vocab in vocabs:
    medians = {form: statistics.median(rates[vocab, form]) for form in FORMS}
    common.emit({'name': f'output_layer_update_{vocab}', 'config': args.config, 'vocab': vocab,
                 'batch_size': args.batch_size, 'rounds': args.rounds,
                 **{f'{form}_train_tokens_per_sec': round(medians[form], 1) for form in FORMS},
                 **{f'{form}_rounds': rates[vocab, form] for form in FORMS},
                 'sampled_columns_over_dense': round(medians['sampled_columns'] / medians['dense'], 3),
                 'command': 'python benchmarks/output_layer_update.py ' + ' '.join(
                     argv if argv is not None else sys.argv[1:]),
                 'device': common.device_name(), 'commit': common.commit()})
  return 0


if __name__ == '__main__':
  sys.exit(main())
