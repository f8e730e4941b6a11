"""train_and_evaluate: the training loop with evaluation, early stopping, checkpoints, results.

What a run survives (README, "Reliability"): a kill at any moment (re-running the command resumes
and ends bit-equal to an uninterrupted run), SIGTERM / SIGINT (the step in progress is saved
first), unreadable checkpoint steps (set aside; the newest readable one is resumed), a second
training on the same workdir (refused by a lock), a resume with settings or a corpus that would
change the trajectory (refused), and divergence (stopped at the first non-finite loss, nothing
non-finite is saved or reported).
"""

import dataclasses
import json
import math
import os
import signal
import time
from typing import Callable

import jax
import ml_collections
import numpy as np

from nplm_jax import checkpoint as ckpt_lib
from nplm_jax import config as config_lib
from nplm_jax import data as data_lib
from nplm_jax import distributed
from nplm_jax import metrics as metrics_lib
from nplm_jax import model as model_lib
from nplm_jax import ngram
from nplm_jax import optim
from nplm_jax import run_state as run_state_lib
from nplm_jax import sharding
from nplm_jax import steps as steps_lib
from nplm_jax import workdir as workdir_lib
from nplm_jax.errors import UserError

# Config keys that must match for a workdir to be resumed (besides its corpus, corpus.json): they
# change the steps already taken. Others may change (README, "Reliability").
RESUME_KEYS = ('seed', 'data', 'model', 'optimizer', 'loss', 'train.batch_size')
# mean NLL above which exp() overflows a float64: the run has diverged
MAX_MEAN_NLL = 700.0


class TrainingDiverged(UserError):
  """The loss or the validation perplexity stopped being finite."""


class Preempted(Exception):
  """SIGTERM or SIGINT arrived; the step in progress was saved."""

  def __init__(self, signum: int, step: int, workdir: workdir_lib.Workdir):
    self.signum = signum
    super().__init__(f'stopped by {signal.Signals(signum).name} at step {step}; its checkpoint is saved in '
                     f'{workdir}: run the same command to resume')


def check_resumable(workdir: workdir_lib.Workdir, config) -> None:
  """A workdir may only be resumed by the run that made it; other runs get their own.

  Its vocabulary padding is kept whatever the config says now: the checkpoints' shapes depend on
  it and no result does (older workdirs were padded to a multiple of 8).
  """
  saved = workdir.read_json('config.json')
  if saved is None:
    return
  saved_padding = _at(saved, 'model.vocab_pad_multiple')
  if saved_padding is not None and saved_padding != config.model.vocab_pad_multiple:
    metrics_lib.log(f'keeping the vocabulary padding of {workdir} (a multiple of {saved_padding}, '
                    'the shape of its checkpoints)')
    config.model.vocab_pad_multiple = saved_padding
  current = json.loads(config.to_json_best_effort())
  for key in RESUME_KEYS:
    changed = _changed_keys(_at(saved, key), _at(current, key), key)
    if changed:
      raise UserError(f'--workdir={str(workdir)!r} holds a run with a different config.{changed[0]}; '
                      'use a new --workdir (nothing in this one was changed)')


def check_corpus(workdir: workdir_lib.Workdir, corpus: data_lib.Corpus) -> None:
  """Refuses to resume on a corpus other than the run's (its vocabulary or token ids changed)."""
  saved = workdir.read_json('corpus.json')
  if saved is None:
    return
  current = corpus.description()
  if saved.get('fingerprint') != current['fingerprint']:
    differences = [f'{k} {saved.get(k)} -> {v}' for k, v in current.items() if k != 'fingerprint' and saved.get(k) != v]
    detail = ', '.join(differences) or 'same sizes, other token ids or words'
    raise UserError(f'--workdir={str(workdir)!r} was trained on another corpus than the one the config reads now '
                    f'({detail}); restore that corpus or use a new --workdir')


def _at(tree: dict, dotted: str):
  for part in dotted.split('.'):
    tree = tree.get(part) if isinstance(tree, dict) else None
  return tree


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
  batches = ((*stream.examples(split, positions[rows]), w) for positions, w in stream.eval_positions(split, batch_size))
  return batched_nll(steps, params, batches, batch_size)


