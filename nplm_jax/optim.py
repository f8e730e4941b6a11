"""Optimisers from optax, chosen by `config.optimizer.name`.

'paper_sgd' is the paper's per-example SGD expressed on mean-loss minibatch gradients: the paper
adds lr_t * grad for every example, so a batch of B examples moves B times as far per step, and
t counts examples: lr_t = B * lr_0 / (1 + r * B * step). Weight decay is on C, H, U, W, not b, d.
"""

import optax

from nplm_jax import model as model_lib


def decay_mask(params):
  return {k: k not in model_lib.NOT_DECAYED for k in params}


def paper_schedule(learning_rate: float, decay_rate: float, batch_size: int) -> optax.Schedule:
  def schedule(step):
    return batch_size * learning_rate / (1.0 + decay_rate * batch_size * step)
  return schedule


def make_optimizer(opt_config, batch_size: int) -> optax.GradientTransformation:
  name = opt_config.name
  if name == 'paper_sgd':
    return optax.chain(
        optax.add_decayed_weights(opt_config.weight_decay, mask=decay_mask),
        optax.sgd(paper_schedule(opt_config.learning_rate, opt_config.decay_rate, batch_size)))
  if name == 'adamw':
    return optax.adamw(opt_config.learning_rate, b1=opt_config.b1, b2=opt_config.b2,
                       weight_decay=opt_config.weight_decay, mask=decay_mask)
  raise ValueError(f'optimizer {name!r} has no implementation (config.validate lists the names)')


def learning_rate_at(opt_config, batch_size: int, step: int) -> float:
  if opt_config.name == 'paper_sgd':
    return float(paper_schedule(opt_config.learning_rate, opt_config.decay_rate, batch_size)(step))
  return float(opt_config.learning_rate)


