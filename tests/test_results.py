"""Results as data: RESULTS.md's rendered tables are exactly what results/ holds (launch/results.py)."""

import json
import os
import pathlib
import re

import pytest

from launch import results

pytestmark = [pytest.mark.fast, pytest.mark.unit]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize('path', results.rendered_documents())
def test_results_md_tables_are_rendered_from_results_files(path):
  with open(path, encoding='utf-8') as f:
    text = f.read()
  assert '<!-- results:' in text
  assert results.rendered_markdown(text, results.load_records()) == text, (
      f'{os.path.basename(path)} differs from results/: run python -m launch.results render --write')


def test_every_figure_table_is_rendered():
  """RESULTS.md and README.md hold no table written by hand."""
  for path in results.rendered_documents():
    with open(path, encoding='utf-8') as f:
      text = results._SECTION.sub('', f.read())  # pylint: disable=protected-access
    lines = text.split('\n')
    assert [line for line, below in zip(lines, lines[1:]) if below.startswith('| ---')] == [], path


def test_every_results_file_says_where_its_figures_come_from():
  records = results.load_records()
  assert records
  for r in records:
    for key in ('name', 'table', 'label', 'command', 'commit', 'device', 'seed', 'figures', 'config'):
      assert key in r, (r.get('name'), key)
    assert r['table'] in results.TABLES or r['table'] in results.RENDERERS, r['name']
    # a test figure, or for a run not evaluated on test (timed to a quality, or stopped), its time or its curve
    f = r['figures']
    assert f.get('test_ppl', 0) > 0 or f.get('seconds_to_below_300', 0) > 0 or f.get('valid_curve'), r['name']
    # a record transcribed from RESULTS.md (the run's results.json not kept) says so, and has no wall time to give
    assert r['figures'].get('wall_seconds', 0) > 0 or 'RESULTS.md' in r.get('transcribed', ''), r['name']
    assert os.path.getsize(os.path.join(results.RESULTS_DIR, f'{r["name"]}.json')) < 64 * 1024  # no checkpoints


def test_a_changed_figure_is_caught(tmp_path):
  """Positive control: a results file whose figure changed renders another table."""
  text = ''.join(pathlib.Path(path).read_text(encoding='utf-8') for path in results.rendered_documents())
  records = json.loads(json.dumps(results.load_records()))
  records[0]['figures']['test_ppl'] += 1.0
  assert results.rendered_markdown(text, records) != text


def test_a_trained_workdir_becomes_a_record_and_a_ladder_row(tmp_path):
  """collect's record of a finished character-level workdir (results.json, mix_results.json,
  metrics.jsonl), rendered in the character ladder's table: bits per character, the mixture's too."""
  workdir = tmp_path / 'run'
  workdir.mkdir()
  config = {'seed': 3, 'model': {'kind': 'revisited'}}
  (workdir / 'results.json').write_text(json.dumps(
      {'valid_ppl': 2.7, 'test_ppl': 2.6, 'valid_bpc': 1.433, 'test_bpc': 1.379, 'num_parameters': 13913842,
       'epochs': 4.5, 'wall_seconds': 480.2, 'stop_reason': 'early stopping', 'platform': 'gpu', 'config': config}))
  (workdir / 'mix_results.json').write_text(json.dumps({'mix_test_ppl': 2.5}))
  (workdir / 'metrics.jsonl').write_text('\n'.join(json.dumps({'tokens_per_sec': r}) for r in (90e3, 100e3, 110e3)))
  record = results.record(str(workdir), 'ptb_char_ladder_char_ladder5', 'char_ladder', 'char_ladder5_dropout', 'python -m ...',
                          commit='abc', device='NVIDIA H100 80GB HBM3')
  assert record['seed'] == 3 and record['figures']['tokens_per_sec'] == 100e3
  table = results.render_table('char_ladder', [record])
  assert '| `char_ladder5_dropout` | 13,913,842 | 4.50 | early stopping | 100,000 | 480 | 1.433 | 1.379 | 1.322 | 3 |' \
      in table


