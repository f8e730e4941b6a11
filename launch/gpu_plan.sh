#!/usr/bin/env bash
# The GPU work the open issues wait for, as calls of at most 10 minutes each (the device tool's limit).
# A session lent 15 minutes of device time (the present rule; the machine's start counts) has one call:
# run `session` (below), which times the gradient forms and trains what fits. With half an hour, about
# three calls, in this order (RESULTS.md, "The ladders on the H100"): speed first (the revisited step
# ran 18,900 tokens/s on the H100, too slow to converge rows in a call); then targets with EXTRA_SET
# naming what speed found faster, and again with a larger BUDGET on the warm machine (the rows go on);
# then kernel. On a lent GPU machine, from the repository root, with .whl/ and .carry/ carried (bash
# launch/device_pack.sh fills them here):
#   bash launch/gpu_plan.sh STEP OUT_DIR
# STEP:
#   session    a session lent 15 minutes of device time (one call once the machine has started): the
#              revisited step's deterministic gradient forms timed, the fastest picked, then the rows
#              issue 27 still waits for (the character tune points and seeds, the character ladder's rows
#              not yet at early stopping: launch/session.py's ROWS), one at a time, each only if it fits
#              in the call; its last 150 s go to issue 28's figures (launch/session.py's FIGURES: 'auto''s
#              GPU test and dz in chunks of the vocabulary, then the research size with every candidate,
#              float32 at |V| 300k in the training step, the research size's short trainings, then each
#              research candidate; speed where no row would fit a call), what they leave
#              to the rows skipped before them; run it first when the budget is that short. Then copy the
#              call's OUT/session.json here into .carry/session_earlier.json and call again at once with
#              SESSION_EARLIER=.carry/session_earlier.json SESSION_SECONDS=(what is left, less a minute):
#              no probes, the rows not yet trained, the figures not yet started, on the warm machine or,
#              when it has gone back (about 30 s after a call), a fresh one.
#   ptb        issue 27: PTB words, the ladder's six rows side by side (each + KN5)
#   chars      issue 27: PTB characters, the ladder's six rows side by side (each + KN11)
#   brown      issue 27: Brown, the ladder's six rows side by side (each + the interpolated trigram)
#   ladders    issue 27: ptb, chars and brown at once, eighteen rows side by side in one call (360 s of
#              training a row; on the H100 each row then ran at 1/18 of its rate alone: 0.2-3 epochs)
#   reference  issue 27: the reference code's options on the top PTB row (the family's defaults)
#   tune       issue 27: ten points around the top row of PTB and fifteen around Brown's (dropout, width,
#              depth, window, clipping, rate, a cosine schedule, word dropout, a moving average of the
#              parameters, weight decay: TUNE in the two experiment files), all twenty-five side by side
#   targets    issue 27, after speed: the rows whose targets are not met yet, side by side: PTB characters'
#              top row, Brown's top row with 0.5 dropout, a cosine over 4 epochs and the parameters' moving
#              average at weight decay 0.2, 0.4 and 0.8, and PTB's top row with seeds 1 and 2 (its target
#              met with seed 0)
#   seeds      issue 27: the best row of each corpus with seeds 1 and 2, all six side by side
#              (PTB_ROW, CHAR_ROW, BROWN_ROW name the rows, of the sweeps PTB_SWEEP, CHAR_SWEEP,
#              BROWN_SWEEP; default: each ladder's top row; PTB_SWEEP=tune PTB_ROW=tune1_dropout0.5_h2048)
#   kernel     issue 28: the fused kernel against XLA, bfloat16 (DTYPES=float32 for the other half)
#   tiles      issue 28: the kernel's GPU tests, then its loop form's settings (LoopTuning) each against XLA,
#              the output layer alone, at |V| 100k and 300k in bfloat16, 17,905, then 100k in float32
#   speed      issue 27 (run it first): where the revisited step's time goes on the GPU (the top row alone ran
#              18,900 tokens/s on the H100, the 2003 network at research size 118,576): the row, then with
#              each suspect removed in turn (benchmarks/gpu_figures.sh revisited), about 9 minutes: the
#              likeliest suspects first (C's gradient as a sort, the distant block's as a matmul)
#   research   issues 28 and 31: research-size candidates at batch 256 and 1024 (beside an older
#              tree's loop when .carry/baseline holds one: BASELINE=6d3a2d5 bash launch/device_pack.sh),
#              XLA's command buffers off and with the step loop captured (batch 256), the research step's
#              profile at both batches (XLA's per-operation times and bytes, as text), and the evaluation
#              batch sizes 256 / 1024 / 4096
#   mps        six copies of a ladder row side by side, in time slices and through CUDA's Multi-Process
#              Service: whether the sweeps' MPS=1 (below) pays, measured
# The sweep steps run their processes through MPS (launch/mps.sh; MPS=0 turns it off): six rows side by
# side each far from filling an H100, so their kernels should run at once rather than in turns; where
# the daemon does not start or JAX does not reach the GPU through it, the log says so and they share the
# GPU in time slices. Not yet measured here: the mps step measures it.
# Back here: python -m launch.results collect_pack --pack=OUT/results.tgz, then
# python -m launch.results render --write (every finished row as a results file, RESULTS.md's tables), and
# python -m launch.bench_lines --tag=TAG --device=GPU FOLDER... (each call's benchmark lines with their commands).
# EXTRA_SET adds --set options to every row of a sweep step (say, what `speed` found faster:
# EXTRA_SET=--set=train.deterministic=False), recorded in each row's config.
# Training budgets (train.max_seconds) leave each call time for its n-gram mixtures and the pack:
# a row that hits it is time-budgeted ('stopped by' in RESULTS.md). The workdirs live in runs/device/
# (git-ignored: a later call on the same warm machine finds them), so the same step again with a larger
# BUDGET (the budget counts every call's training: BUDGET=840 after 420) resumes each row where it
# stopped, until it stops early; a row that stopped early is left as it is. The device tool hands an
# idle machine back within about 30 s: make the next call at once and collect the last one's pack after,
# or the rows start again from nothing (their checkpoints are too large to carry).
set -u
step=$1 out=$2
cd "$(dirname "$0")/.."
case $step in
  ptb|chars|brown|ladders|reference|tune|seeds|targets|kernel|tiles|research|mps|speed|session) ;;
  *) echo "unknown step $step: use session, ptb, chars, brown, ladders, reference, tune, seeds, targets, kernel, tiles, research, mps or speed"; exit 2 ;;
