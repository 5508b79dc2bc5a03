"""Helpers of the command-line test scripts in this folder: run the binary, compare numbers, and
collect checks (each printed as "ok" or "FAIL"; the script exits non-zero when any failed)."""
import json
import subprocess
import sys


def call(stagecraft, *args, timeout=300):
    return subprocess.run([stagecraft, *args], capture_output=True, text=True, timeout=timeout)


def run(stagecraft, *args):
    """The command's --json document; exits the script when the command fails."""
    r = call(stagecraft, *args)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)}: rc {r.returncode}\n{r.stderr}")
    return json.loads(r.stdout)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b))


class Checks:
    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.failures.append(what)

    def finish(self):
        if self.failures:
            sys.exit(f"{len(self.failures)} check(s) failed")
