#!/usr/bin/env python3
"""FlashAttention-era runs: Stagecraft's prediction against published throughput.

Rows come from llm-foundry's MPT training benchmarks (mosaicml/llm-foundry,
scripts/train/benchmarking/README.md): MPT models trained with Composer's FSDP (FULL_SHARD),
bf16, on one node of 8 GPUs, with FlashAttention (the benchmarks' attn_impl), the published
throughput in tokens per second per GPU. Each row is simulated with the bundled cluster profile
(dgx-a100-80g-hdr or dgx-h100-ndr at one node; datasheet values, nothing fitted), the profile's
default attention kernel (FlashAttention-2), ZeRO stage 3 as FSDP runs it, the row's micro-batch,
gradient accumulation and activation checkpointing. The model shapes are llm-foundry's MPT yamls;
the README's NumParams column equals the count of each shape with biases, LayerNorm biases and a
learned position table of seq_len rows (e.g. MPT-7B at 2048: 6,658,859,008), which the script checks.

Usage: validate_flash.py --stagecraft build/cli/stagecraft [--out docs/validation.md] [--max-mae F] [--max-row F]
"""
import json
import os
import subprocess
import sys
import tempfile

from validation_report import exit_on_limits, record_entry, script_args, spread, update_record, write_section


# MPT shapes (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml): d_model, n_layers, n_heads;
# vocab 50368, expansion_ratio 4.
MPT = {"1b": (2048, 24, 16), "3b": (2560, 32, 20), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 48, 64)}

# (id, model, seq_len, GPU table, micro-batch, grad accum, activation checkpointing, published T/s/GPU,
#  README NumParams). The README marks its tables as measured before torch 2.0 ("TODO: Update tables
# with torch 2.0 after next Composer release"), so before FlashAttention-2 (July 2023) too: the A100
# rows ran the first FlashAttention's kernels (the yamls' attn_impl "triton", flash-attn 1.x's Triton
# port), the A100 profile's "fa1". The H100 table has no such date: it is simulated with the
# profile's default, FlashAttention-2.
ROWS = [
    ("M1", "7b", 2048, "a100", 6, 2, False, 4641, 6658859008),
    ("M2", "7b", 8192, "a100", 8, 2, True, 3206, 6684024832),
    ("M3", "7b", 32768, "a100", 2, 2, True, 1672, 6784688128),
    ("M4", "13b", 16384, "a100", 3, 3, True, 1431, 12927354880),
    ("M5", "3b", 8192, "a100", 3, 6, False, 7695, 2667566080),
    ("M6", "7b", 2048, "h100", 6, 1, False, 10643, 6658859008),
    ("M7", "7b", 8192, "h100", 8, 2, True, 6935, 6684024832),
    ("M8", "13b", 16384, "h100", 3, 3, True, 2985, 12927354880),
    ("M9", "30b", 4096, "h100", 1, 21, True, 1802, 29989894144),
]

CLUSTERS = {"a100": "dgx-a100-80g-hdr", "h100": "dgx-h100-ndr"}
KERNELS = {"a100": "fa1", "h100": "flash"}
GPU_NAMES = {"a100": "A100 80GB", "h100": "H100 80GB"}


def mpt(size, seq):
    d, layers, heads = MPT[size]
    return {"name": f"mpt-{size}-{seq}", "layers": layers, "hidden": d, "heads": heads, "vocab": 50368,
            "seq_len": seq, "ffn_hidden": 4 * d, "bias": True, "tied_embeddings": True, "position": "learned",
            "source": "llm-foundry MPT yaml (d_model, n_layers, n_heads; learned positions, biases)"}


