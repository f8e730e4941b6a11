"""Two or more forms of one config (each a set of config overrides), measured side by side.

python benchmarks/side_by_side.py --config=experiments/text.py:revisited --vocabs=10000,33278 --rounds=3 \
  --form=one_device:--config.mesh.cpu_devices=1 --form=per_core:--config.mesh.cpu_devices=-1

Each round runs benchmarks/throughput.py once per form and |V| (random ids), each in its own process,
alternating, so load on a shared machine falls on every form alike. Prints one JSON line per |V|: each
form's medians over rounds of the training step's and evaluation's tokens/s, every round's figures, and
the first form's rates over each other form's. --loop_steps=N adds the real training loop's tokens/s over
N steps (throughput.py --loop: resident data, steps a dispatch, what a step alone does not show):

python benchmarks/side_by_side.py --config=experiments/text.py:quick --batch_size=512 --loop_steps=3000 \
  --form=dispatch_100:--config.train.steps_per_dispatch=100 --form=dispatch_1:--config.train.steps_per_dispatch=1
"""

import argparse
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import common  # pylint: disable=wrong-import-position
from benchmarks import compare  # pylint: disable=wrong-import-position

STEP_RATES = ('train_tokens_per_sec', 'eval_tokens_per_sec')
LOOP_RATE = 'loop_train_tokens_per_sec'


def parse_form(text: str) -> tuple[str, list[str]]:
  """'name:--a=1 --b=2' -> ('name', ['--a=1', '--b=2']); a form with no overrides ('name:') is the config."""
  name, sep, overrides = text.partition(':')
  if not sep or not name:
    raise argparse.ArgumentTypeError(f'--form={text!r} needs a name, a colon and its overrides, '
                                     "e.g. one_device:--config.mesh.cpu_devices=1")
  return name, overrides.split()


def add_round_arguments(parser: argparse.ArgumentParser, batch_size: int) -> None:
  """--config, --vocabs, --batch_size and --rounds: what rates_by_round measures."""
  parser.add_argument('--config', default='experiments/brown.py:quick')
  parser.add_argument('--vocabs', default='10000,33278')
  parser.add_argument('--batch_size', type=int, default=batch_size)
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--loop_steps', type=int, default=0,
                      help='above 0: also the training loop\'s tokens/s over this many steps (throughput.py --loop)')


def rates_by_round(config: str, vocabs, batch_size: int, forms: dict[str, list[str]], rounds: int,
                   loop_steps: int = 0) -> dict:
  """{(vocab, form): {rate: [one figure per round]}}, the forms alternating within each round."""
  rates = STEP_RATES + ((LOOP_RATE,) if loop_steps else ())
  loop = ['--loop', f'--loop_steps={loop_steps}'] if loop_steps else []
  runs = {(v, f): {rate: [] for rate in rates} for v in vocabs for f in forms}
  for r in range(rounds):
    for vocab in vocabs:
      for form, overrides in forms.items():
        line = compare.json_lines([sys.executable, os.path.join('benchmarks', 'throughput.py'), f'--config={config}',
                                   f'--vocab={vocab}', f'--batch_sizes={batch_size}', *loop, *overrides])[0]
        for rate in rates:
          runs[vocab, form][rate].append(line[rate])
    print(f'round {r + 1}/{rounds} done', file=sys.stderr, flush=True)
  return runs


def records(config: str, vocabs, batch_size: int, forms: dict[str, list[str]], runs: dict, command: str) -> list[dict]:
  first = next(iter(forms))
  rates = tuple(runs[vocabs[0], first])
  out = []
  for vocab in vocabs:
    medians = {f: {rate: statistics.median(runs[vocab, f][rate]) for rate in rates} for f in forms}
    out.append({
        'name': f'side_by_side_{vocab}', 'config': config, 'vocab': vocab, 'batch_size': batch_size,
        'rounds': len(runs[vocab, first][rates[0]]),
        'forms': {f: {'overrides': forms[f], **{rate: round(medians[f][rate], 1) for rate in rates},
                      **{rate.replace('_per_sec', '_rounds'): runs[vocab, f][rate] for rate in rates}} for f in forms},
        **{f'{first}_over_{f}_{rate.removesuffix("_tokens_per_sec")}': round(medians[first][rate] / medians[f][rate], 3)
           for f in forms if f != first for rate in rates},
        'command': command, 'device': common.device_name(), 'commit': common.commit()})
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  add_round_arguments(parser, batch_size=256)
  parser.add_argument('--form', type=parse_form, action='append', required=True,
                      help="name:overrides, at least two; the first is the one the ratios are of")
  args = parser.parse_args(argv)
  forms = dict(args.form)
  if len(forms) < 2:
    parser.error('give at least two --form, each with its own name')
  vocabs = [int(v) for v in args.vocabs.split(',')]
  runs = rates_by_round(args.config, vocabs, args.batch_size, forms, args.rounds, args.loop_steps)
  command = 'python benchmarks/side_by_side.py ' + ' '.join(argv if argv is not None else sys.argv[1:])
  for record in records(args.config, vocabs, args.batch_size, forms, runs, command):
    common.emit(record)
  return 0


if __name__ == '__main__':
  sys.exit(main())
