"""The sweep runner: points in their own workdirs, finished ones skipped on re-run, tables."""

import csv
import os
import pathlib

import pytest

from launch import sweep

pytestmark = pytest.mark.slow


def tiny_grid_args(files, root, extra=()):
  data = [f'--set=data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')]
  return ['--config=experiments/text.py:tiny', '--grid=model.h=0,8', f'--root={root}', '--parallel=2',
          '--set=train.num_epochs=1', *data, *extra]


def test_grid_runs_resumes_and_tabulates(tiny_files, tmp_path, capsys):
  root = str(tmp_path / 'sweep')
  assert sweep.main(tiny_grid_args(tiny_files, root)) == 0
  out = capsys.readouterr().out
  assert out.count(': done') == 2 and '2/2 points have results' in out
  with open(os.path.join(root, 'results.csv'), encoding='utf-8') as f:
    rows = list(csv.DictReader(f))
  assert [r['name'] for r in rows] == ['h0', 'h8'] and [r['h'] for r in rows] == ['0', '8']
  assert all(float(r['valid_ppl']) > 1 for r in rows)
  markdown = pathlib.Path(root, 'results.md').read_text(encoding='utf-8')
  assert markdown.startswith('| name |') and '| h8 |' in markdown
  with open(os.path.join(root, 'curves.png'), 'rb') as f:  # the points' validation curves, overlaid
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  stamp = os.path.getmtime(os.path.join(root, 'h0', 'results.json'))
  assert sweep.main(tiny_grid_args(tiny_files, root)) == 0  # re-run: nothing retrained
  assert capsys.readouterr().out.count('skipped (finished before)') == 2
  assert os.path.getmtime(os.path.join(root, 'h0', 'results.json')) == stamp


def test_a_point_out_of_time_goes_on_when_the_budget_grows(tiny_files, tmp_path, capsys):
  """A point stopped by train.max_seconds is finished for a re-run with the same budget, and goes on
  from its checkpoint when --set gives it more. Budgets of 20 and 40 s hold the start-up and the final
  evaluation (a run refuses a budget that leaves nothing to train), far fewer than the 5,000 epochs
  fit them, and no patience stops them first."""
  import json  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / 'sweep')
  args = lambda budget: [a.replace('model.h=0,8', 'model.h=8') for a in tiny_grid_args(tiny_files, root)] + [
      f'--set=train.max_seconds={budget}', '--set=train.num_epochs=5000', '--set=train.patience=0']
  read = lambda: json.loads(pathlib.Path(root, 'h8', 'results.json').read_text(encoding='utf-8'))
  assert sweep.main(args(20)) == 0
  timed = read()
  assert timed['stop_reason'] == 'train.max_seconds=20 spent'
  assert sweep.main(args(20)) == 0 and 'skipped (finished before)' in capsys.readouterr().out
  assert sweep.main(args(40)) == 0 and ': done' in capsys.readouterr().out
  longer = read()
  assert longer['stop_reason'] == 'train.max_seconds=40 spent' and longer['steps_trained'] > timed['steps_trained']


def test_a_failing_point_is_reported_and_the_rest_still_tabulated(tiny_files, tmp_path, capsys):
  root = str(tmp_path / 'sweep')
  args = tiny_grid_args(tiny_files, root)
  args[1] = '--grid=train.batch_size=100000,32'  # valid, but larger than the corpus: found when its run starts
  assert sweep.main(args) == 1
  out = capsys.readouterr().out
  assert 'batch_size100000: failed' in out and 'exceeds the' in out and '1/2 points have results' in out


def test_bad_points_are_refused_before_any_starts(tiny_files, tmp_path, capsys):
  root = tmp_path / 'sweep'
  args = tiny_grid_args(tiny_files, str(root))
  args[1] = '--grid=model.n=3,1'  # n=1 is invalid: refused with the sweep's first line, nothing run
  assert sweep.main(args) == 2
  err = capsys.readouterr().err.strip()
  assert err == ("error: point 'n1': model.n=1 is invalid: it must be an integer >= 2 (n counts the predicted word and "
                 "at least one context word); set --config.model.n=<value>")
  assert not root.exists() or not any(root.iterdir())