def examples_nll(steps: steps_lib.CompiledSteps, params, contexts: np.ndarray, targets: np.ndarray,
                 batch_size: int) -> np.ndarray:
  """-log P(target | context) of any examples (contexts [N, n-1], targets [N]), batched like a split."""
  if not len(targets):
    return np.zeros(0)
  rows = sharding.process_rows(steps.mesh, batch_size)
  batches = ((contexts[p[rows]], targets[p[rows]], w) for p, w in data_lib.padded_positions(len(targets), batch_size))
  return batched_nll(steps, params, batches, batch_size)


def batched_nll(steps: steps_lib.CompiledSteps, params, batches, batch_size: int) -> np.ndarray:
  """Runs the eval step over (this process's contexts, targets, weights of the global batch) and
  keeps the per-token NLLs of weight 1, in order."""
  pending, weights, in_flight = [], [], steps_lib.BoundedDispatch()
  for contexts, targets, w in batches:
    pending.append(in_flight.push(steps.eval(params, steps_lib.put_process_rows(steps.mesh, contexts, batch_size),
                                             steps_lib.put_process_rows(steps.mesh, targets, batch_size))))
    weights.append(w)
  nll = np.concatenate([np.asarray(x, np.float64) for x in jax.device_get(pending)])
  return nll[np.concatenate(weights) > 0]


def perplexity(nll: np.ndarray) -> float:
  """exp(mean NLL); inf when that overflows (a diverged model)."""
  mean = float(np.mean(nll))
  return math.exp(mean) if mean <= MAX_MEAN_NLL else math.inf


# Written by nplm_jax.extend: {'words': [...]} appended to the corpus's vocabulary, in id order.
ADDED_WORDS_FILE = 'added_words.json'


class Run:
  """One training run's pieces, built from a config: mesh, corpus, model, compiled steps."""

  def __init__(self, config, workdir: workdir_lib.Workdir, devices=None):
    config_lib.validate(config)
    self.config, self.workdir = config, workdir
    self.mesh = sharding.make_mesh(config.mesh, devices)
    self.corpus = data_lib.load_corpus(config.data)
    added = workdir.read_json(ADDED_WORDS_FILE)  # a workdir made by nplm_jax.extend: words appended to V
    if added:
      self.corpus = dataclasses.replace(self.corpus, vocab=self.corpus.vocab + tuple(added['words']))
    metrics_lib.log(f'corpus {config.data.corpus}: {self.corpus.summary()}')
    self.model = model_lib.from_config(config.model, self.corpus.vocab_size)
    sharding.check_divisibility(self.mesh, config.train.batch_size, config.train.eval_batch_size,
                                self.model.padded_vocab_size)
    self.stream = data_lib.TokenStream(self.corpus, config.model.n - 1)
    self.plan = steps_plan(config, self.stream.num_examples('train'))
    self.rows = sharding.process_rows(self.mesh, config.train.batch_size)  # of each batch, this process's
    self.step_batches = data_lib.StepBatches(self.stream, config.seed, config.train.batch_size,
                                             self.plan['steps_per_epoch'], self.plan['total'], self.rows)
    train_counts = self.corpus.unigram_counts('train')  # a pass over train unless stored (prepared corpora)
    self.optimizer = optim.make_optimizer(config.optimizer, config.train.batch_size)
    sampled = steps_lib.make_sampled_loss(config.loss, train_counts, config.seed)
    bias_counts = train_counts if config.model.unigram_bias_init else None
    self.steps = steps_lib.compile_steps(self.model, self.optimizer, self.mesh, bias_counts, sampled,
                                         config.train.chunk_size, seed=config.seed,
                                         vocab_block=config.train.get('vocab_block', -1))
    self.num_parameters = model_lib.num_parameters(self.corpus.vocab_size, config.model.n, config.model.m,
                                                   config.model.h, config.model.direct)
    metrics_lib.log(f'model: {self.num_parameters:,} parameters (|V| padded to '
                    f'{self.model.padded_vocab_size}), mesh {dict(self.mesh.shape)} on '
                    f'{jax.device_count()} {jax.devices()[0].platform} device(s)')

  def restore_best_params(self, checkpoints: ckpt_lib.Checkpoints, step: int):
    """The best parameters (saved at `step`), laid out for this run's mesh."""
    return checkpoints.restore_best(ckpt_lib.abstract_with_shardings(
        self.steps.abstract_params, self.steps.param_shardings), step, self.model)

  def evaluate(self, params, split: str) -> np.ndarray:
    return split_nll(self.steps, params, self.stream, split, self.config.train.eval_batch_size)

  def batch_reader(self, start_step: int):
    """step -> the step's batch on the mesh, for steps start_step, start_step + 1, ... in order: gathered
    when asked (train.input_threads = 0), or read ahead by grain threads; the same batches either way."""
    threads = self.config.train.get('input_threads', 0)
    if not threads:
      return self.train_batch
    from nplm_jax import input_pipeline  # pylint: disable=g-import-not-at-top  # grain only when asked for
    batches = input_pipeline.train_batches(self.step_batches, start_step, num_threads=threads)
    return lambda step: self.on_mesh(*next(batches))  # the iterator is at `step`

  def train_batch(self, step: int):
    """The batch of a global step (data.StepBatches: a function of (seed, step) only), on the mesh."""
    return self.on_mesh(*self.step_batches[step])

  def on_mesh(self, contexts, targets):
    """This process's rows of a training batch, as the global batch on the mesh."""
    b = self.config.train.batch_size
    return steps_lib.put_process_rows(self.mesh, contexts, b), steps_lib.put_process_rows(self.mesh, targets, b)


