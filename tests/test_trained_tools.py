"""The tools for a trained model (score, sample, embeddings, plot), each checked against an
independent computation on a tiny trained workdir."""

import json
import math
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest

from nplm_jax.tools import embeddings
from nplm_jax.tools import language_model
from nplm_jax.training import evaluation
from nplm_jax.tools import sample as sample_lib
from nplm_jax.tools import score as score_lib
from nplm_jax.tools import trained as trained_lib
from tests import warm_python

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  """A tiny text-corpus model, trained for a few hundred steps, with its trigram mixture."""
  return train_tiny(tmp_path_factory.mktemp('trained'), '--config.train.num_epochs=4')


@pytest.fixture(scope='module')
def distant_workdir(tmp_path_factory):
  """The same with a distant block (6 words before the window, 2 kernels), as text.py:quick has, trained
  with its sampled step (NCE, several steps a dispatch)."""
  return train_tiny(tmp_path_factory.mktemp('distant'), '--config.train.num_epochs=2', '--config.model.distant_tokens=6',
                    '--config.model.distant_kernels=2', '--config.loss.name=nce', '--config.loss.num_samples=8',
                    '--config.train.steps_per_dispatch=10', '--config.mesh.cpu_devices=1')


def train_tiny(base, *overrides) -> dict:
  """text.py:tiny trained on a Markov corpus in `base` (with <unk> in the vocabulary) and mixed."""
  from tests import corpora  # pylint: disable=g-import-not-at-top
  files = corpora.write_markov_corpus(str(base))
  with open(files['valid'], 'a', encoding='utf-8') as f:
    f.write('w1 w2 never_in_train\n')  # so the vocabulary has <unk>, as Brown's and PTB's do
  path = base / 'run'
  proc = subprocess.run(
      [sys.executable, '-m', 'nplm_jax.main', '--config=experiments/text.py:tiny', f'--workdir={path}',
       *(f'--config.data.{s}_file={files[s]}' for s in ('train', 'valid', 'test')), '--config.mix.enabled=True',
       '--config.mesh.cpu_devices=2', *overrides],
      cwd=REPO, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  return dict(path=str(path), files=files, base=base)


@pytest.fixture(scope='module')
def model(workdir):
  return trained_lib.TrainedModel.load(workdir['path'])


@pytest.fixture(scope='module')
def vectors(model):
  return language_model.LanguageModel(model).vectors


def tool(module, *args, stdin=None):
  proc = warm_python.shared().run([module, *args], env=dict(os.environ, JAX_PLATFORMS='cpu'), input=stdin)
  assert proc.returncode == 0, proc.stderr
  return proc.stdout


def read_text(path):
  with open(path, encoding='utf-8') as f:
    return f.read().splitlines()


# ------------------------------------------------------------------------------------------ score

def test_scoring_the_test_file_as_a_stream_gives_the_evaluation(workdir, model):
  lines = read_text(workdir['files']['test'])
  scored = score_lib.score_text(model, lines, independent_lines=False)
  nll = np.concatenate([s.nll for s in scored])
  evaluated = evaluation.evaluate_workdir(workdir['path'], splits=('test',))['test']
  n = model.context_size  # only the first n-1 tokens' contexts differ (boundary symbols vs the end of valid)
  np.testing.assert_allclose(nll[n:], evaluated[n:], rtol=1e-5)
  results = json.loads(pathlib.Path(workdir['path'], 'results.json').read_text(encoding='utf-8'))
  assert math.exp(nll.mean()) == pytest.approx(results['test_ppl'], rel=1e-3)


def test_a_model_with_a_distant_block_scores_as_it_evaluates_and_is_not_exported(distant_workdir, tmp_path):
  """Its contexts hold the window and the distant block: scored as a stream, every token after the first
  context's gives the evaluation's NLL; export, which writes the paper's formula, refuses it in one line."""
  model = trained_lib.TrainedModel.load(distant_workdir['path'])
  assert model.context_size == 2 + 6
  scored = score_lib.score_text(model, read_text(distant_workdir['files']['test']), independent_lines=False)
  nll = np.concatenate([s.nll for s in scored])
  evaluated = evaluation.evaluate_workdir(distant_workdir['path'], splits=('test',))['test']
  np.testing.assert_allclose(nll[model.context_size:], evaluated[model.context_size:], rtol=1e-5)
  proc = warm_python.shared().run(['nplm_jax.tools.export', f'--workdir={distant_workdir["path"]}',
                                   f'--output={tmp_path / "exported"}'], env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 1 and proc.stderr.count('\n') == 1 and 'model.distant_tokens=6' in proc.stderr


def test_independent_lines_are_each_scored_from_boundary_symbols(model, workdir):
  lines = read_text(workdir['files']['valid'])[:5]
  together = score_lib.score_text(model, lines, independent_lines=True)
  for line, s in zip(lines, together):
    alone = score_lib.score_text(model, [line], independent_lines=False)[0]
    np.testing.assert_allclose(s.nll, alone.nll, rtol=1e-6)
    assert s.words[-1] == '<eos>'  # text corpora end every line with <eos>


def test_summary_counts_oovs_as_kenlm_does(model):
  known = model.vocab[5]
  scored = score_lib.score_text(model, [f'{known} zzz_unknown {known}', 'qqq'], independent_lines=False)
  nll = np.concatenate([s.nll for s in scored])
  oov = np.concatenate([s.oov for s in scored])
  assert oov.tolist() == [False, True, False, False, True, False]  # <eos> after each line
  total = score_lib.summary(nll, oov, '10')
  assert total['tokens'] == 6 and total['oov'] == 2
  assert total['perplexity'] == pytest.approx(math.exp(nll.mean()))
  assert total['perplexity_excluding_oov'] == pytest.approx(math.exp(nll[~oov].mean()))
  assert total['log_prob'] == pytest.approx(-nll.sum() / math.log(10))


def test_score_command_word_line_and_json_output(workdir):
  text = 'w1 w2 w3\nw4 nope w5\n'
  words = tool('nplm_jax.tools.score', f'--workdir={workdir["path"]}', '--text=-', '--verbosity=word', '--log_base=2',
               stdin=text).splitlines()
  assert [w.split('\t')[0] for w in words[:4]] == ['w1', 'w2', 'w3', '<eos>']  # word, id, log2 P
  assert words[4].startswith('line 1: log2 P = ') and words[5].startswith('w4\t')
  assert words[6].startswith('nope\t') and words[6].endswith('\tOOV') and words[9].startswith('line 2: ')
  assert words[-1].startswith('tokens 8, OOV 1, log2 P = ')
  records = [json.loads(line) for line in tool('nplm_jax.tools.score', f'--workdir={workdir["path"]}', '--text=-',
                                                '--verbosity=line', '--format=json', stdin=text).splitlines()]
  assert [r['tokens'] for r in records[:2]] == [4, 4]
  summary = records[-1]
  assert {'tokens', 'oov', 'perplexity', 'perplexity_excluding_oov', 'log_base'} <= set(summary)
  assert summary['log_base'] == '10' and summary['tokens'] == 8 and summary['oov'] == 1
  assert all(r['log_base'] == '10' and 'log_prob' in r for r in records)  # one key in every record
  assert sum(r['log_prob'] for r in records[:2]) == pytest.approx(summary['log_prob'], rel=1e-6)
  blank = [json.loads(line) for line in tool('nplm_jax.tools.score', f'--workdir={workdir["path"]}', '--text=-',
                                            '--verbosity=line', '--format=json', stdin='w1\n\nw2\n').splitlines()]
  assert blank[1]['tokens'] == 1 and blank[1]['log_prob'] < 0  # a blank line is its <eos> (data.blank_lines)


def test_kenlm_format_parses_as_kenlms_query_output(workdir):
  """What scripts that read KenLM's `query` parse: per line `word=id n log10p` + Total/OOV, then the
  summary lines; the numbers are those of the JSON output."""
  import re  # pylint: disable=g-import-not-at-top
  text = 'w1 w2 w3\nw4 nope w5\n'
  out = tool('nplm_jax.tools.score', f'--workdir={workdir["path"]}', '--text=-', '--format=kenlm', '--verbosity=word',
             stdin=text)
  words = [json.loads(line) for line in tool('nplm_jax.tools.score', f'--workdir={workdir["path"]}', '--text=-',
                                             '--format=json', '--verbosity=word', stdin=text).splitlines()]
  words = [r for r in words if 'word' in r]
  lines = out.splitlines()
  assert len(lines) == 6
  pairs = [re.findall(r'(\S+)=(\d+) (\d+) (-?[0-9.e+-]+)\t', line) for line in lines[:2]]
  assert [w for p in pairs for w, *_ in p] == ['w1', 'w2', 'w3', '<eos>', 'w4', 'nope', 'w5', '<eos>']
  flat = [x for p in pairs for x in p]
  assert [w for w, *_ in flat] == [r['word'] for r in words]
  assert [int(i) for _, i, _, _ in flat] == [r['id'] for r in words]
  assert all(int(n) == 3 for _, _, n, _ in flat)  # the tiny model's order
  np.testing.assert_allclose([float(p) for *_, p in flat], [r['log_prob'] for r in words], rtol=1e-5)
  totals = [re.search(r'Total: (-?[0-9.e+-]+) OOV: (\d+)$', line) for line in lines[:2]]
  assert [int(t[2]) for t in totals] == [0, 1]
  summary = json.loads(tool('nplm_jax.tools.score', f'--workdir={workdir["path"]}', '--text=-', '--format=json', stdin=text))
  assert float(re.search(r'^Perplexity including OOVs:\t([0-9.]+)$', out, re.M)[1]) == pytest.approx(summary['perplexity'])
  assert float(re.search(r'^Perplexity excluding OOVs:\t([0-9.]+)$', out, re.M)[1]) == pytest.approx(
      summary['perplexity_excluding_oov'])
  assert re.search(r'^OOVs:\t(\d+)$', out, re.M)[1] == '1' and re.search(r'^Tokens:\t(\d+)$', out, re.M)[1] == '8'


def test_score_with_the_mixture_matches_the_training_mixture(workdir):
  out = json.loads(tool('nplm_jax.tools.score', f'--workdir={workdir["path"]}', f'--text={workdir["files"]["test"]}',
                        '--mix', '--format=json'))
  results = json.loads(pathlib.Path(workdir['path'], 'results.json').read_text(encoding='utf-8'))
  assert out['perplexity'] == pytest.approx(results['mix_test_ppl'], rel=1e-2)
  assert out['perplexity'] < results['test_ppl'] * 1.2  # mixed, not the n-gram alone


# ----------------------------------------------------------------------------------------- sample

def test_temperature_zero_and_top_k_one_follow_the_argmax(model):
  greedy = sample_lib.sample(model, 'w1 w2', 6, temperature=0.0)[0]
  history = [model.word_ids['w1'], model.word_ids['w2']]
  for word in greedy:  # the argmax chain, computed step by step from the model's distribution
    context = np.array([history[::-1][:model.context_size]])
    log_probs = model.next_word_log_probs(context)[0]
    log_probs[[model.boundary_id]] = -np.inf
    assert word == model.vocab[int(np.argmax(log_probs))]
    history.append(model.word_ids[word])
  assert sample_lib.sample(model, 'w1 w2', 6, top_k=1, seed=3)[0] == greedy


def test_draws_match_the_models_probabilities(model):
  context = np.array([[model.word_ids['w3'], model.word_ids['w7']]])
  probs = np.exp(model.next_word_log_probs(context))[0]
  n = 20_000
  drawn = sample_lib.draw(sample_lib.shape_distribution(np.log(np.tile(probs, (n, 1))), 1.0, 0, 1.0),
                          np.random.default_rng(0))
  empirical = np.bincount(drawn, minlength=len(probs)) / n
  tv = 0.5 * np.abs(empirical - probs).sum()
  # E|p_hat - p| <= sqrt(p (1 - p) / n) per word, so E[TV] <= bound; allow 2x for the one draw tested
  bound = 0.5 * np.sum(np.sqrt(probs * (1 - probs) / n))
  assert tv < 2 * bound, (tv, bound)


def test_top_k_and_top_p_keep_the_most_probable_words():
  log_probs = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
  np.testing.assert_allclose(sample_lib.shape_distribution(log_probs, 1.0, 2, 1.0), [[0.625, 0.375, 0, 0]])
  np.testing.assert_allclose(sample_lib.shape_distribution(log_probs, 1.0, 0, 0.79), [[0.625, 0.375, 0, 0]])
  np.testing.assert_allclose(sample_lib.shape_distribution(log_probs, 1.0, 0, 0.81), [[0.5, 0.3, 0.15, 0]] /
                             np.float64(0.95))
  sharp = sample_lib.shape_distribution(log_probs, 0.5, 0, 1.0)[0]
  np.testing.assert_allclose(sharp, np.array([0.25, 0.09, 0.0225, 0.0025]) / 0.365)


def test_samples_are_a_function_of_the_seed_and_index_and_avoid_the_symbols(model):
  a = sample_lib.sample(model, '', 40, num_samples=3, seed=7, stop_at_eos=False)
  assert a == sample_lib.sample(model, '', 40, num_samples=3, seed=7, stop_at_eos=False)
  assert a != sample_lib.sample(model, '', 40, num_samples=3, seed=8, stop_at_eos=False)
  assert a[:2] == sample_lib.sample(model, '', 40, num_samples=2, seed=7, stop_at_eos=False)  # sample i: (seed, i)
  assert a + sample_lib.sample(model, '', 40, num_samples=5, seed=7, stop_at_eos=False)[3:] == \
      sample_lib.sample(model, '', 40, num_samples=5, seed=7, stop_at_eos=False)
  assert all(len(s) == 40 and '<eos>' not in s and '<unk>' not in s for s in a)
  free = sample_lib.sample(model, '', 200, num_samples=4, seed=1, allow_unk=True, stop_at_eos=False)
  assert any('<eos>' in s for s in free)  # a line ends every 9-16 words in this corpus


def test_samples_end_at_eos(model):
  """Lines of this corpus have 9-16 words: samples stopped at <eos> are about that long, and are
  the prefixes of the same draws made without stopping (same seed and index)."""
  stopped = sample_lib.sample(model, '', 200, num_samples=8, seed=3, allow_unk=True)  # stop_at_eos: on for text
  assert all('<eos>' not in s for s in stopped) and all(len(s) < 60 for s in stopped)
  assert 5 <= np.mean([len(s) for s in stopped]) <= 25
  full = sample_lib.sample(model, '', 200, num_samples=8, seed=3, allow_unk=True, stop_at_eos=False)
  for s, f in zip(stopped, full):
    assert f[:len(s)] == s and (len(s) == 200 or f[len(s)] == '<eos>')


def test_sample_command_prints_one_sample_a_line(workdir):
  out = tool('nplm_jax.tools.sample', f'--workdir={workdir["path"]}', '--prompt=w1 w2', '--num_tokens=5',
             '--num_samples=3', '--seed=0', '--no-stop_at_eos').splitlines()
  assert len(out) == 3 and all(line.startswith('w1 w2 ') and len(line.split()) == 7 for line in out)


def test_a_single_sample_is_streamed_word_by_word(model):
  """One sample is drawn as a stream (the memory it holds does not grow with num_tokens): the same
  words as sample()'s sample 0, stopped at <eos> or not."""
  for stop in (True, False):
    streamed = list(sample_lib.stream_words(model, 'w1 w2', 60, seed=5, stop_at_eos=stop))
    assert streamed == sample_lib.sample(model, 'w1 w2', 60, seed=5, stop_at_eos=stop)[0]
  words = sample_lib.stream_words(model, '', 10**12, seed=1, stop_at_eos=False)  # never held whole
  assert len([next(words) for _ in range(50)]) == 50


def test_the_sample_command_prints_a_long_sample_as_it_draws(workdir):
  """--num_tokens=10**12: the words reach stdout as they are drawn; Ctrl-C ends it in the stop line."""
  proc = subprocess.Popen([sys.executable, '-c', 'from nplm_jax import entry; entry.sample()',
                           f'--workdir={workdir["path"]}', '--prompt=w1', '--num_tokens=1000000000000', '--no-stop_at_eos'],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO))
  try:
    text = ''
    while len(text.split()) < 100:
      chunk = os.read(proc.stdout.fileno(), 4096).decode()
      if not chunk:
        break  # the command ended without them
      text += chunk
  finally:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
  assert text.startswith('w1 ') and all(w in model_words(workdir) for w in text.split()[:-1])
  assert proc.returncode == 128 + signal.SIGINT and 'stopped by SIGINT' in err


def model_words(workdir) -> set[str]:
  with open(os.path.join(workdir['path'], 'vocab.tsv'), encoding='utf-8') as f:
    return {line.split('\t')[0] for line in f}


# ------------------------------------------------------------------------------------- embeddings

def test_neighbours_are_the_highest_cosines(model, vectors):
  c = model.embeddings.astype(np.float64)
  found = embeddings.neighbours(vectors, ['w3'], 5)['w3']
  i = model.word_ids['w3']
  cosines = [(float(c[i] @ c[j] / np.linalg.norm(c[i]) / np.linalg.norm(c[j])), model.vocab[j])
             for j in range(len(c)) if j != i]
  expected = sorted(cosines, reverse=True)[:5]
  assert [w for w, _ in found] == [w for _, w in expected]
  np.testing.assert_allclose([s for _, s in found], [s for s, _ in expected], rtol=1e-5)


def test_topn_beyond_the_vocabulary_lists_every_other_word_once(model, vectors):
  found = embeddings.neighbours(vectors, ['w3'], 10 * len(model.vocab))['w3']
  assert len(found) == len(model.vocab) - 1 and 'w3' not in {w for w, _ in found}
  assert all(np.isfinite(s) for _, s in found)


def test_analogy_ranks_by_the_cosine_to_b_minus_a_plus_c(model, vectors):
  """Independently: unit rows, b - a + c, cosines to every row, a, b and c left out (gensim's rule)."""
  found = embeddings.analogy(vectors, ['w1', 'w2', 'w3'], 10)
  c = model.embeddings.astype(np.float64)
  unit = c / np.linalg.norm(c, axis=1, keepdims=True)
  a, b, q = (model.word_ids[w] for w in ('w1', 'w2', 'w3'))
  target = unit[b] - unit[a] + unit[q]
  cosines = unit @ target / np.linalg.norm(target)
  ranked = [i for i in np.argsort(-cosines) if i not in (a, b, q)][:10]
  assert [w for w, _ in found] == [model.vocab[i] for i in ranked]
  np.testing.assert_allclose([s for _, s in found], cosines[ranked], rtol=1e-5)


def test_word2vec_and_projector_exports(workdir, model, tmp_path):
  tool('nplm_jax.tools.embeddings', 'export', f'--workdir={workdir["path"]}', '--format=word2vec',
       f'--output={tmp_path / "vectors.txt"}')
  lines = read_text(tmp_path / 'vectors.txt')
  v, d = map(int, lines[0].split())
  assert (v, d) == model.embeddings.shape
  vectors = {parts[0]: np.array(parts[1:], float) for parts in (line.split(' ') for line in lines[1:])}
  assert list(vectors) == list(model.vocab) and all(len(x) == d for x in vectors.values())
  np.testing.assert_allclose(vectors['w3'], model.embeddings[model.word_ids['w3']], rtol=1e-5, atol=1e-6)
  out = tool('nplm_jax.tools.embeddings', 'export', f'--workdir={workdir["path"]}', '--format=projector',
             f'--output={tmp_path / "projector"}')
  assert 'tensorboard --logdir=' in out
  tensors = read_text(tmp_path / 'projector' / 'tensors.tsv')
  metadata = read_text(tmp_path / 'projector' / 'metadata.tsv')
  assert len(tensors) == v and len(metadata) == v + 1 and metadata[0] == 'word\ttrain_count'
  config = (tmp_path / 'projector' / 'projector_config.pbtxt').read_text()
  assert 'tensor_path: "tensors.tsv"' in config and 'metadata_path: "metadata.tsv"' in config


def test_neighbours_command(workdir):
  out = tool('nplm_jax.tools.embeddings', 'neighbours', f'--workdir={workdir["path"]}', '--words=w1,w2', '--topn=3')
  lines = out.splitlines()
  assert lines[0].startswith('w1: ') and lines[1].startswith('w2: ') and lines[0].count(',') == 2


# ------------------------------------------------------------------------------------------- plot

def test_plots_are_png(workdir, tmp_path):
  tool('nplm_jax.tools.plot', 'curves', f'--workdir={workdir["path"]}', f'--workdir={workdir["path"]}',
       '--ngram=trigram=30', f'--output={tmp_path / "curves.png"}')
  tool('nplm_jax.tools.plot', 'embeddings', f'--workdir={workdir["path"]}', '--top=40', f'--output={tmp_path / "map.png"}')
  for name in ('curves.png', 'map.png'):
    data = (tmp_path / name).read_bytes()
    assert data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 10_000


def test_map_labels_never_overlap_and_are_taken_literally():
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools import plot  # pylint: disable=g-import-not-at-top
  xy = np.random.default_rng(0).normal(size=(300, 2))  # crowded: not every word can have a label
  words = ['$', "''", '$5', ','] + [f'word{i}' for i in range(296)]
  fig, ax = plt.subplots(figsize=(6, 5))
  ax.scatter(xy[:, 0], xy[:, 1], s=4)
  labelled = plot.place_labels(fig, ax, words, xy)
  renderer = fig.canvas.get_renderer()
  boxes = [t.get_window_extent(renderer) for t in ax.texts]
  assert 20 < labelled == len(ax.texts) < 300
  assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
  assert [t.get_text() for t in ax.texts[:4]] == ['$', "''", '$5', ','] and not any(t.get_parse_math() for t in ax.texts)
  plt.close(fig)
  assert [plot.plain_tick(v) for v in (320.0, 42.5, 1000.0)] == ['320', '42.5', '1000']


def test_curves_have_each_evaluations_wall_time(workdir):
  from nplm_jax.tools import plot  # pylint: disable=g-import-not-at-top
  curve = plot.run_curve(workdir['path'])
  assert not curve['wall_estimated'] and len(curve['wall']) == len(curve['valid_ppl']) >= 4
  assert all(b > a for a, b in zip(curve['wall'], curve['wall'][1:]))


# ----------------------------------------------------------------------------------------- extend

def test_extend_gives_new_words_the_papers_vector(workdir, model, tmp_path):
  lines = ['w1 w2 newA w3 w4', 'w5 newB w6 newA']
  text = tmp_path / 'new.txt'
  text.write_text('\n'.join(lines) + '\n')
  out = tool('nplm_jax.tools.extend', f'--workdir={workdir["path"]}', f'--text={text}', f'--output_workdir={tmp_path / "ext"}')
  assert out.startswith('added 2 words (3 occurrences)')
  extended = trained_lib.TrainedModel.load(str(tmp_path / 'ext'))
  v = len(model.vocab)
  assert extended.vocab[:v] == model.vocab and extended.vocab[v:] == ('newA', 'newB')
  # independently: C(j) = sum_i C(i) P(i | context), averaged over j's occurrences (unknown words read as <unk>)
  words = [w for line in lines for w in model.line_tokens(line)]
  ids, oov = model.to_ids(words)
  probs = np.exp(model.next_word_log_probs(model.contexts(ids)))
  expected = probs @ model.embeddings.astype(np.float64)
  positions = {w: [t for t, x in enumerate(words) if x == w] for w in ('newA', 'newB')}
  for j, w in enumerate(('newA', 'newB')):
    np.testing.assert_allclose(extended.embeddings[v + j], expected[positions[w]].mean(0), rtol=1e-4, atol=1e-6)
  out_layer = np.asarray(extended.params['output'])
  rare_bias = np.asarray(model.params['output'])[-1, model.rare_id]
  np.testing.assert_allclose(out_layer[-1, v:v + 2], rare_bias - np.log(2), rtol=1e-6)
  # their U and W rows: sum_i P(i | context) [U; W]_i, averaged over each new word's occurrences
  expected_columns = probs @ np.asarray(model.params['output'], np.float64)[:-1, :v].T
  for j, w in enumerate(('newA', 'newB')):
    np.testing.assert_allclose(out_layer[:-1, v + j], expected_columns[positions[w]].mean(0), rtol=1e-4, atol=1e-6)
    assert np.abs(out_layer[:-1, v + j]).max() > 1e-3  # not zero columns
  np.testing.assert_array_equal(out_layer[:, :v], np.asarray(model.params['output'])[:, :v])
  scored = score_lib.score_text(extended, ['w1 newB w2'], independent_lines=False)[0]
  assert not scored.oov.any() and np.all(np.isfinite(scored.nll))
  assert len(embeddings.neighbours(language_model.LanguageModel(extended).vectors, ['newB'], 3)['newB']) == 3
  # from Python, the same vectors without a new workdir
  found = language_model.LanguageModel(model).oov_vectors(lines)
  assert list(found) == ['newA', 'newB']
  # the same sums, compiled without the columns beside them: float32 dot products of |V| terms, in another order
  # perhaps, so apart by at most |V| roundings of 2**-24 of the largest |C| (probabilities sum to 1)
  bound = v * 2.0**-24 * np.abs(model.embeddings).max()
  np.testing.assert_allclose(np.stack(list(found.values())), extended.embeddings[v:], rtol=0, atol=bound)


def test_each_output_column_rule_gives_the_columns_it_names(workdir, model, tmp_path):
  from launch import oov_output_columns  # pylint: disable=g-import-not-at-top
  from nplm_jax.commands import extend as extend_command  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools import extend as extend_lib  # pylint: disable=g-import-not-at-top
  lines = ['w1 w2 newA w3 w4', 'w5 newB w6 newA']
  v, rare = len(model.vocab), model.rare_id
  out_layer = np.asarray(model.params['output'], np.float64)
  assert extend_command.parse_args(['--workdir=a', '--text=b', '--output_workdir=c']).output_columns == (
      extend_lib.DEFAULT_OUTPUT_COLUMNS)
  columns = {}
  for rule in extend_lib.OUTPUT_COLUMNS:
    assert extend_command.parse_args(['--workdir=a', '--text=b', '--output_workdir=c', f'--output_columns={rule}'])
    extend_lib.extend(workdir['path'], lines, str(tmp_path / rule), output_columns=rule)
    columns[rule] = np.asarray(trained_lib.TrainedModel.load(str(tmp_path / rule)).params['output'], np.float64)
    np.testing.assert_array_equal(columns[rule][:, :v], out_layer[:, :v])
  expected, prior, split = (columns[r][:, v:v + 2] for r in ('expected', 'expected_rare_prior', 'rare_split'))
  np.testing.assert_allclose(prior[:-1], expected[:-1], rtol=1e-6)  # the same U and W rows
  np.testing.assert_allclose(prior[-1], out_layer[-1, rare] - np.log(2), rtol=1e-6)
  np.testing.assert_allclose(split, np.stack([out_layer[:, rare]] * 2, axis=1) - np.eye(len(out_layer))[-1:].T * np.log(2),
                             rtol=1e-6)
  # the scores: each row's perplexities from the extended model's own log-probabilities, known and new apart
  figures = oov_output_columns.measure(workdir['path'], lines)
  rows = figures['output_columns']
  assert [r[0].split('`')[1] for r in rows[1:]] == list(extend_lib.OUTPUT_COLUMNS) and rows[0][2] is None
  words = [w for line in lines for w in model.line_tokens(line)]
  ids, new = model.to_ids(words)
  log_p = model.next_word_log_probs(model.contexts(ids))[np.arange(len(ids)), ids]
  np.testing.assert_allclose(rows[0][1], np.exp(-log_p[~new].mean()), rtol=1e-5)
  np.testing.assert_allclose(figures['test_ppl'], np.exp(-log_p.mean()), rtol=1e-5)
  assert figures['added_words'] == 2 and figures['extended_vocab'] == v + 2
  assert all(known > 0 and unseen > 0 for _, known, unseen in rows[1:])


def test_pos_agreement_counts_shared_tags(workdir, tmp_path):
  from launch import pos_agreement  # pylint: disable=g-import-not-at-top
  assert pos_agreement.simple_tag('NN-TL') == 'NN' and pos_agreement.simple_tag('VBD') == 'VBD'
  assert pos_agreement.most_frequent_tags([('a', 'NN'), ('a', 'VB'), ('a', 'NN-TL')]) == {'a': 'NN'}
  vocab_vectors = np.array([[1.0, 0.0], [0.0, 1.0]])
  rates = pos_agreement.agreement(['x', 'y'], np.array([[2.0, 0.1], [2.0, 0.2]]), ['p', 'q'], vocab_vectors,
                                  {'x': 'N', 'y': 'V', 'p': 'N', 'q': 'V'})
  assert rates == {'words': 2, 'agreement': 0.5}  # both nearest p (tag N): x agrees, y does not
  lines = ['w1 w2 newA w3 w4', 'w5 newB w6 newA']
  text = tmp_path / 'new.txt'
  text.write_text('\n'.join(lines) + '\n')
  tool('nplm_jax.tools.extend', f'--workdir={workdir["path"]}', f'--text={text}', f'--output_workdir={tmp_path / "ext"}')
  tagged = [(f'w{i}', 'A' if i % 2 else 'B') for i in range(60)] + [('newA', 'A'), ('newB', 'B')]
  rows = pos_agreement.measure(str(tmp_path / 'ext'), lines + read_text(workdir['files']['test']), tagged)
  assert rows['new words vs rows of C']['words'] == 2
  assert all(r['words'] == 0 or 0.0 <= r['agreement'] <= 1.0 for r in rows.values())  # nan: no such words


def test_a_prompt_word_outside_the_vocabulary_is_noted_on_stderr(workdir):
  proc = subprocess.run([sys.executable, '-m', 'nplm_jax.tools.sample', f'--workdir={workdir["path"]}',
                         '--prompt=w1 zzzunseen', '--num_tokens=3', '--no-stop_at_eos'], capture_output=True, text=True,
                        env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO), timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr.strip().splitlines() == ['note: prompt word(s) outside the vocabulary, read as <unk>: zzzunseen']
  assert proc.stdout.startswith('w1 zzzunseen ')
