"""A sampled loss's output-layer update, 'dense' against 'sampled_columns', side by side.

python benchmarks/output_layer_update.py --config=experiments/brown.py:quick --vocabs=10000,33278 --rounds=3

benchmarks/side_by_side.py's rounds for the two forms (each run of benchmarks/throughput.py in its own
process, alternating, so load on a shared machine falls on both alike); prints one JSON line per |V| with
the medians over rounds of the training step's tokens/s and their ratio.
"""

import argparse
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import common  # pylint: disable=wrong-import-position
from benchmarks import side_by_side  # pylint: disable=wrong-import-position

FORMS = ('dense', 'sampled_columns')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  side_by_side.add_round_arguments(parser, batch_size=512)
  args = parser.parse_args(argv)
  vocabs = [int(v) for v in args.vocabs.split(',')]
  forms = {form: [f'--config.train.output_layer_update={form}'] for form in FORMS}
  runs = side_by_side.rates_by_round(args.config, vocabs, args.batch_size, forms, args.rounds)
  for vocab in vocabs:
    rates = {form: runs[vocab, form]['train_tokens_per_sec'] for form in FORMS}
    medians = {form: statistics.median(rates[form]) for form in FORMS}
    common.emit({'name': f'output_layer_update_{vocab}', 'config': args.config, 'vocab': vocab,
                 'batch_size': args.batch_size, 'rounds': args.rounds,
                 **{f'{form}_train_tokens_per_sec': round(medians[form], 1) for form in FORMS},
                 **{f'{form}_rounds': rates[form] for form in FORMS},
                 'sampled_columns_over_dense': round(medians['sampled_columns'] / medians['dense'], 3),
                 'command': 'python benchmarks/output_layer_update.py ' + ' '.join(
                     argv if argv is not None else sys.argv[1:]),
                 'device': common.device_name(), 'commit': common.commit()})
  return 0


if __name__ == '__main__':
  sys.exit(main())
