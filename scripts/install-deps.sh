#!/usr/bin/env bash
# Installs the Debian packages Kiln needs, only those missing. Idempotent, quiet and
# fast (one dpkg query) when everything is present. The LLVM major version comes from
# cmake/llvm-version, the one place it is pinned.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
v="$(tr -d '[:space:]' < "$here/cmake/llvm-version")"
pkgs=(
  "llvm-$v-dev" "libmlir-$v-dev" "mlir-$v-tools" "llvm-$v-tools" "clang-$v"
  cmake ninja-build ccache catch2 libfmt-dev pybind11-dev libdnnl-dev
  python3 python3-venv python3-dev binutils
)
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "kiln: installing missing Debian packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
