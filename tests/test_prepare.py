"""Prepared corpora (nplm_jax.data.prepare): the same vocabulary, token ids and results as the corpus
read directly, read back memory-mapped."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from nplm_jax import config as config_lib
from nplm_jax.data import corpora as data
from nplm_jax.baselines import ngram
from nplm_jax.data import prepare

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def same_corpus(direct, prepared):
  assert prepared.vocab == direct.vocab and prepared.boundary_id == direct.boundary_id
  for s in data.SPLITS:
    assert isinstance(prepared.splits[s], np.memmap) and prepared.splits[s].dtype == np.uint32
    np.testing.assert_array_equal(prepared.splits[s], direct.splits[s])
  assert prepared.fingerprint() == direct.fingerprint()
  # the stored train counts and fingerprint (start-up reads neither split whole) are the ids' own
  assert prepared.stored_fingerprint and prepared.stored_train_counts is not None
  np.testing.assert_array_equal(prepared.unigram_counts('train'), direct.unigram_counts('train'))
  assert prepared.rare_rate('train') == pytest.approx(direct.rare_rate('train'), abs=1e-15)


def test_brown_prepared_is_brown(nltk_data, tmp_path):
  del nltk_data
  config = config_lib.load_experiment('experiments/brown.py').get_config('mlp1')
  meta = prepare.prepare(config.data, str(tmp_path / 'brown'))
  assert (meta['vocab_size'], meta['train_tokens'], meta['test_tokens']) == (17_905, 800_000, 161_192)
  direct, prepared = data.load_corpus(config.data), data.prepared_corpus(str(tmp_path / 'brown'))
  same_corpus(direct, prepared)
  assert ngram.evaluate(prepared, 3, 'interpolated')['test_ppl'] == pytest.approx(
      ngram.evaluate(direct, 3, 'interpolated')['test_ppl'], rel=1e-12)


@pytest.mark.parametrize('variant', ['', 'char'])
def test_ptb_prepared_is_ptb(ptb_dir, tmp_path, variant):
  config = config_lib.load_experiment('experiments/ptb.py').get_config(variant)
  config.data.path = ptb_dir
  prepare.prepare(config.data, str(tmp_path / 'ptb'))
  same_corpus(data.load_corpus(config.data), data.prepared_corpus(str(tmp_path / 'ptb')))
  vocab = (tmp_path / 'ptb' / 'vocab.txt').read_text().splitlines()
  assert vocab[0].split('\t')[0] == '<eos>' and all(len(line.split('\t')) == 2 for line in vocab)


def test_training_from_a_prepared_corpus_gives_the_same_results(tiny_files, tmp_path):
  files = [f'--config.data.{s}_file={tiny_files[s]}' for s in data.SPLITS]
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  run = lambda *args: subprocess.run([sys.executable, '-m', *args], cwd=REPO, env=env, capture_output=True, text=True,
                                     timeout=300)
  proc = run('nplm_jax.data.prepare', '--config=experiments/text.py:tiny', *files, f'--output={tmp_path / "prepared"}')
  assert proc.returncode == 0, proc.stderr
  common = ['--config.model.n=3', '--config.model.m=8', '--config.model.h=16', '--config.train.batch_size=32',
            '--config.train.eval_batch_size=64', '--config.train.max_steps=40', '--config.data.max_rare_count=0']
  direct = run('nplm_jax.main', '--config=experiments/text.py:tiny', *files, f'--workdir={tmp_path / "direct"}',
               '--config.train.max_steps=40')
  assert direct.returncode == 0, direct.stderr
  from_prepared = run('nplm_jax.main', '--config=experiments/prepared.py', f'--config.data.path={tmp_path / "prepared"}',
                      f'--workdir={tmp_path / "from_prepared"}', *common)
  assert from_prepared.returncode == 0, from_prepared.stderr
  a, b = (json.loads((tmp_path / w / 'results.json').read_text()) for w in ('direct', 'from_prepared'))
  assert (a['valid_ppl'], a['test_ppl']) == (b['valid_ppl'], b['test_ppl'])
  ngram_out = run('nplm_jax.baselines.ngram', '--config=experiments/prepared.py', f'--config.data.path={tmp_path / "prepared"}',
                  '--order=3')
  assert ngram_out.returncode == 0, ngram_out.stderr


def test_a_folder_prepared_before_stored_counts_is_counted_at_load(tiny_files, tmp_path):
  config = config_lib.load_experiment('experiments/text.py').get_config('tiny')
  for s in data.SPLITS:
    config.data[f'{s}_file'] = tiny_files[s]
  folder = str(tmp_path / 'prepared')
  prepare.prepare(config.data, folder)
  fresh = data.prepared_corpus(folder)
  meta = json.loads((tmp_path / 'prepared' / 'meta.json').read_text())
  del meta['fingerprint']  # as written before the counts and fingerprint were stored
  (tmp_path / 'prepared' / 'meta.json').write_text(json.dumps(meta))
  older = data.prepared_corpus(folder)
  assert older.stored_fingerprint is None and older.stored_train_counts is None
  assert older.fingerprint() == fresh.fingerprint()
  np.testing.assert_array_equal(older.unigram_counts('train'), fresh.unigram_counts('train'))


def test_a_missing_prepared_corpus_is_one_line(tmp_path):
  with pytest.raises(data.DataError, match='holds no prepared corpus'):
    data.prepared_corpus(str(tmp_path))


def test_ids_beyond_the_vocabulary_are_one_line(tmp_path):
  """A prepared split holding an id past its vocabulary (a damaged or mismatched file) is refused at
  load, not met as a 32 GiB allocation or an out-of-bounds gather later."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from nplm_jax.data import corpora as data_lib  # pylint: disable=g-import-not-at-top
  folder = tmp_path / 'prepared'
  folder.mkdir()
  (folder / 'vocab.txt').write_text('<eos>\t3\na\t2\n')
  for split, ids in (('train', [1, 0, 1, 0, 0]), ('valid', [1, 0]), ('test', [1, 2_000_000_000])):
    np.save(folder / f'{split}.npy', np.array(ids, np.uint32))
  (folder / 'meta.json').write_text('{"vocab_size": 2, "boundary_id": 0, "train_tokens": 5, "valid_tokens": 2, '
                                    '"test_tokens": 2, "source": {"corpus": "text"}}')
  with pytest.raises(data_lib.DataError, match='holds id 2000000000 in test.npy, beyond its 2-word vocabulary'):
    data_lib.prepared_corpus(str(folder))


def test_long_preparation_and_estimation_report_progress_with_an_eta(tiny_files, tmp_path, capsys, monkeypatch):
  """prepare reports the bytes of each file read and the n-gram tools the orders done, with a rate
  and the time left, once work takes long (here: at once)."""
  from nplm_jax import progress  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(progress, 'AFTER_SECONDS', 0.0)
  monkeypatch.setattr(progress, 'EVERY_SECONDS', 0.0)
  config = config_lib.base_config()
  config.data.update(corpus='text', train_file=tiny_files['train'], valid_file=tiny_files['valid'],
                     test_file=tiny_files['test'], max_rare_count=0, vocab_scope='train')
  prepare.prepare(config.data, str(tmp_path / 'prepared'))
  ngram.evaluate(data.load_corpus(config.data), 3, 'kneser_ney')
  err = capsys.readouterr().err
  for what in ('bytes of train.txt counted', 'bytes of test.txt written as ids', 'n-gram orders counted',
               'Kneser-Ney orders estimated'):
    assert what in err, err[-2000:]
  assert 'ETA ' in err