def _start(config, workdir: workdir_lib.Workdir, lock: workdir_lib.Lock) -> Run:
  """Checks everything a run needs before any work, leaving the workdir as it was if one fails."""
  config_lib.validate(config)
  existed = workdir.path.exists()
  try:
    workdir.prepare()
    if distributed.is_leader():
      stale = lock.acquire()
      if stale is not None:
        metrics_lib.warn(f'took over the lock of process {stale.get("pid")} on {stale.get("host")}, which no '
                         'longer runs')
    check_resumable(workdir, config)
    if workdir.file(ADDED_WORDS_FILE).exists():
      raise UserError(f'{str(workdir)!r} was made by nplm_jax.extend (its vocabulary outgrew its corpus): score, '
                      'sample and embeddings read it; train in another --workdir')
    run = Run(config, workdir)
    check_corpus(workdir, run.corpus)
    if config.mix.enabled:  # the mixture's n-gram is estimated after training: refuse now if it cannot be
      ngram.check_memory(run.corpus, config.mix.ngram_order, config.mix.get('max_memory_gb', ngram.DEFAULT_MAX_MEMORY_GB),
                         flag='config.mix.max_memory_gb')
    return run
  except BaseException:
    lock.release()
    if not existed and distributed.is_leader():
      workdir.remove_if_unused()
    raise


ExtraResults = Callable[[data_lib.Corpus, dict], dict]


def train_and_evaluate(config: ml_collections.ConfigDict, workdir_path: str,
                       extra_results: ExtraResults | None = None) -> dict:
  """Trains, early-stops on validation, evaluates the best parameters; writes and returns results.json.

  `extra_results(corpus, {'valid': nll, 'test': nll})` adds results computed from the best
  parameters' per-token NLLs (main passes the n-gram mixture). In a multi-process job every
  process runs this; start-up errors on any process stop all of them together, and only the
  leader writes the workdir's files.
  """
  started = time.time()
  workdir = workdir_lib.Workdir(workdir_path)
  lock = workdir_lib.Lock(workdir)
  run = distributed.agree_on_errors(lambda: _start(config, workdir, lock))
  try:
    return _train_and_report(run, config, workdir, extra_results, started)
  finally:
    lock.release()


