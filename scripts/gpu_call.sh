#!/usr/bin/env bash
# The command a lent GPU machine runs (the device tool: `run` with carry [".whl"]):
#   bash scripts/gpu_call.sh --part K/N [--no-checks]
# TransformerLens and six of its dependencies are missing there: they come as wheels in .whl/
# (made here with `pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
# manylinux2014_x86_64 --platform any -d .whl transformer-lens==4.3.0 beartype datasets dill
# multiprocess fancy-einsum typeguard`), installed into a scratch folder outside the checkout,
# first on PYTHONPATH with the checkout after it. Results go to $OUT (bench/gpu_run.py).
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=$(mktemp -d /tmp/seqprobe-site-XXXX)
if [ -d .whl ]; then
  python -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl
fi
export PYTHONPATH="$SITE:$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
exec python -m bench.gpu_run --out "${OUT:?the device tool sets OUT}" "$@"
