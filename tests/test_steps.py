"""The pure train and eval steps: random streams, deterministic evaluation, and the interval the
devices accumulate (the mean loss the loop logs). Each test fails when the thing it names breaks."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nplm_jax import config as config_lib
from nplm_jax.models import family as model_family
from nplm_jax.parallel import sharding
from nplm_jax.training import integrity
from nplm_jax.training import optim
from nplm_jax.training import sampled_noise
from nplm_jax.training import steps as steps_lib
from tests import jaxprs

pytestmark = pytest.mark.fast

VOCAB = 41
FAMILIES = {
    'bengio2003': dict(kind='bengio2003', n=4, m=8, h=16, direct=True, feature_dropout=0.3, hidden_dropout=0.3),
    # the 2003 model with a distant block: 3 words before its window, weighed by 2 kernels
    'bengio2003_distant': dict(kind='bengio2003', n=4, m=8, h=16, direct=True, feature_dropout=0.3, hidden_dropout=0.3,
                               distant_tokens=3, distant_kernels=2),
    'revisited': dict(kind='revisited', n=4, m=8, h=16, depth=2, distant_tokens=3, distant_kernels=1, tied=True,
                      layer_norm=True, feature_dropout=0.3, hidden_dropout=0.3),
}


def adamw():
  config = config_lib.base_config().optimizer
  config.update(name='adamw', learning_rate=1e-2)
  return optim.make_optimizer(config, 16)


def built(family: str, steps_per_epoch: int = 0, ema_decay: float = 0.0, carry_cast_layer: str = 'off',
          **overrides):
  config = config_lib.base_config()
  config.model.update(FAMILIES[family])
  config.model.update(overrides)
  config.model.vocab_pad_multiple = 8
  model = model_family.from_config(config.model, VOCAB, 'cpu')
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  compiled = steps_lib.compile_steps(model, adamw(), mesh, seed=3, axis_rules=dict(config.mesh.axis_rules),
                                     steps_per_epoch=steps_per_epoch, batch_size=16, ema_decay=ema_decay,
                                     carry_cast_layer=carry_cast_layer)
  return model, mesh, compiled


def moved(state, seed=0):
  """The state with every parameter moved off its start (the 2003 output layer starts at zero, where
  the features, and so their dropout, do not change the loss)."""
  leaves, tree = jax.tree.flatten(state.params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  return state.replace(params=jax.tree.unflatten(
      tree, [x + 0.2 * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]))


def batch(model, rows=16, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.integers(0, VOCAB, (rows, model.context_size)).astype(np.int32),
          rng.integers(0, VOCAB, (rows,)).astype(np.int32))


def step_loss(model, mesh):
  """The pure train step's loss as a function of (state, contexts, targets), jitted once (op by op, a
  step of these models takes seconds)."""
  step = jax.jit(lambda state, contexts, targets: steps_lib.train_step(
      state, contexts, targets, model=model, mesh=mesh, optimizer=adamw(), seed=3)[1])
  return lambda state, contexts, targets: float(step(state, contexts, targets))


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_dropout_masks_differ_between_consecutive_steps(family):
  """The same parameters and batch at steps 0 and 1: the losses differ only through the masks, which
  are a function of (seed, step). A key reused at every step gives equal losses."""
  model, mesh, compiled = built(family)
  state = moved(compiled.init())
  contexts, targets = batch(model)
  loss = step_loss(model, mesh)
  at0 = loss(state, contexts, targets)
  at1 = loss(state.replace(step=jnp.ones((), jnp.int32)), contexts, targets)
  again = loss(state, contexts, targets)
  assert at0 == again  # a function of the step ...
  assert at0 != at1  # ... that changes with it


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_evaluation_applies_no_dropout(family):
  """Evaluation of a model with dropout equals that of the same parameters in the same model without
  it (dropout draws no parameters): no mask, whatever key a step would have."""
  model, _, compiled = built(family)
  _, _, plain = built(family, feature_dropout=0.0, hidden_dropout=0.0)
  params = moved(compiled.init()).params
  contexts, targets = batch(model, seed=1)
  with_dropout = np.asarray(compiled.eval(params, contexts, targets))
  without = np.asarray(plain.eval(params, contexts, targets))
  np.testing.assert_array_equal(with_dropout, without)
  train_mode = np.asarray(steps_lib.features(model, params, contexts, jax.random.PRNGKey(0)))
  eval_mode = np.asarray(steps_lib.features(model, params, contexts))
  assert not np.array_equal(train_mode, eval_mode)  # the dropout is there to be left out


def loop_carries(jaxpr) -> list:
  """The avals every while loop in `jaxpr` (sub-jaxprs included) carries from one iteration to the next."""
  return [v.aval for eqn in jaxprs.equations(jaxpr) if eqn.primitive.name == 'while' for v in eqn.outvars]


def resident_inputs(mesh, model, steps_per_epoch: int, batch_size: int = 16):
  """A train split's ids and an epoch's order, on the devices (device_data), of random words."""
  from nplm_jax.training import device_data  # pylint: disable=g-import-not-at-top
  ids = np.random.default_rng(2).integers(0, VOCAB, steps_per_epoch * batch_size + model.context_size).astype(np.int32)
  order = np.random.default_rng(3).permutation(steps_per_epoch * batch_size).astype(np.int32)
  return device_data.put_replicated(mesh, ids), device_data.put_replicated(mesh, order)


def test_a_dispatch_of_several_steps_reports_the_mean_of_their_losses():
  """A resident dispatch of 4 steps adds each step's loss to the interval (not only its first or
  last): the mean equals that of the same 4 steps run one a call on the same batches."""
  steps_per_epoch = 6
  model, mesh, compiled = built('bengio2003', steps_per_epoch=steps_per_epoch)
  ids_d, order_d = resident_inputs(mesh, model, steps_per_epoch)

  singles, state = [], compiled.init()
  run_one = compiled.resident_steps(1)
  for _ in range(4):
    state, interval = run_one(state, ids_d, order_d, np.float32(1.0), steps_lib.Interval.start(), np.int32(1))
    singles.append(float(interval.loss_sum))
  state, interval = compiled.resident_steps(5)(compiled.init(), ids_d, order_d, np.float32(1.0),
                                         steps_lib.Interval.start(), np.int32(4))
  assert int(state.step) == 4 and int(interval.steps) == 4  # the count asked, not the program's most
  np.testing.assert_allclose(interval.mean_loss(), np.mean(singles), rtol=1e-6)
  assert len(set(singles)) == 4  # distinct losses: a first or last one alone would not match the mean


# The CPU emitters users' runs compile with (the suite's use XLA's older ones, which compile faster: conftest).
# Each emitter rounds in its own way (where it fuses a multiply and an add), so a claim that two programs give
# the same bits is checked with users' emitters.
USERS_CPU_EMITTERS = {'xla_cpu_use_fusion_emitters': True}
# XLA's default optimisation level, as users' runs compile (the suite's CPU runs compile at -O0: conftest)
XLA_DEFAULT_OPTIMISATION = {'xla_backend_optimization_level': 3, **USERS_CPU_EMITTERS}


def users_train_step(compiled, state, contexts, targets):
  """compiled.train as users' runs compile it on a CPU (USERS_CPU_EMITTERS): (state, contexts, targets) ->
  (state, metrics)."""
  executable = compiled.lower_train(state, contexts, targets).compile(compiler_options=USERS_CPU_EMITTERS)
  return lambda state, contexts, targets: executable(state, contexts, targets, np.float32(1.0),
                                                     steps_lib.Interval.start())


def bfloat16_dispatch(family: str, carry_cast_layer: str, default_level: bool = True):
  """A resident dispatch of 4 bfloat16 steps (6 an epoch) from moved parameters: its (state, interval), and
  the avals its loop carries. Compiled at XLA's default level (else the suite's): there the forms agree
  within float32's rounding; at -O0 LLVM's code for the plain form rounds otherwise (8e-6 in the loss),
  and the bfloat16 casts of 4 steps make that 1e-3 in some parameters."""
  model, mesh, compiled = built(family, steps_per_epoch=6, compute_dtype='bfloat16', carry_cast_layer=carry_cast_layer)
  ids, order = resident_inputs(mesh, model, 6)
  args = (moved(compiled.init()), ids, order, np.float32(1.0), steps_lib.Interval.start(), np.int32(4))
  dispatch = compiled.resident_steps(5)
  executable = dispatch.lower(*args).compile(compiler_options=XLA_DEFAULT_OPTIMISATION if default_level else None)
  return executable(*args), loop_carries(jax.make_jaxpr(dispatch)(*args).jaxpr)


@functools.cache
def plain_bfloat16_dispatch(family: str):
  """bfloat16_dispatch without a carried copy: the reference of both forms (made once a family)."""
  return bfloat16_dispatch(family, 'off')


@pytest.mark.parametrize('form', ['whole', 'rows'])
@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_a_loop_that_carries_the_cast_layer_trains_as_one_that_casts_it(family, form, monkeypatch):
  """train.carry_cast_layer: a dispatch of 4 bfloat16 steps that carries the output layer's cast copy (whole,
  or its weight rows) from each update to the next step ends on the parameters, optimiser state and losses
  of one whose steps cast the layer's rows themselves (a whole copy is multiplied with f given a column of
  zeros: float32 sums of one more term, 0); the loop's carry holds the copy. Control: a carried copy that is
  not the layer's (zeros) changes the losses, so the steps do take the carried one."""
  (state, interval), carried = bfloat16_dispatch(family, form)
  (want_state, want_interval), plain = plain_bfloat16_dispatch(family)
  assert int(state.step) == 4
  np.testing.assert_allclose(float(interval.loss_sum), float(want_interval.loss_sum), rtol=1e-6)
  for got, want in zip(jax.tree.leaves((state.params, state.opt_state)),
                       jax.tree.leaves((want_state.params, want_state.opt_state))):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6)
  bf16_carried = lambda avals: [a for a in avals if getattr(a, 'dtype', None) == jnp.bfloat16 and a.ndim == 2]
  assert len(bf16_carried(carried)) == 1 and not bf16_carried(plain)
  monkeypatch.setattr(steps_lib, 'cast_output_layer', lambda model, params, form: jnp.zeros_like(
      model.output_layer(params)[slice(None) if form == 'whole' else slice(-1)], jnp.bfloat16))
  (_, stale), _ = bfloat16_dispatch(family, form, default_level=False)  # the levels differ by 1e-4 here
  assert abs(float(stale.loss_sum) - float(want_interval.loss_sum)) > 1e-3  # 0.6 to 1.0