def _train_and_report(run: Run, config, workdir: workdir_lib.Workdir, extra_results, started: float) -> dict:
  checkpoints, writer = ckpt_lib.Checkpoints(workdir), None
  try:
    with jax.set_mesh(run.mesh):
      state, run_state = distributed.agree_on_errors(lambda: _initial_state(run, checkpoints))
      checkpoints.reconcile(int(state.step))
      finished = workdir.read_json('results.json')
      if _nothing_to_train(run, state, run_state) and finished is not None:
        metrics_lib.log(f'{workdir} finished at step {int(state.step)}'
                        f'{f" ({run_state.stop_reason})" if run_state.stopped_early else ""}; nothing to train '
                        f'(results: {workdir.file("results.json")})')
        return finished
      # Only now, every process having read the old ones and found nothing wrong.
      workdir.write_json('config.json', json.loads(config.to_json_best_effort()))
      if workdir.read_json('corpus.json') is None:
        workdir.write_json('corpus.json', run.corpus.description())
      earlier_seconds = run_state.wall_seconds  # spent by the processes before this one
      writer = metrics_lib.MetricWriter(workdir, resumed_step=int(state.step))
      with Preemption() as preemption:
        state = _train_loop(run, state, run_state, checkpoints, writer, preemption)
      has_best = run_state.best_step is not None
      params = run.restore_best_params(checkpoints, run_state.best_step) if has_best else state.params
      nll = {split: run.evaluate(params, split) for split in ('valid', 'test')}
  finally:  # a preempted or failed run's saves complete before it exits
    checkpoints.wait()
    checkpoints.close()
    if writer is not None:
      writer.close()
  results = {
      'corpus': config.data.corpus,
      'vocab_size': run.corpus.vocab_size,
      'train_tokens': run.corpus.num_tokens('train'),
      'valid_tokens': run.corpus.num_tokens('valid'),
      'test_tokens': run.corpus.num_tokens('test'),
      'num_parameters': run.num_parameters,
      'valid_ppl': perplexity(nll['valid']),
      'test_ppl': perplexity(nll['test']),
      'step': run_state.best_step if has_best else int(state.step),
      'steps_trained': int(state.step),
      'epochs': int(state.step) / run.plan['steps_per_epoch'],
      'stopped_early': run_state.stopped_early,
      'wall_seconds': earlier_seconds + (time.time() - started),
      'mesh': dict(run.mesh.shape),
      'platform': jax.devices()[0].platform,
      'history': run_state.history,
      'config': json.loads(config.to_json_best_effort()),
  }
  if data_lib.text_unit(config.data) == 'char':  # character-level results are read in bits per character
    results.update(valid_bpc=math.log2(results['valid_ppl']), test_bpc=math.log2(results['test_ppl']))
  if extra_results is not None and distributed.is_leader():  # host work, for the writer alone
    results.update(extra_results(run.corpus, nll))
  workdir.write_json('results.json', results)
  bpc = f' ({results["valid_bpc"]:.3f} / {results["test_bpc"]:.3f} bits per character)' if 'test_bpc' in results else ''
  metrics_lib.log(f'done: valid ppl {results["valid_ppl"]:.2f}, test ppl {results["test_ppl"]:.2f}{bpc} '
                  f'(best step {results["step"]}, {results["wall_seconds"]:.0f} s)')
  return results


def load_config(workdir_path: str) -> ml_collections.ConfigDict:
  saved = workdir_lib.Workdir(workdir_path).read_json('config.json')
  if saved is None:
    raise UserError(f'{workdir_path!r} holds no config.json; give the --workdir of a finished or running training')
  return ml_collections.ConfigDict(saved)


def best_step(run: Run, checkpoints: ckpt_lib.Checkpoints) -> int:
  """The step of a workdir's best parameters, as its newest readable checkpoint names it."""
  run_state = checkpoints.latest_run_state()
  step = run_state.best_step if run_state is not None else None
  if step is None:  # a finished workdir kept without its checkpoints/: results.json names the best step
    step = (run.workdir.read_json('results.json') or {}).get('step')
  if step is None:
    raise UserError(f'{str(run.workdir)!r} holds no best checkpoint yet; train it until its first evaluation')
  return step


def best_params(run: Run, checkpoints: ckpt_lib.Checkpoints):
  """The best parameters of a workdir's run, laid out for the run's mesh."""
  return run.restore_best_params(checkpoints, best_step(run, checkpoints))


def evaluate_workdir(workdir_path: str, splits=('valid', 'test'), mesh=None, devices=None) -> dict:
  """Per-token NLLs of a workdir's best parameters, restored onto `mesh` (any shape) over `devices`."""
  config = load_config(workdir_path)
  if mesh is not None:
    config.mesh.data, config.mesh.model = mesh
  workdir = workdir_lib.Workdir(workdir_path)
  run = Run(config, workdir, devices)
  checkpoints = ckpt_lib.Checkpoints(workdir)
  try:
    with jax.set_mesh(run.mesh):
      params = best_params(run, checkpoints)
      return {split: run.evaluate(params, split) for split in splits}
  finally:
    checkpoints.close()


def _initial_state(run: Run, checkpoints: ckpt_lib.Checkpoints):
  abstract = ckpt_lib.abstract_with_shardings(run.steps.abstract_state, run.steps.state_shardings)
  restored = checkpoints.restore_latest(abstract)
  if restored is None:
    return run.steps.init(), run_state_lib.RunState()
  state, run_state = restored
  metrics_lib.log(f'resumed from step {int(state.step)} in {run.workdir}')
  return _reopen_if_asked(run, state, run_state, checkpoints), run_state


