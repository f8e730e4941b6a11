"""Smoke tests: the benchmark scripts run from a clean clone on tiny shapes and print their JSON."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from nplm_jax.parallel import sharding

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ['--vocab=61', '--batch_sizes=8,16', '--steps=2', '--repeats=1']
SMALL_PEAK = ['--peak_size=64']  # the MFU's reference matmul: 2048 on CPU by default, 20 s a run
SMALL_BANDWIDTH_PASS = ['--peak_mib=16']  # profile_step's bandwidth pass: 256 MiB on CPU by default, 18 s at -O0


def run(script, *args):
  proc = subprocess.run([sys.executable, os.path.join('benchmarks', script), *args], cwd=REPO,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')]


def require_torch():
  if importlib.util.find_spec('torch') is None:
    message = 'torch is not installed: pip install -r benchmarks/requirements.txt'
    if os.environ.get('CI'):
      pytest.fail(message)  # CI installs it; a skip there would hide a broken benchmark
    pytest.skip(message)


def test_throughput_prints_one_json_line_per_batch_size():
  rows = run('throughput.py', '--config=experiments/brown.py:mlp1', '--config.model.m=4', '--config.model.h=6', *TINY,
             *SMALL_PEAK)
  assert [r['batch_size'] for r in rows] == [8, 16]
  for r in rows:
    assert r['train_tokens_per_sec'] > 0 and r['eval_tokens_per_sec'] > 0 and r['peak_gflops'] > 0 and r['gflops'] > 0


def test_throughput_memory_only_compiles_the_steps_and_times_nothing():
  """--memory_only: each path's compiled memory, nothing run (a GPU's sizes compiled on a CPU, where the
  Pallas kernels would be interpreted), the kernel's settings on the line."""
  rows = run('throughput.py', '--config=experiments/brown.py:mlp1', '--config.model.m=4', '--config.model.h=6',
             '--vocab=61', '--batch_sizes=8', '--memory_only', '--softmax_kernels=xla,pallas_loop_dz',
             '--config.train.softmax_kernel_tuning=dz_axis=vocab,dz_chunks=2')
  assert [r['softmax_kernel'] for r in rows] == ['xla', 'pallas_loop_dz']
  for r in rows:
    assert r['train_temp_mib'] >= 0 and r['eval_temp_mib'] >= 0 and 'train_tokens_per_sec' not in r
    assert r['softmax_kernel_tuning'] == 'dz_axis=vocab,dz_chunks=2'


def test_throughput_loop_runs_the_real_training_loop_beside_the_step():
  rows = run('throughput.py', '--config=experiments/brown.py:mlp1', '--config.model.m=4', '--config.model.h=6',
             '--vocab=61', '--batch_sizes=8', '--steps=2', '--repeats=1', '--loop', '--loop_steps=40',
             '--peak_size=64')
  assert rows[0]['loop_train_tokens_per_sec'] > 0 and rows[0]['loop_vs_step'] > 0
  assert 0 < rows[0]['mfu_f32'] and rows[0]['peak_bf16_tflops'] > 0 and rows[0]['peak_f32_tflops'] > 0


