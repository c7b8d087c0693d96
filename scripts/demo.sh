#!/usr/bin/env bash
# `make demo`: compile and run every example kernel on the CPU, check each
# against a float64 reference, and time it; then run the C example, which
# uses only the runtime and a kilnc-generated header.
set -uo pipefail
build="${1:-build}"
here="$(cd "$(dirname "$0")/.." && pwd)"
status=0
"$build/bin/kiln-demo" "$here/examples" || status=1
echo
echo "C example (runtime + generated header, no LLVM at run time):"
"$build/bin/vector_add_c" "$build/examples/c/vector_add.kiln" || status=1
echo
echo "Python examples (@kiln.jit kernels, checked against numpy):"
for f in "$here"/examples/python/*.py; do
  PYTHONPATH="$build/python" "$build/venv/bin/python" "$f" || status=1
done
exit $status