def _nothing_to_train(run: Run, state, run_state: run_state_lib.RunState) -> bool:
  return run_state.stopped_early or int(state.step) >= run.plan['total']


# Why a run stopped early; a resumed run may go on when its new settings allow more.
PATIENCE_STOP = 'no improvement in {} evaluations'
ANNEALS_STOP = 'improvement below {:.2%} after {} anneals'


def _reopen_if_asked(run: Run, state, run_state: run_state_lib.RunState, checkpoints):
  """Goes on with a run that stopped early when the resumed config asks for more training.

  More patience (or none) reopens a run that ran out of it; annealing allowed (again) anneals at
  once from the best parameters, since the last evaluation stalled: this is how the paper's
  setting is annealed at the end.
  """
  train_config = run.config.train
  if not run_state.stopped_early:
    return state
  if train_config.anneal_factor > 0 and run_state.anneals < train_config.max_anneals:
    run_state.stopped_early, run_state.stop_reason = False, ''
    run_state.anneal(train_config.anneal_factor)
    metrics_lib.log(f'the run had stopped early; anneal {run_state.anneals}/{train_config.max_anneals}: learning '
                    f'rate x{run_state.lr_scale:.4g}, from the parameters of step {run_state.best_step}')
    return state.replace(params=run.restore_best_params(checkpoints, run_state.best_step))
  patience_left = train_config.patience == 0 or run_state.evals_since_best < train_config.patience
  if run_state.stop_reason.startswith('no improvement') and patience_left:
    run_state.stopped_early, run_state.stop_reason = False, ''
    metrics_lib.log(f'the run had stopped early; patience {train_config.patience} lets it go on')
  return state


class Preemption:
  """SIGTERM and SIGINT end training with a checkpoint of the step in progress.

  Alone, a signal sets a flag the loop reads between steps. In a multi-process job JAX's
  preemption service catches SIGTERM and has every process stop at the same step
  (multihost_utils.reached_preemption_sync_point); SIGINT is passed on to it as SIGTERM.
  """

  def __init__(self):
    self.signum = None
    self._previous = {}

  def __enter__(self) -> 'Preemption':
    many = jax.process_count() > 1
    handlers = {signal.SIGINT: self._forward if many else self._note}
    if not many:
      handlers[signal.SIGTERM] = self._note
    try:
      for signum, handler in handlers.items():
        self._previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread: signals keep their default handling
      pass
    return self

  def __exit__(self, *exc) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)

  def _note(self, signum, frame) -> None:
    del frame
    self.signum = signum

  def _forward(self, signum, frame) -> None:
    del frame
    self.signum = signum
    os.kill(os.getpid(), signal.SIGTERM)

  def reached(self, step: int) -> bool:
    """Whether to save and stop after `step` (the same answer on every process)."""
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
      if multihost_utils.reached_preemption_sync_point(step):
        self.signum = self.signum or signal.SIGTERM
        return True
      return False
    return self.signum is not None


def _agreed(flag: bool) -> bool:
  """The leader's value of a host-side decision, on every process."""
  if jax.process_count() == 1:
    return flag
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return bool(multihost_utils.broadcast_one_to_all(np.int32(flag)))


def _diverged(run: Run, checkpoints, run_state: run_state_lib.RunState, message: str) -> TrainingDiverged:
  """Drops the checkpoints saved since the last finite evaluation and describes the divergence."""
  last_good = run_state.history[-1]['step'] if run_state.history else 0
  dropped = checkpoints.drop_latest_after(last_good)
  kept = f'; checkpoints after step {last_good} were dropped ({dropped})' if dropped else ''
  return TrainingDiverged(f'training diverged: {message}; lower --config.optimizer.learning_rate and use a new '
                          f'--workdir{kept}')


