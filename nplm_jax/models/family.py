"""The model family a config trains (model.kind): the 2003 model (model.py) or the revisited
feed-forward family (revisited.py). Both have the interface training and the tools use."""

import math

import jax

from nplm_jax.models import bengio2003 as model_lib
from nplm_jax.models import output_layer
from nplm_jax.models import revisited

BENGIO2003, REVISITED = 'bengio2003', 'revisited'


def kind(model_config) -> str:
  return model_config.get('kind', BENGIO2003)  # configs saved before model.kind existed are the 2003 model


def from_config(model_config, vocab_size: int, platform: str = 'cpu'):
  """The module of a config, its compute dtype resolved for the backend `platform`."""
  if kind(model_config) == REVISITED:
    return revisited.from_config(model_config, vocab_size,
                                 model_lib.compute_dtype(model_config.compute_dtype, platform))
  return model_lib.from_config(model_config, vocab_size, platform)


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
