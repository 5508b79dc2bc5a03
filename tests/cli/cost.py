#!/usr/bin/env python3
"""Cost and time to train on the command line: simulate and search --json give GPU-hours, money and
energy that this script derives again from the step time they report (GPUs × step time × price),
search over several sizes picks by --objective, and bad values exit 2 naming the option or key.

    cost.py STAGECRAFT
"""
import json
import math
import os
import sys
import tempfile

from clitest import Checks, call, close, run


def main():
    s = sys.argv[1]
    check = Checks()

    # simulate: demo-13b is tp8 pp2 dp4 = 64 GPUs of dgx-h100-ndr (8 per node, 10.2 kW a node),
    # global batch 1024 × 2048 tokens.
    sim = ["simulate", "--model", "gpt3-13b", "--cluster", "dgx-h100-ndr", "--training", "demo-13b-1024",
           "--plan", "demo-13b", "--json"]
    j = run(s, *sim, "--tokens", "300B", "--gpu-hour-price", "2.5", "--currency", "EUR")
    c, t = j["cost"], j["step_time_s"]
    gpus, tokens_per_step = 64, 1024 * 2048
    check(c["gpus"] == gpus and close(c["tokens_per_step"], tokens_per_step), "simulate: 64 GPUs, 1024 × 2048 tokens a step")
    check(close(c["gpu_hours_per_step"], gpus * t / 3600), "simulate: GPU-hours a step = 64 × step / 3600")
    check(close(c["cost_per_step"], gpus * t / 3600 * 2.5), "simulate: cost a step = 64 × step / 3600 × 2.5")
    check(close(c["cost_per_million_tokens"], gpus * t / 3600 * 2.5 * 1e6 / tokens_per_step),
          "simulate: cost per million tokens = cost a step × 1e6 / tokens a step")
    check(c["price"]["currency"] == "EUR" and c["price"]["source"] == "--gpu-hour-price", "simulate: the price says where it came from")
    steps = math.ceil(300e9 / tokens_per_step)
    tr = c["train"]
    check(tr["steps"] == steps, f"simulate --tokens 300B: ⌈3e11 / {tokens_per_step}⌉ = {steps} steps")
    check(close(tr["seconds"], steps * t), "simulate --tokens: time to train = steps × step time")
    check(close(tr["cost"], steps * gpus * t / 3600 * 2.5), "simulate --tokens: cost to train = steps × 64 × step / 3600 × 2.5")
    check(tr["energy_basis"] == "node" and close(tr["power_watts"], 64 / 8 * 10200),
          "simulate --tokens: energy bound at 8 nodes × 10.2 kW")
    check(close(tr["energy_kwh_max"], steps * t * 81600 / 3.6e6), "simulate --tokens: energy ≤ time × 81.6 kW / 3.6e6 J/kWh")
    lo, hi = tr["seconds_range"]
    u = j["uncertainty"]
    check(close(lo, steps * u["step_time_s"]["low"]) and close(hi, steps * u["step_time_s"]["high"]),
          "simulate --tokens: the time range is steps × the 1σ step range")

    # Without a price: GPU-hours only, money null.
    bare = run(s, *sim, "--no-error-bars")
    check(bare["cost"]["price"] is None and bare["cost"]["cost_per_step"] is None, "simulate without a price: no money figures")
    check("train" not in bare["cost"], "simulate without --tokens: no training budget")

    # A price in the cluster file is read; a bad one exits 2 naming the key.
    with tempfile.TemporaryDirectory() as d:
        cfg = os.environ.get("STAGECRAFT_CONFIG_DIR", "")
        with open(os.path.join(cfg, "clusters", "dgx-h100-ndr.json")) as f:
            cluster = json.load(f)
        cluster["price"] = {"per_gpu_hour": 3.0, "currency": "USD", "source": "test"}
        good = os.path.join(d, "priced.json")
        with open(good, "w") as f:
            json.dump(cluster, f)
        sim_file = [a if a != "dgx-h100-ndr" else good for a in sim]
        p = run(s, *sim_file, "--no-error-bars")
        check(close(p["cost"]["cost_per_step"], gpus * p["step_time_s"] / 3600 * 3.0), "cluster file price 3.0: cost a step")
        cluster["price"]["per_gpu_hour"] = -1
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:
            json.dump(cluster, f)
        r = call(s, *[a if a != "dgx-h100-ndr" else bad for a in sim])
        check(r.returncode == 2 and "/price/per_gpu_hour" in r.stderr, "a negative price: exit 2 naming /price/per_gpu_hour")
        cluster["price"] = {"per_gpu_hour": 3.0, "currency": "dollars"}
        with open(bad, "w") as f:
            json.dump(cluster, f)
        r = call(s, *[a if a != "dgx-h100-ndr" else bad for a in sim])
        check(r.returncode == 2 and "/price/currency" in r.stderr, "currency \"dollars\": exit 2 naming /price/currency")
    for args, option in ((["--tokens", "1X"], "--tokens"), (["--tokens", "0"], "--tokens"),
                         (["--gpu-hour-price", "nan"], "--gpu-hour-price"), (["--currency", "eur"], "--currency")):
        r = call(s, *sim, *args)
        check(r.returncode == 2 and option in r.stderr, f"simulate {' '.join(args)}: exit 2 naming {option}")

    # search over sizes: the tiny model on cpu-local (2 GPUs a node) at 1 and 2 nodes.
    base = ["search", "--model", "tiny", "--cluster", "cpu-local", "--training", "tiny-cpu", "--no-progress",
            "--no-error-bars", "--json", "--tokens", "1M", "--gpu-hour-price", "1"]
    for objective in ("time", "cost"):
        r = run(s, *base, "--nodes", "1,2", "--objective", objective)
        sizes = r["sizes"]
        check([z["gpus"] for z in sizes] == [2, 4], f"search --nodes 1,2 --objective {objective}: sizes 2 and 4 GPUs")
        best = [z["plans"][0] for z in sizes]
        for z, b in zip(sizes, best):
            t = b["metrics"]["step_time_s"]
            check(close(b["cost"]["gpu_hours_per_step"], z["gpus"] * t / 3600),
                  f"search: {z['gpus']} GPUs, GPU-hours a step = GPUs × step / 3600")
        # time per token and GPU-hours per token decide (planner/sizes.hpp)
        tpt = [b["metrics"]["step_time_s"] / b["cost"]["tokens_per_step"] for b in best]
        cpt = [b["cost"]["gpu_hours_per_million_tokens"] for b in best]
        want = min(range(2), key=lambda i: (tpt[i], sizes[i]["gpus"])) if objective == "time" else \
            min(range(2), key=lambda i: (cpt[i], tpt[i], sizes[i]["gpus"]))
        check(r["chosen"] == sizes[want]["gpus"], f"search --objective {objective}: chose {sizes[want]['gpus']} GPUs")
        dominated = [any(j != i and tpt[j] <= tpt[i] and cpt[j] <= cpt[i] and (tpt[j] < tpt[i] or cpt[j] < cpt[i])
                         for j in range(2)) for i in range(2)]
        check([z["on_time_cost_front"] for z in sizes] == [not d for d in dominated], "search: the time-cost front")
    r = call(s, *base, "--nodes", "1,2", "--gpus", "2")
    check(r.returncode == 2 and "--gpus" in r.stderr, "search --nodes 1,2 --gpus 2: exit 2")
    r = call(s, *base, "--nodes", "1,1")
    check(r.returncode == 2 and "twice" in r.stderr, "search --nodes 1,1: exit 2, the same size twice")

    # Goodput (sim/goodput.hpp), derived again from the figures the JSON gives: h100-roce-400g-16k
    # carries a reliability section; 4 nodes of it are 32 GPUs.
    g_runs = run(s, "search", "--model", "gpt3-1.3b", "--cluster", "h100-roce-400g-16k", "--nodes", "4", "--training",
                 "demo-13b-1024", "--tokens", "100B", "--no-progress", "--no-error-bars", "--top", "1", "--json")
    cost = g_runs["plans"][0]["cost"]
    g = cost["train"]["goodput"]
    rate = 1.973e-5 * 32                       # the profile's failures per GPU-hour × 32 GPUs
    M = 3600 / rate
    delta = g["checkpoint_bytes"] / 2e12       # the profile's 2 TB/s store
    R = 600 + delta
    x = delta / (2 * M)
    tau = math.sqrt(2 * delta * M) * (1 + math.sqrt(x) / 3 + x / 9) - delta
    Ts = cost["train"]["seconds"]
    Tw = M * math.exp(R / M) * math.expm1((tau + delta) / M) * Ts / tau
    check(close(g["failures_per_hour"], rate) and close(g["mtbf_s"], M), "goodput: 32 GPUs x 1.973e-5 failures a GPU-hour")
    check(close(g["interval_s"], tau), f"goodput: Daly's interval {tau:.1f} s")
    check(close(g["wall_s"], Tw) and close(g["goodput"], Ts / Tw), f"goodput: {Ts / Tw:.4%} of {Tw:.0f} s")
    r = call(s, *base, "--nodes", "1,2", "--objective", "goodput")
    check(r.returncode == 2 and "reliability" in r.stderr, "search --objective goodput on a profile without reliability: exit 2")
    r = call(s, "search", "--model", "gpt3-1.3b", "--cluster", "h100-roce-400g-16k", "--nodes", "1,2", "--training",
             "demo-13b-1024", "--objective", "goodput")
    check(r.returncode == 2 and "--tokens" in r.stderr, "search --objective goodput without --tokens: exit 2")

    check.finish()


if __name__ == "__main__":
    main()
