# Sourced first on a lent accelerator machine that has no network (the project's device tool):
#   source launch/device_env.sh
# installs the wheels carried in .whl/ (the packages that machine lacks: ml-collections, nltk, grain,
# tensorboardX and their needs) into /tmp/site, and points the corpora at those carried in .carry/data
# (ptb/ and nltk_data/). Fill both here, on a machine with pip, with: bash launch/device_pack.sh
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || return 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export NLTK_DATA=$PWD/.carry/data/nltk_data PTB_DIR=$PWD/.carry/data/ptb
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
