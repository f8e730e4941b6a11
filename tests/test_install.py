"""The installed package: every console script runs from any directory (CI installs the package
with `pip install .` before the tests; elsewhere these tests skip unless it is installed)."""

import json
import os
import shutil

import pytest

from tests import side_by_side

pytestmark = pytest.mark.slow

SCRIPTS = ('nplm-train', 'nplm-score', 'nplm-sample', 'nplm-embeddings', 'nplm-extend', 'nplm-plot', 'nplm-export',
           'nplm-ngram', 'nplm-mix', 'nplm-prepare', 'nplm-sweep', 'nplm-table1')


@pytest.fixture(scope='module')
def installed():
  missing = [s for s in SCRIPTS if shutil.which(s) is None]
  if missing:
    message = f'the package is not installed (no {missing[0]} on PATH): pip install . (docs/development.md, "Installing")'
    if os.environ.get('CI'):
      pytest.fail(message)  # .ci/run installs it: a missing script there is a broken package
    pytest.skip(message)


def _installed_env():
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}  # the installed package, not the checkout
  return dict(env, JAX_PLATFORMS='cpu')


def test_every_script_has_help(installed, tmp_path):
  subcommands = (('nplm-embeddings', 'neighbours'), ('nplm-embeddings', 'export'), ('nplm-plot', 'curves'))
  commands = [(name, '--help') for name in SCRIPTS] + [(*s, '--help') for s in subcommands]
  outputs = {c: p.stdout for c, p in side_by_side.run({c: c for c in commands}, tmp_path, _installed_env()).items()}
  helps = {name: outputs[(name, '--help')] for name in SCRIPTS}
  for name, out in helps.items():
    assert out.startswith(f'usage: {name} '), (name, out[:300])  # one parser, one layout for every command
  assert '(default: 50)' in helps['nplm-sample']  # --num_tokens
  assert '(default: 3)' in helps['nplm-ngram']  # --order
  assert '--config.SECTION.KEY=VALUE' in helps['nplm-train']
  for name, sub in subcommands:
    out = outputs[(name, sub, '--help')]
    assert f'{name} {sub}' in out and '--workdir' in out


def test_the_installed_package_ships_its_type_hints(installed, tmp_path):
  """py.typed (PEP 561) is installed beside the modules, so type checkers read the package's hints."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = "import importlib.resources as r; print(r.files('nplm_jax').joinpath('py.typed').is_file())"
  proc = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=_installed_env(), capture_output=True,
                        text=True, timeout=120, check=True)
  assert proc.stdout.strip() == 'True', proc.stderr


def test_the_scripts_train_and_use_a_model_from_another_directory(installed, tmp_path):
  from tests import corpora  # pylint: disable=g-import-not-at-top
  files = corpora.write_markov_corpus(str(tmp_path))
  with open(files['valid'], 'a', encoding='utf-8') as f:
    f.write('w1 w2 never_in_train\n')
  data = [f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')]
  # experiments/text.py is found inside the installed package: there is no experiments/ folder here
  assert not (tmp_path / 'experiments').exists()
  side_by_side.run({'prepare': ['nplm-prepare', '--config=experiments/text.py:tiny', '--output=prepared', *data],
                    'train': ['nplm-train', '--config=experiments/text.py:tiny', '--workdir=run',
                              '--config.train.num_epochs=1', '--config.mesh.cpu_devices=1', *data]},
                   tmp_path, _installed_env())
  results = json.loads((tmp_path / 'run' / 'results.json').read_text())
  (tmp_path / 'new.txt').write_text('w1 w2 brand_new w3\n')
  # the uses of the trained model and the other scripts read it and write apart: all at once
  outs = side_by_side.run({
      'score': ['nplm-score', '--workdir=run', f'--text={files["test"]}', '--format=json'],
      'sample': ['nplm-sample', '--workdir=run', '--num_tokens=5'],
      'neighbours': ['nplm-embeddings', 'neighbours', '--workdir=run', '--words=w1'],
      'extend': ['nplm-extend', '--workdir=run', '--text=new.txt', '--output_workdir=ext'],
      'plot': ['nplm-plot', 'curves', '--workdir=run', '--output=curves.png'],
      'export': ['nplm-export', '--workdir=run', '--output=exported'],
      'ngram': ['nplm-ngram', '--config=experiments/text.py:tiny', '--order=2', *data],
      'mix': ['nplm-mix', '--workdir=run', '--order=2'],
      'sweep': ['nplm-sweep', '--config=experiments/text.py:tiny', '--grid=model.h=8', '--root=sweep',
                '--set=train.max_steps=5', *[f'--set={d[len("--config."):]}' for d in data], '--set=mesh.cpu_devices=1'],
  }, tmp_path, _installed_env())
  assert json.loads(outs['score'].stdout.splitlines()[-1])['tokens'] == results['test_tokens']
  assert len(outs['sample'].stdout.split()) >= 1
  assert outs['neighbours'].stdout.startswith('w1: ')
  assert (tmp_path / 'exported' / 'params.npz').exists() and (tmp_path / 'ext').is_dir()
  assert json.loads(outs['ngram'].stdout)['order'] == 2
  assert '1/1 points have results' in outs['sweep'].stdout


def test_ci_runs_the_readmes_test_command():
  """.ci/run's pytest line is the one README's "Run the tests" gives a fresh machine."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(repo, '.ci', 'run'), encoding='utf-8') as f:
    ci_command = [line.strip() for line in f if line.startswith('python -m pytest')]
  with open(os.path.join(repo, 'README.md'), encoding='utf-8') as f:
    readme = f.read()
  start = readme.index('## Run the tests')
  section = readme[start:readme.index('\n## ', start + 1)]
  assert len(ci_command) == 1 and f'&& {ci_command[0]}\n' in section, ci_command