def _train_loop(run: Run, state, run_state: run_state_lib.RunState, checkpoints, writer, preemption):
  config, plan = run.config, run.plan
  step = int(state.step)
  segment_start, wall_before = time.time(), run_state.wall_seconds
  last_save = time.time()
  progress = metrics_lib.Progress(step, plan['total'], config.train.batch_size)
  in_flight = steps_lib.BoundedDispatch()
  first_nonfinite = steps_lib.NO_NONFINITE_STEP
  next_batch = run.batch_reader(step)
  while step < plan['total'] and not run_state.stopped_early:
    state, metrics = run.steps.train(state, *next_batch(step), run_state.lr_scale, first_nonfinite)
    first_nonfinite = metrics['first_nonfinite']  # stays on the device: read only below
    in_flight.push(metrics)  # not the state: it is donated to the next step
    step += 1
    log_now = step % config.train.log_every == 0 or step == plan['total']
    eval_now = step % plan['eval_every'] == 0 or step == plan['total']
    save_now = step % plan['checkpoint_every'] == 0 or step == plan['total']
    preempted = preemption.reached(step)
    if log_now or eval_now or save_now or preempted:  # nothing non-finite is logged, evaluated or saved
      bad_step = int(first_nonfinite)
      if bad_step >= 0:
        raise _diverged(run, checkpoints, run_state, f'the training loss is not finite from step {bad_step} on')
    if log_now:
      loss = float(metrics['loss'])
      rate = progress.report(step)
      lr = optim.learning_rate_at(config.optimizer, config.train.batch_size, step) * run_state.lr_scale
      writer.write(step, {'train_loss': loss, 'learning_rate': lr, 'tokens_per_sec': rate['tokens_per_sec']})
      metrics_lib.log(f'step {step}/{plan["total"]} epoch {step / plan["steps_per_epoch"]:.2f} '
                      f'loss {loss:.4f} lr {lr:.4g} {rate["tokens_per_sec"]:.0f} tok/s ETA {rate["eta"]}')
      every = config.train.checkpoint_every_seconds
      save_now = save_now or _agreed(bool(every) and time.time() - last_save >= every)
    if eval_now:
      run_state.wall_seconds = wall_before + (time.time() - segment_start)  # for the evaluation's record
      state = _evaluate_and_track(run, state, run_state, step, checkpoints, writer)
      progress.skip_time()
    if save_now or run_state.stopped_early or preempted:
      run_state.wall_seconds = wall_before + (time.time() - segment_start)
      checkpoints.save_latest(step, state, run_state)
      last_save = time.time()
      progress.skip_time()
    if preempted:
      raise Preempted(preemption.signum, step, run.workdir)
  run_state.wall_seconds = wall_before + (time.time() - segment_start)
  return state


def _evaluate_and_track(run: Run, state, run_state: run_state_lib.RunState, step, checkpoints, writer):
  """Validation perplexity, the best parameters so far, annealing, and early stopping with patience.

  Returns the state to go on from: the best parameters when the learning rate was just annealed
  after an evaluation that did not improve. With annealing on, a stalled evaluation after the last
  anneal ends training.
  """
  train_config = run.config.train
  valid_ppl = perplexity(run.evaluate(state.params, 'valid'))
  if not math.isfinite(valid_ppl):
    raise _diverged(run, checkpoints, run_state, f'the validation perplexity overflows at step {step}')
  previous_best = run_state.best_valid_ppl
  epoch = step / run.plan['steps_per_epoch']
  improved = run_state.record_evaluation(step, epoch, valid_ppl)
  if improved:
    checkpoints.save_best(step, state.params)
  writer.write(step, {'valid_ppl': valid_ppl, 'wall_seconds': run_state.wall_seconds})
  metrics_lib.log(f'eval step {step} epoch {epoch:.2f}: valid ppl {valid_ppl:.2f} '
                  f'(best {run_state.best_valid_ppl:.2f} at step {run_state.best_step})')
  stalled = previous_best is not None and valid_ppl > previous_best * (1.0 - train_config.anneal_threshold)
  # Only at scheduled evaluations: the extra one at the end of a shortened run must not anneal,
  # or resuming it would not follow the uninterrupted run.
  scheduled = step % run.plan['eval_every'] == 0
  if train_config.anneal_factor > 0 and stalled and scheduled:
    if run_state.anneals < train_config.max_anneals:
      run_state.anneal(train_config.anneal_factor)
      if not improved:
        state = state.replace(params=run.restore_best_params(checkpoints, run_state.best_step))
      metrics_lib.log(f'anneal {run_state.anneals}/{train_config.max_anneals}: learning rate '
                      f'x{run_state.lr_scale:.4g}, from the parameters of step {run_state.best_step}')
    else:
      run_state.stop(ANNEALS_STOP.format(train_config.anneal_threshold, train_config.max_anneals))
      metrics_lib.log(f'early stop: {run_state.stop_reason}')  # every rate cut spent and still stalled
  patience = train_config.patience
  if patience > 0 and run_state.evals_since_best >= patience and not run_state.stopped_early:
    run_state.stop(PATIENCE_STOP.format(patience))
    metrics_lib.log(f'early stop: {run_state.stop_reason}')
  return state
