#!/usr/bin/env python3
"""Simulator validation against public ZeRO-3 / FSDP measurements, written to docs/validation.md.

Every row is a published run with its whole configuration: model shape, GPU count, micro-batch,
gradient accumulation, recompute, framework (DeepSpeed of its year, or FSDP with its reduce dtype)
and the cluster it ran on. Clusters are the bundled dgx-a100-80g-hdr profile changed by datasheet
values only (memory, HBM rate, NIC count and line rate, NCCL version of the PyTorch release the
run used): every change is listed below with its source, and nothing is tuned to any row. Plans
are pure data parallelism (tp = pp = 1) with ZeRO stage 3.

The report keeps its own section of docs/validation.md (scripts/validation_report.py); the Table 1
section written by scripts/validate_table1.py is left as it is.

Usage: scripts/validate_zero3.py [--stagecraft build/cli/stagecraft] [--out docs/validation.md]
                                 [--max-mae 0.10] [--max-row 0.25]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

from validation_report import add_limit_args, add_record_args, error_range, exit_on_limits, record_entry, recorded_errors, \
    spread, update_record, \
    write_section

HERE = os.path.dirname(os.path.abspath(__file__))
BASE_CLUSTER = os.path.join(HERE, "..", "configs", "clusters", "dgx-a100-80g-hdr.json")

# NIC rates: NCCL reaches 0.94 of the line rate on the bundled profile (23.5 of 25 GB/s); the same
# ratio for every InfiniBand and RoCE NIC below.
NIC_EFFICIENCY = 23.5e9 / 25e9
# AWS EFA is not InfiniBand: NCCL reaches it through the aws-ofi-nccl plugin over libfabric (SRD).
# nccl-tests all_reduce_perf at 1 GiB on p4d.24xlarge (4 x 100 Gb/s EFA, NCCL 2.9.9, aws-ofi-nccl
# 1.4.0; NVIDIA/nccl issue #527, 2022-07) measured 31.8 GB/s bus bandwidth on 3 nodes and 29.6 on 4:
# the node's network rate, 29.6 of its 50 GB/s line rate (2 nodes, 57 GB/s, is NCCL's tree, whose
# bus bandwidth exceeds the line rate there, and is not used). The runs on EFA below used older NCCL
# and plugin versions on more nodes; the 4-node figure is taken, with +-10% as 1 sigma (the 3- and
# 4-node figures differ by 7%).
EFA_EFFICIENCY = 29.6e9 / 50e9

# -------------------------------------------------------------------------------------------------
# Clusters: (name, changes to the bundled DGX A100 80GB HDR profile, why)


def same_sms_memory_kernels(gpu, base_hbm):
    """The base profile's memory_kernels on the same SMs at another HBM rate: they are absolute rates
    (bound by bytes in flight per SM and by issue, not by HBM) written as fractions of the base's
    hbm_Bps, so each becomes fraction x base / new, at most memory_efficiency (no kind outruns a
    contiguous pass)."""
    mk, scale, cap = gpu["memory_kernels"], base_hbm / gpu["hbm_Bps"], gpu["memory_efficiency"]
    out = {k: min(cap, mk[k] * scale) for k in ("strided", "dropout") if k in mk}
    if "softmax" in mk:
        out["softmax"] = [[s, min(cap, f * scale)] for s, f in mk["softmax"]]
    out["source"] = (f"the bundled profile's rates at the same SMs over {gpu['hbm_Bps'] / 1e12:.3f} TB/s "
                     f"(x {scale:.3f}, at most memory_efficiency; scripts/validate_zero3.py)")
    return out


def cluster(name, *, gpu=None, nodes_gpus=None, nics=None, nic_gbps=None, efa=False, nvlink_Bps=None, nccl=None,
            note=""):
    with open(BASE_CLUSTER) as f:
        c = json.load(f)
    c["name"] = name
    c["source"] = note + " Derived from the bundled dgx-a100-80g-hdr profile by scripts/validate_zero3.py; " \
        "only the values named here differ."
    if gpu:
        base_hbm = c["gpu"]["hbm_Bps"]
        c["gpu"].update(gpu)
        if "memory_kernels" not in gpu and c["gpu"]["hbm_Bps"] != base_hbm:
            c["gpu"]["memory_kernels"] = same_sms_memory_kernels(c["gpu"], base_hbm)
    if nodes_gpus:
        c["gpus_per_node"] = nodes_gpus
    if nics is not None:
        c["inter_node"]["nics_per_node"] = nics
    if nic_gbps is not None:
        c["inter_node"]["nic_bandwidth_Bps"] = (EFA_EFFICIENCY if efa else NIC_EFFICIENCY) * nic_gbps * 1e9 / 8
    if efa:
        c["inter_node"]["source"] = "AWS EFA: " + str(nic_gbps) + " Gb/s per NIC at the 0.59 of line rate NCCL " \
            "measured over EFA (scripts/validate_zero3.py EFA_EFFICIENCY, NVIDIA/nccl issue #527)."
        c["uncertainty"]["inter_node.nic_bandwidth_Bps"] = {
            "relative": 0.1, "source": "one published nccl-tests run on 3 and 4 p4d nodes (31.8 and 29.6 GB/s), "
            "other NCCL and plugin versions than the runs': +-10% as 1 sigma"}
    if nvlink_Bps is not None:
        c["intra_node"]["bandwidth_Bps"] = nvlink_Bps
    if nccl:
        c["nccl"].update(nccl)
    if gpu and gpu["name"].startswith("V100"):
        c["uncertainty"]["gpu.matmul_efficiency"] = {
            "relative": 0.08, "source": "the A100's GEMM-efficiency curve reused for V100: one benchmark measured both at "
            "0.74-0.76 of peak (mli/transformers-benchmarks), an older cuBLAS reached 0.66 on V100 (Markidis et al. 2018): "
            "+-8% as 1 sigma"}
    return c


A100_40GB = {"name": "A100-SXM4-40GB", "memory_bytes": 40 * 2**30, "hbm_Bps": 1555e9}
# V100-SXM3-32GB (DGX-2): V100 datasheet, 125 TFLOP/s fp16 tensor, 900 GB/s HBM2, 32 GB, 80 SMs. No bf16.
# The A100's GEMM-efficiency curve is kept as a fraction of peak: the same benchmark, PyTorch's fp16
# `a @ b` at n up to 8192 (mli/transformers-benchmarks README, micro_bench.ipynb, 2022), reached 95 of
# 125 TFLOP/s on V100 and 230 of 312 on A100, 0.76 and 0.74; cuBLAS of 2018 (CUDA 9) reached 83 on
# V100, 0.66 (Markidis et al., IPDPSW 2018). No per-size V100 curve is at hand.
# Memory kernels: the H200's rates scaled by SMs x clock (80/132 x 1530/1680 .. 80/132) give
# 0.79-0.87 TB/s for the strided path, at or above the 0.85 x 900 GB/s contiguous rate: none slower.
V100_32GB = {"name": "V100-SXM3-32GB", "memory_bytes": 32 * 2**30, "hbm_Bps": 900e9, "sm_count": 80,
             "peak_flops": {"fp16": 125e12, "fp32": 15.7e12},
             "memory_kernels": {"source": "none slower than memory_efficiency: the H200's rates scaled by SMs x "
                                          "clock reach the V100's contiguous rate (scripts/validate_zero3.py)"}}

CLUSTERS = {
    # MosaicML's benchmark tables: "A100 80GB with 1600 Gbps node-node interconnect (RoCE)" — 8 x 200 Gb/s.
    # PyTorch 1.13/2.0 (llm-foundry 2023) ship NCCL 2.14.
    "a100-80g-roce-1600": cluster("a100-80g-roce-1600", nics=8, nic_gbps=200, nccl={"version": "2.14"},
                                  note="A100 80GB, 8 x 200 Gb/s RoCE per node (llm-foundry benchmarking README)."),
    "a100-40g-roce-1600": cluster("a100-40g-roce-1600", gpu=A100_40GB, nics=8, nic_gbps=200, nccl={"version": "2.14"},
                                  note="A100 40GB (datasheet: 40 GB HBM2, 1,555 GB/s), 8 x 200 Gb/s RoCE per node."),
    # fms-fsdp README: "A100 80G 128 GPUs with 400Gbps" per node: 4 x 100 Gb/s. PyTorch 2.2+: NCCL 2.19.
    "a100-80g-400g": cluster("a100-80g-400g", nics=4, nic_gbps=100, nccl={"version": "2.19", "channels": 8},
                             note="A100 80GB, 4 x 100 Gb/s per node (fms-fsdp README, 400 Gbps)."),
    # torchtitan docs/performance.md does not state the A100 interconnect: the DGX A100 standard
    # (8 x 200 Gb/s HDR, the bundled profile). PyTorch 2.4+: NCCL 2.20.
    "a100-80g-hdr-2.20": cluster("a100-80g-hdr-2.20", nccl={"version": "2.20"},
                                 note="DGX A100 80GB on 8 x 200 Gb/s HDR (assumed: torchtitan does not say)."),
    # AWS p4d.24xlarge: 8 x A100 40GB, 4 x 100 Gb/s EFA (AWS instance page, 400 Gbps) at EFA's measured
    # NCCL rate (EFA_EFFICIENCY). PyTorch 1.10 (2021-10, PR #1453's runs) ships NCCL 2.10.
    "p4d": cluster("p4d", gpu=A100_40GB, nics=4, nic_gbps=100, efa=True,
                   nccl={"version": "2.10", "channels": 8, "host_cpu": "intel"},
                   note="AWS p4d.24xlarge: 8 x A100 40GB, 4 x 100 Gb/s EFA at NCCL's measured 0.59 of line rate, "
                        "2x Xeon 8275CL."),
    # PyTorch FSDP paper: "2 Tb/s RoCE" per node, read as 8 x 250 Gb/s. PyTorch 1.13/2.0: NCCL 2.14.
    "a100-80g-roce-2000": cluster("a100-80g-roce-2000", nics=8, nic_gbps=250, nccl={"version": "2.14"},
                                  note="A100 80GB, 2 Tb/s RoCE per node (Zhao et al. VLDB'23), as 8 x 250 Gb/s."),
    # DGX-2: 16 x V100-SXM3-32GB on NVSwitch (6 NVLink 2 x 25 GB/s = 150 GB/s per GPU per direction;
    # NCCL's achieved share taken as the bundled profile's 230/300), 8 x 100 Gb/s EDR IB of which
    # the ZeRO++ runs used 4 (IB:4) or 1 (IB:1). PyTorch 1.13/2.0 (2023): NCCL 2.14.
    "dgx2-ib4": cluster("dgx2-ib4", gpu=V100_32GB, nodes_gpus=16, nics=4, nic_gbps=100, nvlink_Bps=150e9 * 230 / 300,
                        nccl={"version": "2.14", "channels": 8, "host_cpu": "intel", "gpu_arch": "volta"},
                        note="DGX-2: 16 x V100 32GB, NVSwitch, 4 x 100 Gb/s IB in use (ZeRO++ blog, IB:4)."),
    "dgx2-ib1": cluster("dgx2-ib1", gpu=V100_32GB, nodes_gpus=16, nics=1, nic_gbps=100, nvlink_Bps=150e9 * 230 / 300,
                        nccl={"version": "2.14", "channels": 2, "host_cpu": "intel", "gpu_arch": "volta"},
                        note="DGX-2: 16 x V100 32GB, NVSwitch, 1 x 100 Gb/s IB in use (ZeRO++ blog, IB:1)."),
}

# -------------------------------------------------------------------------------------------------
# Models


def gpt(name, layers, hidden, heads, vocab, seq, source, **extra):
    m = {"name": name, "layers": layers, "hidden": hidden, "heads": heads, "vocab": vocab, "seq_len": seq,
         "source": source}
    m.update(extra)
    return m


def mpt(name, layers, hidden, heads):
    """An MPT as llm-foundry's benchmarks build it: ffn 4h, V 50368, s 2048, biases, learned positions, tied."""
    return gpt(name, layers, hidden, heads, 50368, 2048, "llm-foundry " + name.upper() + " (yamls/pretrain, benchmarking README)",
               ffn_hidden=4 * hidden, bias=True, tied_embeddings=True, position="learned")


