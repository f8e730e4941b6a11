"""nplm_jax from Python: get_config, train, load (exported at the package's top level).

    config = nplm_jax.get_config('experiments/brown.py:quick', {'train.max_steps': 2000})
    results = nplm_jax.train(config, 'runs/brown_quick')   # results.json's dict
    lm = nplm_jax.load('runs/brown_quick')                  # a LanguageModel (tools/language_model.py)

The same run and the same figures as nplm-train, which is built on these functions: resumable (a
second call on the workdir goes on from its latest checkpoint, or returns the results of a finished
run), checkpointed, one results.json. A bad config, value or workdir raises nplm_jax.UserError with
the line the command prints. Nothing here leaves a signal handler installed or exits the process: while
train() trains, Ctrl-C saves the step in progress and then raises KeyboardInterrupt, and calling it again
resumes from that step.
"""

import difflib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import ml_collections

from nplm_jax import config as config_lib
from nplm_jax.data import corpora
from nplm_jax.errors import UserError, a_kind
from nplm_jax.files import metrics
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.parallel import backend
from nplm_jax.parallel import distributed
from nplm_jax.tools import language_model
from nplm_jax.tools import mix
from nplm_jax.training import train as train_lib

LanguageModel = language_model.LanguageModel


def load(workdir: str | os.PathLike, devices: int | Sequence[jax.Device] | None = None) -> LanguageModel:
  """The best parameters of a finished or running training, ready to score, sample and read vectors.

  devices: None for every device of the default backend (the mesh the training used where it fits them), a
  count (the first that many; on CPU, when this call starts JAX, that many host devices) or a list of jax
  devices; any count works, whatever mesh the model was trained on, with the same figures.
  Loading the same workdir again in this process reuses the functions compiled for it (for the latest few
  workdirs loaded); lm.close(), or `with nplm_jax.load(...) as lm:`, frees its parameters and functions."""
  return LanguageModel.load(workdir, devices=devices)


