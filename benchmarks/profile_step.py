"""Where a training step's time goes: XLA's own per-operation times, grouped into matmuls,
collectives and the rest.

python benchmarks/profile_step.py --config=experiments/brown.py:mlp1 --batch_size=1024 [--config.section.key=value ...]

Runs a few steps under jax.profiler, reads the trace, and prints the heaviest operations of the
compiled step (milliseconds per step and device, with the JAX operation each came from), then one
JSON line: wall_step_ms, step_ms (the operations' sum), matmul_ms, collective_ms, other_ms and
matmul_share. Each operation also gets the bytes it names (its operands and results, from the compiled
HLO's shapes: what it reads and writes in memory, an upper bound where it updates a buffer in place
or reads a slice) and so its GB/s; the JSON line adds the step's sum of them (gbytes), the device's
practical bandwidth measured in the same run (peak_gbps: a large elementwise pass) and the time that
traffic takes at it (bandwidth_bound_ms): how far the step is from the memory-traffic limit, and which
operations are far from the bandwidth they could have; then the operations run a step (ops_per_step) and
the step's time outside them (gap_ms, wall_step_ms - step_ms): a step of many short operations with a
large gap is bound by launching them (on a GPU, XLA's command buffers are what shortens that; they are
off here unless --command_buffers, since a step captured in one shows as a single operation). On
CPU, XLA runs some matmuls (plain `dot`, not the fused ones) asynchronously: their event covers only
the launch, and their time shows up in the gap or in an operation that waits for them (a collective).
--dispatch_steps=N profiles the resident loop of N steps a call instead of one step a call (what training
runs on accelerators, train.carry_cast_layer with it); every figure is still a step's, and the JSON line
names dispatch_steps. --evaluate profiles evaluation calls (the exact softmax) instead of training steps.
Then the step's time by part (random numbers, loss, the output layer, the embedding, the hidden layers,
the optimiser's update: told apart by the scopes of each operation's JAX source), and the matmuls' FLOPs
(from the compiled dots' shapes) as GFLOP/s against a large float32 matmul measured in the same run.
The bytes the step moves (traffic_gbytes, op_traffic) count a read of rows or a slice, and an update in place,
by what they touch rather than by the whole buffers they name, and a dispatch's operations outside its loop
once for its steps; the step's bound (bound_ms) is the larger of its matmuls' time at the matmul rate and
that traffic's time at the bandwidth, of_bound the share of the wall step it is: 1 is a step at the
machine's limit.
"""

import collections
import glob
import gzip
import json
import math
import os
import re
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks import common  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax.parallel import backend  # pylint: disable=g-import-not-at-top,wrong-import-position
from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top,wrong-import-position

config_flags.DEFINE_config_file('config', 'experiments/brown.py:mlp1', 'Experiment config.', lock_config=True)
flags.DEFINE_integer('batch_size', 1024, 'Batch size.')
flags.DEFINE_integer('vocab', 17_905, '|V| (Brown: 17,905); random token ids are used.')
flags.DEFINE_integer('steps', 5, 'Profiled steps (after one warm-up step).')
flags.DEFINE_integer('top', 12, 'Operations to list.')
flags.DEFINE_string('trace_dir', '', 'Keep the trace here (for TensorBoard/Perfetto).')
flags.DEFINE_bool('command_buffers', False, "Keep XLA's command buffers (CUDA graphs) on a GPU, as training runs "
                  'the step. Off by default: the H100 profile of 2026-11-26 showed one command buffer as 95% of the '
                  'step, with nothing inside it named; off, each operation is timed (the step itself a little slower).')
flags.DEFINE_integer('dispatch_steps', 1, 'Steps a dispatch: above 1, the resident loop of that many steps in one '
                     'call, as training runs it on accelerators (steps.train_resident_steps, train.carry_cast_layer '
                     'included); the figures are then a step\'s, the dispatches\' over their steps.')
flags.DEFINE_bool('evaluate', False, 'Profile evaluation calls (the exact softmax over a batch of --batch_size '
                  'contexts, as evaluation and scoring run them) instead of training steps.')
flags.DEFINE_integer('peak_size', 0, 'Side of the square float32 matmul whose rate the step\'s FLOP/s is measured '
                     'against (0: 2048 on CPU, 8192 elsewhere).')
flags.DEFINE_integer('peak_mib', 0, 'MiB of the elementwise pass that measures the bandwidth (0: 256 on CPU, '
                     '2048 elsewhere).')
