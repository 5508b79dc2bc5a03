#!/usr/bin/env python3
"""--seq-len, --global-batch and --dtype reach the numbers (and simulate --json says what limits the
plan): each expected value is derived here from the model's shapes, not copied from an earlier output.

    training_length.py STAGECRAFT
"""
import json
import os
import subprocess
import sys
import tempfile

from clitest import Checks, call, close, run


def main():
    s = sys.argv[1]
    check = Checks()

    # info: the tiny model (4 layers, hidden 64, learned positions, seq_len 64). Attention scores
    # cost 4·s·h FLOPs per token and block forward, so halving s to 32 removes 4 × 4·32·64 = 32768
    # FLOPs per token; the 64-row position table stays, so the parameter count does not change.
    base = run(s, "info", "--model", "tiny", "--json")
    short = run(s, "info", "--model", "tiny", "--seq-len", "32", "--json")
    layers, h = base["model"]["layers"], base["model"]["hidden"]
    check(short["model"]["seq_len"] == 32, "info --seq-len 32: model.seq_len is 32")
    check(close(base["flops_per_token_fwd"] - short["flops_per_token_fwd"], layers * 4 * (64 - 32) * h),
          "info --seq-len 32: forward FLOPs per token fall by layers·4·Δs·h = %d" % (layers * 4 * 32 * h))
    check(short["parameters"] == base["parameters"], "info --seq-len 32: the learned table keeps its rows")

    # simulate: tokens per step = global_batch × seq_len = tokens_per_s × step_time_s.
    sim = ["simulate", "--model", "tiny", "--cluster", "cpu-local", "--gpus", "2", "--training", "tiny-cpu",
           "--plan", "tiny-zero3", "--no-error-bars", "--json"]
    for seq in (64, 32):
        m = run(s, *sim, "--seq-len", str(seq))
        tokens = m["tokens_per_s"] * m["step_time_s"]
        check(close(tokens, 8 * seq, 1e-6), f"simulate --seq-len {seq}: tokens per step {tokens:.3f} = 8 × {seq}")

    # run --json: the model FLOP/s it reached and its MFU. The tiny model's forward FLOPs per token,
    # by hand: per block 2 × 12h² (QKV 3h², projection h², MLP 2 × 4h²) + attention 4·s·h, four
    # blocks, and the head's 2·h·V: 4 × (2·12·64² + 4·64·64) + 2·64·256 = 491520; training is 3× the
    # forward. MFU is over cpu-local's fp32 peak as its cluster file gives it.
    fwd = layers * (2 * 12 * h * h + 4 * 64 * h) + 2 * h * base["model"]["vocab"]
    check(fwd == 491520, f"the tiny model's forward FLOPs per token by hand: {fwd}")
    trained = run(s, "run", "--model", "tiny", "--training", "tiny-cpu", "--plan", "one-gpu", "--steps", "2", "--json")
    want = trained["tokens_per_s"] * 3 * fwd / 1e12
    check(close(trained["model_tflops_per_gpu"], want, 1e-9),
          f"run --json: model TFLOP/s per GPU {trained['model_tflops_per_gpu']:.6g} = tokens/s × 3 × {fwd} / 1e12")
    with open(os.path.join(os.environ.get("STAGECRAFT_CONFIG_DIR", "configs"), "clusters", "cpu-local.json")) as f:
        peak = json.load(f)["gpu"]["peak_flops"]["fp32"]
    check(close(trained["mfu"], want * 1e12 / peak, 1e-9), f"run --json: MFU {trained['mfu']:.4g} over cpu-local's fp32 peak {peak:.4g}")

    # --dtype: the same plan's parameters take 4 bytes each in fp32 and 2 in bf16 (memory.params is
    # the rank's own working-parameter bytes; the element count does not change with the format).
    big = ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100-ndr", "--training", "demo-13b-1024", "--plan",
           "demo-13b", "--no-error-bars", "--json"]
    bf16 = run(s, *big)
    fp32 = run(s, *big, "--dtype", "fp32")
    check(close(fp32["memory"]["params"], 2 * bf16["memory"]["params"]),
          "simulate --dtype fp32: parameter bytes twice bf16's (4 / 2 bytes an element)")

    # --dtype fp8 (Transformer Engine): the block GEMMs at the FP8 peak, the rest bf16. demo-13b is
    # tp8 pp2: 20 blocks a stage; a block's linears are 5120 x (3·5120), 5120 x 5120, 5120 x 20480 and
    # 20480 x 5120 = 5120·61440 weights, /8 per rank. The FP8 state adds 2 bytes per weight (the FP8
    # copy and its transpose) and 5·1026·4 bytes of scaling state per linear, in "params".
    fp8 = run(s, *big, "--dtype", "fp8")
    per_rank = 5120 * 61440 // 8
    state = 20 * (2 * per_rank + 4 * 5 * 1026 * 4)
    check(fp8["memory"]["params"] - bf16["memory"]["params"] == state,
          f"simulate --dtype fp8: params grow by the FP8 state, 20 × (2 × {per_rank} + 4 × 20520) = {state}")
    check(fp8["step_time_s"] < bf16["step_time_s"], "simulate --dtype fp8: faster than bf16")
    check(fp8["precision"]["mfu_peak_flops"] == bf16["precision"]["mfu_peak_flops"] and
          close(fp8["precision"]["fp8_peak_flops"], 2 * fp8["precision"]["mfu_peak_flops"], 1e-4),
          "simulate --dtype fp8: MFU against the bf16 peak; the H100's FP8 peak is twice it (datasheet rounding)")
    check(close(fp8["mfu"] / bf16["mfu"], bf16["step_time_s"] / fp8["step_time_s"], 1e-6),
          "simulate --dtype fp8: MFU scales as 1 / step time (same model FLOPs, same peak)")
    check(fp8["memory"]["activations"] < bf16["memory"]["activations"], "simulate --dtype fp8: GEMM operands kept in 1 byte")
    with tempfile.TemporaryDirectory() as d:
        z3 = os.path.join(d, "z3.json")
        with open(z3, "w") as f:
            json.dump({"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "micro_batches": 256, "zero": {"stage": 3}}, f)
        r = call(s, *[a if a != "demo-13b" else z3 for a in big], "--dtype", "fp8")
        check(r.returncode == 2 and "/zero/stage" in r.stderr and "fp8" in r.stderr,
              "simulate --dtype fp8 with ZeRO-3: exit 2 naming /zero/stage and why")
    check(bf16["plan"]["micro_batches"] * bf16["plan"]["micro_batch"] * bf16["plan"]["dp"] == 1024,
          "simulate: the plan's batch is the training file's 1024")

    # simulate --json "limits": the largest of the three terms that partition the step.
    t = bf16["time"]
    largest = max([("compute", t["compute_s"]), ("exposed communication", t["exposed_comm_s"]),
                   ("pipeline bubble", t["bubble_s"])], key=lambda x: x[1])[0]
    check(bf16["limits"]["term"] == largest and bf16["limits"]["time"].startswith("limited by " + largest),
          f"simulate --json: limits.term is the largest time term ({largest})")

    # A Hugging Face config with a 32768-token limit is planned at 8192 and says so, unless a training
    # length is set: then the note would only be noise.
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "config.json")
        with open(cfg, "w") as f:
            json.dump({"model_type": "mistral", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                       "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 1000,
                       "max_position_embeddings": 32768}, f)
        note = "32768 is the longest sequence the model takes"
        plain = subprocess.run([s, "info", "--model", cfg], capture_output=True, text=True, timeout=60)
        check(plain.returncode == 0 and note in plain.stderr, "info without --seq-len: the default-length note is printed")
        given = subprocess.run([s, "info", "--model", cfg, "--seq-len", "4096"], capture_output=True, text=True, timeout=60)
        check(given.returncode == 0 and note not in given.stderr, "info --seq-len 4096: no default-length note")

    check.finish()


if __name__ == "__main__":
    main()
