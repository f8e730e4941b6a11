"""A trained workdir's best parameters, ready to use: its text tokenised as its corpus was, scored,
continued, and its word feature vectors C.

Every command that reads a trained model (score, sample, embeddings, extend, plot) loads it here:
the workdir's config.json says which model it is, its vocab.tsv and tokenizer.json which words and
how text becomes them (workdir_vocab: the corpus is never read); the best parameters are restored onto
the mesh the config asks for on this machine, or onto any count of devices asked for (placement: checkpoints
move between meshes), and all work is batched through jitted, sharded functions, never a Python loop over
the vocabulary.
"""

import collections
import copy
import dataclasses
import math
import functools
import json
import os
import weakref

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from nplm_jax import config as config_lib
from nplm_jax.parallel import backend
from nplm_jax.training import checkpoint as ckpt_lib
from nplm_jax.data import corpora as data_lib
from nplm_jax.training import evaluation
from nplm_jax.training import experiment as experiment_lib
from nplm_jax import progress as progress_lib
from nplm_jax.models import output_layer
from nplm_jax.parallel import sharding
from nplm_jax.training import steps as steps_lib
from nplm_jax.files import trained_workdir
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.data import workdir_vocab
from nplm_jax.errors import UserError


@dataclasses.dataclass
class Scored:
  """Per-token results of scoring a line: the tokens as the model saw them, and -log P of each."""
  words: list[str]
  ids: np.ndarray  # int32 [tokens]
  oov: np.ndarray  # bool [tokens]: the word is not in the vocabulary (scored as the rare-word symbol)
  nll: np.ndarray  # float64 [tokens]: -log P, natural log

  def __len__(self) -> int:
    return len(self.words)

  @property
  def log_probs(self) -> np.ndarray:
    """log P of each token, natural log, float64 [tokens]."""
    return -self.nll

  @property
  def total(self) -> float:
    """The line's log-probability, the sum of log_probs (natural log; 0.0 for no tokens)."""
    return float(-np.sum(self.nll)) + 0.0