def count(exe, path):
    out = subprocess.run([exe, "info", "--model", path, "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["parameters"]


def simulate(exe, work, row):
    rid, size, seq, gpu, mb, ga, ac, _, params = row
    docs = {
        "model": mpt(size, seq),
        "training": {"global_batch": 8 * mb * ga, "dtype": "bf16", "framework": {"name": "fsdp", "reduce_dtype": "fp32"},
                     "attention": KERNELS[gpu]},
        "plan": {"dp": 8, "micro_batch": mb, "micro_batches": ga, "recompute": "full" if ac else "none",
                 "zero": {"stage": 3, "overlap_comm": True, "max_live_parameters": 10**12}},
    }
    paths = {}
    for name, doc in docs.items():
        paths[name] = os.path.join(work, f"{rid}-{name}.json")
        with open(paths[name], "w") as f:
            json.dump(doc, f)
    got = count(exe, paths["model"])
    if got != params:
        raise RuntimeError(f"{rid}: the MPT-{size} shape counts {got:,} parameters, the README {params:,}")
    out = subprocess.run([exe, "simulate", "--model", paths["model"], "--cluster", CLUSTERS[gpu], "--nodes", "1",
                          "--training", paths["training"], "--plan", paths["plan"], "--json"],
                         capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"{rid}: stagecraft simulate failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def main():
    args = script_args(__doc__)
    results = []
    with tempfile.TemporaryDirectory() as work:
        for row in ROWS:
            r = simulate(args.stagecraft, work, row)
            value = r["tokens_per_s"] / 8
            err = value / row[7] - 1
            results.append((row, r, value, err))
            print(f"{row[0]}: MPT-{row[1]} s={row[2]} {GPU_NAMES[row[3]]}: published {row[7]} tok/s/GPU, "
                  f"predicted {value:.0f}, error {100 * err:+.1f}% [fits {r['fits']}]", file=sys.stderr)
    mae = sum(abs(x[-1]) for x in results) / len(results)
    worst = max(results, key=lambda x: abs(x[-1]))
    lines = [
        "## FlashAttention-era runs: llm-foundry's MPT benchmarks",
        "",
        "Generated by `scripts/validate_flash.py` (do not edit by hand). Each row is a published",
        "MPT run of mosaicml/llm-foundry (`scripts/train/benchmarking/README.md`): Composer FSDP",
        "FULL_SHARD, bf16 with fp32 gradient reduction, one node of 8 GPUs, FlashAttention. Simulated",
        "with the bundled `dgx-a100-80g-hdr` / `dgx-h100-ndr` profiles at one node (datasheet and",
        "published-kernel values only, nothing fitted to these rows), ZeRO-3, and the row's",
        "micro-batch, accumulation and activation checkpointing (full recompute). The README's tables",
        "predate torch 2.0 and FlashAttention-2, so the A100 rows run the profile's first-FlashAttention",
        "kernel (`\"attention\": \"fa1\"`, 25-40% of peak); the H100 rows its FlashAttention-2 default.",
        "Each MPT shape's parameter count equals the README's NumParams column exactly (checked).",
        "",
        "| row | model | seq | GPUs | mb x GA | checkpointing | published tok/s/GPU | predicted (1σ of the profile) | error | step (s) | exposed comm (s) | fits |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, r, value, err in results:
        rid, size, seq, gpu, mb, ga, ac, published, _ = row
        lines.append(f"| {rid} | MPT-{size} | {seq} | 8 x {GPU_NAMES[gpu]} | {mb} x {ga} | {'yes' if ac else 'no'} | "
                     f"{published} | {value:.0f} ({spread(r, value, 0)}) | {100 * err:+.1f}% | {r['step_time_s']:.2f} | "
                     f"{r['time']['exposed_comm_s']:.2f} | {'yes' if r['fits'] else 'no'} |")
    lines += ["", f"Mean absolute error: **{100 * mae:.1f}%** over {len(results)} rows; largest {worst[0][0]} at "
              f"{100 * worst[-1]:+.1f}% (acceptance: every row within 15%; goal 5%).", "",
              "Every row is predicted faster than it ran. What the profiles do not carry: Composer's eager",
              "PyTorch stack runs each norm, activation and residual as its own kernel and pays FSDP's hooks",
              "and per-kernel launch costs, none of which the fused-kernel byte model charges; the rows at",
              "2048 tokens, where attention is a small share of the work, measure that part. The rest grows",
              "with the sequence length, the share of attention: the kernels' efficiencies (read from papers",
              "at head width 128, one software version each) are the next suspects. Nothing here is fitted.", ""]
    write_section(args.out, "flash", lines)
    update_record(args.record, "flash", [
        record_entry("flash", row[0], f"llm-foundry MPT-{row[1]} s={row[2]}", "fsdp", GPU_NAMES[row[3]], 8, r, err)
        for row, r, _, err in results], args.check_record)
    print(f"mean absolute error {100 * mae:.1f}%, worst {worst[0][0]} {100 * worst[-1]:+.1f}% -> {args.out}", file=sys.stderr)
    exit_on_limits(mae, worst[0][0], worst[-1], args.max_mae, args.max_row)


if __name__ == "__main__":
    main()
