"""Which output-layer columns serve words outside the vocabulary? Each rule of nplm-extend, scored.

python -m launch.oov_output_columns --workdir=runs/brown_mlp1_tuned_seed0 --text=runs/brown_test.txt

The model of --workdir is extended with the words of --text outside its vocabulary once per rule of
nplm_jax.tools.extend.OUTPUT_COLUMNS (each into a scratch workdir, deleted after), and each
extended model scores the text: the perplexity of the known words' tokens and of the new words'
tokens. Every context reads the new words as the rare-word symbol, as their vectors were made, so
the rules differ only in the columns the new words get. The first row is the original model, which
predicts every new word as the rare-word symbol (no new-words figure). In sample: the rules'
averages come from the text they score.
"""

import json
import tempfile

import numpy as np

from nplm_jax import cli as cli_lib
from nplm_jax.data import text_input
from nplm_jax.errors import UserError

ORIGINAL = '(the original model: new words are `<unk>`)'
CHUNK = 8192  # contexts scored at a time: [CHUNK, |V|] float32 log-probabilities in memory


def token_log_probs(model, words: list[str], base_vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
  """(log P(token | context) for every token of `words`, which tokens are new words). Contexts read the
  words outside the first base_vocab_size (and any outside the model's vocabulary) as the rare-word symbol."""
  targets, outside = model.to_ids(words)
  new = outside | (targets >= base_vocab_size)
  contexts = model.contexts(np.where(new, model.rare_id, targets).astype(np.int32))
  log_probs = np.empty(len(words))
  for begin in range(0, len(words), CHUNK):
    chunk = model.next_word_log_probs(contexts[begin:begin + CHUNK], dtype=np.float32)
    log_probs[begin:begin + CHUNK] = chunk[np.arange(len(chunk)), targets[begin:begin + CHUNK]]
  return log_probs, new


def perplexity(log_probs: np.ndarray) -> float | None:
  return float(np.exp(-log_probs.mean())) if len(log_probs) else None


def measure(workdir_path: str, lines: list[str]) -> dict:
  """{'output_columns': [[rule, known tokens' perplexity, new words' tokens' perplexity]] (the original model,
  then each rule), 'test_ppl': the original model's over every token, 'added_words', 'extended_vocab'}."""
  from nplm_jax.tools import extend as extend_lib  # pylint: disable=g-import-not-at-top  # JAX after the flags
  from nplm_jax.tools import trained as trained_lib  # pylint: disable=g-import-not-at-top
  original = trained_lib.TrainedModel.load(workdir_path)
  words = [w for line in lines for w in original.line_tokens(line)]
  base = len(original.vocab)
  log_probs, new = token_log_probs(original, words, base)
  if not new.any():
    raise UserError(f'every word of the text is in the vocabulary of {workdir_path!r}; no new words to score')
  rows = [[ORIGINAL, perplexity(log_probs[~new]), None]]
  whole = perplexity(log_probs)
  with tempfile.TemporaryDirectory() as scratch:
    for rule, description in extend_lib.OUTPUT_COLUMNS.items():
      path = f'{scratch}/{rule}'
      extend_lib.extend(workdir_path, lines, path, output_columns=rule)
      extended = trained_lib.TrainedModel.load(path)
      log_probs, new = token_log_probs(extended, words, base)
      default = ' (the default)' if rule == extend_lib.DEFAULT_OUTPUT_COLUMNS else ''
      rows.append([f'`{rule}`{default}: {description}', perplexity(log_probs[~new]), perplexity(log_probs[new])])
      trained_lib.release(extended.run)
  return {'output_columns': rows, 'test_ppl': whole, 'test_tokens': len(words), 'added_words': len(extended.vocab) - base,
          'extended_vocab': len(extended.vocab)}


def main(argv=None) -> int:
  parser = cli_lib.ArgumentParser('launch.oov_output_columns', description=__doc__.splitlines()[0])
  parser.add_argument('--workdir', required=True, help='a trained workdir whose corpus merged rare words')
  parser.add_argument('--text', required=True, help='text with words outside the vocabulary, in context')
  args = parser.parse_args(argv)
  figures = measure(args.workdir, text_input.read_lines(args.text, '--text'))
  print("| new words' output columns | known tokens' perplexity | new words' tokens' perplexity |\n| --- | --- | --- |")
  for rule, known, new in figures['output_columns']:
    print(f'| {rule} | {known:,.1f} | {"" if new is None else f"{new:,.1f}"} |')
  print(f"the original model over all {figures['test_tokens']:,} tokens: {figures['test_ppl']:.2f}")
  print(json.dumps(figures))
  return 0


if __name__ == '__main__':
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top
  entry.run_command('__main__')
