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


OVERRIDES = [{}, {'train.batch_size': 256, 'model.m': '32', 'optimizer.learning_rate': 0.5},
             {'mix.enabled': 'true', 'optimizer.learning_rate': 1, 'data.corpus': 'text', 'seed': '3'},
             {'train.max_seconds': '600.5', 'model.direct': False, 'loss.name': 'softmax'}]


@pytest.mark.parametrize('name', ['experiments/brown.py:quick', 'experiments/ptb.py', 'experiments/text.py:revisited'])
@pytest.mark.parametrize('overrides', OVERRIDES)
def test_get_config_reads_overrides_as_the_command_line_does(name, overrides):
  """nplm_jax.get_config (no flag parser) and the commands' --config.KEY=VALUE (ml_collections' config_flags)
  give the same config, a value given as Python or as its text."""
  import nplm_jax  # pylint: disable=g-import-not-at-top
  from nplm_jax import cli  # pylint: disable=g-import-not-at-top
  flags = [f'--config.{k}={str(v).lower() if isinstance(v, bool) else v}' for k, v in overrides.items()]
  assert nplm_jax.get_config(name, overrides).to_json() == cli.config_from_flags(name, flags).to_json()


@pytest.mark.parametrize('config, overrides, message', [
    ('experiments/brown.py:quick', {'trian.batch_size': 1}, "overrides key 'trian.batch_size' is not a config key "
                                                            "(did you mean 'train.batch_size'?)"),
    ('experiments/brown.py:quick', {'train.batch_size': 'x'}, "overrides['train.batch_size']='x' is not an int"),
    ('experiments/brown.py:quick', {'train.batch_size': True}, 'the key takes an int'),
    ('experiments/brown.py:quick', {'mix.enabled': 1}, 'the key takes a bool'),
    ('experiments/brown.py:quick', {'mix.enabled': 'maybe'}, 'is not a bool'),
    ('experiments/brown.py:quick', {'train': 1}, "overrides key 'train' is a section"),
    ('experiments/brown.py:quick', ['train.batch_size=1'], 'overrides is a list; give a dict'),
    ('experiments/brown.py:nope', {}, "config='experiments/brown.py:nope': unknown Brown variant 'nope'"),
    ('experiments/nope.py', {}, "config='experiments/nope.py': no such experiment file"),
    (3, {}, "config=3 is not an experiment's name"),
])
def test_get_config_refuses_bad_arguments_in_one_line_naming_them(config, overrides, message):
  import nplm_jax  # pylint: disable=g-import-not-at-top
  with pytest.raises(nplm_jax.UserError) as e:
    nplm_jax.get_config(config, overrides)
  assert message in str(e.value) and '\n' not in str(e.value)


def test_print_config_lists_the_keys_a_run_sets_and_counts_the_tuning_knobs():
  config = config_lib.base_config()
  keys_only, everything = config_lib.describe(config), config_lib.describe(config, advanced=True)
  assert 'train.batch_size = 128' in keys_only and 'train.softmax_kernel =' not in keys_only
  assert f'# and {len(config_lib.ADVANCED_KEYS)} tuning knobs' in keys_only.splitlines()[-1]
  assert 'train.softmax_kernel =' in everything and 'tuning knobs at their defaults' not in everything
  assert len(everything.splitlines()) == len(keys_only.splitlines()) - 1 + len(config_lib.ADVANCED_KEYS)
  config.train.softmax_kernel = 'xla'  # a knob set otherwise than the default is shown
  assert "train.softmax_kernel = 'xla'" in config_lib.describe(config)


def test_print_config_takes_all():
  from nplm_jax import main  # pylint: disable=g-import-not-at-top
  assert main.parse_args(['--config=experiments/text.py:tiny', '--print_config']).print_config == 'keys'
  assert main.parse_args(['--config=experiments/text.py:tiny', '--print_config=all']).print_config == 'all'
