#!/usr/bin/env bash
# N processes of one training on this machine, joined as a multi-host job would be (CPU: through
# gloo), each with its own host devices:
#
#   launch/local.sh 2 --config=experiments/brown.py:mlp1 --workdir=runs/two_processes \
#     --config.mesh.cpu_devices=2 --config.mesh.data=2 --config.mesh.model=2
#
# Every process runs `python -m nplm_jax.main ARGS` plus the coordinator's address (a free port on
# localhost), the number of processes and its own id. Process 0 prints as usual; anything another
# process prints is prefixed with [process i]. If one process fails the others are stopped, and
# the exit status is the first failure's. PYTHON (default python3) and MODULE (default
# nplm_jax.main) choose what runs; DRY_RUN=1 prints the commands instead of running them.
set -u

if [ $# -lt 1 ] || ! [ "$1" -ge 1 ] 2>/dev/null; then
  echo "error: usage: launch/local.sh NUM_PROCESSES ARGS... (e.g. launch/local.sh 2 --config=... --workdir=...)" >&2
  exit 2
fi
num_processes=$1
shift
python=${PYTHON:-python3}
module=${MODULE:-nplm_jax.main}
port=${PORT:-$("$python" -c 'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])')}

process_command() {  # runs process $1's command, or prints it with DRY_RUN=1
  local command=("$python" -m "$module" "${@:2}" --config.distributed.initialize=yes
                 --config.distributed.coordinator_address="localhost:$port"
                 --config.distributed.num_processes="$num_processes" --config.distributed.process_id="$1")
  if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' "${command[@]}"
    echo
  else
    "${command[@]}"
  fi
}

if [ "${DRY_RUN:-0}" = 1 ]; then
  for ((i = 0; i < num_processes; i++)); do process_command "$i" "$@"; done
  exit 0
fi

pids=()
for ((i = 0; i < num_processes; i++)); do
  if [ "$i" -eq 0 ]; then
    process_command 0 "$@" &
  else
    (
      process_command "$i" "$@" 2>&1 | awk -v p="[process $i] " '{ print p $0; fflush() }'
      exit "${PIPESTATUS[0]}"
    ) &
  fi
  pids+=($!)
done

# Wait for all; the first failure stops the rest (they would wait for it in a collective).
first_failure=0
while :; do
  running=0
  for index in "${!pids[@]}"; do
    pid=${pids[$index]}
    [ -z "$pid" ] && continue
    if kill -0 "$pid" 2>/dev/null; then
      running=1
      continue
    fi
    wait "$pid"
    code=$?
    pids[$index]=''
    if [ "$code" -ne 0 ] && [ "$first_failure" -eq 0 ]; then
      first_failure=$code
      for other in "${pids[@]}"; do [ -n "$other" ] && kill "$other" 2>/dev/null; done
    fi
  done
  [ "$running" -eq 0 ] && break
  sleep 0.2
done
exit "$first_failure"
