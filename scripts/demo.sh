#!/usr/bin/env bash
# `make demo`: what Kiln does today, on the example kernels in examples/.
set -uo pipefail
build="${1:-build}"
here="$(cd "$(dirname "$0")/.." && pwd)"
opt="$build/bin/kiln-opt"
status=0
echo "== Kiln demo: parse, verify and canonicalize the example kernels =="
for f in "$here"/examples/*.mlir; do
  name="$(basename "$f")"
  if out="$("$opt" "$f" --canonicalize 2>&1)"; then
    ops=$(grep -c '^\s*\(%\|kiln\.\|scf\.\)' <<<"$out")
    printf '  %-32s verified, canonicalized (%d ops)\n' "$name" "$ops"
  else
    printf '  %-32s FAILED\n%s\n' "$name" "$out"
    status=1
  fi
done
exit $status
