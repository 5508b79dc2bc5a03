#!/usr/bin/env python3
"""The compute model checked blind against transformer layers measured on an H200.

scripts/measure_layers.py ran, on one H200 (scripts/gpu_layers.sh), the model code of the validation
rows - torchtitan's Llama block, minGPT's block, Hugging Face's BERT/RoBERTa layer, PyTorch eager ops
one at a time, bf16 - at the rows' shapes, and timed each layer's forward and forward + backward;
Nsight Compute counted the DRAM bytes of every kernel of one forward + backward. The measurement is
kept in configs/validation/h200-layers.json (--collect writes it from the device's files).

This script simulates the same layers on the bundled h200-1 profile (datasheet and published-kernel
values; nothing here is fitted to the measurement) and writes docs/validation.md's "layers" section:

  * a layer's simulated time is the difference between a model of two such blocks and of one (the
    embedding, head and loss cancel), tp = pp = dp = 1, no recompute, the row's micro-batch, eager
    kernels, framework fsdp; the ZB-H1 schedule splits the backward into input and weight
    gradients so that the weight-gradient pass's gradient accumulation - the fp32 main-gradient
    sum the simulator charges and the measured step (fresh .grad tensors) does not run - is read off
    its own instruction on a profile with unbounded FLOP/s and left out;
  * the split into matrix work (GEMM and attention kernels) and memory-bound work comes from the
    simulator itself: the same layers on the profile with an unbounded HBM rate (what remains is
    the matrix work) and with unbounded FLOP/s (the memory-bound work); measured, from the kernel
    classes of the profiled step (gemm and attention against the rest).

  python3 scripts/validate_layers.py [--stagecraft build/cli/stagecraft] [--out docs/validation.md] [--max-mae F]
  python3 scripts/validate_layers.py --collect DIR [DIR2] -o RECORD   (layers.json from DIR; the ncu-*.csv
                                                                     and sustain.json from DIR2, else DIR)
"""
import argparse
import collections
import copy
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

from kernel_kinds import kernel_kind
from validation_report import exit_on_limits, write_section

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = os.path.normpath(os.path.join(HERE, "..", "configs", "validation", "h200-layers.json"))
CONFIGS = os.path.normpath(os.path.join(HERE, "..", "configs"))

# The code each measured layer runs (scripts/measure_layers.py) and the row it stands for.
CODE = {
    "llama": "torchtitan Llama (RMSNorm in fp32 ops, complex rotary, repeat_kv, SDPA flash)",
    "mingpt": "minGPT block (score matrix, masked_fill, softmax, dropout, NewGELU as ops)",
    "bert": "Hugging Face BERT/RoBERTa layer, eager attention",
}
ROWS = {"llama2-70b-mb2": "C2, B1", "llama3-70b-s8k": "C1", "llama2-13b-mb2": "C3", "mingpt-175b-mb1": "F1",
        "mingpt-175b-mb2": "F2", "roberta-52b-mb16": "E0, E1"}


# -------------------------------------------------------------------------------------------------
# --collect: the device's files -> the record

