"""The commands' flags and main() (nplm-score, nplm-mix, ...; nplm-train's are nplm_jax/main.py): the command
layer, so that no layer below it parses flags. Each reads its arguments, calls the layer that does the work and
prints its result or one error line."""
