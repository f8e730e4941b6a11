"""launch/own_text_corpora.py: corpora built from the data at hand to check a recipe on text it was not tuned on."""

import pytest

from launch import own_text_corpora

pytestmark = [pytest.mark.fast, pytest.mark.unit]


def test_each_split_takes_sentences_until_its_words_reach_its_size():
  sentences = [['a', 'b'], ['c'], ['d', 'e', 'f'], ['g'], ['h', 'i']]
  lines = own_text_corpora.split_sentences(sentences, (3, 3))
  assert lines == {'train': ['a b', 'c'], 'valid': ['d e f'], 'test': ['g', 'h i']}


def test_words_seen_once_in_training_become_the_unknown_word_everywhere():
  lines = {'train': ['the cat', 'the dog'], 'valid': ['the cat sat'], 'test': ['a dog']}
  assert own_text_corpora.rare_as_unknown(lines) == {
      'train': ['the <unk>', 'the <unk>'], 'valid': ['the <unk> <unk>'], 'test': ['<unk> <unk>']}


def test_the_folders_hold_what_text_py_reads(tmp_path):
  own_text_corpora.write(str(tmp_path / 'c'), {'train': ['a b'], 'valid': ['a'], 'test': ['b']})
  assert own_text_corpora.read(str(tmp_path / 'c')) == {'train': ['a b'], 'valid': ['a'], 'test': ['b']}
  assert own_text_corpora.describe(str(tmp_path / 'c')).endswith('train 3 tokens with <eos>, 3 types with <eos>')
