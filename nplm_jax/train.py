"""train_and_evaluate: the training loop with evaluation, early stopping, checkpoints, results."""

import json
import math
import time

import jax
import ml_collections
import numpy as np

from nplm_jax import checkpoint as ckpt_lib
from nplm_jax import data as data_lib
from nplm_jax import distributed
from nplm_jax import metrics as metrics_lib
from nplm_jax import mix as mix_lib
from nplm_jax import model as model_lib
from nplm_jax import optim
from nplm_jax import sharding
from nplm_jax import steps as steps_lib
from nplm_jax import workdir as workdir_lib
from nplm_jax.errors import UserError

# Config sections that must match for a workdir's checkpoint to be resumed.
RESUME_KEYS = ('seed', 'data', 'model', 'optimizer', 'loss')  # mix, train.num_epochs etc. may change


def validate_config(config) -> None:
  """Rejects bad hyper-parameters in one line each, before any data loading or compiling."""
  checks = [
      ('model.n', config.model.n, 2, 'n counts the predicted word and at least one context word'),
      ('model.m', config.model.m, 1, 'each word needs at least one feature'),
      ('model.h', config.model.h, 0, 'use 0 for no hidden layer'),
      ('model.vocab_pad_multiple', config.model.vocab_pad_multiple, 1, 'use 1 for no padding'),
      ('train.batch_size', config.train.batch_size, 1, 'a step needs at least one example'),
      ('train.eval_batch_size', config.train.eval_batch_size, 1, 'evaluation needs at least one example a batch'),
      ('train.max_anneals', config.train.max_anneals, 0, 'use 0 for no learning-rate cuts'),
  ]
  for name, value, least, why in checks:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
      raise UserError(f'{name}={value!r} is invalid: it must be an integer >= {least} ({why}); '
                      f'set --config.{name}=<value>')
  chunk = config.train.chunk_size
  for name in ('batch_size', 'eval_batch_size'):
    size = config.train[name]
    if chunk < 0 or (chunk and chunk < size and size % chunk):
      raise UserError(f'train.chunk_size={chunk} must be 0 (off) or divide train.{name}={size}; '
                      'e.g. --config.train.chunk_size=128')
  if not config.model.h and not config.model.direct:
    raise UserError('model.h=0 with model.direct=False leaves no path from the context to the output; '
                    'set --config.model.h > 0 or --config.model.direct=True')
  if config.model.compute_dtype not in ('float32', 'bfloat16'):
    raise UserError(f"model.compute_dtype={config.model.compute_dtype!r} is unknown; use 'float32' or 'bfloat16'")
  if config.loss.name not in ('softmax', 'sampled_softmax', 'nce'):
    raise UserError(f"loss.name={config.loss.name!r} is unknown; use 'softmax', 'sampled_softmax' or 'nce'")
  if config.loss.name != 'softmax' and config.loss.num_samples < 1:
    raise UserError(f'loss.num_samples={config.loss.num_samples} is invalid; use at least 1 noise sample')
  factor, threshold = config.train.anneal_factor, config.train.anneal_threshold
  if not 0.0 <= factor < 1.0:
    raise UserError(f'train.anneal_factor={factor!r} must be in [0, 1) (0 = no annealing); '
                    'e.g. --config.train.anneal_factor=0.5')
  if not 0.0 <= threshold <= 1.0:
    raise UserError(f'train.anneal_threshold={threshold!r} must be in [0, 1] (a relative improvement); '
                    'e.g. --config.train.anneal_threshold=0.01')
  for name in ('feature_dropout', 'hidden_dropout'):
    rate = config.model[name]
    if not 0.0 <= rate < 1.0:
      raise UserError(f'model.{name}={rate!r} must be in [0, 1) (0 = none); e.g. --config.model.{name}=0.2')
  if config.optimizer.name not in ('paper_sgd', 'adamw'):
    raise UserError(f"optimizer.name={config.optimizer.name!r} is unknown; use 'paper_sgd' or 'adamw'")


