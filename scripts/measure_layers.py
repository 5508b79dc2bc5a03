#!/usr/bin/env python3
"""Measure transformer layers as the published runs' model code runs them, on one GPU.

The compute side of the simulator (sim/models/work.hpp) counts, per layer, the GEMMs, the attention
kernel and the bytes of the memory-bound kernels a framework's model code runs, and times them with
the GPU profile's rates. This script runs that model code for real - PyTorch eager ops one at a time,
as the code of the validation rows runs them (docs/validation.md) - and writes what the GPU did:

  * ceilings: a device-to-device copy (bytes read + written over time) and an 8192^3 bf16 GEMM;
  * layers: each layer's forward and backward, timed with CUDA events (median of several steps,
    inputs fixed, parameters' gradients set to None between steps), and one profiled step whose
    kernels are summed by class (gemm, attention, other = memory-bound) with their counts;
  * with --ncu-layer NAME: one forward + backward of that layer, for Nsight Compute to read the
    DRAM bytes of every kernel (run under ncu by the caller).

Layers (the code each validation row's framework ran, written out here from the sources named):
  llama   torchtitan 04133643 models/llama/model.py + models/norms.py (norm_type "rmsnorm"):
          RMSNorm on x.float(), complex rotary embeddings, repeat_kv, SDPA causal (flash backend),
          SwiGLU FFN; bf16 parameters (FSDP param_dtype bf16). Rows B1, C1, C2, C3.
  mingpt  karpathy/minGPT mingpt/model.py: LayerNorm, CausalSelfAttention with the score matrix
          (scale, masked_fill, softmax, dropout 0.1), NewGELU as PyTorch ops, dropout 0.1. Rows F1, F2.
  bert    Hugging Face BERT/RoBERTa layer, eager attention (BertSelfAttention: scores, /sqrt(d),
          + additive mask, softmax, dropout, context permute), SelfOutput/Output (dense, dropout,
          LayerNorm of the residual sum), Intermediate (dense, F.gelu). Rows E0, E1.

Usage: python3 scripts/measure_layers.py --out DIR        (writes DIR/layers.json)
       python3 scripts/measure_layers.py --ncu-layer NAME  (one fwd+bwd, for ncu)
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from kernel_kinds import kernel_class

DT = torch.bfloat16
DEV = "cuda"


# ------------------------------------------------------------------------------------------------
# torchtitan's Llama block (04133643): models/norms.py RMSNorm, models/llama/model.py.

class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    seqlen = x.shape[1]
    freqs_cis = freqs_cis[0:seqlen]
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (torch.unsqueeze(x, dim=3).expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


class LlamaAttention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        xq = xq.transpose(1, 2)
        xk = keys.transpose(1, 2)
        xv = values.transpose(1, 2)
        output = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)
        output = output.transpose(1, 2).contiguous()
        output = output.view(bs, seqlen, -1)
        return self.wo(output)


class LlamaFeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, ffn, seq, eps=1e-5):
        super().__init__()
        self.attention = LlamaAttention(dim, n_heads, n_kv_heads)
        self.feed_forward = LlamaFeedForward(dim, ffn)
        self.attention_norm = RMSNorm(dim, eps)
        self.ffn_norm = RMSNorm(dim, eps)
        self.register_buffer("freqs_cis", precompute_freqs_cis(dim // n_heads, seq), persistent=False)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x), self.freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


# ------------------------------------------------------------------------------------------------
# karpathy/minGPT mingpt/model.py (NewGELU, CausalSelfAttention, Block).

class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class MinGptAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, pdrop):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(pdrop)
        self.resid_dropout = nn.Dropout(pdrop)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size),
                             persistent=False)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MinGptBlock(nn.Module):
    def __init__(self, n_embd, n_head, block_size, pdrop=0.1, gelu="new"):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = MinGptAttention(n_embd, n_head, block_size, pdrop)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(n_embd, 4 * n_embd), c_proj=nn.Linear(4 * n_embd, n_embd),
                                      act=NewGELU() if gelu == "new" else nn.GELU(), dropout=nn.Dropout(pdrop)))

    def forward(self, x):
        m = self.mlp
        x = x + self.attn(self.ln_1(x))
        return x + m.dropout(m.c_proj(m.act(m.c_fc(self.ln_2(x)))))


# ------------------------------------------------------------------------------------------------
# Hugging Face BERT / RoBERTa layer, eager attention (modeling_bert.py of 2021: BertSelfAttention,
# BertSelfOutput, BertIntermediate, BertOutput).

class BertLayer(nn.Module):
    def __init__(self, hidden, heads, ffn, pdrop=0.1, eps=1e-5):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(pdrop)
        self.so_dense = nn.Linear(hidden, hidden)
        self.so_dropout = nn.Dropout(pdrop)
        self.so_norm = nn.LayerNorm(hidden, eps=eps)
        self.inter = nn.Linear(hidden, ffn)
        self.out_dense = nn.Linear(ffn, hidden)
        self.out_dropout = nn.Dropout(pdrop)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)

    def scores_shape(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.d)).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q = self.scores_shape(self.query(x))
        k = self.scores_shape(self.key(x))
        v = self.scores_shape(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / math.sqrt(self.d)
        scores = scores + mask
        probs = nn.functional.softmax(scores, dim=-1)
        probs = self.attn_dropout(probs)
        ctx = torch.matmul(probs, v)
        ctx = ctx.permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size()[:-2] + (self.heads * self.d,))
        a = self.so_norm(self.so_dropout(self.so_dense(ctx)) + x)
        i = F.gelu(self.inter(a))
        return self.out_norm(self.out_dropout(self.out_dense(i)) + a)


# ------------------------------------------------------------------------------------------------
# The loss as PyTorch code computes it: F.cross_entropy on the logits cast to fp32 (minGPT, Hugging
# Face, torchtitan), logits from the head in bf16.

class CrossEntropy(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab

    def forward(self, logits, targets):
        return F.cross_entropy(logits.float().view(-1, self.vocab), targets.view(-1))


# ------------------------------------------------------------------------------------------------
# The layers measured: the validation rows' shapes (scripts/validate_zero3.py) at their micro-batch.
# name: (kind, constructor kwargs, micro-batch, sequence)

LAYERS = {
    # C2 (torchtitan Llama 2 70B, mb 2, s 4096) and B1's shape at mb 2
    "llama2-70b-mb2": ("llama", dict(dim=8192, n_heads=64, n_kv_heads=8, ffn=28672, seq=4096), 2, 4096),
    # C1 (torchtitan Llama 3 70B, s 8192, mb 1)
    "llama3-70b-s8k": ("llama", dict(dim=8192, n_heads=64, n_kv_heads=8, ffn=28672, seq=8192), 1, 8192),
    # C3 (torchtitan Llama 2 13B, mb 2, s 4096)
    "llama2-13b-mb2": ("llama", dict(dim=5120, n_heads=40, n_kv_heads=40, ffn=13824, seq=4096), 2, 4096),
    # F1 / F2 (minGPT-175B, s 2048, mb 1 and 2)
    "mingpt-175b-mb1": ("mingpt", dict(n_embd=12288, n_head=96, block_size=2048), 1, 2048),
    "mingpt-175b-mb2": ("mingpt", dict(n_embd=12288, n_head=96, block_size=2048), 2, 2048),
    # E0 / E1 (RoBERTa "52B": 8192 hidden, 64 heads, s 512, mb 16)
    "roberta-52b-mb16": ("bert", dict(hidden=8192, heads=64, ffn=32768), 16, 512),
    # the loss over GPT-2's vocabulary, 8192 tokens (F.cross_entropy on fp32 logits)
    "xent-50257-t8192": ("xent", dict(vocab=50257), 4, 2048),
}


def build(name):
    kind, kw, mb, seq = LAYERS[name]
    torch.manual_seed(0)
    with torch.device(DEV):
        if kind == "llama":
            m = LlamaBlock(**kw)
            hidden = kw["dim"]
        elif kind == "mingpt":
            m = MinGptBlock(**kw)
            hidden = kw["n_embd"]
        elif kind == "bert":
            m = BertLayer(**kw)
            hidden = kw["hidden"]
        else:
            m = CrossEntropy(**kw)
            hidden = kw["vocab"]
    m = m.to(DT)
    if kind == "llama":
        m.freqs_cis = precompute_freqs_cis(kw["dim"] // kw["n_heads"], seq).to(DEV)  # complex64 stays
    x = torch.randn(mb, seq, hidden, device=DEV, dtype=DT, requires_grad=True)
    extra = ()
    if kind == "bert":
        extra = (torch.zeros(mb, 1, 1, seq, device=DEV, dtype=DT),)  # additive mask, all tokens kept
    if kind == "xent":
        extra = (torch.randint(0, hidden, (mb, seq), device=DEV),)
        return m, x, extra, torch.ones((), device=DEV)
    grad = torch.randn(mb, seq, hidden, device=DEV, dtype=DT)
    return m, x, extra, grad


def sdpa_context():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def params(m):
    return sum(p.numel() for p in m.parameters())


def step(m, x, extra, grad, which):
    """One forward (and backward): returns nothing; grads of parameters dropped first."""
    for p in m.parameters():
        p.grad = None
    x.grad = None
    y = m(x, *extra)
    if which == "fwd":
        return
    y.backward(grad)


def time_layer(name, iters, warm):
    m, x, extra, grad = build(name)
    res = {"name": name, "kind": LAYERS[name][0], "config": LAYERS[name][1], "micro_batch": LAYERS[name][2],
           "seq": LAYERS[name][3], "params": params(m)}
    with sdpa_context():
        for _ in range(warm):
            step(m, x, extra, grad, "fb")
        torch.cuda.synchronize()
        # forward alone and forward + backward, each a median over iters steps (events around the step)
        for which in ("fwd", "fb"):
            ts = []
            for _ in range(iters):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                step(m, x, extra, grad, which)
                b.record()
                torch.cuda.synchronize()
                ts.append(a.elapsed_time(b) / 1e3)
            res[which + "_s"] = statistics.median(ts)
            res[which + "_spread_s"] = [min(ts), max(ts)]
        # wall clock of fb steps back to back (host launch gaps show here, not in the kernel sums)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            step(m, x, extra, grad, "fb")
        torch.cuda.synchronize()
        res["fb_wall_s"] = (time.perf_counter() - t0) / iters
        # one profiled fwd and one profiled fb: kernel classes
        from torch.profiler import ProfilerActivity, profile
        for which in ("fwd", "fb"):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step(m, x, extra, grad, which)
                torch.cuda.synchronize()
            kernels = {}
            for e in prof.events():
                if e.device_type != torch.autograd.DeviceType.CUDA:
                    continue
                k = kernels.setdefault(e.name, {"count": 0, "s": 0.0})
                k["count"] += 1
                k["s"] += e.time_range.elapsed_us() / 1e6
            classes = {}
            for kname, k in kernels.items():
                c = classes.setdefault(kernel_class(kname), {"count": 0, "s": 0.0})
                c["count"] += k["count"]
                c["s"] += k["s"]
            res[which + "_classes"] = classes
            res[which + "_kernels"] = sorted(([n, k["count"], k["s"]] for n, k in kernels.items()),
                                             key=lambda r: -r[2])
    del m, x, extra, grad
    torch.cuda.empty_cache()
    return res


def time_gemm(M, K, N, iters):
    sets = []
    per_set = (M * K + N * K + M * N) * 2
    nsets = max(1, min(4, int(4 * 60e6 // per_set) + 1))  # rotate past the 60 MB L2 when small
    for _ in range(nsets):
        sets.append((torch.randn(M, K, device=DEV, dtype=DT), torch.randn(N, K, device=DEV, dtype=DT)))
    for i in range(3):
        F.linear(*sets[i % nsets])
    torch.cuda.synchronize()
    ts = []
    for i in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        x, w = sets[i % nsets]
        a.record()
        F.linear(x, w)
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def ceilings():
    out = {}
    n = 2 * 1024 ** 3 // 2  # 2 GiB of bf16
    src = torch.randn(n, device=DEV, dtype=DT)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    out["copy_bytes"] = 2 * n * 2
    out["copy_s"] = statistics.median(ts)
    out["copy_Bps"] = out["copy_bytes"] / out["copy_s"]
    del src, dst
    t = time_gemm(8192, 8192, 8192, 20)
    out["gemm8192_s"] = t
    out["gemm8192_flops_per_s"] = 2 * 8192 ** 3 / t
    return out


def sustain(seconds, out):
    """llama2-70b-mb2 forward + backward back to back for `seconds`: each step's time (events) and the
    SM clock and power every ~1 s: what sustained load does to a layer's time (sustain.json)."""
    import threading
    m, x, extra, grad = build("llama2-70b-mb2")
    samples, stop = [], threading.Event()

    def poll():
        t0 = time.time()
        while not stop.is_set():
            r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True)
            samples.append([time.time() - t0] + [float(v) for v in r.stdout.strip().split(",")])
            stop.wait(1.0)

    th = threading.Thread(target=poll)
    th.start()
    steps = []
    t0 = time.time()
    with sdpa_context():
        while time.time() - t0 < seconds:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step(m, x, extra, grad, "fb")
            b.record()
            torch.cuda.synchronize()
            steps.append([time.time() - t0, a.elapsed_time(b) / 1e3])
    stop.set()
    th.join()
    with open(os.path.join(out, "sustain.json"), "w") as f:
        json.dump({"layer": "llama2-70b-mb2", "steps": steps, "smi": samples,
                   "smi_columns": ["t_s", "clock_sm_mhz", "power_w", "temp_c"]}, f)
    n = len(steps)
    first = statistics.median(s[1] for s in steps[: max(1, n // 10)])
    last = statistics.median(s[1] for s in steps[-max(1, n // 10):])
    print(f"sustain: {n} steps in {seconds:.0f} s, first tenth {first * 1e3:.2f} ms, last tenth {last * 1e3:.2f} ms; "
          f"clock {samples[0][1] if samples else '?'} -> {samples[-1][1] if samples else '?'} MHz", flush=True)


def env():
    e = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
         "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
         "date": time.strftime("%Y-%m-%d")}
    try:
        e["cublas"] = torch._C._cuda_getCompiledVersion()
    except Exception:
        pass
    try:
        e["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as ex:
        e["nvidia_smi"] = str(ex)
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--ncu-layer", default=None)
    ap.add_argument("--sustain", type=float, default=0, help="run llama2-70b-mb2 steps for this many seconds")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.ncu_layer:
        # One forward + backward, after a marker kernel (torch.cuda._sleep's spin_kernel) that
        # separates it from the set-up's kernels; no warm-up step (ncu would count it too). The
        # backward runs on autograd's own thread, so an NVTX range of this thread cannot select it.
        m, x, extra, grad = build(args.ncu_layer)
        with sdpa_context():
            torch.cuda.synchronize()
            torch.cuda._sleep(1000)
            step(m, x, extra, grad, "fb")
            torch.cuda.synchronize()
        return
    if args.sustain:
        sustain(args.sustain, args.out)
        return
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "layers.json")
    doc = {"env": env()}

    def save():
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)

    t0 = time.time()
    doc["ceilings"] = ceilings()
    save()
    print(f"[{time.time() - t0:.0f}s] copy {doc['ceilings']['copy_Bps'] / 1e12:.2f} TB/s, "
          f"gemm 8192^3 {doc['ceilings']['gemm8192_flops_per_s'] / 1e12:.0f} TFLOP/s", flush=True)
    doc["layers"] = []
    for name in args.layers.split(","):
        try:
            r = time_layer(name, args.iters, 3)
        except Exception as ex:  # a layer that fails is reported, not fatal
            r = {"name": name, "error": repr(ex)}
            torch.cuda.empty_cache()
        doc["layers"].append(r)
        save()
        if "error" in r:
            print(f"[{time.time() - t0:.0f}s] {name}: {r['error']}", flush=True)
        else:
            cls = ", ".join(f"{c} {v['s'] * 1e3:.1f} ms/{v['count']}" for c, v in sorted(r["fb_classes"].items()))
            print(f"[{time.time() - t0:.0f}s] {name}: fwd {r['fwd_s'] * 1e3:.2f} ms, fwd+bwd {r['fb_s'] * 1e3:.2f} ms "
                  f"(wall {r['fb_wall_s'] * 1e3:.2f}); {cls}", flush=True)
    doc["env"]["nvidia_smi_after_layers"] = env()["nvidia_smi"]
    doc["env"]["nvidia_smi_after"] = env()["nvidia_smi"]
    save()


if __name__ == "__main__":
    sys.exit(main())
