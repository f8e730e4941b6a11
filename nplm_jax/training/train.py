"""train_and_evaluate: the training loop with evaluation, early stopping, checkpoints, results.

The loop dispatches steps to the devices (several a dispatch from data resident there, or one batch
gathered on the host: experiment.Experiment decides), and acts between dispatches: logging,
evaluation, checkpoints, signals and the non-finite check. Dispatches never cross a log, evaluation
or checkpoint step or an epoch's end (next_boundary), so those keep their meaning.

What a run survives (docs/reliability.md): a kill at any moment (re-running the command resumes
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
from typing import Callable, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from nplm_jax.training import budget as budget_lib
from nplm_jax.training import in_flight as in_flight_lib
from nplm_jax.training import checkpoint as ckpt_lib
from nplm_jax import config as config_lib
from nplm_jax import signals
from nplm_jax.data import corpora as data_lib
from nplm_jax.parallel import distributed
from nplm_jax.training import evaluation
from nplm_jax.training import experiment as experiment_lib
from nplm_jax.files import metrics as metrics_lib
from nplm_jax.baselines import ngram
from nplm_jax.training import optim
from nplm_jax.training import run_state as run_state_lib
from nplm_jax.training import steps as steps_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.data import workdir_vocab
from nplm_jax import progress as progress_lib
from nplm_jax.errors import UserError

# A progress line at least this often, whatever train.log_every says (and during long evaluations).
PROGRESS_SECONDS = 30.0

# Config keys that must match for a workdir to be resumed (besides its corpus, corpus.json): they
# change the steps already taken. Others may change (docs/reliability.md).
RESUME_KEYS = ('seed', 'data', 'model', 'optimizer', 'loss', 'train.batch_size')
# Keys inside RESUME_KEYS that say how C's gradient is made, not what it is (the same gradient, tested):
# a run may go on with another form, say one started on a CPU and resumed on a GPU.
RESUME_FREE_KEYS = ('model.embedding_gradient', 'model.distant_gradient')


# The points of a run where the tests send it a signal (tests/faulty_train.py replaces `fault_hook`): 'start' (the
# experiment built, nothing trained), 'final_evaluation' (before it), 'inside_evaluation' /
# 'inside_final_evaluation' (after the first call of the loop's first evaluation, or of the final one's first
# split), 'collected_at_the_end' (in a destructor, where a handler's exception cannot propagate: Python reports it
# as unraisable, and entry stops the process there and then) and 'after_the_loop'.
def fault_hook(point: str) -> None:
  """Called at each of those points; does nothing (a seam the tests replace)."""
  del point


class _CalledWhenCollected:
  """Calls fault_hook(point) from this object's destructor."""

  def __init__(self, point: str):
    self.point = point

  def __del__(self):
    fault_hook(self.point)


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
  it and no result does (older workdirs were padded to a multiple of 8). So is the compute dtype of a
  run saved before model.compute_dtype='auto' existed, when the config says 'auto'.
  """
  saved = workdir.read_json('config.json')
  if saved is None:
    return
  saved_padding = config_lib.value_at(saved, 'model.vocab_pad_multiple')
  if saved_padding is not None and saved_padding != config.model.vocab_pad_multiple:
    metrics_lib.log(f'keeping the vocabulary padding of {workdir} (a multiple of {saved_padding}, '
                    'the shape of its checkpoints)')
    config.model.vocab_pad_multiple = saved_padding
  saved_dtype = config_lib.value_at(saved, 'model.compute_dtype')
  if config.model.compute_dtype == 'auto' and saved_dtype not in (None, 'auto'):
    config.model.compute_dtype = saved_dtype  # a run made before 'auto' existed keeps its arithmetic
  current = json.loads(config.to_json_best_effort())
  for key in RESUME_KEYS:
    changed = [k for k in _changed_keys(config_lib.value_at(saved, key), config_lib.value_at(current, key), key)
               if k not in RESUME_FREE_KEYS]
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


def _changed_keys(saved, current, prefix: str) -> list[str]:
  """Keys whose value differs, over the keys the saved config has: keys that newer code added
  (at defaults that keep the old behaviour) do not block resuming an older run."""
  if saved is None:
    return []
  if isinstance(saved, dict) and isinstance(current, dict):
    return [k for name in saved for k in _changed_keys(saved[name], current.get(name), f'{prefix}.{name}')]
  return [] if saved == current else [prefix]


def _start(config, workdir: workdir_lib.Workdir, lock: workdir_lib.Lock) -> experiment_lib.Experiment:
  """Checks everything a run needs before any work, leaving the workdir as it was if one fails."""
  config_lib.validate(config)
  existed = workdir.path.exists()
  try:
    workdir.check_only_ours()  # before anything is written into it
    workdir.prepare()
    if distributed.is_leader():
      stale = lock.acquire()
      if stale is not None:
        metrics_lib.warn(f'took over the lock of process {stale.get("pid")} on {stale.get("host")}, which no '
                         'longer runs')
    check_resumable(workdir, config)
    if workdir.file(workdir_vocab.ADDED_WORDS_FILE).exists():
      raise UserError(f'{str(workdir)!r} was made by nplm_jax.tools.extend (its vocabulary outgrew its corpus): score, '
                      'sample and embeddings read it; train in another --workdir')
    run = experiment_lib.Experiment(config, workdir)
    fault_hook('start')
    check_corpus(workdir, run.corpus)
    if config.mix.enabled:  # the mixture's n-gram is estimated after training: refuse now if it cannot be
      ngram.check_memory(run.corpus, config.mix.ngram_order, config.mix.max_memory_gb,
                         flag='config.mix.max_memory_gb')
    return run
  except BaseException:
    lock.release()
    if not existed and distributed.is_leader():
      workdir.remove_if_unused()
    raise


class ExtraResults(Protocol):
  """Results computed on the host from the best parameters' per-token NLLs (main's n-gram mixture)."""

  def prepare(self, corpus: data_lib.Corpus) -> None:
    """The work that does not need the network, done before training (inside a time budget)."""

  def __call__(self, corpus: data_lib.Corpus, network_nll: dict) -> dict:
    """Results from {'valid': nll, 'test': nll}, added to results.json's."""


