#!/usr/bin/env bash
# The command a lent GPU machine runs (the device tool: `run`, with carry [".whl"], and
# ".resume" too for a call that resumes):
#   bash scripts/gpu_call.sh [--part K/N [--no-checks] [--resume-from .resume/partK]]
# `python -m analyses.reproduce --large --list --device cuda --jobs 16` prints the plan of calls.
# Only bash and python3 are needed: python3 is the interpreter that holds torch there (`python`
# may be missing, or a bare interpreter without it). bench/gpu_run.py installs the pinned wheels
# of .whl/ (scripts/gpu_wheels.sh builds them) into a scratch folder, runs a preflight, then the
# stages, streaming every result into $OUT as it lands.
set -euo pipefail
case "$0" in */*) cd "${0%/*}/.." ;; *) cd .. ;; esac
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec python3 -m bench.gpu_run --out "${OUT:?the device tool sets OUT}" "$@"
