"""Scale: a synthetic WikiText-103-sized corpus prepared, trained from, and n-gram-estimated.

python benchmarks/scale.py --train_tokens=100000000 --folder=runs/scale

Writes a corpus from a seed (Zipf-distributed words, exponent 1.3, which leaves |V| of about
250k after the rare-word rule at 100M tokens, like WikiText-103's 267k; 20 words a line; valid and
test of 200k tokens), then measures, each in a fresh process:
- prepare: `python -m nplm_jax.data.prepare` wall time and peak RSS;
- start-up: from process start to the end of the first training step from the prepared corpus
  (corpus memory-mapped, model built, step compiled; --chunk_size > 0 in chunks), and the host RSS
  after the set-up (corpus, token stream, epoch permutation) and after the step, beside the bytes
  of the parameters and optimiser state (on a CPU the devices' memory is the host's);
- the Kneser-Ney 5-gram: its memory estimate, and whether it estimates within --max_memory_gb
  or stops at once with one line (and how long that took).
Prints a table and one JSON line per measurement.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

WORDS_PER_LINE = 20
ZIPF_EXPONENT = 1.3
WORD_TYPES = 5_000_000  # draws above this wrap around, so the tail stays spread over many types


def write_corpus(folder: str, train_tokens: int, eval_tokens: int, seed: int, chunk: int = 1 << 20) -> dict:
  """train/valid/test text files of Zipf-distributed words w1, w2, ... (w1 the most frequent)."""
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng(seed)
  names = np.array([f'w{i}' for i in range(WORD_TYPES + 1)], dtype=object)
  files = {}
  for split, tokens in (('train', train_tokens), ('valid', eval_tokens), ('test', eval_tokens)):
    path = os.path.join(folder, f'{split}.txt')
    with open(path, 'w', encoding='utf-8') as f:
      for begin in range(0, tokens, chunk):
        n = min(chunk, tokens - begin)
        ids = (rng.zipf(ZIPF_EXPONENT, size=n) - 1) % WORD_TYPES + 1
        rows = names[ids]
        f.write('\n'.join(' '.join(rows[i:i + WORDS_PER_LINE]) for i in range(0, n, WORDS_PER_LINE)) + '\n')
    files[split] = path
  return files


# Runs a module as __main__ and reports its own peak RSS on stderr (whatever other children did).
RSS_WRAPPER = """
import resource, runpy, sys
module, sys.argv = sys.argv[1], sys.argv[1:]
try:
  runpy.run_module(module, run_name='__main__', alter_sys=True)
finally:
  print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr, flush=True)
"""


def timed(module: str, args: list[str], env=None) -> tuple[subprocess.CompletedProcess, float, float]:
  """(process, wall seconds, its peak RSS in MiB) of `python -m module args`."""
  start = time.time()
  proc = subprocess.run([sys.executable, '-c', RSS_WRAPPER, module, *args], cwd=REPO, capture_output=True, text=True,
                        env=dict(os.environ, **(env or {})), check=False)
  seconds = time.time() - start
  peaks = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith('PEAK_RSS_KB')]
  if proc.returncode and 'error:' not in proc.stderr:
    raise SystemExit(f'error: {module} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}')
  return proc, seconds, (peaks[-1] / 1024.0 if peaks else float('nan'))


def rss_mib(field: str = 'VmRSS') -> float:
  """This process's resident memory now (VmRSS), or one of its parts (RssAnon, RssFile), in MiB."""
  with open('/proc/self/status', encoding='utf-8') as f:
    return next(int(line.split()[1]) for line in f if line.startswith(field + ':')) / 1024.0


