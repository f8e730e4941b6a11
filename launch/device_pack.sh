#!/usr/bin/env bash
# Fills .whl/ and .carry/data/ (both git-ignored through .git/info/exclude) for a lent accelerator
# machine without network: the wheels of the packages its image lacks, for CPython 3.12 on x86-64, and
# the corpora from ../shared/data (and, with BASELINE=COMMIT, that commit's tree). Then name both in the device call's carry and source
# launch/device_env.sh first in its command.
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.carry/\n' >>.git/info/exclude
platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 any)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]/#/--platform=}" -d .whl \
  ml-collections==1.1.0 nltk==3.10.4 tensorboardX==2.6.5 grain==0.2.18 array-record==0.8.6 portpicker==1.6.0 \
  defusedxml==0.7.1
mkdir -p .carry/data
cp -r ../shared/data/ptb ../shared/data/nltk_data .carry/data/
# BASELINE=COMMIT: that commit's tree in .carry/baseline too, for before/after figures in one GPU call
if [ -n "${BASELINE:-}" ]; then
  rm -rf .carry/baseline && mkdir -p .carry/baseline
  git archive "$BASELINE" | tar -x -C .carry/baseline
fi
du -sh .whl .carry
