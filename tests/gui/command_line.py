"""stagecraft-gui's command line follows the CLI's rules (docs/reliability.md, "The GUI's command
line"): a wrong option or input file ends it with exit 2 and a message naming it, before any
window or search; a headless task (--screenshots) that cannot finish exits 1 saying why; nothing
waits silently. Usage: command_line.py STAGECRAFT_GUI (offscreen; bundled configs found through
STAGECRAFT_CONFIG_DIR)."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from clitest import Checks  # noqa: E402

GUI = sys.argv[1]
# Every case that must end at once gets this long: a hang fails the case instead of the suite.
QUICK_S = 60


def gui(*args, timeout=QUICK_S):
    try:
        return subprocess.run([GUI, *args], capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def main():
    ok = Checks()
    with tempfile.TemporaryDirectory() as tmp:

        def refused(args, *needles, rc=2):
            r = gui(*args)
            what = "stagecraft-gui " + " ".join(args)
            if r is None:
                ok(False, f"{what}: still waiting after {QUICK_S} s")
                return
            ok(r.returncode == rc, f"{what}: exit {r.returncode} (expected {rc})")
            for n in needles:
                ok(n in r.stderr, f"{what}: the message names {n!r} ({r.stderr.strip()[:200]!r})")

        # Options that are not numbers in range are refused, never replaced by a default.
        for bad in ["abc", "0", "-3", "2.5", "100001", "99999999999999999999"]:
            refused(["--nodes", bad, "--search"], "--nodes", repr(bad).replace('"', "'"))
        for bad in ["soon", "-1", "3000000000"]:
            refused(["--quit-after", bad], "--quit-after", "milliseconds")
        refused(["--no-such-option"], "no-such-option")
        refused(["--nodes"], "nodes")                       # a value is missing
        refused(["stray.json"], "unexpected argument 'stray.json'")
        refused(["--model", "tiny", "--model", "gpt3-13b"], "--model given more than once")
        refused(["--measured", "run.json"], "--measured", "--plan")

        # Inputs that do not load: the loader's message (file, field, what was expected), at once,
        # also where a search and screenshots were asked for.
        shots = os.path.join(tmp, "shots")
        refused(["--model", "no-such-model", "--search", "--screenshots", shots], "no-such-model")
        refused(["--cluster", "no-such-cluster"], "no-such-cluster")
        refused(["--model", os.path.join(tmp, "missing.json"), "--training", "tiny-cpu"], "missing.json")
        fifo = os.path.join(tmp, "model.fifo")
        os.mkfifo(fifo)
        refused(["--model", fifo, "--search", "--screenshots", shots], "model.fifo", "FIFO")
        refused(["--model", "tiny", "--cluster", "cpu-local", "--training", "tiny-cpu", "--plan", "no-such-plan"],
                "no-such-plan")
        a_file = os.path.join(tmp, "a-file")
        open(a_file, "w").close()
        refused(["--demo", "--screenshots", a_file], "--screenshots", "a-file")

        # --cluster without --nodes uses the cluster file's nodes. cpu-local has 1 node of 2 GPUs,
        # tiny-zero3 is tp 1 x pp 1 x dp 2 = 2 ranks: it fits 1 x 2 = 2 GPUs and not the demo's
        # 8 nodes (16 GPUs), which validate_plan would refuse (exit 2). --quit-after ends the
        # session with nothing pending: exit 0.
        tiny = ["--model", "tiny", "--cluster", "cpu-local", "--training", "tiny-cpu", "--plan", "tiny-zero3"]
        r = gui(*tiny, "--quit-after", "500")
        ok(r is not None and r.returncode == 0,
           f"--cluster cpu-local without --nodes: its 1 node; exit {None if r is None else r.returncode} "
           f"{'' if r is None else r.stderr.strip()[:300]!r}")
        refused(tiny + ["--nodes", "8"], "tiny-zero3")      # 8 x 2 = 16 GPUs for a 2-rank plan

        # The screenshots of a whole search, once: save_screenshots selects other plans, whose steps
        # becoming ready started it again inside itself (hundreds of nested calls, minutes, and a
        # what-if chart drawn twice over). One "screenshots in" line, every view's PNG, exit 0. The demo
        # case: its best plan has no pipeline, so the schedule view selects another plan.
        done = os.path.join(tmp, "done")
        r = gui("--demo", "--screenshots", done, "--quit-after", "300000", timeout=400)
        ok(r is not None and r.returncode == 0, f"--screenshots of the demo: exit {None if r is None else r.returncode}")
        if r is not None:
            ok(r.stdout.count("screenshots in") == 1, f"saved once: {r.stdout.count('screenshots in')} 'screenshots in' lines")
        views = ["plans", "pareto", "space-map", "why", "schedule", "critical", "whatif"]
        missing = [v for v in views if not os.path.isfile(os.path.join(done, f"gui-{v}.png"))]
        ok(missing == [], f"a PNG of every view (missing: {missing})")

        # A headless task that runs out of time says so and exits 1, and leaves no PNG behind.
        late = os.path.join(tmp, "late")
        refused(["--demo", "--screenshots", late, "--quit-after", "1"], "--quit-after 1", "screenshots", rc=1)
        pngs = [f for f in os.listdir(late)] if os.path.isdir(late) else []
        ok(pngs == [], f"no screenshot written when the time ran out ({pngs})")
    ok.finish()


if __name__ == "__main__":
    main()
