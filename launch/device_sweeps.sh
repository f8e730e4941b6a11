#!/usr/bin/env bash
# Several sweeps side by side on one accelerator machine (every point of every sweep at once), their
# results packed into OUT_DIR/results.tgz (results.json, mix_results.json, metrics.jsonl and log.txt of
# each point, each sweep's results.md) and each sweep's log in OUT_DIR:
#   bash launch/device_sweeps.sh OUT_DIR 'experiments/ptb.py ladder --set=train.max_seconds=300' ...
# Each argument is "EXPERIMENT_FILE SWEEP [launch.sweep options]". GPU memory is allocated as needed
# (no preallocation), so the processes share the device.
set -u
out=$1; shift
mkdir -p "$out"
cd "$(dirname "$0")/.."
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
root=${SWEEP_ROOT:-/tmp/sweeps}
started=$(date +%s)
for spec in "$@"; do
  read -r -a words <<<"$spec"
  file=${words[0]} sweep=${words[1]}
  "${PYTHON:-python3}" -m launch.sweep --config="$file" --sweep="$sweep" --root="$root/$sweep" --parallel=64 "${words[@]:2}" \
    >"$out/$sweep.log" 2>&1 &
done
wait
echo "all sweeps done in $(( $(date +%s) - started )) s"
for table in "$root"/*/results.md; do
  echo "== $table"; cat "$table"
done
(cd "$root" && tar czf "$out/results.tgz" --ignore-failed-read */results.md \
  */*/results.json */*/mix_results.json */*/metrics.jsonl */*/log.txt 2>/dev/null)
