"""Words outside the vocabulary get feature vectors by the paper's recipe, in a new workdir.

python -m nplm_jax.tools.extend --workdir=runs/brown_mlp1_tuned --text=FILE --output_workdir=runs/extended

Bengio et al. (2003, section 5): an out-of-vocabulary word j met in context h gets the feature
vector the network expects there, C(j) = sum over i in V of C(i) P(i | h). Each word of FILE (as
the corpus tokenises it) outside V gets that vector averaged over its occurrences in FILE (the
contexts read unknown words as the rare-word symbol). The output layer needs a column for it
too. Its U and W rows are the same average, sum_i P(i | h) [U; W]_i over j's occurrences, so the
network favours j where it expects the words that stand in j's places; its bias is the rare-word
symbol's bias minus log k (k words added), so the new words share the rare-word symbol's prior
mass (in training every one of them was that symbol). On Brown this rule keeps the known words'
perplexity within 3.2% and gives the new words 3.8x the probability of a uniform split of the
rare-word symbol's; averaging the biases too took mass from the known words (docs/studies/oov_words.md;
--output_columns picks another rule, OUTPUT_COLUMNS). The new workdir holds the config,
the vocabulary plus the new words (vocab.tsv; added_words.json records them) and the extended best
parameters; score, sample, embeddings and plot read it like any other (it cannot be trained on).
"""

if __name__ == '__main__':  # python -m here is the command (nplm_jax/commands/extend.py), before the imports
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top  # below: it checks the flags before JAX's
  entry.run_command('nplm_jax.commands.extend', early='check_flags')  # exits


import jax
import numpy as np

from nplm_jax.training import checkpoint as ckpt_lib
from nplm_jax import config as config_lib
from nplm_jax.data import corpora as data_lib
from nplm_jax.models import output_layer
from nplm_jax.tools import trained as trained_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.data import workdir_vocab
from nplm_jax.errors import UserError


def unknown_word_rows(model: trained_lib.TrainedModel, lines: list[str], with_columns: bool = True):
  """(words, counts, C rows [k, m], output columns [k, K + 1] or, without with_columns, None) for the
  words of `lines` outside V."""
  words = [w for line in lines for w in model.line_tokens(line)]
  if model.rare_id is None and any(w not in model.word_ids for w in words):
    raise UserError(f'this model\'s corpus has no {data_lib.RARE} symbol, which the recipe reads unknown words in '
                    'contexts as and whose bias the new words share; extend a model trained with rare words merged')
  ids, oov = model.to_ids(words)
  if not oov.any():
    return [], np.zeros(0, np.int64), None, None
  contexts = model.contexts(ids)[oov]
  features, columns = model.expected_rows(contexts, with_columns)
  occurrences = [w for w, o in zip(words, oov) if o]
  new_words = list(dict.fromkeys(occurrences))  # first-appearance order
  index = {w: i for i, w in enumerate(new_words)}
  which = np.array([index[w] for w in occurrences])
  new_c, counts = trained_lib.group_means(features.astype(np.float64), which, len(new_words))
  new_columns = trained_lib.group_means(columns.astype(np.float64), which, len(new_words))[0] if with_columns else None
  return new_words, counts, new_c, new_columns


# The new words' output columns (each a U and W row and a bias), by rule. The out-of-vocabulary
# study (docs/studies/oov_words.md) scores each on Brown's test split; the default keeps the known words'
# perplexity closest to the original model's.
OUTPUT_COLUMNS = {
    'expected': 'the expected U, W and b rows (the average of the columns)',
    'expected_rare_prior': 'the expected U and W rows, the rare-word symbol\'s bias minus log k',
    'rare_split': 'the rare-word symbol\'s column, its bias minus log k (a uniform split of its prior)',
}
DEFAULT_OUTPUT_COLUMNS = 'expected_rare_prior'


def new_output_columns(model: trained_lib.TrainedModel, expected_columns: np.ndarray,
                       rule: str = DEFAULT_OUTPUT_COLUMNS) -> np.ndarray:
  """[k, K + 1]: the k new words' columns (their U and W rows, then the bias) by one of OUTPUT_COLUMNS."""
  if rule not in OUTPUT_COLUMNS:
    raise UserError(f'unknown output-column rule {rule!r}; use one of {", ".join(OUTPUT_COLUMNS)}')
  if rule == 'expected':
    return expected_columns
  k = len(expected_columns)
  rare_column = np.asarray(model.params[output_layer.OUTPUT], np.float64)[:, model.rare_id]
  rows = np.tile(rare_column[:-1], (k, 1)) if rule == 'rare_split' else expected_columns[:, :-1]
  return np.concatenate([rows, np.full((k, 1), rare_column[-1] - np.log(k))], axis=1)


def extended_params(model: trained_lib.TrainedModel, new_c: np.ndarray, new_columns: np.ndarray) -> dict:
  """The best parameters with rows of C and columns of the output layer added for the new words."""
  params = jax.tree.map(np.asarray, model.params)
  vocab_size = len(model.vocab) + len(new_c)
  padded = output_layer.padded_size(vocab_size, model.config.model.vocab_pad_multiple)
  old = params[output_layer.OUTPUT][:, :len(model.vocab)]
  output = np.zeros((old.shape[0], padded), old.dtype)
  output[-1, vocab_size:] = output_layer.PADDING_LOGIT
  output[:, :len(model.vocab)] = old
  output[:, len(model.vocab):vocab_size] = new_columns.T
  params['C'] = np.concatenate([params['C'], new_c.astype(params['C'].dtype)])
  params[output_layer.OUTPUT] = output
  return params


def extend(workdir_path: str, lines: list[str], output_path: str, devices=None,
           output_columns: str = DEFAULT_OUTPUT_COLUMNS) -> dict:
  output = workdir_lib.Workdir(output_path)
  workdir_lib.output_folder(output_path, '--output_workdir')
  model = trained_lib.TrainedModel.load(workdir_path, devices)
  new_words, counts, new_c, new_columns = unknown_word_rows(model, lines)
  if not new_words:
    raise UserError(f'every word of the text is in the vocabulary of {workdir_path!r}; nothing to add')
  source, step = workdir_lib.Workdir(workdir_path), model.step
  output.prepare()
  output.write_json('config.json', config_lib.to_saved(model.config))
  model.vocabulary.extended(new_words).write(output)
  # the extended workdir keeps its own record of them, as a training's does (its checkpoint carries checksums)
  output.write_integrity((workdir_vocab.VOCAB_FILE, workdir_vocab.TOKENIZER_FILE))
  output.write_json(workdir_vocab.ADDED_WORDS_FILE, {'words': new_words, 'occurrences': counts.tolist(),
                                             'extended_from': str(source), 'base_vocab_size': len(model.vocab),
                                             'output_columns': output_columns})
  written = ckpt_lib.Checkpoints(output)
  try:
    written.save_best(step, extended_params(model, new_c, new_output_columns(model, new_columns, output_columns)))
  finally:
    written.close()
  summary = {'step': step, 'vocab_size': len(model.vocab) + len(new_words), 'added_words': len(new_words),
             'occurrences': int(counts.sum()), 'extended_from': str(source), 'output_columns': output_columns}
  output.write_json('results.json', summary)
  return summary