def train_and_evaluate(config: ml_collections.ConfigDict, workdir_path: str,
                       extra_results: ExtraResults | None = None, catch_signals: bool = True) -> dict:
  """Trains, early-stops on validation, evaluates the best parameters; writes and returns results.json.

  `extra_results(corpus, {'valid': nll, 'test': nll})` adds results computed from the best
  parameters' per-token NLLs (main passes the n-gram mixture; its prepare(corpus) runs before
  training). train.max_seconds counts from this call. In a multi-process job every
  process runs this; start-up errors on any process stop all of them together, and only the
  leader writes the workdir's files. catch_signals: SIGINT and SIGTERM save the step in progress and
  raise Preempted (the command line); False leaves the process's handlers alone (a notebook's
  interrupt raises KeyboardInterrupt, and the run resumes from its latest checkpoint).
  """
  started = time.time()
  workdir = workdir_lib.Workdir(workdir_path)
  lock = workdir_lib.Lock(workdir)
  run = distributed.agree_on_errors(lambda: _start(config, workdir, lock))
  try:
    return _train_and_report(run, config, workdir, extra_results, started, catch_signals)
  finally:
    lock.release()


def _train_and_report(run: experiment_lib.Experiment, config, workdir: workdir_lib.Workdir, extra_results,
                      started: float, catch_signals: bool) -> dict:
  checkpoints, writer, failing = ckpt_lib.Checkpoints(workdir), None, True
  try:
    with jax.set_mesh(run.mesh):
      state, run_state = distributed.agree_on_errors(lambda: _initial_state(run, checkpoints))
      checkpoints.reconcile(int(state.step), _evaluation_due(int(state.step), run.plan, run_state))
      finished = workdir.read_json('results.json')
      if _nothing_to_train(run, state, run_state) and finished is not None:
        metrics_lib.log(f'{workdir} finished at step {int(state.step)}'
                        f'{f" ({run_state.stop_reason})" if run_state.stopped_early else ""}; nothing to train '
                        f'(results: {workdir.file("results.json")})')
        failing = False
        return finished
      # Only now, every process having read the old ones and found nothing wrong.
      workdir.write_json('config.json', config_lib.to_saved(config))
      if workdir.read_json('corpus.json') is None:
        workdir.write_json('corpus.json', run.corpus.description())
      if not workdir.file(workdir_vocab.TOKENIZER_FILE).exists():  # the tools read these, never the corpus
        workdir_vocab.Vocabulary.from_corpus(config.data, run.corpus, run.train_counts).write(workdir)
      workdir.write_integrity((workdir_vocab.VOCAB_FILE, workdir_vocab.TOKENIZER_FILE))
      earlier_seconds = run_state.wall_seconds  # spent by the processes before this one
      if extra_results is not None and distributed.is_leader():
        extra_results.prepare(run.corpus)
      writer = metrics_lib.MetricWriter(workdir, resumed_step=int(state.step))
      with Preemption(catch_signals) as preemption:
        state, best_valid = _train_loop(run, state, run_state, checkpoints, writer, preemption, started)
      trained = time.time()
      has_best = run_state.best_step is not None
      params = run.restore_best_params(checkpoints, run_state.best_step) if has_best else steps_lib.evaluated_params(state)
      fault_hook('final_evaluation')
      _CalledWhenCollected('collected_at_the_end')  # dropped at once: its destructor runs here
      between = _evaluation_hooks('inside_final_evaluation')  # a signal here raises signals.Stopped between calls
      # The best step's validation NLLs are known when this process evaluated it: not computed again.
      known = best_valid is not None and has_best and best_valid[0] == run_state.best_step
      nll = {'valid': best_valid[1] if known else evaluation.split_nll(run, params, 'valid', between),
             'test': evaluation.split_nll(run, params, 'test', between)}
    failing = False
  finally:  # a preempted or failed run's saves complete before it exits (a failing save: the first error is told)
    checkpoints.finish(failing)
    if writer is not None:
      writer.close(failing)
  results = {
      'corpus': config.data.corpus,
      'vocab_size': run.corpus.vocab_size,
      'train_tokens': run.corpus.num_tokens('train'),
      'valid_tokens': run.corpus.num_tokens('valid'),
      'test_tokens': run.corpus.num_tokens('test'),
      'num_parameters': run.num_parameters,
      'valid_ppl': evaluation.perplexity(nll['valid']),
      'test_ppl': evaluation.perplexity(nll['test']),
      'step': run_state.best_step if has_best else int(state.step),
      'steps_trained': int(state.step),
      'epochs': int(state.step) / run.plan['steps_per_epoch'],
      'stopped_early': run_state.stopped_early,
      'stop_reason': run_state.stop_reason,
      'wall_seconds': None,  # below, when everything else is done
      'after_training_seconds': None,  # of it, after training stopped: the final evaluation and the mixture
      'validation_seconds': run_state.validation_seconds,  # of it, the validations during training
      'checkpoint_save_seconds': checkpoints.save_seconds,  # this process's, in the loop: saves are asynchronous
      'checkpoint_checksum_seconds': checkpoints.checksum_seconds,  # of it (and of the final saves), the checksums
      'mesh': dict(run.mesh.shape),
      'platform': jax.devices()[0].platform,
      'device_kind': jax.devices()[0].device_kind,  # e.g. 'NVIDIA H100 80GB HBM3': results files name the device
      'history': run_state.history,
      'config': json.loads(config.to_json_best_effort()),
  }
  if data_lib.text_unit(config.data) == 'char':  # character-level results are read in bits per character
    results.update(valid_bpc=math.log2(results['valid_ppl']), test_bpc=math.log2(results['test_ppl']))
  if extra_results is not None and distributed.is_leader():  # host work, for the writer alone
    results.update(extra_results(run.corpus, nll))
  results.update(wall_seconds=earlier_seconds + (time.time() - started), after_training_seconds=time.time() - trained)
  workdir.write_json('results.json', results)
  bpc = f' ({results["valid_bpc"]:.3f} / {results["test_bpc"]:.3f} bits per character)' if 'test_bpc' in results else ''
  metrics_lib.log(f'done: valid ppl {results["valid_ppl"]:.2f}, test ppl {results["test_ppl"]:.2f}{bpc} '
                  f'(best step {results["step"]}, {results["wall_seconds"]:.0f} s)')
  return results


