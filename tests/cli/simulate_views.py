#!/usr/bin/env python3
"""What simulate shows besides the step time: memory by pipeline stage (the largest stage equals the
reported peak; each stage's kinds add up to its total) and, in a Qt build, --png drawing the
simulated timeline (a PNG whose header this script reads: 8-byte signature, IHDR width and height).

    simulate_views.py STAGECRAFT HAS_QT(0|1)
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

from clitest import Checks


def main():
    s, has_qt = sys.argv[1], sys.argv[2] == "1"
    check = Checks()

    base = ["simulate", "--model", "tiny", "--cluster", "cpu-local", "--nodes", "2", "--training", "tiny-cpu",
            "--plan", "tiny-pp2-dp2", "--no-error-bars"]
    r = subprocess.run([s, *base, "--json"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"FAIL: simulate --json: rc {r.returncode}\n{r.stderr}")
    j = json.loads(r.stdout)
    stages = j["stages"]
    check([x["stage"] for x in stages] == [0, 1], "--json stages: one entry per pipeline stage (pp = 2)")
    check(max(x["peak_memory_bytes"] for x in stages) == j["peak_memory_bytes"],
          "the largest stage peak is the plan's peak memory")
    check(all(sum(x["memory"].values()) == x["peak_memory_bytes"] for x in stages), "each stage's kinds add up to its peak")
    # tiny-pp2-dp2: rank = (stage·dp + d)·tp + t, so stage 1's first rank is 1·2·1 = 2
    check(all(x["rank"] // 2 == x["stage"] for x in stages), "each stage's rank belongs to it (rank // (dp·tp) = stage)")
    text = subprocess.run([s, *base], capture_output=True, text=True, timeout=120).stdout
    check("memory by stage" in text and "<- the tightest" in text, "text: the memory-by-stage table, tightest marked")

    # ZeRO-3's gathers and reductions: one communicator or one each, and why (spec::dp_communicator).
    # Under plain "deepspeed" with tp 2 the code is Megatron-DeepSpeed's (DeepSpeed's own tensor
    # parallelism trains with ZeRO 0-2 only): one communicator; with tp 1, a communicator each.
    with tempfile.TemporaryDirectory() as d:
        seen = {}
        for tp in (1, 2):
            plan = os.path.join(d, f"z3-tp{tp}.json")
            with open(plan, "w") as f:
                json.dump({"tp": tp, "dp": 4 // tp, "micro_batch": 1, "micro_batches": 8 * tp // 4,
                           "zero": {"stage": 3}}, f)
            args = ["simulate", "--model", "tiny", "--cluster", "cpu-local", "--nodes", "2", "--training", "tiny-cpu",
                    "--plan", plan, "--no-error-bars"]
            r = subprocess.run([s, *args, "--json"], capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                sys.exit(f"FAIL: simulate {plan}: rc {r.returncode}\n{r.stderr}")
            seen[tp] = json.loads(r.stdout).get("communicator")
            text = subprocess.run([s, *args], capture_output=True, text=True, timeout=120).stdout
            check("collectives ZeRO-3's parameter gathers and gradient reductions" in text, f"tp {tp}: the text says it")
        check(seen[2] is not None and seen[2]["shared"] and "Megatron-DeepSpeed" in seen[2]["why"],
              f"deepspeed ZeRO-3, tp 2: one communicator, Megatron-DeepSpeed's ({seen[2]})")
        check(seen[1] is not None and not seen[1]["shared"], f"deepspeed ZeRO-3, tp 1: a communicator each ({seen[1]})")
        # the training file's word: tp 2 told "separate" keeps a communicator each, and the text names the
        # file as the reason rather than offering it as the way to say otherwise
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "configs", "training", "tiny-cpu.json")) as f:
            training = dict(json.load(f), framework={"name": "deepspeed", "reduce_communicator": "separate"})
        path = os.path.join(d, "separate.json")
        with open(path, "w") as f:
            json.dump(training, f)
        args = ["simulate", "--model", "tiny", "--cluster", "cpu-local", "--nodes", "2", "--training", path,
                "--plan", os.path.join(d, "z3-tp2.json"), "--no-error-bars"]
        r = subprocess.run([s, *args, "--json"], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            sys.exit(f"FAIL: simulate {path}: rc {r.returncode}\n{r.stderr}")
        told = json.loads(r.stdout).get("communicator")
        check(told is not None and not told["shared"] and "reduce_communicator" in told["why"],
              f"deepspeed ZeRO-3, tp 2, told separate: a communicator each, the file named ({told})")
        line = next((x for x in subprocess.run([s, *args], capture_output=True, text=True, timeout=120).stdout.splitlines()
                     if x.startswith("collectives")), "")
        check("have a communicator each" in line and "otherwise" not in line,
              f"told by the file: the text says so without offering the file as a way out ({line!r})")
    check("communicator" not in j, "a ZeRO-1 plan: no communicator entry (nothing gathers beside the reductions)")

    with tempfile.TemporaryDirectory() as d:
        png = os.path.join(d, "sim.png")
        r = subprocess.run([s, *base, "--png", png], capture_output=True, text=True, timeout=120)
        if not has_qt:
            check(r.returncode == 1 and "needs a build with Qt6" in r.stderr, "--png without Qt: exit 1, says why")
        else:
            check(r.returncode == 0, f"--png: rc {r.returncode} {r.stderr.strip()}")
            data = open(png, "rb").read() if os.path.exists(png) else b""
            check(data[:8] == b"\x89PNG\r\n\x1a\n", "--png: a PNG file")
            if len(data) >= 24:
                width, height = struct.unpack(">II", data[16:24])
                # 2 simulated ranks × the lanes with events: at least 2 rows, drawn 1600 wide
                check(width > 0 and height > 0, f"--png: {width} × {height} pixels")
        r = subprocess.run([s, *base, "--png", "/proc/nope/x.png"], capture_output=True, text=True, timeout=120)
        check(r.returncode == 2 and "--png" in r.stderr, "--png into a folder that does not exist: exit 2 before any work")
    check.finish()


if __name__ == "__main__":
    main()
