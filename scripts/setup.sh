#!/usr/bin/env bash
# Install the probe suite and its dependencies into the current Python environment.
#
# torch comes first and on purpose: a bare `pip install torch` on Linux pulls a multi-GB CUDA
# build. So: keep a torch that is already installed (a CUDA build on a GPU machine stays);
# on a GPU machine without torch install the default (CUDA) build; on a CPU machine install
# the CPU build (a local wheel if pip's find-links has one, else PyTorch's CPU index).
# Then `pip install -e .[dev]` finds torch satisfied and leaves it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

if "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: keeping torch $("$PY" -c 'import torch; print(torch.__version__)')"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "setup: GPU found, installing the CUDA build of torch"
  "$PY" -m pip install -q "torch>=2.6"
else
  echo "setup: no GPU, installing the CPU build of torch ${TORCH_VERSION}"
  # 1. a CPU wheel that pip's find-links already has on disk: the wheel alone offline, then
  #    its dependencies from the ordinary index (a bare `pip install torch` would pull CUDA)
  if "$PY" -m pip install -q --no-index --no-deps "torch==${TORCH_VERSION}" 2>/dev/null; then
    "$PY" -m pip install -q "torch==${TORCH_VERSION}"  # satisfied: installs only its deps
  # 2. else PyTorch's CPU index, asked only if it answers within a few seconds, so a machine
  #    that cannot reach it fails in one line instead of minutes of retries
  elif "$PY" -c "import socket; socket.create_connection(('download.pytorch.org', 443), 5)" \
      2>/dev/null; then
    # the wheel alone from there; its dependencies from pip's own configured index (a mirror,
    # a proxy), never an index address spelt out here
    "$PY" -m pip install -q --retries 1 --timeout 30 --no-deps "torch==${TORCH_VERSION}" \
      --index-url https://download.pytorch.org/whl/cpu
    "$PY" -m pip install -q "torch==${TORCH_VERSION}"  # satisfied: installs only its deps
  else
    echo "setup: no local torch ${TORCH_VERSION} wheel and PyTorch's CPU index is unreachable;" \
      "install a CPU build of torch first (it is kept), then run this again" >&2
    exit 1
  fi
fi

# cluster = Ray: the sweeps' --ray backend, tested in the default suite (tests/integration/test_ray.py)
extras="dev,cluster"
if [ "${WITH_CUDA_KERNELS:-0}" = 1 ]; then extras="dev,cluster,cuda"; fi  # mamba-ssm fast path (GPU only)
"$PY" -m pip install -q -e ".[${extras}]"
"$PY" -c "import torch, transformer_lens, ray; print(f'setup: ok (torch {torch.__version__}, cuda={torch.cuda.is_available()}, ray {ray.__version__})')"
