"""A trained model in a plain, versioned format that loads without this package (numpy alone).

python -m nplm_jax.tools.export --workdir=runs/brown_mlp1_tuned --output=exported/brown_mlp1

writes two files into the output folder:
- model.json: {"format": "nplm_jax", "version": 1, the architecture (n, m, h, direct), the formula,
  each array's shape, the vocabulary (word i = id i) with its training counts, and the tokenizer
  (how a line of text becomes tokens, the boundary symbol that fills the first contexts, the
  rare-word symbol unknown words are read as)};
- params.npz: C [|V|, m], H [(n-1)m, h] and d [h] (when h > 0), U [h, |V|] (h > 0), W [(n-1)m, |V|]
  (direct connections), b [|V|]: float32, the vocabulary's padding left out.

With x = [C[w_{t-1}], ..., C[w_{t-n+1}]] (the most recent word first, each a row of C):
  y = b + x @ W + tanh(d + x @ H) @ U,   P(w_t = i | context) = exp(y_i) / sum_j exp(y_j).
docs/tools.md ("Exporting a model") shows it loaded and used with numpy only.
"""

if __name__ == '__main__':  # python -m here is the command (nplm_jax/commands/export.py), before the imports
  from nplm_jax import entry  # pylint: disable=g-import-not-at-top  # below: it checks the flags before JAX's
  entry.run_command('nplm_jax.commands.export', early='check_flags')  # exits

import json

import numpy as np

from nplm_jax.models import output_layer
from nplm_jax.models import family as model_family
from nplm_jax.tools import trained as trained_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import UserError

FORMAT = 'nplm_jax'
VERSION = 1
FORMULA = ('x = concat(C[w_{t-1}], ..., C[w_{t-n+1}]); y = b + x @ W + tanh(d + x @ H) @ U; P(w_t = i) = softmax(y)_i '
           '(W absent without direct connections; H, d, U absent when h = 0)')


def exported_arrays(model: trained_lib.TrainedModel) -> dict[str, np.ndarray]:
  """The best parameters under the paper's names, float32, without the vocabulary's padding."""
  params = {k: np.asarray(v, np.float32) for k, v in model.params.items()}
  size = len(model.vocab)
  output = params[output_layer.OUTPUT][:, :size]
  arrays = {'C': params['C'][:size]}
  if 'H' in params:
    arrays.update(H=params['H'], d=params['d'])
  for name, rows in model.run.model.output_rows().items():
    arrays[name] = output[rows][0] if name == 'b' else output[rows]
  return arrays


def header(model: trained_lib.TrainedModel, arrays: dict[str, np.ndarray]) -> dict:
  m = model.config.model
  return {
      'format': FORMAT, 'version': VERSION,
      'model': {'n': m.n, 'm': m.m, 'h': m.h, 'direct': m.direct, 'formula': FORMULA,
                'context_order': 'most recent word first'},
      'arrays': {k: list(v.shape) for k, v in arrays.items()},
      'trained': {'step': model.step, 'corpus': model.config.data.corpus, 'name': model.config.name},
      'tokenizer': model.vocabulary.tokenizer.to_json(),
      'vocabulary': list(model.vocab),
      'train_counts': model.train_counts.tolist(),
  }


def export(workdir_path: str, output: str, devices=None) -> str:
  folder = workdir_lib.output_folder(output, '--output')
  model = trained_lib.TrainedModel.load(workdir_path, devices)
  if model_family.kind(model.config.model) != model_family.BENGIO2003:
    raise UserError(f"--workdir={workdir_path!r} holds a model.kind={model.config.model.kind!r} model; export writes "
                    "the 2003 model's arrays (C, H, d, U, W, b) only: use nplm-score, nplm-sample and "
                    "nplm-embeddings on the workdir itself")
  if model.config.model.get('distant_tokens', 0):
    raise UserError(f"--workdir={workdir_path!r} holds a 2003 model with a distant block "
                    f"(model.distant_tokens={model.config.model.distant_tokens}), outside the paper's formula that export "
                    "writes: use nplm-score, nplm-sample and nplm-embeddings on the workdir itself")
  arrays = exported_arrays(model)
  try:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / 'params.npz').open('wb') as f:
      np.savez(f, **arrays)
    workdir_lib.write_text_atomically(folder / 'model.json', json.dumps(header(model, arrays), indent=1) + '\n')
  except OSError as e:
    raise UserError(f'--output={output!r} cannot be written ({e.strerror or e}); choose a folder you can write to') from None
  return str(folder)
