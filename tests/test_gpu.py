"""GPU smoke tests: run on a machine with a GPU by `python -m pytest -q tests/test_gpu.py` (JAX_PLATFORMS
unset or 'cuda'); skipped, with that message, where JAX sees no GPU (CI runs on CPUs).

They check what only a GPU can show: deterministic reductions (two identical runs, and a resumed
run against an uninterrupted one, bit for bit, several steps a dispatch), the resident data path
against the host loop, and a bfloat16 training.
"""

import os

# XLA reads its flags when the backend starts: what backend.configure sets for a run's first process.
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_gpu_deterministic_ops=true').strip()

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from nplm_jax.training import train  # pylint: disable=g-import-not-at-top,wrong-import-position
from tests import checkpoint_reader  # pylint: disable=g-import-not-at-top,wrong-import-position


def _has_gpu() -> bool:
  try:
    return bool(jax.devices('gpu'))
  except RuntimeError:
    return False


pytestmark = pytest.mark.skipif(not _has_gpu(), reason='GPU smoke tests: JAX sees no GPU here (run them on one)')


def _config(tiny_config, **train_options):
  config = tiny_config.copy_and_resolve_references()
  config.model.update(m=32, h=64, feature_dropout=0.1, hidden_dropout=0.1)
  config.train.update(max_steps=60, eval_every=20, log_every=10, **train_options)
  return config


def _params(workdir):
  return checkpoint_reader.latest_params(str(workdir))


def _assert_equal(a, b):
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_identical_runs_are_bit_equal(tiny_config, tmp_path):
  for name in ('first', 'second'):
    train.train_and_evaluate(_config(tiny_config, steps_per_dispatch=8), str(tmp_path / name))
  _assert_equal(_params(tmp_path / 'first'), _params(tmp_path / 'second'))


def test_resume_is_bit_exact_with_several_steps_a_dispatch(tiny_config, tmp_path):
  whole = train.train_and_evaluate(_config(tiny_config, steps_per_dispatch=8), str(tmp_path / 'whole'))
  interrupted = _config(tiny_config, steps_per_dispatch=8)
  interrupted.train.max_steps = 33
  train.train_and_evaluate(interrupted, str(tmp_path / 'parts'))
  resumed = train.train_and_evaluate(_config(tiny_config, steps_per_dispatch=8), str(tmp_path / 'parts'))
  _assert_equal(_params(tmp_path / 'whole'), _params(tmp_path / 'parts'))
  assert whole['valid_ppl'] == resumed['valid_ppl']


def test_resident_data_follows_the_host_loop(tiny_config, tmp_path):
  host = train.train_and_evaluate(_config(tiny_config, device_data='off'), str(tmp_path / 'host'))
  resident = train.train_and_evaluate(_config(tiny_config, steps_per_dispatch=8), str(tmp_path / 'resident'))
  assert resident['valid_ppl'] == pytest.approx(host['valid_ppl'], rel=1e-5)
  a, b = _params(tmp_path / 'host'), _params(tmp_path / 'resident')
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_bfloat16_trains(tiny_config, tmp_path):
  config = _config(tiny_config, steps_per_dispatch=8)
  config.model.compute_dtype = 'bfloat16'
  results = train.train_and_evaluate(config, str(tmp_path / 'bf16'))
  assert np.isfinite(results['valid_ppl']) and results['valid_ppl'] < results['history'][0]['valid_ppl'] * 1.5
