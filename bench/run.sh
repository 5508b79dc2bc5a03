#!/usr/bin/env bash
# Builds and runs every benchmark, printing Google Benchmark's tables.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
for b in build/bench/stagecraft_bench_*; do
  echo "== $(basename "$b")"
  STAGECRAFT_CONFIG_DIR="$PWD/configs" "$b" --benchmark_min_time=0.5 "$@"
done