def test_a_row_run_over_several_seeds_gets_a_mean_and_spread():
  """Records of one label with different seeds: their rows, then one of mean ± sample sd."""
  def record(seed, test_ppl):
    figures = {'test_ppl': test_ppl, 'valid_ppl': test_ppl + 10, 'wall_seconds': 100.0, 'epochs': 3.0,
               'num_parameters': 1000, 'tokens_per_sec': 5e4}
    return {'name': f'r{seed}', 'table': 'ladder', 'label': 'ladder5_dropout', 'seed': seed, 'device': 'GPU',
            'figures': figures}
  table = results.render_table('ladder_points', [record(0, 100.0), record(1, 102.0), record(2, 104.0)])
  summary = [line for line in table.splitlines() if 'mean ± sd of 3 seeds' in line]
  assert len(summary) == 1 and '| 112.00 ± 2.00 | 102.00 ± 2.00 |' in summary[0]
  assert '| 50,000 ± 0 | 100 ± 0 |' in summary[0]


def test_a_summary_over_devices_leaves_out_the_speeds():
  """Seeds run on a CPU and a GPU: perplexities averaged, tokens/s and wall time not (they measure the device)."""
  def record(seed, device, tokens_per_sec):
    figures = {'test_ppl': 100.0 + seed, 'valid_ppl': 110.0, 'wall_seconds': 1e6 / tokens_per_sec, 'epochs': 4.0,
               'num_parameters': 1000, 'tokens_per_sec': tokens_per_sec}
    return {'name': f'r{seed}', 'table': 'ladder', 'label': 'tune9', 'seed': seed, 'device': device,
            'figures': figures}
  table = results.render_table('ladder_points', [record(0, 'CPU', 500.0), record(1, 'H200', 1.4e5),
                                                 record(2, 'H200', 1.4e5)])
  summary = [line for line in table.splitlines() if 'mean ± sd of 3 seeds' in line]
  assert len(summary) == 1 and '| 4.00 ± 0.00 |  |  |  | 110.00 ± 0.00 | 101.00 ± 1.00 |' in summary[0], summary


def test_a_sweep_root_is_collected_point_by_point(tmp_path, monkeypatch):
  """collect --sweep_root: every point with a results.json becomes results/NAME_POINT_seedS.json,
  labelled 'LABEL POINT'; a point without one (unfinished) is left out."""
  for point, seed in (('ladder4_tied', 0), ('ladder5_dropout', 1), ('unfinished', 0)):
    (tmp_path / 'root' / point).mkdir(parents=True)
    if point != 'unfinished':
      (tmp_path / 'root' / point / 'results.json').write_text(json.dumps(
          {'valid_ppl': 120.0, 'test_ppl': 110.0, 'wall_seconds': 400.0, 'platform': 'gpu', 'config': {'seed': seed}}))
  monkeypatch.setattr(results, 'RESULTS_DIR', str(tmp_path / 'results'))
  assert results.main(['collect', f'--sweep_root={tmp_path / "root"}', '--name=ptb', '--table=ladder', '--label=PTB',
                       '--command=python -m launch.sweep --config=experiments/ptb.py --sweep=ladder --root=ROOT',
                       '--commit=abc', '--device=GPU']) == 0
  assert sorted(os.listdir(tmp_path / 'results')) == ['ptb_ladder4_tied_seed0.json', 'ptb_ladder5_dropout_seed1.json']
  with open(tmp_path / 'results' / 'ptb_ladder5_dropout_seed1.json', encoding='utf-8') as f:
    kept = json.load(f)
  assert kept['label'] == 'PTB ladder5_dropout' and kept['seed'] == 1 and kept['command'].endswith('# point ladder5_dropout')


