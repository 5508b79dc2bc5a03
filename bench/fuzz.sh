#!/usr/bin/env bash
# Fuzzes every parser and loader (tests/fuzz/fuzz_targets.cpp) with libFuzzer under ASan + UBSan
# and prints, per target: inputs tried, crashes (or sanitizer reports, or undocumented exceptions,
# which abort), and coverage (libFuzzer's "cov", edges reached).
#   bench/fuzz.sh [RUNS [SECONDS]]   each target stops after RUNS inputs (default 1000000) or
#                                    SECONDS (default 600), whichever comes first
# Builds build-fuzz/ with clang (scripts/setup.sh installs it) when missing. Seeds are
# tests/fuzz/corpus/<target>/ (copied: new inputs stay in the work folder). A crashing input is kept
# as build-fuzz/fuzz-work/<target>/crash-*; add it to tests/fuzz/corpus/<target>/ with the fix, and
# the test suite (label fuzz) replays it from then on.
# Environment: FUZZ_TARGETS (default: all), FUZZ_JOBS (parallel targets, default: nproc).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-1000000}"
seconds="${2:-600}"
targets=(${FUZZ_TARGETS:-model cluster training plan deepspeed trace checkpoint store quantity})
build="$root/build-fuzz"
if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  generator=(); command -v ninja > /dev/null && generator=(-G Ninja)
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTAGECRAFT_FUZZ=ON -DCMAKE_UNITY_BUILD=ON \
    -DSTAGECRAFT_WITH_MPI=OFF -DSTAGECRAFT_WITH_GUI=OFF -DSTAGECRAFT_BUILD_BENCH=OFF > "$build.configure.log"
fi
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]/#/stagecraft_fuzz_}"
work="$build/fuzz-work"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
run_one() {
  local t="$1" dir="$work/$1"
  rm -rf "$dir" && mkdir -p "$dir/corpus"
  cp "$root/tests/fuzz/corpus/$t/"* "$dir/corpus/"
  (cd "$dir" && "$build/tests/fuzz/stagecraft_fuzz_$t" -runs="$runs" -max_total_time="$seconds" -timeout=10 \
     -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 corpus > log.txt 2>&1) || true
}
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "${FUZZ_JOBS:-$(nproc)}" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait
printf '%-10s %12s %9s %8s %8s %s\n' target inputs seconds crashes cov "corpus"
status=0
for t in "${targets[@]}"; do
  log="$work/$t/log.txt"
  inputs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | awk '{print $5}' || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  crashes=$(ls "$work/$t" | grep -c -E '^(crash|leak|timeout|oom)-' || true)
  grep -q -E 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error:|undocumented exception' "$log" && crashes=$((crashes > 0 ? crashes : 1))
  [ "$crashes" -gt 0 ] && status=1
  printf '%-10s %12s %9s %8s %8s %s\n' "$t" "${inputs:-0}" "${secs:-?}" "$crashes" "${cov:-0}" "$(ls "$work/$t/corpus" | wc -l) files"
done
[ "$status" -eq 0 ] || echo "fuzz: crashes found; see $work/<target>/log.txt and the crash-* inputs" >&2
exit "$status"
