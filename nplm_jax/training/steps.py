"""Pure train and eval steps, and their jitted, sharded forms.

`train_step(state, contexts, targets, lr_scale) -> (state, loss)` and `eval_step(params,
contexts, targets) -> per-token NLL` are plain functions of arrays; `train_resident_steps` runs up to
steps_per_dispatch train steps in one call (the count is an argument of the one compiled program),
each gathering its batch from token ids on the devices (device_data), and `eval_resident` a split's
batches likewise. Both training forms add each step's loss to an `Interval` carried on the devices
from call to call, which the loop reads at a log step: the mean loss over the logging interval and
the first non-finite step. `compile_steps` jits them once with explicit in/out shardings and a
donated train state. `lr_scale` multiplies the optimiser's step (learning-rate annealing) without
recompiling or changing the saved state.

Random streams: the parameters are drawn from PRNGKey(seed) (stream 0), a step's dropout masks from
(seed, DROPOUT_STREAM, step), a sampled loss's noise words from (seed, step); each a function of the
step alone, so a resumed run draws what the uninterrupted one would.
"""

import dataclasses
import functools
from typing import Any, Callable

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from nplm_jax.errors import UserError
from nplm_jax.training import device_data
from nplm_jax.training import sampled_noise
from nplm_jax.models import bengio2003
from nplm_jax.models import output_layer
from nplm_jax.parallel import sharding
from nplm_jax.parallel import vocab_softmax


@dataclasses.dataclass(frozen=True)
class TrainState:
  step: jax.Array
  params: dict[str, jax.Array]
  opt_state: Any
  # The parameters' exponential moving average (optimizer.ema_decay > 0), what evaluation reads; None
  # otherwise, and then not a node of the pytree at all: a state without it has the pytree, and so
  # the checkpoints, it had before the average existed (their restore compares trees).
  average: Any = None

  def replace(self, **changes) -> 'TrainState':
    return dataclasses.replace(self, **changes)


def _state_children(state: TrainState):
  names = [f.name for f in dataclasses.fields(state) if f.name != 'average' or state.average is not None]
  return [(jax.tree_util.GetAttrKey(name), getattr(state, name)) for name in names], state.average is not None


def _state_from_children(has_average: bool, children) -> TrainState:
  del has_average  # in the tree's definition: states with and without an average are different trees
  return TrainState(*children)


jax.tree_util.register_pytree_with_keys(TrainState, _state_children, _state_from_children)


def evaluated_params(state: TrainState):
  """The parameters a run evaluates and keeps as its best: the moving average when there is one."""
  return state.params if state.average is None else state.average


def ema_decay_at(ema_decay: float, step):
  """The average's decay after `step` steps: optimizer.ema_decay, lower at first, (1 + t) / (10 + t),
  so the initialisation is forgotten within the first hundreds of steps (as TensorFlow's
  ExponentialMovingAverage with num_updates)."""
  step = jnp.asarray(step, jnp.float32)
  return jnp.minimum(ema_decay, (1.0 + step) / (10.0 + step))


def updated_average(average, params, decay):
  """average + (1 - decay) (params - average), leaf by leaf: one more read of each, fused by XLA into
  the step's parameter update."""
  return jax.tree.map(lambda a, p: a + ((1.0 - decay) * (p - a)).astype(a.dtype), average, params)


def features(model, params, contexts, dropout_key=None, **options):
  """The output layer's inputs f [batch, K] (either model family). With a dropout key (training) the
  model's dropout applies to them; without, none does. options: the model's own (bengio2003's context_rows)."""
  return model.apply({'params': params}, contexts, dropout_key is None, method='features',
                     rngs=None if dropout_key is None else {'dropout': dropout_key}, **options)


def token_nll(model, mesh: Mesh, params, contexts, targets):
  """-log P(target | context) per example, with the vocabulary-parallel softmax."""
  return vocab_softmax.token_nll(features(model, params, contexts), model.output_layer(params), targets, mesh=mesh,
                                 compute_dtype=model.compute_dtype)


