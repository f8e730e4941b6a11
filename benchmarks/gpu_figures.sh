#!/usr/bin/env bash
# The GPU figures of docs/accelerators.md, on one GPU: bash benchmarks/gpu_figures.sh PART OUT_DIR
#   loop: the step alone against the training loop (benchmarks/throughput.py --loop) for Brown reg4_n7
#          and a research-size config, float32 'highest' / TF32 / bfloat16, deterministic ops on/off,
#          C's gradient as a scatter, a one-hot matmul or a sort, the output layer's bfloat16 copy carried
#          from step to step, AdamW's moments and the output layer's gradient in float32 or bfloat16 (each,
#          then all with the carried copy), XLA's command buffers off or
#          capturing the step loop too; the research size's step profiled at batch 256 and 1024
#          (profile_research_bf16_*), and its loop of 10 steps a dispatch with each carried copy;
#   softmax: the vocab_block rule at |V| 33k-300k, the previous loop (BASELINE=folder of an older
#          checkout, optional) on the same synthetic corpora, and the GPU smoke tests;
#   train: brown.py:reg4_n7 alone (end to end), then reg4_n7 in bfloat16 and the PTB table network
#          in float32 and bfloat16 side by side;
#   kernel: the GPU smoke tests (the kernel's GPU forms against NumPy on the GPU), then the fused
#          kernel in the training step ('pallas_mosaic' in bfloat16, also with dz_chunks=8 and with dz in
#          chunks of the vocabulary, dz_axis=vocab; 'pallas_loop'
#          and 'pallas_loop_dz', its gradients from dz) beside XLA's all-at-once and streamed paths at
#          batch 4096, |V| 17,905, 100k and 300k, bfloat16 then float32 (TF32 products, then IEEE;
#          DTYPES='bfloat16' for one), with compiled temporaries;
#   tiles: the kernel's GPU tests, then its GPU forms' settings (LoopTuning: tiles, vocabulary splits,
#          chunks of the feature width, Triton's warps and stages, the Mosaic GPU form's pipeline stages)
#          each beside XLA, the output layer alone (benchmarks/softmax_kernel_tiles.py), at TILES_RUNS
#          ('100000:bfloat16 300000:bfloat16 ...');
#   eval: evaluation throughput at batch 256, 1024 and 4096 (train.eval_batch_size's accelerator value)
#          for Brown reg4_n7, the research size and |V| 100k;
#   mps:   COPIES (6) of the PTB ladder's top row's training loop side by side (batch 256, bfloat16,
#          synthetic |V| 10,000), sharing the GPU in time slices (mps_off), then through CUDA's Multi-Process
#          Service (launch/mps.sh; mps_on): each copy's loop tokens/s and their sum (mps_sum_off, mps_sum_on),
#          which says whether a sweep's rows side by side run better through MPS;
#   revisited: the PTB ladder's top row's step profiled (XLA's per-operation times), its loop, then its step
#          with each suspect removed in turn (deterministic reductions, C's gradient as a sort or the distant
#          block's as a matmul, the distant block, dropout, the blocks, tying);
#   research_train: the research size trained briefly on PTB (1,500 steps, as RESULTS.md's CPU pairs),
#          bfloat16 matmuls, as it is and with every candidate at once: whether the test perplexity stays within 0.5%
#          on the GPU; each run's results.json, metrics.jsonl and log in OUT_DIR/research_train/NAME
#          (python -m launch.results collect --workdir=THAT ... keeps them);
#   train2: brown.py:reg4_n7 alone (end to end, the Brown words cached), then in bfloat16, then the
#          research-size loop without deterministic reductions (their cost).
# ONLY=NAME,NAME runs those benchmarks of a part alone; GPU_TESTS=EXPR
# runs only the tests/test_gpu.py tests that pytest -k EXPR selects (none: none), KERNEL_VOCABS='V V ...' the |V|s in
# that order (the kernel part), VOCAB_CHUNKS='4 8 ...' its counts of dz's chunks of the vocabulary, and
# FLOAT32_TF32_KERNELS='xla,pallas_mosaic' its float32 line's paths in TF32 (default: xla, the Mosaic GPU form and
# both loop forms), FLOAT32_KERNELS='xla,pallas_loop_dz' its IEEE float32 line's (default: xla and both loop forms);
# BASELINE=DIR (an older checkout) adds its research-size loop to `loop` and its loop to `softmax`.
# Needs NLTK_DATA and PTB_DIR for `train`. Each result is one JSON line in OUT_DIR/*.jsonl.
set -u
part=$1 out=$2
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# the research size: PTB's table network shape at a WikiText-2-sized vocabulary
RESEARCH_MODEL="--config=experiments/ptb.py --config.model.n=8 --config.model.m=200 --config.model.h=1000
  --config.model.feature_dropout=0.3 --config.model.hidden_dropout=0.5 --config.optimizer.name=adamw"