ARGS = flags.FLAGS

COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all', 'collective-permute', 'pmax', 'psum')


def source_ops(hlo_text: str) -> dict[str, str]:
  """HLO instruction name -> the JAX operation it came from (the last part of its op_name)."""
  return {name: op_name.rsplit('/', 1)[-1].rstrip(')') for name, op_name in source_paths(hlo_text).items()}


def source_paths(hlo_text: str) -> dict[str, str]:
  """HLO instruction name -> its whole op_name (the jit, jvp/transpose and module scopes it came from)."""
  return dict(re.findall(r'%([\w.\-]+) = [^\n]*?metadata=\{op_name="([^"]+)"', hlo_text))


RANDOM = ('threefry', '_randint', '_uniform', 'draw_noise', 'random_bits', 'bernoulli')
EMBEDDING_OPS = ('gather', 'scatter', 'dynamic-slice', 'dynamic_slice', 'dynamic-update-slice')


def part(op_path: str, training: bool = True) -> str:
  """The part of a step an operation belongs to, from its op_name's scopes (a backward pass's work counts as
  its part's): random numbers; the loss; the vocabulary-sharded output layer (its shard_map: logits or
  sampled columns and their collectives); the features (the embedding's gathers and scatter-adds, the
  hidden layers' matmuls and nonlinearities); the optimiser's update (outside the forward and backward
  passes); other. In evaluation (no backward pass, no update) what the features do not compute is the output
  layer and its exact softmax."""
  lowered, source = op_path.lower(), op_path.rsplit('/', 1)[-1].lower()
  if any(k in lowered for k in RANDOM):
    return 'random numbers (noise words, dropout masks)'
  if any(k in lowered for k in ('softplus', 'log_softmax', 'logsumexp', 'xent')):
    return 'loss'
  if 'shard_map' in lowered:
    return 'output layer (vocabulary-sharded: logits or sampled columns, their collectives)'
  if any(k in lowered for k in ('features', 'embed', 'distant', 'block', 'hidden')):
    return 'embedding (gather C, scatter its gradient)' if source.startswith(EMBEDDING_OPS) else 'hidden layers'
  if not training:
    return 'output layer and its exact softmax'
  if 'jvp(' not in lowered and 'transpose(' not in lowered:
    return 'optimiser update'
  return 'other (casts, reshapes, concatenations)'


_ELEMENT_BYTES = {'pred': 1, 's8': 1, 'u8': 1, 's16': 2, 'u16': 2, 'f16': 2, 'bf16': 2, 's32': 4, 'u32': 4, 'f32': 4,
                  's64': 8, 'u64': 8, 'f64': 8, 'c64': 8, 'c128': 16}
_ARRAY = re.compile(r'\b([a-z]+\d*)\[([\d,]*)\]')
_INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%([\w.\-]+) = ')


def type_bytes(hlo_type: str) -> int:
  """Bytes of an HLO type: an array (f32[256,1000]{1,0}) or a tuple of them; token types count 0."""
  total = 0
  for dtype, dims in _ARRAY.findall(hlo_type):
    if dtype in _ELEMENT_BYTES:
      count = 1
      for d in filter(None, dims.split(',')):
        count *= int(d)
      total += count * _ELEMENT_BYTES[dtype]
  return total


def _split_instruction(rest: str) -> tuple[str, str]:
  """(result type, operand list) of an instruction's text after 'NAME = '."""
  if rest.startswith('('):  # a tuple type: up to its closing parenthesis
    depth = 0
    for i, ch in enumerate(rest):
      depth += {'(': 1, ')': -1}.get(ch, 0)
      if depth == 0:
        hlo_type, rest = rest[:i + 1], rest[i + 1:]
        break
    else:
      return rest, ''
  else:
    hlo_type, _, rest = rest.partition(' ')
  start = rest.find('(')
  if start < 0:
    return hlo_type, ''
  depth = 0
  for i in range(start, len(rest)):
    depth += {'(': 1, ')': -1}.get(rest[i], 0)
    if depth == 0:
      return hlo_type, rest[start + 1:i]
  return hlo_type, rest[start + 1:]