def test_a_carried_cast_layer_ends_where_shorter_dispatches_end():
  """With train.carry_cast_layer='whole', 4 steps in one dispatch and in two dispatches of 2 (each casting the
  layer afresh at its start, as a resumed run does) end on the same parameters bit for bit: the carried copy
  is the cast of the parameters it goes with, whatever the dispatch boundaries."""
  steps_per_epoch = 6
  model, mesh, compiled = built('bengio2003', steps_per_epoch=steps_per_epoch, compute_dtype='bfloat16',
                                carry_cast_layer='whole')
  ids, order = resident_inputs(mesh, model, steps_per_epoch)
  run = lambda state, steps: compiled.resident_steps(5)(state, ids, order, np.float32(1.0), steps_lib.Interval.start(),
                                                        np.int32(steps))[0]
  whole = run(moved(compiled.init()), 4)
  halves = run(run(moved(compiled.init()), 2), 2)
  assert int(halves.step) == 4
  for got, want in zip(jax.tree.leaves(halves.params), jax.tree.leaves(whole.params)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_the_moving_average_follows_the_parameters_and_leaves_them_alone(family):
  """optimizer.ema_decay: after each step the state's average is a + (1 - d_t) (p - a), d_t =
  min(decay, (1 + t) / (10 + t)), from the initial parameters, p the step's new parameters; and the
  parameters are those of the same steps without an average."""
  decay = 0.8
  model, _, plain = built(family)
  _, _, averaged = built(family, ema_decay=decay)
  contexts, targets = batch(model)
  state_a, state_b = plain.init(), averaged.init()
  assert state_a.average is None
  expected = jax.device_get(state_b.params)
  plain_step, averaged_step = (users_train_step(c, s, contexts, targets) for c, s in ((plain, state_a), (averaged, state_b)))
  for t in range(12):
    state_a, _ = plain_step(state_a, contexts, targets)
    state_b, _ = averaged_step(state_b, contexts, targets)
    params = jax.device_get(state_b.params)
    keep = np.float32(1 - min(decay, (1 + t) / (10 + t)))
    expected = jax.tree.map(lambda e, p, keep=keep: e + keep * (p - e), expected, params)
    jax.tree.map(np.testing.assert_array_equal, params, jax.device_get(state_a.params))
  assert steps_lib.evaluated_params(state_b) is state_b.average and steps_lib.evaluated_params(state_a) is state_a.params
  average = jax.device_get(state_b.average)
  jax.tree.map(lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-7), average, expected)
  assert not any(jax.tree.leaves(jax.tree.map(np.allclose, average, params)))  # an average, not the last parameters