RESEARCH="$RESEARCH_MODEL --vocab=33278"
# every research-size candidate at once: the layer's copy carried whole, AdamW's moments and its gradient in bfloat16
CANDIDATES="--config.train.carry_cast_layer=whole --config.optimizer.mu_dtype=bfloat16
  --config.optimizer.nu_dtype=bfloat16 --config.train.output_layer_gradient_dtype=bfloat16"
REG4="--config=experiments/brown.py:reg4_n7 --vocab=17905"

wanted() {  # NAME: whether ONLY (a,b,...) names it, or is unset (then every benchmark runs)
  [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]
}

bench() {  # NAME ARGS...: one throughput.py run, its JSON lines tagged with NAME (ONLY=a,b: those names alone)
  bench_in . "$@"
}

bench_in() {  # DIR NAME ARGS...: bench with DIR's code (an older checkout: BASELINE)
  local dir=$1 name=$2; shift 2
  wanted "$name" || return 0
  echo "== $name: $*"
  (cd "$dir" && timeout 240 python benchmarks/throughput.py --steps=20 --repeats=5 "$@") >/tmp/$name.out 2>&1
  cat /tmp/$name.out >>"$out/log.txt"
  grep '^{' /tmp/$name.out | sed "s/^{/{\"name\": \"$name\", /" >>"$out/bench.jsonl"
  grep -v '^[0-9][0-9]:' /tmp/$name.out | tail -3
}

bench_script() {  # NAME SCRIPT ARGS...: a benchmarks/ script's JSON lines tagged NAME, each reaching OUT as it is
  # printed, so a run stopped early keeps those already timed (ONLY=a,b: those names alone)
  local name=$1 script=$2; shift 2
  wanted "$name" || return 0
  local shown="" arg
  for arg in "$@"; do  # an argument with a shell's special characters (a settings list's ';') in single quotes
    if [[ "$arg" =~ ^[A-Za-z0-9_./:=,+-]*$ ]]; then shown+=" $arg"; else shown+=" '$arg'"; fi
  done
  echo "== $name: $script$shown"
  timeout 240 python benchmarks/$script "$@" 2>&1 | tee -a "$out/log.txt" | grep --line-buffered '^{' \
    | sed -u "s/^{/{\"name\": \"$name\", /" | tee -a "$out/bench.jsonl" | cut -c1-200
}

train_short() {  # NAME ARGS...: the research size on PTB for TRAIN_STEPS (1,500) steps in bfloat16 with ARGS, its results.json,
  # metrics.jsonl and log kept in OUT_DIR/research_train/NAME (ONLY=a,b: those names alone)
  local name=$1; shift
  wanted "$name" || return 0
  local steps=${TRAIN_STEPS:-1500}
  echo "== $name: python -m nplm_jax.main" $RESEARCH_MODEL "--config.model.compute_dtype=bfloat16" \
    "--config.train.max_steps=$steps --config.train.eval_every=$steps $*"
  mkdir -p "$out/research_train/$name"
  timeout 200 python -m nplm_jax.main $RESEARCH_MODEL --config.model.compute_dtype=bfloat16 \
    --config.train.max_steps=$steps --config.train.eval_every=$steps "$@" --workdir=/tmp/research_train/$name \
    >"$out/research_train/$name/log.txt" 2>&1
  cp /tmp/research_train/$name/results.json /tmp/research_train/$name/metrics.jsonl "$out/research_train/$name/" 2>/dev/null
  grep -h 'done:' "$out/research_train/$name/log.txt" || tail -3 "$out/research_train/$name/log.txt"
}

