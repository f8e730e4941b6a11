"""nplm_jax: Bengio et al. (2003), A Neural Probabilistic Language Model, in JAX/Flax."""
