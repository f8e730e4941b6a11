"""The memory estimate made before a run allocates anything (nplm_jax/training/memory.py), against the real
parameters and optimiser state of the same config."""

import jax
import numpy as np
import pytest

from nplm_jax.training import memory
from nplm_jax.models import bengio2003 as model_lib
from nplm_jax.models import output_layer
from nplm_jax.training import optim
from nplm_jax.errors import UserError

pytestmark = [pytest.mark.fast, pytest.mark.unit]


@pytest.mark.parametrize('direct,h,optimizer,moment_dtypes,ema_decay', [
    (True, 16, 'adamw', ('float32',) * 2, 0.0), (False, 8, 'paper_sgd', ('float32',) * 2, 0.0),
    (True, 0, 'adamw', ('float32',) * 2, 0.0), (True, 16, 'adamw', ('bfloat16', 'float32'), 0.0),
    (True, 16, 'adamw', ('bfloat16',) * 2, 0.0), (True, 16, 'adamw', ('float32',) * 2, 0.999),
    (False, 8, 'paper_sgd', ('float32',) * 2, 0.9)])
def test_parameters_and_optimizer_state_are_counted_exactly(tiny_config, direct, h, optimizer, moment_dtypes, ema_decay):
  tiny_config.model.update(direct=direct, h=h)
  mu_dtype, nu_dtype = moment_dtypes
  tiny_config.optimizer.update(name=optimizer, mu_dtype=mu_dtype, nu_dtype=nu_dtype, ema_decay=ema_decay)
  vocab_size = 61
  model = model_lib.from_config(tiny_config.model, vocab_size)
  params = output_layer.init_params(model)
  state = optim.make_optimizer(tiny_config.optimizer, tiny_config.train.batch_size).init(params)
  nbytes = lambda tree: sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree) if np.ndim(x))  # not step counters
  estimate = memory.estimate(tiny_config, model.padded_vocab_size, vocab_size, {'data': 1, 'model': 1}, training=True,
                             eval_batch_size=tiny_config.train.eval_batch_size)
  assert estimate.parameters == nbytes(params)
  average = nbytes(params) if ema_decay else 0
  assert estimate.optimizer == nbytes(state) + nbytes(params) + average  # the moments (if any), gradients, average
  halves = memory.estimate(tiny_config, model.padded_vocab_size, vocab_size, {'data': 2, 'model': 2}, training=True,
                             eval_batch_size=tiny_config.train.eval_batch_size)
  output = np.asarray(params[output_layer.OUTPUT]).nbytes
  assert halves.parameters == nbytes(params) - output // 2  # the output layer is split over 'model'


def test_blocks_follow_batch_chunks_and_vocabulary_blocks(tiny_config):
  tiny_config.train.update(batch_size=64, eval_batch_size=128)
  whole = memory.estimate(tiny_config, 1024, 1000, {'data': 1, 'model': 1}, training=True,
                             eval_batch_size=tiny_config.train.eval_batch_size)
  assert whole.step == 3 * 4 * 64 * 1024 and whole.evaluation == 2 * 4 * 128 * 1024
  tiny_config.train.update(chunk_size=32, vocab_block=256)
  blocked = memory.estimate(tiny_config, 1024, 1000, {'data': 2, 'model': 1}, training=True,
                             eval_batch_size=tiny_config.train.eval_batch_size)
  assert blocked.step == 3 * 4 * 32 * 256 and blocked.evaluation == 2 * 4 * 32 * 256


def test_what_cannot_fit_is_refused_unless_told(tiny_config, monkeypatch):
  from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top
  tiny_config.mesh.update(data=1, model=1)  # one device: the whole (here 10 MiB) host memory is its
  mesh = sharding.make_mesh(tiny_config.mesh, jax.devices()[:1])
  monkeypatch.setattr(memory, 'host_available_bytes', lambda: 10 * 2**20)  # 10 MiB
  tiny_config.model.m = 100_000  # C 23 MiB, H 12 MiB, the direct connections W 98 MiB
  with pytest.raises(UserError, match=r'needs about 0.1 GiB a device \(parameters 0.1 GiB, .* has 10.0 MiB'):
    memory.check(tiny_config, 128, 61, mesh, training=False, eval_batch_size=64)
  tiny_config.train.check_memory = False
  memory.check(tiny_config, 128, 61, mesh, training=False, eval_batch_size=64)


class _Accelerator:
  """A device as JAX describes a GPU: its platform, kind and allocator limit (memory_stats)."""
  platform, device_kind = 'gpu', 'NVIDIA H100 80GB HBM3'

  def __init__(self, limit):
    self.limit = limit

  def memory_stats(self):
    return None if self.limit is None else {'bytes_limit': self.limit, 'bytes_in_use': 0}


def test_on_an_accelerator_the_devices_own_limit_decides(tiny_config):
  """The accelerator path: a device's bytes_limit (not the host's memory) bounds the run; a backend
  that does not report one is not refused."""
  import types  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  fake_mesh = lambda limit: types.SimpleNamespace(devices=np.array([[_Accelerator(limit)]], dtype=object),
                                                  shape={'data': 1, 'model': 1}, local_devices=[])
  tiny_config.model.m = 100_000  # about 0.1 GiB of parameters
  with pytest.raises(UserError, match=r'needs about 0.1 GiB a device .* a NVIDIA H100 80GB HBM3 has 64.0 MiB'):
    memory.check(tiny_config, 128, 61, fake_mesh(64 * 2**20), training=False, eval_batch_size=64)
  assert memory.check(tiny_config, 128, 61, fake_mesh(80 * 2**30), training=False, eval_batch_size=64).total > 0
  assert memory.check(tiny_config, 128, 61, fake_mesh(None), training=False, eval_batch_size=64).total > 0
