#!/usr/bin/env bash
# A training on every worker of a Cloud TPU VM slice (one JAX process per worker; they join
# through jax.distributed, which finds the slice's workers by itself):
#
#   launch/tpu_vm.sh TPU_NAME ZONE --config=experiments/brown.py:mlp1 --workdir=gs://BUCKET/runs/mlp1
#
# The repository must be in ~/nplm_jax on each worker with jax[tpu] installed; SETUP=1 does that
# first (copies this checkout's committed files there, installs requirements.txt with the TPU
# build of JAX). The workdir must be a bucket (gs://...) that every worker can write.
# DRY_RUN=1 prints the gcloud commands instead of running them.
set -eu

if [ $# -lt 3 ]; then
  echo "error: usage: launch/tpu_vm.sh TPU_NAME ZONE ARGS... (e.g. --config=... --workdir=gs://...)" >&2
  exit 2
fi
name=$1
zone=$2
shift 2
remote_dir=${REMOTE_DIR:-nplm_jax}

run() {  # runs the command, or prints it with DRY_RUN=1
  if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' "$@"
    echo
  else
    "$@"
  fi
}

if [ "${SETUP:-0}" = 1 ]; then
  repo=$(cd "$(dirname "$0")/.." && pwd)
  jax_version=$(sed -n 's/^jax==//p' "$repo/requirements.txt")
  archive=${TMPDIR:-/tmp}/nplm_jax.tar.gz
  run git -C "$repo" archive --format=tar.gz -o "$archive" HEAD
  run gcloud compute tpus tpu-vm scp "$archive" "$name:nplm_jax.tar.gz" --zone="$zone" --worker=all
  run gcloud compute tpus tpu-vm ssh "$name" --zone="$zone" --worker=all --command="mkdir -p $remote_dir && \
tar -xzf nplm_jax.tar.gz -C $remote_dir && cd $remote_dir && pip install -r requirements.txt 'jax[tpu]==$jax_version'"
fi
training=$(printf '%q ' python3 -m nplm_jax.main "$@" --config.distributed.initialize=yes)
training=${training% }
run gcloud compute tpus tpu-vm ssh "$name" --zone="$zone" --worker=all --command="cd $remote_dir && $training"