def check_resumable(workdir: workdir_lib.Workdir, config) -> None:
  """A workdir may only be resumed by the run that made it; other runs get their own."""
  saved = workdir.read_json('config.json')
  if saved is None:
    return
  current = json.loads(config.to_json_best_effort())
  for key in RESUME_KEYS:
    changed = _changed_keys(saved.get(key), current.get(key), key)
    if changed:
      raise UserError(f'--workdir={str(workdir)!r} holds a run with a different config.{changed[0]}; '
                      'use a new --workdir (nothing in this one was changed)')


def _changed_keys(saved, current, prefix: str) -> list[str]:
  """Keys whose value differs, over the keys the saved config has: keys that newer code added
  (at defaults that keep the old behaviour) do not block resuming an older run."""
  if saved is None:
    return []
  if isinstance(saved, dict) and isinstance(current, dict):
    return [k for name in saved for k in _changed_keys(saved[name], current.get(name), f'{prefix}.{name}')]
  return [] if saved == current else [prefix]


def steps_plan(config, train_examples: int) -> dict:
  steps_per_epoch = train_examples // config.train.batch_size
  if steps_per_epoch < 1:
    raise UserError(f'train.batch_size={config.train.batch_size} exceeds the {train_examples} training '
                    'tokens; lower it')
  total = config.train.max_steps if config.train.max_steps > 0 else config.train.num_epochs * steps_per_epoch
  eval_every = config.train.eval_every if config.train.eval_every > 0 else steps_per_epoch
  checkpoint_every = config.train.checkpoint_every if config.train.checkpoint_every > 0 else eval_every
  return dict(steps_per_epoch=steps_per_epoch, total=total, eval_every=eval_every,
              checkpoint_every=checkpoint_every)


def split_nll(steps: steps_lib.CompiledSteps, params, stream: data_lib.TokenStream, split: str,
              batch_size: int) -> np.ndarray:
  """Exactly normalised -log P of every token of a split, in stream order (float64).

  Each process builds only the rows of each batch its devices hold; the per-token results come
  back replicated, so every process returns the whole split's. Results stay on the device until
  the end and dispatch runs ahead (boundedly), so the host prepares the next batch while the
  device computes; only a few [batch, |V| / model] logit blocks exist at a time per device.
  """
  rows = sharding.process_rows(steps.mesh, batch_size)
  pending, weights, in_flight = [], [], steps_lib.BoundedDispatch()
  for positions, w in stream.eval_positions(split, batch_size):
    contexts, targets = stream.examples(split, positions[rows])
    pending.append(in_flight.push(steps.eval(params, steps_lib.put_process_rows(steps.mesh, contexts, batch_size),
                                             steps_lib.put_process_rows(steps.mesh, targets, batch_size))))
    weights.append(w)
  nll = np.concatenate([np.asarray(x, np.float64) for x in jax.device_get(pending)])
  return nll[np.concatenate(weights) > 0]


def perplexity(nll: np.ndarray) -> float:
  return float(math.exp(float(np.mean(nll))))


