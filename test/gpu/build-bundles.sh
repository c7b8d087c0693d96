#!/usr/bin/env bash
# Compiles the kernels test/gpu/check.py runs into a folder (default
# build/gpu-bundles) for one GPU target (default sm_90a). Runs where the
# compiler lives: `make gpu-bundles`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KILNC=${KILNC:-$ROOT/build/bin/kilnc}
OUT=${1:-$ROOT/build/gpu-bundles}
TARGET=${KILN_GPU_TARGET:-sm_90a}
mkdir -p "$OUT"
for f in vector_add softmax layernorm matmul matmul_bf16; do
  "$KILNC" "$ROOT/examples/$f.mlir" --target "$TARGET" -o "$OUT/$f.kiln"
done
"$KILNC" op embedding --dtype f32 --target "$TARGET" -o "$OUT/embedding.kiln"
echo "$TARGET" > "$OUT/TARGET"
ls -l "$OUT"
