"""Character-level corpora (data.unit='char'): tokens, training in bits per character, the n-gram
of the same order on the same stream, and the tools reading characters back."""

import json
import math
import os
import subprocess
import sys

import pytest

from nplm_jax.data import corpora as data
from nplm_jax.tools import sample as sample_lib
from nplm_jax.tools import score as score_lib
from nplm_jax.tools import trained as trained_lib

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_line_becomes_characters_with_spaces_as_a_symbol():
  assert data.line_tokens('  ab  cd ', 'char') == ['a', 'b', '_', 'c', 'd', '<eos>']
  assert data.line_tokens('ab cd', 'word') == ['ab', 'cd', '<eos>']
  assert data.line_tokens('   ', 'char') == ['<eos>']  # a blank line is its end-of-line token
  assert data.line_tokens('   ', 'char', blank_lines='skip') == []


def test_ptb_as_characters(ptb_dir):
  corpus = data.ptb_corpus(ptb_dir, 'char')
  assert corpus.vocab_size == 50 and corpus.vocab[:2] == ('<eos>', '_')
  with open(os.path.join(ptb_dir, 'ptb.valid.txt'), encoding='utf-8') as f:
    lines = [line for line in f if line.split()]
  assert corpus.num_tokens('valid') == sum(len(' '.join(line.split())) + 1 for line in lines)


@pytest.fixture(scope='module')
def char_workdir(tmp_path_factory):
  from tests import corpora  # pylint: disable=g-import-not-at-top
  base = tmp_path_factory.mktemp('char')
  files = corpora.write_markov_corpus(str(base))
  workdir = base / 'run'
  proc = subprocess.run([sys.executable, '-m', 'nplm_jax.main', '--config=experiments/text.py:char', f'--workdir={workdir}',
                         *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')),
                         '--config.model.h=32', '--config.model.m=8', '--config.train.batch_size=128',
                         '--config.train.num_epochs=1', '--config.mix.enabled=True', '--config.mix.ngram_order=5'],
                        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert 'bits per character' in proc.stdout
  return dict(path=str(workdir), files=files)


def test_char_training_reports_bits_per_character(char_workdir):
  with open(os.path.join(char_workdir['path'], 'results.json'), encoding='utf-8') as f:
    results = json.load(f)
  assert results['test_bpc'] == pytest.approx(math.log2(results['test_ppl']))
  assert results['vocab_size'] < 20  # 'w', digits, '_', <eos>
  assert results['mix_test_bits'] == pytest.approx(math.log2(results['mix_test_ppl']))
  assert results['mix_ngram'] == 'kneser_ney_5' and results['ngram_test_ppl'] < 5


def test_ngram_of_the_same_order_on_the_character_stream(char_workdir):
  files = char_workdir['files']
  proc = subprocess.run([sys.executable, '-m', 'nplm_jax.baselines.ngram', '--config=experiments/text.py:char', '--order=11',
                         *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test'))],
                        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result['test_bpc'] == pytest.approx(math.log2(result['test_ppl'])) and result['test_bpc'] < 2.5
  # what made the figures, as launch.results collect keeps them
  assert result['config']['ngram'] == {'order': 11, 'smoothing': 'kneser_ney'}
  assert result['config']['data']['unit'] == 'char'


def test_tools_read_and_write_characters(char_workdir):
  model = trained_lib.TrainedModel.load(char_workdir['path'])
  scored = score_lib.score_text(model, ['w1 w2'], independent_lines=False)[0]
  assert scored.words == ['w', '1', '_', 'w', '2', '<eos>'] and not scored.oov.any()
  drawn = sample_lib.sample(model, 'w1 w', 12, seed=0, stop_at_eos=False)[0]
  assert len(drawn) == 12 and all(len(t) == 1 for t in drawn)
  assert model.join(['w', '1', '_', 'w']) == 'w1 w'


def test_the_revisited_family_on_characters(tmp_path):
  """text.py:char_revisited, shrunk to seconds: a long character window, distant kernels and tied
  vectors, trained and reported in bits per character; the tools read its characters back."""
  from tests import corpora  # pylint: disable=g-import-not-at-top
  files = corpora.write_markov_corpus(str(tmp_path), lines=(120, 20, 20))
  workdir = tmp_path / 'run'
  proc = subprocess.run([sys.executable, '-m', 'nplm_jax.main', '--config=experiments/text.py:char_revisited',
                         f'--workdir={workdir}', *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')),
                         '--config.model.h=32', '--config.model.m=8', '--config.model.n=9', '--config.model.depth=1',
                         '--config.model.distant_tokens=16', '--config.train.batch_size=128', '--config.train.num_epochs=1',
                         '--config.optimizer.warmup_steps=5', '--config.mix.enabled=False'],
                        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  results = json.loads((workdir / 'results.json').read_text(encoding='utf-8'))
  assert results['config']['model']['kind'] == 'revisited' and results['config']['model']['tied']
  assert results['test_bpc'] == pytest.approx(math.log2(results['test_ppl'])) and results['test_bpc'] < math.log2(20)
  model = trained_lib.TrainedModel.load(str(workdir))
  assert model.context_size == 8 + 16
  scored = score_lib.score_text(model, ['w1 w2'], independent_lines=True)[0]
  assert scored.words == ['w', '1', '_', 'w', '2', '<eos>']