def output_layer_kernel(kernel: str, model, params, mesh: Mesh, batch: int, chunk_size: int = 0,
                        kernel_tuning: str = '') -> str:
  """The output layer's path a call of `batch` examples takes: `kernel` (vocab_softmax.softmax_kernel_for's),
  its 'auto' on one GPU resolved as vocab_softmax.token_nll resolves it when the step is traced: from a
  shard's examples (a chunk's, with chunk_size: chunked_map) and columns, K and the compute dtype. `params`
  may be abstract: only the output layer's shape is read."""
  if kernel != 'auto':
    return kernel
  rows, columns = jax.eval_shape(model.output_layer, params).shape  # [K + 1, |V|]: the weight rows, the bias row
  return vocab_softmax.auto_kernel(mesh.devices.flat[0].platform, min(batch, chunk_size or batch) // mesh.shape['data'],
                                   columns // mesh.shape['model'], rows - 1, model.compute_dtype, kernel_tuning)


def dropout_key(seed: int, step):
  """The dropout masks of a step are a function of (seed, step): a resumed run draws the same."""
  return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), DROPOUT_STREAM), step)


DROPOUT_STREAM = 1  # keeps dropout's random numbers apart from the initialisation's (stream 0)


def chunked_map(per_example, inputs, chunk_size: int):
  """per_example(inputs) [batch] for a pytree of [batch, ...] inputs, `chunk_size` examples at a time.

  Evaluation then holds one [chunk, |V|] block of logits at a time, and on a CPU that block stays
  in cache (faster at batch >= 1024). Training chunked recomputes each chunk's logits in the
  backward pass (one more matmul), so it too holds one chunk's block at a time: chunk_size bounds
  the step's temporary memory by chunk x |V| / model; unchunked it runs fastest. Chunk i takes
  examples i, i + n, i + 2n, ... so each chunk keeps the batch's 'data' sharding; the result
  comes back in the batch's order.
  """
  batch = jax.tree.leaves(inputs)[0].shape[0]
  if not chunk_size or chunk_size >= batch:
    return per_example(inputs)
  n = batch // chunk_size
  chunks = jax.tree.map(lambda x: x.reshape(chunk_size, n, *x.shape[1:]).swapaxes(0, 1), inputs)
  return jax.lax.map(per_example, chunks).swapaxes(0, 1).reshape(batch)


@flax.struct.dataclass
class Interval:
  """What the devices accumulate between two looks of the host, carried from call to call.

  loss_sum / steps is the mean training loss over the steps since the interval began (every step has
  the same batch size, so it is also the mean over their examples); first_nonfinite is the first step
  whose loss was not finite (-1: none yet), so the host checks every step's loss without waiting for
  each. The loop starts a new interval after each log.
  """
  loss_sum: jax.Array  # float32 []
  steps: jax.Array  # int32 []
  first_nonfinite: jax.Array  # int32 []

  @classmethod
  def start(cls, first_nonfinite=-1, loss_sum: float = 0.0, steps: int = 0) -> 'Interval':
    """A new interval, or (loss_sum, steps) one a saved run had in progress (the float32 sum as saved)."""
    return cls(loss_sum=np.float32(loss_sum), steps=np.int32(steps),
               first_nonfinite=np.asarray(first_nonfinite, np.int32))

  def add(self, loss, step) -> 'Interval':
    """The interval with one more step's loss; `step` is the step count after it (state.step)."""
    bad = (self.first_nonfinite < 0) & ~jnp.isfinite(loss)
    return Interval(loss_sum=self.loss_sum + loss.astype(jnp.float32), steps=self.steps + 1,
                    first_nonfinite=jnp.where(bad, step, self.first_nonfinite).astype(jnp.int32))

  def mean_loss(self) -> float:
    """On the host: the interval's mean loss (waits for its steps)."""
    return float(self.loss_sum) / max(int(self.steps), 1)


def after_every_read(grads, loss_value):
  """The gradients, each plus 0 x (the loss + every gradient's first element): the same numbers, but every
  parameter's update now follows every read of the parameters. A layer's weights are read again for its
  input's gradient (df = dz W^T), which the layer's own update does not otherwise wait for, nor does it
  wait for the loss's own terms (the target's bias); XLA then keeps the old weights alive past an update
  in place by copying the whole parameter first: in the compiled research-size step on CPU, the output
  layer (320 MB read and written a step) and H. 0 x a finite number is exactly 0, which XLA cannot fold
  away (0 x NaN is NaN): a finite step is unchanged bit for bit; a non-finite one stops training anyway
  (Interval.first_nonfinite). First elements, not sums: no pass over the gradients, no reshape of a
  sharded one."""
  anchor = 0.0 * (loss_value + sum(g[(0,) * g.ndim].astype(jnp.float32) for g in jax.tree.leaves(grads)))
  return jax.tree.map(lambda g: g + anchor.astype(g.dtype), grads)


