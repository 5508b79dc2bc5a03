#!/usr/bin/env bash
# NCCL's rules over every plan of the lowering sweep (tests/executor/mpi/test_nccl_rules.cpp), all
# 352 plans on 4 ranks and 968 on 8; the test suite (CTest executor.mpi.nccl_rules_4 / _8) runs one
# of each plan's four tied x overlap variants. About 30 s on 2 idle cores.
# Usage: bench/nccl_rules.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
export STAGECRAFT_CONFIG_DIR="$root/configs" STAGECRAFT_NCCL_RULES_FULL=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for n in 4 8; do
  mpirun -n "$n" --oversubscribe -x STAGECRAFT_NCCL_RULES_FULL "$build/tests/executor/mpi/stagecraft_executor_mpi_tests" \
    --gtest_filter='NcclRules.EveryPlan*'
done
