#!/usr/bin/env python3
"""Regression tests for the bad-input audit (UX-AUDIT.md rows D1..D24): each case runs the
command line as a user would and checks the exit status and a fragment of stderr (and, where the
row was about a hang or a late failure, that it ends within its time limit).

    ux_audit.py STAGECRAFT [--only D4,D10]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "configs")


def write(dir, name, content):
    path = os.path.join(dir, name)
    with open(path, "w") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))
    return path


def make_inputs(d):
    """The adversarial files, written fresh in `d`; returns their paths by name."""
    def cfg(kind, name):
        with open(os.path.join(CONFIGS, kind, name + ".json")) as f:
            return json.load(f)
    p = {}
    p["deep"] = write(d, "deep.json", "[" * 200000 + "]" * 200000)
    p["deep_field"] = write(d, "deep-field.json", '{"name": "x", "layers": ' + "[" * 200000 + "]" * 200000 + "}")
    p["ds_gas0"] = write(d, "ds-gas0.json", {"train_batch_size": 64, "gradient_accumulation_steps": 0})
    p["ds_mb0"] = write(d, "ds-mb0.json", {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 0})
    p["ds_tp"] = write(d, "ds-tp.json", '{"train_batch_size": 64, "tensor_parallel": {"autotp_size": 4611686018427387904},'
                                        ' "pipeline": {"stages": 4}}')
    p["ds_typo_zero"] = write(d, "ds-typo-zero.json", {"train_batch_size": 64,
                                                     "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sizes": 1e7}})
    p["ds_typo_top"] = write(d, "ds-typo-top.json", {"train_batch_size": 64, "zero_optimisation": {"stage": 3}})
    p["ds_fp16_true"] = write(d, "ds-fp16-true.json", {"train_batch_size": 64, "fp16": True})
    p["ds_pp_zero3"] = write(d, "ds-pp-zero3.json", {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                                     "pipeline": {"stages": 2}, "zero_optimization": {"stage": 3}})
    p["utf16"] = os.path.join(d, "utf16.json")  # what Windows editors and PowerShell's > write
    with open(p["utf16"], "wb") as f:
        f.write('{"name": "tiny"}'.encode("utf-16"))
    p["overflow"] = write(d, "overflow.json", '{"name": "tiny", "layers": 1e400, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 64}')
    p["dup"] = write(d, "dup.json", '{"name": "tiny", "layers": 4, "layers": 8, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 64}')
    p["hex"] = write(d, "hex.json", '{"name": "tiny", "layers": "0x4", "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 64}')
    p["nemo"] = write(d, "nemo.json", {"model_type": "mistral", "hidden_size": 5120, "num_attention_heads": 32,
                                       "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 40,
                                       "intermediate_size": 14336, "vocab_size": 131072,
                                       "max_position_embeddings": 1024000, "hidden_act": "silu"})
    p["qwen2"] = write(d, "qwen2.json", {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
                                         "num_key_value_heads": 4, "num_hidden_layers": 28, "intermediate_size": 18944,
                                         "vocab_size": 152064, "max_position_embeddings": 131072,
                                         "tie_word_embeddings": False})
    p["mamba"] = write(d, "mamba.json", {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24})
    mistral = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
               "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 32000,
               "max_position_embeddings": 32768, "hidden_act": "silu", "sliding_window": 4096}
    p["mistral"] = write(d, "mistral.json", mistral)
    p["train_seq_big"] = write(d, "train-seq.json", {"global_batch": 1024, "dtype": "bf16", "seq_len": 40000})
    notype = dict(mistral)
    del notype["model_type"]
    p["notype"] = write(d, "notype.json", notype)
    c = cfg("clusters", "dgx-h100-ndr")
    del c["gpu"]["peak_flops"]["bf16"]
    p["no_bf16"] = write(d, "no-bf16.json", c)
    c = cfg("clusters", "dgx-h100-ndr")
    c["inter_node"]["nic_bandwidth_Bps"] = 1e-300
    p["slow_nic"] = write(d, "slow-nic.json", c)
    c = cfg("clusters", "dgx-h100-ndr")
    c["inter_node"]["latency_ns"] = 9e18
    p["slow_latency"] = write(d, "slow-latency.json", c)
    p["huge"] = write(d, "huge.json", {"name": "huge", "layers": 16384, "hidden": 262144, "heads": 2048,
                                       "ffn_hidden": 1048576, "vocab": 16777216, "seq_len": 2048})
    p["batch1e18"] = write(d, "batch1e18.json", '{"global_batch": 1e18, "dtype": "bf16"}')
    p["plan_1rank"] = write(d, "plan-1rank.json", {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "micro_batches": 8})
    p["adir"] = d
    return p


def sim_trace(stagecraft, d, env):
    """A simulated trace with a negative duration and one with ts 1e300."""
    path = os.path.join(d, "sim.json")
    subprocess.run([stagecraft, "simulate", "--model", "tiny", "--training", "tiny-cpu", "--plan", "tiny-pp2-dp2",
                    "--cluster", "cpu-local", "--nodes", "2", "--trace", path, "--no-error-bars"],
                   env=env, check=True, capture_output=True)
    with open(path) as f:
        t = json.load(f)
    x = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    x[0]["dur"] = -40
    neg = write(d, "sim-negative-dur.json", t)
    x[0]["dur"] = 1
    x[0]["ts"] = 1e300
    far = write(d, "sim-far-ts.json", t)
    return path, neg, far


def cases(s, p, t):
    tiny = ["--model", "tiny", "--training", "tiny-cpu"]
    search = ["search", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--training", "demo-13b-1024",
              "--no-progress", "--no-error-bars"]
    return [
        # id, argv, rc, stderr fragment, options
        ("D1", ["info", "--model", p["deep"]], 2, "nested deeper than 256 levels", {}),
        ("D1", ["info", "--model", p["deep_field"]], 2, "/layers/0/0", {}),
        ("D1", ["simulate", "--model", "tiny", "--cluster", p["deep"], "--training", "tiny-cpu", "--plan", "tiny-zero3"], 2,
         "nested deeper", {}),
        ("D2", ["simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--deepspeed", p["ds_gas0"]], 2,
         "/gradient_accumulation_steps: Gradient accumulation steps: 0 has to be greater than 0", {}),
        ("D2", ["search", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--deepspeed", p["ds_mb0"]], 2,
         "/train_micro_batch_size_per_gpu: Micro batch size per gpu: 0", {}),
        ("D2", ["simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--deepspeed", p["ds_tp"]], 2,
         "/tensor_parallel/autotp_size", {}),
        ("D4", ["run", "--model", "gpt3-1.3b", "--training", "tiny-cpu", "--plan", p["plan_1rank"], "--steps", "1"], 1,
         "per rank (the simulator's memory model", {"timeout": 60}),
        ("D5", search + ["--threads", "2000"], 2, "--threads: expected a positive integer (at most 1024)", {}),
        ("D5", search + ["--threads", "1000"], 1, "cannot start 1000 worker threads", {"ulimit_v": 1500000, "timeout": 60}),
        # Mistral-NeMo's head_dim 128 (not 5120 / 32): 12,247,782,400 parameters, as published
        ("D6", ["info", "--model", p["nemo"]], 0, "12,247,782,400", {"in_stdout": True}),
        ("D6", ["info", "--model", p["qwen2"]], 0, "7,615,616,512", {"in_stdout": True}),
        ("D6", ["info", "--model", p["mamba"]], 2, "/model_type: expected one of the families", {}),
        ("D6", ["info", "--model", p["mistral"]], 0, "/sliding_window: 4096 is noted", {}),
        ("D6", ["info", "--model", p["notype"]], 2, "/model_type: missing", {}),
        ("D6", ["info", "--model", p["mistral"]], 0,
         "/max_position_embeddings: 32768 is the longest sequence the model takes, not a training length", {}),
        ("D6", ["search", "--model", p["mistral"], "--cluster", "dgx-h100-ndr", "--training", "demo-13b-1024",
                "--seq-len", "40000", "--no-progress"], 2, "--seq-len: expected at most 32768", {}),
        ("D6", ["search", "--model", p["mistral"], "--cluster", "dgx-h100-ndr", "--training", p["train_seq_big"],
                "--no-progress"], 2, "train-seq.json: /seq_len: expected at most 32768", {}),
        ("D6", ["run"] + tiny + ["--plan", p["plan_1rank"], "--global-batch", "3"], 2,
         "to equal global_batch 3 of " + os.path.join(CONFIGS, "training", "tiny-cpu.json") + " with --global-batch 3", {}),
        ("D6", ["simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--deepspeed", p["ds_fp16_true"],
                "--dtype", "bf16"], 2, "--deepspeed excludes --dtype", {}),
        ("D7", ["info", "--model", p["overflow"]], 2, "invalid JSON at line 1, column", {}),
        ("D10", ["info", "--model", "tiny"], 2, "cannot write to standard output", {"stdout": "/dev/full"}),
        ("D10", ["export", "deepspeed"] + tiny + ["--plan", "tiny-zero3"], 2, "cannot write to standard output",
         {"stdout": "/dev/full"}),
        ("D10", ["run"] + tiny + ["--plan", "tiny-zero3", "--save", "/proc/nope/ck"], 2, "--save: cannot", {}),
        ("D10", ["run"] + tiny + ["--plan", "tiny-zero3", "--trace", "/proc/nope/t.json"], 2,
         "--trace: cannot write /proc/nope/t.json: the folder /proc/nope does not exist", {}),
        ("D10", ["demo", "--out", p["deep"]], 2, "exists and is not a folder", {}),
        ("D10", ["compare", t[0], t[0], "--png", "/proc/nope/x.png"], 2, "--png: cannot write", {}),
        ("D11", ["compare", t[0], t[1]], 2, "/dur: expected a duration from 0", {}),
        ("D11", ["compare", t[0], t[2]], 2, "/ts: expected a timestamp", {}),
        ("D12", ["calibrate", t[0], "--cluster", "cpu-local", "-o", t[0]], 2, "-o is the input", {}),
        ("D15", search + ["--gpus", "8", "--pp", "16"], 2, "--pp: expected a divisor of the 8 GPUs", {}),
        ("D15", search + ["--gpus", "8", "--micro-batch", "3"], 2, "--micro-batch: expected a divisor of global_batch 1024", {}),
        ("D15", search + ["--pp", "0"], 2, "--pp: expected a positive integer", {}),
        ("D15", ["simulate", "--model", "gpt3-13b", "--cluster", p["no_bf16"], "--training", "demo-13b-1024", "--plan",
                 "demo-13b", "--no-error-bars"], 2, "/gpu/peak_flops/bf16: missing", {}),
        ("D15", ["search", "--model", "gpt3-1.3b", "--cluster", p["slow_nic"], "--training", "demo-13b-1024"], 2,
         "/inter_node/nic_bandwidth_Bps: expected a value from 1000", {}),
        ("D15", ["search", "--model", "gpt3-1.3b", "--cluster", p["slow_latency"], "--training", "demo-13b-1024"], 2,
         "/inter_node/latency_ns: expected an integer from 0", {}),
        ("D16", ["search", "--model", p["huge"], "--cluster", "dgx-h100-ndr", "--training", "demo-13b-1024", "--no-progress"],
         1, "even fully sharded over all 64 GPUs", {"timeout": 20}),
        ("D16", ["search", "--model", "tiny", "--cluster", "cpu-local", "--training", p["batch1e18"]], 2,
         "/global_batch: expected a positive number of sequences, at most 16777216", {}),
        ("D17", ["run"] + tiny + ["--plan", "tiny-zero3", "--lr", "nan"], 2, "--lr: expected a finite number > 0", {}),
        ("D17", search + ["--pareto-window", "nan"], 2, "--pareto-window: expected a finite number >= 0", {}),
        ("D17", ["run", "--model", "tiny", "--training", "tiny-cpu", "--plan", p["plan_1rank"], "--steps", "4", "--lr", "1e30"],
         1, "the training diverged", {"timeout": 60}),
        ("D18", ["info", "--model", p["dup"]], 2, "/layers: duplicate key \"layers\"", {}),
        ("D9", ["simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--deepspeed", p["ds_typo_zero"]], 2,
         "did you mean \"stage3_prefetch_bucket_size\"?", {}),
        ("D9", ["simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--deepspeed", p["ds_typo_top"]], 0,
         "\"zero_optimisation\": not a key DeepSpeed reads, so DeepSpeed ignores it and so does this import "
         "(did you mean \"zero_optimization\"?)", {}),
        ("D9", ["simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--deepspeed", p["ds_fp16_true"]], 2,
         "/fp16: expected an object such as {\"enabled\": true}, got true", {}),
        ("D9", ["simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-h100-ndr", "--deepspeed", p["ds_pp_zero3"]], 0,
         "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism", {}),
        ("D19", ["info", "--model", p["adir"]], 2, "is a directory", {}),
        ("D20", ["search", "--model", "tiny", "--cluster", "cpu-local", "--training", "tiny-cpu", "--nodes", "0"], 2,
         "--nodes: expected a positive integer (at most 1048576), got \"0\"", {}),
        ("D20", ["explore"], 2, "unknown command \"explore\"", {}),
        ("D21", ["info", "--model", p["hex"]], 2, "numbers are written without quotes", {}),
        ("D24", ["probe", "--gemm", "200000", "--tests", "all_reduce"], 2, "the probe needs about", {"timeout": 60}),
        # issue 49's unclear messages: UTF-16 read as a syntax error at byte 0; control characters
        # echoed raw (an escape sequence recolours the terminal)
        ("U1", ["info", "--model", p["utf16"]], 2, "encoded as UTF-16 or UTF-32 (its first bytes are a byte-order mark)", {}),
        ("U2", ["info", "--model", "evil\x1b[31mred"], 2, "evil\\x1b[31mred: ", {}),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stagecraft")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    env = dict(os.environ, STAGECRAFT_CONFIG_DIR=CONFIGS, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    d = tempfile.mkdtemp(prefix="stagecraft-ux-")
    failed = 0
    try:
        p = make_inputs(d)
        t = sim_trace(a.stagecraft, d, env)
        for row, argv, rc, fragment, o in cases(a.stagecraft, p, t):
            if only and row not in only:
                continue
            if "ulimit_v" in o and "ASAN_OPTIONS" in os.environ:
                print(f"skip {row:<4} (a capped address space cannot hold AddressSanitizer's shadow memory)")
                continue
            cmd = [a.stagecraft] + argv
            if "ulimit_v" in o:
                cmd = ["bash", "-c", f"ulimit -v {o['ulimit_v']}; exec \"$@\"", "bash"] + cmd
            stdout = open(o["stdout"], "w") if "stdout" in o else subprocess.PIPE if o.get("in_stdout") else subprocess.DEVNULL
            try:
                r = subprocess.run(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True, errors="replace",
                                   timeout=o.get("timeout", 30))
                got_rc, err = r.returncode, (r.stdout if o.get("in_stdout") else r.stderr)
            except subprocess.TimeoutExpired:
                got_rc, err = "timeout", ""
            finally:
                if "stdout" in o:
                    stdout.close()
            ok = got_rc == rc and fragment in err
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {row:<4} rc {got_rc} (want {rc})  {' '.join(argv)[:90]}")
            if not ok:
                print(f"     {'stdout' if o.get('in_stdout') else 'stderr'} lacks {fragment!r}:\n     " + err.strip().replace("\n", "\n     ")[:1500])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"ux_audit: {failed} failed" if failed else "ux_audit: all cases behave as documented")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