@dataclasses.dataclass
class TrainedModel:
  config: ml_collections.ConfigDict
  vocabulary: workdir_vocab.Vocabulary
  run: experiment_lib.Experiment  # built for evaluation, over the stored vocabulary
  params: dict
  step: int  # the training step of the best parameters

  @classmethod
  def load(cls, workdir_path: str, devices=None) -> 'TrainedModel':
    """The best parameters of a finished or running training (one line of error otherwise), on `devices`:
    None for every device of the default backend (on the mesh the config asks for where it fits them), a
    count of them, or a list of jax devices (see placement)."""
    trained_workdir.check(workdir_path)
    config = evaluation.load_config(workdir_path)
    workdir = workdir_lib.Workdir(workdir_path)
    vocabulary = workdir_vocab.load(workdir, config)
    check_devices(devices)
    asked = copy.deepcopy(config)
    if isinstance(devices, int):  # that many host devices, when this call is the one that starts JAX on CPU
      asked.mesh.cpu_devices = devices
    with backend.configured(asked, warn=devices is None):  # before JAX's backends start; XLA_FLAGS left as it was
      placed, chosen = placement(config, len(vocabulary.words), devices)
      run = _evaluation_run(placed, workdir, vocabulary, chosen)
    checkpoints = ckpt_lib.Checkpoints(workdir, read_only=True)
    try:
      step = evaluation.best_step(run, checkpoints)
      with jax.set_mesh(run.mesh):
        params = run.restore_best_params(checkpoints, step)
    finally:
      checkpoints.close()
    return cls(config, vocabulary, run, params, step)

  # ------------------------------------------------------------------------- vocabulary and text

  @property
  def vocab(self) -> tuple[str, ...]:
    return self.vocabulary.words

  @property
  def train_counts(self) -> np.ndarray:
    """How often each word occurred in the training tokens (0 for words added by extend)."""
    return self.vocabulary.train_counts

  @functools.cached_property
  def word_ids(self) -> dict[str, int]:
    return {w: i for i, w in enumerate(self.vocab)}

  @property
  def context_size(self) -> int:
    """Words a context holds (the distant block included)."""
    return self.run.model.context_size

  @property
  def boundary_id(self) -> int:
    return self.vocabulary.boundary_id

  @property
  def rare_id(self) -> int | None:
    return self.word_ids.get(data_lib.RARE)

  def training_corpus(self, purpose: str) -> data_lib.Corpus:
    """The corpus the model was trained on, read again (for what needs its tokens, e.g. the n-gram
    of a mixture): one line when it is gone or is not that corpus any more."""
    try:
      corpus = data_lib.load_corpus(self.config.data)
    except UserError as e:
      raise UserError(f'{purpose} reads the training corpus, which cannot be read now ({e})') from None
    if self.vocab[:corpus.vocab_size] != corpus.vocab:
      raise UserError(f'{purpose} reads the training corpus, but the corpus the config names now has another '
                      'vocabulary than this model; restore the corpus it was trained on')
    # with the words extend added (never seen in training: counted 0)
    return dataclasses.replace(corpus, vocab=self.vocab, stored_train_counts=self.train_counts)

  def line_tokens(self, line: str) -> list[str]:
    """A line's tokens as the corpus reader made them: Brown is a plain word stream; text and PTB
    corpora end every line with <eos> and may be character-level (data.unit)."""
    return self.vocabulary.tokenizer.line_tokens(line)

  @property
  def text_unit(self) -> str | None:
    return self.vocabulary.tokenizer.unit

  @property
  def char_level(self) -> bool:
    return self.text_unit == 'char'

  def prompt_tokens(self, prompt: str) -> list[str]:
    """A prompt's tokens: as a line of the corpus, without the end-of-line token."""
    tokens = self.line_tokens(prompt)
    return tokens[:-1] if tokens and tokens[-1] == data_lib.EOS else tokens

  def join(self, tokens: list[str]) -> str:
    """Tokens back to text: words with spaces between; characters together, SPACE as a space."""
    if self.char_level:
      return ''.join(' ' if t == data_lib.SPACE else t for t in tokens)
    return ' '.join(tokens)

  def to_ids(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ids, oov): words outside the vocabulary become the rare-word symbol and are marked."""
    ids = np.fromiter((self.word_ids.get(w, -1) for w in words), np.int32, count=len(words))
    oov = ids < 0
    if oov.any():
      if self.rare_id is None:
        raise UserError(f'{words[int(np.argmax(oov))]!r} is not in the vocabulary, and this model\'s corpus has '
                        f'no {data_lib.RARE} symbol to score it as; give text in its vocabulary')
      ids[oov] = self.rare_id
    return ids, oov

  # ------------------------------------------------------------------------------------ scoring

  def contexts(self, ids: np.ndarray) -> np.ndarray:
    """The context [N, n-1] of every token of a sequence that starts after n-1 boundary symbols
    (most recent word first, as data.TokenStream)."""
    padded = np.concatenate([np.full(self.context_size, self.boundary_id, np.int32), ids])
    return data_lib.context_windows(padded, np.arange(len(ids)) + self.context_size, self.context_size)

  def score(self, sequences: list[list[str]]) -> list[Scored]:
    """Each sequence scored on its own from boundary symbols, all in one batched pass (the contexts of
    every sequence built at once: many short sentences cost what one stream of their tokens costs)."""
    lengths = np.array([len(words) for words in sequences], np.int64)
    ids, oov = self.to_ids([w for words in sequences for w in words])
    c = self.context_size
    # each sequence after c boundary symbols, all in one array; a token's context is the c ids before it
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else np.zeros(0, np.int64)
    padded = np.full(len(ids) + c * len(lengths), self.boundary_id, np.int32)
    sequence_of = np.repeat(np.arange(len(lengths)), lengths)
    positions = np.arange(len(ids)) + c * (sequence_of + 1)
    padded[positions] = ids
    contexts = data_lib.context_windows(padded, positions, c) if len(ids) else np.zeros((0, c), np.int32)
    with jax.set_mesh(self.run.mesh):
      nll = evaluation.examples_nll(self.run.steps, self.params, contexts, ids, self.run.eval_batch_size,
                                    progress_lib.StderrProgress('tokens scored'))
    return [Scored(words, ids[a:a + n], oov[a:a + n], nll[a:a + n])
            for words, a, n in zip(sequences, starts, lengths)]

  # ------------------------------------------------------------------------ next-word distribution

  def _jit(self, fn):
    """fn(params, contexts) jitted with the parameters as trained and everything else replicated."""
    replicated = sharding.replicated(self.run.mesh)
    precision = self.config.model.matmul_precision
    precise = steps_lib.with_matmul_precision(fn, precision, self.run.platform)
    return jax.jit(precise, in_shardings=(self.run.steps.param_shardings, replicated), out_shardings=replicated)

  @property
  def _log_probs_fn(self):
    return _compiled(self.run, 'log_probs', lambda: self._jit(functools.partial(next_word_log_probs, self.run.model)))

  def next_word_log_probs(self, contexts: np.ndarray, dtype=np.float64) -> np.ndarray:
    """log P(w | context) for every word of the vocabulary: [N, |V|] as `dtype`, exactly normalised; computed in
    batches of the evaluation's size (the last one padded), so any N runs the one compiled shape."""
    contexts = np.asarray(contexts, np.int32)
    out = np.empty((len(contexts), len(self.vocab)), dtype)
    batch = self.run.eval_batch_size
    with jax.set_mesh(self.run.mesh):
      for positions, weights in data_lib.padded_positions(len(contexts), batch):
        kept = int(weights.sum())
        out[positions[:kept]] = np.asarray(self._log_probs_fn(self.params, contexts[positions]))[:kept]
    return out

  @property
  def num_parameters(self) -> int:
    """The model's parameters, the vocabulary's padding left out (results.json's num_parameters)."""
    return self.run.num_parameters

  @property
  def _expected_fns(self) -> dict:
    model = self.run.model

    def expected(params, contexts, with_columns):
      p = jnp.exp(next_word_log_probs(model, params, contexts))
      return p @ params['C'], (p @ params[output_layer.OUTPUT][:, :model.vocab_size].T if with_columns else None)
    return _compiled(self.run, 'expected', lambda: {flag: self._jit(functools.partial(expected, with_columns=flag))
                                                    for flag in (False, True)})

  def expected_rows(self, contexts: np.ndarray, with_columns: bool = True):
    """The paper's vector for an unknown word in each context: sum_i C(i) P(i | context) [N, m], and
    (with_columns) the same average of the output layer's columns [N, K + 1] (its U, W and b for
    word i), else None; in fixed-size batches."""
    batch, n = self.run.eval_batch_size, len(contexts)
    fn, features, columns = self._expected_fns[with_columns], [], []
    with jax.set_mesh(self.run.mesh):
      progress = progress_lib.StderrProgress('contexts averaged')
      for positions, weights in data_lib.padded_positions(n, batch):
        progress(int(min(positions[0] + batch, n)), n)
        f, c = fn(self.params, np.asarray(contexts[positions], np.int32))
        kept = int(weights.sum())
        features.append(np.asarray(f)[:kept])
        if with_columns:
          columns.append(np.asarray(c)[:kept])
    return np.concatenate(features), (np.concatenate(columns) if with_columns else None)

  # ------------------------------------------------------------------------------ word features

  @property
  def embeddings(self) -> np.ndarray:
    """C: the feature vector of every word, [|V|, m] float32."""
    return np.asarray(jax.device_get(self.params['C']), np.float32)


