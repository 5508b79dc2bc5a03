#!/usr/bin/env bash
# Builds, on this machine, what scripts/gpu_check.sh runs on a GPU machine, and puts it in gpu-bin/
# (ignored by git; carry it): the CUDA tests and a `stagecraft` without MPI or Qt, which probes with
# --backend cuda itself. The GPU machine has no compiler toolchain for this project (no Eigen,
# nlohmann/json, CLI11, SQLite or GoogleTest headers), so nothing is built there.
#   bash scripts/gpu_build.sh [BUILD_DIR]      (default build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-gpu}
jobs=$(nproc 2>/dev/null || echo 2)
generator=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$dir/Makefile" ]; then generator=(-G Ninja); fi
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSTAGECRAFT_WITH_CUDA=ON -DSTAGECRAFT_WITH_MPI=OFF \
  -DSTAGECRAFT_WITH_GUI=OFF -DSTAGECRAFT_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 > "$dir.configure.log"
cmake --build "$dir" --parallel "$jobs" --target stagecraft stagecraft_cuda_tests
mkdir -p gpu-bin
cp "$dir/cli/stagecraft" "$dir/tests/executor/stagecraft_cuda_tests" gpu-bin/
strip gpu-bin/stagecraft gpu-bin/stagecraft_cuda_tests
grep -qx '/gpu-bin/' .git/info/exclude 2>/dev/null || echo '/gpu-bin/' >> .git/info/exclude
ls -l gpu-bin/
echo "gpu_build: carry gpu-bin to the GPU machine and run: bash scripts/gpu_check.sh"
