#!/usr/bin/env python3
"""Stagecraft against PyTorch and transformers (docs/interop.md).

  check_hf.py --stagecraft BIN --work DIR [--mpirun MPIRUN] CASE

Each CASE builds small random models in transformers, saves them with save_pretrained and checks
Stagecraft's math against transformers' on the same tokens:
  eval        `stagecraft eval` == transformers' loss on each window, within 1e-5 relative (fp32)
  step-1      one `run --steps 1 --init-from --data-order sequential` on one rank: its loss ==
              transformers' loss on the same global batch, and after --save-hf every parameter ==
              one torch.optim.AdamW step (weight decay on matrices, betas, eps, clipping), 1e-5
  step-pp2    the same for a pp=2 x dp=2 ZeRO-3 plan under mpirun (4 ranks)
  export      a tiny model trained 3 steps, saved, exported by `export hf`: loads without missing or
              unexpected keys, generates, and its log-softmax logits == `stagecraft eval`'s (1e-5)
  bad         bad checkpoints (missing tensor, wrong shape, truncated file, lying offsets) exit 2
              naming the tensor and the file, and nothing is written
Exit 77 (CTest's SKIP_RETURN_CODE) when torch or transformers cannot be imported.

The Mixtral model has 4 SwiGLU experts of width 24, top 2 renormalised; the Qwen2-MoE one 4 experts
of width 16, top 2 not renormalised, a gated shared expert of width 24 and layer 0 dense
(mlp_only_layers); the OLMoE one 4 experts of width 16, top 2 not renormalised, and RMSNorms over
the whole q and k projections before RoPE; their router weights are redrawn like the others, so the tokens spread over the
experts. The models' weights are redrawn N(0, 0.2) (norm weights 1 + N(0, 0.1)) so that the logits are far
from uniform and every tensor shapes the loss; the GPT-2 model is tied with exact-erf GELU off
(gelu_new), the LLaMA model untied with grouped-query attention (4 heads, 2 K/V heads), SwiGLU and
RMSNorm eps 1e-6; the Mistral model LLaMA's layout with a sliding window of 6 tokens on every layer.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

try:
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import load_file
except Exception as e:  # noqa: BLE001 - any import failure means "not available here"
    print(f"skipped: torch / transformers not importable ({e})")
    sys.exit(77)

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)

VOCAB, T, BATCH = 256, 16, 8
SLIDING_WINDOW = 6  # the Mistral model's: each query sees its 6 latest keys of the 16
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
TOL = 1e-5
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def rel(a, b):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model


def gpt2(seed=1):
    c = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=96,
                                resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, activation_function="gelu_new")
    return perturb(transformers.GPT2LMHeadModel(c), seed).eval()


def llama(seed=2):
    c = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                 rms_norm_eps=1e-6, tie_word_embeddings=False, attention_dropout=0.0)
    return perturb(transformers.LlamaForCausalLM(c), seed).eval()


def mistral(seed=7):
    c = transformers.MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-6, tie_word_embeddings=False, sliding_window=SLIDING_WINDOW,
                                   attention_dropout=0.0)
    model = transformers.MistralForCausalLM(c)
    model.config._attn_implementation = "eager"  # its mask applies the window; sdpa's does too, eager is explicit
    return perturb(model, seed).eval()


def mixtral(seed=4):
    c = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-6, tie_word_embeddings=False, num_local_experts=4,
                                   num_experts_per_tok=2, sliding_window=None, attention_dropout=0.0)
    return perturb(transformers.MixtralForCausalLM(c), seed).eval()


def qwen2_moe(seed=5):
    c = transformers.Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=40, moe_intermediate_size=16,
                                    shared_expert_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                                    norm_topk_prob=False, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                                    tie_word_embeddings=False, mlp_only_layers=[0], decoder_sparse_step=1,
                                    use_sliding_window=False, attention_dropout=0.0)
    return perturb(transformers.Qwen2MoeForCausalLM(c), seed).eval()


def olmoe(seed=6):
    c = transformers.OlmoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                 rms_norm_eps=1e-6, tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
                                 norm_topk_prob=False, clip_qkv=None, pad_token_id=None, eos_token_id=None,
                                 attention_dropout=0.0)
    return perturb(transformers.OlmoeForCausalLM(c), seed).eval()


MODELS = {"gpt2": gpt2, "llama": llama, "mistral": mistral, "mixtral": mixtral, "qwen2_moe": qwen2_moe, "olmoe": olmoe}
# the executor runs their experts (and OLMoE's whole-projection q/k norms) at tp 1 (no tp plans)
EXPERTS = {"mixtral", "qwen2_moe", "olmoe"}


def tokens(n=4096, seed=3):
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).numpy().astype("<u2")


def data_file(args):
    """The tokens every case reads, and the uint16 file stagecraft reads them from."""
    tok = tokens()
    path = os.path.join(args.work, "data.bin")
    tok.tofile(path)
    return tok, path


def windows(tok, first, count):
    return torch.stack([torch.tensor(tok[j * T:j * T + T + 1].astype(np.int64)) for j in range(first, first + count)])


def run(args, cmd, ranks=1, expect=0):
    full = ([args.mpirun, "-n", str(ranks), "--oversubscribe"] if ranks > 1 else []) + [args.stagecraft] + cmd
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(full, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != expect:
        print(" ".join(full))
        print(p.stdout[-3000:])
        print(p.stderr[-3000:])
        raise SystemExit(f"FAIL  exit {p.returncode}, expected {expect}: {' '.join(cmd[:1])}")
    return p


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    return path


def training_file(work):
    return write_json(os.path.join(work, "training.json"), {"global_batch": BATCH, "seq_len": T, "dtype": "fp32",
                                                             "optimizer": "adamw", "attention": "unfused"})


def plan_file(work, name, pp, dp, zero, micro_batch, micro_batches, stage_layers=None, tp=1, sequence_parallel=False):
    plan = {"tp": tp, "pp": pp, "dp": dp, "micro_batch": micro_batch, "micro_batches": micro_batches,
            "schedule": "1f1b", "virtual_stages": 1, "sequence_parallel": sequence_parallel, "recompute": "none",
            "zero": {"stage": zero, "prefetch_bucket": 2000, "reduce_bucket": 5000, "allgather_bucket": 5000,
                     "max_live_parameters": 10000, "max_reuse_distance": 5000, "param_persistence_threshold": 40,
                     "overlap_comm": True, "offload_optimizer": "none", "keep_gathered_across_microbatches": False}}
    if stage_layers:
        plan["stage_layers"] = stage_layers
    return write_json(os.path.join(work, name + ".json"), plan)


def case_eval(args):
    tok, data = data_file(args)
    for name, build in MODELS.items():
        model = build()
        d = os.path.join(args.work, name)
        model.save_pretrained(d, safe_serialization=True)
        n = 6
        out = json.loads(run(args, ["eval", "--weights", d, "--data", data, "--sequences", str(n), "--seq-len", str(T),
                                    "--json"]).stdout)
        with torch.no_grad():
            ref = [float(model(w[None], labels=w[None]).loss) for w in windows(tok, 0, n)]
        worst = max(abs(a - b) / abs(b) for a, b in zip(out["losses"], ref))
        check(worst <= TOL, f"eval {name}: {n} windows of {T} tokens, per-window loss within {worst:.2e} relative "
                            f"of transformers (mean {out['mean_loss']:.6f} vs {sum(ref) / n:.6f})")
        if args.mpirun:
            out2 = json.loads(run(args, ["eval", "--weights", d, "--data", data, "--sequences", str(n), "--seq-len",
                                         str(T), "--json"], ranks=2).stdout)
            check(out2["losses"] == out["losses"], f"eval {name} on 2 ranks: the same per-window losses")
            plans = {"pp2 x dp2 ZeRO-3": plan_file(args.work, "eval-pp2-dp2-z3", 2, 2, 3, 1, 3, [1, 1]),
                     "tp2 x dp2 sequence-parallel": plan_file(args.work, "eval-tp2-dp2", 1, 2, 1, 1, 3, tp=2,
                                                                sequence_parallel=True)}
            for label, plan in plans.items():
                if name in EXPERTS and label.startswith("tp"):
                    continue
                out3 = json.loads(run(args, ["eval", "--weights", d, "--data", data, "--sequences", str(n), "--seq-len",
                                             str(T), "--plan", plan, "--json"], ranks=4).stdout)
                worst = max(abs(a - b) / abs(b) for a, b in zip(out3["losses"], ref))
                check(worst <= TOL, f"eval {name} --plan {label} (4 ranks, forward-only Program): per-window loss "
                                    f"within {worst:.2e} relative of transformers")


def reference_step(model, tok):
    """transformers' loss on step 0's global batch and the parameters after one AdamW step."""
    model.train()
    batch = windows(tok, 0, BATCH)
    loss = model(batch, labels=batch).loss
    loss.backward()
    params = [p for p in model.parameters()]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    torch.nn.utils.clip_grad_norm_(params, CLIP)
    grads = {k: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
             for k, p in model.named_parameters()}
    opt.step()
    return float(loss), {k: v.detach().clone() for k, v in model.state_dict().items()}, grads


# Elements whose gradient is zero in exact arithmetic carry only rounding noise, and AdamW's first
# step moves them by lr * g / (|g| + eps): noise over noise, in [-lr, lr] in any two correct
# implementations. GPT-2's key bias is such a tensor (softmax(q . (k + b)) does not depend on b: it
# adds q . b to every score of a query). Those elements (0 < |g| < 1e-7, after clipping) are held to
# the bound |delta| <= lr instead; every other element to TOL relative per tensor.
NOISE_GRAD = 1e-7


def compare_params(name, label, saved_dir, ref_state, grads, before):
    saved = load_file(os.path.join(saved_dir, "model.safetensors"))
    worst, worst_name, missing, noisy, noisy_ok = 0.0, "", [], 0, True
    for k, v in ref_state.items():
        if k not in saved:
            missing.append(k)
            continue
        g = grads.get(k, torch.zeros_like(v))
        keep = (g.abs() >= NOISE_GRAD) | (g == 0)  # exact zeros (unused embedding rows) step by 0 in both
        noisy += int((~keep).sum())
        step = (saved[k].double() - before[k].double())[~keep].abs()
        noisy_ok = noisy_ok and bool((step <= LR * (1 + 1e-3) + WD * LR * before[k].double().abs().max()).all())
        r = rel(saved[k][keep], v[keep])
        if r > worst:
            worst, worst_name = r, k
    tied_only = [k for k in missing if k == "lm_head.weight"]  # a tied head is saved as the embedding
    check(len(missing) == len(tied_only), f"{label} {name}: --save-hf holds every parameter (missing {missing})")
    check(worst <= TOL, f"{label} {name}: parameters after one step equal torch.optim.AdamW's within {worst:.2e} "
                        f"relative (worst {worst_name}; {noisy} element(s) with a rounding-noise gradient held to "
                        f"|step| <= lr instead)")
    check(noisy_ok, f"{label} {name}: the {noisy} rounding-noise element(s) moved at most lr")


def case_step(args, ranks):
    tok, data = data_file(args)
    training = training_file(args.work)
    if ranks == 1:
        plans = [(plan_file(args.work, "plan-1", 1, 1, 0, 4, 2), "step, 1 rank")]
    else:
        plans = [(plan_file(args.work, "plan-pp2-dp2-z3", 2, 2, 3, 1, 4, [1, 1]), "step, pp2 x dp2 ZeRO-3"),
                 (plan_file(args.work, "plan-tp2-dp2-sp", 1, 2, 1, 2, 2, tp=2, sequence_parallel=True),
                  "step, tp2 x dp2 sequence-parallel ZeRO-1")]
    for (plan, label), (name, build) in [(p, m) for p in plans for m in MODELS.items()]:
        if name in EXPERTS and "tp2" in label:
            continue
        model = build()
        d = os.path.join(args.work, name)
        out_dir = os.path.join(args.work, name + "-" + os.path.basename(plan)[:-5])
        model.save_pretrained(d, safe_serialization=True)
        out = json.loads(run(args, ["run", "--init-from", d, "--training", training, "--plan", plan, "--steps", "1",
                                    "--data", data, "--data-order", "sequential", "--lr", str(LR), "--save-hf", out_dir,
                                    "--json", "--skip-memory-check"], ranks=ranks).stdout)
        before = {k: v.detach().clone() for k, v in model.state_dict().items()}
        ref_loss, ref_state, grads = reference_step(model, tok)
        r = abs(out["losses"][0] - ref_loss) / abs(ref_loss)
        check(r <= TOL, f"{label} {name}: loss {out['losses'][0]:.7f} vs transformers' {ref_loss:.7f} ({r:.2e} relative)")
        compare_params(name, label, out_dir, ref_state, grads, before)


def case_export(args):
    tok, data = data_file(args)
    training = training_file(args.work)
    plan = plan_file(args.work, "plan-dp2-z3", 1, 2, 3, 2, 2)
    model_json = write_json(os.path.join(args.work, "tiny-llama.json"), {
        "name": "tiny-llama", "layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn_hidden": 80, "vocab": VOCAB,
        "seq_len": T, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": False, "bias": False,
        "max_positions": 64, "norm_eps": 1e-6, "rope_theta": 10000})
    ckpt = os.path.join(args.work, "ckpt")
    out = os.path.join(args.work, "exported")
    ranks = 2 if args.mpirun else 1
    if ranks == 1:
        plan = plan_file(args.work, "plan-1", 1, 1, 0, 4, 2)
    run(args, ["run", "--model", model_json, "--training", training, "--plan", plan, "--steps", "3", "--data", data,
               "--save", ckpt, "--skip-memory-check"], ranks=ranks)
    run(args, ["export", "hf", "--checkpoint", ckpt, "-o", out])
    model, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    check(not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"],
          f"export: from_pretrained loads it with no missing, unexpected or mismatched keys ({info})")
    model.eval()
    prompt = windows(tok, 0, 1)[:, :8]
    # generate() asks whether the model is FSDP-managed by importing torch.distributed.fsdp, which
    # Debian's torch 1.13 cannot import on Python 3.11 (a dataclass default in torch.distributed._shard
    # that 3.11 refuses); this model is not FSDP-managed, so the answer is given directly.
    import transformers.generation.utils as generation_utils
    generation_utils.is_fsdp_managed_module = lambda module: False
    gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False,
                         pad_token_id=VOCAB - 1)
    manual = greedy(model, prompt, 8, use_cache=False)
    check(gen.shape == (1, 16) and bool((gen[:, :8] == prompt).all()) and bool((gen == manual).all()),
          f"export: generate() gives 8 tokens after the prompt, the same as greedy decoding without the KV cache "
          f"({gen[0, 8:].tolist()})")
    n = 4
    logp_file = os.path.join(args.work, "logp.bin")
    ev = json.loads(run(args, ["eval", "--weights", out, "--data", data, "--sequences", str(n), "--seq-len", str(T),
                               "--log-probs", logp_file, "--json"]).stdout)
    ours = torch.from_numpy(np.fromfile(logp_file, dtype="<f4").reshape(n, T, VOCAB))
    with torch.no_grad():
        w = windows(tok, 0, n)
        theirs = torch.log_softmax(model(w[:, :T]).logits.float(), dim=-1)
        ref = [float(model(x[None], labels=x[None]).loss) for x in w]
    err = float((ours - theirs).abs().max())
    check(err <= TOL, f"export: log-softmax of the logits equals stagecraft eval's within {err:.2e} (max abs, {n}x{T} tokens)")
    worst = max(abs(a - b) / abs(b) for a, b in zip(ev["losses"], ref))
    check(worst <= TOL, f"export: eval's per-window loss within {worst:.2e} relative of transformers'")
    out16 = os.path.join(args.work, "exported-bf16")
    run(args, ["export", "hf", "--checkpoint", ckpt, "-o", out16, "--dtype", "bf16"])
    m16, info16 = transformers.AutoModelForCausalLM.from_pretrained(out16, output_loading_info=True, torch_dtype="auto")
    f32, b16 = load_file(os.path.join(out, "model.safetensors")), load_file(os.path.join(out16, "model.safetensors"))
    same = all(b16[k].dtype == torch.bfloat16 and torch.equal(b16[k], v.to(torch.bfloat16)) for k, v in f32.items())
    check(not info16["missing_keys"] and not info16["unexpected_keys"] and m16.dtype == torch.bfloat16 and same,
          "export --dtype bf16: loads as bfloat16 with no key warnings, each tensor the fp32 export rounded to "
          "nearest even as torch rounds it")


def greedy(model, prompt, new_tokens, use_cache):
    """Greedy decoding through the model's forward, one token at a time (what generate(do_sample=False)
    must give)."""
    ids, past = prompt, None
    with torch.no_grad():
        for _ in range(new_tokens):
            out = model(ids if past is None else ids[:, -1:], past_key_values=past, use_cache=use_cache)
            past = out.past_key_values if use_cache else None
            ids = torch.cat([ids, out.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def corrupt(src, dst, how):
    """A copy of the checkpoint folder src with model.safetensors damaged as `how` says."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    name = "model.layers.1.mlp.up_proj.weight"
    if how == "truncated":
        open(path, "wb").write(raw[:len(raw) - 100])
        return name, path
    if how == "missing":
        info = header.pop(name)
        b, e = info["data_offsets"]
        data = data[:b] + data[e:]
        for v in header.values():
            if isinstance(v, dict) and "data_offsets" in v and v["data_offsets"][0] >= e:
                v["data_offsets"] = [v["data_offsets"][0] - (e - b), v["data_offsets"][1] - (e - b)]
    elif how == "shape":
        s = header[name]["shape"]
        header[name]["shape"] = [s[1], s[0]]
    elif how == "offsets":
        b, e = header[name]["data_offsets"]
        header[name]["data_offsets"] = [b + 4, e + 4]
    text = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
    return name, path