# The evaluation runs built in this process, with the functions jitted for them: a workdir loaded again
# (a notebook's cell run twice, a running training's newer best parameters) reuses what was compiled. The
# latest RUNS_KEPT are kept, so that loading many workdirs in one process holds a bounded memory;
# LanguageModel.close() releases its own at once.
RUNS_KEPT = 4
_RUNS: collections.OrderedDict[tuple, experiment_lib.Experiment] = collections.OrderedDict()
_COMPILED: 'weakref.WeakKeyDictionary[experiment_lib.Experiment, dict]' = weakref.WeakKeyDictionary()


def check_devices(devices) -> None:
  """One line for a `devices` that is neither None, a positive count nor a list of jax devices."""
  if devices is None:
    return
  if isinstance(devices, bool) or not isinstance(devices, (int, list, tuple)):
    raise UserError(f'--devices={devices!r} is not a device count or a list of devices; give e.g. devices=1, or '
                    'devices=jax.devices()[:2]')
  if isinstance(devices, int) and devices < 1:
    raise UserError(f'--devices={devices} must be at least 1')
  if isinstance(devices, (list, tuple)):
    if not devices or not all(isinstance(d, jax.Device) for d in devices):
      raise UserError(f'--devices={devices!r} is not a non-empty list of jax devices; give e.g. devices=jax.devices()[:2]')
    if len({d.platform for d in devices}) > 1:
      raise UserError(f'--devices= mixes platforms ({sorted({d.platform for d in devices})}); give devices of one')


