"""Train-step time and per-device memory of one config at several meshes on host CPU devices.

python benchmarks/parallel_step.py --config=experiments/brown.py:mlp1 --meshes=1x1,1x8,8x1 --devices=8

Host "devices" share this machine's cores, so the figures show the cost of the sharded program's
communication and layout, not a speed-up; on a GPU/TPU mesh each device is real hardware.
"""

import argparse
import os
import sys


def parse_args():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--config', default='experiments/brown.py:mlp1')
  parser.add_argument('--meshes', default='1x1,1x8,8x1', help='data x model shapes')
  parser.add_argument('--devices', type=int, default=8, help='host CPU devices to create')
  parser.add_argument('--batch_size', type=int, default=256)
  parser.add_argument('--vocab', type=int, default=17_905, help='|V| (Brown: 17,905)')
  parser.add_argument('--steps', type=int, default=5, help='steps per timed repeat')
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('overrides', nargs='*', help='config overrides as section.key=value')
  return parser.parse_args()


ARGS = parse_args()
if ARGS.devices > 1:  # before JAX starts
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                             f' --xla_force_host_platform_device_count={ARGS.devices}').strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import AxisType, Mesh  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks import common  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top,wrong-import-position


def run_mesh(config, shape):
  data, model_axis = shape
  mesh = Mesh(np.asarray(jax.devices()[:data * model_axis]).reshape(shape), ('data', 'model'),
              axis_types=(AxisType.Auto,) * 2)
  return common.time_train_step(config, ARGS.vocab, mesh, ARGS.steps, ARGS.repeats)


def main():
  config = config_lib.from_file(ARGS.config, ARGS.overrides)
  config.train.batch_size = ARGS.batch_size
  shapes = [tuple(int(x) for x in m.split('x')) for m in ARGS.meshes.split(',')]
  print(f'{jax.device_count()} {jax.devices()[0].platform} devices; {ARGS.config}, |V|={ARGS.vocab}, '
        f'batch {ARGS.batch_size}')
  rows = [run_mesh(config, s) for s in shapes]
  header = ['mesh', 'step_ms', 'train_tokens_per_sec', 'arguments_mib', 'temp_mib', 'output_layer_mib_per_device']
  print(' | '.join(header))
  for row in rows:
    print(' | '.join(str(row.get(h, '')) for h in header))
  for row in rows:
    common.emit(row)


if __name__ == '__main__':
  main()