def _result_and_operand_bytes(hlo_text: str) -> dict[str, tuple[int, list[int]]]:
  """HLO instruction name -> (its result's bytes, each operand's bytes) (names are unique in a module)."""
  results, operands = {}, {}
  for line in hlo_text.splitlines():
    found = _INSTRUCTION.match(line)
    if found:
      hlo_type, args = _split_instruction(line[found.end():])
      results[found.group(1)] = type_bytes(hlo_type)
      operands[found.group(1)] = re.findall(r'%([\w.\-]+)', args)
  return {name: (size, [results.get(o, 0) for o in operands[name]]) for name, size in results.items()}


def op_bytes(hlo_text: str) -> dict[str, int]:
  """HLO instruction name -> bytes it names: its result's and its operands'."""
  return {name: result + sum(sizes) for name, (result, sizes) in _result_and_operand_bytes(hlo_text).items()}


IN_PLACE = ('scatter', 'dynamic-update-slice', 'dynamic_update_slice')
SLICE_READS = ('gather', 'dynamic-slice', 'dynamic_slice', 'slice')


def op_traffic(hlo_text: str, dispatch_steps: int = 1) -> dict[str, float]:
  """HLO instruction name -> the bytes it moves a step, closer than op_bytes' names: an operation that reads
  rows or a slice of an operand (gather, dynamic-slice) reads as many bytes of it as its result holds (at most
  the operand); one that updates a buffer in place (scatter, dynamic-update-slice) reads and writes the rows
  its updates touch (at most the buffer), not its whole buffer; a while loop moves nothing itself (its body's
  operations do); and with a resident dispatch of several steps, an operation of the program outside the loop
  (a transpose or the deferred decay's pass at the call's start or end) counts once for the dispatch's steps,
  and one inside a loop of a known trip count as many times as it runs (runs_per_call)."""
  sources, outside = source_ops(hlo_text), set(_entry_ops(hlo_text)) if dispatch_steps > 1 else set()
  runs = runs_per_call(hlo_text)
  traffic = {}
  for name, (result, sizes) in _result_and_operand_bytes(hlo_text).items():
    source = sources.get(name, '')
    if name.startswith('while'):
      moved = 0
    elif source.startswith(IN_PLACE) and result in sizes:  # the buffer aliased to the result
      rest = list(sizes)
      rest.remove(result)
      # indices and updates read, the touched rows (at most the whole buffer) read and written
      moved = sum(rest) + 2 * min(max(rest, default=0), result)
    elif source.startswith(SLICE_READS) and sizes:
      # the rows read from the largest operand (at most all of it), then written
      moved = result + min(result, max(sizes)) + sum(sizes) - max(sizes)
    else:
      moved = result + sum(sizes)
    traffic[name] = runs.get(name, 1) * (moved / dispatch_steps if name in outside else moved)
  return traffic


def _entry_ops(hlo_text: str) -> list[str]:
  """The instructions of the program's entry computation (outside its loops' bodies)."""
  return [_INSTRUCTION.match(line).group(1) for line in _computations(hlo_text).get('ENTRY', ())]


def category(op: str, source: str) -> str:
  if source == 'dot_general' or op.startswith('dot'):
    return 'matmul'
  if any(op.startswith(c) or source.startswith(c) for c in COLLECTIVES):
    return 'collective'
  return 'other'


def op_times(trace_dir: str, module: str) -> tuple[collections.Counter, int]:
  """Microseconds per HLO operation of `module`, summed over the trace's events and devices, and the
  number of those events (on a GPU, kernels run)."""
  paths = glob.glob(os.path.join(trace_dir, '**', '*.trace.json.gz'), recursive=True)
  if not paths:
    raise SystemExit(f'error: the profiler wrote no trace under {trace_dir}; is this jax build able to profile?')
  with gzip.open(paths[0]) as f:
    trace = json.load(f)
  times, events = collections.Counter(), 0
  for event in trace['traceEvents'] if isinstance(trace, dict) else trace:
    args = event.get('args') or {}
    if event.get('ph') == 'X' and args.get('hlo_module') == module and 'hlo_op' in args:
      times[args['hlo_op']] += event.get('dur', 0.0)
      events += 1
  return times, events


def single_steps(model, compiled, state, mesh):
  """(the step's compiled HLO, state -> state after one step on the next random batch), one step a call."""
  import jax  # pylint: disable=g-import-not-at-top  # after backend.configure
  batches = [tuple(sharding.put_batch(mesh, x) for x in b)
             for b in common.random_batches(ARGS.vocab, model.context_size, ARGS.batch_size, ARGS.steps + 1)]
  hlo = compiled.lower_train(state, *batches[0]).compile().as_text()
  calls = iter(batches)

  def run(state):
    state, metrics = compiled.train(state, *next(calls))
    jax.block_until_ready(metrics)
    return state
  return hlo, run


