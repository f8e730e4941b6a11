"""nplm_jax against the PyTorch reference, run alternately in one process; ratio per batch size.

python benchmarks/compare.py --batch_sizes=64,256,1024 --rounds=3

Each round runs benchmarks/throughput.py (Brown MLP1 shapes) then benchmarks/torch_reference.py
(same shapes), each in its own process; the medians over rounds are compared, so load on a
shared machine falls on both alike.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def json_lines(cmd: list[str]) -> list[dict]:
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(HERE), check=False)
  if proc.returncode:
    sys.exit(f'error: {" ".join(cmd[1:3])} failed: {(proc.stderr.strip().splitlines() or ["?"])[-1]}')
  return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--batch_sizes', default='64,256,1024')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--steps', type=int, default=10)
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--vocab', type=int, default=17_905, help='|V| (Brown: 17,905)')
  parser.add_argument('--n', type=int, default=5)
  parser.add_argument('--m', type=int, default=60)
  parser.add_argument('--h', type=int, default=50)
  parser.add_argument('--chunk_size', type=int, default=0, help="nplm_jax's train.chunk_size")
  parser.add_argument('--peak_size', type=int, default=-1, help="throughput.py's --peak_size (the MFU's reference matmul)")
  args = parser.parse_args()
  common = [f'--steps={args.steps}', f'--repeats={args.repeats}', f'--batch_sizes={args.batch_sizes}',
            f'--vocab={args.vocab}']
  peak = [f'--peak_size={args.peak_size}']
  shape = {'n': args.n, 'm': args.m, 'h': args.h}
  runs = {'jax': [], 'torch': []}
  for r in range(args.rounds):
    runs['jax'] += json_lines([sys.executable, os.path.join(HERE, 'throughput.py'), '--config=experiments/brown.py:mlp1',
                               *common, *peak, *(f'--config.model.{k}={v}' for k, v in shape.items()),
                               f'--config.train.chunk_size={args.chunk_size}'])
    runs['torch'] += json_lines([sys.executable, os.path.join(HERE, 'torch_reference.py'), *common,
                                 *(f'--{k}={v}' for k, v in shape.items())])
    print(f'round {r + 1}/{args.rounds} done', file=sys.stderr, flush=True)
  print('batch | jax train tok/s | torch train tok/s | train ratio | jax eval tok/s | torch eval tok/s | eval ratio'
        ' | jax GFLOP/s | matmul peak GFLOP/s | % of peak')
  for b in (int(x) for x in args.batch_sizes.split(',')):
    med = {f: {k: statistics.median(x[k] for x in runs[f] if x['batch_size'] == b)
               for k in ('train_tokens_per_sec', 'eval_tokens_per_sec')} for f in runs}
    gflops = statistics.median(x['gflops'] for x in runs['jax'] if x['batch_size'] == b)
    peak = statistics.median(x['peak_gflops'] for x in runs['jax'] if x['batch_size'] == b)
    row = {'batch_size': b, 'jax_train': med['jax']['train_tokens_per_sec'], 'torch_train': med['torch']['train_tokens_per_sec'],
           'train_ratio': med['jax']['train_tokens_per_sec'] / med['torch']['train_tokens_per_sec'],
           'jax_eval': med['jax']['eval_tokens_per_sec'], 'torch_eval': med['torch']['eval_tokens_per_sec'],
           'eval_ratio': med['jax']['eval_tokens_per_sec'] / med['torch']['eval_tokens_per_sec'],
           'gflops': gflops, 'peak_gflops': peak, 'fraction_of_peak': gflops / peak}
    print(f'{b} | {row["jax_train"]:.0f} | {row["torch_train"]:.0f} | {row["train_ratio"]:.2f}x | {row["jax_eval"]:.0f} | '
          f'{row["torch_eval"]:.0f} | {row["eval_ratio"]:.2f}x | {gflops:.1f} | {peak:.1f} | {100 * gflops / peak:.0f}%')
    print(json.dumps(row), flush=True)


if __name__ == '__main__':
  main()