def test_an_ngram_baselines_output_file_becomes_an_ngram_record(tmp_path, monkeypatch):
  """collect --workdir=FILE (nplm-ngram --output's) keeps the n-gram's figures and config, as kind 'ngram'."""
  config = {'data': {'corpus': 'brown'}, 'ngram': {'order': 5, 'smoothing': 'kneser_ney'}}
  (tmp_path / 'kn5.json').write_text(json.dumps(
      {'model': 'kneser_ney_5', 'order': 5, 'smoothing': 'kneser_ney', 'vocab_size': 10, 'valid_ppl': 347.4,
       'test_ppl': 329.8, 'seconds': 0.9, 'corpus': 'brown', 'config': config}))
  monkeypatch.setattr(results, 'RESULTS_DIR', str(tmp_path / 'results'))
  assert results.main(['collect', f'--workdir={tmp_path / "kn5.json"}', '--name=brown_kn5', '--table=table1',
                       '--label=kneser_ney_5', '--command=nplm-ngram --config=experiments/brown.py --order=5',
                       '--commit=abc', '--device=CPU']) == 0
  with open(tmp_path / 'results' / 'brown_kn5.json', encoding='utf-8') as f:
    kept = json.load(f)
  assert kept['kind'] == 'ngram' and kept['config'] == config and kept['figures'] == {
      'order': 5, 'smoothing': 'kneser_ney', 'valid_ppl': 347.4, 'test_ppl': 329.8, 'wall_seconds': 0.9}


def test_a_workdir_is_collected_under_a_name_with_dots_and_a_path_is_refused(tmp_path, monkeypatch):
  """collect --workdir --name: a point's name as its sweep gives it (dropout0.2) is a file name; a name that
  would leave results/ or hide the file is refused in one line, nothing written."""
  (tmp_path / 'run').mkdir()
  (tmp_path / 'run' / 'results.json').write_text(json.dumps(
      {'valid_ppl': 4.4, 'test_ppl': 4.2, 'wall_seconds': 900.0, 'platform': 'cpu', 'config': {'seed': 0}}))
  monkeypatch.setattr(results, 'RESULTS_DIR', str(tmp_path / 'results'))
  common = [f'--workdir={tmp_path / "run"}', '--table=char_overfit', '--label=L', '--command=c', '--commit=abc']
  assert results.main(['collect', '--name=over19_dropout0.2_seed0', *common]) == 0
  assert os.listdir(tmp_path / 'results') == ['over19_dropout0.2_seed0.json']
  for bad in ('../elsewhere', '.hidden', 'a/b', 'a b'):
    with pytest.raises(SystemExit, match='use letters, digits'):
      results.main(['collect', f'--name={bad}', *common])
  assert os.listdir(tmp_path / 'results') == ['over19_dropout0.2_seed0.json']


def test_a_tables_rows_take_the_numbers_in_their_names_by_value(tmp_path, monkeypatch):
  """over9 comes before over10 in a rendered table (a plain sort of the file names put over10 after over0)."""
  monkeypatch.setattr(results, 'RESULTS_DIR', str(tmp_path))
  for point in ('over10', 'over9', 'over0'):
    (tmp_path / f'ptb_{point}_seed0.json').write_text(json.dumps(
        {'name': f'ptb_{point}_seed0', 'table': 'char_overfit', 'label': f'PTB characters {point}',
         'figures': {'valid_bpc': 2.0, 'test_bpc': 2.0}}))
  assert [r['label'] for r in results.load_records()] == [f'PTB characters {p}' for p in ('over0', 'over9', 'over10')]


