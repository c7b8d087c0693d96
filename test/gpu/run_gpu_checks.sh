#!/usr/bin/env bash
# The device check, on a machine with an NVIDIA GPU, PyTorch, cmake and ninja
# but no LLVM: builds the runtime and the runtime-only Python module from this
# checkout, then runs test/gpu/check.py on bundles compiled beforehand where the
# compiler lives (`make gpu-bundles`, carried as build/gpu-bundles).
#
#   bash test/gpu/run_gpu_checks.sh [BUNDLE_DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUNDLES=${1:-$ROOT/build/gpu-bundles}
BUILD=${KILN_GPU_BUILD:-/tmp/kiln-runtime-build}
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DKILN_RUNTIME_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "$PY")" \
  -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" >/dev/null
ninja -C "$BUILD" >/dev/null
PYTHONPATH="$BUILD/python" PYTHONUNBUFFERED=1 "$PY" "$ROOT/test/gpu/check.py" "$BUNDLES"