def evaluation_calls(model, compiled, state, mesh):
  """(the evaluation call's compiled HLO, state -> state after one call on the next random batch): the
  exact -log P of --batch_size targets, as evaluation and scoring run it (steps.eval)."""
  import jax  # pylint: disable=g-import-not-at-top  # after backend.configure

  from nplm_jax.training import steps as steps_lib  # pylint: disable=g-import-not-at-top
  params = steps_lib.evaluated_params(state)
  batches = [tuple(sharding.put_batch(mesh, x) for x in b)
             for b in common.random_batches(ARGS.vocab, model.context_size, ARGS.batch_size, ARGS.steps + 1)]
  hlo = compiled.eval.lower(params, *batches[0]).compile().as_text()
  calls = iter(batches)

  def run(state):
    jax.block_until_ready(compiled.eval(params, *next(calls)))
    return state
  return hlo, run


_COMPUTATION = re.compile(r'^(?:ENTRY )?%([\w.\-]+) ')


def _computations(hlo_text: str) -> dict[str, list[str]]:
  """Computation name -> its instruction lines (the entry computation under the name 'ENTRY')."""
  computations, current = {}, None
  for line in hlo_text.splitlines():
    header = _COMPUTATION.match(line)
    if header and line.rstrip().endswith('{'):
      current = 'ENTRY' if line.startswith('ENTRY') else header.group(1)
      computations[current] = []
    elif line.startswith('}'):
      current = None
    elif current is not None and _INSTRUCTION.match(line):
      computations[current].append(line)
  return computations


def runs_per_call(hlo_text: str) -> dict[str, int]:
  """Instruction name -> how many times a call of the program runs it: the product of the known trip counts
  of the while loops around it (the exact softmax's loop over vocabulary blocks runs its body once a block).
  A loop whose trip count is a traced number (a resident dispatch's loop of steps) counts once: every
  figure is a step's."""
  computations = _computations(hlo_text)
  callees = {name: [] for name in computations}
  for name, lines in computations.items():
    for line in lines:
      trips = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
      for kind, callee in re.findall(r'\b(body|condition|calls|to_apply)=%([\w.\-]+)', line):
        callees[name].append((callee, int(trips.group(1)) if trips and kind == 'body' else 1))
  runs, pending = {'ENTRY': 1}, ['ENTRY']
  while pending:
    name = pending.pop()
    for callee, trips in callees.get(name, ()):
      if callee in computations and callee not in runs:
        runs[callee] = runs[name] * trips
        pending.append(callee)
  return {_INSTRUCTION.match(line).group(1): runs.get(name, 1) for name, lines in computations.items()
          for line in lines}


def flops_of(hlo_text: str) -> float:
  """FLOPs of a program's dots per device, from their shapes in the compiled HLO: 2 x the result's elements x
  the contracted size (the matmul work; elementwise work left out), each dot as many times as a call runs it
  (runs_per_call)."""
  shapes, dots, runs = {}, [], runs_per_call(hlo_text)
  for line in hlo_text.splitlines():
    found = _INSTRUCTION.match(line)
    if found:
      hlo_type, args = _split_instruction(line[found.end():])
      shapes[found.group(1)] = hlo_type
      if ' dot(' in line:
        dots.append((hlo_type, args, line, runs.get(found.group(1), 1)))
  total = 0.0
  for hlo_type, args, line, times in dots:
    result = _ARRAY.search(hlo_type)
    contracting = re.search(r'lhs_contracting_dims=\{([\d,]*)\}', line)
    operands = re.findall(r'%([\w.\-]+)', args)
    lhs = _ARRAY.search(shapes.get(operands[0], '')) if operands else None
    if not (result and contracting and lhs):
      continue
    lhs_dims = [int(d) for d in lhs.group(2).split(',') if d]
    total += 2.0 * times * math.prod(int(d) for d in result.group(2).split(',') if d) * math.prod(
        lhs_dims[int(i)] for i in contracting.group(1).split(',') if i)
  return total


def _figure(value: float) -> float:
  """A rate or a ratio to 4 significant digits, whatever its size (a tiny model's GFLOP/s too)."""
  return float(f'{value:.4g}')