MODELS = {
    # MPT-70B as llm-foundry benchmarks it (scripts/train/benchmarking): 80 x 8192, 64 heads, ffn 4h,
    # V 50368, s 2048, biases, a learned position table, tied: the README's NumParams, 64,862,437,376,
    # is this shape's count exactly.
    "mpt-70b": gpt("mpt-70b", 80, 8192, 64, 50368, 2048, "llm-foundry MPT-70B (benchmarking README)",
                   ffn_hidden=4 * 8192, bias=True, tied_embeddings=True, position="learned"),
    # The smaller MPTs of the same tables (llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml: d_model, n_heads,
    # n_layers; head dim 128): each README NumParams is this shape's count exactly, as for the 70B.
    "mpt-30b": mpt("mpt-30b", 48, 7168, 64),
    "mpt-13b": mpt("mpt-13b", 40, 5120, 40),
    "mpt-7b": mpt("mpt-7b", 32, 4096, 32),
    "mpt-3b": mpt("mpt-3b", 32, 2560, 20),
    "mpt-1b": mpt("mpt-1b", 24, 2048, 16),
    "llama2-70b": os.path.join(HERE, "..", "configs", "models", "llama2-70b.json"),
    "llama2-13b": os.path.join(HERE, "..", "configs", "models", "llama2-13b.json"),
    "llama3-70b-8k": None,  # bundled llama3-70b at s = 8192 (torchtitan's run), filled in below
    # ZeRO++ tutorial: 18B GPT, 40 layers x 6144, 32 heads, s 512 (Megatron-DeepSpeed GPT, V 50257 padded to 51200).
    "gpt-18b": gpt("gpt-18b", 40, 6144, 32, 51200, 512, "DeepSpeed ZeRO++ tutorial (docs/_tutorials/zeropp.md)"),
    # DeepSpeed PR #1453: HF RoBERTa "52B", V ~ 53k, s 512: 64 x 8192 (64 heads) inferred from 52B.
    "roberta-52b": gpt("roberta-52b", 64, 8192, 64, 53000, 512, "DeepSpeed PR #1453 (shape inferred from 52B)"),
    # PyTorch FSDP paper: minGPT-175B = GPT-3 175B (96 x 12288, 96 heads); s = 2048 assumed.
    "gpt-175b": gpt("gpt-175b", 96, 12288, 96, 50257, 2048, "Zhao et al. VLDB'23 minGPT-175B (GPT-3 shape)"),
}

