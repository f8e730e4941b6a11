"""Results as data: RESULTS.md's rendered tables are exactly what results/ holds (launch/results.py)."""

import json
import os

from launch import results

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_results_md_tables_are_rendered_from_results_files():
  with open(results.RESULTS_MD, encoding='utf-8') as f:
    text = f.read()
  assert '<!-- results:' in text
  assert results.rendered_markdown(text, results.load_records()) == text, (
      'RESULTS.md differs from results/: run python -m launch.results render --write')


def test_every_results_file_says_where_its_figures_come_from():
  records = results.load_records()
  assert records
  for r in records:
    for key in ('name', 'table', 'label', 'command', 'commit', 'device', 'seed', 'figures', 'config'):
      assert key in r, (r.get('name'), key)
    assert r['table'] in results.TABLES and r['figures']['test_ppl'] > 0 and r['figures']['wall_seconds'] > 0
    assert os.path.getsize(os.path.join(results.RESULTS_DIR, f'{r["name"]}.json')) < 64 * 1024  # no checkpoints


def test_a_changed_figure_is_caught(tmp_path):
  """Positive control: a results file whose figure changed renders another table."""
  with open(results.RESULTS_MD, encoding='utf-8') as f:
    text = f.read()
  records = json.loads(json.dumps(results.load_records()))
  records[0]['figures']['test_ppl'] += 1.0
  assert results.rendered_markdown(text, records) != text
