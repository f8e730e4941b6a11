"""Optimisers from optax, chosen by `config.optimizer.name`.

'paper_sgd' is the paper's per-example SGD expressed on mean-loss minibatch gradients: the paper
adds lr_t * grad for every example, so a batch of B examples moves B times as far per step, and
t counts examples: lr_t = B * lr_0 / (1 + r * B * step).

`optimizer.weight_decay` is on C, H and the output layer's U and W rows (the revisited family: its
linear layers' weight matrices too), never on the biases b and d, LayerNorm's parameters or the
distant-context kernels (NOT_DECAYED), and means what each optimiser's literature means by it:
- paper_sgd: the paper's L2 penalty, weight_decay * theta added to each example's gradient (so the
  step shrinks theta by lr_t * weight_decay per example);
- adamw: decoupled decay (Loshchilov & Hutter), theta shrinks by learning_rate * weight_decay per
  step whatever the gradients; typical values are 1e-2 to 1e-1.

`optimizer.mu_dtype` / `optimizer.nu_dtype` store AdamW's moments in bfloat16: less memory, and less
traffic in an update that reads and writes every parameter's moments (a research-size step's largest
cost on a GPU). The first moment is rounded to nearest (optax's mu_dtype: with b1 = 0.9 a step moves it
by 10%, far above bfloat16's 0.4% resolution). The second moment, with b2 = 0.999, moves by 0.1% a step:
rounded to nearest, most steps' changes would be lost and it would stall, so it is rounded stochastically
(up or down with probabilities that make its expectation exact; `round_to_bfloat16_stochastically`), with
random bits drawn from the run's seed and the step, so a run repeats and resumes bit for bit.

`optimizer.clip_norm` > 0 scales each step's gradients, all parameters together, to that global norm
when they exceed it (torch's clip_grad_norm_, which Sun & Iyyer's code applies at 0.25), before either
optimiser sees them; the weight decay is not clipped.
"""

import jax
import jax.numpy as jnp
import optax

from nplm_jax.models import output_layer


# Biases (d; the revisited family's *_bias and LayerNorm's scale and bias) and the distant-context
# kernels (weightings, started at the block's mean) are not decayed.
NOT_DECAYED = ('d', 'bias', 'scale', 'distant_kernels')


def decay_weights_not_biases(weight_decay: float) -> optax.GradientTransformation:
  """updates + weight_decay * params on C, H and the output layer's weight rows; d and the output
  layer's bias row are left alone (optax's own masks select whole parameters, not rows)."""
  def factor(path, param):
    name = path[-1].key
    if name in NOT_DECAYED or name.endswith('_bias'):
      return 0.0
    if name == output_layer.OUTPUT:
      return jnp.asarray(output_layer.bias_row_mask(param.shape))
    return 1.0

  def update(updates, state, params):
    factors = jax.tree_util.tree_map_with_path(factor, params)
    return jax.tree.map(lambda u, p, f: u + weight_decay * f * p, updates, params, factors), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def paper_schedule(learning_rate: float, decay_rate: float, batch_size: int) -> optax.Schedule:
  def schedule(step):
    return batch_size * learning_rate / (1.0 + decay_rate * batch_size * step)
  return schedule


def make_optimizer(opt_config, batch_size: int, run_steps: int | None = None,
                   seed: int = 0) -> optax.GradientTransformation:
  """`run_steps`: the run's planned length, which optimizer.cosine_decay_steps = -1 decays over; `seed`:
  the run's, for the random bits of a bfloat16 second moment's rounding (optimizer.nu_dtype)."""
  name = opt_config.name
  if name == 'paper_sgd':
    optimizer = optax.chain(
        decay_weights_not_biases(opt_config.weight_decay),
        optax.sgd(paper_schedule(opt_config.learning_rate, opt_config.decay_rate, batch_size)))
  elif name == 'adamw':  # optax.adamw, with the decay by rows
    optimizer = optax.chain(
        scale_by_adam(opt_config, seed),
        decay_weights_not_biases(opt_config.weight_decay),
        optax.scale_by_learning_rate(adamw_schedule(opt_config, run_steps)))
  else:
    raise ValueError(f'optimizer {name!r} has no implementation (config.validate lists the names)')
  clip_norm = opt_config.get('clip_norm', 0.0)  # configs older than the key: no clipping
  return with_gradients_clipped(optimizer, clip_norm) if clip_norm > 0 else optimizer


def column_learning_rate(opt_config, batch_size: int) -> optax.Schedule:
  """paper_sgd's learning rate by step (steps.sampled_columns_step adds the columns' step with it)."""
  if opt_config.name != 'paper_sgd':
    raise ValueError(f'optimizer {opt_config.name!r} has no learning rate of the gradient alone')
  return paper_schedule(opt_config.learning_rate, opt_config.decay_rate, batch_size)


def with_gradients_clipped(optimizer: optax.GradientTransformation, max_norm: float) -> optax.GradientTransformation:
  """`optimizer` fed gradients scaled to global norm max_norm where theirs is larger. Its state is
  `optimizer`'s own (clipping keeps none), so the state's layout does not depend on clip_norm."""
  clip = optax.clip_by_global_norm(max_norm)

  def update(grads, state, params=None):
    clipped, _ = clip.update(grads, clip.init(grads))
    return optimizer.update(clipped, state, params)

  return optax.GradientTransformation(optimizer.init, update)


def first_moment_dtype(opt_config) -> jnp.dtype:
  """AdamW's first moment's dtype (optimizer.mu_dtype; configs older than the key: float32)."""
  return jnp.dtype(opt_config.get('mu_dtype', 'float32'))


def second_moment_dtype(opt_config) -> jnp.dtype:
  """AdamW's second moment's dtype (optimizer.nu_dtype; configs older than the key: float32)."""
  return jnp.dtype(opt_config.get('nu_dtype', 'float32'))


