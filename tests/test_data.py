"""Corpus protocols: Brown as in the paper, PTB as Mikolov's split, the continuous stream."""

import os

import numpy as np
import pytest

from nplm_jax.data import corpora as data

pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def brown(nltk_data):
  del nltk_data
  return data.brown_corpus()


def test_brown_paper_protocol(brown):
  sizes = [brown.num_tokens(s) for s in data.SPLITS]
  assert sum(sizes) == 1_161_192
  assert sizes == [800_000, 200_000, 161_192]
  assert brown.vocab_size == 17_905  # words seen more than 3 times in the corpus, plus <unk>
  assert brown.vocab[0] == data.RARE
  assert 0.03 < brown.rare_rate('train') < 0.07


def test_brown_train_scope_vocabulary(nltk_data):
  del nltk_data
  corpus = data.brown_corpus(vocab_scope='train')
  assert corpus.vocab_size == 14_114
  # every word kept has more than 3 training occurrences
  counts = corpus.unigram_counts('train')
  assert counts[1:].min() > 3


def test_brown_case_and_punctuation_kept(brown):
  assert 'The' in brown.vocab and 'the' in brown.vocab
  assert ',' in brown.vocab and '.' in brown.vocab


def test_ptb_counts(ptb_dir):
  corpus = data.ptb_corpus(ptb_dir)
  assert [corpus.num_tokens(s) for s in data.SPLITS] == [929_589, 73_760, 82_430]
  assert corpus.vocab_size == 10_000
  assert data.EOS in corpus.vocab and '<unk>' in corpus.vocab


def test_text_corpus_adds_eos_and_maps_unseen_words(tmp_path):
  files = {}
  for split, text in (('train', 'a b c\nb c a\n'), ('valid', 'a z\n'), ('test', '\nc\n')):
    files[split] = str(tmp_path / f'{split}.txt')
    (tmp_path / f'{split}.txt').write_text(text)
  corpus = data.text_corpus(files)
  words = lambda s: [corpus.vocab[i] for i in corpus.splits[s]]
  assert words('train') == ['a', 'b', 'c', '<eos>', 'b', 'c', 'a', '<eos>']
  assert words('valid') == ['a', '<unk>', '<eos>']  # z was never seen in train
  assert words('test') == ['<eos>', 'c', '<eos>']  # a blank line is one <eos> (data.blank_lines)


