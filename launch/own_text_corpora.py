"""Plain-text corpora for checking a recipe on text it was not tuned on, built from the corpora at hand.

python -m launch.own_text_corpora --out=runs/corpora

Writes three folders of train.txt, valid.txt and test.txt (one sentence a line, tokens split by
spaces), each read by `experiments/text.py` as any user's text:
- brown: the Brown corpus's sentences in corpus order (NLTK, NLTK_DATA), cut at the sentence that
  reaches the paper's 800,000 training and 200,000 validation words, the rest test; words as written;
- ptb: Mikolov's PTB files as they are ($PTB_DIR), copied so every corpus is one folder;
- brown_ptb: the two together, about 2M training tokens and |V| 31k: Brown cut at 1,000,000 training and
  80,000 validation words, each word its training lines hold once written <unk> (PTB's convention of a
  closed vocabulary), then PTB's lines, in each file.
Prints each folder's token and type counts of the training file.
"""

import argparse
import collections
import os
import shutil

from nplm_jax.data import corpora

SPLITS = corpora.SPLITS
BROWN_SPLIT = (800_000, 200_000)  # the paper's training and validation words
MIXED_BROWN_SPLIT = (1_000_000, 80_000)  # brown_ptb's Brown part: with PTB's, about 2M training tokens


def brown_sentences() -> list[list[str]]:
  corpora.load_brown_words()  # fails in one line when NLTK_DATA holds no Brown corpus
  from nltk.corpus import brown  # pylint: disable=g-import-not-at-top
  return [list(s) for s in brown.sents()]


def split_sentences(sentences: list[list[str]], sizes: tuple[int, int]) -> dict[str, list[str]]:
  """Lines of each split: a split takes sentences until its word count reaches its size."""
  lines = {split: [] for split in SPLITS}
  split, words = 0, 0
  for sentence in sentences:
    if split < len(sizes) and words >= sizes[split]:
      split, words = split + 1, 0
    lines[SPLITS[split]].append(' '.join(sentence))
    words += len(sentence)
  return lines


def rare_as_unknown(lines: dict[str, list[str]], most: int = 1) -> dict[str, list[str]]:
  """The lines with each word seen at most `most` times in the training lines written corpora.RARE."""
  counts = collections.Counter(w for line in lines['train'] for w in line.split())
  return {split: [' '.join(w if counts[w] > most else corpora.RARE for w in line.split()) for line in rows]
          for split, rows in lines.items()}


def write(folder: str, lines: dict[str, list[str]]) -> None:
  os.makedirs(folder, exist_ok=True)
  for split, rows in lines.items():
    with open(os.path.join(folder, f'{split}.txt'), 'w', encoding='utf-8') as f:
      f.write('\n'.join(rows) + '\n')


def read(folder: str) -> dict[str, list[str]]:
  out = {}
  for split in SPLITS:
    with open(os.path.join(folder, f'{split}.txt'), encoding='utf-8') as f:
      out[split] = f.read().splitlines()
  return out


def describe(folder: str) -> str:
  counts = collections.Counter()
  lines = 0
  with open(os.path.join(folder, 'train.txt'), encoding='utf-8') as f:
    for line in f:
      counts.update(line.split())
      lines += 1
  return (f'{folder}: train {sum(counts.values()) + lines:,} tokens with <eos>, {len(counts) + 1:,} types with '
          '<eos>')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--out', default='runs/corpora', help='the folder to write brown/, ptb/ and brown_ptb/ into')
  parser.add_argument('--ptb', default=os.environ.get('PTB_DIR', ''), help='the folder of ptb.{train,valid,test}.txt')
  args = parser.parse_args(argv)
  if not args.ptb or not os.path.isdir(args.ptb):
    parser.error(f'--ptb={args.ptb!r} is not a folder; set PTB_DIR or --ptb to the folder of ptb.train.txt')
  sentences = brown_sentences()
  brown = os.path.join(args.out, 'brown')
  write(brown, split_sentences(sentences, BROWN_SPLIT))
  ptb = os.path.join(args.out, 'ptb')
  os.makedirs(ptb, exist_ok=True)
  for split in SPLITS:
    shutil.copyfile(os.path.join(args.ptb, f'ptb.{split}.txt'), os.path.join(ptb, f'{split}.txt'))
  brown_lines, ptb_lines = rare_as_unknown(split_sentences(sentences, MIXED_BROWN_SPLIT)), read(ptb)
  write(os.path.join(args.out, 'brown_ptb'), {s: brown_lines[s] + ptb_lines[s] for s in SPLITS})
  for name in ('brown', 'ptb', 'brown_ptb'):
    print(describe(os.path.join(args.out, name)))
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
