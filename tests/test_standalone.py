"""A workdir is a model that stands alone: the tools read its stored vocabulary and tokenizer, never
the corpus (moved away, from another directory), older workdirs get those files once, and saved
configs are merged onto today's defaults."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from nplm_jax import config as config_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.data import workdir_vocab
from tests import side_by_side

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tool_env(**extra) -> dict:
  """The environment the tools run in: this checkout's package on the CPU."""
  return dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO, **extra)


def run(args, cwd, env=None, check=True):
  proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                        env=tool_env(**(env or {})))
  if check:
    assert proc.returncode == 0, f'{args}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}'
  return proc


def run_side_by_side(commands: dict, cwd) -> dict:
  """run's {key: args} all at once (tests/side_by_side.py): {key: CompletedProcess}, each exited 0."""
  return side_by_side.run({key: [sys.executable, *args] for key, args in commands.items()}, cwd, tool_env())


def tool_outputs(workdir: str, text: str, cwd) -> dict:
  """What score, sample, embeddings, extend and plot print for a workdir (the outputs to compare)."""
  extended = os.path.join(str(cwd), f'extended_{len(os.listdir(cwd))}')
  done = run_side_by_side({
      'score': ['-m', 'nplm_jax.tools.score', f'--workdir={workdir}', f'--text={text}', '--verbosity=word'],
      'sample': ['-m', 'nplm_jax.tools.sample', f'--workdir={workdir}', '--prompt=w1 w2', '--num_tokens=6',
                 '--num_samples=2'],
      'neighbours': ['-m', 'nplm_jax.tools.embeddings', 'neighbours', f'--workdir={workdir}', '--words=w3,w4'],
      'extend': ['-m', 'nplm_jax.tools.extend', f'--workdir={workdir}', f'--text={text}',
                 f'--output_workdir={extended}'],
      'plot': ['-m', 'nplm_jax.tools.plot', 'embeddings', f'--workdir={workdir}', '--top=20',
               f'--output={cwd}/map.png'],
  }, cwd)
  out = {key: proc.stdout for key, proc in done.items() if key != 'plot'}
  out['extend'] = out['extend'].replace(extended, 'EXT')
  out['extended_score'] = run(['-m', 'nplm_jax.tools.score', f'--workdir={extended}', f'--text={text}'], cwd).stdout
  return out


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """A tiny model trained from a corpus in its own folder, with a relative corpus path."""
  from tests import corpora  # pylint: disable=g-import-not-at-top
  base = tmp_path_factory.mktemp('standalone')
  corpus = base / 'corpus'
  corpus.mkdir()
  files = corpora.write_markov_corpus(str(corpus))
  with open(files['valid'], 'a', encoding='utf-8') as f:
    f.write('w1 w2 never_in_train\n')  # the vocabulary gets <unk>
  run(['-m', 'nplm_jax.main', '--config=' + os.path.join(REPO, 'experiments/text.py:tiny'), '--workdir=run',
       *(f'--config.data.{s}_file=corpus/{s}.txt' for s in ('train', 'valid', 'test')),
       '--config.train.num_epochs=2', '--config.mesh.cpu_devices=1'], cwd=base)
  text = base / 'text.txt'
  text.write_text('w1 w2 brand_new w3\nw5 w6 other_new w1\n')
  return dict(base=base, workdir=str(base / 'run'), text=str(text))


def test_training_stores_the_vocabulary_and_tokenizer(trained):
  workdir = workdir_lib.Workdir(trained['workdir'])
  vocabulary = workdir_vocab.Vocabulary.read(workdir)
  with open(os.path.join(trained['base'], 'corpus', 'train.txt'), encoding='utf-8') as f:
    train_tokens = [w for line in f for w in line.split() + ['<eos>']]
  assert vocabulary.words[0] == '<unk>' and vocabulary.tokenizer.boundary == '<eos>'
  assert vocabulary.tokenizer.unit == 'word' and vocabulary.tokenizer.rare_word == '<unk>'
  assert int(vocabulary.train_counts.sum()) == len(train_tokens)  # every train token counted once
  assert vocabulary.train_counts[vocabulary.words.index('w3')] == train_tokens.count('w3')
  saved = json.loads((workdir.path / 'config.json').read_text())
  assert saved['data']['train_file'] == 'corpus/train.txt'  # as typed, and absolute beside it
  assert saved[config_lib.ABSOLUTE_PATHS_KEY]['train_file'] == os.path.join(trained['base'], 'corpus', 'train.txt')


