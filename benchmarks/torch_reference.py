"""The same model written plainly in PyTorch (CPU), same shapes and SGD, as a user would compare.

python benchmarks/torch_reference.py --batch_sizes=64,256,1024     (needs benchmarks/requirements.txt)

Prints one JSON line per batch size: batch_size, train_tokens_per_sec, eval_tokens_per_sec.
"""

import argparse
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_seconds  # pylint: disable=g-import-not-at-top,wrong-import-position


class NPLM(nn.Module):
  """y = b + W x + U tanh(d + H x), x the concatenated features of the n-1 previous words."""

  def __init__(self, vocab: int, n: int, m: int, h: int, direct: bool):
    super().__init__()
    self.C = nn.Embedding(vocab, m)
    self.H = nn.Linear((n - 1) * m, h) if h else None  # its bias is d
    self.U = nn.Linear(h, vocab, bias=False) if h else None
    self.W = nn.Linear((n - 1) * m, vocab, bias=False) if direct else None
    self.b = nn.Parameter(torch.zeros(vocab))

  def forward(self, contexts):
    x = self.C(contexts).flatten(1)
    y = self.b
    if self.W is not None:
      y = y + self.W(x)
    if self.U is not None:
      y = y + self.U(torch.tanh(self.H(x)))
    return y


def optimizer_for(model: NPLM, batch_size: int, lr: float, weight_decay: float):
  """The paper's SGD on mean-loss gradients (lr * batch), weight decay on C, H, U, W, not biases."""
  decayed = [p for name, p in model.named_parameters() if name.endswith('weight')]
  biases = [p for name, p in model.named_parameters() if not name.endswith('weight')]
  return torch.optim.SGD([{'params': decayed, 'weight_decay': weight_decay}, {'params': biases, 'weight_decay': 0.0}],
                         lr=lr * batch_size)


def measure(args, batch_size: int) -> dict:
  torch.manual_seed(0)
  model = NPLM(args.vocab, args.n, args.m, args.h, args.direct)
  opt = optimizer_for(model, batch_size, args.lr, args.weight_decay)
  loss_fn = nn.CrossEntropyLoss()
  batches = [(torch.randint(0, args.vocab, (batch_size, args.n - 1)), torch.randint(0, args.vocab, (batch_size,)))
             for _ in range(args.steps)]

  def train_steps():
    for contexts, targets in batches:
      opt.zero_grad(set_to_none=True)
      loss_fn(model(contexts), targets).backward()
      opt.step()

  @torch.no_grad()
  def eval_steps():
    for contexts, targets in batches:
      nn.functional.cross_entropy(model(contexts), targets, reduction='sum').item()

  train_steps()
  eval_steps()
  train_s = median_seconds(train_steps, args.repeats) / args.steps
  eval_s = median_seconds(eval_steps, args.repeats) / args.steps
  return {'framework': 'torch', 'batch_size': batch_size, 'train_tokens_per_sec': round(batch_size / train_s, 1),
          'eval_tokens_per_sec': round(batch_size / eval_s, 1), 'threads': torch.get_num_threads()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--batch_sizes', default='64,256,1024')
  parser.add_argument('--vocab', type=int, default=17_905)
  parser.add_argument('--n', type=int, default=5)
  parser.add_argument('--m', type=int, default=60)
  parser.add_argument('--h', type=int, default=50)
  parser.add_argument('--direct', type=lambda s: s.lower() in ('1', 'true', 'yes'), default=True)
  parser.add_argument('--lr', type=float, default=1e-3)
  parser.add_argument('--weight_decay', type=float, default=1e-4)
  parser.add_argument('--steps', type=int, default=10)
  parser.add_argument('--repeats', type=int, default=5)
  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()  # macOS has none
  parser.add_argument('--threads', type=int, default=cores)
  args = parser.parse_args()
  torch.set_num_threads(args.threads)
  for b in args.batch_sizes.split(','):
    print(json.dumps(measure(args, int(b))), flush=True)


if __name__ == '__main__':
  main()
