"""What a run will need of each device's memory, estimated from its config before anything is
allocated, and refused in one line when it cannot fit (model.m = 10**9 would otherwise announce
4e12 parameters and hang; eval_batch_size = 10**8 would end in an out-of-memory abort).

The estimate counts the large terms only: parameters (C and the hidden layers replicated, the
output layer split over 'model'), the optimiser's state and the gradients, and the output layer's [batch,
|V| / model] blocks of a training step and of an evaluation (bounded by train.chunk_size and
train.vocab_block); token ids kept on the devices are left to train.device_data's own bound. It
errs low (XLA's own buffers are not
counted), so a refusal is certain; train.check_memory = False skips it for a user who knows better.
"""

import dataclasses
import os

GiB = 2**30
FLOAT_BYTES = 4  # parameters, gradients and logits are float32 (AdamW's moments: MOMENT_BYTES)
MOMENT_BYTES = {'float32': 4, 'bfloat16': 2}  # AdamW's, by optimizer.mu_dtype and nu_dtype


@dataclasses.dataclass(frozen=True)
class Estimate:
  """Bytes a device needs, by part."""
  parameters: int
  optimizer: int  # the optimiser's state, the gradients and the parameters' moving average (if kept)
  step: int  # a training step's output-layer blocks
  evaluation: int

  @property
  def total(self) -> int:
    return self.parameters + self.optimizer + max(self.step, self.evaluation)

  def describe(self) -> str:
    parts = [('parameters', self.parameters), ('optimiser and gradients', self.optimizer),
             ('training step', self.step), ('evaluation', self.evaluation)]
    return ', '.join(f'{name} {_gib(size)}' for name, size in parts if size)


def estimate(config, padded_vocab_size: int, vocab_size: int, mesh_shape: dict, training: bool,
             eval_batch_size: int) -> Estimate:
  """The estimate for one device of a mesh {'data': D, 'model': M}."""
  replicated, rows = parameter_shapes(config.model, vocab_size)
  shard = -(-padded_vocab_size // mesh_shape['model'])
  parameters = FLOAT_BYTES * (replicated + rows * shard)
  # a gradient per parameter; AdamW adds two moments, in optimizer.mu_dtype and nu_dtype; a moving average
  # of the parameters (optimizer.ema_decay) one more copy of them
  moment_bytes = 0
  if config.optimizer.name == 'adamw':
    moment_bytes = sum(MOMENT_BYTES[config.optimizer.get(key, 'float32')] for key in ('mu_dtype', 'nu_dtype'))
  if config.optimizer.get('ema_decay', 0.0) > 0:
    moment_bytes += FLOAT_BYTES
  optimizer = (FLOAT_BYTES + moment_bytes) * (parameters // FLOAT_BYTES) if training else 0

  def block(batch: int) -> int:
    rows_at_once = min(config.train.chunk_size or batch, batch)
    columns = config.train.vocab_block if config.train.vocab_block > 0 else shard
    return FLOAT_BYTES * rows_at_once * min(columns, shard)

  per_device = lambda batch: -(-batch // mesh_shape['data'])
  step = 0
  if training:
    sampled = config.loss.name != 'softmax'
    step = 3 * (FLOAT_BYTES * per_device(config.train.batch_size) * config.loss.num_samples if sampled
                else block(per_device(config.train.batch_size)))  # logits, their softmax, its gradient
  evaluation = 2 * block(per_device(eval_batch_size))
  return Estimate(parameters, optimizer, step, evaluation)


def parameter_shapes(model_config, vocab_size: int) -> tuple[int, int]:
  """(numbers replicated on every device, rows of the output layer split over 'model') of a model of
  either family, from the module's own parameter shapes (model_family.parameter_split)."""
  from nplm_jax.models import family as model_family  # pylint: disable=g-import-not-at-top  # JAX only when estimating
  return model_family.parameter_split(model_family.from_config(model_config, vocab_size))


def _meminfo_available() -> int | None:
  try:
    with open('/proc/meminfo', encoding='ascii') as f:
      fields = dict(line.split(':', 1) for line in f)
    return int(fields['MemAvailable'].split()[0]) * 1024
  except (OSError, KeyError, ValueError):
    try:
      return os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
    except (ValueError, OSError, AttributeError):
      return None


def _cgroup_available() -> int | None:
  """What this process's cgroup lets it still take (v2 memory.max - memory.current, or v1's limit)."""
  for limit_file, usage_file in (('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory.current'),
                                 ('/sys/fs/cgroup/memory/memory.limit_in_bytes',
                                  '/sys/fs/cgroup/memory/memory.usage_in_bytes')):
    try:
      with open(limit_file, encoding='ascii') as f:
        limit = f.read().strip()
      with open(usage_file, encoding='ascii') as f:
        usage = int(f.read().strip())
    except (OSError, ValueError):
      continue
    if limit == 'max' or not limit.isdigit() or int(limit) >= 2**60:  # no limit (v1 writes a huge number)
      return None
    return max(int(limit) - usage, 0)
  return None


def _address_space_available() -> int | None:
  """What `ulimit -v` (RLIMIT_AS) leaves this process beyond its present address space."""
  try:
    import resource  # pylint: disable=g-import-not-at-top  # POSIX only
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
      return None
    with open('/proc/self/statm', encoding='ascii') as f:
      size = int(f.read().split()[0]) * os.sysconf('SC_PAGE_SIZE')
    return max(soft - size, 0)
  except (ImportError, OSError, ValueError, AttributeError):
    return None


def host_available_bytes() -> int | None:
  """The memory this process can still take: the least of the host's MemAvailable, its cgroup's room
  and its address-space limit (ulimit -v), or None where none can be read."""
  known = [b for b in (_meminfo_available(), _cgroup_available(), _address_space_available()) if b is not None]
  return min(known) if known else None


def available_bytes(mesh) -> tuple[int | None, str]:
  """(bytes one device of the mesh may use, what that is), or (None, ...) when the backend does not say."""
  device = mesh.devices.flat[0]
  if device.platform == 'cpu':
    host = host_available_bytes()
    if host is None:
      return None, 'this host'
    devices = max(len(mesh.local_devices), 1)  # the mesh's host devices share the machine's memory
    return host // devices, f"this host's available memory shared by {devices} CPU device(s)"
  stats = device.memory_stats() or {}
  limit = stats.get('bytes_limit')
  return (int(limit) if limit else None), f'a {device.device_kind}'


def check(config, padded_vocab_size: int, vocab_size: int, mesh, training: bool, eval_batch_size: int) -> Estimate:
  """The estimate; one line of error when it exceeds what a device has (train.check_memory = True)."""
  needed = estimate(config, padded_vocab_size, vocab_size, dict(mesh.shape), training, eval_batch_size)
  if not config.train.check_memory:
    return needed
  available, what = available_bytes(mesh)
  if available is not None and needed.total > available:
    from nplm_jax.errors import UserError  # pylint: disable=g-import-not-at-top
    raise UserError(f'this run needs about {_gib(needed.total)} a device ({needed.describe()}) and {what} has '
                    f'{_gib(available)}; lower model.m / model.h / train.batch_size / train.eval_batch_size, set '
                    'train.chunk_size or train.vocab_block, use more devices on mesh.model, or set '
                    '--config.train.check_memory=False if you know better')
  return needed


def _gib(size: int) -> str:
  if size >= GiB / 10:
    return f'{size / GiB:,.1f} GiB'
  return f'{size / 2**20:,.1f} MiB' if size >= 2**20 / 10 else f'{size / 2**10:,.1f} KiB'
