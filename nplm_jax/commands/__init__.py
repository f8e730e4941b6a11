"""The commands whose work lives in a lower layer (the n-gram baselines, corpus preparation): their flags
and main here, in the command layer, so that the layers below never import it."""
