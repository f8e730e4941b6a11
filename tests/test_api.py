"""nplm_jax from Python (nplm_jax.load / get_config / train): each call gives what its command prints on
the same workdir, in both model families; nothing installs signal handlers or exits; errors are one
exception class with the commands' line; a second load compiles nothing; README's example runs."""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import nplm_jax
from tests import side_by_side
from tests import warm_python

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = {'paper': 'experiments/text.py:tiny', 'revisited': 'experiments/text.py:tiny_revisited'}


@pytest.fixture(scope='module', params=sorted(FAMILIES))
def trained(request, tmp_path_factory):
  """A tiny trained workdir of each family (text corpus with <unk>, its trigram mixture), and its model."""
  from tests import corpora  # pylint: disable=g-import-not-at-top
  base = tmp_path_factory.mktemp(request.param)
  files = corpora.write_markov_corpus(str(base))
  with open(files['valid'], 'a', encoding='utf-8') as f:
    f.write('w1 w2 never_in_train\n')  # the vocabulary gets <unk>
  path = base / 'run'
  proc = subprocess.run(
      [sys.executable, '-m', 'nplm_jax.main', f'--config={FAMILIES[request.param]}', f'--workdir={path}',
       *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')), '--config.train.num_epochs=2',
       '--config.mix.enabled=True', '--config.mesh.cpu_devices=2'],
      cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return dict(path=str(path), files=files, base=base, lm=nplm_jax.load(path))


def command(module, *args):
  proc = warm_python.shared().run([module, *args], env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 0, proc.stderr
  return proc.stdout


def command_error(module, *args) -> str:
  proc = warm_python.shared().run([module, *args], env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 1 and proc.stderr.startswith('error: '), proc.stderr
  return proc.stderr.strip()[len('error: '):]


# ------------------------------------------------------------------------------------- scoring

@pytest.mark.parametrize('flags', [(), ('--independent_lines',), ('--mix',)])
def test_score_equals_nplm_score(trained, flags):
  lm, text = trained['lm'], trained['files']['test']
  out = command('nplm_jax.tools.score', f'--workdir={trained["path"]}', f'--text={text}', '--format=json',
                '--verbosity=word', '--log_base=e', *flags)
  records = [json.loads(line) for line in out.splitlines()]
  words = [r for r in records if 'word' in r]
  lines = pathlib.Path(text).read_text(encoding='utf-8').splitlines()
  stream, mix = '--independent_lines' not in flags, '--mix' in flags
  scored = lm.score(lines, stream=stream, mix=mix)
  assert [r['word'] for r in words] == [w for s in scored for w in s.words]
  assert [r['log_prob'] for r in words] == [float(x) for s in scored for x in s.log_probs]  # JSON keeps every digit
  assert [r['oov'] for r in words] == [bool(x) for s in scored for x in s.oov]
  per_line = [r for r in records if 'tokens' in r and 'line' in r]
  assert [r['log_prob'] for r in per_line] == [s.total for s in scored if len(s)]
  summary = records[-1]
  assert summary['perplexity'] == lm.perplexity(lines, stream=stream, mix=mix)
  # a string is its lines; a file is one stream unless asked otherwise, as the command reads it
  assert lm.perplexity('\n'.join(lines), stream=stream, mix=mix) == summary['perplexity']
  assert lm.perplexity(pathlib.Path(text), stream=None if stream else False, mix=mix) == summary['perplexity']
  with open(text, encoding='utf-8') as f:
    assert lm.perplexity(f, independent_lines=not stream, mix=mix) == summary['perplexity']


def test_the_stream_perplexity_of_the_test_file_is_the_training_figure(trained):
  results = json.loads(pathlib.Path(trained['path'], 'results.json').read_text(encoding='utf-8'))
  text = pathlib.Path(trained['files']['test']).read_text(encoding='utf-8')
  # the first n-1 tokens' contexts are boundary symbols here, the end of validation in training
  assert trained['lm'].perplexity(text, stream=True) == pytest.approx(results['test_ppl'], rel=2e-3)


def test_oov_words_are_flagged_and_scored_as_the_rare_word(trained):
  lm = trained['lm']
  s = lm.score(['w1 never_seen_word w2'])[0]
  assert s.words == ['w1', 'never_seen_word', 'w2', '<eos>'] and s.oov.tolist() == [False, True, False, False]
  assert s.ids[1] == lm.vocabulary.index('<unk>') and s.total == pytest.approx(float(s.log_probs.sum()))


# ----------------------------------------------------------------------------- next-word distribution

def test_next_word_distribution_is_normalised_and_its_argmax_is_the_greedy_sample(trained):
  lm = trained['lm']
  batch = lm.next_word_log_probs(['w1 w2', 'w3', ''])
  assert batch.shape == (3, len(lm.vocabulary)) and batch.dtype == np.float64
  np.testing.assert_allclose(np.exp(batch).sum(axis=1), 1.0, rtol=1e-5)  # float32 softmax, summed in float64
  # alone or in a batch of 3: the same float32 sums, perhaps blocked in another order; 16 roundings of 2**-24
  # of each value bound that (a changed function would be off by orders of magnitude more)
  np.testing.assert_allclose(lm.next_word_log_probs('w3'), batch[1], rtol=16 * 2.0**-24)
  top = lm.next_words('w1 w2', topn=4)
  assert [p for _, p in top] == sorted((p for _, p in top), reverse=True)
  assert [w for w, _ in top] == [lm.vocabulary[i] for i in np.argsort(-batch[0], kind='stable')[:4]]
  # the next word's probability is the one scoring gives it after the same words
  s = lm.score(['w1 w2 ' + top[0][0]])[0]
  assert float(np.exp(s.log_probs[2])) == pytest.approx(top[0][1], rel=1e-5)


# ------------------------------------------------------------------------------------- sampling

def test_samples_equal_nplm_sample(trained):
  lm, path = trained['lm'], trained['path']
  one = command('nplm_jax.tools.sample', f'--workdir={path}', '--prompt=w1 w2', '--num_tokens=12', '--seed=7',
                '--top_k=10', '--temperature=0.8').splitlines()
  assert one == [lm.sample('w1 w2', num_tokens=12, seed=7, top_k=10, temperature=0.8)]
  many = command('nplm_jax.tools.sample', f'--workdir={path}', '--num_tokens=9', '--seed=3', '--num_samples=3',
                 '--top_p=0.9', '--no-stop_at_eos').splitlines()
  assert many == list(lm.samples(num_samples=3, num_tokens=9, seed=3, top_p=0.9, stop_at_eos=False))
  assert many[0] == ' '.join(lm.generate(num_tokens=9, seed=3, top_p=0.9, stop_at_eos=False))


# -------------------------------------------------------------------------------------- vectors

def test_vectors_equal_nplm_embeddings(trained, tmp_path):
  lm, path = trained['lm'], trained['path']
  out = command('nplm_jax.tools.embeddings', 'neighbours', f'--workdir={path}', '--words=w1,w3', '--topn=4')
  expected = [f'{w}: ' + ', '.join(f'{x} {s:.3f}' for x, s in lm.vectors.most_similar(w, topn=4)) for w in ('w1', 'w3')]
  assert out.splitlines() == expected
  out = command('nplm_jax.tools.embeddings', 'analogy', f'--workdir={path}', '--words=w1,w2,w3', '--topn=3')
  found = lm.vectors.most_similar(positive=['w2', 'w3'], negative=['w1'], topn=3)
  assert out.strip() == 'w1 : w2 :: w3 : ' + ', '.join(f'{w} {s:.3f}' for w, s in found)
  command('nplm_jax.tools.embeddings', 'export', f'--workdir={path}', f'--output={tmp_path / "cli.txt"}')
  lm.vectors.save_word2vec_format(tmp_path / 'api.txt')
  assert (tmp_path / 'cli.txt').read_bytes() == (tmp_path / 'api.txt').read_bytes()


def test_vectors_have_keyed_vectors_habits(trained):
  vectors = trained['lm'].vectors
  assert vectors.index_to_key == trained['lm'].vocabulary and len(vectors) == len(vectors.index_to_key)
  assert 'w1' in vectors and 'nope' not in vectors
  assert vectors['w1'].shape == (vectors.vector_size,) and vectors[['w1', 'w2']].shape == (2, vectors.vector_size)
  a, b = vectors['w1'].astype(np.float64), vectors['w2'].astype(np.float64)
  assert vectors.similarity('w1', 'w2') == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), rel=1e-5)
  found = vectors.most_similar('w1', topn=3)
  assert 'w1' not in dict(found) and vectors.similar_by_vector(vectors['w1'], topn=1)[0][0] == 'w1'


def test_oov_vectors_are_the_papers_expected_feature_vector(trained):
  lm = trained['lm']
  found = lm.oov_vectors(['w1 w2 zzz_new w3'])
  assert list(found) == ['zzz_new']
  context = lm.next_word_log_probs('w1 w2')  # zzz_new's context: w1 w2 after boundary symbols
  expected = np.exp(context) @ lm.vectors.vectors.astype(np.float64)
  np.testing.assert_allclose(found['zzz_new'], expected, rtol=1e-4, atol=1e-6)
  assert lm.oov_vectors('w1 w2 w3') == {}


# ------------------------------------------------------------------ what a kenlm or gensim user expects

def test_sentences_are_scored_alone_and_a_file_as_one_stream(trained, tmp_path):
  lm = trained['lm']
  sentences = ['w1 w2 w3', 'w3 w1', 'w2']
  alone = [lm.score([s])[0] for s in sentences]
  together = lm.score(sentences)
  assert [list(s.nll) for s in together] == [list(s.nll) for s in alone]
  streamed = lm.score(sentences, stream=True)
  assert streamed[1].words == alone[1].words and list(streamed[1].nll) != list(alone[1].nll)  # context runs back
  file = tmp_path / 'three.txt'
  file.write_text('\n'.join(sentences) + '\n', encoding='utf-8')
  assert [list(s.nll) for s in lm.score(file)] == [list(s.nll) for s in streamed]
  # a byte-order mark is not a word, in a file or a string
  file.write_bytes(b'\xef\xbb\xbf' + file.read_bytes())
  assert [s.words for s in lm.score(file)] == [s.words for s in streamed]
  assert lm.score('\ufeffw1 w2 w3')[0].words == alone[0].words


def test_kenlm_calls_in_kenlms_units(trained):
  lm = trained['lm']
  scored = lm.score(['w1 w2 w3'])[0]  # ends with <eos>, kenlm's </s>
  assert lm.kenlm.score('w1 w2 w3') == pytest.approx(float(scored.log_probs.sum()) / np.log(10), rel=1e-12)
  assert lm.kenlm.score('w1 w2 w3', eos=False) == pytest.approx(float(scored.log_probs[:-1].sum()) / np.log(10))
  full = list(lm.kenlm.full_scores('w1 zzz w3'))
  assert [oov for _, _, oov in full] == [False, True, False, False] and {n for _, n, _ in full} == {lm.order}
  assert sum(p for p, _, _ in full) == pytest.approx(lm.kenlm.score('w1 zzz w3'))
  assert lm.kenlm.perplexity('w1 w2 w3') == pytest.approx(10 ** (-lm.kenlm.score('w1 w2 w3') / 4))
  assert lm.kenlm.order == lm.order == lm.context_size + 1 and 'w1' in lm.kenlm and 'w1' in lm and 'zzz' not in lm


def test_a_loaded_model_says_what_it_is_and_frees_itself(trained):
  lm = trained['lm']
  text = repr(lm)
  assert f'|V| {len(lm.vocabulary):,}' in text and f'order {lm.order}' in text and f'step {lm.step}' in text
  assert f'{lm.num_parameters:,} parameters' in text and lm.config.name in text
  with nplm_jax.load(trained['path']) as other:
    expected = other.perplexity('w1 w2 w3')
  assert repr(other) == 'LanguageModel(closed)'
  with pytest.raises(nplm_jax.UserError, match='this model was closed'):
    other.perplexity('w1 w2 w3')
  assert lm.perplexity('w1 w2 w3') == expected  # the first model keeps working, compiling again where needed


def test_next_word_log_probs_in_batches_of_any_count(trained):
  lm = trained['lm']
  assert lm.next_word_log_probs([]).shape == (0, len(lm.vocabulary))
  contexts = ['w1 w2', 'w3', ''] * 70  # past one evaluation batch, its last batch padded
  many = lm.next_word_log_probs(contexts, dtype=np.float32)
  assert many.shape == (210, len(lm.vocabulary)) and many.dtype == np.float32
  np.testing.assert_allclose(many[:3], lm.next_word_log_probs(contexts[:3]), rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(many[3:6], many[:3])


@pytest.mark.parametrize('call, message', [
    (lambda lm: lm.score(b'w1 w2'), 'text is bytes'),
    (lambda lm: lm.score(None), 'text is a NoneType'),
    (lambda lm: lm.score([1, 2]), 'text is a list holding an int'),
    (lambda lm: lm.perplexity('\n\n  \n'), 'text holds no words'),
    (lambda lm: lm.next_words(5), 'context is an int'),
    (lambda lm: lm.next_words('w1', topn=True), 'topn=True is not a whole number'),
    (lambda lm: lm.next_words('w1', topn='5'), "topn='5' is not a whole number"),
    (lambda lm: lm.sample(num_tokens='20'), "num_tokens='20' is not a whole number"),
    (lambda lm: lm.sample(seed=1.5), 'seed=1.5 is not a whole number'),
    (lambda lm: lm.sample(stop_at_eos='no'), "stop_at_eos='no' is not True or False"),
    (lambda lm: lm.vectors.most_similar(positive=[np.full(lm.vectors.vector_size, np.nan)]), 'NaN or infinity'),
    (lambda lm: lm.vectors.similar_by_vector(np.zeros(lm.vectors.vector_size)), 'all zeros'),
    (lambda lm: lm.vectors.similar_by_vector(np.ones((2, lm.vectors.vector_size))), 'this one has shape (2,'),
    (lambda lm: nplm_jax.load(3), 'workdir is an int'),
])
def test_a_wrong_argument_is_refused_in_one_line_naming_it(trained, call, message):
  with pytest.raises(nplm_jax.UserError) as e:
    call(trained['lm'])
  assert message in str(e.value) and '\n' not in str(e.value)


def test_a_path_given_as_a_string_is_text_and_says_so(trained):
  with pytest.warns(UserWarning, match='pass pathlib.Path'):
    trained['lm'].score(trained['files']['test'])


# ------------------------------------------------------------------------------ errors, notebooks

def in_api_words(line: str) -> str:
  """A command's error line as the API says it: flags named as arguments (--top_p=1.5 -> top_p=1.5)."""
  return re.sub(r'(?<![\w-])--([a-z]\w*)', r'\1', line)


def test_errors_are_one_exception_class_with_the_commands_line(trained, tmp_path):
  lm, path = trained['lm'], trained['path']
  with pytest.raises(nplm_jax.UserError) as e:
    lm.vectors.most_similar('not_a_word')
  assert str(e.value) == command_error('nplm_jax.tools.embeddings', 'neighbours', f'--workdir={path}',
                                       '--words=not_a_word')
  assert isinstance(e.value, KeyError) and isinstance(e.value, nplm_jax.UnknownWordError)  # gensim raises KeyError
  with pytest.raises(KeyError):
    lm.vectors['not_a_word']  # pylint: disable=pointless-statement
  with pytest.raises(nplm_jax.UserError) as e:
    nplm_jax.load(tmp_path / 'missing')
  assert str(e.value) == in_api_words(command_error('nplm_jax.tools.score', f'--workdir={tmp_path / "missing"}',
                                                    f'--text={trained["files"]["test"]}'))
  assert str(e.value).startswith('workdir=')
  with pytest.raises(nplm_jax.UserError) as e:
    lm.sample(num_tokens=5, top_p=1.5)
  assert str(e.value) == in_api_words(command_error('nplm_jax.tools.sample', f'--workdir={path}', '--num_tokens=5',
                                                    '--top_p=1.5'))
  assert str(e.value).startswith('top_p=1.5 is invalid')
  for call in (lambda: lm.samples(num_samples=0), lambda: lm.generate(temperature=-1)):
    with pytest.raises(nplm_jax.UserError):
      call()  # refused when called, not when first iterated
  with pytest.raises(nplm_jax.UserError, match='train.batch_size'):
    nplm_jax.get_config('experiments/text.py:tiny', {'train.batch_size': 0, 'data.train_file': 'x'})
  with pytest.raises(nplm_jax.UserError, match="overrides key 'train.nope' is not a config key"):
    nplm_jax.get_config('experiments/text.py:tiny', {'train.nope': 1})
  assert '\n' not in str(e.value)


def test_get_config_takes_overrides_as_the_command_line_does():
  config = nplm_jax.get_config('experiments/brown.py:quick', {'train.batch_size': 256, 'model.h': '0',
                                                              'optimizer.learning_rate': 0.5})
  assert (config.train.batch_size, config.model.h, config.optimizer.learning_rate) == (256, 0, 0.5)
  assert config.name == 'brown_quick'


NOTEBOOK = textwrap.dedent('''
    import json, os, signal, sys
    import nplm_jax
    handlers = lambda: (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    before, flags_before = handlers(), os.environ.get('XLA_FLAGS')
    config = nplm_jax.get_config('experiments/text.py:tiny', json.loads(sys.argv[2]))
    results = nplm_jax.train(config, sys.argv[1])
    lm = nplm_jax.load(sys.argv[1])
    lm.perplexity('w1 w2 w3'); lm.sample(num_tokens=3); lm.vectors.most_similar('w1')
    again = nplm_jax.train(config, sys.argv[1])  # finished: its results, nothing trained
    try:
      nplm_jax.load(sys.argv[1] + '_missing')
    except nplm_jax.UserError:
      pass
    assert handlers() == before, (before, handlers())
    assert os.environ.get('XLA_FLAGS') == flags_before, (flags_before, os.environ.get('XLA_FLAGS'))  # nothing inherited
    print(json.dumps({'results': results, 'again': again}))
''')


def test_train_in_a_notebook_gives_the_commands_run_and_touches_no_signal(trained, tmp_path):
  """nplm_jax.train in a plain Python process: the same figures as nplm-train on the same config (CPU runs
  are deterministic), its handlers of SIGINT and SIGTERM as they were, no exit on a bad workdir."""
  files = trained['files']
  overrides = {f'data.{s}_file': files[s] for s in ('train', 'valid', 'test')}
  overrides.update({'train.max_steps': 30, 'mesh.cpu_devices': 2})
  proc = subprocess.run([sys.executable, '-c', NOTEBOOK, str(tmp_path / 'api'), json.dumps(overrides)], cwd=REPO,
                        env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  ran = json.loads(proc.stdout.splitlines()[-1])
  cli = subprocess.run([sys.executable, '-m', 'nplm_jax.main', '--config=experiments/text.py:tiny',
                        f'--workdir={tmp_path / "cli"}', *(f'--config.{k}={v}' for k, v in overrides.items())],
                       cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert cli.returncode == 0, cli.stderr[-3000:]
  from_cli = json.loads((tmp_path / 'cli' / 'results.json').read_text(encoding='utf-8'))
  assert ran['results'] == json.loads((tmp_path / 'api' / 'results.json').read_text(encoding='utf-8'))
  assert ran['again'] == ran['results']
  for key in ('valid_ppl', 'test_ppl', 'step'):
    assert ran['results'][key] == from_cli[key], key


INTERRUPTED = textwrap.dedent('''
    import json, os, pathlib, signal, sys, threading, time
    import nplm_jax
    workdir, overrides = sys.argv[1], json.loads(sys.argv[2])
    config = nplm_jax.get_config('experiments/text.py:tiny', overrides)
    handlers = lambda: (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    before = handlers()

    def interrupt_once_training():
      metrics = pathlib.Path(workdir, 'metrics.jsonl')
      while not (metrics.exists() and metrics.read_text().strip()):  # the first progress line: training runs
        time.sleep(0.01)
      os.kill(os.getpid(), signal.SIGINT)
    if sys.argv[3] == 'interrupt':
      threading.Thread(target=interrupt_once_training, daemon=True).start()
    try:
      nplm_jax.train(config, workdir)
      stopped = None
    except KeyboardInterrupt as e:
      stopped = str(e)
    assert handlers() == before, (before, handlers())
    resumed = nplm_jax.train(config, workdir)
    print(json.dumps({'stopped': stopped, 'resumed': resumed}))
''')


def test_an_interrupted_train_saves_its_step_and_resumes_to_the_uninterrupted_figures(trained, tmp_path):
  """Ctrl-C inside nplm_jax.train: the step in progress saved, KeyboardInterrupt raised, the handlers as they were;
  train() again resumes from that step and ends on the figures of a run never interrupted."""
  files = trained['files']
  overrides = {f'data.{s}_file': files[s] for s in ('train', 'valid', 'test')}
  overrides.update({'train.max_steps': 2000, 'train.log_every': 10, 'train.eval_every': 1000, 'mesh.cpu_devices': 1})
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  runs = {name: [sys.executable, '-c', INTERRUPTED, str(tmp_path / name), json.dumps(overrides), name]
          for name in ('interrupt', 'whole')}
  procs = side_by_side.run(runs, REPO, env, timeout=600)
  ran, whole = (json.loads(procs[name].stdout.splitlines()[-1]) for name in ('interrupt', 'whole'))
  assert ran['stopped'] and 'SIGINT' in ran['stopped'] and 'call nplm_jax.train again' in ran['stopped'], ran
  assert 'resumed from step' in procs['interrupt'].stdout, procs['interrupt'].stdout[-2000:]
  assert whole['stopped'] is None
  whole = whole['resumed']
  for key in ('valid_ppl', 'test_ppl', 'step'):
    assert ran['resumed'][key] == whole[key], key


def test_train_in_a_jupyter_kernel_shows_progress_and_an_interrupt_resumes(trained, tmp_path):
  """In a real Jupyter kernel (nbclient, ipykernel): train() prints its progress lines with their ETA into the
  cell's output; the kernel's interrupt (what the stop button sends) ends the cell with KeyboardInterrupt, the
  kernel lives, and running train() again resumes to the figures of a run never interrupted."""
  import threading  # pylint: disable=g-import-not-at-top
  import nbclient  # pylint: disable=g-import-not-at-top
  import nbformat  # pylint: disable=g-import-not-at-top
  from jupyter_core.utils import run_sync  # pylint: disable=g-import-not-at-top
  files = trained['files']
  overrides = {f'data.{s}_file': files[s] for s in ('train', 'valid', 'test')}
  overrides.update({'train.max_steps': 2000, 'train.log_every': 10, 'train.eval_every': 1000, 'mesh.cpu_devices': 1})
  workdir = tmp_path / 'notebook'
  cells = [f'import json, nplm_jax\nconfig = nplm_jax.get_config("experiments/text.py:tiny", {overrides!r})',
           f'nplm_jax.train(config, {str(workdir)!r})',
           f'print(json.dumps(nplm_jax.train(config, {str(workdir)!r})))']
  notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
  client = nbclient.NotebookClient(notebook, timeout=600, allow_errors=True, kernel_name='python3',
                                   resources={'metadata': {'path': REPO}})

  def interrupt_once_training():
    metrics = workdir / 'metrics.jsonl'
    while not (metrics.exists() and metrics.read_text().strip()):  # the first progress line: training runs
      time.sleep(0.05)
    run_sync(client.km.interrupt_kernel)()  # as the stop button asks it: SIGINT to the kernel's process group

  with client.setup_kernel(env=dict(os.environ, JAX_PLATFORMS='cpu')):
    client.execute_cell(notebook.cells[0], 0)
    threading.Thread(target=interrupt_once_training, daemon=True).start()
    client.execute_cell(notebook.cells[1], 1)
    client.execute_cell(notebook.cells[2], 2)
  text = lambda cell: ''.join(o.get('text', '') for o in cell.outputs if o.output_type == 'stream')
  stopped, resumed = notebook.cells[1], notebook.cells[2]
  assert re.search(r'step \d+/2000 .* ETA', text(stopped)), text(stopped)[-2000:]
  errors = [o for o in stopped.outputs if o.output_type == 'error']
  assert errors and errors[0].ename == 'KeyboardInterrupt' and 'call nplm_jax.train again' in errors[0].evalue, errors
  assert 'resumed from step' in text(resumed) and not [o for o in resumed.outputs if o.output_type == 'error']
  ran = json.loads(text(resumed).strip().splitlines()[-1])
  whole = subprocess.run([sys.executable, '-c', INTERRUPTED, str(tmp_path / 'whole'), json.dumps(overrides), 'whole'],
                         cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=600)
  assert whole.returncode == 0, whole.stderr[-3000:]
  whole = json.loads(whole.stdout.splitlines()[-1])['resumed']
  for key in ('valid_ppl', 'test_ppl', 'step'):
    assert ran[key] == whole[key], key


def test_a_device_count_fixed_by_an_earlier_start_of_jax_is_said(trained):
  """JAX started by the caller with one CPU device: loading a workdir whose config asks for 2 warns that the count
  cannot change now, runs on the one, and leaves XLA_FLAGS as it was."""
  script = textwrap.dedent('''
      import os, sys, warnings
      import jax
      jax.devices()
      import nplm_jax
      before = os.environ.get('XLA_FLAGS')
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        lm = nplm_jax.load(sys.argv[1])
        lm.perplexity('w1 w2 w3')
      assert os.environ.get('XLA_FLAGS') == before
      print([str(w.message) for w in caught if 'cannot change' in str(w.message)])
  ''')
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env['XLA_FLAGS'] = ' '.join(f for f in env.get('XLA_FLAGS', '').split() if 'device_count' not in f)
  proc = subprocess.run([sys.executable, '-c', script, trained['path'], ], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top
  wanted = sharding.host_device_count(config_lib.requested_cpu_devices(trained['lm'].config), sharding.usable_cores())
  said = proc.stdout.strip()
  assert ('JAX started in this process with 1 CPU device(s)' in said) == (wanted > 1), (wanted, said)


ON_DEVICES = textwrap.dedent('''
    import json, pathlib, sys
    import nplm_jax
    lm = nplm_jax.load(sys.argv[1], devices=int(sys.argv[2]))
    lines = pathlib.Path(sys.argv[3]).read_text(encoding='utf-8').splitlines()
    print(json.dumps({'mesh': [lm.trained.run.mesh.shape[a] for a in ('data', 'model')],
                      'stream': lm.perplexity(lines, stream=True), 'sentences': lm.perplexity(lines)}))
''')


def test_a_model_loads_on_any_device_count_whatever_mesh_it_trained_on(trained, tmp_path):
  """Trained on a (1, 2) and a (2, 2) mesh of host devices, loaded in fresh processes on 1 and on 3 devices (3
  splits no padded vocabulary: the evaluation goes on 'data'): the figures of the same model loaded here, and
  nplm-score --devices=3 prints what nplm-score prints."""
  workdirs = {(1, 2): trained['path']}
  files = trained['files']
  if 'tiny_revisited' not in json.loads(pathlib.Path(trained['path'], 'config.json').read_text())['name']:
    path = tmp_path / 'mesh_2x2'
    proc = subprocess.run(
        [sys.executable, '-m', 'nplm_jax.main', f'--config={FAMILIES["paper"]}', f'--workdir={path}',
         *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')), '--config.train.num_epochs=1',
         '--config.mesh.cpu_devices=4', '--config.mesh.data=2', '--config.mesh.model=2'],
        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    workdirs[(2, 2)] = str(path)
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env['XLA_FLAGS'] = ' '.join(f for f in env.get('XLA_FLAGS', '').split() if 'device_count' not in f)
  lines = pathlib.Path(files['test']).read_text(encoding='utf-8').splitlines()
  for trained_on, workdir in workdirs.items():
    with nplm_jax.load(workdir) as lm:  # on the devices of this process
      own = {'stream': lm.perplexity(lines, stream=True), 'sentences': lm.perplexity(lines)}
    for count in (1, 3):
      proc = subprocess.run([sys.executable, '-c', ON_DEVICES, workdir, str(count), files['test']], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
      assert proc.returncode == 0, (trained_on, count, proc.stderr[-3000:])
      got = json.loads(proc.stdout.strip().splitlines()[-1])
      assert got['mesh'] == ([1, 1] if count == 1 else [3, 1]), got
      # float32 log-softmax over other blocks of the vocabulary: each token's log P moves by a few ulps
      for key, figure in own.items():
        assert got[key] == pytest.approx(figure, rel=1e-5), (trained_on, count, key)
  summary = lambda *flags: json.loads(command('nplm_jax.tools.score', f'--workdir={trained["path"]}',
                                              f'--text={files["test"]}', '--format=json', *flags).splitlines()[-1])
  default, on_three = summary(), summary('--devices=3')
  assert on_three['perplexity'] == pytest.approx(default['perplexity'], rel=1e-5)
  assert on_three['tokens'] == default['tokens']


def test_a_device_count_the_process_cannot_have_is_refused_in_one_line(trained):
  present = len(__import__('jax').devices())
  with pytest.raises(nplm_jax.UserError, match=rf'^devices={present + 1} is more than the {present} CPU device'):
    nplm_jax.load(trained['path'], devices=present + 1)
  for bad in (0, True, 'two', [1, 2]):
    with pytest.raises(nplm_jax.UserError, match='^devices='):
      nplm_jax.load(trained['path'], devices=bad)


def test_a_vocabulary_trained_with_a_byte_order_mark_reads_the_word_without_it(trained, tmp_path):
  """A workdir whose vocabulary holds its training file's first word with the file's byte-order mark (as training
  wrote it before text was read as 'utf-8-sig'): that word scores as the word, with the same figures."""
  import shutil  # pylint: disable=g-import-not-at-top
  from nplm_jax.data import workdir_vocab  # pylint: disable=g-import-not-at-top
  from nplm_jax.files import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  copy = tmp_path / 'marked'
  shutil.copytree(trained['path'], copy)
  workdir = workdir_lib.Workdir(str(copy))
  stored = workdir_vocab.Vocabulary.read(workdir)
  word = next(w for w in stored.words if w.startswith('w'))
  marked = tuple('\ufeff' + w if w == word else w for w in stored.words)
  import dataclasses  # pylint: disable=g-import-not-at-top
  dataclasses.replace(stored, words=marked).write(workdir)
  record = json.loads((copy / workdir_lib.INTEGRITY_FILE).read_text())  # as training recorded that vocabulary
  record.pop('digest')
  record['files'][workdir_vocab.VOCAB_FILE] = workdir.file_digest(workdir_vocab.VOCAB_FILE)
  workdir.write_json(workdir_lib.INTEGRITY_FILE, {**record, 'digest': workdir_lib._record_digest(record)})  # pylint: disable=protected-access
  with nplm_jax.load(copy) as lm:
    assert word in lm and lm.vocabulary.index(word) == trained['lm'].vocabulary.index(word)
    assert lm.perplexity(f'{word} w2 {word}') == trained['lm'].perplexity(f'{word} w2 {word}')


def test_a_second_load_compiles_nothing(trained):
  import jax  # pylint: disable=g-import-not-at-top
  compiled = []
  listener = lambda event, duration, **kwargs: compiled.append(event) if 'backend_compile' in event else None
  trained['lm'].perplexity('w1 w2 w3')
  trained['lm'].next_words('w1')
  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    again = nplm_jax.load(trained['path'])
    again.perplexity('w1 w2 w3')
    again.next_words('w1')
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  assert compiled == []


def test_an_interrupt_during_the_first_import_leaves_the_process_usable():
  """Ctrl-C while the first call imports JAX: KeyboardInterrupt once the import is done, the handler the caller's
  again, and the next call works (a half-imported JAX failed every later call with "no attribute 'core'")."""
  script = textwrap.dedent('''
      import os, signal, sys, threading, time
      import nplm_jax
      before = signal.getsignal(signal.SIGINT)
      threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
      try:
        nplm_jax.get_config('experiments/text.py:tiny')
        print('not interrupted')
      except KeyboardInterrupt:
        print('interrupted')
      assert signal.getsignal(signal.SIGINT) is before
      import jax
      assert hasattr(jax, 'core') and nplm_jax.get_config('experiments/text.py:tiny').name
      print('usable')
  ''')
  proc = subprocess.run([sys.executable, '-c', script], cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'),
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ['interrupted', 'usable'], proc.stdout


def test_importing_the_package_imports_no_jax():
  proc = subprocess.run([sys.executable, '-c', 'import sys, nplm_jax; print("jax" in sys.modules)'], cwd=REPO,
                        capture_output=True, text=True, timeout=60)
  assert proc.stdout.strip() == 'False', proc.stderr


# ----------------------------------------------------------------------------------------- README

def readme_python_blocks() -> list[str]:
  readme = pathlib.Path(REPO, 'README.md').read_text(encoding='utf-8')
  section = readme.split('## Use it from Python', 1)[1].split('\n## ', 1)[0]
  return re.findall(r'```python\n(.*?)```', section, re.S)


def test_readme_python_examples_run_as_written(tmp_path):
  """README's blocks in order: the first trains (the install check's run, from Python), the second uses
  the quick start's model, here the first block's, which is the same vocabulary (Brown's)."""
  train_block, use_block = readme_python_blocks()
  trained_here = re.search(r"nplm_jax\.train\(config, '([^']+)'\)", train_block).group(1)
  assert "nplm_jax.load('runs/brown_quick')" in use_block
  for block in (train_block, use_block.replace("'runs/brown_quick'", repr(trained_here))):
    run = subprocess.run([sys.executable, '-c', block], cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS='cpu'),
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