def test_a_top_level_key_is_set_on_every_point_and_an_unknown_one_is_refused(tiny_files, tmp_path, capsys):
  """--set=seed=1 (a sweep's points over another seed) reaches each point's config; a key the config lacks
  is one line before any point starts."""
  import json  # pylint: disable=g-import-not-at-top
  root = tmp_path / 'sweep'
  args = [a.replace('model.h=0,8', 'model.h=8') for a in tiny_grid_args(tiny_files, str(root))]
  assert sweep.main(args + ['--set=seed=1']) == 0
  assert json.loads((root / 'h8' / 'results.json').read_text(encoding='utf-8'))['config']['seed'] == 1
  assert sweep.main(args + ['--set=sead=1', f'--root={tmp_path / "other"}']) == 2
  assert 'sead' in capsys.readouterr().err and not (tmp_path / 'other').exists()


def test_named_sweep_of_ngram_points(ptb_dir, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv('PTB_DIR', ptb_dir)
  root = str(tmp_path / 'ptb')
  assert sweep.main(['--config=experiments/ptb.py', '--sweep=ngrams', f'--root={root}', '--parallel=2']) == 0
  rows = list(csv.DictReader(pathlib.Path(root, 'results.csv').read_text(encoding='utf-8').splitlines()))
  assert {r['name'] for r in rows} == {'kneser_ney_3', 'kneser_ney_5'}


@pytest.mark.parametrize('grid', ['model.h', 'h=1,2', 'model.h='])
def test_bad_grid_is_one_line(grid, tmp_path, capsys):
  assert sweep.main(['--config=experiments/brown.py:mlp1', f'--grid={grid}', f'--root={tmp_path}']) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: --grid part') and '\n' not in err


def test_table1_puts_our_numbers_beside_the_papers(tmp_path):
  from launch import table1  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  (tmp_path / 'mlp2').mkdir()
  (tmp_path / 'mlp2' / 'results.json').write_text(json.dumps(
      {'valid_ppl': 300.0, 'test_ppl': 290.0, 'epochs': 12.0, 'mix_valid_ppl': 280.0, 'mix_test_ppl': 270.0,
       'mix_fitted_weight': 0.6, 'mix_fitted_test_ppl': 268.0}))
  (tmp_path / 'kneser_ney_5').mkdir()
  (tmp_path / 'kneser_ney_5' / 'results.json').write_text(json.dumps({'valid_ppl': 347.4, 'test_ppl': 329.8}))
  rows = {line.split(' | ')[0].strip('| '): line for line in table1.render(str(tmp_path)).splitlines()}
  assert '| 284 | 268 | 300.0 | 290.0 | 12.0 epochs |' in rows['MLP1']
  assert '| 275 | 257 | 280.0 | 270.0 | fitted weight 0.60: test 268.0 |' in rows['MLP2']
  assert '| 332 | 321 | 347.4 | 329.8 |' in rows['Kneser-Ney back-off, n=5']
  assert 'not run' in rows['MLP9'] and 'not run' in rows['Del. Int. trigram']
  # an odd row's own workdir, mixed afterwards, fills both rows
  (tmp_path / 'mlp9').mkdir()
  (tmp_path / 'mlp9' / 'results.json').write_text(json.dumps({'valid_ppl': 310.0, 'test_ppl': 300.0, 'epochs': 3.0}))
  (tmp_path / 'mlp9' / 'mix_results.json').write_text(json.dumps(
      {'mix_valid_ppl': 290.0, 'mix_test_ppl': 280.0, 'mix_fitted_weight': 0.5, 'mix_fitted_test_ppl': 279.0}))
  rows = {line.split(' | ')[0].strip('| '): line for line in table1.render(str(tmp_path)).splitlines()}
  assert '| 310.0 | 300.0 |' in rows['MLP9'] and '| 290.0 | 280.0 |' in rows['MLP10']
  # the table1 sweep's annealed-at-the-end run appears beside its row
  (tmp_path / 'mlp2_annealed').mkdir()
  (tmp_path / 'mlp2_annealed' / 'results.json').write_text(json.dumps(
      {'valid_ppl': 295.0, 'test_ppl': 285.0, 'mix_valid_ppl': 279.0, 'mix_test_ppl': 269.0}))
  rows = {line.split(' | ')[0].strip('| '): line for line in table1.render(str(tmp_path)).splitlines()}
  assert '12.0 epochs; annealed at the end: 295.0 / 285.0 |' in rows['MLP1']
  assert 'test 268.0; annealed at the end: 279.0 / 269.0 |' in rows['MLP2']


def test_start_from_continues_a_copy_of_a_finished_point_and_seeds_are_summarised(tiny_files, tmp_path, capsys):
  data = {f'data.{s}_file': tiny_files[s] for s in ('train', 'valid', 'test')}
  config = 'experiments/text.py:tiny'
  points = [
      dict(name='base', kind='train', config=config, overrides={**data, 'train.num_epochs': 1}),
      dict(name='more', kind='train', config=config, overrides={**data, 'train.num_epochs': 2}, start_from='base'),
      dict(name='base_seed1', kind='train', config=config, overrides={**data, 'train.num_epochs': 1, 'seed': 1}),
  ]
  root = str(tmp_path / 'sweep')
  outcomes = sweep.run_sweep(points, root, parallel=2, common_overrides={})
  assert sorted(status for _, status, _ in outcomes) == ['done'] * 3, outcomes
  import json  # pylint: disable=g-import-not-at-top
  load = lambda name: json.loads(pathlib.Path(root, name, 'results.json').read_text(encoding='utf-8'))
  base, more = load('base'), load('more')
  assert more['history'][:len(base['history'])] == base['history']  # the copy went on from base's run
  assert more['steps_trained'] == 2 * base['steps_trained']
  assert load('base_seed1')['config']['seed'] == 1 and load('base_seed1')['valid_ppl'] != base['valid_ppl']
  rows = sweep.collect(points, root)
  sweep.write_tables(rows, root)
  groups = json.loads(pathlib.Path(root, 'seeds.json').read_text(encoding='utf-8'))
  assert [g['group'] for g in groups] == ['base'] and groups[0]['seeds'] == [0, 1]
  assert groups[0]['valid_ppl']['min'] == min(base['valid_ppl'], load('base_seed1')['valid_ppl'])
  assert 'Over seeds' in pathlib.Path(root, 'results.md').read_text(encoding='utf-8')
  single = str(tmp_path / 'single')  # no seed groups: no seeds.json
  sweep.write_tables([r for r in rows if r['name'] == 'base'], single)
  assert os.listdir(single) and 'seeds.json' not in os.listdir(single)


def test_start_from_an_unfinished_point_is_refused(tmp_path):
  points = [dict(name='more', kind='train', config='experiments/text.py:tiny', start_from='base')]
  with pytest.raises(sweep.SweepError, match="starts from 'base'"):
    sweep.run_sweep(points, str(tmp_path), parallel=1, common_overrides={})


def test_sweep_files_in_a_bucket(tmp_path, monkeypatch):
  import json  # pylint: disable=g-import-not-at-top
  from etils import epath  # pylint: disable=g-import-not-at-top
  from tests import fake_gcs  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  with fake_gcs.fake_gcs(str(tmp_path / 'bucket')):
    root = epath.Path('gs://b/sweep')
    (root / 'base' / 'checkpoints' / '10').mkdir(parents=True)
    (root / 'base' / 'checkpoints' / '10' / 'state').write_text('array bytes')
    (root / 'base' / 'config.json').write_text('{}')
    (root / 'base' / 'results.json').write_text(json.dumps({'valid_ppl': 10.0, 'test_ppl': 11.0, 'config': {}}))
    point = dict(name='more', kind='train', config='x', start_from='base')
    sweep.start_workdir(point, root, root / 'more')
    assert (root / 'more' / 'checkpoints' / '10' / 'state').read_text() == 'array bytes'
    assert not (root / 'more' / 'results.json').exists() and not sweep.finished(root, 'more')
    rows = sweep.collect([dict(name='base', kind='train'), point], 'gs://b/sweep')
    sweep.write_tables(rows, 'gs://b/sweep')
    assert '| base |' in (root / 'results.md').read_text()
  assert not (tmp_path / 'gs:').exists()


SWEEPS = {'brown.py': ('table1', 'table1_tuned', 'regularised', 'ablation_h', 'ablation_n',
                       'ablation_optimizer', 'ladder'),
          'ptb.py': ('ngrams', 'table', 'ladder', 'char_ladder', 'reference_options')}


@pytest.mark.parametrize('experiment,name', [(e, n) for e, names in SWEEPS.items() for n in names])
def test_every_named_sweep_point_is_a_valid_config(experiment, name):
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  points = config_lib.load_experiment(os.path.join('experiments', experiment)).get_sweep(name)
  names = [p['name'] for p in points]
  assert len(set(names)) == len(names), f'{name}: point names repeat'
  for point in filter(lambda p: p['kind'] == 'train', points):
    path, _, variant = point['config'].partition(':')
    config = config_lib.load_experiment(path).get_config(variant)
    for key, value in point.get('overrides', {}).items():
      section, _, field = key.rpartition('.')
      target = config[section] if section else config
      assert field in target, f'{name}/{point["name"]}: {key} is not a config key'
      target[field] = value
    config_lib.validate(config)