def test_tools_never_read_the_corpus(trained, tmp_path):
  """The same outputs with the corpus moved away, from another directory, with NLTK_DATA unset."""
  first = tmp_path / 'before'
  first.mkdir()
  before = tool_outputs(trained['workdir'], trained['text'], first)
  corpus, moved = trained['base'] / 'corpus', trained['base'] / 'corpus_moved'
  corpus.rename(moved)
  try:
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    after = tool_outputs(trained['workdir'], trained['text'], elsewhere)
    assert after == before
    mixed = run(['-m', 'nplm_jax.tools.score', f'--workdir={trained["workdir"]}', f'--text={trained["text"]}', '--mix'],
                elsewhere, check=False)  # the n-gram of a mixture needs the training tokens: one line
    assert mixed.returncode == 1 and mixed.stderr.startswith('error: --mix reads the training corpus')
    assert len(mixed.stderr.strip().splitlines()) == 1
  finally:
    moved.rename(corpus)


def test_relative_corpus_paths_resolve_from_another_directory(trained, tmp_path):
  """config.json's absolute paths let a mixture read the corpus typed relative to another folder."""
  out = run(['-m', 'nplm_jax.tools.score', f'--workdir={trained["workdir"]}', f'--text={trained["text"]}', '--mix',
             '--format=json'], tmp_path)
  assert json.loads(out.stdout.splitlines()[-1])['tokens'] == 10


def test_an_older_workdir_gets_its_vocabulary_once(trained, tmp_path):
  old = tmp_path / 'old'
  shutil.copytree(trained['workdir'], old)
  for name in (workdir_vocab.VOCAB_FILE, workdir_vocab.TOKENIZER_FILE):
    (old / name).unlink()
  args = ['-m', 'nplm_jax.tools.score', f'--workdir={old}', f'--text={trained["text"]}']
  first = run(args, trained['base'])  # the typed relative corpus paths resolve from here
  assert 'note: ' in first.stderr and 'predates stored vocabularies' in first.stderr
  assert (old / workdir_vocab.VOCAB_FILE).read_text() == (trained['base'] / 'run' / workdir_vocab.VOCAB_FILE).read_text()
  second = run(args, tmp_path)
  assert second.stdout == first.stdout and 'note: ' not in second.stderr


def test_a_damaged_vocabulary_is_one_line(trained, tmp_path):
  copy = tmp_path / 'copy'
  shutil.copytree(trained['workdir'], copy)
  (copy / workdir_vocab.VOCAB_FILE).write_text('w1\t3\n')
  proc = run(['-m', 'nplm_jax.tools.score', f'--workdir={copy}', f'--text={trained["text"]}'], tmp_path, check=False)
  assert proc.returncode == 1 and proc.stderr.startswith('error: ') and 'damaged' in proc.stderr
  assert len(proc.stderr.strip().splitlines()) == 1


