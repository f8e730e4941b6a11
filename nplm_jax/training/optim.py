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


def make_optimizer(opt_config, batch_size: int, run_steps: int | None = None) -> optax.GradientTransformation:
  """`run_steps`: the run's planned length, which optimizer.cosine_decay_steps = -1 decays over."""
  name = opt_config.name
  if name == 'paper_sgd':
    optimizer = optax.chain(
        decay_weights_not_biases(opt_config.weight_decay),
        optax.sgd(paper_schedule(opt_config.learning_rate, opt_config.decay_rate, batch_size)))
  elif name == 'adamw':  # optax.adamw, with the decay by rows
    optimizer = optax.chain(
        optax.scale_by_adam(b1=opt_config.b1, b2=opt_config.b2, mu_dtype=first_moment_dtype(opt_config)),
        decay_weights_not_biases(opt_config.weight_decay),
        optax.scale_by_learning_rate(adamw_schedule(opt_config, run_steps)))
  else:
    raise ValueError(f'optimizer {name!r} has no implementation (config.validate lists the names)')
  clip_norm = opt_config.get('clip_norm', 0.0)  # configs older than the key: no clipping
  return with_gradients_clipped(optimizer, clip_norm) if clip_norm > 0 else optimizer


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


