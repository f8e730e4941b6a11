"""A small synthetic corpus in the text format, and a matching tiny config."""

import os

import numpy as np

from nplm_jax.config import base_config


def write_markov_corpus(folder: str, vocab: int = 60, lines=(400, 60, 60), seed: int = 0) -> dict:
  """Sentences from a sparse random Markov chain: a model that learns beats the unigram model easily."""
  rng = np.random.default_rng(seed)
  successors = rng.integers(0, vocab, size=(vocab, 2))  # 2 likely next words per word
  files = {}
  for split, count in zip(('train', 'valid', 'test'), lines):
    path = os.path.join(folder, f'{split}.txt')
    with open(path, 'w', encoding='utf-8') as f:
      for _ in range(count):
        words = [rng.integers(0, vocab)]
        for _ in range(rng.integers(8, 16)):
          likely = successors[words[-1], rng.integers(0, 2)]
          words.append(likely if rng.random() < 0.9 else rng.integers(0, vocab))
        f.write(' '.join(f'w{w}' for w in words) + '\n')
    files[split] = path
  return files


def tiny_config(files: dict, **train):
  config = base_config()
  config.data.corpus = 'text'
  config.data.train_file, config.data.valid_file, config.data.test_file = (
      files['train'], files['valid'], files['test'])
  config.data.max_rare_count = 0
  config.data.vocab_scope = 'train'
  config.model.update(n=3, m=8, h=16, direct=True)
  config.optimizer.update(name='adamw', learning_rate=1e-2)
  config.train.update(batch_size=32, num_epochs=3, eval_batch_size=64, log_every=50, patience=0)
  config.train.update(train)
  return config
