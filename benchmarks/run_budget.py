"""Whether train.max_seconds bounds the whole command: a WikiText-2-sized corpus trained to a budget.

python benchmarks/run_budget.py --max_seconds=600 [--config=experiments/text.py:quick] [--set=key=value ...]

Writes a corpus from a seed (Zipf-distributed words over 33,277 types, WikiText-2's |V| with <eos>;
2,088,628 training, 217,646 validation and 245,569 test tokens, its sizes), runs nplm-train on it
with the budget in a fresh process, and prints one JSON line: the command's wall time from process
start to exit against the budget, the run's own record of it (results.json's wall_seconds), the
seconds from the stop to the end by the log's stamps and by results.json (after_training_seconds:
the final evaluation of validation and test, 463,217 tokens, and the mixture when the config mixes),
and the test perplexities.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import common  # pylint: disable=wrong-import-position

SIZES = {'train': 2_088_628, 'valid': 217_646, 'test': 245_569}  # WikiText-2's tokens, <eos> included
WORD_TYPES = 33_277  # and <eos>: WikiText-2's |V| of 33,278
WORDS_PER_LINE = 20
ZIPF_EXPONENT = 1.2


def write_corpus(folder: str, seed: int) -> dict:
  """train/valid/test text files of Zipf-distributed words w1 ... w33277 (w1 the most frequent); the
  tail wraps around so every type occurs in the training split."""
  rng = np.random.default_rng(seed)
  names = np.array([f'w{i}' for i in range(1, WORD_TYPES + 1)], dtype=object)
  files = {}
  for split, tokens in SIZES.items():
    words = tokens - tokens // (WORDS_PER_LINE + 1)  # every line ends with <eos>, one token of the split
    ids = (rng.zipf(ZIPF_EXPONENT, size=words) - 1) % WORD_TYPES
    if split == 'train':
      ids[:WORD_TYPES] = np.arange(WORD_TYPES)  # every type seen in training: |V| is WORD_TYPES + <eos>
    rows = names[ids]
    files[split] = os.path.join(folder, f'{split}.txt')
    with open(files[split], 'w', encoding='utf-8') as f:
      f.write('\n'.join(' '.join(rows[i:i + WORDS_PER_LINE]) for i in range(0, words, WORDS_PER_LINE)) + '\n')
  return files


def after_stop_seconds(log: str) -> float | None:
  """Seconds from the line 'stop at step N: train.max_seconds=... spent' to the run's last line
  ('done: ...'), by their HH:MM:SS stamps (to the second): what ran after training stopped."""
  stamps = {}
  for line in log.splitlines():
    found = re.match(r'(\d\d:\d\d:\d\d) (stop at step|done:)', line)
    if found:
      stamps[found.group(2)] = datetime.datetime.strptime(found.group(1), '%H:%M:%S')
  if len(stamps) < 2:
    return None
  return (stamps['done:'] - stamps['stop at step']).total_seconds() % 86_400


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--config', default='experiments/text.py:quick')
  parser.add_argument('--max_seconds', type=float, default=600.0)
  parser.add_argument('--seed', type=int, default=0, help='the corpus seed')
  parser.add_argument('--set', action='append', default=[], help='a config override key=value (repeatable)')
  parser.add_argument('--folder', default='', help='keep the corpus and workdir here (default: a temporary folder)')
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as scratch:
    folder = args.folder or scratch
    os.makedirs(folder, exist_ok=True)
    files = write_corpus(folder, args.seed)
    workdir = os.path.join(folder, 'run')
    command = [sys.executable, '-m', 'nplm_jax.main', f'--config={args.config}', f'--workdir={workdir}',
               *(f'--config.data.{split}_file={path}' for split, path in
                 (('train', files['train']), ('valid', files['valid']), ('test', files['test']))),
               f'--config.train.max_seconds={args.max_seconds:g}', *(f'--config.{s}' for s in args.set)]
    began = time.time()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    command_seconds = time.time() - began
    if done.returncode != 0:
      sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
      return done.returncode
    sys.stderr.write(done.stdout[-3000:])
    with open(os.path.join(workdir, 'results.json'), encoding='utf-8') as f:
      results = json.load(f)
  evaluated = results['valid_tokens'] + results['test_tokens']
  record = {
      'name': f'run_budget_{args.config.rsplit(":", 1)[-1]}_{args.max_seconds:g}',
      'command': 'python benchmarks/run_budget.py ' + ' '.join(argv if argv is not None else sys.argv[1:]),
      'config': args.config, 'overrides': args.set, 'max_seconds': args.max_seconds,
      'vocab': results['vocab_size'], 'evaluated_tokens': evaluated,
      'command_seconds': round(command_seconds, 1), 'wall_seconds': round(results['wall_seconds'], 1),
      'over_budget_seconds': round(command_seconds - args.max_seconds, 1),
      'after_stop_seconds': after_stop_seconds(done.stdout),
      'after_training_seconds': round(results.get('after_training_seconds') or 0.0, 1),
      'epochs': round(results['epochs'], 3), 'test_ppl': round(results['test_ppl'], 2),
      **({'mix_test_ppl': round(results['mix_test_ppl'], 2), 'ngram_test_ppl': round(results['ngram_test_ppl'], 2)}
         if 'mix_test_ppl' in results else {}),
      'device': common.device_name(), 'commit': common.commit(),
  }
  common.emit(record)
  return 0


if __name__ == '__main__':
  sys.exit(main())