esac
source launch/device_env.sh || { echo "device_env.sh failed: carry .whl and .carry (launch/device_pack.sh)"; exit 1; }
export SWEEP_ROOT=${SWEEP_ROOT:-$PWD/runs/device} MPS=${MPS:-1}
# seconds of training a row: start-up, the final evaluation, the mixture and the pack fit in the rest
# (eighteen rows at once start, evaluate and count their n-grams slower than six: less for ladders)
default_budget=420
[ "$step" = ladders ] && default_budget=360
budget=${BUDGET:-$default_budget}
extra=${EXTRA_SET:-}
ptb_ladder="experiments/ptb.py ladder --set=train.max_seconds=$budget $extra"
char_ladder="experiments/ptb.py char_ladder --set=train.max_seconds=$budget --set=train.eval_every=2000 $extra"
brown_ladder="experiments/brown.py ladder --name=brown_ladder --set=train.max_seconds=$budget $extra"
case $step in
  ptb) bash launch/device_sweeps.sh "$out" "$ptb_ladder" ;;
  chars) bash launch/device_sweeps.sh "$out" "$char_ladder" ;;
  brown) bash launch/device_sweeps.sh "$out" "$brown_ladder" ;;
  ladders) bash launch/device_sweeps.sh "$out" "$ptb_ladder" "$char_ladder" "$brown_ladder" ;;
  reference)
    bash launch/device_sweeps.sh "$out" "experiments/ptb.py reference_options --set=train.max_seconds=$budget $extra" ;;
  tune)
    bash launch/device_sweeps.sh "$out" "experiments/ptb.py tune --name=ptb_tune --set=train.max_seconds=$budget $extra" \
      "experiments/brown.py tune --name=brown_tune --set=train.max_seconds=$budget $extra" ;;
  targets)
    bash launch/device_sweeps.sh "$out" \
      "experiments/ptb.py char_ladder --only=char_ladder5_dropout --set=train.max_seconds=$budget --set=train.eval_every=2000 $extra" \
      "experiments/brown.py tune --name=brown_tune --only=tune8_dropout0.5_weight_decay0.2_cosine4_ema0.999,tune9_dropout0.5_weight_decay0.4_cosine4_ema0.999,tune10_dropout0.5_weight_decay0.8_cosine4_ema0.999 --set=train.max_seconds=$budget $extra" \
      "experiments/ptb.py ladder --name=ptb_seed1 --only=ladder5_dropout --set=seed=1 --set=train.max_seconds=$budget $extra" \
      "experiments/ptb.py ladder --name=ptb_seed2 --only=ladder5_dropout --set=seed=2 --set=train.max_seconds=$budget $extra" ;;
  seeds)
    ptb_row=${PTB_ROW:-ladder5_dropout} char_row=${CHAR_ROW:-char_ladder5_dropout} brown_row=${BROWN_ROW:-ladder5_dropout}
    ptb_sweep=${PTB_SWEEP:-ladder} char_sweep=${CHAR_SWEEP:-char_ladder} brown_sweep=${BROWN_SWEEP:-ladder}
    specs=()
    for seed in 1 2; do
      specs+=("experiments/ptb.py $ptb_sweep --name=ptb_seed$seed --only=$ptb_row --set=seed=$seed --set=train.max_seconds=$budget $extra"
              "experiments/ptb.py $char_sweep --name=char_seed$seed --only=$char_row --set=seed=$seed --set=train.max_seconds=$budget --set=train.eval_every=2000 $extra"
              "experiments/brown.py $brown_sweep --name=brown_seed$seed --only=$brown_row --set=seed=$seed --set=train.max_seconds=$budget $extra")
    done
    bash launch/device_sweeps.sh "$out" "${specs[@]}" ;;
  kernel)
    DTYPES=${DTYPES:-bfloat16} bash benchmarks/gpu_figures.sh kernel "$out" ;;
  tiles)
    GPU_TESTS=${GPU_TESTS:-softmax_kernel} bash benchmarks/gpu_figures.sh tiles "$out" ;;
  research)
    baseline=$PWD/.carry/baseline  # BASELINE=COMMIT bash launch/device_pack.sh puts an older tree there
    [ -d "$baseline" ] || baseline=''
    ONLY=research_bf16,research_bf16_scatter,research_bf16_nondeterministic,research_bf16_no_command_buffers,research_bf16_while_command_buffers,baseline_research_bf16,profile_research_bf16_256,profile_research_bf16_1024 \
      BASELINE=$baseline \
      bash benchmarks/gpu_figures.sh loop "$out"
    bash benchmarks/gpu_figures.sh eval "$out" ;;
  mps)
    bash benchmarks/gpu_figures.sh mps "$out" ;;
  speed)
    bash benchmarks/gpu_figures.sh revisited "$out" ;;
  session)
    read -r -a sets <<<"$extra"
    python3 -m launch.session --out="$out" --root="$SWEEP_ROOT" "${sets[@]}" ;;
esac