def test_the_interval_marks_the_first_nonfinite_step():
  interval = steps_lib.Interval.start()
  for step, loss in [(1, 2.0), (2, np.inf), (3, np.nan)]:
    interval = interval.add(jnp.float32(loss), step)
  assert int(interval.first_nonfinite) == 2 and int(interval.steps) == 3


def test_two_swapped_elements_of_a_saved_array_change_its_checksum():
  rng = np.random.default_rng(0)
  for dtype in (np.float32, jnp.bfloat16, np.int32):
    x = np.asarray(rng.normal(size=(7, 9)) * 100).astype(dtype)
    swapped = x.copy()
    swapped[1, 2], swapped[5, 6] = x[5, 6], x[1, 2]
    assert x[1, 2] != x[5, 6]
    assert integrity.mismatches({'w': jnp.asarray(swapped)}, integrity.checksums({'w': jnp.asarray(x)})) == ["['w']"]


@pytest.mark.parametrize('compute_dtype', ['float32', 'bfloat16'])
def test_the_compiled_step_copies_no_parameter(monkeypatch, compute_dtype):
  """Every parameter's update follows every read of the parameters (steps.after_every_read), so XLA
  updates each in place without first copying it whole: the output layer is read again for the features'
  gradient, which its update did not otherwise wait for (at research size on CPU, 320 MB read and written
  a step). Positive control: without the ordering, the compiled step copies the output layer."""
  import re  # pylint: disable=g-import-not-at-top

  def parameter_copies():
    model, mesh, compiled = built('bengio2003', compute_dtype=compute_dtype)
    with jax.set_mesh(mesh):
      state = compiled.init()
      contexts, targets = (sharding.put_batch(mesh, x) for x in batch(model))
      hlo = compiled.lower_train(state, contexts, targets).compile().as_text()
    return re.findall(r'copy\(%state_params__(\w+?)__', hlo[hlo.index('ENTRY'):])

  assert parameter_copies() == []
  monkeypatch.setattr(steps_lib, 'after_every_read', lambda grads, loss_value: grads)
  assert 'output' in parameter_copies()


