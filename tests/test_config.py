"""Config validation from one place: every float key refuses NaN and infinity (the cases generated
from base_config, not listed by hand), and the optimiser's parameters have their domains."""

import json
import math

import pytest

from nplm_jax import config as config_lib
from nplm_jax.errors import UserError

pytestmark = [pytest.mark.fast, pytest.mark.unit]

FLOAT_KEYS = [key for key, _ in config_lib._float_leaves(config_lib.base_config())]  # pylint: disable=protected-access


def test_the_generated_cases_cover_the_float_keys():
  assert len(FLOAT_KEYS) >= 10 and {'optimizer.learning_rate', 'mix.weight', 'loss.noise_power'} <= set(FLOAT_KEYS)


@pytest.mark.parametrize('value', [math.nan, math.inf, -math.inf], ids=['nan', 'inf', '-inf'])
@pytest.mark.parametrize('key', FLOAT_KEYS)
def test_every_float_key_refuses_a_non_finite_value(key, value):
  config = config_lib.base_config()
  section, _, name = key.rpartition('.')
  (config[section] if section else config)[name] = value
  with pytest.raises(UserError, match=rf'^{key}=.* is not a finite number; set --config\.{key}=') as e:
    config_lib.validate(config)
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('name,value', [('b1', 2.0), ('b2', -1.0), ('b1', 1.0)])
def test_adam_decay_rates_lie_in_0_1(name, value):
  config = config_lib.base_config()
  config.optimizer[name] = value
  with pytest.raises(UserError, match=f'optimizer.{name}={value!r} must be in'):
    config_lib.validate(config)


def test_the_defaults_are_valid():
  config_lib.validate(config_lib.base_config())


def test_the_default_workdir_names_the_overrides_that_change_the_run():
  from nplm_jax import main as main_lib  # pylint: disable=g-import-not-at-top
  brown = config_lib.load_experiment('experiments/brown.py')

  def workdir(*overrides):
    config = brown.get_config('mlp1_tuned')
    parsed = {k: (v if v.isalpha() else json.loads(v)) for k, v in (o.split('=') for o in overrides)}
    config_lib.apply_overrides(config, parsed)
    argv = ['main', '--config=experiments/brown.py:mlp1_tuned'] + [f'--config.{o}' for o in overrides]
    return main_lib.default_workdir(config, argv)

  assert workdir() == 'runs/brown_mlp1_tuned'
  assert workdir('train.num_epochs=3', 'train.patience=1') == 'runs/brown_mlp1_tuned'  # resumable changes
  assert workdir('seed=0') == 'runs/brown_mlp1_tuned'  # the value the file sets: nothing changed
  fast = workdir('loss.name=nce', 'train.batch_size=512')
  assert fast.startswith('runs/brown_mlp1_tuned-') and len(fast) == len('runs/brown_mlp1_tuned-') + 8
  assert fast == workdir('train.batch_size=512', 'loss.name=nce')  # order does not matter
  assert fast != workdir('loss.name=nce', 'train.batch_size=256') != workdir('seed=1')