def test_extend_and_every_tool_work_on_a_prepared_corpus(tmp_path):
  """Prepared corpora store their train counts: the extended vocabulary's counts must grow with it."""
  from tests import corpora  # pylint: disable=g-import-not-at-top
  tiny_files = corpora.write_markov_corpus(str(tmp_path))
  with open(tiny_files['valid'], 'a', encoding='utf-8') as f:
    f.write('w1 w2 never_in_train\n')  # the vocabulary gets <unk>, which extend needs
  prepared = tmp_path / 'prepared'
  run(['-m', 'nplm_jax.data.prepare', '--config=' + os.path.join(REPO, 'experiments/text.py:tiny'), f'--output={prepared}',
       *(f'--config.data.{s}_file={tiny_files[s]}' for s in ('train', 'valid', 'test'))], tmp_path)
  run(['-m', 'nplm_jax.main', '--config=' + os.path.join(REPO, 'experiments/prepared.py'), '--workdir=run',
       f'--config.data.path={prepared}', '--config.model.n=3', '--config.model.m=8', '--config.model.h=16',
       '--config.train.max_steps=40', '--config.mesh.cpu_devices=1'], tmp_path)
  text = tmp_path / 'new.txt'
  text.write_text('w1 w2 unseen_word w3\n')
  run(['-m', 'nplm_jax.tools.extend', '--workdir=run', f'--text={text}', '--output_workdir=ext'], tmp_path)
  vocabulary = workdir_vocab.Vocabulary.read(workdir_lib.Workdir(tmp_path / 'ext'))
  assert vocabulary.words[-1] == 'unseen_word' and vocabulary.train_counts[-1] == 0
  assert len(vocabulary.train_counts) == len(vocabulary.words)
  run_side_by_side({'score': ['-m', 'nplm_jax.tools.score', '--workdir=ext', f'--text={text}'],
                    'export': ['-m', 'nplm_jax.tools.embeddings', 'export', '--workdir=ext', '--format=projector',
                               '--output=proj'],
                    'plot': ['-m', 'nplm_jax.tools.plot', 'embeddings', '--workdir=ext', '--top=10', '--output=map.png']},
                   tmp_path)
  metadata = (tmp_path / 'proj' / 'metadata.tsv').read_text().splitlines()
  assert len(metadata) == len(vocabulary.words) + 1 and metadata[-1] == 'unseen_word\t0'


def test_saved_configs_are_merged_onto_the_defaults():
  saved = json.loads(config_lib.base_config().to_json())
  del saved['train']['vocab_block'], saved['model']['compute_dtype'], saved['mix']
  saved['model']['h'] = 7
  config = config_lib.from_saved(saved)
  assert config.model.h == 7  # saved values kept
  assert config.train.vocab_block == config_lib.base_config().train.vocab_block  # newer keys: today's default
  assert config.mix.max_memory_gb == config_lib.base_config().mix.max_memory_gb
  assert config.model.compute_dtype == 'float32'  # older workdirs trained in float32 (LEGACY_DEFAULTS)
  config_lib.validate(config)


def test_stored_tokenizer_round_trips():
  tokenizer = workdir_vocab.Tokenizer(corpus='ptb', unit='char', boundary='<eos>', rare_word=None,
                                      max_rare_count=0, vocab_scope='train')
  assert workdir_vocab.Tokenizer.from_json(json.loads(json.dumps(tokenizer.to_json()))) == tokenizer
  assert tokenizer.line_tokens('ab c') == ['a', 'b', '_', 'c', '<eos>']
  brown = workdir_vocab.Tokenizer('brown', None, '<unk>', '<unk>', 3, 'corpus')
  assert brown.line_tokens('The jury said') == ['The', 'jury', 'said'] and brown.end_of_line is None
  vocabulary = workdir_vocab.Vocabulary(('<unk>', 'a'), np.array([2, 5]), brown)
  assert vocabulary.extended(['b']).train_counts.tolist() == [2, 5, 0]


# docs/tools.md's "Exporting a model" snippet: numpy and json only, no nplm_jax.
NUMPY_ONLY_READER = r'''
import json, sys
import numpy as np

folder, context = sys.argv[1], sys.argv[2].split()   # e.g. "w2 w1": the n-1 words before, oldest first
header = json.load(open(f'{folder}/model.json'))
p = np.load(f'{folder}/params.npz')
ids = {w: i for i, w in enumerate(header['vocabulary'])}
rare = header['tokenizer']['rare_word']
x = np.concatenate([p['C'][ids.get(w, ids.get(rare))] for w in reversed(context)])  # most recent first
y = p['b'] + (x @ p['W'] if 'W' in p else 0) + (np.tanh(p['d'] + x @ p['H']) @ p['U'] if 'H' in p else 0)
log_p = y - y.max() - np.log(np.exp(y - y.max()).sum())
print(json.dumps({w: float(log_p[ids[w]]) for w in sys.argv[3:]}))
'''


