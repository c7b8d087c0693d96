#!/usr/bin/env bash
# Compiles every kernel test/gpu/check.py launches into a folder (default
# build/gpu-bundles) for one target (KILN_GPU_TARGET, default sm_90a): runs
# check.py in record mode where the compiler lives (`make gpu-bundles`). For an
# emu-sm_XY target it also runs the checks on the emulator.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-bundles}
TARGET=${KILN_GPU_TARGET:-sm_90a}
if [ -f "$OUT/TARGET" ] && [ "$(cat "$OUT/TARGET")" != "$TARGET" ]; then
  rm -rf "$OUT" # bundles of another target
fi
KILNC=${KILNC:-$ROOT/build/bin/kilnc} PYTHONPATH=$ROOT/build/python \
  "${PYTHON:-$ROOT/build/venv/bin/python}" "$ROOT/test/gpu/check.py" --record \
  --target "$TARGET" "$OUT"
