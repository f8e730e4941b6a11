"""The device mesh ('data', 'model') and where each array lives on it.

Batches split on 'data' (data parallelism). Parameters are placed by the logical names of their
axes (config.mesh.axis_rules): the output layer [U; W; b] splits its vocabulary axis on 'model' (the
paper's parameter parallelism); by default everything else is replicated. Optimiser state follows
the parameter it belongs to.
"""

import os

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from nplm_jax import config as config_lib
from nplm_jax.errors import UserError

AXES = ('data', 'model')


def host_device_count(requested: int, cores: int) -> int:
  """Host CPU devices to create: -1 = one per core, rounded down to a power of two (at most 8) so
  the vocabulary, padded to a multiple of 8, splits evenly over them."""
  if requested >= 0:
    return requested
  count = 1
  while count * 2 <= min(cores, 8):
    count *= 2
  return count


def usable_cores() -> int:
  """Cores this process may run on; os.sched_getaffinity does not exist on macOS or Windows."""
  if hasattr(os, 'sched_getaffinity'):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def configure_host_devices(config, environ=os.environ) -> None:
  """Splits the CPU backend into config.mesh.cpu_devices host devices (0: the model family's default,
  config.requested_cpu_devices); must run before JAX initialises its backends.

  On CPU, blocks of the vocabulary on separate host devices run in parallel on separate cores:
  2.06x the single-device step of Brown MLP1 on a 2-core machine (benchmarks/parallel_step.py). An explicit
  --xla_force_host_platform_device_count in XLA_FLAGS wins; accelerators are unaffected.
  """
  flags = environ.get('XLA_FLAGS', '')
  count = host_device_count(config_lib.requested_cpu_devices(config), usable_cores())
  if count > 1 and 'xla_force_host_platform_device_count' not in flags:
    environ['XLA_FLAGS'] = f'{flags} --xla_force_host_platform_device_count={count}'.strip()


def without_host_device_count(environ=os.environ) -> str:
  """environ's XLA_FLAGS without --xla_force_host_platform_device_count (which configure_host_devices may have
  set in this process): for a child process that chooses its own count, keeping every other flag."""
  flags = environ.get('XLA_FLAGS', '').split()
  return ' '.join(flag for flag in flags if not flag.startswith('--xla_force_host_platform_device_count'))


def mesh_shape(data: int, model: int, num_devices: int, platform: str = 'cpu') -> tuple[int, int]:
  """(data, model) with -1 filled from the device count; checked before anything compiles.

  Both -1 (auto): every device on 'model' on CPU (vocabulary blocks per core, the paper's CPU
  scheme: replicated-gradient all-reduces are slow there), every device on 'data' on accelerators.
  """
  if data == -1 and model == -1:
    return (1, num_devices) if platform == 'cpu' else (num_devices, 1)
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


def evaluation_mesh_shape(num_devices: int, padded_vocab: int, platform: str = 'cpu') -> tuple[int, int]:
  """(data, model) for evaluating a trained model on `num_devices` devices, whatever mesh it was trained on
  (checkpoints move between meshes): on CPU as many of them on 'model' as split the padded vocabulary (its
  size is in the checkpoint, so it cannot be padded again) and the rest on 'data'; on accelerators all on 'data'."""
  if platform != 'cpu':
    return num_devices, 1
  model = max(d for d in range(1, num_devices + 1) if num_devices % d == 0 and padded_vocab % d == 0)
  return num_devices // model, model


def make_mesh(mesh_config, devices=None) -> Mesh:
  devices = jax.devices() if devices is None else devices
  shape = mesh_shape(mesh_config.data, mesh_config.model, len(devices), devices[0].platform)
  return Mesh(np.asarray(devices).reshape(shape), AXES, axis_types=(AxisType.Auto,) * 2)


