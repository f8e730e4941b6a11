"""nplm_jax: Bengio et al. (2003), A Neural Probabilistic Language Model, in JAX/Flax.

From Python (README, "Use it from Python"):

    import nplm_jax
    lm = nplm_jax.load('runs/brown_quick')        # a trained workdir (lm.close(), or `with`, frees it)
    lm.perplexity('The jury said it did find that many of the voters ...')
    lm.vectors.most_similar('Monday')
    results = nplm_jax.train(nplm_jax.get_config('experiments/brown.py:quick'), 'runs/brown_quick')

The names below are imported when first used: the commands import this package too, and check
their flags before JAX's imports, which take seconds.
"""

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    'load': 'nplm_jax.api', 'get_config': 'nplm_jax.api', 'train': 'nplm_jax.api',
    'LanguageModel': 'nplm_jax.tools.language_model', 'Scored': 'nplm_jax.tools.trained',
    'WordVectors': 'nplm_jax.tools.word_vectors', 'UserError': 'nplm_jax.errors', 'UnknownWordError': 'nplm_jax.errors',
}
__all__ = ['LanguageModel', 'Scored', 'UnknownWordError', 'UserError', 'WordVectors', 'get_config', 'load', 'train']

if TYPE_CHECKING:
  from nplm_jax.api import get_config, load, train  # pylint: disable=g-import-not-at-top
  from nplm_jax.errors import UnknownWordError, UserError  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools.language_model import LanguageModel  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools.trained import Scored  # pylint: disable=g-import-not-at-top
  from nplm_jax.tools.word_vectors import WordVectors  # pylint: disable=g-import-not-at-top


def __getattr__(name: str):
  if name not in _EXPORTS:
    raise AttributeError(f'module nplm_jax has no attribute {name!r}')
  value = getattr(_import_whole(_EXPORTS[name]), name)
  globals()[name] = value  # once: later look-ups find it directly
  return value


def __dir__():
  return sorted(list(globals()) + __all__)


def _import_whole(module: str):
  """Imports `module` (JAX and all: seconds, the first time) with Ctrl-C held until the import is done: an
  interrupt in the middle of JAX's import would leave it half-imported for the rest of the process (a notebook's
  kernel then fails every later call). The interrupt is raised once the import is in, and SIGINT's handler is
  the caller's again."""
  import signal  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  previous = signal.getsignal(signal.SIGINT)
  if threading.current_thread() is not threading.main_thread() or previous is None:
    return importlib.import_module(module)  # only the main thread sets handlers; None: one set outside Python
  asked = []
  signal.signal(signal.SIGINT, lambda signum, frame: asked.append(signum))
  try:
    imported = importlib.import_module(module)
  finally:
    signal.signal(signal.SIGINT, previous)
  if asked:
    raise KeyboardInterrupt('interrupted while nplm_jax imported its modules; the import finished, so the next call '
                            'works')
  return imported
