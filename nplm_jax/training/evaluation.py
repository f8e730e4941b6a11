"""Evaluation: exactly normalised per-token NLLs of splits and of any examples, perplexity, and a
workdir's best parameters. The tools import this, not the training loop.
"""

import math
import time

import jax
import ml_collections
import numpy as np

from nplm_jax.training import in_flight as in_flight_lib
from nplm_jax.training import checkpoint as ckpt_lib
from nplm_jax import config as config_lib
from nplm_jax.data import corpora as data_lib
from nplm_jax.training import device_data
from nplm_jax.training import experiment as experiment_lib
from nplm_jax.parallel import sharding
from nplm_jax.training import steps as steps_lib
from nplm_jax.files import workdir as workdir_lib
from nplm_jax.errors import UserError
from nplm_jax import progress as progress_lib

# mean NLL above which exp() overflows a float64: the run has diverged
MAX_MEAN_NLL = 700.0

# Batches a resident evaluation runs in one call. Between calls the host prints progress and answers
# signals (a whole split in one call kept Ctrl-C waiting for it: 110 s on Brown on a 2-core CPU); 16
# batches of 256 are about 1-3 s of MLP1 on Brown there, and far less on an accelerator, where calls
# are queued ahead (in_flight.InFlightLimit) so the devices never wait for the host.
EVAL_BATCHES_A_CALL = 16


def perplexity(nll: np.ndarray) -> float:
  """exp(mean NLL); inf when that overflows (a diverged model)."""
  mean = float(np.mean(nll))
  return math.exp(mean) if mean <= MAX_MEAN_NLL else math.inf


def split_nll(experiment: experiment_lib.Experiment, params, split: str, between=None,
              max_batches: int | None = None) -> np.ndarray:
  """Exactly normalised -log P of every token of a split, in stream order (float64).

  With the split's ids on the devices, each call evaluates EVAL_BATCHES_A_CALL batches (gathered
  there); else each process builds only the rows of each batch its devices hold. Calls run ahead
  boundedly. Either way the per-token results come back replicated, and only a few [batch, |V| /
  model] logit blocks exist at a time per device. `between(done, total)` (tokens) runs after each
  call is queued: progress, and a place to stop. max_batches: only the split's first batches (a whole
  call at least, so the same program runs), as timing_probe measures.
  """
  batch_size = experiment.eval_batch_size
  steps = experiment.steps
  ids = experiment.resident_ids(split)
  total = experiment.stream.num_examples(split)
  if ids is not None:
    positions, weights = device_data.eval_positions(total, batch_size)
    per_call = min(EVAL_BATCHES_A_CALL, len(positions))
    if max_batches is not None:
      positions, weights = positions[:max(max_batches, per_call)], weights[:max(max_batches, per_call)]
    padding = -len(positions) % per_call  # whole calls: one program; padded batches weigh 0
    positions = np.concatenate([positions, np.zeros((padding, batch_size), positions.dtype)])
    weights = np.concatenate([weights, np.zeros((padding, batch_size), weights.dtype)])
    pending, in_flight = [], in_flight_lib.InFlightLimit()
    for first in range(0, len(positions), per_call):
      chunk = device_data.put_replicated(steps.mesh, positions[first:first + per_call])
      pending.append(in_flight.push(steps.eval_resident(params, ids, chunk)))
      if between is not None:
        between(min((first + per_call) * batch_size, total), total)
    nll = np.concatenate([np.asarray(x, np.float64).reshape(-1) for x in jax.device_get(pending)])
    return nll[weights.reshape(-1) > 0]
  stream = experiment.stream
  rows = sharding.process_rows(steps.mesh, batch_size)

  def batches():
    for index, (positions, w) in enumerate(stream.eval_positions(split, batch_size)):
      if max_batches is not None and index >= max_batches:
        return
      yield (*stream.examples(split, positions[rows]), w)
      if between is not None:
        between(int(min(positions[0] + batch_size, total)), total)
  return batched_nll(steps, params, batches(), batch_size)