def scale_by_adam(opt_config, seed: int = 0) -> optax.GradientTransformation:
  """optax's scale_by_adam, its second moment kept in optimizer.nu_dtype (bfloat16: stochastically rounded)."""
  adam = optax.scale_by_adam(b1=opt_config.b1, b2=opt_config.b2, mu_dtype=first_moment_dtype(opt_config))
  if second_moment_dtype(opt_config) == jnp.float32:
    return adam
  return with_second_moment_in_bfloat16(adam, seed)


def with_second_moment_in_bfloat16(adam: optax.GradientTransformation, seed: int) -> optax.GradientTransformation:
  """`adam` (optax.scale_by_adam) with its state's nu stored in bfloat16. Each update widens nu to float32,
  lets `adam` update it and scale the step with the exact value, then stores it stochastically rounded,
  each parameter's bits salted from (seed, the state's step count, its place in the tree): a run repeats
  and resumes bit for bit. The state keeps optax's layout (a ScaleByAdamState), only nu's dtype differs."""
  def init(params):
    state = adam.init(params)
    return state._replace(nu=optax.tree_utils.tree_cast(state.nu, jnp.bfloat16))

  def update(updates, state, params=None):
    widened = state._replace(nu=optax.tree_utils.tree_cast(state.nu, jnp.float32))
    updates, state = adam.update(updates, widened, params)
    leaves, structure = jax.tree.flatten(state.nu)
    keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), state.count), len(leaves))
    rounded = [round_to_bfloat16_stochastically(key, leaf) for key, leaf in zip(keys, leaves)]
    return updates, state._replace(nu=jax.tree.unflatten(structure, rounded))

  return optax.GradientTransformation(init, update)


def round_to_bfloat16_stochastically(key: jax.Array, x: jax.Array) -> jax.Array:
  """float32 `x` to bfloat16, each element to one of the two bfloat16 numbers around it with probability
  in proportion to its nearness, so the expectation is x (sums of many small changes are kept on average
  where rounding to nearest drops each). bfloat16 is float32's top 16 bits: 16 random bits are added to
  the 16 that are dropped, and a carry into the kept ones rounds away from zero. Infinities and NaN are
  cast as they are.

  The bits are a hash of each element's position salted by 32 bits drawn from `key` (`position_hashes`),
  not jax.random.bits of x's shape: that runs a threefry per element, 10x a pass over the array on the
  CPU (0.25 s against 0.026 s for 27 M numbers), and on a GPU would make a memory-bound update wait on
  integer arithmetic. The hash is a few integer operations, and a function of the position alone, so
  each element gets the same bits whatever the mesh splits it over."""
  x = x.astype(jnp.float32)
  bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
  noise = position_hashes(x.shape, jax.random.bits(key, (), jnp.uint32)) >> 16
  kept = (bits + noise) & jnp.uint32(0xFFFF0000)
  rounded = jax.lax.bitcast_convert_type(kept, jnp.float32).astype(jnp.bfloat16)
  return jnp.where(jnp.isfinite(x), rounded, x.astype(jnp.bfloat16))


def position_hashes(shape: tuple, salt: jax.Array) -> jax.Array:
  """uint32 per element of `shape`: its row-major position (modulo 2**32) mixed, salted, mixed again.
  Built from per-axis iotas, which XLA splits over a mesh as it splits the array."""
  position = jnp.zeros(shape, jnp.uint32)
  for axis, size in enumerate(shape):
    position = position * jnp.uint32(size) + jax.lax.broadcasted_iota(jnp.uint32, shape, axis)
  return _mix(_mix(position) ^ salt)


def _mix(h: jax.Array) -> jax.Array:
  """Chris Wellons' lowbias32: a bijection of uint32 in which every output bit depends on every input bit."""
  h = (h ^ (h >> 16)) * jnp.uint32(0x7FEB352D)
  h = (h ^ (h >> 15)) * jnp.uint32(0x846CA68B)
  return h ^ (h >> 16)


def cosine_decay_end(opt_config, run_steps: int | None) -> int:
  """The step at which optimizer.cosine_decay_steps has the rate reach 0 (0: no decay; -1: the end of
  the run, `run_steps`, which the caller must then give)."""
  decay_steps = opt_config.get('cosine_decay_steps', 0)  # configs older than the key: constant
  if decay_steps != -1:
    return decay_steps
  if not run_steps:
    raise ValueError('optimizer.cosine_decay_steps=-1 decays over the run: make_optimizer needs run_steps')
  return run_steps


def adamw_schedule(opt_config, run_steps: int | None = None) -> optax.Schedule | float:
  """AdamW's rate: a linear rise from 0 over optimizer.warmup_steps steps, then constant, or with
  optimizer.cosine_decay_steps a cosine down to 0 at that step (counted from the start, warm-up
  included; -1: at the end of the run, `run_steps`)."""
  warmup = opt_config.get('warmup_steps', 0)
  decay_steps = cosine_decay_end(opt_config, run_steps)
  if decay_steps:
    return optax.warmup_cosine_decay_schedule(0.0, opt_config.learning_rate, warmup, decay_steps, end_value=0.0)
  if not warmup:
    return opt_config.learning_rate
  return optax.linear_schedule(0.0, opt_config.learning_rate, warmup)


def learning_rate_at(opt_config, batch_size: int, step: int, run_steps: int | None = None) -> float:
  if opt_config.name == 'paper_sgd':
    return float(paper_schedule(opt_config.learning_rate, opt_config.decay_rate, batch_size)(step))
  schedule = adamw_schedule(opt_config, run_steps)
  return float(schedule(step) if callable(schedule) else schedule)