def _initial_state(run: experiment_lib.Experiment, checkpoints: ckpt_lib.Checkpoints):
  abstract = ckpt_lib.abstract_with_shardings(run.steps.abstract_state, run.steps.state_shardings)
  restored = checkpoints.restore_latest(abstract)
  if restored is None:
    return run.steps.init(), run_state_lib.RunState()
  state, run_state = restored
  metrics_lib.log(f'resumed from step {int(state.step)} in {run.workdir}')
  return _reopen_if_asked(run, state, run_state, checkpoints), run_state


def _nothing_to_train(run: experiment_lib.Experiment, state, run_state: run_state_lib.RunState) -> bool:
  return run_state.stopped_early or int(state.step) >= run.plan['total']


# What the progress line calls the training loss: the exact softmax's is the NLL of the batch
# (its exp is a perplexity), the sampled losses are not.
LOSS_NAMES = {'softmax': 'nll', 'nce': 'nce', 'sampled_softmax': 'sampled'}

# Why a run stopped early; a resumed run may go on when its new settings allow more.
PATIENCE_STOP = 'no improvement in {} evaluations'
ANNEALS_STOP = 'improvement below {:.2%} after {} anneals'


def _reopen_if_asked(run: experiment_lib.Experiment, state, run_state: run_state_lib.RunState, checkpoints):
  """Goes on with a run that stopped early when the resumed config asks for more training.

  A larger train.max_seconds (or none) reopens a run that ran out of time; more patience (or none)
  reopens a run that ran out of it; annealing allowed (again) anneals at
  once from the best parameters, since the last evaluation stalled: this is how the paper's
  setting is annealed at the end.
  """
  train_config = run.config.train
  if not run_state.stopped_early:
    return state
  spent = run_state_lib.spent_budget(run_state.stop_reason)
  if spent is not None:  # out of time, not stalled: go on as it was
    budget = train_config.get('max_seconds', 0.0)
    if not budget or budget > spent:
      run_state.stopped_early, run_state.stop_reason = False, ''
      metrics_lib.log(f'the run had used its time; train.max_seconds={budget:g} lets it go on')
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

  Alone, a signal sets a flag the loop reads between dispatches, and once more after its last step
  (one that came during the last evaluation or save). In a multi-process job JAX's preemption
  service catches SIGTERM and has every process stop at the same step
  (multihost_utils.reached_preemption_sync_point); SIGINT is passed on to it as SIGTERM.
  Entering it first stops the run for a signal of the start-up that a library swallowed.
  """

  def __init__(self, catch_signals: bool = True):
    self.signum = None
    self._catch_signals = catch_signals
    self._previous = {}
    self._dispatches = 0

  def __enter__(self) -> 'Preemption':
    signals.raise_swallowed_signal()  # a stop asked for during the start-up, lost by a library on its way
    if not self._catch_signals:
      return self
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

  def reached(self) -> bool:
    """Whether to save and stop after the dispatch just made (the same answer on every process)."""
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
      # The service agrees on the call after the latest one any process made (max + 1) and expects a
      # call per step; counted in dispatches, which every process makes alike, none is skipped.
      self._dispatches += 1
      if multihost_utils.reached_preemption_sync_point(self._dispatches):
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


class _EvaluationStopped(Exception):
  """A signal arrived during an evaluation in the loop: the loop saves the step and stops."""


def _evaluation_hooks(point: str, stop_requested: Callable[[], bool] | None = None):
  """between(done, total) for evaluation.split_nll: a progress line on long evaluations, the fault
  injection point, and a stop between calls once a signal has arrived."""
  progress = progress_lib.StderrProgress('tokens evaluated', after=PROGRESS_SECONDS, every=PROGRESS_SECONDS,
                                         emit=metrics_lib.log)
  calls = [0]

  def between(done: int, total: int) -> None:
    progress(done, total)
    calls[0] += 1
    if calls[0] == 1:
      fault_hook(point)
    if stop_requested is not None and stop_requested():
      raise _EvaluationStopped()
  return between


def _diverged(run: experiment_lib.Experiment, checkpoints, run_state: run_state_lib.RunState, message: str) -> TrainingDiverged:
  """Drops the checkpoints saved since the last finite evaluation and describes the divergence."""
  last_good = run_state.history[-1]['step'] if run_state.history else 0
  dropped = checkpoints.drop_latest_after(last_good)
  kept = f'; checkpoints after step {last_good} were dropped ({dropped})' if dropped else ''
  return TrainingDiverged(f'training diverged: {message}; lower --config.optimizer.learning_rate and use a new '
                          f'--workdir{kept}')


def next_boundary(step: int, plan: dict, log_every: int, extra: tuple[int, ...] = ()) -> int:
  """The first step after `step` at which the loop must act: a log, evaluation or checkpoint step, an
  epoch's end (a dispatch reads one epoch's order), the last step, or one of `extra` (profiling)."""
  periods = (log_every, plan['eval_every'], plan['checkpoint_every'], plan['steps_per_epoch'])
  candidates = [(step // p + 1) * p for p in periods] + [s for s in extra if s > step] + [plan['total']]
  return min(candidates)


class _StepRunner:
  """Runs the next steps of training: up to train.steps_per_dispatch a call from the data on the
  devices (one compiled program, the count an argument: compiled ahead of time, its memory printed),
  or one batch gathered on the host. Returns the state, the interval with the steps' losses added,
  and how many steps ran: the loop counts those, not the ones it asked for."""

  def __init__(self, run: experiment_lib.Experiment, start_step: int):
    self.run, self._executable = run, None
    self._next_batch = None if run.device_data is not None else run.batch_reader(start_step)

  def __call__(self, state, step: int, num_steps: int, lr_scale: float, interval: steps_lib.Interval):
    run = self.run
    if self._next_batch is not None:  # host-fed batches: one step a call
      state, metrics = run.steps.train(state, *self._next_batch(step), lr_scale, interval)
      return state, metrics['interval'], 1
    order = run.device_data.train_order(step // run.plan['steps_per_epoch'])
    args = (state, run.device_data.ids['train'], order, np.float32(lr_scale), interval, np.int32(num_steps))
    if self._executable is None:
      self._executable = run.steps.resident_steps(run.steps_per_dispatch).lower(*args).compile()
      _log_memory(self._executable, run.steps_per_dispatch)
    state, interval = self._executable(*args)
    return state, interval, num_steps


def _log_memory(executable, num_steps: int) -> None:
  stats = executable.memory_analysis()
  if stats is None:
    return
  mib = lambda x: f'{x / 2**20:,.1f} MiB'
  metrics_lib.log(f'compiled training ({num_steps} step(s) a dispatch), per device: arguments '
                  f'{mib(stats.argument_size_in_bytes)}, temporaries {mib(stats.temp_size_in_bytes)}')


class _Profile:
  """A jax.profiler trace of train.profile_steps ('FIRST:LAST') into WORKDIR/profile."""

  def __init__(self, spec: str, workdir: workdir_lib.Workdir):
    self.first, self.last = (int(x) for x in spec.split(':')) if spec else (-1, -1)
    self.folder, self.active = str(workdir.file('profile')), False

  @property
  def boundaries(self) -> tuple[int, ...]:
    return (self.first, self.last) if self.first >= 0 else ()

  def before(self, step: int) -> None:
    if step == self.first and not self.active and distributed.is_leader():
      jax.profiler.start_trace(self.folder)
      self.active = True

  def after(self, step: int, state) -> None:
    if self.active and step >= self.last:
      jax.block_until_ready(state)
      jax.profiler.stop_trace()
      self.active = False
      metrics_lib.log(f'profile of steps {self.first + 1}-{self.last} written to {self.folder}')


def _evaluation_due(step: int, plan: dict, run_state: run_state_lib.RunState) -> bool:
  """A resumed step whose evaluation has not run: a signal stopped it (the step was saved, not its
  evaluation). The resumed run evaluates it first, as the uninterrupted run did."""
  scheduled = step > 0 and (step % plan['eval_every'] == 0 or step == plan['total'])
  return scheduled and not run_state.stopped_early and all(h['step'] != step for h in run_state.history)


@dataclasses.dataclass
class _EvaluationClock:
  """What the evaluations still to run will take: each validation as long as the last one took (before
  any, evaluation.timing_probe's rate), the final test split at the same rate per token."""
  valid_tokens: int
  test_tokens: int
  seconds_per_token: float = 0.0
  loop_valid_tokens: int | None = None  # what a validation during training reads (a budget's subset); None: all

  def read_subset(self, batches: int, batch_size: int) -> None:
    """Validations during training read the split's first `batches` batches (run_state.valid_batches)."""
    self.loop_valid_tokens = min(batches * batch_size, self.valid_tokens)

  def validated(self, seconds: float, tokens: int | None = None) -> None:
    self.seconds_per_token = seconds / max(tokens or self.valid_tokens, 1)

  def final_seconds(self) -> float:
    """After training stops: that step's validation, then the test split (and, when validations during
    training read a subset, the whole validation split of the best parameters)."""
    extra = self.valid_tokens if self.loop_valid_tokens else 0
    return self.seconds_per_token * ((self.loop_valid_tokens or self.valid_tokens) + self.test_tokens + extra)

  def seconds_left(self, step: int, plan: dict) -> float:
    """The validations from `step` on (its own, when due, runs after the progress line) to the plan's end
    (which evaluates whether or not eval_every divides it), then the test split."""
    every, total = plan['eval_every'], plan['total']
    validations = total // every - (step - 1) // every + (1 if total % every else 0)
    each = self.loop_valid_tokens or self.valid_tokens
    final = self.valid_tokens + self.test_tokens if self.loop_valid_tokens else self.test_tokens
    return self.seconds_per_token * (validations * each + final)


def _train_loop(run: experiment_lib.Experiment, state, run_state: run_state_lib.RunState, checkpoints, writer,
                preemption, started: float) -> tuple:
  """Trains to the end of the plan, an early stop or the time budget (counted from `started`, with the
  final evaluation's measured time left for it). Returns the state and the best evaluation's per-token
  validation NLLs when this process computed them (else None)."""
  config, plan = run.config, run.plan
  step = int(state.step)
  wall_before = run_state.wall_seconds
  wall = lambda: wall_before + (time.time() - started)
  budget = config.train.get('max_seconds', 0.0)
  clock = _EvaluationClock(run.corpus.num_tokens('valid'), run.corpus.num_tokens('test'))
  course = budget_lib.BudgetCourse(budget, config.train.get('budget_decay', 0.0),
                                   config.train.get('budget_eval_share', 0.0), started=run_state.training_started)
  if run_state.valid_batches:  # a resumed budgeted run validates on the subset it chose
    clock.read_subset(run_state.valid_batches, run.eval_batch_size)
  if course.decaying:
    metrics_lib.log(f'train.max_seconds={budget:g} decides the learning rate: it falls linearly to 0 over the last '
                    f'{course.decay:.0%} of the training time, ending when training must stop (a stall still anneals; '
                    'the budget, not patience, ends the run)')
  last_save = last_line = time.time()
  progress = metrics_lib.Progress(step, plan['total'], config.train.batch_size)
  warm = False
  loss_name = LOSS_NAMES[config.loss.name]
  if config.optimizer.name == 'paper_sgd':
    metrics_lib.log(f'lr is per example, as in the paper: lr_0 / (1 + r t), t counting examples; a step of '
                    f'{config.train.batch_size} examples moves {config.train.batch_size} x lr')
  in_flight = in_flight_lib.InFlightLimit()
  # The losses since the last log boundary, summed on the devices; a resumed run goes on with the saved ones.
  interval = steps_lib.Interval.start(loss_sum=run_state.interval_loss_sum, steps=run_state.interval_steps)
  run_steps = _StepRunner(run, step)
  profile = _Profile(config.train.profile_steps, run.workdir)
  # Between the calls of an evaluation, a signal stops it (one process: a multi-process job agrees on
  # its stop step through JAX's preemption service, which counts dispatches, so it stops after).
  stop_requested = (lambda: preemption.signum is not None) if jax.process_count() == 1 else None
  best_valid = None  # (step, per-token NLLs) of the best evaluation this process ran

  def evaluate(state):
    nonlocal best_valid
    run_state.wall_seconds = wall()  # for the evaluation's record
    if course.eval_share and budget and not run_state.valid_batches and clock.seconds_per_token:
      _choose_validation_subset(run, run_state, course, clock, step, wall(), progress.seconds_per_step())
    with progress.paused():
      began = time.perf_counter()
      try:
        state, nll = _evaluate_and_track(run, state, run_state, step, checkpoints, writer,
                                         _evaluation_hooks('inside_evaluation', stop_requested),
                                         may_stop=not course.decaying)
      except _EvaluationStopped:  # the step is saved, not its evaluation: a resume runs it first
        _save(step, state)
        raise Preempted(preemption.signum, step, run.workdir) from None
      seconds = time.perf_counter() - began
      clock.validated(seconds, len(nll))
      run_state.validation_seconds += seconds
    if run_state.best_step == step and not run_state.valid_batches:  # a subset's NLLs are not the split's
      best_valid = (step, nll)
    return state

  def _save(step, state):
    run_state.wall_seconds = wall()
    run_state.interval_loss_sum, run_state.interval_steps = float(interval.loss_sum), int(interval.steps)
    with progress.paused():
      saving = time.perf_counter()
      checkpoints.save_latest(step, state, run_state)
      checkpoints.save_seconds += time.perf_counter() - saving

  if _evaluation_due(step, plan, run_state):  # its record is saved with the next checkpoint
    metrics_lib.log(f'evaluating step {step}, which the stopped run saved before its evaluation')
    state = evaluate(state)
  while step < plan['total'] and not run_state.stopped_early:
    # Every dispatch as long as it can be: up to steps_per_dispatch, never past the next boundary.
    boundary = next_boundary(step, plan, config.train.log_every, profile.boundaries)
    profile.before(step)
    now = wall()
    lr_factor = course.lr_factor(now, _training_end(course, clock, plan, step, now, progress.seconds_per_step()))
    state, interval, ran = run_steps(state, step, min(run.steps_per_dispatch, boundary - step),
                                     run_state.lr_scale * lr_factor, interval)
    in_flight.push(interval)  # not the state: it is donated to the next dispatch
    step += ran
    if not warm:  # the first dispatch compiled: the rate and ETA start after it (one wait a run)
      jax.block_until_ready(interval)
      if not clock.seconds_per_token:  # what the evaluations will take, before the first one runs
        clock.seconds_per_token = evaluation.timing_probe(run, steps_lib.evaluated_params(state))
        _refuse_a_budget_too_small(budget, wall(), clock)
      if course.started is None:
        course.started = run_state.training_started = wall()
      progress.warmed_up(step)
      warm = True
    profile.after(step, state)
    # Stops when the next dispatch would leave the stop step's evaluation and the test split less
    # than their measured time inside the budget.
    next_dispatch = progress.seconds_per_step() * min(run.steps_per_dispatch, plan['total'] - step)
    out_of_time = bool(budget) and _agreed(wall() + next_dispatch + clock.final_seconds() >= budget)
    if out_of_time:
      run_state.stop(run_state_lib.TIME_STOP.format(budget))
      metrics_lib.log(f'stop at step {step}: {run_state.stop_reason} (about {clock.final_seconds():.0f} s left for '
                      'the final evaluation)')
    log_now = step % config.train.log_every == 0 or step == plan['total'] or out_of_time
    line_now = log_now or time.time() - last_line >= PROGRESS_SECONDS  # a line at least this often
    eval_now = step % plan['eval_every'] == 0 or step == plan['total'] or out_of_time
    save_now = step % plan['checkpoint_every'] == 0 or step == plan['total']
    preempted = preemption.reached()
    if log_now or eval_now or save_now or preempted:  # nothing non-finite is logged, evaluated or saved
      checkpoints.check()  # a save that failed in the background stops training here
      bad_step = int(interval.first_nonfinite)
      if bad_step >= 0:
        raise _diverged(run, checkpoints, run_state, f'the training loss is not finite from step {bad_step} on')
    if line_now:
      loss = interval.mean_loss()  # over the steps since the last log boundary
      rate = progress.report(step, seconds_left=budget - wall() if budget else None,
                             after_training=clock.seconds_left(step, plan))
      lr = (optim.learning_rate_at(config.optimizer, config.train.batch_size, step, plan['total']) * run_state.lr_scale
            * lr_factor)
      shown_lr = lr / config.train.batch_size if config.optimizer.name == 'paper_sgd' else lr
      # no rate on the line of the first dispatch, whose steps ran while it compiled
      speed = f'{rate["tokens_per_sec"]:,.0f} tok/s ' if rate['tokens_per_sec'] else ''
      metrics_lib.log(f'step {step}/{plan["total"]} epoch {step / plan["steps_per_epoch"]:.2f} '
                      f'mean {loss_name} {loss:.4f} lr {shown_lr:.4g} {speed}ETA {rate["eta"]}')
      last_line = time.time()
    if log_now:
      writer.write(step, {'train_loss_mean': loss, 'learning_rate': lr, 'tokens_per_sec': rate['tokens_per_sec']})
      if step % config.train.log_every == 0:  # a row off the boundaries (the run's end) leaves the interval whole
        interval = steps_lib.Interval.start()
      every = config.train.checkpoint_every_seconds
      save_now = save_now or _agreed(bool(every) and time.time() - last_save >= every)
    if eval_now or save_now or run_state.stopped_early or preempted:
      jax.block_until_ready(interval)  # the steps before are training time, not the evaluation's
    if eval_now:
      state = evaluate(state)
    if save_now or run_state.stopped_early or preempted:
      _save(step, state)
      last_save = time.time()
    if preempted:
      raise Preempted(preemption.signum, step, run.workdir)
  fault_hook('after_the_loop')
  if stop_requested is not None and stop_requested():  # came after the last step's check: that step is saved
    raise Preempted(preemption.signum, step, run.workdir)
  run_state.wall_seconds = wall()
  return state, best_valid


def _refuse_a_budget_too_small(budget: float, spent: float, clock: _EvaluationClock) -> None:
  """Stops a run at its first step when the time spent and the final evaluation's measured time leave
  the budget nothing to train in, naming the least budget that would."""
  if budget and _agreed(spent + clock.final_seconds() >= budget):
    least = budget_lib.shortest_budget(spent, clock.final_seconds(), clock.seconds_per_token * clock.valid_tokens)
    raise UserError(f'train.max_seconds={budget:g} leaves no time to train: {spent:.0f} s went to the start and the '
                    f'final evaluation takes about {clock.final_seconds():.0f} s; give at least '
                    f'--config.train.max_seconds={least:g}')


def _training_end(course: budget_lib.BudgetCourse, clock: _EvaluationClock, plan: dict, step: int, now: float,
                  seconds_per_step: float) -> float:
  """The wall second training will stop at, by the rates measured so far (the budget's end less the
  final evaluation, or the plan's last step); infinity before a step has been timed."""
  if not seconds_per_step:
    return math.inf
  return course.training_end(now, clock.final_seconds(), (plan['total'] - step) * seconds_per_step)


def _choose_validation_subset(run: experiment_lib.Experiment, run_state: run_state_lib.RunState,
                              course: budget_lib.BudgetCourse, clock: _EvaluationClock, step: int, now: float,
                              seconds_per_step: float) -> None:
  """At the first validation of a budgeted run: how many of the split's first batches every validation
  during training reads, so that those the budget has room for take at most train.budget_eval_share
  of it (the final figures are always over the whole splits)."""
  end = _training_end(course, clock, run.plan, step, now, seconds_per_step)
  if not math.isfinite(end):
    return
  validations = 2 + int(max(end - now, 0.0) / (run.plan['eval_every'] * seconds_per_step))  # this one, the stop's
  split_batches = -(-clock.valid_tokens // run.eval_batch_size)
  batches = course.validation_batches(clock.seconds_per_token, run.eval_batch_size, validations, split_batches)
  batches = max(batches, evaluation.EVAL_BATCHES_A_CALL)  # an evaluation's least (one call's program)
  if batches >= split_batches:
    return
  run_state.valid_batches = batches
  clock.read_subset(batches, run.eval_batch_size)
  metrics_lib.log(f'validations during training read the first {clock.loop_valid_tokens:,} of the '
                  f'{clock.valid_tokens:,} validation tokens: about {validations} of them fit '
                  f'{course.eval_share:.0%} of train.max_seconds={course.budget:g} (the final figures are over the '
                  'whole splits)')


def _evaluate_and_track(run: experiment_lib.Experiment, state, run_state: run_state_lib.RunState, step, checkpoints,
                        writer, between=None, may_stop: bool = True):
  """Validation perplexity, the best parameters so far, annealing, and early stopping with patience.

  Returns the state to go on from (the best parameters when the learning rate was just annealed
  after an evaluation that did not improve) and the per-token validation NLLs. With annealing on, a
  stalled evaluation after the last anneal ends training. The time budget is the loop's. may_stop=False:
  neither patience nor a stall after the last anneal stops training (a budget's schedule decides its
  end; annealing still answers a stall, from the best parameters). A budgeted run's
  validations read the subset run_state.valid_batches names, when set.
  """
  train_config = run.config.train
  params = steps_lib.evaluated_params(state)  # with optimizer.ema_decay, the moving average
  nll = evaluation.split_nll(run, params, 'valid', between, max_batches=run_state.valid_batches or None)
  valid_ppl = evaluation.perplexity(nll)
  if not math.isfinite(valid_ppl):
    raise _diverged(run, checkpoints, run_state, f'the validation perplexity overflows at step {step}')
  # Only scheduled evaluations anneal or spend patience, judged against the scheduled ones: the extra
  # one at the end of a shortened run must not, or resuming it would not follow the uninterrupted run.
  scheduled = step % run.plan['eval_every'] == 0
  previous_best = run_state.scheduled_best_ppl
  epoch = step / run.plan['steps_per_epoch']
  improved = run_state.record_evaluation(step, epoch, valid_ppl, scheduled)
  if improved:
    saving = time.perf_counter()
    checkpoints.save_best(step, params)
    checkpoints.save_seconds += time.perf_counter() - saving
  writer.write(step, {'valid_ppl': valid_ppl, 'wall_seconds': run_state.wall_seconds})
  metrics_lib.log(f'eval step {step} epoch {epoch:.2f}: valid ppl {valid_ppl:.2f} '
                  f'(best {run_state.best_valid_ppl:.2f} at step {run_state.best_step})')
  stalled = previous_best is not None and valid_ppl > previous_best * (1.0 - train_config.anneal_threshold)
  if train_config.anneal_factor > 0 and stalled and scheduled:
    if run_state.anneals < train_config.max_anneals:
      run_state.anneal(train_config.anneal_factor)
      if not improved:  # a moving average goes on from them too
        best = run.restore_best_params(checkpoints, run_state.best_step)
        state = state.replace(params=best, average=None if state.average is None else jax.tree.map(jnp.copy, best))
      metrics_lib.log(f'anneal {run_state.anneals}/{train_config.max_anneals}: learning rate '
                      f'x{run_state.lr_scale:.4g}, from the parameters of step {run_state.best_step}')
    elif may_stop:
      run_state.stop(ANNEALS_STOP.format(train_config.anneal_threshold, train_config.max_anneals))
      metrics_lib.log(f'early stop: {run_state.stop_reason}')  # every rate cut spent and still stalled
  patience = train_config.patience
  if may_stop and patience > 0 and run_state.evals_since_best >= patience and not run_state.stopped_early:
    run_state.stop(PATIENCE_STOP.format(patience))
    metrics_lib.log(f'early stop: {run_state.stop_reason}')
  return state, nll