def test_a_table1_point_trained_again_renders_from_its_rerun_not_the_transcribed_record_kept_beside_it():
  def ngram(name, test, transcribed):
    return {'name': name, 'table': 'table1', 'figures': {'valid_ppl': 360.0, 'test_ppl': test},
            **({'transcribed': 'figures copied'} if transcribed else {})}
  records = [ngram('brown_table1_interpolated_3', 339.9, False),
             ngram('brown_table1_interpolated_3_transcribed', 111.1, True),
             ngram('brown_table1_kneser_ney_3_transcribed', 332.6, True)]
  text, cited = results.RENDERERS['table1'](records)
  assert '339.9' in text and '111.1' not in text and '332.6' in text
  assert [r['name'] for r in cited] == ['brown_table1_interpolated_3', 'brown_table1_kneser_ney_3_transcribed']
  rows = {line.split(' | ')[0].lstrip('| '): line for line in text.splitlines()[2:]}
  assert 'Del. Int. trigram' in rows and f'Kneser-Ney back-off, n=3 {results.TRANSCRIBED}' in rows  # its one record


def test_collecting_over_another_runs_file_is_refused_and_the_same_run_is_rewritten(tmp_path, monkeypatch):
  """A name results/ already holds from a run of another command, commit, device or config is refused in one
  line, nothing written; collecting the same run again rewrites its file."""
  (tmp_path / 'run').mkdir()
  (tmp_path / 'run' / 'results.json').write_text(json.dumps(
      {'valid_ppl': 4.4, 'test_ppl': 4.2, 'wall_seconds': 900.0, 'platform': 'cpu', 'config': {'seed': 0}}))
  monkeypatch.setattr(results, 'RESULTS_DIR', str(tmp_path / 'results'))
  common = [f'--workdir={tmp_path / "run"}', '--name=point', '--table=checks', '--label=L', '--command=c']
  assert results.main(['collect', *common, '--commit=abc']) == 0
  assert results.main(['collect', *common, '--commit=abc']) == 0
  kept = (tmp_path / 'results' / 'point.json').read_text()
  with pytest.raises(SystemExit, match=r'already holds point from another run; choose another --name') as e:
    results.main(['collect', *common, '--commit=def'])
  assert '\n' not in str(e.value) and (tmp_path / 'results' / 'point.json').read_text() == kept


def test_an_exploration_table_prints_alone(capsys):
  """RESULTS.md sums some explorations up in a few lines; their whole table prints by name."""
  assert results.main(['render', '--table=char_overfit']) == 0
  out = capsys.readouterr().out
  assert out.startswith('## char_overfit\n') and out.count('| `PTB characters over') >= 40 and '## char_shape' not in out


def budget_row(label: str, seconds: float, alone: float, mixed: float) -> dict:
  return {'table': 'own_text_budget', 'label': label, 'config': {'train': {'max_seconds': seconds}},
          'figures': {'test_ppl': alone, 'mix_test_ppl': mixed, 'ngram_test_ppl': 141.0}}


def test_a_budget_table_draws_each_recipe_s_curve_by_budget(tmp_path):
  """`plot` draws a corpus's recipes at two budgets or more, points in order of budget; a recipe at one budget,
  another corpus's rows and a corpus with no curve are left out or refused."""
  rows = [budget_row('PTB as text, new', 600, 128.0, 112.0), budget_row('PTB as text, new', 120, 155.0, 121.0),
          budget_row('PTB as text, old', 300, 145.0, 117.0), budget_row('PTB as text, old', 120, 169.0, 123.0),
          budget_row('PTB as text, once', 600, 130.0, 111.0), budget_row('Brown as text, new', 120, 300.0, 280.0)]
  curves = results.budget_curves(rows, 'own_text_budget', 'PTB as text')
  assert curves == {'new': [(2.0, 155.0, 121.0), (10.0, 128.0, 112.0)], 'old': [(2.0, 169.0, 123.0), (5.0, 145.0, 117.0)]}
  written = results.plot_budget_curves(rows, 'own_text_budget', 'PTB as text', str(tmp_path / 'curve.png'))
  assert pathlib.Path(written).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  with pytest.raises(SystemExit, match="no recipe of table 'own_text_budget' has rows for 'Brown as text'"):
    results.plot_budget_curves(rows, 'own_text_budget', 'Brown as text', str(tmp_path / 'none.png'))


