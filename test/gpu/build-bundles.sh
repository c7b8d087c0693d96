#!/usr/bin/env bash
# Compiles every kernel test/gpu/check.py launches into a folder (default
# build/gpu-bundles) for one target (KILN_GPU_TARGET, default sm_90a): runs
# check.py in record mode where the compiler lives (`make gpu-bundles`). For an
# emu-sm_XY target it also runs the checks on the emulator.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-bundles}
TARGET=${KILN_GPU_TARGET:-sm_90a}
# Always from scratch: check.py keeps a bundle that exists, and one recorded
# by an older compiler (or for another target) must not travel to the device.
rm -rf "$OUT"
KILNC=${KILNC:-$ROOT/build/bin/kilnc} PYTHONPATH=$ROOT/build/python \
  "${PYTHON:-$ROOT/build/venv/bin/python}" "$ROOT/test/gpu/check.py" --record \
  --target "$TARGET" "$OUT"
