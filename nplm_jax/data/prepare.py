"""A corpus prepared once: vocabulary and token ids on disk, memory-mapped by every later run.

python -m nplm_jax.data.prepare --config=experiments/ptb.py --output=runs/ptb_prepared
python -m nplm_jax.main --config=experiments/prepared.py --config.data.path=runs/ptb_prepared

Text and PTB corpora are read streaming, line by line, twice (once to count words, once to
write ids), so no split is ever held as Python strings; Brown (1.2M words through NLTK) is read
as it always is. Written: DIR/vocab.txt (a word and its count among the train ids a line, in id
order), DIR/{train,valid,test}.npy (uint32 token ids, memory-mappable) and DIR/meta.json (the
source data config, the rare-word rule, the boundary symbol, the sizes, the corpus fingerprint):
with the counts and the fingerprint stored, a training starts without reading the ids whole. The vocabulary, ids and so every
result are those of the corpus read directly (tested); training, evaluation, ngram, mix and the
tools read it with --config.data.corpus=prepared --config.data.path=DIR.
"""

import collections
import json
import os
import time

import numpy as np

from nplm_jax.data import corpora as data_lib
from nplm_jax.files import metrics
from nplm_jax.errors import UserError

WRITE_CHUNK = 1 << 20  # tokens buffered before they go to the memory-mapped file
def count_tokens(path: str, unit: str, blank_lines: str = 'eos') -> tuple[collections.Counter, int]:
  """Word counts in order of first appearance, and the number of tokens."""
  counts, total = collections.Counter(), 0
  for line in data_lib.stream_lines(path, 'counted'):
    tokens = data_lib.line_tokens(line, unit, blank_lines)
    counts.update(tokens)
    total += len(tokens)
  if not total:
    raise data_lib.DataError(f'corpus file {path!r} holds no tokens; give a non-empty text file')
  return counts, total


def write_ids(path: str, unit: str, index: dict[str, int], rare_id: int, out: np.ndarray,
              blank_lines: str = 'eos') -> None:
  """The ids of a file's tokens into `out` (a memory-mapped array of exactly their number)."""
  buffer, at = [], 0
  for line in data_lib.stream_lines(path, 'written as ids'):
    buffer.extend(index.get(w, rare_id) for w in data_lib.line_tokens(line, unit, blank_lines))
    if len(buffer) >= WRITE_CHUNK:
      out[at:at + len(buffer)] = buffer
      at, buffer = at + len(buffer), []
  out[at:at + len(buffer)] = buffer


def text_vocab(data_config, files: dict[str, str], unit: str):
  """(vocab, token counts per split): data.text_vocab from streamed counts."""
  counts, sizes = {}, {}
  for s in data_lib.SPLITS:
    metrics.log(f'counting {files[s]}')
    counts[s], sizes[s] = count_tokens(files[s], unit, data_config.blank_lines)
  return data_lib.text_vocab(counts, data_config.max_rare_count, data_config.vocab_scope), sizes


def prepare(data_config, output: str) -> dict:
  """Writes the prepared corpus to `output` and returns its meta.json."""
  if data_config.corpus == 'prepared':
    raise UserError('--config is already a prepared corpus; give the config of the corpus to prepare')
  if os.path.isfile(output):
    raise UserError(f'--output={output!r} is a file; give a folder to write the prepared corpus to')
  if os.path.isdir(output) and os.listdir(output):
    raise UserError(f'--output={output!r} is not empty; give a new folder')
  started = time.time()
  unit = data_config.unit
  if data_config.corpus == 'brown':
    corpus = data_lib.load_corpus(data_config)
    vocab, sizes = corpus.vocab, {s: corpus.num_tokens(s) for s in data_lib.SPLITS}
  else:
    files = data_lib.split_files(data_config)
    vocab, sizes = text_vocab(data_config, files, unit)
  os.makedirs(output, exist_ok=True)
  index = {w: i for i, w in enumerate(vocab)}
  rare_id = index.get(data_lib.RARE, -1)
  for s in data_lib.SPLITS:
    ids = np.lib.format.open_memmap(os.path.join(output, f'{s}.npy'), mode='w+', dtype=np.uint32, shape=(sizes[s],))
    if data_config.corpus == 'brown':
      ids[:] = corpus.splits[s]
    else:
      metrics.log(f'writing the ids of {files[s]}')
      write_ids(files[s], unit, index, rare_id, ids, data_config.blank_lines)
    ids.flush()
    del ids
  boundary = index[data_lib.EOS] if data_lib.EOS in index and data_config.corpus != 'brown' else 0
  written = data_lib.Corpus(vocab, {s: np.load(os.path.join(output, f'{s}.npy'), mmap_mode='r')
                                    for s in data_lib.SPLITS}, boundary_id=boundary)
  metrics.log('counting the train ids and the fingerprint')
  with open(os.path.join(output, 'vocab.txt'), 'w', encoding='utf-8') as f:
    f.writelines(f'{w}\t{c}\n' for w, c in zip(vocab, written.unigram_counts('train').tolist()))
  meta = {'source': data_config.to_dict(), 'vocab_size': len(vocab), 'boundary_id': boundary,
          'rare_word': data_lib.RARE if rare_id >= 0 else None, 'max_rare_count': data_config.max_rare_count,
          'vocab_scope': data_config.vocab_scope, **{f'{s}_tokens': sizes[s] for s in data_lib.SPLITS},
          'fingerprint': written.fingerprint(), 'seconds': round(time.time() - started, 1)}
  with open(os.path.join(output, data_lib.PREPARED_META), 'w', encoding='utf-8') as f:
    json.dump(meta, f, indent=2)
  return meta


if __name__ == '__main__':  # the command: nplm_jax/commands/prepare.py (python -m here keeps working)
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('nplm_jax.commands.prepare')
