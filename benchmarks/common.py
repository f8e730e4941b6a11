"""Shared benchmark pieces: Brown-shaped random batches, a compiled train step, timing, reporting."""

import json
import os
import platform
import re
import resource
import subprocess

import jax
import numpy as np

from benchmarks import timing
from nplm_jax.training import in_flight as in_flight_lib
from nplm_jax.training import sampled_noise
from nplm_jax.models import output_layer
from nplm_jax.models import family as model_family
from nplm_jax.training import optim
from nplm_jax.parallel import sharding
from nplm_jax.training import experiment as experiment_lib
from nplm_jax.training import steps as steps_lib
from nplm_jax.parallel import vocab_softmax

BROWN_VOCAB = 17_905


def random_batches(vocab: int, context: int, batch: int, count: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  return [(rng.integers(0, vocab, size=(batch, context)).astype(np.int32),
           rng.integers(0, vocab, size=batch).astype(np.int32)) for _ in range(count)]


def train_flops_per_token(vocab: int, n: int, m: int, h: int, direct: bool) -> float:
  """Forward + backward of the matmuls: 3 of 2 |V| K FLOPs in the output layer (K = h + (n-1)m, or h
  without direct connections), 3 of 2 (n-1) m h in the hidden layer."""
  k = h + ((n - 1) * m if direct else 0)
  return 6.0 * vocab * k + 6.0 * (n - 1) * m * h


def eval_flops_per_token(vocab: int, n: int, m: int, h: int, direct: bool) -> float:
  return train_flops_per_token(vocab, n, m, h, direct) / 3.0


def peak_matmul_tflops(dtype: str, size: int, repeats: int = 5, steps: int = 10) -> float:
  """The rate of a large square matmul of `dtype` on the first device (float32 at 'highest'
  precision), in TFLOP/s: the practical peak MFU is measured against, in the same run."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  keys = jax.random.split(jax.random.PRNGKey(0), 2)
  a, b = (jax.random.normal(k, (size, size), jnp.dtype(dtype)) for k in keys)  # not zeros: they run faster
  matmul = jax.jit(lambda x, y: jnp.matmul(x, y, precision='highest'))
  jax.block_until_ready(matmul(a, b))

  def run():
    in_flight = in_flight_lib.InFlightLimit()
    for _ in range(steps):
      in_flight.push(matmul(a, b))
    in_flight.drain()
  return 2.0 * size ** 3 * steps / timing.median_seconds(run, repeats) / 1e12


def peak_copy_gbps(mib: int, repeats: int = 5, steps: int = 10) -> float:
  """The rate of a large elementwise pass (read `mib` MiB of float32, write as much) on the first device, in
  GB/s: the practical memory bandwidth a step's traffic is measured against, in the same run.

  Each pass writes over its input's buffer (donated), as a step's in-place updates do: a fresh output of
  this size each call would time, on a CPU, the system's mapping and zeroing of new pages instead
  (2 AMD EPYC cores: 3.1 GB/s so against 32 in place, side by side)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  scale = in_place_pass()
  x = scale(jax.random.normal(jax.random.PRNGKey(0), (mib * 2**18,), jnp.float32))
  nbytes = x.nbytes

  def run():
    nonlocal x
    for _ in range(steps):  # each pass reads the last one's result: they run in turn
      x = scale(x)
    jax.block_until_ready(x)
  return 2.0 * nbytes * steps / timing.median_seconds(run, repeats) / 1e9


def in_place_pass():
  """peak_copy_gbps's pass, jitted with its input donated (its result takes the input's buffer)."""
  return jax.jit(lambda v: v * 1.0001 + 1.0, donate_argnums=0)


def write_synthetic_prepared(folder: str, vocab: int, train_tokens: int, eval_tokens: int, seed: int = 0) -> str:
  """A prepared corpus (nplm_jax.data.prepare's layout) of uniformly random ids over `vocab` words, for
  timing the real training loop at any |V|; returns its folder."""
  import os  # pylint: disable=g-import-not-at-top
  from nplm_jax.data import corpora as data_lib  # pylint: disable=g-import-not-at-top
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng(seed)
  sizes = {'train': train_tokens, 'valid': eval_tokens, 'test': eval_tokens}
  splits = {s: rng.integers(0, vocab, size=n).astype(np.uint32) for s, n in sizes.items()}
  for s, ids in splits.items():
    np.save(os.path.join(folder, f'{s}.npy'), ids)
  words = tuple(f'w{i}' for i in range(vocab))
  counts = np.bincount(splits['train'], minlength=vocab)
  with open(os.path.join(folder, 'vocab.txt'), 'w', encoding='utf-8') as f:
    f.writelines(f'{w}\t{c}\n' for w, c in zip(words, counts.tolist()))
  corpus = data_lib.Corpus(words, splits, boundary_id=0)
  meta = {'source': {'corpus': 'synthetic', 'unit': 'word'}, 'vocab_size': vocab, 'boundary_id': 0,
          **{f'{s}_tokens': n for s, n in sizes.items()}, 'fingerprint': corpus.fingerprint()}
  with open(os.path.join(folder, data_lib.PREPARED_META), 'w', encoding='utf-8') as f:
    json.dump(meta, f)
  return folder


def peak_rss_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def memory_mib(compiled) -> dict:
  """Per-device memory of a compiled step from XLA's memory analysis."""
  stats = compiled.memory_analysis()
  if stats is None:
    return {}
  mib = lambda x: round(x / 2**20, 2)
  return {'arguments_mib': mib(stats.argument_size_in_bytes), 'outputs_mib': mib(stats.output_size_in_bytes),
          'temp_mib': mib(stats.temp_size_in_bytes), 'aliased_mib': mib(stats.alias_size_in_bytes)}


def error_line(e: BaseException) -> str:
  """Why a benchmarked path did not build or run, in one line (its first, at most 300 characters)."""
  return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def emit(record: dict) -> None:
  print(json.dumps(record), flush=True)


def device_name() -> str:
  """The device a record was measured on: the accelerator's kind, or the CPU's cores and its native
  bfloat16 (AVX-512 BF16, AMX), which decide CPU defaults."""
  if jax.default_backend() != 'cpu':
    return jax.devices()[0].device_kind
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      info = f.read()
  except OSError:
    info = ''
  model = re.search(r'model name\s*:\s*(.*)', info)
  flags = set(re.findall(r'\b(avx512_bf16|amx_bf16)\b', info))
  native = ' and '.join(name for flag, name in (('avx512_bf16', 'AVX-512 BF16'), ('amx_bf16', 'AMX')) if flag in flags)
  vendor = model.group(1).replace('(R)', '').replace(' Processor', '').strip() if model else platform.processor()
  return f'CPU, {os.cpu_count()} cores ({platform.machine()}, {vendor}{f" with {native}" if native else ""})'


def commit() -> str:
  """The repository's commit, with '+' when the tree has changes."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=repo, capture_output=True, text=True, check=False)
  dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], cwd=repo, capture_output=True,
                         text=True, check=False)
  return head.stdout.strip() + ('+' if dirty.stdout.strip() else '')


def softmax_kernel(config, mesh) -> str:
  """train.softmax_kernel as the training step on `mesh` is given it ('auto' resolved for the backend, but on
  one GPU, where each traced call resolves it by its shapes; one line of error where it cannot run there),
  as training resolves it."""
  return vocab_softmax.softmax_kernel_for(config.train.softmax_kernel, mesh.devices.flat[0].platform,
                                          mesh.devices.size)


def softmax_kernel_ran(config, mesh, model, params, batch: int) -> str:
  """The output layer's path a step of `batch` examples runs: softmax_kernel's, its 'auto' on one GPU
  resolved as the traced step resolves it (steps.output_layer_kernel)."""
  return steps_lib.output_layer_kernel(softmax_kernel(config, mesh), model, params, mesh, batch,
                                       config.train.chunk_size, config.train.get('softmax_kernel_tuning', ''))


def build_train_step(config, vocab: int, mesh, steps_per_epoch: int = 0):
  """(compiled steps, fresh state) for `config`'s model over a vocabulary of `vocab` words. steps_per_epoch > 0:
  with the resident dispatch of several steps too (compiled.resident_steps, as the training loop runs it,
  train.carry_cast_layer included), over an epoch of that many batches of train.batch_size."""
  model = model_family.from_config(config.model, vocab, mesh.devices.flat[0].platform, config.train.deterministic)
  # a run's length only shapes the rate (cosine_decay_steps=-1), not the step's cost
  optimizer = optim.make_optimizer(config.optimizer, config.train.batch_size, run_steps=10**6, seed=config.seed)
  sampled = sampled_noise.make_sampled_loss(config.loss, np.ones(vocab), config.seed)  # uniform noise: random data
  compiled = steps_lib.compile_steps(model, optimizer, mesh, loss=sampled, chunk_size=config.train.chunk_size,
                                      vocab_block=config.train.vocab_block,
                                      matmul_precision=config.model.matmul_precision,
                                      axis_rules=config.mesh.axis_rules,
                                      softmax_kernel=softmax_kernel(config, mesh),
                                      softmax_kernel_tuning=config.train.get('softmax_kernel_tuning', ''),
                                      ema_decay=config.optimizer.get('ema_decay', 0.0),
                                      steps_per_epoch=steps_per_epoch, batch_size=config.train.batch_size,
                                      carry_cast_layer=config.train.get('carry_cast_layer', 'off'),
                                      **experiment_lib.column_step_options(config, mesh.devices.flat[0].platform),
                                      **steps_lib.output_layer_gradient_options(config.train))
  with jax.set_mesh(mesh):
    state = compiled.init()
  return model, compiled, state


def time_train_step(config, vocab: int, mesh, steps: int, repeats: int) -> dict:
  """Median time of `config`'s train step on `mesh` (random Brown-shaped batches of
  config.train.batch_size, each process feeding its own rows), and its per-device memory."""
  batch_size = config.train.batch_size
  model, compiled, state = build_train_step(config, vocab, mesh)
  rows = sharding.process_rows(mesh, batch_size)
  batches = [tuple(sharding.put_process_rows(mesh, x[rows], batch_size) for x in b)
             for b in random_batches(vocab, model.context_size, batch_size, steps)]
  with jax.set_mesh(mesh):
    executable = compiled.lower_train(state, *batches[0]).compile()
    state, _ = compiled.train(state, *batches[0])  # warm-up
    jax.block_until_ready(state)
    holder = [state]

    def run_steps():
      s = holder[0]
      for b in batches:
        s, metrics = compiled.train(s, *b)
      jax.block_until_ready(metrics)
      holder[0] = s

    seconds = timing.median_seconds(run_steps, repeats) / steps
  data, model_axis = mesh.shape['data'], mesh.shape['model']
  return {'mesh': f'{data}x{model_axis}', 'batch_size': batch_size, 'step_ms': round(1e3 * seconds, 2),
          'train_tokens_per_sec': round(batch_size / seconds, 1), **memory_mib(executable),
          'output_layer_mib_per_device': round(
              holder[0].params[output_layer.OUTPUT].addressable_shards[0].data.nbytes / 2**20, 2)}


def zipf_lines(rng: np.random.Generator, vocab: int, count: int) -> list[str]:
  """`count` lines of 5-40 words w0 ... w{vocab-1}, drawn with probability proportional to 1/rank."""
  probs = 1.0 / np.arange(1, vocab + 1)
  probs /= probs.sum()
  lengths = rng.integers(5, 41, size=count)
  ids = rng.choice(vocab, size=int(lengths.sum()), p=probs)
  cuts = np.cumsum(lengths)[:-1]
  return [' '.join(f'w{i}' for i in line) for line in np.split(ids, cuts)]
