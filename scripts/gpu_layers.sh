#!/usr/bin/env bash
# The layer measurement a GPU machine runs, in one call (scripts/measure_layers.py says what):
#   1. layers.json: the copy and GEMM ceilings, each layer's forward and forward + backward with its
#      kernels by class;
#   2. ncu-<layer>.csv: Nsight Compute's DRAM bytes read and written and the duration of every kernel
#      of one forward + backward of four layers (the memory-bound kernels' bytes, counted by the GPU);
#   3. sustain.json: the Llama 2 70B layer's forward + backward back to back for 40 s, with the SM
#      clock and power: what sustained load does to the times of step 1.
# Everything lands in $OUT (or ./gpu-out). Meant to take under 4 minutes.
#   bash scripts/gpu_layers.sh [sections: measure ncu sustain]
set -uo pipefail
cd "$(dirname "$0")/.."
O=${OUT:-./gpu-out}
mkdir -p "$O"
t0=$SECONDS
sections=${*:-measure ncu sustain}
say() { echo "[$((SECONDS - t0))s] $*" | tee -a "$O/log.txt"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv 2>&1 | tee -a "$O/log.txt"
if [[ " $sections " == *" measure "* ]]; then
  timeout 300 python3 scripts/measure_layers.py --out "$O" 2>&1 | tee -a "$O/log.txt"
  say "measure_layers: rc=${PIPESTATUS[0]}"
fi
if [[ " $sections " == *" ncu "* ]]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
  [ -z "$NCU" ] && say "no ncu"
  for layer in llama2-13b-mb2 mingpt-175b-mb2 roberta-52b-mb16 xent-50257-t8192; do
    [ -z "$NCU" ] && break
    timeout 150 "$NCU" --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      --csv python3 scripts/measure_layers.py --ncu-layer "$layer" > "$O/ncu-$layer.csv" 2> "$O/ncu-err.txt"
    say "ncu $layer: rc=$? $(grep -c '"dram__bytes_read.sum"' "$O/ncu-$layer.csv") kernels"
    grep -v "UserWarning\|return \|^ *$" "$O/ncu-err.txt" | tail -3 | tee -a "$O/log.txt"
  done
  rm -f "$O/ncu-err.txt"
fi
if [[ " $sections " == *" sustain "* ]]; then
  timeout 120 python3 scripts/measure_layers.py --out "$O" --sustain 40 2>&1 | grep -v "UserWarning\|return t.to" | tee -a "$O/log.txt"
  say "sustain: rc=${PIPESTATUS[0]}"
fi
