"""The documents a user reads: README short, every link to a file of the repository there, every
reference to a section of README or a docs/ page naming a section that exists, every page opening with
what its reader can do there."""

import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 300
DOCUMENTS = ['README.md', 'RESULTS.md', *sorted(os.path.relpath(p, REPO) for p in glob.glob(f'{REPO}/docs/*.md'))]
# where text refers to a section: README then a heading in quotes, or docs/tools.md then one
SECTION_REFERENCE = re.compile(r'(README|docs/\w+\.md),? \(?"([^"]+)"')
SOURCES = ['nplm_jax/**/*.py', 'experiments/*.py', 'launch/*', 'benchmarks/*', 'tests/*.py', '*.md', 'docs/*.md']


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


def test_readme_is_short():
  assert read('README.md').count('\n') <= README_MAX_LINES


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
      if section not in sections(target):
        stale.append(f'{os.path.relpath(path, REPO)}: {document}, "{section}"')
  assert not stale, stale


@pytest.mark.parametrize('page', [d for d in DOCUMENTS if d.startswith('docs/')])
def test_each_page_opens_with_a_title_and_what_its_reader_can_do(page):
  lines = read(page).splitlines()
  assert lines[0].startswith('# ') and not lines[1] and lines[2] and not lines[2].startswith(('#', '|', '`')), page


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


# Words about how the work was organised rather than about the software (the periods it was done in,
# machines had for a while, numbered tasks of a tracker, run tags in file names): built from parts, so that
# this file does not match itself.
ORGANISATION_WORDS = re.compile('|'.join([
    r'\bsess' + r'ions?\b', r'\blen' + r't (to|for)\b', r'\bborro' + r'wed\b', r'\biss' + r'ues? \d+',
    r"\biss" + r"ue's\b", r'\btas' + r'k \d+', r'\brounds? of wor' + r'k\b', r'\bdevice[- ]time bud' + r'get\b',
    r'\b(h100|h200)[a-d]\b', r'\b(first|second|third|fourth|fifth) rou' + r'nd\b']), re.I)
PROJECT_TEXT = ['README.md', 'RESULTS.md', 'docs/*.md', 'nplm_jax/**/*.py', 'experiments/*.py', 'launch/*',
                'benchmarks/*', 'tests/*.py', 'pyproject.toml', '.ci/run']
# pytest's own word for a fixture that lives as long as the test run
PYTEST_SCOPE = re.compile(r"""scope=['"]ses""" + r"""sion['"]""")


def test_the_project_text_speaks_of_the_software_not_of_how_it_was_made():
  files = project_files(PROJECT_TEXT)
  assert len(files) > 80
  found = []
  for path in files:
    with open(path, encoding='utf-8', errors='replace') as f:
      for number, line in enumerate(f, 1):
        match = ORGANISATION_WORDS.search(PYTEST_SCOPE.sub('', line))
        if match:
          found.append(f'{os.path.relpath(path, REPO)}:{number}: {match.group(0)!r}')
  assert not found, found


def test_results_file_names_carry_no_run_tags():
  """A results file is named by what ran (corpus, sweep, point, budget, seed); the device, date and commit
  live inside it."""
  names = [os.path.relpath(p, REPO) for p in glob.glob(f'{REPO}/results/**/*.json*', recursive=True)]
  assert len(names) > 100
  tagged = [n for n in names if re.search(r'(^|[_/])((h100|h200)[a-d]?|cpu\d*|gpu)(_|\.|$)', n)]
  assert not tagged, tagged


def test_the_organisation_words_check_sees_them():
  """Positive control for the two checks above."""
  for line in ('the third H200 ' + 'ses' + 'sion', 'as iss' + 'ue 28 asks', 'on a GPU len' + 't for 15 minutes',
               'results/ptb_ladder_h200' + 'b_x.json', 'reliability, third rou' + 'nd'):
    assert ORGANISATION_WORDS.search(line) or re.search(r'(^|[_/])((h100|h200)[a-d]?|cpu\d*|gpu)(_|\.|$)', line), line
  assert not ORGANISATION_WORDS.search(PYTEST_SCOPE.sub('', "@pytest.fixture(scope='ses" + "sion')"))


def test_the_unit_tier_names_tests_that_exist():
  """A test renamed or removed would leave the unit tier silently: every name it lists is a test function."""
  from tests import conftest  # pylint: disable=g-import-not-at-top
  missing = []
  for module, names in conftest.UNIT_TESTS.items():
    text = read(f'tests/{module}.py')
    missing += [f'{module}.{n}' for n in names or () if not re.search(rf'^def {n}\(', text, re.M)]
  assert not missing, missing
