#!/usr/bin/env bash
# Build .whl/ (git-ignored): the pinned wheels of scripts/gpu_wheels.txt for a lent GPU machine
# (Python 3.12, x86-64), or for this machine's own Python with PYTHON_VERSION=here (the
# rehearsal: python -m bench.rehearse_gpu_call). Any wheel already there is removed first, so
# the folder holds exactly the pinned set.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEST=${WHEELS:-.whl}
VERSION=${PYTHON_VERSION:-3.12}
mkdir -p "$DEST"
rm -f "$DEST"/*.whl
pins=$(grep -v '^\s*#' scripts/gpu_wheels.txt | grep -v '^\s*$')
if [ "$VERSION" = here ]; then
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DEST" $pins
else
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$VERSION" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$DEST" $pins
fi
ls "$DEST"
