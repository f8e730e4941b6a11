"""Scoring many separate sentences through the Python API against scoring the same tokens as one stream.

python benchmarks/score_sentences.py [--config=experiments/text.py:quick] [--vocab=10000] [--sentences=10000]
    [--rounds=3]

A synthetic Zipf-distributed text corpus (seeded) trains the config's model for a few steps (its speed,
not its quality, is measured), then nplm_jax.load(workdir).score runs on --sentences lines of 5-40 words
each: with independent_lines=True (each from boundary symbols, batched on the devices) and as one stream,
alternating, after one untimed pass of each (compilation). Prints one JSON line a round and a summary:
tokens/s of both and their ratio (1.0 = separate sentences cost nothing extra).
"""

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_string('config', 'experiments/text.py:quick', 'The experiment config of the model scored.')
flags.DEFINE_integer('vocab', 10_000, 'Words of the synthetic corpus (PTB: 10,000).')
flags.DEFINE_integer('sentences', 10_000, 'Sentences scored each round.')
flags.DEFINE_integer('rounds', 3, 'Timed rounds, each scoring separately and as one stream.')
flags.DEFINE_integer('train_steps', 5, 'Training steps of the model scored.')
flags.DEFINE_integer('seed', 0, 'Seed of the synthetic corpus.')
FLAGS = flags.FLAGS


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  import nplm_jax  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  zipf_lines = common.zipf_lines
  rng = np.random.default_rng(FLAGS.seed)
  folder = tempfile.mkdtemp(prefix='nplm_score_sentences_')
  files = {}
  for split, count in (('train', 20_000), ('valid', 200), ('test', 200)):
    files[split] = os.path.join(folder, f'{split}.txt')
    with open(files[split], 'w', encoding='utf-8') as f:
      f.write('\n'.join(zipf_lines(rng, FLAGS.vocab, count)) + '\n')
  config = nplm_jax.get_config(FLAGS.config, {**{f'data.{s}_file': p for s, p in files.items()},
                                              'train.max_steps': FLAGS.train_steps})
  nplm_jax.train(config, os.path.join(folder, 'run'))
  lm = nplm_jax.load(os.path.join(folder, 'run'))
  sentences = zipf_lines(rng, FLAGS.vocab, FLAGS.sentences)
  tokens = sum(len(lm.tokenize(s)) for s in sentences)
  for independent in (True, False):  # compiled, untimed
    lm.score(sentences[:100], independent_lines=independent)
  rates = {True: [], False: []}
  for round_ in range(FLAGS.rounds):
    for independent in (True, False):
      started = time.perf_counter()
      scored = lm.score(sentences, independent_lines=independent)
      seconds = time.perf_counter() - started
      assert sum(len(s) for s in scored) == tokens
      rates[independent].append(tokens / seconds)
    common.emit({'round': round_, 'tokens': tokens, 'separate_tokens_per_sec': round(rates[True][-1]),
                 'stream_tokens_per_sec': round(rates[False][-1])})
  separate, stream = statistics.median(rates[True]), statistics.median(rates[False])
  common.emit({'config': FLAGS.config, 'vocab': len(lm.vocabulary), 'sentences': FLAGS.sentences, 'tokens': tokens,
               'separate_tokens_per_sec': round(separate), 'stream_tokens_per_sec': round(stream),
               'separate_over_stream': round(separate / stream, 3), 'device': jax.devices()[0].device_kind,
               'devices': jax.device_count()})


if __name__ == '__main__':
  app.run(main)
