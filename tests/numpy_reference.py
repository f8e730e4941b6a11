"""The paper's equations in plain NumPy (float64), independent of the JAX code."""

import numpy as np


def logits(params: dict, contexts: np.ndarray) -> np.ndarray:
  """y = b + W x + U tanh(d + H x), x = [C(w_{t-1}), ..., C(w_{t-n+1})]; padding columns -inf. With
  distant_kernels [K, D]: the contexts' last D words are the distant block, and x ends with each kernel's
  weighted sum of their vectors."""
  C = params['C'].astype(np.float64)
  kernels = params.get('distant_kernels', np.zeros((0, 0))).astype(np.float64)
  window = contexts.shape[1] - kernels.shape[1]
  x = np.concatenate([C[contexts[:, k]] for k in range(window)] +
                     [np.einsum('d,bdm->bm', kernel, C[contexts[:, window:]]) for kernel in kernels], axis=1)
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


def _layer_norm(x: np.ndarray, p: dict, eps: float = 1e-6) -> np.ndarray:
  mean = x.mean(axis=-1, keepdims=True)
  var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * p['scale'] + p['bias']


def _residual(x: np.ndarray, inputs: np.ndarray, p: dict, layer_norm: bool) -> np.ndarray:
  """x + W2 relu(W1 inputs + b1) + b2, then LayerNorm (Sun & Iyyer's post-norm sublayer)."""
  branch = np.maximum(inputs @ p['in_kernel'] + p['in_bias'], 0.0) @ p['out_kernel'] + p['out_bias']
  return _layer_norm(x + branch, p['LayerNorm_0']) if layer_norm else x + branch


def revisited_logits(params: dict, contexts: np.ndarray, window: int, layer_norm: bool = True,
                     embed_scale: bool = False, first_residual: str = 'sum') -> np.ndarray:
  """The revisited family (Sun & Iyyer 2021) in float64: the window's vectors (times sqrt(m) with
  embed_scale) and the distant block's kernel summaries, a residual first layer (added to their sum, or
  with first_residual='last' to the most recent vector), residual blocks, then b + s U (U = C' when
  tied, unscaled)."""
  p = {k: _float64(v) for k, v in params.items()}
  C = p['C']
  inputs = C * np.sqrt(C.shape[1]) if embed_scale else C
  pieces = [inputs[contexts[:, k]] for k in range(window)]
  if 'distant_kernels' in p:
    distant = inputs[contexts[:, window:]]  # [B, D, m]
    pieces += [np.einsum('d,bdm->bm', kernel, distant) for kernel in p['distant_kernels']]
  x = np.stack(pieces, axis=1)
  residual = x.sum(axis=1) if first_residual == 'sum' else inputs[contexts[:, 0]]  # contexts: most recent first
  s = _residual(residual, x.reshape(len(x), -1), p['first'], layer_norm)
  for i in range(sum(k.startswith('block_') for k in p)):
    s = _residual(s, s, p[f'block_{i}'], layer_norm)
  output = p['output']
  weights = C.T if output.shape[0] == 1 else output[:-1, :C.shape[0]]
  y = np.full((len(contexts), output.shape[1]), -np.inf)
  y[:, :C.shape[0]] = s @ weights + output[-1, :C.shape[0]]
  return y


def _float64(tree):
  return {k: _float64(v) for k, v in tree.items()} if isinstance(tree, dict) else np.asarray(tree, np.float64)