# -------------------------------------------------------------------------------------------------
# Rows: id, source, model, cluster, GPUs, micro-batch, micro-batches (GA), framework, dtype,
# reduce_dtype (None: the training dtype), zero overrides, metric, published value
# The model code's kernels (training "kernels"): eager where the run used PyTorch ops one by one
# (minGPT's attention, Hugging Face's RoBERTa: "not using any custom fused kernels" in PR #1453;
# the Llama code of rows B and C, uncompiled: torchtitan 04133643 train_configs/llama2_70b.toml and
# llama3_70b.toml set compile = false and norm_type = "rmsnorm", whose RMSNorm (models/norms.py),
# apply_rotary_emb and repeat_kv (models/llama/model.py) are PyTorch ops; fms-fsdp 0d319983
# use_torch_compile = False (fms_fsdp/config/training.py l.40), ibm-fms's LLaMA the same kinds of ops);
# fused otherwise (Megatron-DeepSpeed's fused kernels; llm-foundry's MPT, rows A, runs one
# F.layer_norm and one GELU kernel, ALiBi inside the attention kernel and no dropout: nothing the
# fused count lacks).
EAGER = {"B1", "C1", "C2", "C3", "E0", "E1", "E2", "F1", "F2"}
# Activation checkpointing as the row ran it; full recompute unless named here. torchtitan's
# Llama 2 table has 13B without checkpointing (C3); its "selective op" and "selective layer" modes
# (save the matmul outputs, or checkpoint every other layer) have no Stagecraft equivalent, so
# those rows are left out.
RECOMPUTE = {"C3": "none"}
# Rows beyond ZERO3.md section 4 (the acceptance set): reported, and counted apart.
EXTRA = {"C3"}
# Attention (training "attention"): the 2024 FSDP stacks of rows B and C run FlashAttention-2
# (fms-fsdp and torchtitan through PyTorch's SDPA), the profile's default kernel; the 2021-2022
# runs of rows D-F computed attention unfused.
UNFUSED = {"D1", "D3", "D4", "E0", "E1", "E2", "F1", "F2"}
# llm-foundry's tables (rows A) predate torch 2.0 and FlashAttention-2 ("TODO: Update tables with
# torch 2.0" in its benchmarking README): the first FlashAttention's kernels, the A100 profile's "fa1".
FA1 = {"A1", "A3", "A4"}


def framework_label(framework):
    """The framework column: its name, its reduce dtype and a shared communicator where set."""
    if isinstance(framework, str):
        return framework
    label = framework["name"]
    if "reduce_dtype" in framework:
        label += f", {framework['reduce_dtype']} reduce"
    if framework.get("reduce_communicator") == "shared":
        label += ", one communicator"
    return label


def fsdp(reduce, name="fsdp"):
    """FSDP (FSDP1's FlatParameter; "fsdp2": torchtitan's fully_shard) with its reduce_dtype."""
    return {"name": name, "reduce_dtype": reduce} if reduce else name


FSDP_ZERO = {"stage": 3, "overlap_comm": True, "max_live_parameters": 10**12}
DS_ZERO = {"stage": 3, "overlap_comm": True}
# Megatron-DeepSpeed (rows D) hands its data-parallel group to zero.Init and, through its mpu, to
# the engine (pretrain_gpt.py model_provider: deepspeed.zero.Init(data_parallel_group=
# mpu.get_data_parallel_group(), ..., mpu=mpu)): gathers and reductions share one NCCL
# communicator and take turns (core/spec/framework.hpp, Communicators). Hugging Face's code (rows E)
# passes neither: DeepSpeed's default, a communicator each.
MEGATRON_DS = {"name": "deepspeed", "reduce_communicator": "shared"}

