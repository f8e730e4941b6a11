"""The device mesh ('data', 'model') and where each array lives on it.

Batches split on 'data' (data parallelism). U, W, b split their vocabulary axis on 'model' (the
paper's parameter parallelism); C, H, d are small and replicated. Optimiser state follows the
parameter it belongs to.
"""

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from nplm_jax import model as model_lib
from nplm_jax.errors import UserError

AXES = ('data', 'model')


def mesh_shape(data: int, model: int, num_devices: int) -> tuple[int, int]:
  """(data, model) with one -1 filled from the device count; checked before anything compiles."""
  if data == -1 and model == -1:
    raise UserError('mesh.data and mesh.model are both -1; fix one of them, e.g. --config.mesh.model=1')
  for name, value in (('data', data), ('model', model)):
    if value == 0 or value < -1:
      raise UserError(f'mesh.{name}={value} is invalid; use a positive size or -1 to fill')
  if data == -1:
    data = num_devices // model if num_devices % model == 0 else -1
  if model == -1:
    model = num_devices // data if num_devices % data == 0 else -1
  if data < 1 or model < 1 or data * model != num_devices:
    raise UserError(f'mesh (data, model) = ({data}, {model}) does not fit {num_devices} devices; '
                    f'make --config.mesh.data * --config.mesh.model equal {num_devices}')
  return data, model


def make_mesh(mesh_config, devices=None) -> Mesh:
  devices = jax.devices() if devices is None else devices
  shape = mesh_shape(mesh_config.data, mesh_config.model, len(devices))
  return Mesh(np.asarray(devices).reshape(shape), AXES, axis_types=(AxisType.Auto,) * 2)


def check_divisibility(mesh: Mesh, batch_size: int, eval_batch_size: int, padded_vocab: int) -> None:
  data, model = mesh.shape['data'], mesh.shape['model']
  for name, size in (('train.batch_size', batch_size), ('train.eval_batch_size', eval_batch_size)):
    if size % data:
      raise UserError(f'{name}={size} is not divisible by mesh.data={data}; use a multiple of {data}')
  if padded_vocab % model:
    raise UserError(f'the padded vocabulary ({padded_vocab}) does not split over mesh.model={model}; '
                    f'set --config.model.vocab_pad_multiple to a multiple of {model}')


def spec_for(path) -> P:
  """The partition spec of a parameter, or of optimiser state that mirrors one, by its name."""
  names = [getattr(k, 'key', getattr(k, 'name', None)) for k in path]
  name = next((n for n in reversed(names) if n in model_lib.VOCAB_SHARDED or n in ('C', 'H', 'd')), None)
  if name == 'b':
    return P('model')
  if name in ('U', 'W'):
    return P(None, 'model')
  return P()


def tree_shardings(mesh: Mesh, abstract_tree):
  """NamedShardings for every leaf of a (possibly abstract) pytree of params or train state."""
  def leaf(path, x):
    spec = spec_for(path) if getattr(x, 'ndim', 0) else P()
    return NamedSharding(mesh, spec)
  return jax.tree_util.tree_map_with_path(leaf, abstract_tree)


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
  return NamedSharding(mesh, P('data', *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())
