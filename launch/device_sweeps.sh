#!/usr/bin/env bash
# Several sweeps side by side on one accelerator machine (every point of every sweep at once), their
# results packed into OUT_DIR/results.tgz (results.json, mix_results.json, metrics.jsonl, config.json and
# log.txt of each point, each sweep's results.md) and each sweep's log in OUT_DIR:
#   bash launch/device_sweeps.sh OUT_DIR 'experiments/ptb.py ladder --set=train.max_seconds=300' ...
# Each argument is "EXPERIMENT_FILE SWEEP [launch.sweep options]". GPU memory is allocated as needed
# (no preallocation), so the processes share the device; MPS=1 runs them through CUDA's Multi-Process
# Service (launch/mps.sh: their kernels at once, not in time slices; without it where it cannot start).
# The pack is refreshed every minute, so a command stopped at its time limit still leaves the points
# finished so far.
set -u
out=$1; shift
mkdir -p "$out"
cd "$(dirname "$0")/.."
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
root=${SWEEP_ROOT:-/tmp/sweeps}
mkdir -p "$root"
source launch/mps.sh
if [ "${MPS:-0}" = 1 ]; then start_mps; fi
pack() {
  (cd "$root" && tar czf "$out/results.tgz.part" --ignore-failed-read */results.md */*/results.json \
    */*/mix_results.json */*/metrics.jsonl */*/config.json */*/log.txt 2>/dev/null)
  mv -f "$out/results.tgz.part" "$out/results.tgz"
}
(while sleep 60; do pack; done) >/dev/null 2>&1 &  # its sleep must not hold this script's output open
packer=$!
started=$(date +%s)
pids=()
for spec in "$@"; do
  read -r -a words <<<"$spec"
  file=${words[0]} sweep=${words[1]} name=${words[1]}
  for word in "${words[@]:2}"; do [[ $word == --name=* ]] && name=${word#--name=}; done
  args=()
  for word in "${words[@]:2}"; do [[ $word == --name=* ]] || args+=("$word"); done
  "${PYTHON:-python3}" -m launch.sweep --config="$file" --sweep="$sweep" --root="$root/$name" --parallel=64 \
    "${args[@]}" >"$out/$name.log" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
stop_mps
pkill -P "$packer" 2>/dev/null; kill "$packer" 2>/dev/null
echo "all sweeps done in $(( $(date +%s) - started )) s"
for table in "$root"/*/results.md; do
  echo "== $table"; cat "$table"
done
pack
