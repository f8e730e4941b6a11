"""The train step as 1 process with 4 host devices against 2 processes with 2 each (joined by
jax.distributed over gloo, as hosts are), on the same meshes: tokens/s and per-device memory.

python benchmarks/multiprocess_step.py --config=experiments/brown.py:mlp1 --batch_size=1024 \
  --layouts=1x4:1x4,2x2:1x4,1x4:2x2,2x2:2x2

A layout is PROCESSESxDEVICES_PER_PROCESS:DATAxMODEL. Each runs in fresh processes (2-process
layouts through launch/local.sh). On a GPU machine a row for its GPUs (one process) is added.
Prints a table and one JSON line per row. The host devices share this machine's cores: the
figures show what joining processes costs, not a speed-up.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = 'experiments/brown.py:mlp1'
config_flags.DEFINE_config_file('config', DEFAULT_CONFIG, 'Experiment config.', lock_config=True)
flags.DEFINE_list('layouts', ['1x4:1x4', '2x2:1x4', '1x4:2x2', '2x2:2x2'],
                  'PROCESSESxDEVICES_PER_PROCESS:DATAxMODEL rows to measure.')
flags.DEFINE_integer('batch_size', 1024, 'Global batch size.')
flags.DEFINE_integer('vocab', 17_905, '|V| (Brown: 17,905); random token ids are used.')
flags.DEFINE_integer('steps', 5, 'Steps per timed repeat.')
flags.DEFINE_integer('repeats', 5, 'Timed repeats; the median is reported.')
flags.DEFINE_enum('platform', 'cpu', ['cpu', 'gpu'], 'The backend a worker runs on (set by the parent).')
flags.DEFINE_bool('worker', False, 'Measure one layout in this process (set by the parent).')
FLAGS = flags.FLAGS
COLUMNS = ['processes', 'devices_per_process', 'mesh', 'step_ms', 'train_tokens_per_sec', 'arguments_mib',
           'temp_mib', 'output_layer_mib_per_device']


def worker() -> None:
  """One layout: join the processes, time the step, the leader prints one JSON line."""
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from nplm_jax.parallel import distributed  # pylint: disable=g-import-not-at-top
  from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top
  config = FLAGS.config
  config.train.batch_size = FLAGS.batch_size
  if FLAGS.platform == 'cpu':
    sharding.configure_host_devices(config)
  distributed.maybe_initialize(config)
  import jax  # pylint: disable=g-import-not-at-top
  row = common.time_train_step(config, FLAGS.vocab, sharding.make_mesh(config.mesh), FLAGS.steps, FLAGS.repeats)
  row.update(processes=jax.process_count(), devices_per_process=jax.local_device_count(),
             platform=jax.devices()[0].platform, device_kind=jax.devices()[0].device_kind)
  if distributed.is_leader():
    print('ROW ' + json.dumps(row), flush=True)


def measure(layout: str, config_args: list[str]) -> dict:
  """Runs one layout in fresh processes and returns the leader's row."""
  from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top
  processes, devices, mesh = parse_layout(layout)
  args = [*config_args, '--worker', f'--batch_size={FLAGS.batch_size}',
          f'--vocab={FLAGS.vocab}', f'--steps={FLAGS.steps}', f'--repeats={FLAGS.repeats}',
          f'--config.mesh.data={mesh[0]}', f'--config.mesh.model={mesh[1]}']
  env = dict(os.environ, PYTHON=sys.executable, MODULE='benchmarks.multiprocess_step')
  if devices:  # host CPU devices; an accelerator row uses the GPUs as they are
    args.append(f'--config.mesh.cpu_devices={devices}')
    env.update(JAX_PLATFORMS='cpu')
    env['XLA_FLAGS'] = sharding.without_host_device_count(env)  # each process sets its own
  else:
    args.append('--platform=gpu')
  command = ([sys.executable, '-m', 'benchmarks.multiprocess_step', *args] if processes == 1 else
             ['bash', os.path.join('launch', 'local.sh'), str(processes), *args])
  proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
  rows = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith('ROW ')]
  if proc.returncode or not rows:
    raise SystemExit(f'error: layout {layout} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}')
  return {'layout': layout, **rows[0]}


def parse_layout(layout: str) -> tuple[int, int, tuple[int, int]]:
  """'2x2:1x4' -> (2 processes, 2 devices each, mesh (1, 4)); 'gpu' -> (1, 0, (-1, 1))."""
  if layout == 'gpu':
    return 1, 0, (-1, 1)
  try:
    layout_part, mesh_part = layout.split(':')
    processes, devices = (int(x) for x in layout_part.split('x'))
    data, model = (int(x) for x in mesh_part.split('x'))
  except ValueError:
    raise SystemExit(f'error: --layouts entry {layout!r} is not PROCESSESxDEVICES:DATAxMODEL, e.g. 2x2:1x4') from None
  if processes * devices != data * model:
    raise SystemExit(f'error: --layouts entry {layout!r}: {processes}x{devices} devices do not fill a '
                     f'{data}x{model} mesh')
  return processes, devices, (data, model)


def gpu_available() -> bool:
  proc = subprocess.run([sys.executable, '-c', 'import jax; print(jax.default_backend())'], capture_output=True,
                        text=True, check=False)
  return proc.stdout.strip() == 'gpu'


def main(argv):
  del argv
  # The workers get the config and its overrides as given (absl has consumed them from argv).
  config_args = [a for a in sys.argv[1:] if a.startswith('--config')]
  if not any(a.startswith('--config=') for a in config_args):
    config_args.insert(0, f'--config={DEFAULT_CONFIG}')
  if FLAGS.worker:
    worker()
    return
  for layout in FLAGS.layouts:  # a bad entry is refused before any layout runs
    parse_layout(layout)
  layouts = list(FLAGS.layouts) + (['gpu'] if gpu_available() else [])
  rows = [measure(layout, config_args) for layout in layouts]
  print(f'{" ".join(config_args)}, |V|={FLAGS.vocab}, global batch {FLAGS.batch_size}')
  print(' | '.join(COLUMNS))
  for row in rows:
    print(' | '.join(str(row.get(c, '')) for c in COLUMNS))
  for row in rows:
    print(json.dumps(row), flush=True)


if __name__ == '__main__':
  app.run(main)