def case_bad(args):
    tok, data = data_file(args)
    training = training_file(args.work)
    plan = plan_file(args.work, "plan-1", 1, 1, 0, 4, 2)
    good = os.path.join(args.work, "good")
    llama().save_pretrained(good, safe_serialization=True)
    for how in ["missing", "shape", "truncated", "offsets"]:
        bad = os.path.join(args.work, "bad-" + how)
        name, path = corrupt(good, bad, how)
        out_dir = os.path.join(args.work, "out-" + how)
        ckpt = os.path.join(args.work, "ckpt-" + how)
        p = run(args, ["run", "--init-from", bad, "--training", training, "--plan", plan, "--steps", "1", "--data", data,
                       "--save-hf", out_dir, "--save", ckpt, "--skip-memory-check"], expect=2)
        names_tensor = name in p.stderr or how == "truncated"
        names_file = "model.safetensors" in p.stderr
        check(names_tensor and names_file and not os.path.exists(out_dir) and not os.path.exists(ckpt),
              f"bad checkpoint ({how}): exit 2, names {'the file' if how == 'truncated' else 'the tensor and the file'}, "
              f"writes nothing: {p.stderr.strip()}")
        p = run(args, ["eval", "--weights", bad, "--data", data, "--seq-len", str(T)], expect=2)
        check("model.safetensors" in p.stderr, f"bad checkpoint ({how}): eval exits 2 naming the file")
    # A Llama-2-70B-shaped checkpoint (a sparse file: the header is real, the 138 GB of bf16 data
    # are holes) is refused by eval's memory check before a byte of it is read: exit 1, naming --plan.
    big = os.path.join(args.work, "llama-70b")
    os.makedirs(big)
    h, f, layers, vocab, kv = 8192, 28672, 80, VOCAB, 1024
    shapes = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h], "lm_head.weight": [vocab, h]}
    for i in range(layers):
        p_ = f"model.layers.{i}."
        shapes.update({p_ + "input_layernorm.weight": [h], p_ + "post_attention_layernorm.weight": [h],
                       p_ + "self_attn.q_proj.weight": [h, h], p_ + "self_attn.k_proj.weight": [kv, h],
                       p_ + "self_attn.v_proj.weight": [kv, h], p_ + "self_attn.o_proj.weight": [h, h],
                       p_ + "mlp.gate_proj.weight": [f, h], p_ + "mlp.up_proj.weight": [f, h],
                       p_ + "mlp.down_proj.weight": [h, f]})
    header, at = {}, 0
    for name, shape in shapes.items():
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    with open(os.path.join(big, "model.safetensors"), "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        out.truncate(8 + len(text) + at)
    write_json(os.path.join(big, "config.json"), {
        "model_type": "llama", "num_hidden_layers": layers, "hidden_size": h, "intermediate_size": f,
        "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": vocab, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False})
    p = run(args, ["eval", "--weights", big, "--data", data, "--seq-len", str(T)], expect=1)
    check("needs about" in p.stderr and "--plan" in p.stderr,
          f"eval of a {at / 1e9:.0f} GB (bf16) checkpoint this host cannot hold: exit 1 before reading it: {p.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stagecraft", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("case", choices=["eval", "step-1", "step-pp2", "export", "bad"])
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    if args.case == "eval":
        case_eval(args)
    elif args.case == "step-1":
        case_step(args, 1)
    elif args.case == "step-pp2":
        if not args.mpirun:
            print("skipped: needs mpirun")
            sys.exit(77)
        case_step(args, 4)
    elif args.case == "export":
        case_export(args)
    else:
        case_bad(args)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
