"""Interrupted work (docs/reliability.md, "Interrupted work"): search, sweep and run stop at SIGINT or
SIGTERM once the piece in flight is done, keep and report what they finished, and exit 128 + the
signal (130, 143). Also: `--save-every N` checkpoints every N steps, and a search under mpirun exits
0 on every rank when it found plans.

usage: interrupt.py STAGECRAFT [MPIRUN]"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

from clitest import Checks, call


def start(stagecraft, *args):
    return subprocess.Popen([stagecraft, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_file_text(path, text, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if os.path.exists(path) and text in open(path).read():
            return True
        time.sleep(0.05)
    return False


def main():
    stagecraft = sys.argv[1]
    mpirun = sys.argv[2] if len(sys.argv) > 2 else ""
    check = Checks()
    d = tempfile.mkdtemp(prefix="stagecraft_interrupt_")
    # A search of minutes (GPT-3 175B on 1024 A100s enumerates ~4 million candidates first): the
    # signal always arrives while it runs. Not in a sanitized build, where enumerating them before the
    # first batch (where the stop is taken) takes minutes; the sweep and the run below use the same
    # handler there.
    sanitized = b"__asan_init" in open(stagecraft, "rb").read()
    search = ["search", "--model", "gpt3-175b", "--cluster", "dgx-a100-80g-hdr", "--training", "gpt3-175b-1536",
              "--gpus", "1024", "--no-progress", "--no-error-bars"]
    for sig, code in () if sanitized else ((signal.SIGTERM, 143),):  # SIGINT: the sweep below
        db = os.path.join(d, f"search-{sig.name}.db")
        p = start(stagecraft, *search, "--db", db)
        time.sleep(3)
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        check(p.returncode == code, f"search stopped by {sig.name}: exit {p.returncode}, expected 128 + {int(sig)} = {code}")
        check("interrupted" in out and "interrupted" in err, f"search stopped by {sig.name}: says it was interrupted")
        status = sqlite3.connect(db).execute("SELECT status FROM searches").fetchall()
        check(status == [("interrupted",)], f"search stopped by {sig.name}: the store marks it interrupted ({status})")

    # A sweep of 20 x 64 simulations of the 175B plan: stopped, it prints the cells it simulated and
    # names no winner where a cell is missing.
    plans = []
    for _ in range(20):
        plans += ["--plan", "gpt3-175b-1024gpu"]
    p = start(stagecraft, "sweep", "--model", "gpt3-175b", "--cluster", "dgx-a100-80g-hdr", "--training", "gpt3-175b-1536",
              "--nodes", "128", *plans, "--vary", "cluster.inter_node.nic_bandwidth_Bps", "--range", "1e9:1e11:64:log",
              "--threads", "1", "--json")
    time.sleep(2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 130, f"sweep stopped by SIGINT: exit {p.returncode}, expected 130")
    doc = json.loads(out) if out.strip() else {}
    points = doc.get("points", [])
    skipped = sum(1 for pt in points for c in pt["plans"] if c.get("skipped"))
    done = sum(1 for pt in points for c in pt["plans"] if "step_time_s" in c)
    check(doc.get("interrupted") is True and skipped > 0 and done > 0 and skipped + done == 20 * 64,
          f"sweep stopped by SIGINT: {done} cells simulated, {skipped} skipped, of 20 x 64")
    check(all(pt["best"] is None for pt in points if not pt["complete"]),
          "sweep stopped by SIGINT: no winner named at a value with a cell missing")

    # A run stopped by SIGTERM (a scheduler's preemption) saves after the step in flight and resumes.
    ck = os.path.join(d, "ck")
    log = os.path.join(d, "run.log")
    with open(log, "w") as f:
        p = subprocess.Popen([stagecraft, "run", "--model", "tiny", "--training", "tiny-cpu", "--plan", "one-gpu", "--steps",
                              "1000000", "--save", ck], stdout=f, stderr=subprocess.PIPE, text=True)
        check(wait_for_file_text(log, "step 3/"), "run: three steps done before the signal")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    check(p.returncode == 143, f"run stopped by SIGTERM: exit {p.returncode}, expected 143")
    last = [line for line in open(log).read().splitlines() if line.startswith("step ")][-1]
    k = int(last.split()[1].split("/")[0])
    check(f"interrupted after step {k} of 1000000; saved to {ck}" in err, f"run stopped by SIGTERM: names step {k} and the save")
    r = call(stagecraft, "run", "--model", "tiny", "--training", "tiny-cpu", "--plan", "one-gpu", "--steps", "1",
             "--resume", ck, "--json")
    first = json.loads(r.stdout)["first_step"] if r.returncode == 0 else -1
    check(first == k, f"run --resume continues at the step the interrupted run saved ({first}, expected {k})")
    check(f"step {k + 1}/{k + 1} " in r.stderr, f"run --resume numbers its step {k + 1} of {k + 1}")

    # --save-every 3 over 7 steps: checkpoints after steps 3 and 6, and at the end (7).
    r = call(stagecraft, "run", "--model", "tiny", "--training", "tiny-cpu", "--plan", "one-gpu", "--steps", "7",
             "--save", os.path.join(d, "every"), "--save-every", "3", "--json")
    saved = json.loads(r.stdout).get("saved_at_steps") if r.returncode == 0 else None
    check(saved == [3, 6, 7], f"run --save-every 3 --steps 7 saved at {saved}, expected [3, 6, 7]")
    r = call(stagecraft, "run", "--model", "tiny", "--training", "tiny-cpu", "--plan", "one-gpu", "--save-every", "3")
    check(r.returncode == 2 and "--save" in r.stderr, f"--save-every without --save: exit {r.returncode}, names --save")

    if mpirun:
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        base = [mpirun, "-n", "2", "--oversubscribe", stagecraft, "search", "--model", "tiny", "--cluster", "cpu-local",
                "--training", "tiny-cpu", "--no-progress"]
        r = subprocess.run(base, capture_output=True, text=True, env=env, timeout=300)
        check(r.returncode == 0, f"mpirun -n 2 search that found plans: exit {r.returncode}, expected 0")
        r = subprocess.run(base[:5] + ["search", "--model", "gpt3-175b", "--cluster", "cpu-local", "--training", "tiny-cpu",
                                       "--no-progress"], capture_output=True, text=True, env=env, timeout=300)
        check(r.returncode == 1 and "no plan" in r.stderr, f"mpirun -n 2 search where nothing fits: exit {r.returncode}, expected 1")
    check.finish()


if __name__ == "__main__":
    main()
