"""Train-step time and per-device memory of one config at several meshes on host CPU devices.

python benchmarks/parallel_step.py --config=experiments/brown.py:mlp1 --meshes=1x1,1x8,8x1 --devices=8 \
  [--config.section.key=value ...]

Host "devices" share this machine's cores, so the figures show the cost of the sharded program's
communication and layout, not a speed-up; on a GPU/TPU mesh each device is real hardware.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

config_flags.DEFINE_config_file('config', 'experiments/brown.py:mlp1', 'Experiment config.', lock_config=True)
flags.DEFINE_list('meshes', ['1x1', '1x8', '8x1'], 'data x model shapes.')
flags.DEFINE_integer('devices', 8, 'Host CPU devices to create.')
flags.DEFINE_integer('batch_size', 256, 'Batch size.')
flags.DEFINE_integer('vocab', 17_905, '|V| (Brown: 17,905); random token ids are used.')
flags.DEFINE_integer('steps', 5, 'Steps per timed repeat.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats; the median is reported.')
flags.DEFINE_list('softmax_kernels', [], "Output-layer paths to measure side by side ('xla,pallas'); "
                  'default: the config\'s train.softmax_kernel.')
ARGS = flags.FLAGS


def run_mesh(config, shape):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jax.sharding import AxisType, Mesh  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  data, model_axis = shape
  mesh = Mesh(np.asarray(jax.devices()[:data * model_axis]).reshape(shape), ('data', 'model'),
              axis_types=(AxisType.Auto,) * 2)
  return common.time_train_step(config, ARGS.vocab, mesh, ARGS.steps, ARGS.repeats)


def main(argv):
  del argv
  if ARGS.devices > 1:  # before JAX starts
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                               f' --xla_force_host_platform_device_count={ARGS.devices}').strip()
  import jax  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  config = ARGS.config
  config.train.batch_size = ARGS.batch_size
  shapes = [tuple(int(x) for x in m.split('x')) for m in ARGS.meshes]
  print(f'{jax.device_count()} {jax.devices()[0].platform} devices; {ARGS["config"].serialize()}, |V|={ARGS.vocab}, '
        f'batch {ARGS.batch_size}')
  rows = []
  for kernel in ARGS.softmax_kernels or [config.train.softmax_kernel]:
    config.train.softmax_kernel = kernel
    rows += [dict(run_mesh(config, s), softmax_kernel=kernel) for s in shapes]
  header = ['mesh', 'softmax_kernel', 'step_ms', 'train_tokens_per_sec', 'arguments_mib', 'temp_mib', 'output_layer_mib_per_device']
  print(' | '.join(header))
  for row in rows:
    print(' | '.join(str(row.get(h, '')) for h in header))
  for row in rows:
    common.emit(row)


if __name__ == '__main__':
  app.run(main)
