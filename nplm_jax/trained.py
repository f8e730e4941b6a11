"""A trained workdir's best parameters, ready to use: its text tokenised as its corpus was, scored,
continued, and its word feature vectors C.

Every command that reads a trained model (score, sample, embeddings) loads it here: the workdir's
config.json says which corpus, vocabulary and model it is; the best parameters are restored onto
the mesh the config asks for on this machine (any shape, as checkpoints move between meshes), and
all work is batched through jitted, sharded functions, never a Python loop over the vocabulary.
"""

import contextlib
import dataclasses
import functools
import io

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from nplm_jax import checkpoint as ckpt_lib
from nplm_jax import data as data_lib
from nplm_jax import model as model_lib
from nplm_jax import sharding
from nplm_jax import steps as steps_lib
from nplm_jax import train
from nplm_jax import workdir as workdir_lib
from nplm_jax.errors import UserError


@dataclasses.dataclass
class Scored:
  """Per-token results of scoring text: the tokens as the model saw them, and -log P of each."""
  words: list[str]
  ids: np.ndarray  # int32
  oov: np.ndarray  # bool: the word is not in the vocabulary (scored as the rare-word symbol)
  nll: np.ndarray  # float64, natural log


@dataclasses.dataclass
class TrainedModel:
  config: ml_collections.ConfigDict
  run: train.Run
  params: dict
  step: int  # the training step of the best parameters

  @classmethod
  def load(cls, workdir_path: str) -> 'TrainedModel':
    """The best parameters of a finished or running training (one line of error otherwise)."""
    if not workdir_path:
      raise UserError('--workdir is required; give the folder of a training (e.g. runs/brown_mlp1)')
    if not workdir_lib.as_path(workdir_path).exists():
      raise UserError(f'--workdir={workdir_path!r} does not exist; give the folder of a training (e.g. runs/brown_mlp1)')
    config = train.load_config(workdir_path)
    workdir = workdir_lib.Workdir(workdir_path)
    if not workdir.file('best').exists():
      raise UserError(f'--workdir={workdir_path!r} holds no best checkpoint yet; train it until its first evaluation')
    sharding.configure_host_devices(config.mesh)  # before anything starts JAX's backends
    with contextlib.redirect_stdout(io.StringIO()):  # the corpus and model lines of training: not this tool's output
      run = train.Run(config, workdir)
    checkpoints = ckpt_lib.Checkpoints(workdir, read_only=True)
    try:
      step = train.best_step(run, checkpoints)
      with jax.set_mesh(run.mesh):
        params = run.restore_best_params(checkpoints, step)
    finally:
      checkpoints.close()
    return cls(config, run, params, step)

  # ------------------------------------------------------------------------- vocabulary and text

  @property
  def vocab(self) -> tuple[str, ...]:
    return self.run.corpus.vocab

  @functools.cached_property
  def word_ids(self) -> dict[str, int]:
    return {w: i for i, w in enumerate(self.vocab)}

  @property
  def context_size(self) -> int:
    return self.config.model.n - 1

  @property
  def boundary_id(self) -> int:
    return self.run.corpus.boundary_id

  @property
  def rare_id(self) -> int | None:
    return self.word_ids.get(data_lib.RARE)

  def line_tokens(self, line: str) -> list[str]:
    """A line's tokens as the corpus reader made them: Brown is a plain word stream; text and PTB
    corpora end every line with <eos> and may be character-level (data.unit)."""
    unit = self.text_unit
    return line.split() if unit is None else data_lib.line_tokens(line, unit)

  @functools.cached_property
  def text_unit(self) -> str | None:
    return data_lib.text_unit(self.config.data)

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

  def check_words(self, words: list[str]) -> list[int]:
    """Ids of words a user named; one line naming the first unknown one."""
    for w in words:
      if w not in self.word_ids:
        raise UserError(f'{w!r} is not in the vocabulary ({len(self.vocab):,} words of the {self.config.data.corpus} '
                        'corpus, case-sensitive); choose another word')
    return [self.word_ids[w] for w in words]

  # ------------------------------------------------------------------------------------ scoring

  def contexts(self, ids: np.ndarray) -> np.ndarray:
    """The context [N, n-1] of every token of a sequence that starts after n-1 boundary symbols
    (most recent word first, as data.TokenStream)."""
    padded = np.concatenate([np.full(self.context_size, self.boundary_id, np.int32), ids])
    offsets = np.arange(1, self.context_size + 1)
    positions = np.arange(len(ids)) + self.context_size
    return padded[positions[:, None] - offsets[None, :]]

  def score(self, sequences: list[list[str]]) -> list[Scored]:
    """Each sequence scored on its own from boundary symbols, all in one batched pass."""
    converted = [self.to_ids(words) for words in sequences]
    contexts = [self.contexts(ids) for ids, _ in converted]
    targets = np.concatenate([ids for ids, _ in converted]) if converted else np.zeros(0, np.int32)
    contexts = np.concatenate(contexts) if contexts else np.zeros((0, self.context_size), np.int32)
    with jax.set_mesh(self.run.mesh):
      nll = train.examples_nll(self.run.steps, self.params, contexts, targets, self.config.train.eval_batch_size)
    out, start = [], 0
    for words, (ids, oov) in zip(sequences, converted):
      out.append(Scored(words, ids, oov, nll[start:start + len(ids)]))
      start += len(ids)
    return out

  # ------------------------------------------------------------------------ next-word distribution

  def _jit(self, fn):
    """fn(params, contexts) jitted with the parameters as trained and everything else replicated."""
    replicated = sharding.replicated(self.run.mesh)
    return jax.jit(fn, in_shardings=(self.run.steps.param_shardings, replicated), out_shardings=replicated)

  @functools.cached_property
  def _log_probs_fn(self):
    return self._jit(functools.partial(next_word_log_probs, self.run.model))

  def next_word_log_probs(self, contexts: np.ndarray) -> np.ndarray:
    """log P(w | context) for every word of the vocabulary: [batch, |V|], float64, exactly normalised."""
    with jax.set_mesh(self.run.mesh):
      return np.asarray(self._log_probs_fn(self.params, np.asarray(contexts, np.int32)), np.float64)

  @functools.cached_property
  def _expected_rows_fn(self):
    model = self.run.model

    def expected(params, contexts):
      p = jnp.exp(next_word_log_probs(model, params, contexts))
      return p @ params['C'], p @ params[model_lib.OUTPUT][:, :model.vocab_size].T
    return self._jit(expected)

  def expected_rows(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The paper's vector for an unknown word in each context: sum_i C(i) P(i | context) [N, m], and the
    same average of the output layer's columns [N, K + 1] (its U, W and b for word i), in fixed-size batches."""
    batch, n = self.config.train.eval_batch_size, len(contexts)
    features, columns = [], []
    with jax.set_mesh(self.run.mesh):
      for begin in range(0, n, batch):
        chunk = np.asarray(contexts[np.minimum(np.arange(begin, begin + batch), n - 1)], np.int32)
        f, c = self._expected_rows_fn(self.params, chunk)
        features.append(np.asarray(f)[:min(batch, n - begin)])
        columns.append(np.asarray(c)[:min(batch, n - begin)])
    return np.concatenate(features), np.concatenate(columns)

  # ------------------------------------------------------------------------------ word features

  @property
  def embeddings(self) -> np.ndarray:
    """C: the feature vector of every word, [|V|, m] float32."""
    return np.asarray(jax.device_get(self.params['C']), np.float32)


def next_word_log_probs(model: model_lib.NPLM, params, contexts):
  """[batch, |V|] exactly normalised log P(w | context) (the vocabulary's padding left out)."""
  logits = model_lib.dense_logits(steps_lib.features(model, params, contexts), params[model_lib.OUTPUT])
  logits = jnp.where(jnp.arange(logits.shape[-1]) < model.vocab_size, logits, -jnp.inf)
  return jax.nn.log_softmax(logits, axis=-1)[:, :model.vocab_size]