def sampled_steps(kind: str, column_update: bool, mesh, steps: int = 5, family: str = 'bengio2003'):
  """The 2003 model's parameters after `steps` paper_sgd steps of a sampled loss from the same start and
  batches, its output layer updated densely or in the sampled columns alone."""
  config = config_lib.base_config()
  config.model.update(FAMILIES[family], feature_dropout=0.0, hidden_dropout=0.0, vocab_pad_multiple=8)
  config.optimizer.update(name='paper_sgd', learning_rate=0.05, weight_decay=0.01)
  config.loss.update(name=kind, num_samples=10)
  model = model_family.from_config(config.model, VOCAB, 'cpu')
  counts = np.arange(1, VOCAB + 1, dtype=np.float64)
  loss = sampled_noise.make_sampled_loss(config.loss, counts, seed=3)
  column_lr = optim.column_learning_rate(config.optimizer, 16) if column_update else None
  compiled = steps_lib.compile_steps(model, optim.make_optimizer(config.optimizer, 16), mesh, loss=loss, seed=3,
                                     column_learning_rate=column_lr)
  with jax.set_mesh(mesh):
    state = moved(compiled.init())
    for step in range(steps):
      contexts, targets = batch(model, seed=step)
      state, _ = compiled.train(state, sharding.put_batch(mesh, contexts), sharding.put_batch(mesh, targets),
                                lr_scale=0.5 if step >= 3 else 1.0)
    return jax.device_get(state.params)


@pytest.mark.parametrize('kind,family', [('nce', 'bengio2003'), ('sampled_softmax', 'bengio2003'),
                                         ('nce', 'bengio2003_distant')])