def startup_worker(prepared: str, batch_size: int, chunk_size: int) -> None:
  """In a fresh process: the first training step from the prepared corpus; prints one JSON line."""
  start = time.time()
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top
  config = config_lib.load_experiment('experiments/prepared.py').get_config('')
  config.data.path = prepared
  config.train.batch_size = batch_size
  config.train.chunk_size = chunk_size
  sharding.configure_host_devices(config)
  import jax  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import experiment as experiment_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  baseline = rss_mib()  # Python, JAX and the code
  run = experiment_lib.Experiment(config, workdir_lib.Workdir(os.path.join(prepared, 'unused_workdir')))
  run.train_batch(0)  # the epoch's permutation
  setup = rss_mib()
  with jax.set_mesh(run.mesh):
    state = run.steps.init()
    state, metrics = run.steps.train(state, *run.train_batch(0))
    jax.block_until_ready(metrics['loss'])
  state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
  print('ROW ' + json.dumps({'startup_seconds': round(time.time() - start, 1), 'peak_rss_mib': round(rss),
                             'python_jax_rss_mib': round(baseline), 'data_setup_rss_mib': round(setup - baseline),
                             'file_backed_rss_mib': round(rss_mib('RssFile')), 'state_mib': round(state_bytes / 2**20),
                             'rss_beyond_state_mib': round(rss - state_bytes / 2**20),
                             'vocab_size': run.corpus.vocab_size, 'chunk_size': chunk_size}), flush=True)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--train_tokens', type=int, default=100_000_000)
  parser.add_argument('--eval_tokens', type=int, default=200_000)
  parser.add_argument('--folder', default='runs/scale', help='where the corpus and the prepared copy go')
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--batch_size', type=int, default=1024)
  parser.add_argument('--chunk_size', type=int, default=0,
                      help='train.chunk_size of the start-up step (0: none; the vocabulary streams in blocks)')
  parser.add_argument('--max_memory_gb', type=float, default=16.0, help="the n-gram's memory allowance")
  parser.add_argument('--startup_worker', default='', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.startup_worker:
    startup_worker(args.startup_worker, args.batch_size, args.chunk_size)
    return 0
  rows = []
  start = time.time()
  files = write_corpus(os.path.join(args.folder, 'text'), args.train_tokens, args.eval_tokens, args.seed)
  rows.append({'stage': 'write synthetic corpus', 'seconds': round(time.time() - start, 1)})
  prepared = os.path.join(args.folder, 'prepared')
  if os.path.exists(prepared):
    import shutil  # pylint: disable=g-import-not-at-top
    shutil.rmtree(prepared)
  data = [f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')]
  _, seconds, rss = timed('nplm_jax.data.prepare', ['--config=experiments/text.py', *data,
                           '--config.data.max_rare_count=3', f'--output={prepared}'])
  with open(os.path.join(prepared, 'meta.json'), encoding='utf-8') as f:
    meta = json.load(f)
  rows.append({'stage': 'prepare', 'seconds': round(seconds, 1), 'peak_rss_mib': round(rss),
               'vocab_size': meta['vocab_size'], 'train_tokens': meta['train_tokens']})
  proc, seconds, _ = timed('benchmarks.scale', [f'--startup_worker={prepared}', f'--batch_size={args.batch_size}',
                                                f'--chunk_size={args.chunk_size}'])
  found = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith('ROW ')]
  rows.append({'stage': 'training start-up (to the end of step 1)', **found[0]})
  proc, seconds, rss = timed('nplm_jax.baselines.ngram', ['--config=experiments/prepared.py', f'--config.data.path={prepared}',
                                                '--order=5', f'--max_memory_gb={args.max_memory_gb}'])
  from nplm_jax.baselines import ngram  # pylint: disable=g-import-not-at-top
  tokens = sum(meta[f'{s}_tokens'] for s in ('train', 'valid', 'test'))
  errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  outcome = errors[0] if proc.returncode and errors else 'estimated'
  rows.append({'stage': 'Kneser-Ney 5-gram', 'seconds': round(seconds, 1), 'peak_rss_mib': round(rss),
               'estimate_gib': round(ngram.memory_estimate(tokens, 5) / 2**30, 1), 'outcome': outcome})
  print('| stage | seconds | peak RSS MiB | notes |\n| --- | --- | --- | --- |')
  for row in rows:
    notes = {k: v for k, v in row.items() if k not in ('stage', 'seconds', 'peak_rss_mib', 'startup_seconds')}
    seconds = row.get('seconds', row.get('startup_seconds', ''))
    print(f'| {row["stage"]} | {seconds} | {row.get("peak_rss_mib", "")} | '
          + ', '.join(f'{k}={v}' for k, v in notes.items()) + ' |')
  for row in rows:
    print(json.dumps(row), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
