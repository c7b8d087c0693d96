#!/usr/bin/env bash
# The device check, on a machine with an NVIDIA GPU, PyTorch, cmake and ninja
# but no LLVM: builds the runtime and the runtime-only Python module from this
# checkout, then runs test/gpu/check.py on bundles compiled beforehand where the
# compiler lives (`make gpu-bundles`, carried as build/gpu-bundles and
# build/gpu-bundles-sm_90).
#
#   bash test/gpu/run_gpu_checks.sh [BUNDLE_DIR...]
#
# Each bundle folder's examples, operators and benchmarks run in separate
# processes under a time limit (KILN_GPU_SECTION_TIMEOUT, default 150 s): a
# kernel that faults (which poisons the CUDA context) or hangs costs only its
# own part. Exits non-zero if any part failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -eq 0 ]; then
  set -- "$ROOT/build/gpu-bundles"
  [ -d "$ROOT/build/gpu-bundles-sm_90" ] && set -- "$@" "$ROOT/build/gpu-bundles-sm_90"
fi
BUILD=${KILN_GPU_BUILD:-/tmp/kiln-runtime-build}
PY=${PYTHON:-python3}
LIMIT=${KILN_GPU_SECTION_TIMEOUT:-150}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
set -e
# pybind11 from pip when this Python has it, else where cmake finds it.
PB=()
if PBDIR=$("$PY" -m pybind11 --cmakedir 2>/dev/null); then PB=(-Dpybind11_DIR="$PBDIR"); fi
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DKILN_RUNTIME_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "$PY")" \
  "${PB[@]}" >/dev/null
ninja -C "$BUILD" >/dev/null
set +e
summary=()
status=0
for dir in "$@"; do
  for part in notma examples ops gemm bench; do
    echo "== $(cat "$dir/TARGET") $part ($dir)"
    PYTHONPATH="$BUILD/python" PYTHONUNBUFFERED=1 timeout -k 10 "$LIMIT" \
      "$PY" "$ROOT/test/gpu/check.py" --section "$part" "$dir"
    rc=$?
    case $rc in
      0) result=passed ;;
      124|137) result="TIMED OUT after ${LIMIT} s" ;;
      *) result="FAILED (exit $rc)" ;;
    esac
    [ $rc -eq 0 ] || status=1
    summary+=("$(cat "$dir/TARGET") $part: $result")
  done
done
echo
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
