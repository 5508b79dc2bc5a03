#!/usr/bin/env bash
# Start-up time of the command line (bench/startup_bench.cpp): median of 50 runs, in ms, of
# `stagecraft --help` and `stagecraft info --model gpt2-124m`, next to /bin/true and the same
# commands of stagecraft-full; then the shared libraries each executable loads.
# Usage: bench/startup.sh [EXECUTABLE...]   (default: build/cli/stagecraft and stagecraft-full;
# builds first). Pass an older build's stagecraft too to compare.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
build/bench/stagecraft_bench_startup "$@"
for exe in "${@:-build/cli/stagecraft}" "$(dirname "${1:-build/cli/stagecraft}")/stagecraft-full"; do
  if [ -x "$exe" ]; then echo "$exe: $(ldd "$exe" | wc -l) shared libraries"; fi
done