class Run:
  """One training run's pieces, built from a config; `train_and_evaluate` drives it."""

  def __init__(self, config, workdir: workdir_lib.Workdir, devices=None):
    validate_config(config)
    workdir.prepare()
    check_resumable(workdir, config)
    self.config, self.workdir = config, workdir
    self.mesh = sharding.make_mesh(config.mesh, devices)
    self.corpus = data_lib.load_corpus(config.data)
    metrics_lib.log(f'corpus {config.data.corpus}: {self.corpus.summary()}')
    self.model = model_lib.from_config(config.model, self.corpus.vocab_size)
    sharding.check_divisibility(self.mesh, config.train.batch_size, config.train.eval_batch_size,
                                self.model.padded_vocab_size)
    self.stream = data_lib.TokenStream(self.corpus, config.model.n - 1)
    self.plan = steps_plan(config, self.stream.num_examples('train'))
    self.rows = sharding.process_rows(self.mesh, config.train.batch_size)  # of each batch, this process's
    self._order, self._order_epoch = None, None  # the current epoch's permutation, made once
    counts = self.corpus.unigram_counts('train') if config.model.unigram_bias_init else None
    self.optimizer = optim.make_optimizer(config.optimizer, config.train.batch_size)
    sampled = steps_lib.make_sampled_loss(config.loss, self.corpus.unigram_counts('train'), config.seed)
    self.steps = steps_lib.compile_steps(self.model, self.optimizer, self.mesh, counts, sampled,
                                         config.train.chunk_size, seed=config.seed)
    self.num_parameters = model_lib.num_parameters(self.corpus.vocab_size, config.model.n, config.model.m,
                                                   config.model.h, config.model.direct)
    metrics_lib.log(f'model: {self.num_parameters:,} parameters (|V| padded to '
                    f'{self.model.padded_vocab_size}), mesh {dict(self.mesh.shape)} on '
                    f'{jax.device_count()} {jax.devices()[0].platform} device(s)')

  def restore_best_params(self, checkpoints: ckpt_lib.Checkpoints):
    """The best parameters saved in the workdir, laid out for this run's mesh (None if none)."""
    return checkpoints.restore_best(ckpt_lib.abstract_with_shardings(
        self.steps.abstract_params, self.steps.param_shardings))

  def evaluate(self, params, split: str) -> np.ndarray:
    return split_nll(self.steps, params, self.stream, split, self.config.train.eval_batch_size)

  def train_batch(self, step: int):
    """The batch of a global step: epoch-wise permutations that depend only on (seed, epoch)."""
    epoch, index = divmod(step, self.plan['steps_per_epoch'])
    if self._order_epoch != epoch:
      self._order, self._order_epoch = self.stream.train_order(self.config.seed, epoch), epoch
    b = self.config.train.batch_size
    contexts, targets = self.stream.examples('train', self._order[index * b:(index + 1) * b][self.rows])
    return steps_lib.put_process_rows(self.mesh, contexts, b), steps_lib.put_process_rows(self.mesh, targets, b)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir_path: str) -> dict:
  """Trains, early-stops on validation, evaluates the best parameters; returns results.json.

  In a multi-process job every process runs this; start-up errors on any process stop all of
  them together, and only the leader writes the workdir's files.
  """
  started = time.time()
  workdir = workdir_lib.Workdir(workdir_path)
  run = distributed.agree_on_errors(lambda: Run(config, workdir))
  # Only now, every process having read the old one and found nothing wrong.
  workdir.write_json('config.json', json.loads(config.to_json_best_effort()))
  checkpoints = ckpt_lib.Checkpoints(workdir)
  with jax.set_mesh(run.mesh):
    state, meta = _initial_state(run, checkpoints)
    earlier_seconds = meta['wall_seconds']  # spent by the processes before this one
    writer = metrics_lib.MetricWriter(workdir, resumed_step=int(state.step))
    state, meta = _train_loop(run, state, meta, checkpoints, writer)
    best = run.restore_best_params(checkpoints)
    params = best if best is not None else state.params
    valid_nll, test_nll = run.evaluate(params, 'valid'), run.evaluate(params, 'test')
  checkpoints.wait()
  checkpoints.close()
  writer.close()
  results = {
      'corpus': config.data.corpus,
      'vocab_size': run.corpus.vocab_size,
      'train_tokens': run.corpus.num_tokens('train'),
      'valid_tokens': run.corpus.num_tokens('valid'),
      'test_tokens': run.corpus.num_tokens('test'),
      'num_parameters': run.num_parameters,
      'valid_ppl': perplexity(valid_nll),
      'test_ppl': perplexity(test_nll),
      'step': meta['best_step'] if best is not None else int(state.step),
      'steps_trained': int(state.step),
      'epochs': int(state.step) / run.plan['steps_per_epoch'],
      'stopped_early': meta['stopped_early'],
      'wall_seconds': earlier_seconds + (time.time() - started),
      'mesh': dict(run.mesh.shape),
      'platform': jax.devices()[0].platform,
      'history': meta['history'],
      'config': json.loads(config.to_json_best_effort()),
  }
  if config.mix.enabled and distributed.is_leader():  # the n-gram is host work, for the writer alone
    results.update(mix_lib.mixture_results(run.corpus, {'valid': valid_nll, 'test': test_nll}, config.mix))
    metrics_lib.log(f'mixture with {results["mix_ngram"]}: valid ppl {results["mix_valid_ppl"]:.2f}, test ppl '
                    f'{results["mix_test_ppl"]:.2f} (weight {config.mix.weight}); fitted weight '
                    f'{results["mix_fitted_weight"]:.3f}: test ppl {results["mix_fitted_test_ppl"]:.2f}')
  workdir.write_json('results.json', results)
  metrics_lib.log(f'done: valid ppl {results["valid_ppl"]:.2f}, test ppl {results["test_ppl"]:.2f} '
                  f'(best step {results["step"]}, {results["wall_seconds"]:.0f} s)')
  return results


