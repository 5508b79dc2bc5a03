#!/usr/bin/env bash
# The check a GPU machine runs, in one call (binaries from scripts/gpu_build.sh in gpu-bin/):
#   1. the machine: driver, GPU, clocks, library versions (env.txt);
#   2. the gpu-labelled tests, every device kernel against the CPU backend (tests.txt);
#   3. stagecraft probe --backend cuda: a bf16 cuBLASLt GEMM sweep up to 8192^3 and memory passes
#      past the L2, checked element by element, written as a trace (probe-gpu.json);
#   4. training on the GPU, one rank (run --backend cuda, plan one-gpu), each with its model TFLOP/s
#      and MFU against the profile's peak: GPT-2 124M in bf16, traced with CUDA events
#      (run-124m.json), then fp32 for comparison; the bf16 Program simulated on the profile of the
#      GPU found (h100-1 for an H100, h200-1 for an H200) and compared; GPT-2 1.5B in bf16 for 4 steps;
#   5. stagecraft calibrate on the probe and the bf16 run against that profile (the fitted GEMM
#      efficiency and memory rate: <profile>-calibrated.json and its report), then simulate and
#      compare again on the calibrated profile: on the run it was fitted on, and on a held-out run
#      of twice the micro-batches (run-124m-heldout.json), which calibration never saw;
#   6. on a machine of several GPUs, the tiny model's 2- and 4-rank plans over NCCL in bf16 under
#      mpirun, each against the CPU executor's run of the same plan.
# Everything lands in $OUT (or ./gpu-out): 8 files at most; summary.txt holds every table. Each
# step has its own timeout; the whole is meant to take under 8 minutes.
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
# The bundled profile of the GPU found; another GPU is simulated on none rather than on a wrong one.
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu_name" in
  *H100*) P=h100-1 ;;
  *H200*) P=h200-1 ;;
  *) P= ;;
esac
say "GPU: ${gpu_name:-none found}; profile: ${P:-none bundled, simulate and calibrate skipped}"

# 2. The device tests (run directly: CTest files name this machine's build paths).
NVIDIA_TF32_OVERRIDE=0 timeout 180 "$B/stagecraft_cuda_tests" > "$O/tests.txt" 2>&1
rc=$?
say "gpu tests: rc=$rc; $(grep -E '^\[  (PASSED|SKIPPED|FAILED)  ?\] [0-9]+ test' "$O/tests.txt" | tr '\n' ' ')"
grep -A3 "Failure\|^\[  FAILED" "$O/tests.txt" | head -40 >> "$O/summary.txt"
grep "^device 0:" "$O/tests.txt" | head -1 | tee -a "$O/summary.txt"

# 3. The probe (one rank: collectives trivial, kept short).
T=$(mktemp -d)
timeout 240 "$B/stagecraft" probe --backend cuda -e 1MiB -f 32 -n 20 -w 3 --trace "$O/probe-gpu.json" > "$T/probe.txt" 2>&1
say "probe: rc=$?"
cat "$T/probe.txt" >> "$O/summary.txt"

# 4. Training on the GPU, and the simulator on the same Program. bf16 is the training's dtype; the
#    held-out run has 4 micro-batches where the fitted one has 2 (global batch 16, not 8).
run_args=(--model gpt2-124m --training tiny-cpu --plan one-gpu --dtype bf16)
cat > "$T/heldout.json" <<'PLAN'
{"tp": 1, "pp": 1, "dp": 1, "micro_batch": 4, "micro_batches": 4, "schedule": "1f1b", "virtual_stages": 1,
 "sequence_parallel": false, "recompute": "none", "zero": {"stage": 0, "offload_optimizer": "none"}}
PLAN
heldout_args=(--model gpt2-124m --training tiny-cpu --plan "$T/heldout.json" --global-batch 16 --dtype bf16)
timeout 240 "$B/stagecraft" run --backend cuda "${run_args[@]}" --steps 20 ${P:+--cluster $P} --trace "$O/run-124m.json" \
  > "$T/run.txt" 2>&1
say "run gpt2-124m bf16 on the GPU: rc=$?"
cat "$T/run.txt" >> "$O/summary.txt"
timeout 240 "$B/stagecraft" run --backend cuda --model gpt2-124m --training tiny-cpu --plan one-gpu --dtype fp32 --steps 10 \
  ${P:+--cluster $P} > "$T/run32.txt" 2>&1
say "run gpt2-124m fp32 on the GPU: rc=$?"
tail -1 "$T/run32.txt" >> "$O/summary.txt"
timeout 240 "$B/stagecraft" run --backend cuda "${heldout_args[@]}" --steps 10 ${P:+--cluster $P} \
  --trace "$O/run-124m-heldout.json" > "$T/heldout.txt" 2>&1