def placement(config, vocab_size: int, devices) -> tuple[ml_collections.ConfigDict, list]:
  """The config to evaluate a trained model with on `devices`, and the devices themselves.

  devices=None keeps the mesh the config was trained with where it fits every device present (so the
  commands' figures stay those of the training's evaluation); otherwise, and for a count or a list, the
  mesh is sharding.evaluation_mesh_shape's over those devices, whatever their count (3 included: the padded
  vocabulary is in the checkpoint, so what does not split it goes on 'data'), with the evaluation batch
  rounded up to a multiple of the 'data' axis. Every mesh gives the same figures to the printed digit."""
  present = jax.devices()
  if devices is None:
    chosen = present
  elif isinstance(devices, int):
    if devices > len(present):
      platform = present[0].platform
      started = (' (JAX started in this process with that many, and a process cannot change it: restart the Python '
                 'process, or the kernel, to get more)' if platform == 'cpu' else '')
      raise UserError(f'--devices={devices} is more than the {len(present)} {platform.upper()} device(s) this process '
                      f'has{started}')
    chosen = present[:devices]
  else:
    chosen = list(devices)
  platform = chosen[0].platform
  padded = output_layer.padded_size(vocab_size, config.model.vocab_pad_multiple)
  eval_batch = experiment_lib.eval_batch_size(config.train, platform)
  if devices is None:
    try:
      data, model = sharding.mesh_shape(config.mesh.data, config.mesh.model, len(chosen), platform)
      if padded % model == 0 and eval_batch % data == 0 and config.train.batch_size % data == 0:
        return config, chosen
    except UserError:
      pass
  data, model = sharding.evaluation_mesh_shape(len(chosen), padded, platform)
  chunk = config.train.chunk_size
  multiple = math.lcm(data, chunk) if chunk and chunk < eval_batch else data
  placed = copy.deepcopy(config)
  placed.mesh.data, placed.mesh.model = data, model
  placed.train.eval_batch_size = -(-eval_batch // multiple) * multiple
  placed.train.batch_size = -(-config.train.batch_size // data) * data  # not used to evaluate; checked all the same
  return placed, chosen


def _evaluation_run(config, workdir: workdir_lib.Workdir, vocabulary, devices) -> experiment_lib.Experiment:
  where = str(workdir) if '://' in str(workdir) else os.path.abspath(str(workdir))
  key = (where, json.dumps(config_lib.to_saved(config), sort_keys=True), vocabulary.words,
         tuple((d.platform, d.id) for d in devices))
  if key not in _RUNS:
    _RUNS[key] = experiment_lib.Experiment(config, workdir, devices=devices, training=False,
                                           corpus=vocabulary.as_corpus())
    while len(_RUNS) > RUNS_KEPT:
      del _RUNS[next(iter(_RUNS))]  # its functions go with the last model that holds it
  _RUNS.move_to_end(key)
  return _RUNS[key]


# How many open models (LanguageModel) hold each run: the last one closed releases it.
_HOLDERS: 'weakref.WeakKeyDictionary[experiment_lib.Experiment, int]' = weakref.WeakKeyDictionary()


def hold(run: experiment_lib.Experiment) -> None:
  _HOLDERS[run] = _HOLDERS.get(run, 0) + 1


def let_go(run: experiment_lib.Experiment) -> None:
  """One holder of `run` is done with it; the last releases it."""
  left = _HOLDERS.get(run, 1) - 1
  if left > 0:
    _HOLDERS[run] = left
  else:
    _HOLDERS.pop(run, None)
    release(run)


def release(run: experiment_lib.Experiment) -> None:
  """Forgets a run and the functions compiled for it (a model still holding it keeps working, compiling again)."""
  for key in [k for k, r in _RUNS.items() if r is run]:
    del _RUNS[key]
  _COMPILED.pop(run, None)


def _compiled(run: experiment_lib.Experiment, name: str, build):
  functions = _COMPILED.setdefault(run, {})
  if name not in functions:
    functions[name] = build()
  return functions[name]


def next_word_log_probs(model, params, contexts):
  """[batch, |V|] exactly normalised log P(w | context) (the vocabulary's padding left out)."""
  logits = model.apply({'params': params}, contexts)  # dense, padding at -inf
  return jax.nn.log_softmax(logits, axis=-1)[:, :model.vocab_size]


def group_means(rows: np.ndarray, groups: np.ndarray, num_groups: int) -> tuple[np.ndarray, np.ndarray]:
  """(mean row of each group [num_groups, d] in float64 (0 for an empty group), rows per group)."""
  sums = np.zeros((num_groups, rows.shape[1]))
  np.add.at(sums, groups, rows)
  counts = np.bincount(groups, minlength=num_groups)
  return sums / np.maximum(counts, 1)[:, None], counts
