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

    # --dtype: the same plan's parameters take 4 bytes each in fp32 and 2 in bf16 (memory.params is
    # the rank's own working-parameter bytes; the element count does not change with the format).
    big = ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100-ndr", "--training", "demo-13b-1024", "--plan",
           "demo-13b", "--no-error-bars", "--json"]
    bf16 = run(s, *big)
    fp32 = run(s, *big, "--dtype", "fp32")
    check(close(fp32["memory"]["params"], 2 * bf16["memory"]["params"]),
          "simulate --dtype fp32: parameter bytes twice bf16's (4 / 2 bytes an element)")
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
