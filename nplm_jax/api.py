"""nplm_jax from Python: get_config, train, load (exported at the package's top level).

    config = nplm_jax.get_config('experiments/brown.py:quick', {'train.max_steps': 2000})
    results = nplm_jax.train(config, 'runs/brown_quick')   # results.json's dict
    lm = nplm_jax.load('runs/brown_quick')                  # a LanguageModel (tools/language_model.py)

The same run and the same figures as nplm-train, which is built on these functions: resumable (a
second call on the workdir goes on from its latest checkpoint, or returns the results of a finished
run), checkpointed, one results.json. A bad config, value or workdir raises nplm_jax.UserError with
the line the command prints. Nothing here installs signal handlers or exits the process: an
interrupted train() raises KeyboardInterrupt, and calling it again resumes.
"""

import os
from collections.abc import Mapping
from typing import Any

import ml_collections

from nplm_jax import cli
from nplm_jax import config as config_lib
from nplm_jax.data import corpora
from nplm_jax.files import metrics
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.parallel import backend
from nplm_jax.parallel import distributed
from nplm_jax.tools import language_model
from nplm_jax.tools import mix
from nplm_jax.training import train as train_lib

LanguageModel = language_model.LanguageModel


def load(workdir: str | os.PathLike) -> LanguageModel:
  """The best parameters of a finished or running training, ready to score, sample and read vectors.

  Loading the same workdir again in this process reuses the functions compiled for it."""
  return LanguageModel.load(workdir)


def get_config(config: str, overrides: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
  """An experiment config, 'experiments/brown.py:quick' as --config takes it, with `overrides`
  {'train.batch_size': 256, 'model.h': 0}: dotted keys as --config.KEY=VALUE takes them (a value
  may be given as Python or as the text of the flag; unknown keys and bad values are refused)."""
  flags = [f'--config.{key}={value if isinstance(value, str) else repr(value)}'
           for key, value in (overrides or {}).items()]
  loaded = cli.config_from_flags(config, flags)
  config_lib.validate(loaded)
  return loaded


def prepare_devices(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> None:
  """What comes before the first device is touched: the workdir is no file, XLA's settings from the
  config, and the processes of a multi-process job joined."""
  workdir_lib.check_not_a_file(os.fspath(workdir))
  backend.configure(config)
  distributed.maybe_initialize(config)


def run_training(config: ml_collections.ConfigDict, workdir: str | os.PathLike, catch_signals: bool) -> dict:
  """Trains and evaluates (with the n-gram mixture when config.mix.enabled); results.json's dict."""
  mixture = mix.RunMixture(config.mix) if config.mix.enabled else None
  results = train_lib.train_and_evaluate(config, os.fspath(workdir), extra_results=mixture,
                                         catch_signals=catch_signals)
  if config.mix.enabled and 'mix_valid_ppl' in results:
    metrics.log(mix.summary_line(results))
  return results


def train(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> dict:
  """Trains `config` in `workdir` (created, or resumed from its latest checkpoint) and evaluates its
  best parameters: the dict results.json holds (valid_ppl, test_ppl, step, wall time, ...)."""
  config_lib.validate(config)
  corpora.check_corpus_files(config.data)
  prepare_devices(config, workdir)
  return run_training(config, workdir, catch_signals=False)