def test_a_line_names_the_output_layers_path_auto_resolved_to(monkeypatch):
  """On one GPU train.softmax_kernel='auto' is resolved by each traced call's shapes: throughput's line names
  what the step ran, from a shard's examples and columns, K and the compute dtype (vocab_softmax.auto_kernel)."""
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from nplm_jax import cli  # pylint: disable=g-import-not-at-top
  from nplm_jax.parallel import sharding  # pylint: disable=g-import-not-at-top
  config = cli.config_from_flags('experiments/brown.py:mlp1', ['--config.model.m=4', '--config.model.h=6',
                                                              '--config.model.compute_dtype=bfloat16'])
  mesh = sharding.make_mesh(config.mesh)
  model, _, state = common.build_train_step(config, 61, mesh)
  assert common.softmax_kernel_ran(config, mesh, model, state.params, 8) == 'xla'  # a CPU: XLA
  asked = []
  monkeypatch.setattr(common, 'softmax_kernel', lambda config, mesh: 'auto')  # as on one GPU
  monkeypatch.setattr(common.vocab_softmax, 'auto_kernel', lambda *args: asked.append(args) or 'pallas_mosaic')
  assert common.softmax_kernel_ran(config, mesh, model, state.params, 8) == 'pallas_mosaic'
  k = model.feature_dim  # h, and with direct connections the window's (n - 1) m
  assert asked == [('cpu', 8 // mesh.shape['data'], model.padded_vocab_size // mesh.shape['model'], k, 'bfloat16', '')]


@pytest.mark.parametrize('cpu_devices, tuning, why', [(1, 'block_b=32', '64 rows a program'),
                                                     (2, '', 'mesh.cpu_devices=1')])
def test_throughput_runs_the_other_output_layer_paths_when_one_fails(cpu_devices, tuning, why):
  """--softmax_kernels side by side: a path that cannot run (here the Mosaic GPU form with tiles of 32 rows,
  or on a CPU mesh of several devices: its one-line error, as training gives it) gets an error line, the
  others their figures (each line as it is measured), and the exit status says so."""
  proc = subprocess.run([sys.executable, 'benchmarks/throughput.py', '--config=experiments/brown.py:mlp1',
                         '--config.model.m=4', '--config.model.h=6', *TINY, *SMALL_PEAK,
                         f'--config.mesh.cpu_devices={cpu_devices}', '--softmax_kernels=pallas_mosaic,xla',
                         f'--config.train.softmax_kernel_tuning={tuning}'],
                        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                        # another test in this worker may have set XLA_FLAGS' device count, which would win
                        env=dict(os.environ, XLA_FLAGS=sharding.without_host_device_count()))
  rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{')]
  assert proc.returncode == 1 and 'error: pallas_mosaic did not run' in proc.stderr, proc.stderr[-2000:]
  assert rows[0]['softmax_kernel'] == 'pallas_mosaic' and why in rows[0]['error'], rows[0]
  assert [r['softmax_kernel'] for r in rows[1:]] == ['xla', 'xla'] and all(r['train_tokens_per_sec'] > 0 for r in rows[1:])


def test_the_kernel_settings_benchmark_compares_each_with_xla():
  """benchmarks/softmax_kernel_tiles.py on a tiny shard (the kernels interpreted), each path through
  token_nll as training runs it: XLA's line first, then one a setting with its ratio to XLA and its
  difference from XLA's loss and gradients (the loop form's and the Mosaic GPU form's, XLA streamed); a
  setting that is not LoopTuning's or xla,vocab_block=N is refused in one line before anything runs."""
  rows = run('softmax_kernel_tiles.py', '--vocab=300', '--batch=40', '--features=12', '--steps=1', '--repeats=1',
             '--settings=xla,vocab_block=128;chosen;k_chunk=8,splits=1;backward=dz,block_b=128,block_v=128,num_warps=8;'
             'mosaic;mosaic,num_stages=1,splits=2;mosaic,dz_axis=vocab,dz_chunks=2')
  assert [r['setting'] for r in rows] == ['xla', 'xla,vocab_block=128', 'chosen', 'k_chunk=8,splits=1',
                                          'backward=dz,block_b=128,block_v=128,num_warps=8', 'mosaic',
                                          'mosaic,num_stages=1,splits=2', 'mosaic,dz_axis=vocab,dz_chunks=2']
  for r in rows:
    assert r['tokens_per_sec'] > 0 and r['vs_xla'] > 0 and r['features'] == 12 and 'error' not in r
  for r in rows[1:]:  # bfloat16 dz (the kernels) against XLA's bfloat16 dlogits: the same rounding
    assert r['vs_best_xla'] > 0 and r['error_vs_xla'] < 2e-2, r
  assert rows[1]['error_vs_xla'] < 1e-5  # XLA streamed: the same sums in another order
  # float32 at the backend's own products (TF32 on a GPU; exact here): the Mosaic GPU form's float32 beside XLA's
  rows = run('softmax_kernel_tiles.py', '--vocab=300', '--batch=40', '--features=12', '--steps=1', '--repeats=1',
             '--dtype=float32', '--matmul_precision=default', '--settings=mosaic')
  assert [r['setting'] for r in rows] == ['xla', 'mosaic'] and rows[1]['matmul_precision'] == 'default'
  assert rows[1]['tokens_per_sec'] > 0 and rows[1]['error_vs_xla'] < 1e-5, rows[1]
  for settings, message in (('chosen;block_b=48', "block_b must be a power of two (Triton loads no other size), not 48"),
                            ('xla,block=8', "'xla,block=8' is not xla,vocab_block=N")):
    proc = subprocess.run([sys.executable, 'benchmarks/softmax_kernel_tiles.py', f'--settings={settings}'],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_the_gradient_matmul_benchmark_times_each_form_against_the_steps_own():
  """benchmarks/gradient_matmul.py on tiny shapes: the update alone, then every form (rows, dlogits, gradient
  dtype) with its time, bytes and first update checked against the step's own form (float32 forms within
  float32's rounding, bfloat16 ones within a bfloat16 rounding of the gradient); an unknown form is refused in
  one line before anything runs."""
  rows = run('gradient_matmul.py', '--batch=16', '--features=30', '--vocab=256', '--repeats=2')
  assert rows[0]['form'] == 'update_only' and rows[0]['ms'] > 0
  assert len(rows) == 13 and {r['rows'] for r in rows[1:]} == {30, 31, 32}
  for r in rows[1:]:
    assert r['ms'] > 0 and r['gbytes'] > 0 and r['tbps'] >= 0, r  # a tiny shape's TB/s rounds to 0
    assert r['error_vs_step'] < (1e-5 if r['gradient_dtype'] == 'float32' else 2.0 ** -7), r
  proc = subprocess.run([sys.executable, 'benchmarks/gradient_matmul.py', '--forms=odd/given/float32'], cwd=REPO,
                        capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1 and 'is not a form' in proc.stderr
  assert not proc.stdout, proc.stdout  # nothing measured first (it measured the research size's update, 16 s)


def test_checkpoint_cost_times_saves_with_and_without_checksums():
  row, = run('checkpoint_cost.py', '--config=experiments/brown.py:mlp1', '--config.model.m=4', '--config.model.h=6',
             '--vocab=61', '--rounds=1')
  assert row['save_with_s'] > 0 and row['save_without_s'] > 0 and row['restore_with_s'] > 0 and row['checksums_s'] > 0


def test_the_gpu_figures_script_parses():
  proc = subprocess.run(['bash', '-n', os.path.join('benchmarks', 'gpu_figures.sh')], cwd=REPO, capture_output=True,
                        text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr


def test_throughput_with_sampled_softmax():
  rows = run('throughput.py', '--config=experiments/brown.py:mlp1', '--config.model.m=4', '--config.model.h=6',
             '--config.loss.name=sampled_softmax', '--config.loss.num_samples=5', *TINY, *SMALL_PEAK)
  assert len(rows) == 2


def test_parallel_step_benchmark():
  rows = run('parallel_step.py', '--meshes=1x1,1x4,4x1', '--devices=4', '--batch_size=8', '--vocab=61', '--steps=2',
             '--repeats=1', '--config.model.m=4', '--config.model.h=6')
  assert [r['mesh'] for r in rows] == ['1x1', '1x4', '4x1']
  sharded = {r['mesh']: r['output_layer_mib_per_device'] for r in rows}
  assert sharded['1x4'] < sharded['1x1'] == sharded['4x1']


def test_torch_reference_and_compare():
  require_torch()
  rows = run('torch_reference.py', '--m=4', '--h=6', *TINY)
  assert [r['batch_size'] for r in rows] == [8, 16] and all(r['train_tokens_per_sec'] > 0 for r in rows)
  rows = run('compare.py', '--rounds=1', '--m=4', '--h=6', *TINY, *SMALL_PEAK)
  assert [r['batch_size'] for r in rows] == [8, 16] and all(r['train_ratio'] > 0 for r in rows)


def test_profile_step_attributes_the_step_to_operations():
  rows = run('profile_step.py', '--batch_size=8', '--vocab=61', '--steps=2', '--config.model.m=4',
             '--config.model.h=6', *SMALL_BANDWIDTH_PASS, *SMALL_PEAK)
  [row] = rows
  assert row['batch_size'] == 8 and row['step_ms'] > 0 and row['matmul_ms'] > 0
  assert abs(row['matmul_ms'] + row['collective_ms'] + row['other_ms'] - row['step_ms']) < 1e-2
  assert row['gbytes'] > 0 and row['peak_gbps'] > 0  # the step's traffic against the bandwidth, same run
  assert row['bandwidth_bound_ms'] == pytest.approx(row['gbytes'] / row['peak_gbps'] * 1e3, rel=0.05, abs=2e-3)  # rounded
  assert row['ops_per_step'] >= 1 and row['gap_ms'] == pytest.approx(row['wall_step_ms'] - row['step_ms'], abs=2e-3)


def test_profile_step_splits_the_step_by_part_and_rates_its_matmuls_against_the_machines():
  """Each part's time (random numbers, loss, output layer, embedding, hidden layers, optimiser update) adds up to
  the operations' sum; the matmuls' FLOPs are those of the model's shapes; evaluation calls profile alone."""
  [train] = run('profile_step.py', '--batch_size=8', '--vocab=61', '--steps=2', '--config.model.m=4',
                '--config.model.h=6', '--config.mesh.cpu_devices=1', *SMALL_BANDWIDTH_PASS, *SMALL_PEAK)
  assert sum(train['parts_ms'].values()) == pytest.approx(train['step_ms'], abs=0.01)
  assert {'optimiser update', 'hidden layers'} <= set(train['parts_ms'])
  assert train['peak_gflops'] > 0 and train['of_peak_gflops'] == pytest.approx(
      train['gflops'] / train['peak_gflops'], rel=2e-3)  # each figure to 4 significant digits
  # the bound: the larger of the matmuls' time at the matmul rate and the bytes' time at the bandwidth
  assert train['bound_ms'] == pytest.approx(max(train['gflop'] / train['peak_gflops'],
                                                train['traffic_gbytes'] / train['peak_gbps']) * 1e3, rel=3e-3)
  assert 0 < train['traffic_gbytes'] <= train['gbytes']
  # each figure to 4 significant digits, the wall step to 3 decimals
  assert train['of_bound'] == pytest.approx(train['bound_ms'] / train['wall_step_ms'], rel=2e-3 + 5e-4 / train['wall_step_ms'])
  [evaluation] = run('profile_step.py', '--batch_size=8', '--vocab=61', '--steps=2', '--config.model.m=4',
                     '--config.model.h=6', '--config.mesh.cpu_devices=1', '--evaluate', *SMALL_BANDWIDTH_PASS,
                     *SMALL_PEAK)
  assert evaluation['evaluate'] and 'optimiser update' not in evaluation['parts_ms']
  # the forward pass's matmuls (brown.py:mlp1's shapes: n 5, direct connections): 2 x 8 x (4 m x h + (4 m + h) x |V|)
  m, h, vocab, batch = 4, 6, 61, 8
  forward = 2 * batch * (4 * m * h + (4 * m + h) * 64)  # |V| padded to 64
  assert forward * 0.9 <= evaluation['gflop'] * 1e9 <= forward * 1.1 + 2 * batch * (4 * m + h + 1) * 64, (
      evaluation['gflop'], vocab)


def test_profile_step_attributes_a_dispatch_of_several_steps_to_a_steps_operations():
  """--dispatch_steps: the resident loop as training runs it, its carried cast layer (and the layer's gradient in
  bfloat16, as gpu_figures.sh profiles it) included; the figures a step's (the loop's operations over its steps),
  the loop's own event not counted beside its body's."""
  rows = run('profile_step.py', '--batch_size=8', '--vocab=61', '--steps=2', '--config.model.m=4',
             '--config.model.h=6', *SMALL_BANDWIDTH_PASS, *SMALL_PEAK, '--dispatch_steps=3', '--config.model.compute_dtype=bfloat16',
             '--config.train.carry_cast_layer=whole', '--config.train.output_layer_gradient_dtype=bfloat16')
  [row] = rows
  assert row['dispatch_steps'] == 3 and row['step_ms'] > 0 and row['matmul_ms'] > 0
  assert abs(row['matmul_ms'] + row['collective_ms'] + row['other_ms'] - row['step_ms']) < 1e-2
  assert row['ops_per_step'] >= 1 and row['wall_step_ms'] > 0
  # the loop's body is one step: its matmuls, a training step's (the forward pass's and about twice that
  # backward, as in the test above), not a third of them
  m, h, batch = 4, 6, 8
  forward = 2 * batch * (4 * m * h + (4 * m + h) * 64)
  assert 2 * forward <= row['gflop'] * 1e9 <= 4 * forward, row['gflop']


def test_an_operation_names_the_bytes_of_its_operands_and_results():
  from benchmarks import profile_step  # pylint: disable=g-import-not-at-top
  hlo = '''HloModule m
ENTRY %main (a: f32[256,1000], b: bf16[1000,4]) -> (f32[256,4], s32[]) {
  %a = f32[256,1000]{1,0} parameter(0)
  %b = bf16[1000,4]{1,0} parameter(1)
  %fusion.1 = f32[256,4]{1,0} fusion(%a, %b), kind=kOutput, calls=%fused, metadata={op_name="jit(f)/dot_general"}
  %sort.2 = (s32[256]{0}, f32[256]{0}) sort(s32[256]{0} %x, f32[256]{0} %y), dimensions={0}, to_apply=%lt
  ROOT %t = (f32[256,4]{1,0}, s32[]) tuple(%fusion.1, %c)
}'''
  sizes = profile_step.op_bytes(hlo)
  assert sizes['fusion.1'] == 256 * 4 * 4 + 256 * 1000 * 4 + 1000 * 4 * 2  # result, then both operands
  assert sizes['sort.2'] == 2 * 256 * 4  # a tuple result; operands not defined here count nothing
  assert profile_step.type_bytes('(f32[2,3]{1,0}, pred[4], token[])') == 24 + 4


def test_an_operation_moves_the_rows_it_reads_or_updates_and_a_dispatchs_setup_counts_once():
  from benchmarks import profile_step  # pylint: disable=g-import-not-at-top
  hlo = '''HloModule m
%body (p: (s32[], f32[1000,8])) -> (s32[], f32[1000,8]) {
  %table = f32[1000,8]{1,0} get-tuple-element(%p), index=1
  %ids = s32[16,1]{1,0} constant({...})
  %rows = f32[16,8]{1,0} fusion(%table, %ids), kind=kLoop, calls=%g, metadata={op_name="jit(f)/while/body/gather"}
  %added = f32[1000,8]{1,0} fusion(%table, %ids, %rows), kind=kLoop, calls=%s, metadata={op_name="jit(f)/while/body/scatter-add"}
  ROOT %out = (s32[], f32[1000,8]) tuple(%i, %added)
}
ENTRY %main (a: f32[1000,8]) -> f32[8,1000] {
  %a = f32[1000,8]{1,0} parameter(0)
  %start = (s32[], f32[1000,8]) tuple(%zero, %a)
  %while.1 = (s32[], f32[1000,8]) while(%start), condition=%c, body=%body
  %done = f32[1000,8]{1,0} get-tuple-element(%while.1), index=1
  ROOT %copy.2 = f32[8,1000]{1,0} copy(%done), metadata={op_name="jit(f)/transpose"}
}'''
  moved = profile_step.op_traffic(hlo, dispatch_steps=10)
  rows, ids = 16 * 8 * 4, 16 * 4
  assert moved['rows'] == 2 * rows + ids  # the rows read and written, not the whole table
  assert moved['added'] == ids + rows + 2 * rows  # indices and updates read, the touched rows read and written
  assert moved['while.1'] == 0 and moved['copy.2'] == 2 * 1000 * 8 * 4 / 10  # outside the loop: once for 10 steps
  assert profile_step.op_bytes(hlo)['added'] == 2 * 1000 * 8 * 4 + ids + rows  # what it names


def test_a_dot_in_a_loop_of_known_trip_count_counts_once_a_trip():
  """The exact softmax's vocabulary blocks: a loop of 3 blocks runs its dot 3 times a call, the dot after it once."""
  from benchmarks import profile_step  # pylint: disable=g-import-not-at-top
  hlo = '''HloModule m
%block (p: (s32[], f32[4,8], f32[8,16])) -> (s32[], f32[4,8], f32[8,16]) {
  %x = f32[4,8]{1,0} get-tuple-element(%p), index=1
  %w = f32[8,16]{1,0} get-tuple-element(%p), index=2
  %logits = f32[4,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %next = (s32[], f32[4,8], f32[8,16]) tuple(%i, %x, %w)
}
ENTRY %main (x: f32[4,8], w: f32[8,16]) -> f32[4,16] {
  %x = f32[4,8]{1,0} parameter(0)
  %w = f32[8,16]{1,0} parameter(1)
  %start = (s32[], f32[4,8], f32[8,16]) tuple(%zero, %x, %w)
  %while.3 = (s32[], f32[4,8], f32[8,16]) while(%start), condition=%c, body=%block, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %tail = f32[4,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}'''
  assert profile_step.runs_per_call(hlo)['logits'] == 3 and profile_step.runs_per_call(hlo)['tail'] == 1
  assert profile_step.flops_of(hlo) == 4 * 2 * 4 * 16 * 8


def test_the_bandwidth_pass_writes_over_its_input():
  """profile_step's bandwidth is a pass in place, as a step's updates are: a fresh output a call would time the
  system's new pages on a CPU, not the memory."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  x = jnp.ones((1024,), jnp.float32)
  y = common.in_place_pass()(x)
  assert x.is_deleted() and float(y[0]) == pytest.approx(2.0001)
  assert common.peak_copy_gbps(1, repeats=1, steps=2) > 0


def test_multiprocess_step_compares_one_process_with_two():
  rows = run('multiprocess_step.py', '--layouts=1x4:1x4,2x2:1x4,2x2:2x2', '--batch_size=16', '--vocab=61',
             '--steps=2', '--repeats=1', '--config.model.m=4', '--config.model.h=6')
  assert [(r['processes'], r['devices_per_process'], r['mesh']) for r in rows] == [
      (1, 4, '1x4'), (2, 2, '1x4'), (2, 2, '2x2')]
  assert all(r['train_tokens_per_sec'] > 0 and r['temp_mib'] > 0 for r in rows)
  # the same mesh holds the same output-layer block per device, whatever the number of processes
  assert rows[0]['output_layer_mib_per_device'] == rows[1]['output_layer_mib_per_device']
  for layout, message in (('1x4:1x4,2x2', 'is not PROCESSESxDEVICES:DATAxMODEL'), ('1x4:1x4,2x2:1x2', 'do not fill')):
    proc = subprocess.run([sys.executable, 'benchmarks/multiprocess_step.py', f'--layouts={layout}'], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and message in proc.stderr and not proc.stdout, proc.stderr  # before 1x4:1x4 ran


def test_scale_prepares_starts_and_bounds_the_ngram(tmp_path):
  rows = run('scale.py', '--train_tokens=200000', '--eval_tokens=20000', f'--folder={tmp_path}', '--batch_size=64',
             '--chunk_size=16',
             '--max_memory_gb=0.01')
  stages = {r['stage']: r for r in rows}
  prepared = stages['prepare']
  assert prepared['train_tokens'] == 210_000 and 500 < prepared['vocab_size'] < 20_000  # 200k words + <eos> a line
  startup = stages['training start-up (to the end of step 1)']
  assert startup['vocab_size'] == prepared['vocab_size'] and startup['startup_seconds'] > 0
  ngram_row = stages['Kneser-Ney 5-gram']
  assert ngram_row['outcome'].startswith('error: the order-5 n-gram model of') and 'GiB allowed' in ngram_row['outcome']


def test_input_pipeline_compares_feeds(tiny_files):
  rows = run('input_pipeline.py', '--config=experiments/text.py:tiny', *(f'--config.data.{s}_file={tiny_files[s]}'
             for s in ('train', 'valid', 'test')), '--batch_size=16', '--steps=3', '--rounds=1')
  assert [r['feed'] for r in rows] == ['fixed batch', 'real data, gathered in the loop', 'real data, grain threads']
  assert rows[0]['ratio_to_fixed'] == 1.0 and all(r['tokens_per_sec'] > 0 for r in rows)


def _script_overrides(path):
  """Every --config.KEY=VALUE, sweep --set=KEY=VALUE (and --softmax_kernels) a script passes, its shell loop variables replaced by each value they take
  (other variables, paths made at run time, left out)."""
  import re  # pylint: disable=g-import-not-at-top
  with open(os.path.join(REPO, path), encoding='utf-8') as f:
    text = f.read()
  loops = {name: values.split() for name, values in re.findall(r'for (\w+) in ([^;$]*?);', text)}
  loops['dtype'] = ['bfloat16', 'float32']  # `for dtype in ${DTYPES:-bfloat16 float32}`
  found = set()
  for key, value in re.findall(r'--(?:config\.|set=)([\w.]+)=([^\s"]+)', text):
    variable = re.fullmatch(r'\$(\w+)', value)
    if '$' in value and not (variable and variable.group(1) in loops):
      continue
    for each in (loops[variable.group(1)] if variable else [value]):
      found.add((key, each))
  for kernels in re.findall(r'--softmax_kernels=(\S+)', text):  # throughput.py's: train.softmax_kernel each
    kernels = re.sub(r'^\$\{\w+:-(.*)\}$', r'\1', kernels)  # ${FLOAT32_KERNELS:-xla,...}: its default
    found.update(('train.softmax_kernel', kernel) for kernel in kernels.split(','))
  return sorted(found)


@pytest.mark.parametrize('path,expected', [
    ('benchmarks/gpu_figures.sh', [('train.softmax_kernel', 'pallas_loop'), ('optimizer.mu_dtype', 'bfloat16'),
                                   ('optimizer.nu_dtype', 'bfloat16'), ('train.output_layer_gradient_dtype', 'bfloat16'),
                                   ('train.output_layer_gradient_form', 'dlogits_apart_rows_padded')]),
    ('benchmarks/gpu_figures.sh', [('model.embedding_gradient', 'sorted'), ('model.tied', 'False')])])
def test_every_config_override_the_gpu_scripts_pass_is_valid(path, expected):
  """A key or value the config refuses (train.softmax_kernel=pallas_loop was one) fails here, on the CPU,
  not minutes into a run on a GPU."""
  from nplm_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  overrides = _script_overrides(path)
  assert set(expected) <= set(overrides), overrides
  for key, text in overrides:
    config = config_lib.base_config()
    if key.startswith('optimizer.'):  # the scripts' optimiser keys go with AdamW (the base's is paper_sgd)
      config.optimizer.name = 'adamw'
    section, _, name = key.rpartition('.')
    current = (config[section] if section else config)[name]
    value = {bool: lambda t: t == 'True', int: int, float: float}.get(type(current), str)(text)
    config_lib.validate(config_lib.apply_overrides(config, {key: value}))


def test_score_sentences_prints_both_rates_and_their_ratio():
  rows = run('score_sentences.py', '--vocab=2000', '--sentences=50', '--rounds=1', '--train_steps=2')
  assert rows[-1]['sentences'] == 50 and rows[-1]['tokens'] == rows[0]['tokens'] > 50
  assert rows[-1]['separate_tokens_per_sec'] > 0 and rows[-1]['separate_over_stream'] > 0


def test_side_by_side_measures_each_form_in_rounds_and_their_ratios():
  tiny = '--config.model.m=4 --config.model.h=6 --steps=2 --repeats=1 --peak_size=64'
  rows = run('side_by_side.py', '--config=experiments/brown.py:mlp1', '--vocabs=61', '--batch_size=8', '--rounds=1',
             f'--form=one_device:--config.mesh.cpu_devices=1 {tiny}', f'--form=two_devices:--config.mesh.cpu_devices=2 {tiny}')
  [row] = rows
  assert set(row['forms']) == {'one_device', 'two_devices'} and row['rounds'] == 1 and row['vocab'] == 61
  assert all(form['train_tokens_per_sec'] > 0 and len(form['eval_tokens_rounds']) == 1 for form in row['forms'].values())
  assert row['one_device_over_two_devices_train'] > 0 and row['one_device_over_two_devices_eval'] > 0


def test_side_by_side_refuses_a_form_without_a_name():
  proc = subprocess.run([sys.executable, os.path.join('benchmarks', 'side_by_side.py'), '--form=--config.mesh.cpu_devices=1',
                         '--form=b:'], cwd=REPO, capture_output=True, text=True, timeout=60)
  assert proc.returncode == 2 and 'needs a name, a colon and its overrides' in proc.stderr


def test_load_memory_prints_the_rss_of_every_load_and_its_growth():
  rows = run('load_memory.py', '--loads=3', '--workdirs=2', '--vocab=200')
  assert [r['way'] for r in rows[:-1]] == ['closed'] * 3 + ['never_closed'] * 3 and all(r['rss_mib'] > 0 for r in rows[:-1])
  assert {'rss_growth_mib_closed', 'rss_growth_mib_never_closed'} <= set(rows[-1])