def cast_output_layer(model, params, form: str):
  """The output layer in the model's compute dtype, whole or its weight rows alone (`form`: vocab_softmax.
  CastLayer's two copies); None where that dtype is float32 (the matmuls take the layer as it is)."""
  if jnp.dtype(model.compute_dtype) == jnp.float32:
    return None
  layer = model.output_layer(params)
  return (layer if form == 'whole' else layer[:-1]).astype(model.compute_dtype)


def train_step(state: TrainState, contexts, targets, lr_scale=1.0, *, model, mesh, optimizer, loss=None,
               chunk_size=0, seed=0, vocab_block=-1, softmax_kernel='xla', softmax_kernel_tuning='', ema_decay=0.0,
               cast_layer=None, output_layer_gradient_dtype='float32', output_layer_gradient_form='as_traced',
               column_learning_rate=None, column_weight_decay=0.0):
  """One optimiser step on the mean loss of a batch: the exact softmax, or `loss` (sampled), and the
  moving average of the parameters when the state has one. Returns the new state and the batch's loss.
  cast_layer: cast_output_layer(model, state.params, form), made by the caller (the loop that carries it from
  one step's update to the next), which the exact softmax takes instead of casting the layer's rows.
  output_layer_gradient_dtype, output_layer_gradient_form: the exact softmax's vocab_softmax.token_nll
  gradient_dtype and gradient_form. column_learning_rate (a sampled loss, train.output_layer_update
  'sampled_columns'): the optimiser's learning rate by step, and the step of sampled_columns_step;
  column_weight_decay its weight decay (what train_resident_steps defers within a dispatch)."""
  if column_learning_rate is not None:
    return sampled_columns_step(state, contexts, targets, lr_scale, model=model, mesh=mesh, optimizer=optimizer,
                                loss=loss, seed=seed, ema_decay=ema_decay,
                                column_learning_rate=column_learning_rate)

  def loss_fn(params):
    key = dropout_key(seed, state.step) if model.has_dropout else None
    feats, out = features(model, params, contexts, key), model.output_layer(params)
    if loss is None:  # chunked: the logits are recomputed chunk by chunk in the backward pass, not kept for all
      per_example = lambda ft: vocab_softmax.token_nll(ft[0], out, ft[1], mesh=mesh, compute_dtype=model.compute_dtype,
                                                       recompute=bool(chunk_size), vocab_block=vocab_block,
                                                       kernel=softmax_kernel, kernel_tuning=softmax_kernel_tuning,
                                                       cast_layer=cast_layer,
                                                       gradient_dtype=output_layer_gradient_dtype,
                                                       gradient_form=output_layer_gradient_form)
    else:
      samples = sampled_noise.draw_noise(loss, state.step)  # shared by the whole batch
      per_example = lambda ft: vocab_softmax.sampled_token_loss(ft[0], out, ft[1], samples, loss.log_noise,
                                                                mesh=mesh, kind=loss.kind)
    return jnp.mean(chunked_map(per_example, (feats, targets), chunk_size))

  loss_value, grads = jax.value_and_grad(loss_fn)(state.params)
  return _updated(state, grads, loss_value, lr_scale, optimizer, ema_decay), loss_value


def _updated(state: TrainState, grads, loss_value, lr_scale, optimizer, ema_decay, columns=None,
             rows=None, kept=(), columns_as_rows: bool = False) -> TrainState:
  """The state after the optimiser's step on `grads`; columns (ids, their updates [K + 1, len(ids)], mesh):
  added to the output layer's columns after it (columns_as_rows: the state holds the layer transposed, a
  DeferredDecay's rows_first, so they are its rows); rows (ids, their updates): added to C's rows after it.
  `kept`: names of parameters the optimiser's step leaves as they were (their weight decay deferred:
  DeferredDecay), XLA then dropping its pass over them."""
  grads = after_every_read(grads, loss_value)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  # Fused by XLA into the parameter update itself: no extra pass over the parameters.
  params = jax.tree.map(lambda p, u: p + lr_scale * u, state.params, updates)
  params = {**params, **{name: state.params[name] for name in kept}}
  if columns is not None:
    ids, column_updates, mesh = columns
    layer = params[output_layer.OUTPUT]
    layer = (layer.at[ids].add(column_updates.T.astype(layer.dtype)) if columns_as_rows
             else vocab_softmax.add_to_columns(layer, ids, column_updates, mesh=mesh))
    params = {**params, output_layer.OUTPUT: layer}
  if rows is not None:  # (ids, updates), or pairs of them (a distant block's window and block)
    table = params['C']
    for ids, row_updates in zip(*map(jax.tree.leaves, rows)):
      table = table.at[ids].add(row_updates)
    params = {**params, 'C': table}
  average = state.average
  if average is not None:
    average = updated_average(average, params, ema_decay_at(ema_decay, state.step))
  return TrainState(step=state.step + 1, params=params, opt_state=opt_state, average=average)


