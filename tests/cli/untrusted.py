"""Results that cannot be trusted are not printed as results (docs/reliability.md, "Results that
cannot be trusted"): weights holding NaN are named, not scored; a measured trace missing
instructions is refused, not compared; --set training.* reaches a DeepSpeed config's training; a
search's explanation never prints an unset bound.

usage: untrusted.py STAGECRAFT"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

from clitest import Checks, call


def poison(folder, element):
    """Writes NaN over one float32 element of the first F32 tensor of folder/model.safetensors;
    returns that tensor's name."""
    path = os.path.join(folder, "model.safetensors")
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        name, info = next((k, v) for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
        f.seek(8 + n + info["data_offsets"][0] + 4 * element)
        f.write(struct.pack("<f", math.nan))
    return name


def main():
    stagecraft = sys.argv[1]
    check = Checks()
    d = tempfile.mkdtemp(prefix="stagecraft_untrusted_")
    tiny = ["--model", "tiny", "--training", "tiny-cpu"]

    # Weights with a NaN: eval and run --init-from name the tensor and exit 1 (eval printed "nan",
    # exit 0; run said the training diverged).
    hf = os.path.join(d, "hf")
    r = call(stagecraft, "run", *tiny, "--plan", "one-gpu", "--steps", "1", "--save-hf", hf)
    check(r.returncode == 0, f"run --save-hf wrote a folder (exit {r.returncode})")
    name = poison(hf, 5)
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog. " * 200)
    r = call(stagecraft, "eval", "--weights", hf, "--data", text, "--sequences", "2")
    check(r.returncode == 1 and name in r.stderr and "non-finite" in r.stderr and "nan" not in r.stdout,
          f"eval of weights holding NaN: exit {r.returncode} (expected 1), names {name}: {r.stderr.strip()[:160]}")
    r = call(stagecraft, "run", "--training", "tiny-cpu", "--plan", "one-gpu", "--steps", "1", "--init-from", hf)
    check(r.returncode == 1 and name in r.stderr and "the training diverged" not in r.stderr,
          f"run --init-from weights holding NaN: exit {r.returncode} (expected 1), names {name}")

    # A measured trace missing instructions: refused (exit 2) with how many are missing, not a
    # step-time error over part of the step.
    sim = os.path.join(d, "sim.json")
    r = call(stagecraft, "simulate", *tiny, "--plan", "tiny-pp2-dp2", "--cluster", "cpu-local", "--nodes", "2", "--trace", sim)
    check(r.returncode == 0, f"simulate --trace (exit {r.returncode})")
    doc = json.load(open(sim))
    events = doc["traceEvents"]
    backward = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("Backward") and e.get("pid") == 0]
    cut = [e for e in events if e not in backward]
    doc["traceEvents"] = cut
    cut_path = os.path.join(d, "cut.json")
    json.dump(doc, open(cut_path, "w"))
    r = call(stagecraft, "compare", sim, cut_path)
    check(len(backward) > 0 and r.returncode == 2 and f"{len(backward)} of " in r.stderr and "are missing" in r.stderr
          and "cut.json" in r.stderr,
          f"compare of a trace without rank 0's {len(backward)} backward passes: exit {r.returncode} (expected 2): "
          f"{r.stderr.strip()[:200]}")

    # Calibration cannot diverge: the same trace with every time divided by 10 (a machine 10x faster
    # than cpu-local) fits inside the physical bounds, ends on one (a GEMM efficiency of 1: faster
    # than the peak), and is refused: exit 1 with the fit's residuals, and neither file written.
    doc = json.load(open(sim))
    for e in doc["traceEvents"]:
        for k in ("ts", "dur"):
            if isinstance(e.get(k), (int, float)):
                e[k] = e[k] / 10
    fast = os.path.join(d, "fast.json")
    json.dump(doc, open(fast, "w"))
    out = os.path.join(d, "fast-cal.json")
    r = call(stagecraft, "calibrate", fast, "--cluster", "cpu-local", "-o", out)
    check(r.returncode == 1 and "the fit failed" in r.stderr and "raise the peak" in r.stderr
          and "RMS relative residual" in r.stderr and "Nothing written" in r.stderr,
          f"calibrate of a trace 10x faster than its base: exit {r.returncode} (expected 1): {r.stderr.strip()[:300]}")
    check(not os.path.exists(out) and not os.path.exists(os.path.join(d, "fast-cal.calibration.json")),
          "calibrate of a trace 10x faster than its base wrote nothing")

    # --set training.* on a DeepSpeed config: applied and checked as on a training file.
    ds = os.path.join(d, "ds.json")
    json.dump({"train_batch_size": 8, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}, open(ds, "w"))
    base = ["simulate", "--model", "tiny", "--cluster", "cpu-local", "--deepspeed", ds, "--json"]
    r = call(stagecraft, *base, "--set", "training.nonsense=3")
    check(r.returncode == 2 and "nonsense" in r.stderr, f"--deepspeed with --set training.nonsense=3: exit {r.returncode}")
    a = call(stagecraft, *base)
    b = call(stagecraft, *base, "--set", "training.dtype=fp32")
    ok = a.returncode == 0 and b.returncode == 0
    check(ok and json.loads(a.stdout)["precision"]["dtype"] == "bf16" and json.loads(b.stdout)["precision"]["dtype"] == "fp32",
          "--deepspeed with --set training.dtype=fp32 simulates fp32 (the config says bf16)")

    # A --full trace no host can hold: sized before simulating and refused with its numbers (exit 1),
    # not an abort once memory runs out. GPT-3 175B on 1,048,576 GPUs, 64 micro-batches: about 7
    # billion instruction events, terabytes at 150 bytes each. Not in a sanitized build: it checks
    # every lowering (program::check over a million ranks' messages), minutes for this one.
    sanitized = b"__asan_init" in open(stagecraft, "rb").read()
    huge = os.path.join(d, "huge.json")
    json.dump({"tp": 8, "pp": 8, "dp": 16384, "micro_batch": 1, "micro_batches": 64, "schedule": "1f1b",
               "zero": {"stage": 1}}, open(huge, "w"))
    trace = os.path.join(d, "huge-trace.json")
    if not sanitized:
        r = call(stagecraft, "simulate", "--model", "gpt3-175b", "--cluster", "dgx-h100-ndr", "--nodes", "131072", "--training",
                 "gpt3-175b-1536", "--global-batch", str(16384 * 64), "--plan", huge, "--full", "--trace", trace, timeout=120)
        check(r.returncode == 1 and "events (an instruction of each of its 1048576 ranks)" in r.stderr
              and "of memory to simulate and write" in r.stderr and not os.path.exists(trace),
              f"simulate --full --trace of a million GPUs: exit {r.returncode} (expected 1), nothing written: "
              f"{r.stderr.strip()[:200]}")

    # Memory that runs out anyway (here a 400 MB address-space limit) is exit 1 "out of memory", not an
    # internal error. Not under AddressSanitizer, whose shadow memory needs terabytes of address space.
    if not sanitized:
        r = subprocess.run(["bash", "-c", "ulimit -v 400000; exec \"$0\" simulate --model gpt3-13b --cluster dgx-h100-ndr "
                            "--nodes 8 --training demo-13b-1024 --plan demo-13b --full --trace \"$1\" --no-error-bars",
                            stagecraft, os.path.join(d, "oom.json")], capture_output=True, text=True, timeout=300)
        check(r.returncode == 1 and "out of memory" in r.stderr and "internal error" not in r.stderr,
              f"simulate out of memory (ulimit -v 400000): exit {r.returncode} (expected 1): {r.stderr.strip()[:120]}")

    # The explanation of an axis whose plans are all dominated (offload where everything fits).
    r = call(stagecraft, "search", *tiny, "--cluster", "cpu-local", "--offload", "none,cpu", "--no-progress")
    check(r.returncode == 0 and "8589934592" not in r.stdout and "offload = cpu: every such plan is dominated" in r.stdout,
          "search --offload none,cpu: the offload alternative is called dominated, with no memory bound")
    check.finish()


if __name__ == "__main__":
    main()