ROWS = [
    ("A1", "llm-foundry, A100 80GB RoCE 1600", "mpt-70b", "a100-80g-roce-1600", 64, 8, 4, fsdp("bf16"), "bf16",
     FSDP_ZERO, "tok/s/GPU", 410),
    ("A3", "llm-foundry, A100 40GB RoCE 1600", "mpt-70b", "a100-40g-roce-1600", 128, 4, 1, fsdp("bf16"), "bf16",
     FSDP_ZERO, "tok/s/GPU", 376),
    ("A4", "llm-foundry, A100 40GB RoCE 1600", "mpt-70b", "a100-40g-roce-1600", 64, 2, 1, fsdp("bf16"), "bf16",
     FSDP_ZERO, "tok/s/GPU", 276),
    ("B1", "fms-fsdp README", "llama2-70b", "a100-80g-400g", 128, 6, 1, fsdp("bf16"), "bf16",
     FSDP_ZERO, "tok/s/GPU", 380),
    ("C1", "torchtitan performance.md", "llama3-70b-8k", "a100-80g-hdr-2.20", 64, 1, 1, fsdp("fp32", "fsdp2"), "bf16",
     FSDP_ZERO, "tok/s/GPU", 331),
    ("C2", "torchtitan performance.md", "llama2-70b", "a100-80g-hdr-2.20", 64, 2, 1, fsdp("fp32", "fsdp2"), "bf16",
     FSDP_ZERO, "tok/s/GPU", 353),
    ("C3", "torchtitan performance.md", "llama2-13b", "a100-80g-hdr-2.20", 64, 2, 1, fsdp("fp32", "fsdp2"), "bf16",
     FSDP_ZERO, "tok/s/GPU", 2162),
    ("D1", "ZeRO++ blog, ZeRO-3 baseline IB:4 1K", "gpt-18b", "dgx2-ib4", 384, 2, 1, MEGATRON_DS, "fp16",
     dict(DS_ZERO, reduce_bucket=10**7), "hw TFLOP/s", 25),
    ("D3", "ZeRO++ blog, ZeRO-3 baseline IB:1 1K", "gpt-18b", "dgx2-ib1", 384, 2, 1, MEGATRON_DS, "fp16",
     dict(DS_ZERO, reduce_bucket=10**7), "hw TFLOP/s", 14),
    ("D4", "ZeRO++ blog, ZeRO-3 baseline IB:1 2K", "gpt-18b", "dgx2-ib1", 384, 4, 1, MEGATRON_DS, "fp16",
     dict(DS_ZERO, reduce_bucket=10**7), "hw TFLOP/s", 26),
    ("E0", "DeepSpeed PR #1453, before", "roberta-52b", "p4d", 64, 16, 1, "deepspeed-0.5", "bf16",
     DS_ZERO, "model TFLOP/s", 67.61),
    ("E1", "DeepSpeed PR #1453, after", "roberta-52b", "p4d", 64, 16, 1, "deepspeed", "bf16",
     DS_ZERO, "model TFLOP/s", 116.06),
    ("E2", "DeepSpeed PR #1453, after, 32 p4d", "roberta-52b", "p4d", 256, 16, 1, "deepspeed", "bf16",
     DS_ZERO, "model TFLOP/s", 108),
    ("F1", "FSDP paper Fig. 7b (secondhand), B=1", "gpt-175b", "a100-80g-roce-2000", 512, 1, 1, fsdp(None), "bf16",
     FSDP_ZERO, "hw TFLOP/s", 173),
    ("F2", "FSDP paper Fig. 7b (secondhand), B=2", "gpt-175b", "a100-80g-roce-2000", 512, 2, 1, fsdp(None), "bf16",
     FSDP_ZERO, "hw TFLOP/s", 186),
]


# The rest of llm-foundry's A100 tables at 16-128 GPUs, the tables rows A1, A3 and A4 come from
# (scripts/train/benchmarking/README.md): the 80 GB table's other multi-node row (A2) and every
# multi-node row of the 40 GB table at s 2048 from 1B up, as published (micro-batch, GA 1, checkpointing
# on from 7B up and off below, as its column says). Checked beside the acceptance set, not in it
# (EXTRA): the same code, cluster and metric at other model sizes and GPU counts.
LF40 = [  # (model, GPUs, micro-batch, tok/s/GPU)
    ("mpt-30b", 128, 6, 865), ("mpt-30b", 32, 4, 857),
    ("mpt-13b", 128, 16, 1972), ("mpt-13b", 64, 16, 1976), ("mpt-13b", 32, 14, 1998), ("mpt-13b", 16, 10, 1993),
    ("mpt-7b", 128, 18, 3623), ("mpt-7b", 64, 18, 3665), ("mpt-7b", 32, 18, 3725), ("mpt-7b", 16, 16, 3645),
    ("mpt-3b", 128, 6, 9538), ("mpt-3b", 64, 6, 9736), ("mpt-3b", 32, 6, 9914), ("mpt-3b", 16, 5, 9750),
    ("mpt-1b", 128, 10, 18647), ("mpt-1b", 64, 10, 19001), ("mpt-1b", 32, 10, 15555), ("mpt-1b", 16, 8, 19085),
]
LLM_FOUNDRY = ["A2"] + [f"A{5 + i}" for i in range(len(LF40))]
ROWS.insert(1, ("A2", "llm-foundry, A100 80GB RoCE 1600", "mpt-70b", "a100-80g-roce-1600", 32, 2, 16, fsdp("bf16"), "bf16",
                FSDP_ZERO, "tok/s/GPU", 373))
for i, (model, gpus, mb, published) in enumerate(LF40):
    ROWS.insert(4 + i, (f"A{5 + i}", "llm-foundry, A100 40GB RoCE 1600", model, "a100-40g-roce-1600", gpus, mb, 1,
                        fsdp("bf16"), "bf16", FSDP_ZERO, "tok/s/GPU", published))
    if model in ("mpt-3b", "mpt-1b"):
        RECOMPUTE[f"A{5 + i}"] = "none"
FA1.update(LLM_FOUNDRY)
EXTRA.update(LLM_FOUNDRY + ["E2"])


def load_model(key):
    m = MODELS[key]
    if key == "llama3-70b-8k":
        with open(os.path.join(HERE, "..", "configs", "models", "llama3-70b.json")) as f:
            m = json.load(f)
        m["seq_len"] = 8192
        m["name"] = "llama3-70b-8k"
    elif isinstance(m, str):
        with open(m) as f:
            m = json.load(f)
    return m


