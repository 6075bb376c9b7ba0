#!/usr/bin/env bash
# Build leakproof_native (src/native: Rust through pyo3 and maturin) into a venv.
#   scripts/native.sh VENV
# Without cargo on PATH it says so and leaves the venv with the pure-Python read path,
# which is the reference and gives the same results; with cargo, a failed build fails.
set -euo pipefail
venv=${1:?usage: scripts/native.sh VENV}
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v cargo >/dev/null; then
  echo "native.sh: no cargo on PATH: $venv keeps the pure-Python read path (same results, slower)"
  exit 0
fi
# the wheel is abi3 (CPython 3.11 and later): one build serves every venv of the checkout
out="$root/.services/native"
wheel=$(ls "$out"/leakproof_native-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ] || [ -n "$(find "$root/src/native" -newer "$wheel" -type f \
     -not -path '*/target/*' | head -1)" ]; then
  rm -rf "$out" && mkdir -p "$out"
  "$venv/bin/pip" wheel -q --no-deps -w "$out" "$root/src/native"
  wheel=$(ls "$out"/leakproof_native-*.whl | head -1)
fi
"$venv/bin/pip" install -q --no-deps --force-reinstall "$wheel"
"$venv/bin/python" -c 'import leakproof_native as n; print("native.sh:", n.__name__, "layout", n.ABI, "in", __import__("sys").prefix)'