gpu_tests() {  # SECONDS: tests/test_gpu.py (GPU_TESTS=EXPR: those pytest -k EXPR selects; GPU_TESTS=none: none)
  [ "${GPU_TESTS:-}" = none ] && return
  timeout "$1" python -m pytest -q -rfs tests/test_gpu.py ${GPU_TESTS:+-k "$GPU_TESTS"} 2>&1 | tail -25 \
    | tee -a "$out/log.txt"
}

profile() {  # NAME BATCH ARGS...: XLA's per-operation times of a step (benchmarks/profile_step.py) as text,
  # OUT_DIR/NAME.txt (ONLY=a,b: those names alone)
  local name=$1 batch=$2; shift 2
  wanted "$name" || return 0
  echo "== $name: --batch_size=$batch $*"
  timeout 180 python benchmarks/profile_step.py --batch_size=$batch --steps=5 --top=25 "$@" 2>&1 \
    | grep -v '^[0-9][0-9]:\|^[IWE][0-9]' >"$out/$name.txt"
  tail -32 "$out/$name.txt"
}

old_loop() {  # NAME BATCH VOCAB CONFIG_ARGS...: the older checkout's training loop on a synthetic corpus
  local name=$1 batch=$2 vocab=$3; shift 3
  local corpus=/tmp/synthetic_$vocab
  python -c "from benchmarks import common; common.write_synthetic_prepared('$corpus', $vocab, $batch * 3000 + 1, $batch * 4)"
  (cd "$BASELINE" && JAX_DEFAULT_MATMUL_PRECISION=highest timeout 240 python -m nplm_jax.main "$@" \
    --config.data.corpus=prepared --config.data.path=$corpus --config.train.batch_size=$batch \
    --config.train.max_steps=3000 --config.train.eval_every=3000 --config.train.log_every=300 \
    --config.train.patience=0 --config.mix.enabled=False --workdir=/tmp/old_$name) >>"$out/log.txt" 2>&1
  python - "$name" /tmp/old_$name/metrics.jsonl >>"$out/bench.jsonl" <<'EOF'
import json, statistics, sys
rates = [r['tokens_per_sec'] for r in map(json.loads, open(sys.argv[2])) if 'tokens_per_sec' in r]
print(json.dumps({'name': sys.argv[1], 'old_loop_train_tokens_per_sec': statistics.median(rates[1:])}))
EOF
  tail -1 "$out/bench.jsonl"
}

