"""Trains a model from an experiment config, evaluates it and writes WORKDIR/results.json.

  python -m nplm_jax.main --config=experiments/brown.py:mlp1 [--workdir=DIR] [--config.train.batch_size=512 ...]
  (installed: nplm-train --config=experiments/brown.py:mlp1 ...)

--config=FILE:VARIANT names an experiment (experiments/brown.py: mlp1 ... mlp10, *_tuned, reg4_n7;
ptb.py; text.py; prepared.py); any config key is set with --config.SECTION.KEY=VALUE. The run
resumes when the same command is given again (docs/reliability.md).
"""

import hashlib
import json
import os
import sys

from nplm_jax import entry

# JAX and the rest are imported inside the functions: `python -m nplm_jax.main` takes its signals
# (entry.run_command) before the first import that can take seconds.


def default_workdir(config, argv: list[str]) -> str:
  """runs/NAME for the experiment as its file defines it; runs/NAME-HASH when --config.* overrides
  change what decides the run's trajectory (train.RESUME_KEYS: seed, data, model, optimizer, loss,
  batch size), HASH a digest of those changes. Overrides of other keys (epochs, patience, annealing,
  evaluation, logging, mesh) keep the folder: a run resumed or extended with them goes on in it."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import train  # pylint: disable=g-import-not-at-top
  name = os.path.join('runs', config.name or 'run')
  config_arg = next((a[len('--config='):] for a in argv if a.startswith('--config=')), '')
  path, _, variant = config_arg.partition(':')
  try:
    module = config_lib.load_experiment(path)
    as_defined = json.loads((module.get_config(variant) if variant else module.get_config()).to_json_best_effort())
  except Exception:  # pylint: disable=broad-except  # the flags parsed it already; never fail here
    return name
  given = json.loads(config.to_json_best_effort())
  changed = {}
  for key in train.RESUME_KEYS:
    if config_lib.value_at(given, key) != config_lib.value_at(as_defined, key):
      changed[key] = config_lib.value_at(given, key)
  if not changed:
    return name
  digest = hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:8]
  return f'{name}-{digest}'


def parse_args(argv=None):
  from nplm_jax import cli  # pylint: disable=g-import-not-at-top
  parser = cli.ConfigArgumentParser('nplm_jax.main', 'the experiment, e.g. experiments/brown.py:mlp1',
                                    description=__doc__)
  parser.add_argument('--workdir', default='', help='folder (or gs://...) for checkpoints, metrics and results.json '
                      '(default: runs/NAME, or runs/NAME-HASH when --config.* overrides change the run)')
  parser.add_argument('--print_config', nargs='?', const='keys', default=None, choices=['keys', 'all'],
                      help="print the resolved config, each key a run sets with its value and meaning, and exit; "
                           "'all': the tuning knobs too")
  return parser.parse_args(argv)


def check_flags(argv=None) -> None:
  """The command line checked before the imports that take seconds (JAX, Orbax): the config file, its
  overrides and values, and a ptb or text corpus's files. A misspelt key or a missing corpus file is
  answered in about a second; main then reads the flags again (entry runs this first)."""
  # pylint: disable=g-import-not-at-top
  from nplm_jax import config as config_lib
  from nplm_jax.data import corpora
  from nplm_jax.errors import UserError
  # pylint: enable=g-import-not-at-top
  args = parse_args(argv)
  if args.print_config:
    return
  try:
    config_lib.validate(args.config)
    corpora.check_corpus_files(args.config.data)
  except UserError:
    # every process of a job finds what these find: process 0 alone says it (as main's agreed errors are said)
    if config_lib.declared_process_id_before_joining(args.config) != 0:
      sys.exit(1)
    raise


def main(argv=None):
  # pylint: disable=g-import-not-at-top
  from nplm_jax import api
  from nplm_jax import cli
  from nplm_jax.parallel import distributed
  from nplm_jax.files import metrics
  from nplm_jax.training import train
  from nplm_jax import config as config_lib
  from nplm_jax.errors import UserError
  # pylint: enable=g-import-not-at-top
  args = parse_args(argv)
  config = args.config
  if args.print_config:
    print(config_lib.describe(config, advanced=args.print_config == 'all'))
    return
  workdir = args.workdir or default_workdir(config, args.config_args)
  try:
    # The config and corpus files were checked by check_flags, before XLA is told how many host devices
    # to make (a cpu_devices count above the cap aborted in XLA's thread creation under a memory limit).
    api.prepare_devices(config, workdir)
    if not args.workdir:
      metrics.log(f'workdir: {workdir} (the default for this config and these overrides; --workdir=DIR chooses '
                  'another)')
    api.run_training(config, workdir, catch_signals=True)
  except UserError as e:
    cli.exit_with_error(e, config)
  except train.Preempted as stop:
    if distributed.is_leader():
      print(stop, file=sys.stderr, flush=True)
    sys.exit(128 + stop.signum)

if __name__ == '__main__':
  entry.run_command('__main__', after_stop=entry.AFTER_TRAINING_STOP, early='check_flags')