def timing_probe(experiment: experiment_lib.Experiment, params, splits=('valid', 'test')) -> float:
  """Evaluation's seconds per token on these devices, for planning a time budget: the first call of
  each split compiled and run, then the same call timed again (a resident split's program is its
  own, so each compiles here rather than inside the evaluations the budget plans for)."""
  batches = EVAL_BATCHES_A_CALL
  for split in splits:
    split_nll(experiment, params, split, max_batches=batches)
  began = time.perf_counter()
  tokens = sum(len(split_nll(experiment, params, split, max_batches=batches)) for split in splits)
  return (time.perf_counter() - began) / max(tokens, 1)


def examples_nll(steps: steps_lib.CompiledSteps, params, contexts: np.ndarray, targets: np.ndarray,
                 batch_size: int, progress=None) -> np.ndarray:
  """-log P(target | context) of any examples (contexts [N, n-1], targets [N]), batched like a split;
  `progress(done, total)` after each batch is dispatched, if given."""
  if not len(targets):
    return np.zeros(0)
  rows = sharding.process_rows(steps.mesh, batch_size)
  total = len(targets)

  def batches():
    for p, w in data_lib.padded_positions(total, batch_size):
      if progress is not None:
        progress(int(min(p[0] + batch_size, total)), total)
      yield contexts[p[rows]], targets[p[rows]], w
  return batched_nll(steps, params, batches(), batch_size)


def batched_nll(steps: steps_lib.CompiledSteps, params, batches, batch_size: int) -> np.ndarray:
  """Runs the eval step over (this process's contexts, targets, weights of the global batch) and
  keeps the per-token NLLs of weight 1, in order."""
  pending, weights, in_flight = [], [], in_flight_lib.InFlightLimit()
  for contexts, targets, w in batches:
    pending.append(in_flight.push(steps.eval(params, sharding.put_process_rows(steps.mesh, contexts, batch_size),
                                             sharding.put_process_rows(steps.mesh, targets, batch_size))))
    weights.append(w)
  nll = np.concatenate([np.asarray(x, np.float64) for x in jax.device_get(pending)])
  return nll[np.concatenate(weights) > 0]


def load_config(workdir_path: str) -> ml_collections.ConfigDict:
  """A workdir's config.json, merged onto today's defaults (config.from_saved)."""
  saved = workdir_lib.Workdir(workdir_path).read_json('config.json')
  if saved is None:
    raise UserError(f'{workdir_path!r} holds no config.json; give the --workdir of a finished or running training')
  return config_lib.from_saved(saved)


def best_step(experiment: experiment_lib.Experiment, checkpoints: ckpt_lib.Checkpoints) -> int:
  """The step of a workdir's best parameters, as its newest readable checkpoint names it."""
  run_state = checkpoints.latest_run_state()
  step = run_state.best_step if run_state is not None else None
  if step is None:  # a finished workdir kept without its checkpoints/: results.json names the best step
    step = (experiment.workdir.read_json('results.json') or {}).get('step')
  if step is None:
    raise UserError(f'{str(experiment.workdir)!r} holds no best checkpoint yet; train it until its first evaluation')
  return step


def best_params(experiment: experiment_lib.Experiment, checkpoints: ckpt_lib.Checkpoints):
  """The best parameters of a workdir's run, laid out for the run's mesh."""
  return experiment.restore_best_params(checkpoints, best_step(experiment, checkpoints))


def evaluate_workdir(workdir_path: str, splits=('valid', 'test'), mesh=None, devices=None,
                     corpus: data_lib.Corpus | None = None) -> dict:
  """Per-token NLLs of a workdir's best parameters, restored onto `mesh` (any shape) over `devices`,
  on its config's corpus (or `corpus`, when the caller has read it)."""
  config = load_config(workdir_path)
  if mesh is not None:
    config.mesh.data, config.mesh.model = mesh
  workdir = workdir_lib.Workdir(workdir_path)
  experiment = experiment_lib.Experiment(config, workdir, devices, training=False, corpus=corpus)
  checkpoints = ckpt_lib.Checkpoints(workdir)
  try:
    with jax.set_mesh(experiment.mesh):
      params = best_params(experiment, checkpoints)
      return {split: split_nll(experiment, params, split, progress_lib.StderrProgress(f'{split} tokens evaluated'))
              for split in splits}
  finally:
    checkpoints.close()