if [ "$part" = loop ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv
  bench reg4_f32 $REG4 --batch_sizes=128 --loop --loop_steps=6000
  bench reg4_f32_dispatch1 $REG4 --batch_sizes=128 --loop --loop_steps=6000 --config.train.steps_per_dispatch=1
  bench reg4_f32_nondeterministic $REG4 --batch_sizes=128 --loop --loop_steps=6000 --config.train.deterministic=False
  bench research_f32 $RESEARCH --batch_sizes=256 --loop
  bench research_tf32 $RESEARCH --batch_sizes=256 --loop --config.model.matmul_precision=default
  # RESEARCH_BATCHES: the batches of the default and every-candidate lines (RESEARCH_BATCHES=256 for batch 256 alone)
  bench research_bf16 $RESEARCH --batch_sizes=${RESEARCH_BATCHES:-256,1024} --loop --config.model.compute_dtype=bfloat16
  # every candidate that cuts the output layer's bytes a step at once, right after the default: its copy
  # carried whole, AdamW's moments in bfloat16 and its gradient written in bfloat16 by its matmul
  # (train.output_layer_gradient_dtype): README's floor of 2.24 GB a step for 250,000 tokens/s at batch 256
  bench research_bf16_carried_moments_gradient_bf16 $RESEARCH --batch_sizes=${RESEARCH_BATCHES:-256,1024} --loop \
    --config.model.compute_dtype=bfloat16 $CANDIDATES
  # that gradient's matmul and the update that reads it alone (benchmarks/gradient_matmul.py, about 30 s): the
  # step's form (K + 1 = 2,401 rows, its dlogits made inside) beside K and K + 8 rows and dlogits given, in
  # float32 and bfloat16: why the H200 profile's matmul ran at 1.15 TB/s and 127 TFLOP/s
  bench_script gradient_matmul_research gradient_matmul.py
  # every candidate again, that matmul with its dlogits made apart and its rows padded to a multiple of 8
  # (train.output_layer_gradient_form: the same numbers), at batch 256: the step's answer to the line above
  bench research_bf16_carried_moments_gradient_bf16_apart_padded $RESEARCH --batch_sizes=256 --loop \
    --config.model.compute_dtype=bfloat16 $CANDIDATES --config.train.output_layer_gradient_form=dlogits_apart_rows_padded
  if [ -n "${BASELINE:-}" ] && [ -d "$BASELINE" ]; then  # the same with an older checkout's code, in this run
    bench_in "$BASELINE" baseline_research_bf16 $RESEARCH --batch_sizes=256,1024 --loop \
      --config.model.compute_dtype=bfloat16
  fi
  # C's gradient as a one-hot matmul: deterministic without the scatter's sort (model.embedding_gradient)
  bench research_bf16_one_hot $RESEARCH --batch_sizes=256,1024 --loop --config.model.compute_dtype=bfloat16 \
    --config.model.embedding_gradient=one_hot
  # C's gradient as XLA's scatter, against the GPU default ('auto': a sort and
  # sums along runs of one word on GPUs under deterministic reductions, 1.09x-1.15x the scatter's step there)
  bench research_bf16_scatter $RESEARCH --batch_sizes=256,1024 --loop --config.model.compute_dtype=bfloat16 \
    --config.model.embedding_gradient=scatter
  # the same without deterministic reductions: what determinism costs beside the sorted gradient
  bench research_bf16_nondeterministic $RESEARCH --batch_sizes=256,1024 --loop --config.model.compute_dtype=bfloat16 \
    --config.train.deterministic=False
  # AdamW's two moments in bfloat16 (optimizer.mu_dtype, nu_dtype: the second stochastically rounded), 4 of
  # its 28 bytes a parameter each; then with the carried copy of the whole layer too (2.56 GB a step); then
  # the output layer's gradient alone in bfloat16 (0.32 GB less than the default)
  bench research_bf16_moments_bf16 $RESEARCH --batch_sizes=256,1024 --loop --config.model.compute_dtype=bfloat16 \
    --config.optimizer.mu_dtype=bfloat16 --config.optimizer.nu_dtype=bfloat16
  bench research_bf16_carried_moments_bf16 $RESEARCH --batch_sizes=256,1024 --loop \
    --config.model.compute_dtype=bfloat16 --config.train.carry_cast_layer=whole --config.optimizer.mu_dtype=bfloat16 \
    --config.optimizer.nu_dtype=bfloat16
  bench research_bf16_gradient_bf16 $RESEARCH --batch_sizes=256,1024 --loop --config.model.compute_dtype=bfloat16 \
    --config.train.output_layer_gradient_dtype=bfloat16
  # the gradient matmul's forms one at a time (train.output_layer_gradient_form), batch 256
  bench research_bf16_dlogits_apart $RESEARCH --batch_sizes=256 --loop --config.model.compute_dtype=bfloat16 \
    --config.train.output_layer_gradient_form=dlogits_apart
  bench research_bf16_rows_padded $RESEARCH --batch_sizes=256 --loop --config.model.compute_dtype=bfloat16 \
    --config.train.output_layer_gradient_form=rows_padded
  # the output layer's bfloat16 copy carried from each step's update to the next step (train.carry_cast_layer):
  # no cast of the layer's rows at each step's start (their 480 MB pass at batch 256 in the H200 profile); the
  # rows alone (the matmuls' operand) or the whole layer (the update's shape, f given a column of zeros)
  bench research_bf16_carried_rows $RESEARCH --batch_sizes=256,1024 --loop --config.model.compute_dtype=bfloat16 \
    --config.train.carry_cast_layer=rows
  bench research_bf16_carried_layer $RESEARCH --batch_sizes=256,1024 --loop --config.model.compute_dtype=bfloat16 \
    --config.train.carry_cast_layer=whole
  # AdamW's first moment in bfloat16 (optimizer.mu_dtype): less of the output layer's optimiser traffic
  bench research_bf16_mu_bf16 $RESEARCH --batch_sizes=256,1024 --loop --config.model.compute_dtype=bfloat16 \
    --config.optimizer.mu_dtype=bfloat16
  # XLA's command buffers (CUDA graphs, on by default for fusions and cuBLAS): off, and with the step loop's
  # while and conditionals captured too: whether a step of about 1.5 ms at batch 256 is bound by launches
  XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_command_buffer=" \
    bench research_bf16_no_command_buffers $RESEARCH --batch_sizes=256 --loop --config.model.compute_dtype=bfloat16
  XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,WHILE,CONDITIONAL" \
    bench research_bf16_while_command_buffers $RESEARCH --batch_sizes=256 --loop --config.model.compute_dtype=bfloat16
  # where the research size's step spends its time (a profile before and after each change)
  for batch in 256 1024; do
    profile profile_research_bf16_$batch $batch $RESEARCH --config.model.compute_dtype=bfloat16
  done
  # the loop as training runs it (10 steps a dispatch, batch 256) without and with each carried copy of the
  # output layer: whether XLA writes the copy in the update's pass (the cast's own operation gone); and with
  # every candidate at once: whether the gradient matmul writes bfloat16 and the update reads it widened
  profile profile_research_bf16_loop_256 256 $RESEARCH --config.model.compute_dtype=bfloat16 --dispatch_steps=10
  profile profile_research_bf16_loop_carried_moments_gradient_256 256 $RESEARCH --config.model.compute_dtype=bfloat16 \
    --dispatch_steps=10 $CANDIDATES
  profile profile_research_bf16_loop_rows_256 256 $RESEARCH --config.model.compute_dtype=bfloat16 --dispatch_steps=10 \
    --config.train.carry_cast_layer=rows
  profile profile_research_bf16_loop_whole_256 256 $RESEARCH --config.model.compute_dtype=bfloat16 \
    --dispatch_steps=10 --config.train.carry_cast_layer=whole
  profile profile_research_bf16_loop_carried_moments_256 256 $RESEARCH --config.model.compute_dtype=bfloat16 \
    --dispatch_steps=10 --config.train.carry_cast_layer=whole --config.optimizer.mu_dtype=bfloat16 \
    --config.optimizer.nu_dtype=bfloat16
elif [ "$part" = softmax ]; then
  bench research_f32_streamed $RESEARCH --batch_sizes=256 --config.train.vocab_block=4096
  for v in 100000 300000; do
    for vb in 0 4096; do
      bench v${v}_bf16_vb$vb --config=experiments/brown.py:mlp1 --vocab=$v --batch_sizes=4096 --steps=10 \
        --config.model.compute_dtype=bfloat16 --config.train.vocab_block=$vb
    done
  done
  if [ -n "${BASELINE:-}" ]; then
    old_loop old_reg4 128 17905 --config=experiments/brown.py:reg4_n7
    old_loop old_research 256 33278 --config=experiments/ptb.py --config.model.n=8 --config.model.m=200 \
      --config.model.h=1000 --config.model.feature_dropout=0.3 --config.model.hidden_dropout=0.5 \
      --config.optimizer.name=adamw
  fi
  timeout 200 python -m pytest -q tests/test_gpu.py 2>&1 | tail -5 | tee -a "$out/log.txt"
elif [ "$part" = kernel ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv
  gpu_tests 200
  for dtype in ${DTYPES:-bfloat16 float32}; do
    for v in ${KERNEL_VOCABS:-17905 100000 300000}; do
      # bfloat16: XLA and the Mosaic GPU form (it compiled and matched NumPy on the H100, 2026-11-26); the
      # loop form through Triton, a third of XLA's rate there, in float32 (and apart: kernel_loop_*)
      [ "$dtype" = bfloat16 ] && bench kernel_v${v}_$dtype --config=experiments/brown.py:mlp1 --vocab=$v \
        --batch_sizes=4096 --steps=10 --repeats=3 --config.model.compute_dtype=$dtype --config.train.vocab_block=0 \
        --softmax_kernels=xla,pallas_mosaic
      # float32 operands with the backend's own products first (model.matmul_precision=default: TF32 in XLA's
      # matmuls and the kernels' alike; the Mosaic GPU form's TF32 WGMMA reads the layer transposed), then IEEE
      # products (the project's float32: matmul-bound, four matmuls of the layer's size in the dz form against
      # XLA's three; the Mosaic GPU form refuses them)
      [ "$dtype" = float32 ] && bench kernel_v${v}_float32_tf32 --config=experiments/brown.py:mlp1 --vocab=$v \
        --batch_sizes=4096 --steps=10 --repeats=3 --config.model.compute_dtype=$dtype --config.train.vocab_block=0 \
        --config.model.matmul_precision=default \
        --softmax_kernels=${FLOAT32_TF32_KERNELS:-xla,pallas_mosaic,pallas_loop,pallas_loop_dz}
      # the same with dz in chunks of the vocabulary: no float32 accumulator of dW (dz is float32 here, 1.2 GB a
      # quarter of the batch at 300k)
      [ "$dtype" = float32 ] && bench kernel_mosaic_vocab8_v${v}_float32_tf32 --config=experiments/brown.py:mlp1 \
        --vocab=$v --batch_sizes=4096 --steps=10 --repeats=3 --config.model.compute_dtype=$dtype \
        --config.train.vocab_block=0 --config.model.matmul_precision=default --softmax_kernels=pallas_mosaic \
        --config.train.softmax_kernel_tuning=dz_axis=vocab,dz_chunks=8
      [ "$dtype" = float32 ] && bench kernel_v${v}_$dtype --config=experiments/brown.py:mlp1 --vocab=$v \
        --batch_sizes=4096 --steps=10 --repeats=3 --config.model.compute_dtype=$dtype --config.train.vocab_block=0 \
        --softmax_kernels=${FLOAT32_KERNELS:-xla,pallas_loop,pallas_loop_dz}
      # the Mosaic GPU form's float32 tiles, the output layer alone in TF32 beside XLA's: the chosen 32 columns
      # in 2 stages, 64 in 1, warp-specialised, dz in chunks of the vocabulary
      [ "$dtype" = float32 ] && bench_script tiles_mosaic_v${v}_float32_tf32 softmax_kernel_tiles.py --vocab=$v \
        --dtype=float32 --matmul_precision=default \
        --settings='mosaic;mosaic,block_v=64,num_stages=1;mosaic,warpgroups=1;mosaic,dz_axis=vocab'
      [ "$dtype" = bfloat16 ] && bench kernel_loop_v${v}_$dtype --config=experiments/brown.py:mlp1 --vocab=$v \
        --batch_sizes=4096 --steps=10 --repeats=3 --config.model.compute_dtype=$dtype --config.train.vocab_block=0 \
        --softmax_kernels=pallas_loop,pallas_loop_dz
      # the Mosaic GPU form with dz an eighth of the batch at a time (a quarter by default): fewer temporaries
      [ "$dtype" = bfloat16 ] && bench kernel_mosaic_chunks8_v${v}_$dtype --config=experiments/brown.py:mlp1 \
        --vocab=$v --batch_sizes=4096 --steps=10 --repeats=3 --config.model.compute_dtype=$dtype \
        --config.train.vocab_block=0 --softmax_kernels=pallas_mosaic --config.train.softmax_kernel_tuning=dz_chunks=8
      # dz in chunks of the vocabulary's tiles (LoopTuning.dz_axis=vocab), four then eight: each chunk's columns
      # of dW made whole, no float32 accumulator of dW over the chunks (the temporaries target: a tenth of XLA's)
      for chunks in ${VOCAB_CHUNKS:-4 8}; do
        [ "$dtype" = bfloat16 ] && bench kernel_mosaic_vocab${chunks}_v${v}_$dtype --config=experiments/brown.py:mlp1 \
          --vocab=$v --batch_sizes=4096 --steps=10 --repeats=3 --config.model.compute_dtype=$dtype \
          --config.train.vocab_block=0 --softmax_kernels=pallas_mosaic \
          --config.train.softmax_kernel_tuning=dz_axis=vocab,dz_chunks=$chunks
      done
      # the same, eight chunks, with the layer's gradient written in bfloat16 (train.output_layer_gradient_dtype)
      # by XLA and the kernel alike, side by side: the kernel's dW then has no float32 array of the layer's size
      # (at 300k, 167 MiB fewer temporaries; on the CPU 1,240 -> 1,073 MiB, results/bench/layer_gradient_bf16_memory.jsonl)
      [ "$dtype" = bfloat16 ] && bench kernel_mosaic_vocab8_gradient_bf16_v${v}_$dtype \
        --config=experiments/brown.py:mlp1 --vocab=$v --batch_sizes=4096 --steps=10 --repeats=3 \
        --config.model.compute_dtype=$dtype --config.train.vocab_block=0 --softmax_kernels=xla,pallas_mosaic \
        --config.train.softmax_kernel_tuning=dz_axis=vocab,dz_chunks=8 --config.train.output_layer_gradient_dtype=bfloat16
      bench streamed_v${v}_$dtype --config=experiments/brown.py:mlp1 --vocab=$v --batch_sizes=4096 --steps=10 \
        --repeats=3 --config.model.compute_dtype=$dtype --config.train.vocab_block=4096
    done
  done
elif [ "$part" = tiles ]; then
  # the kernel's GPU tests (every LoopTuning case of tests/test_gpu.py), then its settings against XLA, the
  # output layer alone (benchmarks/softmax_kernel_tiles.py), at TILES_RUNS' |V|:dtype in that order
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv
  gpu_tests 240
  for run in ${TILES_RUNS:-100000:bfloat16 300000:bfloat16 17905:bfloat16 100000:float32}; do
    bench_script tiles_v${run%%:*}_${run##*:} softmax_kernel_tiles.py --vocab=${run%%:*} --dtype=${run##*:}
  done
elif [ "$part" = eval ]; then
  # train.eval_batch_size on this backend: eval_tokens_per_sec at 256, 1024 and 4096 (bfloat16, the default)
  bench eval_batch_reg4 $REG4 --batch_sizes=256,1024,4096 --config.model.compute_dtype=bfloat16
  bench eval_batch_research $RESEARCH --batch_sizes=256,1024,4096 --config.model.compute_dtype=bfloat16
  bench eval_batch_v100k --config=experiments/brown.py:mlp1 --vocab=100000 --batch_sizes=256,1024,4096 \
    --config.model.compute_dtype=bfloat16
elif [ "$part" = mps ]; then
  source launch/mps.sh
  for mode in off on; do
    if [ $mode = on ] && ! start_mps; then break; fi
    for i in $(seq "${COPIES:-6}"); do
      bench mps_${mode}_$i --config=experiments/ptb.py:ladder5_dropout --vocab=10000 --batch_sizes=256 --steps=20 \
        --repeats=3 --peak_size=2048 --loop --loop_steps=3000 --config.model.compute_dtype=bfloat16 &
    done
    wait
    stop_mps
  done
  python3 - "$out/bench.jsonl" <<'EOF' | tee -a "$out/bench.jsonl"
import collections, json, sys
rates = collections.defaultdict(list)
for row in map(json.loads, open(sys.argv[1])):
  if row['name'].startswith(('mps_off_', 'mps_on_')) and 'loop_train_tokens_per_sec' in row:
    rates[row['name'].rsplit('_', 1)[0]].append(row['loop_train_tokens_per_sec'])
for mode, each in rates.items():
  print(json.dumps({'name': mode.replace('mps_', 'mps_sum_'), 'copies': len(each),
                    'loop_train_tokens_per_sec_each': each, 'loop_train_tokens_per_sec_sum': round(sum(each), 1)}))
EOF
elif [ "$part" = revisited ]; then
  # where the revisited family's step spends its time: PTB's top row (ladder5_dropout: 15 window words and
  # 240 distant ones a token, 4 blocks, tied, dropout) alone, then with each suspect removed in turn
  # (synthetic |V| 10,000, PTB's; bfloat16; the step's rate at batch 256 and 1024, and the loop's for the row
  # as it is: about 40 s a variant)
  REV="--config=experiments/ptb.py:ladder5_dropout --vocab=10000 --batch_sizes=256,1024 --steps=10 --repeats=3
    --config.model.compute_dtype=bfloat16"
  for batch in 256 1024; do  # XLA's own per-operation times of the row's step
    profile profile_rev_$batch $batch --config=experiments/ptb.py:ladder5_dropout --vocab=10000 \
      --config.model.compute_dtype=bfloat16
  done
  bench rev_default $REV --loop --loop_steps=600
  # the default ('auto': on a GPU under deterministic reductions, C's gradient by a sort and the distant
  # block's share as a matmul, 7.2x the scatter on the H200) against each form named, then the suspects
  # left, the likeliest first (a run stopped early keeps the lines already in bench.jsonl):
  # deterministic reductions off (where 'auto' gives the scatter, atomic there), the distant block,
  # dropout, the blocks, tying
  bench rev_scatter $REV --config.model.embedding_gradient=scatter --config.model.distant_gradient=rows
  bench rev_sorted_gradient $REV --config.model.embedding_gradient=sorted --config.model.distant_gradient=rows
  bench rev_distant_counts $REV --config.model.embedding_gradient=scatter --config.model.distant_gradient=counts
  bench rev_nondeterministic $REV --config.train.deterministic=False
  bench rev_nondeterministic_sorted $REV --config.train.deterministic=False --config.model.embedding_gradient=sorted \
    --config.model.distant_gradient=counts
  bench rev_no_distant $REV --config.model.distant_tokens=0 --config.model.distant_kernels=0
  bench rev_no_dropout $REV --config.model.feature_dropout=0 --config.model.hidden_dropout=0
  bench rev_depth0 $REV --config.model.depth=0
  bench rev_untied $REV --config.model.tied=False
  # one line a variant, fastest first, against the row as it is: what EXTRA_SET a training of the row should name
  python3 - "$out/bench.jsonl" <<'EOF'
import json, sys
rates = {}
for row in map(json.loads, open(sys.argv[1])):
  if row['name'].startswith('rev_') and 'train_tokens_per_sec' in row:
    rates.setdefault(row['name'], {})[row['batch_size']] = row['train_tokens_per_sec']
base = rates.get('rev_default', {})
for name, by_batch in sorted(rates.items(), key=lambda kv: -kv[1].get(256, 0)):
  print(name, ' '.join(f'batch {b}: {r:,.0f} tokens/s ({r / base[b]:.2f}x)' if b in base else f'batch {b}: {r:,.0f}'
                       for b, r in sorted(by_batch.items())))
EOF
elif [ "$part" = research_train ]; then
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  train_short research_train_default
  train_short research_train_candidates $CANDIDATES
elif [ "$part" = train2 ]; then
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  python -c "from nplm_jax import data; data.load_brown_words()"  # the words' cache, as after a first run
  for dtype in float32 bfloat16; do
    start=$(date +%s.%N)
    python -m nplm_jax.main --config=experiments/brown.py:reg4_n7 --config.model.compute_dtype=$dtype \
      --workdir=/tmp/train/reg4_$dtype >/tmp/reg4_$dtype.log 2>&1
    end=$(date +%s.%N)
    python -c "import json; r = json.load(open('/tmp/train/reg4_$dtype/results.json')); r.pop('config'); \
r.update(name='reg4_$dtype', end_to_end_seconds=$end - $start); print(json.dumps(r))" >>"$out/train.jsonl"
    tail -2 /tmp/reg4_$dtype.log
  done
  bench research_f32_nondeterministic $RESEARCH --batch_sizes=256 --loop --config.train.deterministic=False
  bench research_bf16_nondeterministic $RESEARCH --batch_sizes=256 --loop --config.train.deterministic=False \
    --config.model.compute_dtype=bfloat16
  cat /tmp/reg4_*.log >>"$out/log.txt"
elif [ "$part" = train ]; then
  start=$(date +%s.%N)
  python -m nplm_jax.main --config=experiments/brown.py:reg4_n7 --workdir=/tmp/train/reg4_f32 >/tmp/reg4_f32.log 2>&1
  end=$(date +%s.%N)
  python -c "import json; r = json.load(open('/tmp/train/reg4_f32/results.json')); r.pop('config'); \
r.update(name='reg4_f32', end_to_end_seconds=$end - $start); print(json.dumps(r))" >>"$out/train.jsonl"
  tail -2 /tmp/reg4_f32.log
  ptb="--config=experiments/ptb.py --sweep=table --only=nplm_kn5_mix"
  python -m nplm_jax.main --config=experiments/brown.py:reg4_n7 --config.model.compute_dtype=bfloat16 \
    --workdir=/tmp/train/reg4_bf16 >/tmp/reg4_bf16.log 2>&1 &
  python -m launch.sweep $ptb --root=/tmp/train/ptb_f32 >/tmp/ptb_f32.log 2>&1 &
  python -m launch.sweep $ptb --root=/tmp/train/ptb_bf16 --set=model.compute_dtype=bfloat16 >/tmp/ptb_bf16.log 2>&1 &
  wait
  for run in /tmp/train/reg4_bf16 /tmp/train/ptb_f32/nplm_kn5_mix /tmp/train/ptb_bf16/nplm_kn5_mix; do
    python -c "import json, sys; r = json.load(open('$run/results.json')); r.pop('config'); r['name'] = '$run'; \
print(json.dumps(r))" >>"$out/train.jsonl"
  done
  cat /tmp/*.log >"$out/log.txt"
  cut -c1-400 "$out/train.jsonl"
fi