def simulate(exe, workdir, row, kernels=None):
    rid, _, model_key, cluster_key, gpus, mb, ga, framework, dtype, zero, _, _ = row
    c = CLUSTERS[cluster_key]
    nodes = gpus // c["gpus_per_node"]
    docs = {
        "model": load_model(model_key),
        "cluster": dict(c, nodes=nodes),
        "training": {"global_batch": gpus * mb * ga, "dtype": dtype, "framework": framework,
                     "kernels": kernels or ("eager" if rid in EAGER else "fused"),
                     "attention": "unfused" if rid in UNFUSED else "fa1" if rid in FA1 else "flash"},
        "plan": {"dp": gpus, "micro_batch": mb, "micro_batches": ga, "recompute": RECOMPUTE.get(rid, "full"),
                 "zero": zero},
    }
    paths = {}
    for name, doc in docs.items():
        paths[name] = os.path.join(workdir, f"{rid}-{name}.json")
        with open(paths[name], "w") as f:
            json.dump(doc, f)
    out = subprocess.run([exe, "simulate", "--model", paths["model"], "--cluster", paths["cluster"], "--training",
                          paths["training"], "--plan", paths["plan"], "--json"], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"{rid}: stagecraft simulate failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


# A bandwidth scan of one configuration (ZERO3.md section 4, row D5): the 18B GPT at 2K tokens per
# GPU (D4's micro-batch 4), ZeRO-3 baseline on 384 V100, at 1, 2 and 8 x 100 Gb/s IB per node:
# 26 hw TFLOP/s (eval2.png, IB:1 = D4) and 37 and 47 (eval3.png, 200 and 800 Gb/s; bars read off the
# charts). Published and simulated step times are each fitted as T = K + V * (100 Gb/s / bandwidth):
# K the part more bandwidth does not remove, V the bandwidth-bound time at 100 Gb/s.
SCAN = [(1, 26), (2, 37), (8, 47)]  # (100 Gb/s links per node, published hw TFLOP/s)


def dgx2(links):
    return cluster(f"dgx2-ib{links}", gpu=V100_32GB, nodes_gpus=16, nics=links, nic_gbps=100, nvlink_Bps=150e9 * 230 / 300,
                   nccl={"version": "2.14", "channels": 2 * links, "host_cpu": "intel", "gpu_arch": "volta"},
                   note=f"DGX-2: 16 x V100 32GB, NVSwitch, {links} x 100 Gb/s IB in use (ZeRO++ blog).")


def fit_k_v(points):
    """Least squares of T = K + V * x over (x, T) points: (K, V, largest |residual|)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(t for _, t in points) / n
    v = sum((x - mx) * (t - my) for x, t in points) / sum((x - mx) ** 2 for x, _ in points)
    k = my - v * mx
    return k, v, max(abs(t - (k + v * x)) for x, t in points)


def bandwidth_scan(exe, work):
    """D4's run at each SCAN bandwidth: [(links, published step s, simulated step s, simulated compute s)]."""
    d4 = next(row for row in ROWS if row[0] == "D4")
    out = []
    for links, tflops in SCAN:
        key = f"dgx2-ib{links}"
        CLUSTERS.setdefault(key, dgx2(links))
        r = simulate(exe, work, d4[:3] + (key,) + d4[4:])
        flops = r["step_time_s"] * r["hardware_tflops_per_gpu"] * 1e12  # hardware FLOPs per GPU per step
        out.append((links, flops / (tflops * 1e12), r["step_time_s"], r["time"]["compute_s"]))
    return out


def metric(r, name, gpus):
    if name == "tok/s/GPU":
        return r["tokens_per_s"] / gpus
    if name == "hw TFLOP/s":
        return r["hardware_tflops_per_gpu"]
    return r["model_tflops_per_gpu"]




def peak_of(r, row):
    """The simulated peak against the GPU's memory, GiB (and 'does not fit' where it does not)."""
    capacity = CLUSTERS[row[3]]["gpu"]["memory_bytes"]
    text = f"{r['peak_memory_bytes'] / 2**30:.1f} / {capacity / 2**30:.0f}"
    return text if r["fits"] else text + ", does not fit"


def dominant(r):
    t = r["time"]
    exposed, compute = t["exposed_comm_s"], t["compute_s"]
    if exposed > 0.5 * compute:
        return "exposed data-parallel communication"
    if exposed > 0.1 * compute:
        return "compute, with exposed communication"
    return "compute (communication hidden)"


def llm_foundry_lines(results):
    """The A rows and the rest of llm-foundry's A100 tables (A2, A5-): a table by model and GPU count."""
    by_id = {x[0][0]: x for x in results}
    ids = ["A1", "A3", "A4"] + LLM_FOUNDRY
    counts = sorted({by_id[i][0][4] for i in ids})
    groups = {}  # (model, GiB) -> {gpus: (id, micro-batch, GA, err, simulated peak GiB)}
    for i in ids:
        row, r, _, err = by_id[i]
        gib = round(CLUSTERS[row[3]]["gpu"]["memory_bytes"] / 2**30)
        groups.setdefault((row[2], gib), {})[row[4]] = (i, row[5], row[6], err, r["peak_memory_bytes"] / 2**30)
    gib_of = {i: round(CLUSTERS[by_id[i][0][3]]["gpu"]["memory_bytes"] / 2**30) for i in ids}
    nodes = [n // CLUSTERS[by_id[ids[0]][0][3]]["gpus_per_node"] for n in (counts[0], counts[-1])]
    order = sorted(groups, key=lambda k: (-float(k[0].split("-")[1][:-1]), -k[1]))

    def checkpointing(key):  # a (model, GiB) group's rows all ran as the table says for that model
        return RECOMPUTE.get(next(iter(groups[key].values()))[0], "full") != "none"

    lines = ["| model | GPU memory | checkpointing | " + " | ".join(f"{n} GPUs" for n in counts) + " |",
             "|---|---|---|" + "---|" * len(counts)]
    for key in order:
        cells = []
        for n in counts:
            c = groups[key].get(n)
            cells.append(f"{c[0]}: {100 * c[3]:+.1f}% (mb {c[1]} x {c[2]}, {c[4]:.0f} GiB)" if c else "")
        lines.append(f"| {key[0]} | {key[1]} GB | {'yes' if checkpointing(key) else 'no'} | " + " | ".join(cells) + " |")
    checkpointed = [c for k, g in groups.items() for c in g.values() if checkpointing(k)]
    plain = [c for k, g in groups.items() for c in g.values() if not checkpointing(k)]
    spreads = {k: max(c[3] for c in g.values()) - min(c[3] for c in g.values()) for k, g in groups.items() if len(g) > 1}
    a4, a3, a2 = by_id["A4"], by_id["A3"], by_id["A2"]
    a4_sim, a2_sim = a4[0][-1] * (1 + a4[-1]), a2[0][-1] * (1 + a2[-1])  # simulated tok/s/GPU
    plain_steps = [by_id[c[0]][1]["step_time_s"] for c in plain]
    plain_gib = {gib_of[c[0]] for c in plain}
    others = sorted(c[3] for c in checkpointed if c[0] != "A4")
    median = others[len(others) // 2] if len(others) % 2 else 0.5 * (others[len(others) // 2 - 1] + others[len(others) // 2])
    one_b = groups[("mpt-1b", 40)]  # the same model at 16-128 GPUs: its lowest published row against the others
    odd = min(one_b.values(), key=lambda c: by_id[c[0]][0][-1])
    odd_pub = by_id[odd[0]][0][-1]
    rest_pub = [by_id[c[0]][0][-1] for c in one_b.values() if c is not odd]
    text = [
        "",
        "Rows A1, A3 and A4 are three of the multi-node rows of llm-foundry's A100 tables; the others (A2, A5-"
        f"A{4 + len(LF40)}: the 80 GB table's 70B on 32 GPUs, and every 40 GB row at s = 2048 from 1B up) run the same",
        "code on the same clusters, and are simulated the same way (MPT shapes from llm-foundry's yamls, each",
        "README parameter count matched exactly; checkpointing as published). Error by model and GPU count",
        "(micro-batch x GA as published, and the simulated peak):",
        "",
    ] + lines + [
        "",
        f"With checkpointing ({', '.join(dict.fromkeys(k[0] for k in order if any(c in checkpointed for c in groups[k].values())))}), "
        f"every row but A4 is predicted {error_range(others)} fast (median "
        f"{100 * median:+.1f}%), and within a model the error hardly moves with the GPU count: "
        + ", ".join(f"{k[0]} {k[1]} GB {100 * v:.1f} points over {len(groups[k])} counts" for k, v in spreads.items()
                    if k[0] != "mpt-70b" and checkpointing(k)) + ". "
        f"The data-parallel group grows {counts[-1] // counts[0]}x from {counts[0]} to {counts[-1]} GPUs ({nodes[0]} to "
        f"{nodes[1]} nodes, the rings' latency growing with it)",
        "while the per-GPU work stays, so what the simulation lacks for these runs is per GPU, not in the",
        "collectives it models. Without checkpointing (" + ", ".join(sorted({k[0] for k, g in groups.items()
                                                                            for c in g.values() if c in plain})) + ") the rows are "
        f"{error_range([c[3] for c in plain if c[0] != odd[0]])} fast (all but {odd[0]}), their simulated steps "
        f"{min(plain_steps):.1f}-{max(plain_steps):.1f} s long and their simulated",
        f"peaks {min(c[4] for c in plain):.0f}-{max(c[4] for c in plain):.0f} GiB of "
        + "/".join(str(g) for g in sorted(plain_gib)) + ". Two rows stand apart: A4 "
        f"({100 * a4[-1]:+.1f}%, {a4[0][2]} on {a4[0][4]} x {gib_of['A4']} GB, against A3's {100 * a3[-1]:+.1f}% on "
        f"{a3[0][4]}), and {odd[0]}, whose",
        f"published {odd_pub} tok/s/GPU ({by_id[odd[0]][0][2]} on {by_id[odd[0]][0][4]} GPUs) is {100 * (1 - odd_pub / (sum(rest_pub) / len(rest_pub))):.0f}% "
        f"below the same model's {min(rest_pub)}-{max(rest_pub)} at "
        + ", ".join(str(c_gpus) for c_gpus in sorted(g for g, c in one_b.items() if c is not odd)) +
        " GPUs, with nothing in its configuration to set it",
        "apart. A4 ran " + f"{100 * (1 - (1 + median) / (1 + a4[-1])):.0f}% below what the simulation gives it at the other "
        f"checkpointed rows' median error ({100 * median:+.1f}%); single rows of this table fall "
        f"{100 * (1 - odd_pub / (sum(rest_pub) / len(rest_pub))):.0f}% below their",
        "neighbours with no configuration to explain it, so part of A4's shortfall may be of that kind.",
        f"Against A2 ({a2[0][2]} at A4's micro-batch on {a2[0][4]} x {gib_of['A2']} GB, mb {a2[0][5]} x {a2[0][6]}: "
        f"{a2[0][-1]} tok/s/GPU), A4's {a4[0][-1]} is {100 * (1 - a4[0][-1] / a2[0][-1]):.0f}% fewer tokens per GPU, where "
        f"the simulation gives {100 * (1 - a4_sim / a2_sim):.0f}% fewer.",
        "The tables ran FlashAttention's Triton implementation (`attn_impl: triton`, the benchmark script's",
        "default; flash-attn 1.0.3's flash_attn_triton, timed here at the profile's FlashAttention-1 rates),",
        "of which llm-foundry's own code warns that it \"uses more memory. When training larger models this can",
        "trigger alloc retries which hurts performance\" (llmfoundry/models/layers/attention.py at 300cc5c5): the",
        "largest model on the smaller GPUs is where that would show, and neither that memory nor PyTorch's",
        "allocator retries are modelled.",
    ]
    return text


def e2_lines(results):
    """PR #1453's weak scaling, 64 -> 256 GPUs (E1 -> E2), published against simulated."""
    by_id = {x[0][0]: x for x in results}
    (e1, r1, v1, _), (e2, r2, v2, err2) = by_id["E1"], by_id["E2"]
    return ["", f"PR #1453 also ran E1's configuration on 32 p4d (E2, {e2[4]} GPUs): {e2[-1]} model TFLOP/s, "
            f"{100 * (1 - e2[-1] / e1[-1]):.0f}% below the {e1[4]}-GPU run. The simulation loses {100 * (1 - v2 / v1):.1f}% "
            f"(its exposed communication {r1['time']['exposed_comm_s']:.1f} -> {r2['time']['exposed_comm_s']:.1f} s a step),",
            f"so at {e2[4] // e1[4]}x the GPUs over EFA it misses most of what the run lost (E2 {100 * err2:+.1f}%). NCCL's measured bus",
            "bandwidth over EFA fell from 31.8 to 29.6 GB/s between 3 and 4 p4d nodes (NVIDIA/nccl issue #527); the",
            "profile keeps the 4-node rate at any node count, so this is a candidate, unmeasured at "
            f"{e1[4] // CLUSTERS[e1[3]]['gpus_per_node']} and {e2[4] // CLUSTERS[e2[3]]['gpus_per_node']} nodes."]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stagecraft", default="build/cli/stagecraft")
    ap.add_argument("--out", default="docs/validation.md")
    add_limit_args(ap)
    add_record_args(ap)
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as work:
        for row in ROWS:
            r = simulate(args.stagecraft, work, row)
            rid, source, model_key, cluster_key, gpus, mb, ga, framework, dtype, zero, name, published = row
            value = metric(r, name, gpus)
            err = value / published - 1
            results.append((row, r, value, err))
            fw = framework_label(framework)
            print(f"{rid}: published {published} {name}, predicted {value:.1f}, error {100 * err:+.1f}% "
                  f"[{fw}, fits {r['fits']}]", file=sys.stderr)
        scan = bandwidth_scan(args.stagecraft, work)
        # the Llama rows once more with the fused count: what their eager passes weigh
        llama = [x for x in results if x[0][2].startswith("llama")]
        fused = [(x[0][0], metric(simulate(args.stagecraft, work, x[0], "fused"), x[0][10], x[0][4]) / x[0][-1] - 1)
                 for x in llama]
    kp, vp, rp = fit_k_v([(1 / links, pub) for links, pub, _, _ in scan])
    compute = scan[0][3]
    drop_pub, drop_sim = scan[0][1] - scan[1][1], scan[0][2] - scan[1][2]  # 100 -> 200 Gb/s, both bandwidth-bound
    print(f"bandwidth scan: published K {kp:.2f} s V {vp:.2f} s; steps " +
          ", ".join(f"{links}x100G {pub:.2f} / {sim:.2f} s" for links, pub, sim, _ in scan), file=sys.stderr)
    # the same fit at 1K tokens per GPU from D1 (4 links) and D3 (1 link): two points, exact
    at_1k = {x[0][0]: x for x in results if x[0][0] in ("D1", "D3")}
    pub_1k = [(1 / links, x[1]["step_time_s"] * x[2] / x[0][-1]) for links, x in ((4, at_1k["D1"]), (1, at_1k["D3"]))]
    k1, _, _ = fit_k_v(pub_1k)
    compute_1k = at_1k["D3"][1]["time"]["compute_s"]
    accepted = [x for x in results if x[0][0] not in EXTRA]
    mae = sum(abs(x[-1]) for x in accepted) / len(accepted)
    worst = max(accepted, key=lambda x: abs(x[-1]))
    mae_all = sum(abs(x[-1]) for x in results) / len(results)
    # the acceptance set and C3: what the paragraphs below characterise; llm-foundry's other rows and
    # PR #1453's 256-GPU run have their own
    core = [x for x in results if x[0][0] not in LLM_FOUNDRY and x[0][0] != "E2"]
    fsdp_range = error_range([x[-1] for x in core if x[0][0][0] in "ABCF"])
    later_stack = recorded_errors(args.record, "korthikanti")
    # the A100 rows by the GPU's memory: what they have left in simulation, and their errors
    by_memory = {}
    for row, r, _, err in core:
        gpu = CLUSTERS[row[3]]["gpu"]
        if "A100" in gpu["name"]:
            free = (gpu["memory_bytes"] - r["peak_memory_bytes"]) / 2**30
            by_memory.setdefault(round(gpu["memory_bytes"] / 2**30), []).append((row[0], err, free))
    memory_lines = []
    for gib in sorted(by_memory):
        rows = by_memory[gib]
        memory_lines.append(f"on {gib} GB ({', '.join(rid for rid, _, _ in rows)}) "
                            f"{error_range([e for _, e, _ in rows])}, mean {100 * sum(abs(e) for _, e, _ in rows) / len(rows):.1f}%, "
                            f"with {min(f for _, _, f in rows):.0f}-{max(f for _, _, f in rows):.0f} GiB left in simulation")
    signs = {x[-1] > 0 for x in accepted}
    bias = ("Every row is predicted fast. " if signs == {True} else "Every row is predicted slow. " if signs == {False}
            else "")
    lines = [
        "## ZeRO-3 and FSDP at scale: public measurements",
        "",
        "Generated by `scripts/validate_zero3.py` (do not edit by hand). Each row is a published run",
        "with its whole configuration, simulated with tp = pp = 1, ZeRO stage 3, full recompute (C3: none, as it ran) and the",
        "framework that ran it (`training.json` `\"framework\"`, docs/program.md). Clusters are the",
        "bundled `dgx-a100-80g-hdr` profile with datasheet changes only (GPU memory and HBM rate, NICs",
        "and their line rate at the profile's 0.94 efficiency, or for AWS EFA (row E) at the 0.59 that",
        "nccl-tests measured over it on p4d, NCCL version of the PyTorch release used; the script lists",
        "each with its source). Nothing is tuned per row. The V100 rows (D) reuse the",
        "A100's GEMM-efficiency curve as a fraction of peak (one benchmark measured 0.76 and 0.74 of peak on",
        "V100 and A100 for the same fp16 matmul, mli/transformers-benchmarks), and row E's 64 x 8192 shape is inferred from \"52B\". Rows B, C, E",
        "and F ran their model code as PyTorch eager ops (training `\"kernels\": \"eager\"`: B and C",
        "uncompiled Llama code, its RMSNorm, rotary embedding and K/V repeat as ops of their own; E",
        "Hugging Face's RoBERTa; F minGPT). The FSDP rows ran fused",
        "attention: B and C FlashAttention-2 (`\"attention\": \"flash\"`, the A100 profile's default),",
        "A the first FlashAttention (its tables predate torch 2.0: `\"fa1\"`); rows D-F, from",
        "2021-2022, computed attention unfused. NCCL runs one collective of a communicator at a time:",
        "the FSDP rows' gathers and reductions share one (FSDP's process group), as do the D rows'",
        "(Megatron-DeepSpeed hands its data-parallel group to zero.Init and the engine: \"one",
        "communicator\"), so they take turns; the E rows' Hugging Face code leaves DeepSpeed a",
        "communicator for each (core/spec/framework.hpp, Communicators).",
        "",
        "| row | source | model | GPUs | mb x GA | framework | cluster | published | predicted (1σ of the profile) | error | step (s) | compute (s) | exposed comm (s) | what dominates | peak / capacity (GiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, r, value, err in results:
        rid, source, model_key, cluster_key, gpus, mb, ga, framework, dtype, zero, name, published = row
        if rid in LLM_FOUNDRY:
            continue  # their own table below
        fw = framework_label(framework)
        if rid in EAGER:
            fw += ", eager kernels"
        fw += ", unfused attention" if rid in UNFUSED else ", FlashAttention-1" if rid in FA1 else ", FlashAttention-2"
        t = r["time"]
        lines.append(f"| {rid} | {source} | {model_key} | {gpus} | {mb} x {ga} | {fw} | {cluster_key} | "
                     f"{published} {name} | {value:.1f} ({spread(r, value)}) | {100 * err:+.1f}% | {r['step_time_s']:.2f} | "
                     f"{t['compute_s']:.2f} | {t['exposed_comm_s']:.2f} | {dominant(r)} | {peak_of(r, row)} |")
    lines += ["", f"Mean absolute error: **{100 * mae:.1f}%** over the {len(accepted)} rows of ZERO3.md section 4; largest "
              f"{worst[0][0]} at {100 * worst[-1]:+.1f}% (acceptance: mean <= 10%, no row beyond 25%; goal <= 5%). "
              f"With the {len(results) - len(accepted)} rows added since (C3, torchtitan's Llama 2 13B without checkpointing; E2, "
              f"PR #1453's run on 256 GPUs; A2 and A5-A{4 + len(LF40)}, the rest of llm-foundry's A100 tables, below): "
              f"{100 * mae_all:.1f}% over {len(results)}.", "",
              bias + "The A100 profile the A, B, C and F rows share reproduces the 2022 Megatron-LM at",
              f"{error_range(later_stack)} on {len(later_stack)} runs (Korthikanti et al. Table 5, its section below: fused",
              "kernels, no data-parallel overlap), so the FSDP rows' " + fsdp_range + " is not the A100's rates as Selene ran",
              "Megatron-LM. It is either what FSDP and the eager PyTorch code around it run beside or between the",
              "modelled kernels and collectives (the hooks, the stream waits, the caching allocator near capacity),",
              "none of which the simulation charges, or lower sustained rates on the clusters these runs used: one",
              "published PyTorch benchmark timed an 8192^3 fp16 matmul at 230 TFLOP/s on an A100 80GB, over at",
              "least 3 s (mli/transformers-benchmarks): 0.74 of peak, where the profile's curve gives 0.84; the H200",
              "of the layers section below ran the same product in bf16 at 0.76 of its peak. Which it is needs a",
              "measurement on an A100.",
              "NCCL's kernels beside the compute are charged already: the SMs they hold and their traffic through",
              "HBM (docs/simulator.md).", "",
              "By the GPU's memory, the A100 rows are off " + "; ".join(memory_lines) + ". The two profiles differ",
              "in capacity and HBM rate, and the HBM rate is modelled, so the difference points at what running",
              "near capacity costs (PyTorch's caching allocator freeing and retrying), or at real peaks above the",
              "simulated ones; neither is modelled."] + llm_foundry_lines(results) + e2_lines(results) + ["",
              "The Llama rows (" + ", ".join(rid for rid, _ in fused) + ") ran uncompiled PyTorch code; counted as fused kernels "
              "instead, their errors would be " + ", ".join(f"{100 * e:+.1f}%" for _, e in fused) + ": the eager RMSNorm, rotary and "
              "K/V-repeat passes (sim/models/work.hpp) make the difference.", "",
              "A bandwidth scan separates what the D rows mix. The ZeRO++ blog's bars for D4's configuration",
              "(18B, 2K tokens per GPU, 384 V100) at 1, 2 and 8 x 100 Gb/s per node (26, 37 and 47 hw TFLOP/s)",
              "give step times (from the run's hardware FLOPs) of " +
              ", ".join(f"{pub:.1f}" for _, pub, _, _ in scan) + " s; the simulator gives " +
              ", ".join(f"{sim:.1f}" for _, _, sim, _ in scan) + " s.",
              f"The published times fit T = K + V x (100 Gb/s / bandwidth) with K = {kp:.1f} s and V = {vp:.1f} s (largest",
              f"residual {rp:.2f} s). From 100 to 200 Gb/s, both bandwidth-bound, the published step falls by {drop_pub:.1f} s and",
              f"the simulated one by {drop_sim:.1f} s: the simulator's bandwidth-bound time is {abs(100 * (drop_sim / drop_pub - 1)):.0f}% "
              f"{'too large' if drop_sim > drop_pub else 'too small'}, which at",
              "100 Gb/s offsets what it lacks elsewhere, so D3's and D4's agreement is partly two errors",
              f"cancelling. At 800 Gb/s the simulated step is {scan[-1][2]:.1f} s, {compute:.1f} s of it compute, and the published",
              f"one still {scan[-1][1]:.1f} s. The published K exceeds the simulated compute by {kp - compute:.1f} s at 2K tokens and, fitted the",
              f"same way on D1 and D3, by {k1 - compute_1k:.1f} s at 1K: a cost per step that neither bandwidth nor tokens",
              "move much (D1's gap is mostly this), which no "
              "modelled mechanism (compute, NCCL latency, the frameworks' copies) supplies.", ""]
    write_section(args.out, "zero3", lines)
    update_record(args.record, "zero3", [
        record_entry("zero3", row[0], row[1], row[7] if isinstance(row[7], str) else row[7]["name"],
                     CLUSTERS[row[3]]["gpu"]["name"], row[4], r, err) for row, r, _, err in results], args.check_record)
    print(f"mean absolute error {100 * mae:.1f}%, worst {worst[0][0]} {100 * worst[-1]:+.1f}% -> {args.out}", file=sys.stderr)
    exit_on_limits(mae, worst[0][0], worst[-1], args.max_mae, args.max_row)


if __name__ == "__main__":
    main()
