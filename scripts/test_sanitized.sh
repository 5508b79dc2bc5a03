#!/usr/bin/env bash
# The test suite built with AddressSanitizer + UndefinedBehaviorSanitizer (every report fatal), in
# build-asan/ (docs/reliability.md, "Sanitizers"). .ci/run runs it after the normal suite. Leaves
# out what only measures or repeats other tests under a 3x slower build: the benchmarks (not
# built), the Qt drawing (GUI off), the CUDA code (off: its tests need a device, and the CUDA
# runtime under ASan needs a shadow-gap exception) and the validation scripts (label validation), which run the same
# simulator code the unit tests cover many times over.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
generator=()
if command -v ninja >/dev/null 2>&1 && [ ! -f build-asan/Makefile ]; then generator=(-G Ninja); fi
# Clang (scripts/setup.sh installs it; the normal build uses the system compiler, so CI compiles
# with both) and a unity build (sources of one target compiled together, 16 at a time): on 2 cores
# this build takes about 6 minutes, against 20 for GCC one file at a time. The normal build stays
# one file at a time, so a file that misses an include still fails there.
compiler=()
if command -v clang++ >/dev/null 2>&1; then compiler=(-DCMAKE_CXX_COMPILER=clang++); fi
cmake -S . -B build-asan "${generator[@]}" "${compiler[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
  -DSTAGECRAFT_SANITIZE=ON -DSTAGECRAFT_BUILD_BENCH=OFF -DSTAGECRAFT_WITH_GUI=OFF -DSTAGECRAFT_WITH_CUDA=OFF > build-asan.configure.log
cmake --build build-asan --parallel "$jobs"
# Every ASan and UBSan report is fatal. Leaks are checked everywhere but where Open MPI starts (the
# tests labelled mpi, and stagecraft-full, cli/main_full.cpp): its plugins, loaded with dlopen and
# unloaded before exit, keep allocations LeakSanitizer can neither attribute nor suppress by
# library (tests/sanitizer/lsan.supp holds the libraries it can name).
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizer/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ASAN_OPTIONS="abort_on_error=1" \
  ctest --test-dir build-asan --output-on-failure --parallel "$jobs" -LE "validation|mpi" "$@"
# traces.mpi.loop and traces.mpi.loop_tp are left out too: they calibrate the cpu-local profile to
# measured step times, and instrumented code is not the machine the profile describes (its runs
# came out 30x slower and calibration could not halve a -97% error). Their code under ASan is the
# executor's traced runs (executor.mpi.tp_trace, MpiTrace) and calibrate's unit tests; run serially,
# the tp loop alone took 2-2.5 minutes of the sanitized pass. So are executor.mpi.learning,
# learning_tp, learning_cp and learning_moe: 200 steps each of `mpirun stagecraft run` to see the loss
# fall (81 s, 106 s, 67 s and 83 s under ASan), the same step code the equivalence tests run under
# ASan for every plan (experts included), and the same command the resume, trace, fault and
# watchdog tests run.
ASAN_OPTIONS="abort_on_error=1:detect_leaks=0" \
  ctest --test-dir build-asan --output-on-failure --parallel "$jobs" -L mpi -LE validation \
    -E '^(traces\.mpi\.loop(_tp)?|executor\.mpi\.learning(_tp|_cp|_moe)?)$' "$@"