say "run gpt2-124m bf16, 4 micro-batches (held out): rc=$?"
tail -1 "$T/heldout.txt" >> "$O/summary.txt"
if [ -n "$P" ] && [ -s "$O/run-124m.json" ]; then
  timeout 60 "$B/stagecraft" simulate "${run_args[@]}" --cluster $P --trace "$T/sim-124m.json" >> "$O/summary.txt" 2>&1
  timeout 60 "$B/stagecraft" compare "$T/sim-124m.json" "$O/run-124m.json" >> "$O/summary.txt" 2>&1
  say "simulate + compare on $P: rc=$?"
fi
# GPT-2 1.5B, a few steps in bf16 (unfused attention; the 16-bit values in fp32 storage).
timeout 240 "$B/stagecraft" run --backend cuda --model gpt2-1.5b --training tiny-cpu --plan one-gpu --dtype bf16 --steps 4 \
  ${P:+--cluster $P} > "$T/run-1.5b.txt" 2>&1
say "run gpt2-1.5b bf16 on the GPU: rc=$?"
cat "$T/run-1.5b.txt" >> "$O/summary.txt"

# 5. Calibrate the profile on the probe and the bf16 run, then simulate and compare again: the
#    fitted run, and the held-out one.
traces=()
for f in "$O/probe-gpu.json" "$O/run-124m.json"; do [ -s "$f" ] && traces+=("$f"); done
if [ -n "$P" ] && [ ${#traces[@]} -gt 0 ]; then
  timeout 60 "$B/stagecraft" calibrate "${traces[@]}" --cluster $P -o "$O/$P-calibrated.json" >> "$O/summary.txt" 2>&1
  say "calibrate: rc=$?"
  if [ -s "$O/$P-calibrated.json" ] && [ -s "$O/run-124m.json" ]; then
    timeout 60 "$B/stagecraft" simulate "${run_args[@]}" --cluster "$O/$P-calibrated.json" --trace "$T/sim-cal.json" \
      >> "$O/summary.txt" 2>&1
    timeout 60 "$B/stagecraft" compare "$T/sim-cal.json" "$O/run-124m.json" >> "$O/summary.txt" 2>&1
    say "simulate + compare on the calibrated profile: rc=$?"
  fi
  if [ -s "$O/$P-calibrated.json" ] && [ -s "$O/run-124m-heldout.json" ]; then
    timeout 60 "$B/stagecraft" simulate "${heldout_args[@]}" --cluster "$O/$P-calibrated.json" --trace "$T/sim-held.json" \
      >> "$O/summary.txt" 2>&1
    timeout 60 "$B/stagecraft" compare "$T/sim-held.json" "$O/run-124m-heldout.json" >> "$O/summary.txt" 2>&1
    say "simulate + compare the held-out run on the calibrated profile: rc=$?"
  fi
fi
# 6. NCCL across GPUs: every bundled tiny plan the machine's GPU count allows, in bf16, one rank per
#    GPU under mpirun, against the CPU executor running the same plan. The bound on their last
#    losses is 2·k·u with k = 44 rounding points (4 + 10 a layer of the tiny model's 4) and u = 2^-9:
#    17.2% (tests/executor/cuda/test_cuda_sixteen.cpp derives it).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
last_loss() { grep -E '^step [0-9]+/[0-9]+ +loss' "$1" | tail -1 | awk '{print $4}'; }
if [ "${gpus:-0}" -ge 2 ] && command -v mpirun > /dev/null; then
  for plan_ranks in tiny-zero3:2 tiny-pp2-dp2:4; do
    plan=${plan_ranks%%:*}; n=${plan_ranks##*:}
    [ "$gpus" -ge "$n" ] || { say "NCCL $plan: needs $n GPUs, this machine has $gpus"; continue; }
    mp=(mpirun --oversubscribe --allow-run-as-root -n "$n")
    args=(run --model tiny --training tiny-cpu --plan "$plan" --dtype bf16 --steps 10)
    timeout 180 "${mp[@]}" "$B/stagecraft" "${args[@]}" --backend cuda > "$T/nccl-$plan.txt" 2>&1
    rc=$?
    timeout 180 "${mp[@]}" "$B/stagecraft" "${args[@]}" --backend cpu > "$T/cpu-$plan.txt" 2>&1
    g=$(last_loss "$T/nccl-$plan.txt"); c=$(last_loss "$T/cpu-$plan.txt")
    if [ -n "$g" ] && [ -n "$c" ]; then
      say "NCCL $plan on $n GPUs, bf16: rc=$rc, last loss GPU $g, CPU $c, $(awk -v g="$g" -v c="$c" \
        'BEGIN { d = (g - c) / c; if (d < 0) d = -d; printf "relative difference %.3g (bound 0.172): %s", d, d <= 0.172 ? "ok" : "OUT OF BOUND" }')"
    else
      say "NCCL $plan on $n GPUs: rc=$rc, no loss to compare"; tail -5 "$T/nccl-$plan.txt" >> "$O/summary.txt"
    fi
  done
else
  say "NCCL across GPUs: skipped (${gpus:-0} GPU(s); mpirun $(command -v mpirun > /dev/null && echo found || echo missing))"
fi

rm -rf "$T"
say "done"