def sampled_columns_step(state: TrainState, contexts, targets, lr_scale, *, model, mesh, optimizer, loss, seed,
                         ema_decay, column_learning_rate, deferred: 'DeferredDecay | None' = None):
  """train_step for a sampled loss whose output layer moves in the columns the step scored alone (the
  batch's targets and the noise samples; train.output_layer_update='sampled_columns').

  The output layer's gradient is zero outside those columns, so it is taken with respect to the
  gathered columns [K + 1, B + k] instead of the whole layer (whose gradient would be a dense array
  zero-filled and scattered into), and added to them after the optimiser's step, which with that zero
  gradient leaves the layer its weight decay alone: one pass over the layer a step, in place. The same
  step as train_step's in exact arithmetic for an optimiser whose update is -lr (g + decay) (paper_sgd):
  p + s(-lr (g + wd p)) is p + s(-lr wd p) - s lr g. `column_learning_rate(step)` is its lr.

  C is moved the same way where the model reads it only through a gather (the 2003 model with the
  scatter's gradient, `rows_apart`): the context's rows are gathered here and the model reads them, so
  their gradient is [batch, n - 1, m] (with a distant block, the window's and the block's, in the layout
  bengio2003.gather_context_rows gives them), added to C's rows after the decay's pass, instead of a [|V|, m]
  array of zeros scattered into (and, on several devices, summed over them).

  deferred (a DeferredDecay): the state holds the output layer's weight rows and C divided by its scale,
  and the step multiplies the scale by its decay instead of passing over them; returns (state, loss,
  the new DeferredDecay).
  """
  samples = sampled_noise.draw_noise(loss, state.step)  # shared by the whole batch
  ids = jnp.concatenate([targets, samples])
  if deferred is not None:
    columns = deferred.columns(state, ids, mesh)
  else:
    columns = vocab_softmax.gather_columns(model.output_layer(state.params), ids, mesh=mesh)
  if targets.shape[0] % mesh.devices.size == 0:  # the features and the loss need no vocabulary split: every device
    every = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(('data', 'model')))  # takes its rows
    contexts, targets = (jax.lax.with_sharding_constraint(x, every) for x in (contexts, targets))

  apart = rows_apart(model)
  # The context's rows of C, gathered here: the model reads them instead of C, whose gradient is then zero
  context_rows = bengio2003.gather_context_rows(state.params['C'], contexts, model) if apart else None
  row_ids = bengio2003.context_row_ids(contexts, model) if apart else None
  if deferred is not None and apart:
    context_rows = jax.tree.map(lambda rows: rows * deferred.scale, context_rows)

  def loss_fn(params, columns, context_rows):
    key = dropout_key(seed, state.step) if model.has_dropout else None
    if deferred is not None:  # in the model's layout (its features read no output layer: XLA drops the transpose)
      params = deferred.swapped(params)
    feats = features(model, params, contexts, key, **({} if context_rows is None else {'context_rows': context_rows}))
    return jnp.mean(vocab_softmax.sampled_loss_of_columns(feats, columns, targets, samples, loss.log_noise,
                                                          kind=loss.kind))

  loss_value, (grads, column_grads, row_grads) = jax.value_and_grad(loss_fn, argnums=(0, 1, 2))(
      state.params, columns, context_rows)
  step_size = lr_scale * column_learning_rate(state.step)
  if deferred is None:
    return _updated(state, grads, loss_value, lr_scale, optimizer, ema_decay,
                    columns=(ids, -step_size * column_grads, mesh),
                    rows=(row_ids, jax.tree.map(lambda g: -step_size * g, row_grads)) if apart else None), loss_value
  # p' = (1 - step wd) p - step g, with p = scale q: the new scale, and q moved by -step g / new scale
  deferred = deferred.decayed(step_size)
  state = _updated(state, grads, loss_value, lr_scale, optimizer, ema_decay,
                   columns=(ids, -step_size * column_grads / deferred.row_scales(column_grads.shape[0]), mesh),
                   rows=(row_ids, jax.tree.map(lambda g: -step_size * g / deferred.scale, row_grads)) if apart else None,
                   kept=deferred.names(), columns_as_rows=deferred.rows_first)
  return state, loss_value, deferred


