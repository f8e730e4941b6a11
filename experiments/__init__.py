"""Experiment configs (--config=experiments/NAME.py:VARIANT); installed as nplm_jax.experiments."""