def load_config(workdir_path: str) -> ml_collections.ConfigDict:
  saved = workdir_lib.Workdir(workdir_path).read_json('config.json')
  if saved is None:
    raise UserError(f'{workdir_path!r} holds no config.json; give the --workdir of a finished or running training')
  return ml_collections.ConfigDict(saved)


def evaluate_workdir(workdir_path: str, splits=('valid', 'test'), mesh=None, devices=None) -> dict:
  """Per-token NLLs of a workdir's best parameters, restored onto `mesh` (any shape) over `devices`."""
  config = load_config(workdir_path)
  if mesh is not None:
    config.mesh.data, config.mesh.model = mesh
  workdir = workdir_lib.Workdir(workdir_path)
  run = Run(config, workdir, devices)
  checkpoints = ckpt_lib.Checkpoints(workdir)
  with jax.set_mesh(run.mesh):
    params = run.restore_best_params(checkpoints)
    if params is None:
      raise UserError(f'{workdir_path!r} holds no best checkpoint yet; train it first')
    nll = {split: run.evaluate(params, split) for split in splits}
  checkpoints.close()
  return nll


def _initial_state(run: Run, checkpoints: ckpt_lib.Checkpoints):
  abstract = ckpt_lib.abstract_with_shardings(run.steps.abstract_state, run.steps.state_shardings)
  restored = checkpoints.restore_latest(abstract)
  if restored is not None:
    state, meta = restored
    meta.setdefault('lr_scale', 1.0)  # checkpoints from before annealing existed
    meta.setdefault('anneals', 0)
    metrics_lib.log(f'resumed from step {int(state.step)} in {run.workdir}')
    return _anneal_a_stopped_run(run, state, meta, checkpoints), meta
  meta = {'best_valid_ppl': None, 'best_step': None, 'evals_since_best': 0, 'stopped_early': False,
          'history': [], 'wall_seconds': 0.0, 'lr_scale': 1.0, 'anneals': 0}
  return run.steps.init(), meta


def _anneal_a_stopped_run(run: Run, state, meta, checkpoints):
  """A run that stopped early, resumed with annealing allowed (again), anneals at once.

  Its last evaluation stalled, which is what triggers an anneal: training goes on from the best
  parameters at the lowered rate. This is how the paper's setting is annealed at the end.
  """
  train_config = run.config.train
  if not (meta['stopped_early'] and train_config.anneal_factor > 0 and meta['anneals'] < train_config.max_anneals):
    return state
  meta.update(stopped_early=False, evals_since_best=0, anneals=meta['anneals'] + 1,
              lr_scale=meta['lr_scale'] * train_config.anneal_factor)
  metrics_lib.log(f'the run had stopped early; anneal {meta["anneals"]}/{train_config.max_anneals}: learning rate '
                  f'x{meta["lr_scale"]:.4g}, from the parameters of step {meta["best_step"]}')
  return state.replace(params=run.restore_best_params(checkpoints))