@flax.struct.dataclass
class DeferredDecay:
  """paper_sgd's weight decay of the output layer's weight rows and C, deferred within a dispatch of
  sampled_columns_step's steps (Carpenter 2008's lazy regularisation, with one scale for every row): the
  parameters are `scale` times what the state holds. A step multiplies the scale by (1 - step wd) and
  adds its gradients divided by the new scale, in place of a pass over the whole layer and C a step;
  `applied` makes the parameters whole again at the dispatch's end, one pass for all its steps. The
  same steps in exact arithmetic; in float32 a few ulps apart (the scale stays near 1: a dispatch decays
  it by far less than 1%).

  rows_first (where the vocabulary is not split: 'model' of size 1): within the call the state holds the
  output layer transposed, [padded |V|, K + 1], so that each step's gather and scatter-add of its sampled
  columns read and write contiguous rows instead of columns strided by |V| (docs/performance.md: the
  strided scatter-add was a quarter of the step at |V| 33k on a CPU); `entered` transposes it at the call's
  start, `applied` back at its end, beside the scale's pass. Transposing moves no value: the same steps."""
  scale: jax.Array
  weight_decay: float = flax.struct.field(pytree_node=False)
  covers_c: bool = flax.struct.field(pytree_node=False)  # C too (rows_apart), not the output layer alone
  rows_first: bool = flax.struct.field(pytree_node=False, default=False)

  @classmethod
  def start(cls, weight_decay: float, model, mesh) -> 'DeferredDecay':
    return cls(scale=jnp.ones((), jnp.float32), weight_decay=weight_decay, covers_c=rows_apart(model),
               rows_first=mesh.shape['model'] == 1)

  def swapped(self, params: dict) -> dict:
    """The parameters with the output layer in the other layout where rows_first (a transpose either way): the
    call's steps' layout from the model's, and the model's from theirs."""
    if not self.rows_first:
      return params
    return {**params, output_layer.OUTPUT: params[output_layer.OUTPUT].T}

  def entered(self, state: TrainState) -> TrainState:
    """The state as the call's steps hold it."""
    return state.replace(params=self.swapped(state.params))

  def columns(self, state: TrainState, ids, mesh) -> jax.Array:
    """The output layer's columns `ids` [K + 1, len(ids)], scaled: what the parameters hold there."""
    layer = state.params[output_layer.OUTPUT]
    gathered = layer[ids].T if self.rows_first else vocab_softmax.gather_columns(layer, ids, mesh=mesh)
    return gathered * self.row_scales(gathered.shape[0])

  def decayed(self, step_size) -> 'DeferredDecay':
    return self.replace(scale=self.scale * (1.0 - step_size * self.weight_decay))

  def row_scales(self, rows: int) -> jax.Array:
    """[rows, 1]: the scale on the output layer's weight rows, 1 on its bias row (not decayed)."""
    return jnp.where(jnp.arange(rows)[:, None] == rows - 1, 1.0, self.scale)

  def names(self) -> tuple[str, ...]:
    return (output_layer.OUTPUT, 'C') if self.covers_c else (output_layer.OUTPUT,)

  def applied(self, state: TrainState) -> TrainState:
    """The parameters whole again: the scale applied, and the output layer in its own layout."""
    params = dict(state.params)
    layer = params[output_layer.OUTPUT]
    if self.rows_first:  # the scale's pass and the transpose back, one pass
      params[output_layer.OUTPUT] = (layer * self.row_scales(layer.shape[1]).T).T
    else:
      params[output_layer.OUTPUT] = layer * self.row_scales(layer.shape[0])
    if self.covers_c:
      params['C'] = params['C'] * self.scale
    return state.replace(params=params)


def defers_decay(model, step_options: dict) -> bool:
  """Whether a dispatch of several steps defers their weight decay (DeferredDecay): sampled_columns_step's
  steps with a decay, the 2003 model's (whose output layer holds no tied C), and no moving average (which
  reads every parameter every step)."""
  return (step_options.get('column_learning_rate') is not None and step_options.get('column_weight_decay', 0.0) > 0
          and not step_options.get('ema_decay', 0.0) and isinstance(model, bengio2003.NPLM))


def rows_apart(model) -> bool:
  """Whether sampled_columns_step can move C by the context's rows alone: the 2003 model, which reads C
  only through its gather, with the scatter's gradient (the other forms are for deterministic GPUs)."""
  return isinstance(model, bengio2003.NPLM) and model.embedding_gradient == 'scatter'


