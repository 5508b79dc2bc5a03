#!/usr/bin/env bash
# The executor step benchmark under mpirun with 2 ranks (bench/executor_step_bench.cpp): step
# time, the share of rank 0's step in GEMMs, and GEMM throughput inside the step vs standalone.
# Usage: bench/executor_step.sh [--plan pp2|dp2] [--steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
exe=build/bench/stagecraft_executor_step_bench
if [ ! -x "$exe" ]; then
  echo "executor_step.sh: $exe is not built (it needs STAGECRAFT_WITH_MPI and its bench/CMakeLists.txt entry)" >&2
  exit 2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -n 2 --oversubscribe "$exe" "$@"