def read_ncu(path):
    """Kernels of an `ncu --csv` run after its last spin_kernel marker: [{kernel, kind, read, write, s}]."""
    with open(path) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    header, rows = rows[0], rows[1:]
    col = {k: header.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    kernels = collections.OrderedDict()
    for r in rows:
        k = kernels.setdefault(r[col["ID"]], {"name": r[col["Kernel Name"]]})
        k[r[col["Metric Name"]]] = float(r[col["Metric Value"]].replace(",", ""))
    kernels = list(kernels.values())
    last = max(i for i, k in enumerate(kernels) if "spin_kernel" in k["name"])
    return [{"kernel": k["name"][:160], "kind": kernel_kind(k["name"]), "read_bytes": k["dram__bytes_read.sum"],
             "write_bytes": k["dram__bytes_write.sum"], "s": k["gpu__time_duration.sum"] * 1e-9}
            for k in kernels[last + 1:]]


def collect(dirs, out):
    with open(os.path.join(dirs[0], "layers.json")) as f:
        measured = json.load(f)
    doc = {"about": "Transformer layers measured on one H200 by scripts/measure_layers.py (run by scripts/gpu_layers.sh), "
                    "collected by scripts/validate_layers.py --collect; scripts/validate_layers.py checks the simulator "
                    "against it (docs/validation.md, layers). Times in seconds, bytes in bytes.",
           "env": measured["env"], "ceilings": measured["ceilings"], "layers": []}
    for layer in measured["layers"]:
        doc["layers"].append({k: v for k, v in layer.items() if not k.endswith("_kernels")})
    doc["ncu"] = {}
    for d in dirs[1:] or dirs:  # the first folder holds layers.json; ncu and sustain come from the others, if given
        for name in sorted(os.listdir(d)):
            if name.startswith("ncu-") and name.endswith(".csv"):
                doc["ncu"][name[4:-4]] = read_ncu(os.path.join(d, name))
        sustain = os.path.join(d, "sustain.json")
        if os.path.exists(sustain):
            with open(sustain) as f:
                s = json.load(f)
            steps = [t for _, t in s["steps"][1:]]  # the first step pays one-time set-up
            tenth = max(1, len(steps) // 10)
            loaded = [x for x in s["smi"] if x[2] > 200]  # samples under load (power above 200 W)
            doc["sustain"] = {"layer": s["layer"], "seconds": s["steps"][-1][0], "steps": len(steps),
                              "first_tenth_median_s": statistics.median(steps[:tenth]),
                              "last_tenth_median_s": statistics.median(steps[-tenth:]),
                              "clock_sm_mhz": [min(x[1] for x in loaded), max(x[1] for x in loaded)],
                              "power_w_median": statistics.median(x[2] for x in loaded),
                              "temperature_c_max": max(x[3] for x in loaded)}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(doc['layers'])} layers, ncu of {', '.join(doc['ncu'])}", file=sys.stderr)


# -------------------------------------------------------------------------------------------------
# The simulation of one layer

def model_of(layer, blocks):
    kind, c, seq = layer["kind"], layer["config"], layer["seq"]
    if kind == "llama":
        m = {"name": layer["name"], "layers": blocks, "hidden": c["dim"], "heads": c["n_heads"], "kv_heads": c["n_kv_heads"],
             "ffn_hidden": c["ffn"], "vocab": 32000, "seq_len": seq, "mlp": "swiglu", "norm": "rmsnorm",
             "position": "rope", "tied_embeddings": False, "bias": False}
    elif kind == "mingpt":
        m = {"name": layer["name"], "layers": blocks, "hidden": c["n_embd"], "heads": c["n_head"], "vocab": 50257,
             "seq_len": seq}
    else:
        m = {"name": layer["name"], "layers": blocks, "hidden": c["hidden"], "heads": c["heads"], "ffn_hidden": c["ffn"],
             "vocab": 50265, "seq_len": seq}
    m["source"] = "scripts/validate_layers.py: the measured layer's shape (configs/validation/h200-layers.json)"
    return m


def simulate(exe, work, layer, blocks, cluster):
    docs = {
        "model": model_of(layer, blocks),
        "training": {"global_batch": layer["micro_batch"], "dtype": "bf16", "framework": "fsdp", "kernels": "eager",
                     "attention": "flash" if layer["kind"] == "llama" else "unfused",
                     "source": "the measured step: bf16, PyTorch eager ops"},
        "plan": {"tp": 1, "pp": 1, "dp": 1, "micro_batch": layer["micro_batch"], "micro_batches": 1, "schedule": "zb-h1",
                 "recompute": "none", "zero": {"stage": 0}, "source": "one GPU, the measured micro-batch"},
        "cluster": cluster,
    }
    paths = {}
    for name, doc in docs.items():
        paths[name] = os.path.join(work, f"{name}.json")
        with open(paths[name], "w") as f:
            json.dump(doc, f)
    trace = os.path.join(work, "trace.json")
    out = subprocess.run([exe, "simulate", "--model", paths["model"], "--cluster", paths["cluster"], "--training",
                          paths["training"], "--plan", paths["plan"], "--trace", trace, "--no-error-bars"],
                         capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"{layer['name']}: stagecraft simulate failed ({out.returncode}): {out.stderr.strip()}")
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    times = collections.Counter()
    for e in events:
        if e.get("ph") == "X":
            times[e["name"]] += e["dur"] * 1e-6
    return times


def layer_times(exe, work, layer, cluster):
    """(forward, backward input, backward weight) of one block: two blocks minus one."""
    two, one = simulate(exe, work, layer, 2, cluster), simulate(exe, work, layer, 1, cluster)
    return tuple(two[k] - one[k] for k in ("Forward", "BackwardInput", "BackwardWeight"))


# -------------------------------------------------------------------------------------------------

def pct(x):
    return f"{100 * x:+.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stagecraft", default="build/cli/stagecraft")
    ap.add_argument("--out", default="docs/validation.md")
    ap.add_argument("--record", default=RECORD)
    ap.add_argument("--max-mae", type=float, default=None,
                    help="exit 1 when the mean absolute error of forward + backward exceeds this fraction")
    ap.add_argument("--collect", nargs="+", default=None, metavar="DIR")
    ap.add_argument("-o", default=RECORD, help="with --collect: the record to write")
    args = ap.parse_args()
    if args.collect:
        collect(args.collect, args.o)
        return
    with open(args.record) as f:
        rec = json.load(f)
    with open(os.path.join(CONFIGS, "clusters", "h200-1.json")) as f:
        base = json.load(f)
    unbounded_hbm = copy.deepcopy(base)
    unbounded_hbm["gpu"]["hbm_Bps"] = 1e15  # the limit a profile accepts: memory-bound work ~0
    unbounded_flops = copy.deepcopy(base)
    unbounded_flops["gpu"]["peak_flops"] = {k: 1e18 for k in base["gpu"]["peak_flops"]}
    # every memory-bound kind at memory_efficiency: its memory-bound time times that rate is the
    # simulator's byte count
    one_rate = copy.deepcopy(unbounded_flops)
    one_rate["gpu"].pop("memory_kernels", None)
    gpu = base["gpu"]
    results = []
    with tempfile.TemporaryDirectory() as work:
        for layer in rec["layers"]:
            if layer.get("kind") not in CODE or "error" in layer:
                continue
            f, bi, bw = layer_times(args.stagecraft, work, layer, base)
            fm, bim, bwm = layer_times(args.stagecraft, work, layer, unbounded_hbm)
            fo, bio, bwo = layer_times(args.stagecraft, work, layer, unbounded_flops)
            fr, bir, _ = layer_times(args.stagecraft, work, layer, one_rate)
            accumulate = bwo  # the weight-gradient pass with unbounded FLOP/s: its gradient accumulation
            sim = {"fwd": f, "fb": f + bi + bw - accumulate, "matrix_fb": fm + bim + bwm,
                   "memory_fb": fo + bio + bwo - accumulate, "memory_fwd": fo,
                   "memory_fb_one_rate": fr + bir,  # its weight-gradient pass: the accumulation alone
                   "matrix_fwd": fm, "accumulate": accumulate}
            cls = layer["fb_classes"]
            meas = {"fwd": layer["fwd_s"], "fb": layer["fb_s"],
                    "matrix_fb": sum(v["s"] for k, v in cls.items() if k != "other"),
                    "memory_fb": cls.get("other", {"s": 0})["s"]}
            results.append((layer, sim, meas))
            print(f"{layer['name']}: forward + backward simulated {sim['fb'] * 1e3:.2f} ms, measured "
                  f"{meas['fb'] * 1e3:.2f} ms ({pct(sim['fb'] / meas['fb'] - 1)})", file=sys.stderr)
    errs = [s["fb"] / m["fb"] - 1 for _, s, m in results]
    mae = sum(abs(e) for e in errs) / len(errs)
    env, ceil = rec["env"], rec["ceilings"]
    lines = [
        "## The compute model against layers measured on an H200",
        "",
        "Generated by `scripts/validate_layers.py` (do not edit by hand) from the measurement in",
        "`configs/validation/h200-layers.json`: `scripts/measure_layers.py` ran the model code of the",
        "validation rows as PyTorch eager ops (written out from torchtitan, minGPT and Hugging Face's",
        "BERT layer), bf16, at the rows' shapes, one layer at a time on one "
        f"{env['gpu']} (torch {env['torch']}, CUDA {env['cuda']}, driver {env['nvidia_smi'].split(', ')[1]}, "
        f"{env['date']}); times are medians of 10 steps with CUDA events, Nsight Compute counted the DRAM",
        "bytes of every kernel of one forward + backward. The simulation is the bundled `h200-1` profile",
        "(datasheet and published-kernel values; two of its values come from this measurement: the",
        "memory_kernels rates, the strided path's, dropout's and the softmax's, are the kernel-kind rates",
        "below, and the attention kernels' sustained share 0.79 is the SM clock the sustained run held",
        "over the boost clock, so neither the memory-bound column nor the attention time is a blind",
        "check), one block as the",
        "difference of two blocks and one, eager kernels, no recompute, the gradient accumulation the",
        "measured step does not run left out (the script says how). Error = simulated time / measured - 1:",
        "negative, the simulation is too fast.",
        "",
        f"Ceilings measured in the same run: a device-to-device copy moved {ceil['copy_Bps'] / 1e12:.2f} TB/s "
        f"({ceil['copy_Bps'] / gpu['hbm_Bps']:.2f} of the {gpu['hbm_Bps'] / 1e12:.1f} TB/s datasheet rate; the profile's "
        f"memory_efficiency is {gpu['memory_efficiency']}), an 8192^3 bf16 GEMM ran at "
        f"{ceil['gemm8192_flops_per_s'] / 1e12:.0f} TFLOP/s ({ceil['gemm8192_flops_per_s'] / gpu['peak_flops']['bf16']:.2f} of the dense peak).",
        "",
        "| layer | code | rows | tokens | forward measured (ms) | simulated | error | fwd + bwd measured (ms) | simulated | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for layer, s, m in results:
        lines.append(f"| {layer['name']} | {CODE[layer['kind']]} | {ROWS.get(layer['name'], '')} | "
                     f"{layer['micro_batch'] * layer['seq']} | {m['fwd'] * 1e3:.2f} | {s['fwd'] * 1e3:.2f} | "
                     f"{pct(s['fwd'] / m['fwd'] - 1)} | {m['fb'] * 1e3:.2f} | {s['fb'] * 1e3:.2f} | {pct(s['fb'] / m['fb'] - 1)} |")
    lines += ["", f"Mean absolute error of forward + backward: **{100 * mae:.1f}%** over {len(results)} layers.", "",
              "Split by the kind of work (forward + backward; measured: the profiled step's GEMM and attention",
              "kernels against all others; simulated: the same layer with unbounded HBM rate, and with unbounded",
              "FLOP/s). DRAM bytes: Nsight Compute's count over the memory-bound kernels of one forward +",
              "backward, against the simulator's bytes (its memory-bound time, every kind at memory_efficiency,",
              "times that rate).", "",
              "| layer | matrix measured (ms) | simulated | error | memory-bound measured (ms) | simulated | error | "
              "DRAM bytes counted (GB) | simulated bytes (GB) |",
              "|---|---|---|---|---|---|---|---|---|"]
    rate = gpu["hbm_Bps"] * gpu["memory_efficiency"]
    for layer, s, m in results:
        ncu = rec.get("ncu", {}).get(layer["name"])
        counted = "" if not ncu else f"{sum(k['read_bytes'] + k['write_bytes'] for k in ncu if k['kind'] not in ('gemm', 'attention')) / 1e9:.1f}"
        lines.append(f"| {layer['name']} | {m['matrix_fb'] * 1e3:.2f} | {s['matrix_fb'] * 1e3:.2f} | "
                     f"{pct(s['matrix_fb'] / m['matrix_fb'] - 1)} | {m['memory_fb'] * 1e3:.2f} | {s['memory_fb'] * 1e3:.2f} | "
                     f"{pct(s['memory_fb'] / m['memory_fb'] - 1)} | {counted} | {s['memory_fb_one_rate'] * rate / 1e9:.1f} |")
    # achieved bandwidth by kernel kind, over every ncu'd layer
    kinds = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for kernels in rec.get("ncu", {}).values():
        for k in kernels:
            if k["kind"] in ("gemm", "attention"):
                continue
            a = kinds[k["kind"]]
            a[0] += 1
            a[1] += k["read_bytes"] + k["write_bytes"]
            a[2] += k["s"]
    if kinds:
        lines += ["", "What PyTorch's memory-bound kernels reach, over every kernel Nsight Compute counted "
                  f"({', '.join(rec['ncu'])}): DRAM bytes read and written over kernel time, as a fraction of the "
                  f"{gpu['hbm_Bps'] / 1e12:.1f} TB/s datasheet rate.", "",
                  "| kernel kind | kernels | GB | ms | fraction of the HBM rate |", "|---|---|---|---|---|"]
        for kind, (n, b, t) in sorted(kinds.items(), key=lambda kv: -kv[1][2]):
            lines.append(f"| {kind} | {n} | {b / 1e9:.2f} | {t * 1e3:.2f} | {b / t / gpu['hbm_Bps']:.2f} |")
        total_b = sum(a[1] for a in kinds.values())
        total_t = sum(a[2] for a in kinds.values())
        lines += ["", f"All of them together: {total_b / total_t / gpu['hbm_Bps']:.2f} of the rate, against the profile's "
                  f"{gpu['memory_efficiency']}."]
    xent = rec.get("ncu", {}).get("xent-50257-t8192")
    xl = next((x for x in rec["layers"] if x["name"] == "xent-50257-t8192"), None)
    if xent and xl:
        logits = xl["micro_batch"] * xl["seq"] * xl["config"]["vocab"]
        b = sum(k["read_bytes"] + k["write_bytes"] for k in xent)
        lines += ["", f"The loss: `F.cross_entropy(logits.float())` over {xl['micro_batch'] * xl['seq']} tokens x "
                  f"{xl['config']['vocab']} logits moved {b / logits:.1f} bytes per logit forward + backward "
                  f"(DRAM, counted) in {xl['fb_s'] * 1e3:.2f} ms; sim/models/work.cpp's loss_bytes charges PyTorch's "
                  "eager loss 22 + 26 = 48."]
    su = rec.get("sustain")
    if su:
        lines += ["", f"Sustained load: {su['layer']}'s forward + backward back to back for {su['seconds']:.0f} s "
                  f"({su['steps']} steps) held the board at {su['power_w_median']:.0f} W of its 700 W limit with the SM clock "
                  f"at {su['clock_sm_mhz'][0]:.0f}-{su['clock_sm_mhz'][1]:.0f} MHz (1980 MHz boost); the step took "
                  f"{su['first_tenth_median_s'] * 1e3:.2f} ms in the first tenth and {su['last_tenth_median_s'] * 1e3:.2f} ms "
                  "in the last: the 10-step times above are already the power-limited ones."]
    lines += ["", "What this says of the compute model, on this GPU and this code (the same PyTorch kernels run",
              "the A100 rows; their rates there are not measured):", "",
              "* Memory-bound kernels do not all run at one rate: contiguous elementwise kernels reach the",
              "  profile's 0.85 of the HBM rate, but transposing copies (`.contiguous()` of a permuted q, k, v or",
              "  context), operands broadcast across rows (RMSNorm's `x * rsqrt(...)` and `* weight`, masked_fill's",
              "  causal mask, BERT's additive mask), the row softmax's forward at 2048 columns and dropout's forward",
              "  run at 0.1-0.6 of it. The simulator times those kinds at the profile's memory_kernels rates",
              "  (sim/models/work.hpp; h200-1 takes them from the kinds table above, other GPUs scale them by SMs x",
              "  clock). With one rate for every kind the memory-bound column was 15-45% too fast on every layer.",
              "  dtype casts (0.39-0.42) are still counted contiguous; their DRAM bytes are within the",
              "  simulator's count give or take 20%.",
              "* The unfused layers' score GEMMs run as one batched kernel over all heads (`q @ k.transpose`,",
              "  `torch.matmul` on 4-d tensors: cuBLAS strided-batched GEMMs); at d = 128 each writes or reads",
              "  the s x s score matrix at d FLOPs per byte, below the GPU's ridge point, so their time is that",
              "  matrix's bytes at the HBM rate. The simulator looks their efficiency up at one head's FLOPs",
              "  (2 s^2 d) instead, which puts them 2x (s = 2048) to 7x (s = 512) too slow: that is most of the",
              "  unfused layers' positive matrix error (not changed: Stagecraft's CPU executor loops over heads,",
              "  and the timing of a batched kernel needs its own rule).",
              ""]
    write_section(args.out, "layers", lines)
    print(f"mean absolute error {100 * mae:.1f}% -> {args.out}", file=sys.stderr)
    exit_on_limits(mae, None, 0, args.max_mae, None)


if __name__ == "__main__":
    main()
