#!/usr/bin/env bash
# The check a GPU machine runs, in one call (binaries from scripts/gpu_build.sh in gpu-bin/):
#   1. the machine: driver, GPU, clocks, library versions (env.txt);
#   2. the gpu-labelled tests, every device kernel against the CPU backend (tests.txt, gtest.json);
#   3. stagecraft probe --backend cuda: a bf16 cuBLASLt GEMM sweep up to 8192^3 and memory passes
#      past the L2, checked element by element, written as a trace (probe-gpu.json);
#   4. stagecraft calibrate on that trace against configs/clusters/h200-1.json: the fitted GEMM
#      efficiency and memory rate, as a calibrated profile (h200-1-calibrated.json).
# Everything lands in $OUT (or ./gpu-out); summary.txt ends with one table. Each step has its own
# timeout; the whole is meant to take under 3 minutes.
#   bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
O=${OUT:-./gpu-out}
mkdir -p "$O"
t0=$SECONDS
say() { echo "[$((SECONDS - t0))s] $*" | tee -a "$O/summary.txt"; }
B=gpu-bin
[ -x "$B/stagecraft" ] && [ -x "$B/stagecraft_cuda_tests" ] || { say "no binaries in $B: run scripts/gpu_build.sh first"; exit 2; }

# 1. The machine. The CUDA 13 libraries may come from a Python environment's wheels.
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; done
for py in python3 /opt/torch/.venv/bin/python; do
  sp=$("$py" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null) || continue
  for d in "$sp/nvidia/cu13/lib" "$sp/nvidia/cublas/lib" "$sp/nvidia/nccl/lib" "$sp/nvidia/cuda_runtime/lib"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
  done
done
{
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv 2>&1
  head -2 /etc/os-release 2>/dev/null
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for b in "$B"/*; do echo "== ldd $b"; ldd "$b"; done
} > "$O/env.txt" 2>&1
if grep -q "=> not found" "$O/env.txt"; then say "missing libraries:"; grep "=> not found" "$O/env.txt" | sort -u | tee -a "$O/summary.txt"; fi
export STAGECRAFT_CONFIG_DIR=$PWD/configs

# 2. The device tests (run directly: CTest files name this machine's build paths).
NVIDIA_TF32_OVERRIDE=0 timeout 180 "$B/stagecraft_cuda_tests" --gtest_output=json:"$O/gtest.json" > "$O/tests.txt" 2>&1
rc=$?
say "gpu tests: rc=$rc; $(grep -E '^\[  (PASSED|SKIPPED|FAILED)  ?\] [0-9]+ test' "$O/tests.txt" | tr '\n' ' ')"
grep -A3 "Failure\|^\[  FAILED" "$O/tests.txt" | head -40 >> "$O/summary.txt"
grep "^device 0:" "$O/tests.txt" | head -1 | tee -a "$O/summary.txt"

# 3. The probe (one rank: collectives trivial, kept short).
timeout 240 "$B/stagecraft" probe --backend cuda -e 1MiB -f 32 -n 20 -w 3 --trace "$O/probe-gpu.json" > "$O/probe.txt" 2>&1
say "probe: rc=$?"
cat "$O/probe.txt" >> "$O/summary.txt"

# 4. Calibrate the H200 profile on the probe.
if [ -s "$O/probe-gpu.json" ]; then
  timeout 60 "$B/stagecraft" calibrate "$O/probe-gpu.json" --cluster h200-1 -o "$O/h200-1-calibrated.json" > "$O/calibrate.txt" 2>&1
  say "calibrate: rc=$?"
  cat "$O/calibrate.txt" >> "$O/summary.txt"
fi
say "done"