def test_train_limit_keeps_the_first_tokens_and_everything_else(ptb_dir):
  """data.train_limit: the training split's first N tokens; the vocabulary and the other splits as they were."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  whole = data.ptb_corpus(ptb_dir, unit='char')
  config = ml_collections.ConfigDict({'corpus': 'ptb', 'path': ptb_dir, 'unit': 'char', 'blank_lines': 'eos',
                                      'train_limit': 100_000})
  limited = data.load_corpus(config)
  np.testing.assert_array_equal(limited.splits['train'], whole.splits['train'][:100_000])
  assert limited.vocab == whole.vocab and all(np.array_equal(limited.splits[s], whole.splits[s]) for s in ('valid', 'test'))
  assert limited.unigram_counts().sum() == 100_000 and limited.fingerprint() != whole.fingerprint()
  with pytest.raises(data.DataError, match=r"^data.train_limit=6,000,000 is not below the training split's 5,017,482 "):
    data.limit_train(whole, 6_000_000)


def test_stream_context_crosses_split_boundaries():
  corpus = data.Corpus(vocab=tuple('abcdefgh'), boundary_id=7, splits={
      'train': np.array([0, 1, 2, 3], np.int32), 'valid': np.array([4, 5], np.int32),
      'test': np.array([6], np.int32)})
  stream = data.TokenStream(corpus, context_size=3)
  contexts, targets = stream.examples('train', np.arange(4))
  np.testing.assert_array_equal(targets, [0, 1, 2, 3])
  np.testing.assert_array_equal(contexts[0], [7, 7, 7])  # before the stream: boundary symbol
  np.testing.assert_array_equal(contexts[2], [1, 0, 7])  # most recent word first
  contexts, targets = stream.examples('valid', np.arange(2))
  np.testing.assert_array_equal(contexts[0], [3, 2, 1])  # valid continues train
  contexts, _ = stream.examples('test', np.arange(1))
  np.testing.assert_array_equal(contexts[0], [5, 4, 3])


def test_eval_positions_cover_every_token_once():
  corpus = data.Corpus(vocab=tuple('ab'), boundary_id=0, splits={
      'train': np.zeros(3, np.int32), 'valid': np.arange(10, dtype=np.int32) % 2, 'test': np.zeros(1, np.int32)})
  stream = data.TokenStream(corpus, context_size=2)
  batches = list(stream.eval_positions('valid', 4))
  assert len(batches) == 3 and all(p.shape == (4,) for p, _ in batches)
  weights = np.concatenate([w for _, w in batches])
  targets = np.concatenate([stream.examples('valid', p)[1] for p, _ in batches])
  assert weights.sum() == 10
  np.testing.assert_array_equal(targets[weights > 0], corpus.splits['valid'])


def test_train_order_is_a_deterministic_permutation():
  corpus = data.Corpus(vocab=('a',), boundary_id=0, splits={s: np.zeros(100, np.int32) for s in data.SPLITS})
  stream = data.TokenStream(corpus, 2)
  a, b = stream.train_order(0, 3), stream.train_order(0, 3)
  np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(np.sort(a), np.arange(100))
  assert not np.array_equal(a, stream.train_order(0, 4))


def test_brown_words_are_read_from_their_cache_as_nltk_gives_them(nltk_data, tmp_path, monkeypatch):
  monkeypatch.setenv('NPLM_CACHE_DIR', str(tmp_path))
  first = data.load_brown_words()  # through NLTK, writing the cache
  cached = [p for p in os.listdir(tmp_path) if p.startswith('brown-')]
  assert len(cached) == 1 and not [p for p in os.listdir(tmp_path) if '.tmp' in p]
  (tmp_path / cached[0]).write_text('\n'.join(first[:5]), encoding='utf-8')  # a planted cache is what is read
  assert data.load_brown_words() == first[:5]
  (tmp_path / cached[0]).unlink()
  assert data.load_brown_words() == first and len(first) == 1_161_192


def test_blank_lines_are_one_eos_each_as_the_field_counts(tmp_path):
  """data.blank_lines='eos' (the default): a blank line is one <eos>, as the WikiText, AWD-LSTM and
  fairseq readers count; 'skip' keeps the older reading (no token), which older workdirs keep."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.data import workdir_vocab  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'text.txt'
  path.write_text('a b\n\n  \nc\n')
  assert data.read_lines_with_eos(str(path)) == ['a', 'b', data.EOS, data.EOS, data.EOS, 'c', data.EOS]
  assert data.read_lines_with_eos(str(path), blank_lines='skip') == ['a', 'b', data.EOS, 'c', data.EOS]
  assert data.line_tokens('', 'char') == [data.EOS]
  assert config_lib.base_config().data.blank_lines == 'eos'
  assert config_lib.from_saved({'data': {'corpus': 'text'}}).data.blank_lines == 'skip'  # a workdir saved before
  old = {'corpus': 'text', 'unit': 'word', 'boundary': data.EOS, 'rare_word': None, 'max_rare_count': 0,
         'vocab_scope': 'train'}  # a tokenizer.json written before blank_lines existed
  assert workdir_vocab.Tokenizer.from_json(old).line_tokens('') == []
  assert workdir_vocab.Tokenizer.from_json({**old, 'blank_lines': 'eos'}).line_tokens('') == [data.EOS]
  (tmp_path / 'empty.txt').write_text('\n\n')
  with pytest.raises(data.DataError, match='holds no tokens'):
    data.read_lines_with_eos(str(tmp_path / 'empty.txt'))


def test_a_missing_brown_corpus_says_what_nltk_data_names(monkeypatch, tmp_path):
  """NLTK_DATA naming no folder, or a folder without the zip, is said as such (with how to fetch the corpus)."""
  monkeypatch.setenv('NLTK_DATA', str(tmp_path / 'nowhere'))
  assert data.brown_not_found_message().startswith(f"NLTK_DATA={str(tmp_path / 'nowhere')!r} names no folder;")
  monkeypatch.setenv('NLTK_DATA', str(tmp_path))
  assert 'holds no corpora/brown.zip' in data.brown_not_found_message()
  monkeypatch.delenv('NLTK_DATA')
  assert 'python -m nltk.downloader -d DIR brown' in data.brown_not_found_message()