def train_step_in_interval(state: TrainState, contexts, targets, lr_scale, interval: Interval, **step_options):
  """train_step with its loss added to the interval: (state, {'loss': the batch's, 'interval': ...})."""
  state, loss = train_step(state, contexts, targets, lr_scale, **step_options)
  return state, {'loss': loss, 'interval': interval.add(loss, state.step)}


def eval_step(params, contexts, targets, *, model, mesh, chunk_size=0, vocab_block=-1, softmax_kernel='xla',
              softmax_kernel_tuning=''):
  feats, out = features(model, params, contexts), model.output_layer(params)
  return chunked_map(lambda ft: vocab_softmax.token_nll(ft[0], out, ft[1], mesh=mesh, compute_dtype=model.compute_dtype,
                                                        vocab_block=vocab_block, kernel=softmax_kernel,
                                                        kernel_tuning=softmax_kernel_tuning),
                     (feats, targets), chunk_size)


def train_resident_steps(state: TrainState, ids, order, lr_scale, interval: Interval, num_steps, *, max_steps: int,
                   steps_per_epoch: int, batch_size: int, mesh, model, carry_cast_layer: str = 'off',
                   **step_options):
  """`num_steps` (1 .. max_steps, a traced count) training steps in one call, each gathering its batch
  on the devices from the train split's resident ids and the epoch's permutation `order`
  (device_data). The steps lie in one epoch. Returns the state and the interval with their losses.

  max_steps 1 is the plain step with the gather before it; more are a loop of it whose length is an
  argument, so one program runs every dispatch between two boundaries at full length.
  carry_cast_layer (train.carry_cast_layer: 'rows' or 'whole', cast_output_layer's forms; 'off'), in that
  loop: the output layer cast to the compute dtype once a call and then by each step after its update,
  carried to the next step, which takes it instead of casting the layer's rows (a pass that reads them
  whole, 320 MB at the research size) at its start; the same numbers (within float32's rounding: 'whole'
  adds a term of 0 to each sum), the cast where XLA can make it in the update's own pass over the layer
  ('whole' has that pass's shape). Nothing is carried for float32 matmuls (no cast) or a sampled loss.
  A loop of sampled_columns_step's steps with a weight decay defers it to the call's end (defers_decay,
  DeferredDecay): one pass over the output layer and C a call instead of one a step.
  """
  def batch(state):
    return device_data.step_batch(ids, order, state.step % steps_per_epoch, batch_size=batch_size,
                                  context_size=model.context_size, mesh=mesh)

  def one(_, carry):
    state, interval, cast = carry
    contexts, targets = batch(state)
    state, loss = train_step(state, contexts, targets, lr_scale, model=model, mesh=mesh, cast_layer=cast,
                             **step_options)
    return (state, interval.add(loss, state.step),
            None if cast is None else cast_output_layer(model, state.params, carry_cast_layer))

  def one_deferred(_, carry):
    state, interval, deferred = carry
    contexts, targets = batch(state)
    state, loss, deferred = sampled_columns_step(
        state, contexts, targets, lr_scale, model=model, mesh=mesh, deferred=deferred,
        **{key: step_options[key] for key in ('optimizer', 'loss', 'seed', 'ema_decay', 'column_learning_rate')})
    return state, interval.add(loss, state.step), deferred

  if max_steps == 1:
    return one(0, (state, interval, None))[:2]
  if defers_decay(model, step_options):
    deferred = DeferredDecay.start(step_options['column_weight_decay'], model, mesh)
    state, interval, deferred = jax.lax.fori_loop(0, num_steps, one_deferred, (deferred.entered(state), interval,
                                                                               deferred))
    return deferred.applied(state), interval
  carried = carry_cast_layer != 'off' and step_options.get('loss') is None
  cast = cast_output_layer(model, state.params, carry_cast_layer) if carried else None
  return jax.lax.fori_loop(0, num_steps, one, (state, interval, cast))[:2]


def eval_resident(params, ids, positions, *, model, mesh, **eval_options):
  """Per-token NLLs [G, B] of a split's batches of positions [G, B], gathered from its resident ids,
  one batch after the other in one call (one batch's logits at a time)."""
  def one(batch_positions):
    batch_positions = jax.lax.with_sharding_constraint(batch_positions, sharding.batch_sharding(mesh, 1))
    contexts, targets = device_data.windows(ids, batch_positions, model.context_size)
    return eval_step(params, contexts, targets, model=model, mesh=mesh, **eval_options)
  return jax.lax.map(one, positions)


