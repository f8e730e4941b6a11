"""The installed package: every console script runs from any directory (CI installs the package
with `pip install .` before the tests; elsewhere these tests skip unless it is installed)."""

import json
import os
import shutil
import subprocess

import pytest

SCRIPTS = ('nplm-train', 'nplm-score', 'nplm-sample', 'nplm-embeddings', 'nplm-extend', 'nplm-plot', 'nplm-export',
           'nplm-ngram', 'nplm-mix', 'nplm-prepare', 'nplm-sweep', 'nplm-table1')


@pytest.fixture(scope='module')
def installed():
  missing = [s for s in SCRIPTS if shutil.which(s) is None]
  if missing:
    message = f'the package is not installed (no {missing[0]} on PATH): pip install . (README, "Installing")'
    if os.environ.get('CI'):
      pytest.fail(message)  # .ci/run installs it: a missing script there is a broken package
    pytest.skip(message)


def _installed_env():
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}  # the installed package, not the checkout
  return dict(env, JAX_PLATFORMS='cpu')


def script(name, *args, cwd, check=True):
  proc = subprocess.run([name, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300,
                        env=_installed_env())
  if check:
    assert proc.returncode == 0, f'{name} {args}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}'
  return proc


def outputs_side_by_side(commands, cwd) -> dict:
  """{command: stdout} of commands that only read (helps), run at once: each is mostly an import."""
  procs = {c: subprocess.Popen(list(c), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=_installed_env()) for c in commands}
  outputs = {}
  for command, proc in procs.items():
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f'{command}\nstdout:\n{out}\nstderr:\n{err}'
    outputs[command] = out
  return outputs


def test_every_script_has_help(installed, tmp_path):
  subcommands = (('nplm-embeddings', 'neighbours'), ('nplm-embeddings', 'export'), ('nplm-plot', 'curves'))
  outputs = outputs_side_by_side([(name, '--help') for name in SCRIPTS] + [(*s, '--help') for s in subcommands],
                                 tmp_path)
  helps = {name: outputs[(name, '--help')] for name in SCRIPTS}
  for name, out in helps.items():
    assert out.startswith(f'usage: {name} '), (name, out[:300])  # one parser, one layout for every command
  assert '(default: 50)' in helps['nplm-sample']  # --num_tokens
  assert '(default: 3)' in helps['nplm-ngram']  # --order
  assert '--config.SECTION.KEY=VALUE' in helps['nplm-train']
  for name, sub in subcommands:
    out = outputs[(name, sub, '--help')]
    assert f'{name} {sub}' in out and '--workdir' in out


def test_the_scripts_train_and_use_a_model_from_another_directory(installed, tmp_path):
  from tests import corpora  # pylint: disable=g-import-not-at-top
  files = corpora.write_markov_corpus(str(tmp_path))
  with open(files['valid'], 'a', encoding='utf-8') as f:
    f.write('w1 w2 never_in_train\n')
  data = [f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')]
  # experiments/text.py is found inside the installed package: there is no experiments/ folder here
  assert not (tmp_path / 'experiments').exists()
  script('nplm-prepare', '--config=experiments/text.py:tiny', '--output=prepared', *data, cwd=tmp_path)
  script('nplm-train', '--config=experiments/text.py:tiny', '--workdir=run', '--config.train.num_epochs=1',
         '--config.mesh.cpu_devices=1', *data, cwd=tmp_path)
  results = json.loads((tmp_path / 'run' / 'results.json').read_text())
  out = script('nplm-score', '--workdir=run', f'--text={files["test"]}', '--format=json', cwd=tmp_path).stdout
  assert json.loads(out.splitlines()[-1])['tokens'] == results['test_tokens']
  assert len(script('nplm-sample', '--workdir=run', '--num_tokens=5', cwd=tmp_path).stdout.split()) >= 1
  assert script('nplm-embeddings', 'neighbours', '--workdir=run', '--words=w1', cwd=tmp_path).stdout.startswith('w1: ')
  (tmp_path / 'new.txt').write_text('w1 w2 brand_new w3\n')
  script('nplm-extend', '--workdir=run', '--text=new.txt', '--output_workdir=ext', cwd=tmp_path)
  script('nplm-plot', 'curves', '--workdir=run', '--output=curves.png', cwd=tmp_path)
  script('nplm-export', '--workdir=run', '--output=exported', cwd=tmp_path)
  assert (tmp_path / 'exported' / 'params.npz').exists()
  ngram = json.loads(script('nplm-ngram', '--config=experiments/text.py:tiny', '--order=2', *data,
                            cwd=tmp_path).stdout)
  assert ngram['order'] == 2
  script('nplm-mix', '--workdir=run', '--order=2', cwd=tmp_path)
  grid = script('nplm-sweep', '--config=experiments/text.py:tiny', '--grid=model.h=8', '--root=sweep',
                '--set=train.max_steps=5', *[f'--set={d[len("--config."):]}' for d in data], '--set=mesh.cpu_devices=1',
                cwd=tmp_path)
  assert '1/1 points have results' in grid.stdout