def get_config(config: str, overrides: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
  """An experiment config, 'experiments/brown.py:quick' as --config takes it, with `overrides`
  {'train.batch_size': 256, 'model.h': 0}: dotted keys as --config.KEY=VALUE takes them (a value
  may be given as Python or as text, which is read as the key's type; unknown keys and bad values are refused)."""
  if not isinstance(config, str):
    raise UserError(f"config={config!r} is not an experiment's name; give one such as 'experiments/brown.py:smoke'")
  if overrides is not None and not isinstance(overrides, Mapping):
    raise UserError(f'overrides is {a_kind(overrides)}; give a dict of dotted keys and values, such as '
                    "{'train.batch_size': 256}")
  loaded = _named_config(config)
  for key, value in (overrides or {}).items():
    _override(loaded, key, value)
  config_lib.validate(loaded)
  return loaded


def _named_config(name: str) -> ml_collections.ConfigDict:
  """FILE[:VARIANT] read as config_flags reads --config: FILE's get_config(VARIANT), locked (no new keys)."""
  path, colon, variant = name.partition(':')
  if not os.path.isfile(config_lib.experiment_file(path)):
    raise UserError(f'config={name!r}: no such experiment file; give one such as experiments/brown.py')
  module = config_lib.load_experiment(path)
  try:
    loaded = module.get_config(variant) if colon else module.get_config()
  except (KeyError, ValueError, TypeError) as e:
    raise UserError(f'config={name!r}: {e.args[0] if e.args else type(e).__name__}') from None
  if not isinstance(loaded, ml_collections.ConfigDict):
    raise UserError(f'config={name!r}: its get_config returned a {type(loaded).__name__}, not a ConfigDict')
  loaded.lock()
  return loaded


def _override(config: ml_collections.ConfigDict, key: str, value: Any) -> None:
  """config[key] = value for a dotted key; a value given as text is read as the key's type, as a flag is."""
  if not isinstance(key, str) or not key:
    raise UserError(f'overrides key {key!r} is not a dotted config key such as "train.batch_size"')
  *sections, leaf = key.split('.')
  node = config
  for depth, name in enumerate(sections + [leaf]):
    if not isinstance(node, ml_collections.ConfigDict) or name not in node:
      known = sorted(node.keys()) if isinstance(node, ml_collections.ConfigDict) else []
      close = difflib.get_close_matches(name, known, n=1)
      hint = f" (did you mean '{'.'.join(sections[:depth] + close + (sections + [leaf])[depth + 1:])}'?)" if close else ''
      raise UserError(f'overrides key {key!r} is not a config key{hint}; see --print_config or docs/configs.md')
    if depth < len(sections):
      node = node[name]
  current = node[leaf]
  if isinstance(current, ml_collections.ConfigDict):
    raise UserError(f'overrides key {key!r} is a section; name one of its keys, such as {key}.{next(iter(current))}')
  if isinstance(value, str) and not isinstance(current, str):
    value = _from_text(key, value, type(current))
  if isinstance(value, bool) != isinstance(current, bool):
    raise UserError(f'overrides[{key!r}]={value!r}: the key takes {a_kind(current)}')
  try:
    node[leaf] = value
  except TypeError:
    raise UserError(f'overrides[{key!r}]={value!r}: the key takes {a_kind(current)}') from None


_TRUE, _FALSE = ('true', 't', '1', 'yes'), ('false', 'f', '0', 'no')


def _from_text(key: str, text: str, kind: type) -> Any:
  """A value's text as a flag gives it: 'true' for a bool, '512' for an int, '3e-4' for a float."""
  try:
    if kind is bool:
      if text.strip().lower() in _TRUE + _FALSE:
        return text.strip().lower() in _TRUE
      raise ValueError(text)
    return kind(text)
  except ValueError:
    raise UserError(f'overrides[{key!r}]={text!r} is not {a_kind(kind)}') from None


def prepare_devices(config: ml_collections.ConfigDict, workdir: str | os.PathLike, join: bool = True) -> None:
  """What comes before the first device is touched: the workdir is no file, XLA's settings from the
  config, and the processes of a multi-process job joined (join=False: only when the config says 'yes')."""
  workdir_lib.check_not_a_file(os.fspath(workdir))
  with backend.configured(config):  # XLA_FLAGS as the caller had it once the backends have started
    distributed.maybe_initialize(config, detect=join)
    jax.devices()


def run_training(config: ml_collections.ConfigDict, workdir: str | os.PathLike, catch_signals: bool) -> dict:
  """Trains and evaluates (with the n-gram mixture when config.mix.enabled); results.json's dict."""
  mixture = mix.RunMixture(config.mix) if config.mix.enabled else None
  results = train_lib.train_and_evaluate(config, os.fspath(workdir), extra_results=mixture,
                                         catch_signals=catch_signals)
  if config.mix.enabled and 'mix_valid_ppl' in results:
    metrics.log(mix.summary_line(results))
  return results


def train(config: ml_collections.ConfigDict | str, workdir: str | os.PathLike, join: bool = False) -> dict:
  """Trains `config` in `workdir` (created, or resumed from its latest checkpoint) and evaluates its
  best parameters: the dict results.json holds (valid_ppl, test_ppl, step, wall time, ...). `config` may also
  be an experiment's name, 'experiments/brown.py:smoke', as get_config takes it.

  This process trains alone unless asked to join others: join=True joins the processes a launcher started
  (SLURM, Open MPI, a TPU pod, or config.distributed's address), as nplm-train does by itself, and
  distributed.initialize='yes' always joins; a notebook inside an allocation is never joined by surprise."""
  if isinstance(config, str):
    config = get_config(config)
  elif not isinstance(config, ml_collections.ConfigDict):
    raise UserError(f"config is {a_kind(config)}; give a ConfigDict (nplm_jax.get_config) or an experiment's "
                    "name such as 'experiments/brown.py:smoke'")
  config_lib.validate(config)
  corpora.check_corpus_files(config.data)
  if not isinstance(join, bool):
    raise UserError(f'join={join!r} is not True or False')
  prepare_devices(config, workdir, join=join)
  try:
    # Ctrl-C (a notebook's interrupt) saves the step in progress, as nplm-train does, then reaches the caller as
    # KeyboardInterrupt; the process's own handlers are back in place once training returns or stops.
    return run_training(config, workdir, catch_signals=True)
  except train_lib.Preempted as stop:
    raise KeyboardInterrupt(str(stop).replace('run the same command to resume',
                                              'call nplm_jax.train again to resume')) from None