def check_divisibility(mesh: Mesh, batch_size: int, eval_batch_size: int, padded_vocab: int) -> None:
  data, model = mesh.shape['data'], mesh.shape['model']
  for name, size in (('train.batch_size', batch_size), ('train.eval_batch_size', eval_batch_size)):
    if size % data:
      raise UserError(f'{name}={size} is not divisible by mesh.data={data}; use a multiple of {data}')
  if padded_vocab % model:
    raise UserError(f'the padded vocabulary ({padded_vocab}) does not split over mesh.model={model}; '
                    f'set --config.model.vocab_pad_multiple to a multiple of {model}')


def param_specs(logical_specs, axis_rules) -> dict:
  """Each parameter's PartitionSpec on the mesh: its logical axis names (output_layer.logical_specs) mapped
  by config.mesh.axis_rules ({'vocab': 'model', 'hidden': '', ...}; '' or a name not in the rules =
  replicated)."""
  rules = {name: axis or None for name, axis in dict(axis_rules).items()}
  return jax.tree.map(lambda spec: P(*(rules.get(name) for name in spec)), logical_specs,
                      is_leaf=lambda x: isinstance(x, P))


def check_param_divisibility(mesh: Mesh, abstract_params, logical, axis_rules) -> None:
  """One line of error, before anything compiles, for a parameter axis that a rule puts on a mesh axis
  whose size does not divide it (mesh.axis_rules.hidden='model' with h = 10 on 4 devices)."""
  rules = dict(axis_rules)
  flat_logical = dict(jax.tree_util.tree_flatten_with_path(logical, is_leaf=lambda x: isinstance(x, P))[0])
  for path, x in jax.tree_util.tree_flatten_with_path(abstract_params)[0]:
    for size, name in zip(x.shape, flat_logical.get(path, P())):
      axis = rules.get(name) or None
      if name != 'vocab' and axis and size % mesh.shape[axis]:
        raise UserError(f"mesh.axis_rules.{name}={axis!r} splits parameter {jax.tree_util.keystr(path)}'s {size} "
                        f"{name} units over mesh.{axis}={mesh.shape[axis]}, which does not divide them; make them a "
                        f"multiple of {mesh.shape[axis]} or set --config.mesh.axis_rules.{name}=''")


def named_shardings(mesh: Mesh, logical_tree, axis_rules):
  """NamedShardings for a tree of logical PartitionSpecs (flax's nn.get_partition_spec of boxed
  parameters, or of a train state whose optimiser state was initialised from them: its moments carry
  their parameter's axis names, its counts none), each name mapped by config.mesh.axis_rules."""
  return jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_specs(logical_tree, axis_rules),
                      is_leaf=lambda x: isinstance(x, P))


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
  return NamedSharding(mesh, P('data', *([None] * (ndim - 1))))


def process_rows(mesh: Mesh, global_rows: int) -> np.ndarray:
  """The rows of a [global_rows, ...] batch (split on 'data') that this process's devices hold.

  In the order jax.make_array_from_process_local_data expects them: the process's row blocks
  concatenated in increasing order. All rows when 'data' does not span processes.
  """
  index_map = batch_sharding(mesh, 1).addressable_devices_indices_map((global_rows,))
  blocks = sorted({index[0].indices(global_rows)[:2] for index in index_map.values()})
  return np.concatenate([np.arange(start, stop) for start, stop in blocks])


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def put_batch(mesh: Mesh, array):
  """A host batch as a global array sharded on 'data' (each process holds the whole batch)."""
  sh = batch_sharding(mesh, array.ndim)
  return jax.make_array_from_callback(array.shape, sh, lambda index: array[index])


def put_process_rows(mesh: Mesh, rows, global_rows: int):
  """A global batch of `global_rows` from this process's rows only (sharding.process_rows' order)."""
  sh = batch_sharding(mesh, rows.ndim)
  return jax.make_array_from_process_local_data(sh, rows, (global_rows, *rows.shape[1:]))
