# CUDA's Multi-Process Service for processes that share one GPU (sourced by benchmarks/gpu_figures.sh, or
# by hand before a sweep's points run side by side: source launch/mps.sh && start_mps). Without it the
# GPU runs one process's kernels at a time, in time slices; with it the kernels of several processes
# run at once, which is what small models side by side (a ladder's rows, each far from filling an H100)
# need. Results do not change, only who waits.
#   start_mps   starts the daemon (as root) and checks that JAX still reaches the GPU
#               through it; where either fails it says so in one line, stops the daemon and returns 1, so
#               the caller goes on without MPS
#   stop_mps    stops the daemon start_mps started (nothing otherwise)

start_mps() {
  if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo "MPS: nvidia-cuda-mps-control is not on this machine; the processes share the GPU in time slices"
    return 1
  fi
  export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nplm_mps/pipe}
  export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/nplm_mps/log}
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  # a daemon outlives the shell that started it: one left by an earlier run is stopped first, so this
  # one starts clean
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 && sleep 2
  if ! nvidia-cuda-mps-control -d; then
    echo "MPS: the daemon did not start (log: $CUDA_MPS_LOG_DIRECTORY); the processes share the GPU in time slices"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    return 1
  fi
  _mps_started=1
  local platform
  # A client that cannot reach the server fails CUDA's start, and JAX would then fall back to the CPU:
  # the check asks for the GPU by name.
  platform=$(timeout 120 "${PYTHON:-python3}" -c \
    "import jax, jax.numpy as jnp; jnp.ones(8).sum().block_until_ready(); print(jax.devices()[0].platform)" 2>/dev/null \
    | tail -1)
  if [ "$platform" != gpu ]; then
    echo "MPS: a JAX computation through the daemon did not run on the GPU (got '${platform:-nothing}'; log:" \
      "$CUDA_MPS_LOG_DIRECTORY); stopped it, the processes share the GPU in time slices"
    stop_mps
    return 1
  fi
  echo "MPS: on (the processes' kernels run at once; pipe $CUDA_MPS_PIPE_DIRECTORY)"
}

stop_mps() {
  if [ -n "${_mps_started:-}" ]; then
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
    unset _mps_started CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
  return 0
}
