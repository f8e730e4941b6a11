"""The documents a user reads say what is true: every link to a file of the repository leads to one, every
reference to a section of README or a docs/ page names a section that exists, the key reference lists every
config key with its default, results files are named by what ran."""

import glob
import os
import re

import pytest

pytestmark = [pytest.mark.fast, pytest.mark.unit]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = ['README.md', 'RESULTS.md', *sorted(os.path.relpath(p, REPO) for p in glob.glob(f'{REPO}/docs/**/*.md', recursive=True))]
# where text refers to a section: README then a heading in quotes, or docs/tools.md then one
SECTION_REFERENCE = re.compile(r'(README|RESULTS\.md|docs/[\w/]+\.md)(?:\'s)?,? \(?"([^"]+)"')
SOURCES = ['nplm_jax/**/*.py', 'experiments/*.py', 'launch/*', 'benchmarks/*', 'tests/*.py', '*.md', 'docs/**/*.md']


def read(relative: str) -> str:
  with open(os.path.join(REPO, relative), encoding='utf-8') as f:
    return f.read()


def project_files(patterns) -> list[str]:
  """The repository's files matching any of `patterns` (globs below the repository, ** included)."""
  return sorted({f for pattern in patterns for f in glob.glob(os.path.join(REPO, pattern), recursive=True)
                 if os.path.isfile(f)})


def sections(relative: str) -> set[str]:
  """A document's headings and bold paragraph labels (**Scoring text**), as text."""
  text = read(relative)
  return {m.strip() for m in re.findall(r'^#+ (.+)$', text, re.M)} | set(re.findall(r'\*\*([^*]+)\*\*', text))


@pytest.mark.parametrize('document', DOCUMENTS)
def test_every_link_to_a_file_exists(document):
  folder = os.path.dirname(os.path.join(REPO, document))
  links = re.findall(r'\]\(([^)#\s]+)(?:#[^)]*)?\)', read(document))
  missing = [link for link in links if '://' not in link and not os.path.exists(os.path.join(folder, link))]
  assert not missing, missing


def test_every_reference_to_a_section_names_one_that_exists():
  """References to README's sections went stale once the sections moved to docs/: every reference of the
  form README or docs/PAGE.md, then a section's name in quotes, in the code, tests, experiments, launchers
  and documents names a heading (or a bold label) of that document."""
  files = project_files(SOURCES)
  assert len(files) > 50
  stale = []
  for path in files:
    with open(path, encoding='utf-8', errors='replace') as f:
      text = ' '.join(f.read().split())  # references wrap across lines and comment markers
    text = re.sub(r' ?# ', ' ', text)
    for document, section in SECTION_REFERENCE.findall(text):
      target = 'README.md' if document == 'README' else document
      if not any(heading == section or heading.startswith(f'{section}:') or heading.startswith(f'{section} (')
                 for heading in sections(target)):  # a heading may go on after its name (': ...', ' (CPU)')
        stale.append(f'{os.path.relpath(path, REPO)}: {document}, "{section}"')
  assert not stale, stale


def test_the_key_reference_lists_every_config_key_with_its_default():
  """docs/configs.md's two tables (the keys every run sets, the tuning knobs) name each key of base_config once,
  with today's default: a key added, removed or given another default without the page is caught here."""
  import json  # pylint: disable=g-import-not-at-top
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  rows = re.findall(r'^\| `([\w.]+)` \| `(.*?)` \|', read('docs/configs.md'), re.M)
  listed = [key for key, _ in rows]
  assert len(listed) == len(set(listed)), [k for k in listed if listed.count(k) > 1]

  def leaves(tree, prefix=''):
    for key, value in tree.items():
      if isinstance(value, dict):
        yield from leaves(value, f'{prefix}{key}.')
      else:
        yield f'{prefix}{key}', value
  defaults = dict(leaves(json.loads(config_lib.base_config().to_json())))
  assert set(listed) == set(defaults), (set(defaults) - set(listed), set(listed) - set(defaults))
  wrong = {key: shown for key, shown in rows if shown != repr(defaults[key])}
  assert not wrong, wrong
  text = read('docs/configs.md')
  advanced = re.findall(r'^\| `([\w.]+)` \| `', text[text.index('## Advanced: tuning knobs'):], re.M)
  assert set(advanced) == config_lib.ADVANCED_KEYS  # the page's second table is what --print_config leaves out


def test_results_file_names_carry_no_run_tags():
  """A results file is named by what ran (corpus, sweep, point, budget, seed); the device, date and commit
  live inside it."""
  names = [os.path.relpath(p, REPO) for p in glob.glob(f'{REPO}/results/**/*.json*', recursive=True)]
  assert len(names) > 100
  tagged = [n for n in names if re.search(r'(^|[_/])((h100|h200)[a-d]?|cpu\d*|gpu)(_|\.|$)', n)]
  assert not tagged, tagged
  attempts = [n for n in names if re.search(r'_seed\d+_\d+\.json', n)]  # a second try is named by what differs
  assert not attempts, attempts


def test_the_best_configs_differences_from_the_defaults_are_current():
  """docs/configs.md's table of what each named best changes is what the configs resolve to today."""
  from launch import config_diff  # pylint: disable=g-import-not-at-top
  assert config_diff.main(['--check']) == 0, 'run python -m launch.config_diff --write'
  assert ('model.kind', 'bengio2003', 'revisited') in config_diff.differences('experiments/brown.py:best')


def test_the_public_workflow_runs_ci_with_the_corpora_where_ci_reads_them():
  """.github/workflows/ci.yml fetches the corpora into the folders .ci/run reads (../shared/data/nltk_data and
  ../shared/data/ptb beside the clone) and runs .ci/run itself."""
  import yaml  # pylint: disable=g-import-not-at-top
  workflow = yaml.safe_load(read('.github/workflows/ci.yml'))
  steps = workflow['jobs']['tests']['steps']
  assert steps[-1]['run'].strip() == 'bash .ci/run'
  fetch = next(s['run'] for s in steps if s.get('name') == 'Fetch the corpora')
  ci = read('.ci/run')
  assert 'shared_data="$(cd .. && pwd)/shared/data"' in ci and 'NLTK_DATA="$shared_data/nltk_data"' in ci
  assert 'PTB_DIR="$shared_data/ptb"' in ci
  assert 'data="$GITHUB_WORKSPACE/../shared/data"' in fetch and '"$data/nltk_data" brown' in fetch
  assert all(f'ptb.{split}.txt' in fetch for split in ('train', 'valid', 'test')) and '"$data/ptb/"' in fetch
