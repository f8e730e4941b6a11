"""The noise of the sampled losses (sampled softmax, NCE): a unigram**power distribution drawn with
Walker's alias method, k words a step as a function of (seed, step)."""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class SampledLoss:
  """Training with a sampled output layer instead of the exact softmax (evaluation stays exact)."""
  kind: str  # 'sampled_softmax' | 'nce'
  num_samples: int
  log_noise: Any  # [|V|] log probabilities of the noise distribution: exactly those draw_noise samples from
  noise_accept: Any  # [|V|] float32 alias table (Walker): keep a uniformly drawn word w with this probability,
  noise_alias: Any  # [|V|] int32 else take this word instead
  seed: int


def draw_noise(loss: SampledLoss, step) -> jax.Array:
  """The step's k noise words; a function of (seed, step), so a resumed run draws the same ones.

  Walker's alias method: a uniform word and one uniform number each, O(k) whatever |V|.
  (categorical() would draw k x |V| Gumbels, which on a CPU cost more than the sampled output
  layer itself; an inverse CDF in float32 cannot resolve the tail of a 250k-word Zipf
  distribution, whose words are below the CDF's rounding near 1.)
  """
  key = jax.random.fold_in(jax.random.PRNGKey(loss.seed), step)
  word_key, accept_key = jax.random.split(key)
  words = jax.random.randint(word_key, (loss.num_samples,), 0, loss.noise_accept.shape[0])
  keep = jax.random.uniform(accept_key, (loss.num_samples,)) < loss.noise_accept[words]
  return jnp.where(keep, words, loss.noise_alias[words])


def alias_table(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(accept float32, alias int32) with Vose's algorithm: word w is drawn with probability
  (accept[w] + sum over v with alias[v] = w of (1 - accept[v])) / |V|."""
  n = len(probs)
  scaled = np.asarray(probs, np.float64) * n
  accept, alias = np.ones(n, np.float64), np.arange(n, dtype=np.int32)
  small = [i for i in range(n) if scaled[i] < 1.0]
  large = [i for i in range(n) if scaled[i] >= 1.0]
  while small and large:
    s, g = small.pop(), large.pop()
    accept[s], alias[s] = scaled[s], g
    scaled[g] -= 1.0 - scaled[s]
    (small if scaled[g] < 1.0 else large).append(g)
  return accept.astype(np.float32), alias  # words left over keep accept 1 (rounding)


def alias_probs(accept: np.ndarray, alias: np.ndarray) -> np.ndarray:
  """The probabilities an alias table really draws with (float64, from its float32 entries)."""
  accept = np.asarray(accept, np.float64)
  return (accept + np.bincount(alias, weights=1.0 - accept, minlength=len(accept))) / len(accept)


def make_sampled_loss(loss_config, unigram_counts, seed: int) -> SampledLoss | None:
  """None for the exact softmax; else the sampled loss with a unigram**power noise distribution."""
  if loss_config.name == 'softmax':
    return None
  counts = np.asarray(unigram_counts, np.float64) + 0.5  # every word can be drawn
  weights = counts ** loss_config.noise_power
  accept, alias = alias_table(weights / weights.sum())
  return SampledLoss(kind=loss_config.name, num_samples=loss_config.num_samples,
                     log_noise=jnp.asarray(np.log(alias_probs(accept, alias)), jnp.float32),  # what is drawn
                     noise_accept=jnp.asarray(accept), noise_alias=jnp.asarray(alias), seed=seed)
