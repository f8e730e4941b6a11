"""The configurations users run by name: the best ones reproduce their recorded runs' configs, and any
recorded run trains again from its results file (experiments/recorded.py)."""

import json
import os

import pytest

from nplm_jax import config as config_lib
from nplm_jax.errors import UserError
from launch.config_diff import leaves

pytestmark = [pytest.mark.fast, pytest.mark.unit]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDED = os.path.join(REPO, 'experiments', 'recorded.py')

# Keys a recorded config may hold other values of without another run: the run's name, the corpus's folder
# on the machine it ran on, the ways of computing the same numbers that 'auto' resolved for its backend, and the
# CPU backend's host devices (these runs trained on GPUs, where the key does nothing; test_best_runs_trained_on_gpus).
SAME_RUN_KEYS = {'name', 'data.path', 'model.embedding_gradient', 'model.distant_gradient', 'mesh.cpu_devices'}

BEST_RUNS = [
    ('experiments/brown.py:best', 'brown_tune_tune11_dropout0.5_weight_decay0.4_cosine6_ema0.999_seed0'),
    ('experiments/ptb.py:best', 'ptb_ladder_1170s_ladder5_dropout_seed0'),
    ('experiments/ptb.py:char_best', 'ptb_char_tune_char_tune0_dropout0.1_cosine8_seed0'),
]


def read_record(name: str) -> dict:
  with open(os.path.join(REPO, 'results', f'{name}.json'), encoding='utf-8') as f:
    return json.load(f)


def named_config(spec: str):
  path, _, variant = spec.partition(':')
  return config_lib.load_experiment(os.path.join(REPO, path)).get_config(variant)


@pytest.mark.parametrize('spec,record_name', BEST_RUNS)
def test_each_best_config_is_its_recorded_run(spec, record_name):
  """brown.py:best, ptb.py:best and ptb.py:char_best give the config of the run RESULTS.md quotes, key for key
  (keys newer than the run at their defaults; a time budget the run never reached left out)."""
  record = read_record(record_name)
  assert not record['figures'].get('stop_reason', '').endswith('spent'), 'the recorded run stopped at its budget'
  recorded = leaves(record['config'])
  named = leaves(json.loads(named_config(spec).to_json()))
  budget = {'train.max_seconds'}
  differ = {k: (v, recorded[k]) for k, v in named.items() if k in recorded and k not in SAME_RUN_KEYS | budget
            and recorded[k] != v}
  assert not differ, differ
  newer = {k: v for k, v in named.items() if k not in recorded}
  defaults = leaves(json.loads(config_lib.base_config().to_json()))
  assert all(defaults[k] == v for k, v in newer.items()), newer


def test_best_runs_trained_on_gpus():
  """SAME_RUN_KEYS holds mesh.cpu_devices for these runs alone: on a CPU it would be another run."""
  assert all(read_record(name)['device'].startswith('NVIDIA') for _, name in BEST_RUNS)


def test_a_recorded_run_loads_as_its_config():
  """experiments/recorded.py:results/NAME.json is the run's whole config, under the record's name (its own
  workdir), and validates."""
  config = config_lib.load_experiment(RECORDED).get_config(os.path.join(REPO, 'results', 'check_brown_smoke.json'))
  config_lib.validate(config)
  assert config.name == 'check_brown_smoke'
  recorded = leaves(read_record('check_brown_smoke')['config'])
  loaded = leaves(json.loads(config.to_json()))
  assert {k: loaded[k] for k in recorded if k != 'name'} == {k: v for k, v in recorded.items() if k != 'name'}
  assert loaded['train.max_steps'] == 300 and loaded['loss.name'] == 'nce'


def test_a_recorded_ptb_run_finds_the_corpus_here(monkeypatch, tmp_path):
  monkeypatch.setenv('PTB_DIR', str(tmp_path))
  config = config_lib.load_experiment(RECORDED).get_config(
      os.path.join(REPO, 'results', 'ptb_ladder_1170s_ladder5_dropout_seed0.json'))
  assert config.data.path == str(tmp_path)


@pytest.mark.parametrize('arg,message', [('', 'needs a results file'), ('results/none.json', 'no such results file'),
                                         ('README.md', 'is not a results file')])
def test_a_bad_results_file_is_one_line(arg, message):
  with pytest.raises(UserError, match=message) as e:
    config_lib.load_experiment(RECORDED).get_config(os.path.join(REPO, arg) if arg else '')
  assert '\n' not in str(e.value)


def test_every_results_file_loads_as_a_config():
  """Every recorded run can be trained again: each results file's config reads back and validates."""
  names = sorted(n[:-len('.json')] for n in os.listdir(os.path.join(REPO, 'results')) if n.endswith('.json'))
  assert len(names) > 100
  experiment = config_lib.load_experiment(RECORDED)
  for name in names:
    if read_record(name).get('kind') == 'ngram':  # an n-gram baseline: refused in one line
      with pytest.raises(UserError, match='records an n-gram baseline, not a training'):
        experiment.get_config(os.path.join(REPO, 'results', f'{name}.json'))
      continue
    config_lib.validate(experiment.get_config(os.path.join(REPO, 'results', f'{name}.json')))


@pytest.mark.parametrize('row', ['mlp2', 'mlp4', 'mlp10', 'mlp2_tuned', 'mlp10_tuned'])
def test_table1_mixture_rows_keep_the_papers_fixed_weight(row):
  """Table 1's even rows are the paper's 0.5/0.5 mixture; elsewhere the weight is fitted on validation."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  config = config_lib.load_experiment('experiments/brown.py').get_config(row)
  assert config.mix.enabled and not config.mix.fit_weight and config.mix.weight == 0.5
  assert config_lib.base_config().mix.fit_weight