def _train_loop(run: Run, state, meta, checkpoints, writer):
  config, plan = run.config, run.plan
  step = int(state.step)
  segment_start = time.time()
  wall_before = meta['wall_seconds']
  progress = metrics_lib.Progress(step, plan['total'], config.train.batch_size)
  in_flight = steps_lib.BoundedDispatch()
  while step < plan['total'] and not meta['stopped_early']:
    state, metrics = run.steps.train(state, *run.train_batch(step), meta['lr_scale'])
    in_flight.push(metrics)  # not the state: it is donated to the next step
    step += 1
    if step % config.train.log_every == 0 or step == plan['total']:
      loss = float(metrics['loss'])
      if not math.isfinite(loss):
        raise FloatingPointError(f'training loss is {loss} at step {step}; lower '
                                 '--config.optimizer.learning_rate (checkpoints before it are kept)')
      rate = progress.report(step)
      lr = optim.learning_rate_at(config.optimizer, config.train.batch_size, step) * meta['lr_scale']
      writer.write(step, {'train_loss': loss, 'learning_rate': lr, 'tokens_per_sec': rate['tokens_per_sec']})
      metrics_lib.log(f'step {step}/{plan["total"]} epoch {step / plan["steps_per_epoch"]:.2f} '
                      f'loss {loss:.4f} lr {lr:.4g} {rate["tokens_per_sec"]:.0f} tok/s ETA {rate["eta"]}')
    if step % plan['eval_every'] == 0 or step == plan['total']:
      state = _evaluate_and_track(run, state, meta, step, checkpoints, writer)
      progress.skip_time()
    if step % plan['checkpoint_every'] == 0 or step == plan['total'] or meta['stopped_early']:
      meta['wall_seconds'] = wall_before + (time.time() - segment_start)
      checkpoints.save_latest(step, state, meta)
      progress.skip_time()
  meta['wall_seconds'] = wall_before + (time.time() - segment_start)
  return state, meta


def _evaluate_and_track(run: Run, state, meta, step, checkpoints, writer):
  """Validation perplexity, the best parameters so far, annealing, and early stopping with patience.

  Returns the state to go on from: the best parameters when the learning rate was just annealed
  after an evaluation that did not improve. With annealing on, a stalled evaluation after the last
  anneal ends training.
  """
  train_config = run.config.train
  valid_ppl = perplexity(run.evaluate(state.params, 'valid'))
  previous_best = meta['best_valid_ppl']
  improved = previous_best is None or valid_ppl < previous_best
  if improved:
    meta.update(best_valid_ppl=valid_ppl, best_step=step, evals_since_best=0)
    checkpoints.save_best(step, state.params)
  else:
    meta['evals_since_best'] += 1
  epoch = step / run.plan['steps_per_epoch']
  meta['history'].append({'step': step, 'epoch': epoch, 'valid_ppl': valid_ppl,
                          'lr_scale': meta['lr_scale']})
  writer.write(step, {'valid_ppl': valid_ppl})
  metrics_lib.log(f'eval step {step} epoch {epoch:.2f}: valid ppl {valid_ppl:.2f} '
                  f'(best {meta["best_valid_ppl"]:.2f} at step {meta["best_step"]})')
  stalled = previous_best is not None and valid_ppl > previous_best * (1.0 - train_config.anneal_threshold)
  # Only at scheduled evaluations: the extra one at the end of a shortened run must not anneal,
  # or resuming it would not follow the uninterrupted run.
  scheduled = step % run.plan['eval_every'] == 0
  if train_config.anneal_factor > 0 and stalled and scheduled:
    if meta['anneals'] < train_config.max_anneals:
      meta['lr_scale'] *= train_config.anneal_factor
      meta['anneals'] += 1
      meta['evals_since_best'] = 0
      if not improved:
        checkpoints.wait()
        state = state.replace(params=run.restore_best_params(checkpoints))
      metrics_lib.log(f'anneal {meta["anneals"]}/{train_config.max_anneals}: learning rate '
                      f'x{meta["lr_scale"]:.4g}, from the parameters of step {meta["best_step"]}')
    else:
      meta['stopped_early'] = True  # every rate cut spent and still stalled: converged
      metrics_lib.log(f'early stop: improvement below {train_config.anneal_threshold:.2%} after '
                      f'{train_config.max_anneals} anneals')
  patience = train_config.patience
  if patience > 0 and meta['evals_since_best'] >= patience and not meta['stopped_early']:
    meta['stopped_early'] = True
    metrics_lib.log(f'early stop: no improvement in {patience} evaluations')
  return state
