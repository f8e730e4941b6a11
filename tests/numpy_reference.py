"""The paper's equations in plain NumPy (float64), independent of the JAX code."""

import numpy as np


def logits(params: dict, contexts: np.ndarray) -> np.ndarray:
  """y = b + W x + U tanh(d + H x), x = [C(w_{t-1}), ..., C(w_{t-n+1})]; padding columns -inf."""
  C = params['C'].astype(np.float64)
  x = np.concatenate([C[contexts[:, k]] for k in range(contexts.shape[1])], axis=1)
  y = np.broadcast_to(params['b'].astype(np.float64), (len(contexts), params['b'].shape[0])).copy()
  if 'W' in params:
    y += x @ params['W']
  if 'H' in params:
    y += np.tanh(params['d'] + x @ params['H']) @ params['U']
  y[:, C.shape[0]:] = -np.inf
  return y


def token_nll(params: dict, contexts: np.ndarray, targets: np.ndarray, vocab_size: int) -> np.ndarray:
  y = logits(params, contexts)[:, :vocab_size]
  top = y.max(axis=1, keepdims=True)
  log_z = np.log(np.exp(y - top).sum(axis=1)) + top[:, 0]
  return log_z - y[np.arange(len(targets)), targets]
