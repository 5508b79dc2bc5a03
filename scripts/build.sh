#!/usr/bin/env bash
# Configures and builds Stagecraft into ./build (Release). Reuses an existing build tree.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
generator=()
if command -v ninja >/dev/null 2>&1 && [ ! -f build/Makefile ]; then generator=(-G Ninja); fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build --parallel "$jobs"