def test_the_training_curves_draw_each_run_by_epoch(tmp_path):
  """`curves` draws every curve_* record's validation by epoch from its first epoch, a transcribed run's marked;
  other tables are left out."""
  rows = [{'table': 'curve_a', 'label': 'A', 'figures': {'valid_curve': [300.0, 290.0]}},
          {'table': 'curve_a', 'label': 'A resumed', 'figures': {'valid_curve': [285.0], 'first_epoch': 3}},
          {'table': 'curve_a', 'label': 'C', 'figures': {'valid_curve': [310.0]}, 'transcribed': 'from RESULTS.md'},
          {'table': 'own_text_budget', 'label': 'B', 'figures': {'valid_curve': [1.0]}}]
  assert results.training_curves(rows) == {'A (curve_a)': [(1, 300.0), (2, 290.0)], 'A resumed (curve_a)': [(3, 285.0)],
                                           'C (curve_a) †': [(1, 310.0)]}
  written = results.plot_training_curves(rows, str(tmp_path / 'curves.png'))
  assert pathlib.Path(written).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  with pytest.raises(SystemExit, match='no results file of a table named none_'):
    results.plot_training_curves(rows, str(tmp_path / 'none.png'), prefix='none_')


def test_a_transcribed_figure_is_marked_where_it_is_read():
  """A figure copied from RESULTS.md as first written (its run's results.json not kept) says so wherever a table cites
  its file, in its row of a table of rows and in README's headline cell; its file names the commit its config was
  rebuilt at. Control: a run's own record is never marked."""
  records = results.load_records()
  transcribed = [r for r in records if r.get('transcribed')]
  assert transcribed and all(re.fullmatch('[0-9a-f]{40}', r.get('config_rebuilt_at', '')) for r in transcribed)
  names = {r['name'] for r in transcribed}
  for path in results.rendered_documents():
    with open(path, encoding='utf-8') as f:
      text = f.read()
    for cited in re.finditer(r'`results/([^`]+)\.json`( †)?', text):
      assert bool(cited.group(2)) == (cited.group(1) in names), cited.group(0)
  table = results.render_table('regularised', records)
  assert all(line.split(' | ')[0].endswith(results.TRANSCRIBED) for line in table.splitlines()[2:] if '`reg' in line)
  headline = results.render_table('headline', records).splitlines()
  by_name = {r['name']: r for r in records}
  for (corpus, _, group, _, _), line in zip(results.HEADLINE, headline[2:]):
    cell = line.split(' | ')[2]
    assert cell.endswith(results.TRANSCRIBED) == any(by_name[n].get('transcribed') for n in group), line


def test_a_ladder_shows_one_row_per_rung_and_its_points_apart():
  """A rung's run to early stopping is its row in RESULTS.md; its time-budget run goes to the points' table, as
  does a tuning point outside any rung."""
  def record(name, stop_reason, epochs):
    figures = {'test_ppl': 100.0, 'valid_ppl': 110.0, 'epochs': epochs, 'stop_reason': stop_reason}
    return {'name': name, 'table': 'ladder', 'label': name, 'seed': 0, 'device': 'GPU', 'figures': figures}
  records = [record('ptb_ladder_ladder2_depth4_seed0', 'train.max_seconds=360 spent', 1.0),
             record('ptb_ladder_ladder2_depth4_seed0_2', 'improvement below 1.00% after 4 anneals', 5.5),
             record('ptb_ladder_ladder3_distant_seed0', 'train.max_seconds=360 spent', 0.5),
             record('brown_tune_tune99_seed0', '', 4.0)]
  rungs = results.render_table('ladder', records)
  points = results.render_table('ladder_points', records)
  assert '`ptb_ladder_ladder2_depth4_seed0_2`' in rungs and '`ptb_ladder_ladder2_depth4_seed0`' in points
  assert '`ptb_ladder_ladder3_distant_seed0`' in rungs  # a rung with only a budget run keeps it
  assert '`brown_tune_tune99_seed0`' in points and '`brown_tune_tune99_seed0`' not in rungs
