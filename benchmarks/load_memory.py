"""The memory of loading models again and again in one process, as a notebook does: RSS after each load.

python benchmarks/load_memory.py [--config=experiments/text.py:tiny] [--loads=24] [--workdirs=8]

Trains --workdirs small models on a synthetic Zipf corpus (seeded; their speed and quality do not matter), then
loads them --loads times in turn, scoring a sentence with each, in two ways: closing each model (`with
nplm_jax.load(...) as lm:`), and keeping none of them but never closing one (the last few workdirs' compiled
functions stay cached, tools/trained.py RUNS_KEPT). Prints one JSON line a load (the process's resident memory
in MiB) and a summary: the growth from the first load's RSS to the last in each way.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_string('config', 'experiments/text.py:tiny', 'The experiment config of the models loaded.')
flags.DEFINE_integer('loads', 24, 'Loads in each way.')
flags.DEFINE_integer('workdirs', 8, 'Distinct trained workdirs, loaded in turn (more than the 4 whose functions stay cached).')
flags.DEFINE_integer('vocab', 2000, 'Words of the synthetic corpus.')
flags.DEFINE_integer('seed', 0, 'Seed of the synthetic corpus.')
FLAGS = flags.FLAGS


def rss_mib() -> float:
  """This process's resident memory (VmRSS), MiB."""
  with open('/proc/self/status', encoding='ascii') as f:
    return next(int(line.split()[1]) for line in f if line.startswith('VmRSS:')) / 1024


def main(argv):
  del argv
  import nplm_jax  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(FLAGS.seed)
  folder = tempfile.mkdtemp(prefix='nplm_load_memory_')
  files = {}
  for split, count in (('train', 2000), ('valid', 100), ('test', 100)):
    files[split] = os.path.join(folder, f'{split}.txt')
    with open(files[split], 'w', encoding='utf-8') as f:
      f.write('\n'.join(common.zipf_lines(rng, FLAGS.vocab, count)) + '\n')
  workdirs = [os.path.join(folder, f'run{i}') for i in range(FLAGS.workdirs)]
  for i, workdir in enumerate(workdirs):
    nplm_jax.train(nplm_jax.get_config(FLAGS.config, {**{f'data.{s}_file': p for s, p in files.items()},
                                                      'train.max_steps': 2, 'seed': i}), workdir)
  growth = {}
  for way in ('closed', 'never_closed'):
    first = None
    for load in range(FLAGS.loads):
      lm = nplm_jax.load(workdirs[load % len(workdirs)])
      lm.perplexity('w1 w2 w3')
      if way == 'closed':
        lm.close()
      del lm
      rss = rss_mib()
      first = rss if first is None else first
      common.emit({'way': way, 'load': load, 'rss_mib': round(rss, 1)})
    growth[way] = round(rss - first, 1)
  common.emit({'config': FLAGS.config, 'loads': FLAGS.loads, 'workdirs': FLAGS.workdirs,
               'rss_growth_mib_closed': growth['closed'], 'rss_growth_mib_never_closed': growth['never_closed']})


if __name__ == '__main__':
  app.run(main)