def test_the_sampled_columns_update_takes_the_dense_update_s_steps(kind, family):
  """train.output_layer_update='sampled_columns' adds the scored columns' gradient after the weight decay's
  pass instead of forming the layer's dense gradient: the same steps in exact arithmetic (p + s(-lr(g + wd p))
  = p + s(-lr wd p) - s lr g). In float32 the two orders round differently, a few ulps of each parameter a step
  (float32's epsilon is 1.2e-7; 5 steps, parameters of order 1 moved by steps of order 0.1): within 1e-5.
  Every parameter moved, not just the columns (the decay's pass), and the step size follows lr_scale. With a
  distant block, C's rows move by the gathered window and distant rows alike, and the kernels learn."""
  mesh = sharding.make_mesh(config_lib.base_config().mesh, jax.devices()[:1])
  dense, columns = (sampled_steps(kind, update, mesh, family=family) for update in (False, True))
  start = sampled_steps(kind, True, mesh, steps=0, family=family)
  for name in dense:
    np.testing.assert_allclose(columns[name], dense[name], rtol=1e-5, atol=1e-5, err_msg=name)
    assert not np.allclose(columns[name], start[name], rtol=1e-4, atol=0), name
  weights = columns['output'][:-1]
  assert (weights != start['output'][:-1]).all()  # every column decayed, sampled or not


def deferred_dispatch(steps_a_dispatch: int, weight_decay: float, steps: int = 6, mesh=None,
                      family: str = 'bengio2003', compiler_options=None):
  """The 2003 model's parameters after `steps` sampled_columns steps of NCE from resident data, run
  `steps_a_dispatch` a call (a dispatch of several defers the weight decay: steps.DeferredDecay), on `mesh`
  (None: one device), its program compiled with `compiler_options`."""
  config = config_lib.base_config()
  config.model.update(FAMILIES[family], vocab_pad_multiple=8)
  config.optimizer.update(name='paper_sgd', learning_rate=0.05, weight_decay=weight_decay)
  config.loss.update(name='nce', num_samples=10)
  model = model_family.from_config(config.model, VOCAB, 'cpu')
  loss = sampled_noise.make_sampled_loss(config.loss, np.arange(1, VOCAB + 1, dtype=np.float64), seed=3)
  mesh = mesh or sharding.make_mesh(config.mesh, jax.devices()[:1])
  compiled = steps_lib.compile_steps(model, optim.make_optimizer(config.optimizer, 16), mesh, loss=loss, seed=3,
                                     steps_per_epoch=steps, batch_size=16,
                                     column_learning_rate=optim.column_learning_rate(config.optimizer, 16),
                                     column_weight_decay=weight_decay)
  ids, order = resident_inputs(mesh, model, steps)
  with jax.set_mesh(mesh):
    state = moved(compiled.init())
    args = (ids, order, np.float32(0.5), steps_lib.Interval.start(), np.int32(steps_a_dispatch))
    dispatch = compiled.resident_steps(steps_a_dispatch).lower(state, *args).compile(compiler_options=compiler_options)
    for _ in range(steps // steps_a_dispatch):
      state, _ = dispatch(state, *args)
    return jax.device_get(state.params)


@pytest.mark.parametrize('family', ['bengio2003', 'bengio2003_distant'])
def test_a_dispatch_defers_the_weight_decay_to_its_end(family):
  """A dispatch of sampled_columns steps keeps the output layer's weight rows and C as a scale times what the
  state holds and applies the scale once at its end (steps.DeferredDecay): the same parameters as the
  steps one a call, whose every step passes over both. In float32 the two round differently: a few ulps a
  step of each parameter (order 1; float32's epsilon 1.2e-7, 6 steps): within 1e-5. The decay is real
  (0.3 per example, 16 examples a step, lr 0.05 halved: 2.4% of each weight over 6 steps, far beyond that),
  and without it nothing is deferred: the same bits either way. The distant block's rows are C's rows too."""
  one, six = deferred_dispatch(1, 0.3, family=family), deferred_dispatch(6, 0.3, family=family)
  undecayed = deferred_dispatch(1, 0.0, family=family, compiler_options=USERS_CPU_EMITTERS)
  for name in one:
    np.testing.assert_allclose(six[name], one[name], rtol=1e-5, atol=1e-5, err_msg=name)
  for name in ('C', 'output'):
    assert not np.allclose(one[name], undecayed[name], rtol=1e-3, atol=0), name
  for name, value in deferred_dispatch(6, 0.0, family=family, compiler_options=USERS_CPU_EMITTERS).items():
    np.testing.assert_array_equal(value, undecayed[name], err_msg=name)
