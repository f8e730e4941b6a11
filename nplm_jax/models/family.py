"""The model family a config trains (model.kind): the 2003 model (bengio2003.py) or the revisited
feed-forward family (revisited.py). Both have the interface training and the tools use."""

import math

import jax

from nplm_jax import backend_defaults
from nplm_jax.models import bengio2003 as model_lib
from nplm_jax.models import output_layer
from nplm_jax.models import revisited

BENGIO2003, REVISITED = 'bengio2003', 'revisited'


def kind(model_config) -> str:
  return model_config.get('kind', BENGIO2003)  # configs saved before model.kind existed are the 2003 model


SMALL_VOCAB = 128  # characters: on the CPU the distant block's one-hot form gained up to 128, lost at 256
SMALL_VOCAB_DISTANT = 'model.distant_gradient, small |V|'  # its backend_defaults.TABLE entries
SMALL_VOCAB_EMBEDDING = 'model.embedding_gradient, small |V|'


def gradient_forms(model_config, platform: str, deterministic: bool = True, vocab_size: int = 0) -> tuple[str, str]:
  """(model.embedding_gradient, model.distant_gradient), each 'auto' resolved for the backend `platform`:
  the forms measured fastest there under deterministic reductions (backend_defaults.TABLE: 'sorted' on
  GPUs for both families; 'counts' beside it for the revisited family's distant block); the scatter and
  the rows where nothing else was measured (GPU steps without deterministic reductions), and the rows
  where 'counts' cannot serve (dropout on each input vector; the 2003 model has no distant block). For a
  vocabulary of at most SMALL_VOCAB (characters) in the revisited family, the forms measured for those
  where they were (backend_defaults.TABLE's 'model.distant_gradient, small |V|': 'one_hot' on CPUs and
  GPUs; 'model.embedding_gradient, small |V|': 'one_hot' beside it on GPUs), where the distant block's
  one-hot form can serve (not with dropout on each input vector)."""
  measured = deterministic or platform != 'gpu'
  embedding, distant = model_config.get('embedding_gradient', 'scatter'), model_config.get('distant_gradient', 'rows')
  weighs_words = kind(model_config) == REVISITED and model_config.get('feature_dropout_at', 'features') != 'embeddings'
  small = 0 < vocab_size <= SMALL_VOCAB and weighs_words and measured
  small_distant = backend_defaults.backend_default(SMALL_VOCAB_DISTANT, platform) if small else None
  if embedding == 'auto':  # the small vocabulary's form only beside the distant block's: the pair measured
    small_embedding = backend_defaults.backend_default(SMALL_VOCAB_EMBEDDING, platform) if (
        small and distant in ('auto', small_distant)) else None
    embedding = small_embedding or (
        backend_defaults.backend_default('model.embedding_gradient', platform) if measured else 'scatter')
  if distant == 'auto':  # measured beside 'sorted' alone
    distant = small_distant or (backend_defaults.backend_default('model.distant_gradient', platform) if (
        measured and weighs_words and embedding == 'sorted') else 'rows')
  return embedding, distant


def from_config(model_config, vocab_size: int, platform: str = 'cpu', deterministic: bool = True):
  """The module of a config, its compute dtype and forms of C's gradient resolved for the backend
  `platform` (and train.deterministic)."""
  embedding_gradient, distant_gradient = gradient_forms(model_config, platform, deterministic, vocab_size)
  if kind(model_config) == REVISITED:
    return revisited.from_config(model_config, vocab_size,
                                 model_lib.compute_dtype(model_config.compute_dtype, platform),
                                 embedding_gradient, distant_gradient)
  return model_lib.from_config(model_config, vocab_size, platform, embedding_gradient)


def parameter_split(model) -> tuple[int, int]:
  """(numbers outside the output layer, the output layer's rows), from the parameters' shapes alone
  (nothing is allocated, whatever the sizes)."""
  shapes = jax.eval_shape(lambda: output_layer.init_params(model))
  output = shapes[output_layer.OUTPUT].shape
  return sum(math.prod(x.shape) for x in jax.tree.leaves(shapes)) - math.prod(output), output[0]


def num_parameters(model) -> int:
  """Trained numbers, the output layer's padded columns left out (the paper's count for the 2003 model)."""
  others, output_rows = parameter_split(model)
  return others + output_rows * model.vocab_size