def resident_dispatch(model, compiled, state, mesh):
  """(the dispatch's compiled HLO, state -> state after ARGS.dispatch_steps steps in one call), each step's
  batch gathered on the devices from random token ids (steps.train_resident_steps)."""
  import jax  # pylint: disable=g-import-not-at-top  # after backend.configure

  from nplm_jax.training import device_data  # pylint: disable=g-import-not-at-top
  from nplm_jax.training import steps as steps_lib  # pylint: disable=g-import-not-at-top
  examples = ARGS.dispatch_steps * (ARGS.steps + 1) * ARGS.batch_size
  rng = np.random.default_rng(0)
  ids = device_data.put_replicated(mesh, rng.integers(0, ARGS.vocab, examples + model.context_size).astype(np.int32))
  order = device_data.put_replicated(mesh, rng.permutation(examples).astype(np.int32))
  dispatch = compiled.resident_steps(ARGS.dispatch_steps)
  args = lambda state: (state, ids, order, np.float32(1.0), steps_lib.Interval.start(), np.int32(ARGS.dispatch_steps))
  hlo = dispatch.lower(*args(state)).compile().as_text()

  def run(state):
    state, interval = dispatch(*args(state))
    jax.block_until_ready(interval)
    return state
  return hlo, run


def loop_ops(hlo_text: str) -> list[str]:
  """The while loops of the program's entry computation: a resident dispatch's loop of steps."""
  return re.findall(r'^\s*%(while[\w.\-]*) = ', hlo_text[hlo_text.index('ENTRY'):], re.MULTILINE)


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  config = ARGS.config
  config.train.batch_size = ARGS.batch_size
  if not ARGS.command_buffers:  # before JAX starts its backends; other backends ignore the flag
    os.environ['XLA_FLAGS'] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_enable_command_buffer=".strip()
  backend.configure(config)  # before JAX starts its backends
  mesh = sharding.make_mesh(config.mesh)
  dispatch = ARGS.dispatch_steps
  model, compiled, state = common.build_train_step(config, ARGS.vocab, mesh,
                                                   steps_per_epoch=dispatch * (ARGS.steps + 1) if dispatch > 1 else 0)
  trace_dir = ARGS.trace_dir or tempfile.mkdtemp(prefix='nplm_profile_')
  with jax.set_mesh(mesh):
    profiled = evaluation_calls if ARGS.evaluate else resident_dispatch if dispatch > 1 else single_steps
    hlo, run = profiled(model, compiled, state, mesh)
    state = run(state)  # warm-up
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      started = time.perf_counter()
      for _ in range(ARGS.steps):
        state = run(state)  # one call at a time: per-call times stay separable
      wall_ms = (time.perf_counter() - started) * 1e3 / ARGS.steps / dispatch
  on_cpu = jax.devices()[0].platform == 'cpu'
  peak_gbps = common.peak_copy_gbps(ARGS.peak_mib or (256 if on_cpu else 2048))
  peak_gflops = common.peak_matmul_tflops('float32', ARGS.peak_size or (2048 if on_cpu else 8192)) * 1e3
  devices = mesh.size
  module = re.match(r'HloModule ([\w.\-]+)', hlo).group(1)  # the step's own name, whatever jit calls it
  times, events = op_times(trace_dir, module)
  for loop in loop_ops(hlo) if dispatch > 1 else ():  # its event, where it has one, spans its steps' operations
    events -= bool(times.pop(loop, 0))
  per_step = {op: us / 1e3 / ARGS.steps / dispatch / devices for op, us in times.items()}
  sources, sizes, paths = source_ops(hlo), op_bytes(hlo), source_paths(hlo)
  totals, parts, part_bytes = collections.Counter(), collections.Counter(), collections.Counter()
  for op, ms in per_step.items():
    totals[category(op, sources.get(op, ''))] += ms
    where = part(paths.get(op, op), not ARGS.evaluate)
    parts[where] += ms
    part_bytes[where] += sizes.get(op, 0)
  step_ms = sum(per_step.values())
  print(f'{jax.devices()[0].platform}, mesh {mesh.shape["data"]}x{mesh.shape["model"]}, batch {ARGS.batch_size}, '
        f'|V|={ARGS.vocab}, {ARGS["config"].serialize()}: {wall_ms:.2f} ms a step (under the profiler), '
        f'{step_ms:.2f} ms of them in XLA operations (per device)')
  print('operation | from | ms/step | share | MB named | GB/s')
  for op, ms in sorted(per_step.items(), key=lambda kv: -kv[1])[:ARGS.top]:
    mb = sizes.get(op, 0) / 1e6
    print(f'{op} | {sources.get(op, "?")} | {ms:.3f} | {ms / step_ms:.0%} | {mb:.1f} | '
          f'{mb / ms if ms else 0.0:.0f}')
  print('part | ms/step | share | MB named | GB/s | of the bandwidth measured')
  for name, ms in parts.most_common():
    mb = part_bytes[name] / 1e6
    print(f'{name} | {ms:.3f} | {ms / step_ms:.0%} | {mb:.1f} | {mb / ms if ms else 0.0:.1f} | '
          f'{mb / ms / peak_gbps if ms else 0.0:.0%}')
  gbytes = sum(sizes.get(op, 0) for op in per_step) / 1e9  # each operation the trace saw, once a step
  gflop = flops_of(hlo) / 1e9  # a resident dispatch's loop body holds one step's dots, counted once
  traffic = op_traffic(hlo, dispatch)
  traffic_gbytes = sum(traffic.get(op, 0) for op in per_step) / 1e9
  bound_ms = max(gflop / peak_gflops, traffic_gbytes / peak_gbps) * 1e3
  row = {'config': ARGS['config'].serialize(), 'vocab': ARGS.vocab, 'platform': jax.devices()[0].platform,
         'mesh': f'{mesh.shape["data"]}x{mesh.shape["model"]}', 'batch_size': ARGS.batch_size, 'wall_step_ms': round(wall_ms, 3), 'step_ms': round(step_ms, 3),
         **{f'{c}_ms': round(totals[c], 3) for c in ('matmul', 'collective', 'other')},
         'matmul_share': round(totals['matmul'] / step_ms, 4) if step_ms else 0.0,
         'gbytes': round(gbytes, 6), 'peak_gbps': round(peak_gbps, 2),
         'bandwidth_bound_ms': round(gbytes / peak_gbps * 1e3, 3),
         # operations run a step and device, and the step's time outside them (launches, the host, waits):
         # a step of many short operations with a large gap is bound by launching them, not by memory
         'ops_per_step': round(events / ARGS.steps / dispatch / devices, 1), 'gap_ms': round(wall_ms - step_ms, 3),
         'dispatch_steps': dispatch, 'evaluate': ARGS.evaluate,
         # the matmuls' FLOPs a step and device against a large float32 matmul's rate measured in the same run,
         # and the bytes named against the bandwidth measured
         'gflop': _figure(gflop), 'gflops': _figure(gflop / wall_ms * 1e3), 'peak_gflops': _figure(peak_gflops),
         'of_peak_gflops': _figure(gflop / wall_ms * 1e3 / peak_gflops),
         'of_peak_gbps': _figure(gbytes / wall_ms * 1e3 / peak_gbps),
         # the bytes the operations move (op_traffic: reads of rows and updates in place as what they touch)
         'traffic_gbytes': _figure(traffic_gbytes), 'traffic_ms': round(traffic_gbytes / peak_gbps * 1e3, 3),
         # the step's limit: the larger of its matmul time and its traffic time at the rates measured
         'bound_ms': _figure(bound_ms), 'of_bound': _figure(bound_ms / wall_ms),
         'parts_ms': {name: round(ms, 3) for name, ms in parts.most_common()}}
  print(f'matmuls {row["matmul_ms"]} ms ({row["matmul_share"]:.0%}), collectives {row["collective_ms"]} ms '
        f'(waiting for the slower device included), other {row["other_ms"]} ms; the operations name '
        f'{gbytes:.3f} GB a step, {row["bandwidth_bound_ms"]} ms at the {peak_gbps:.0f} GB/s measured; '
        f'{row["ops_per_step"]:g} operations run a step, {row["gap_ms"]} ms of the step outside them; the '
        f'matmuls do {gflop:.3f} GFLOP a step, {row["gflops"]:.1f} GFLOP/s over the wall step, '
        f'{row["of_peak_gflops"]:.0%} of the {peak_gflops:.0f} GFLOP/s a large float32 matmul ran at here; they '
        f'move {traffic_gbytes:.3f} GB a step, {row["traffic_ms"]} ms at that bandwidth; the step\'s bound (the '
        f'larger time) {bound_ms:.2f} ms, {row["of_bound"]:.0%} of the wall step')
  common.emit(row)


if __name__ == '__main__':
  app.run(main)