def with_matmul_precision(fn, precision: str, platform: str):
  """fn traced with float32 matmuls at `precision` ('highest': exact; 'default': the backend's own, which
  XLA's matmuls take without a context and the fused kernels' from this one: softmax_kernel._dot).

  On CPUs float32 matmuls are exact whatever the precision asked, so their programs stay as they were.
  """
  if platform == 'cpu':
    return fn

  def traced(*args, **kwargs):
    with jax.default_matmul_precision(precision):
      return fn(*args, **kwargs)
  # jit names its program after the function (jit_train_step): profiles find the step by it
  traced.__name__ = getattr(fn, '__name__', None) or getattr(getattr(fn, 'func', None), '__name__', 'step')
  return traced


def output_layer_gradient_options(train_config) -> dict:
  """compile_steps' options for the output layer's gradient from config.train (older configs lack them)."""
  return {'output_layer_gradient_dtype': train_config.get('output_layer_gradient_dtype', 'float32'),
          'output_layer_gradient_form': train_config.get('output_layer_gradient_form', 'as_traced')}


def check_output_layer_gradient_dtype(gradient_dtype: str, compute_dtype: str) -> None:
  """One line of UserError for a bfloat16 output-layer gradient with float32 matmuls: the gradient is rounded
  where the bfloat16 matmul writes it, and a float32 matmul's would only be rounded for nothing."""
  if gradient_dtype != 'float32' and jnp.dtype(compute_dtype) == jnp.float32:
    raise UserError(f'train.output_layer_gradient_dtype={gradient_dtype!r} is the dtype the output layer\'s bfloat16 '
                    f'gradient matmul writes, but these matmuls run in float32 (model.compute_dtype resolved to '
                    f'{compute_dtype}); add --config.model.compute_dtype=bfloat16 or set '
                    '--config.train.output_layer_gradient_dtype=float32')


@dataclasses.dataclass(frozen=True)
class CompiledSteps:
  """The jitted steps of a model on a mesh. The training parts are None when built for evaluation."""
  mesh: Mesh
  abstract_params: Any
  param_shardings: Any
  eval: Callable  # (params, contexts, targets) -> nll [batch]
  eval_resident: Callable  # (params, split ids, positions [G, B]) -> nll [G, B] (device_data)
  init: Callable[[], TrainState] | None = None
  state_from_params: Callable | None = None  # params -> a fresh TrainState around them
  train: Callable | None = None  # (state, contexts, targets, lr_scale=1.0, interval=None) -> (state, metrics)
  lower_train: Callable | None = None  # (state, contexts, targets) -> the lowered train step (memory_analysis)
  resident_steps: Callable | None = None  # max_steps -> jitted (state, ids, order, lr_scale, interval, num_steps)
  state_shardings: Any = None
  abstract_state: Any = None