def test_export_loads_with_numpy_alone(trained, tmp_path):
  from nplm_jax.tools import trained as trained_lib  # pylint: disable=g-import-not-at-top
  run(['-m', 'nplm_jax.tools.export', f'--workdir={trained["workdir"]}', f'--output={tmp_path / "exported"}'], tmp_path)
  reader = tmp_path / 'reader.py'
  reader.write_text(NUMPY_ONLY_READER)
  proc = subprocess.run([sys.executable, '-I', str(reader), str(tmp_path / 'exported'), 'w2 w1', 'w3', 'w4', '<eos>'],
                        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={'PATH': os.environ['PATH']})
  assert proc.returncode == 0, proc.stderr
  exported = json.loads(proc.stdout)
  model = trained_lib.TrainedModel.load(trained['workdir'])
  log_probs = model.next_word_log_probs(np.array([[model.word_ids['w1'], model.word_ids['w2']]]))[0]
  for word, value in exported.items():
    assert value == pytest.approx(log_probs[model.word_ids[word]], abs=1e-5)
  header = json.loads((tmp_path / 'exported' / 'model.json').read_text())
  assert header['format'] == 'nplm_jax' and header['version'] == 1 and header['vocabulary'] == list(model.vocab)
  again = run(['-m', 'nplm_jax.tools.export', f'--workdir={trained["workdir"]}', f'--output={tmp_path / "exported"}'],
              tmp_path, check=False)
  assert again.returncode == 1 and 'is not empty' in again.stderr


def test_mix_on_a_brown_workdir_reads_the_cached_words_without_nltk_data(nltk_data, tmp_path, monkeypatch):
  """nplm-mix needs Brown's tokens for its n-gram; with NLTK_DATA unset it reads the words an earlier
  read cached, when they give the corpus the workdir was trained on, and says so; without a cache, the
  usual one line about NLTK_DATA."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import train  # pylint: disable=g-import-not-at-top
  cache = tmp_path / 'cache'
  monkeypatch.setenv('NPLM_CACHE_DIR', str(cache))
  config = config_lib.load_experiment('experiments/brown.py').get_config('mlp1')
  config.model.update(m=4, h=4, n=3)
  config.train.update(max_steps=2, eval_every=2, batch_size=64, eval_batch_size=1024)
  config.data.update(train_tokens=1_110_000, valid_tokens=25_000)  # short evaluations: 25,000 and 26,192 tokens
  workdir = tmp_path / 'brown'
  train.train_and_evaluate(config, str(workdir))
  assert list(cache.glob('brown-*.txt'))
  env = {k: v for k, v in os.environ.items() if k != 'NLTK_DATA'}
  env.update(JAX_PLATFORMS='cpu', PYTHONPATH=REPO, NPLM_CACHE_DIR=str(cache), NLTK_DATA=str(tmp_path / 'none'))
  mixed = subprocess.run([sys.executable, '-m', 'nplm_jax.tools.mix', f'--workdir={workdir}'], env=env,
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
  assert mixed.returncode == 0, mixed.stderr
  assert 'read from the cache' in mixed.stderr and json.loads(mixed.stdout)['mix_test_ppl'] > 0
  env['NPLM_CACHE_DIR'] = str(tmp_path / 'empty_cache')
  refused = subprocess.run([sys.executable, '-m', 'nplm_jax.tools.mix', f'--workdir={workdir}'], env=env,
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
  assert refused.returncode != 0 and 'NLTK_DATA' in refused.stderr and 'Traceback' not in refused.stderr
