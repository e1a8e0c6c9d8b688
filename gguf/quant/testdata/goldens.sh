#!/usr/bin/env bash
# Regenerates ggml-goldens.gguf from a llama.cpp build (the reference built by
# /work/shared/tools/llamacpp-ref/build.sh). Usage: goldens.sh [LLAMACPP_DIR]
# where LLAMACPP_DIR holds src/ (source) and src/build/bin (libggml*.so).
# With BENCH=1 it prints ggml's vec_dot speed per type instead (the
# yardstick for BenchmarkMatVec).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
L=${1:-${LLAMACPP_REF:-$HOME/.cache/llamacpp-ref}}
lib="$L/src/build/bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -std=c11 -I"$L/src/ggml/include" "$here/goldens.c" -L"$lib" -lggml-cpu -lggml-base -lm \
  -Wl,-rpath,"$lib" -o "$tmp/goldens"
if [ -n "${BENCH:-}" ]; then exec "$tmp/goldens" -bench; fi
"$tmp/goldens" "$here/ggml-goldens.gguf"
echo "wrote $here/ggml-goldens.gguf ($(stat -c %s "$here/ggml-goldens.gguf") bytes) from llama.cpp $(git -C "$L/src" rev-parse --short HEAD 2>/dev/null || echo '?')"