def compile_steps(model, optimizer: optax.GradientTransformation | None, mesh: Mesh,
                  unigram_counts=None, loss: sampled_noise.SampledLoss | None = None, chunk_size: int = 0,
                  seed: int = 0, vocab_block: int = -1, matmul_precision: str = 'highest',
                  steps_per_epoch: int = 0, batch_size: int = 0, axis_rules=None,
                  softmax_kernel: str = 'xla', softmax_kernel_tuning: str = '',
                  ema_decay: float = 0.0, carry_cast_layer: str = 'off',
                  output_layer_gradient_dtype: str = 'float32',
                  output_layer_gradient_form: str = 'as_traced',
                  column_learning_rate: optax.Schedule | None = None,
                  column_weight_decay: float = 0.0) -> CompiledSteps:
  """Jitted init/train/eval with explicit shardings; parameters are born sharded, drawn from `seed`.

  optimizer None: evaluation only. steps_per_epoch and batch_size shape the resident-data dispatch.
  axis_rules (config.mesh.axis_rules) places the parameters; None: the output layer's vocabulary on
  'model', the rest replicated. softmax_kernel: 'xla' or a fused kernel (config.train.softmax_kernel
  resolved), with softmax_kernel_tuning's settings (config.train.softmax_kernel_tuning).
  ema_decay > 0 (config.optimizer.ema_decay): the train state carries the parameters' moving average.
  carry_cast_layer (config.train.carry_cast_layer, 'rows' or 'whole'): the loop of steps carries the output
  layer's cast copy from step to step (train_resident_steps).
  output_layer_gradient_dtype (config.train.output_layer_gradient_dtype): 'bfloat16' rounds the output layer's
  gradient to bfloat16 where its matmul writes it (vocab_softmax.token_nll); it needs bfloat16 matmuls.
  output_layer_gradient_form (config.train.output_layer_gradient_form): how XLA's paths make that gradient's
  matmul (vocab_softmax.GRADIENT_FORMS; the same numbers). output_layer_gradient_options reads both.
  column_learning_rate (train.output_layer_update resolved to 'sampled_columns': optim.column_learning_rate):
  a sampled loss's steps update the output layer in the columns they scored (sampled_columns_step);
  column_weight_decay (optimizer.weight_decay there): a dispatch of several steps defers it (DeferredDecay).
  """
  precise = functools.partial(with_matmul_precision, precision=matmul_precision,
                              platform=mesh.devices.flat[0].platform)
  replicated = sharding.replicated(mesh)
  ctx_sh, tgt_sh = sharding.batch_sharding(mesh, 2), sharding.batch_sharding(mesh, 1)
  abstract_params = jax.eval_shape(lambda: output_layer.init_params(model, unigram_counts, seed))
  axis_rules = axis_rules or {'vocab': 'model'}
  logical = output_layer.logical_specs(model)
  sharding.check_param_divisibility(mesh, abstract_params, logical, axis_rules)
  param_sh = sharding.named_shardings(mesh, logical, axis_rules)
  eval_options = dict(model=model, mesh=mesh, chunk_size=chunk_size, vocab_block=vocab_block,
                      softmax_kernel=softmax_kernel, softmax_kernel_tuning=softmax_kernel_tuning)
  # Per-token NLLs come back replicated (B scalars) so every host of a multi-host job can read them.
  evaluate = jax.jit(precise(functools.partial(eval_step, **eval_options)),
                     in_shardings=(param_sh, ctx_sh, tgt_sh), out_shardings=replicated)
  evaluate_resident = jax.jit(precise(functools.partial(eval_resident, **eval_options)),
                              in_shardings=(param_sh, replicated, replicated), out_shardings=replicated)
  compiled = CompiledSteps(mesh=mesh, abstract_params=abstract_params, param_shardings=param_sh, eval=evaluate,
                           eval_resident=evaluate_resident)
  if optimizer is None:
    return compiled
  check_output_layer_gradient_dtype(output_layer_gradient_dtype, model.compute_dtype)

  def fresh_state(params):  # the average starts at the parameters themselves
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params),
                      average=params if ema_decay > 0 else None)

  def init_state():
    return fresh_state(output_layer.init_params(model, unigram_counts, seed))

  def boxed_state():  # the optimiser state initialised from boxed parameters carries their axis names
    return fresh_state(output_layer.boxed_params(model, seed))

  abstract = jax.eval_shape(init_state)
  state_sh = sharding.named_shardings(mesh, nn.get_partition_spec(jax.eval_shape(boxed_state)), axis_rules)
  step_options = dict(optimizer=optimizer, loss=loss, chunk_size=chunk_size, seed=seed, vocab_block=vocab_block,
                      softmax_kernel=softmax_kernel, softmax_kernel_tuning=softmax_kernel_tuning, ema_decay=ema_decay,
                      output_layer_gradient_dtype=output_layer_gradient_dtype,
                      output_layer_gradient_form=output_layer_gradient_form,
                      column_learning_rate=column_learning_rate, column_weight_decay=column_weight_decay)
  jitted_train = jax.jit(
      precise(functools.partial(train_step_in_interval, model=model, mesh=mesh, **step_options)),
      in_shardings=(state_sh, ctx_sh, tgt_sh, replicated, replicated),
      out_shardings=(state_sh, replicated), donate_argnums=0)

  def train(state, contexts, targets, lr_scale=1.0, interval=None):
    return jitted_train(state, contexts, targets, np.float32(lr_scale), interval or Interval.start())

  @functools.cache
  def resident_steps(max_steps: int):
    return jax.jit(precise(functools.partial(
        train_resident_steps, max_steps=max_steps, steps_per_epoch=steps_per_epoch, batch_size=batch_size, mesh=mesh,
        model=model, carry_cast_layer=carry_cast_layer, **step_options)), in_shardings=(state_sh,) + (replicated,) * 5,
        out_shardings=(state_sh, replicated), donate_argnums=0)

  from_params = jax.jit(fresh_state, in_shardings=(state_sh.params,), out_shardings=state_sh)
  return dataclasses.replace(
      compiled, init=jax.jit(init_state, out_shardings=state_sh), state_from_params=from_params, train=train,
      lower_train=lambda state, contexts, targets: jitted_train.lower(state, contexts, targets, np.float32(1.0),
                                                                      Interval.start()),
      resident_steps=resident_steps, state_shardings=state_sh, abstract_state=abstract)
