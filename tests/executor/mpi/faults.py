#!/usr/bin/env python3
"""Faults injected into `stagecraft run` under mpirun (docs/reliability.md, "Faults").

One scenario per invocation (CTest runs each as its own test, label mpi):

  kill-rank            rank 1 sends itself SIGKILL in step 3 (STAGECRAFT_FAULT_KIND=kill), its peers
                       blocked on it: the job must end within 10 s of the kill, naming rank 1.
  kill-external        SIGKILL from outside, at a random moment after step 3, to a random rank:
                       the same bound.
  kill-writing-checkpoint
                       a save killed halfway through rank 2's file: the previous checkpoint must be
                       intact and resume bit for bit; the next save must clean up.
  kill-writing-manifest
                       the same, rank 0 killed halfway through the manifest.
  refuse               a checkpoint of another plan, a corrupt file, a truncated file: exit 2 before
                       training, naming what differs.
  enospc               a full disk (a small tmpfs in a private mount namespace) during a checkpoint
                       save and a trace write: exit 2 naming the file and "No space left on device",
                       the previous checkpoint intact, no partial file left. Skipped (77) where the
                       system allows no mount namespace.

After every job, no process of it may be left (each job's processes carry a unique environment tag).

usage: faults.py SCENARIO --mpirun MPIEXEC --stagecraft EXE --scratch DIR
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

KILL_BOUND_S = 10.0
SKIP = 77


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


class Job:
    """One `mpirun -n NP stagecraft run ...`, its output read as it comes, lines timestamped."""

    def __init__(self, args, np, run_args, env=None, timeout=None):
        self.tag = uuid.uuid4().hex
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["STAGECRAFT_TEST_JOB_TAG"] = self.tag
        cmd = [args.mpirun, "-n", str(np), "--oversubscribe", args.stagecraft, "run",
               "--model", "tiny", "--training", "tiny-cpu"] + run_args
        self.cmd = cmd
        self.start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env,
                                     text=True, bufsize=1)
        self.lines = []  # (time, stream, line)
        self.lock = threading.Lock()
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stdout, "out"), daemon=True),
                        threading.Thread(target=self._read, args=(self.proc.stderr, "err"), daemon=True)]
        for r in self.readers:
            r.start()
        self.timeout = timeout

    def _read(self, stream, name):
        for line in stream:
            with self.lock:
                self.lines.append((time.monotonic(), name, line))

    def wait_for(self, pattern, limit_s):
        """The time the first line matching `pattern` arrived; fails after limit_s."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            with self.lock:
                for t, _, line in self.lines:
                    if rx.search(line):
                        return t
            if self.proc.poll() is not None:
                for r in self.readers:
                    r.join(1)
                with self.lock:
                    for t, _, line in self.lines:
                        if rx.search(line):
                            return t
                raise Failure(f"job ended (exit {self.proc.returncode}) before a line matching {pattern!r}:\n"
                              + self.text())
            time.sleep(0.01)
        self.kill()
        raise Failure(f"no line matching {pattern!r} within {limit_s} s:\n" + self.text())

    def finish(self, limit_s):
        try:
            self.proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure(f"job still running after {limit_s} s: {' '.join(self.cmd)}\n" + self.text())
        end = time.monotonic()
        for r in self.readers:
            r.join(5)
        return self.proc.returncode, end

    def kill(self):
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        for pid in tagged_pids(self.tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def text(self, stream=None):
        with self.lock:
            return "".join(line for _, s, line in self.lines if stream is None or s == stream)


def tagged_pids(tag):
    """Processes whose environment carries this job's tag (the ranks, and anything they started)."""
    needle = ("STAGECRAFT_TEST_JOB_TAG=" + tag).encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def rank_pid(job, rank, limit_s=30):
    """The process id of one rank of the job (Open MPI puts OMPI_COMM_WORLD_RANK in its environment)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for pid in tagged_pids(job.tag):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and comm.startswith("stagecraft"):
                return pid
        time.sleep(0.05)
    raise Failure(f"no process for rank {rank}")


def expect_no_leftovers(job):
    deadline = time.monotonic() + 5
    while tagged_pids(job.tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = tagged_pids(job.tag)
    check(not left, f"processes of the job still alive after it ended: {left}")


def run_ok(args, np, run_args, env=None, limit_s=600):
    job = Job(args, np, run_args, env)
    rc, _ = job.finish(limit_s)
    check(rc == 0, f"{' '.join(job.cmd)} exited {rc}:\n{job.text()}")
    return json.loads(job.text("out")) if "--json" in run_args else job.text()


def expect_exit(args, np, run_args, want_rc, fragments, env=None, limit_s=600):
    job = Job(args, np, run_args, env)
    rc, _ = job.finish(limit_s)
    err = job.text("err")
    check(rc == want_rc, f"{' '.join(job.cmd)}: exit {rc}, expected {want_rc}:\n{job.text()}")
    for f in fragments:
        check(f in err, f"stderr lacks {f!r}:\n{err}")
    expect_no_leftovers(job)
    return err


PLAN = ["--plan", "tiny-pp2-dp2"]


def kill_rank(args):
    # 4 ranks, pp 2 x dp 2: rank 1 vanishes at its first compute instruction of step 3.
    env = {"STAGECRAFT_FAULT_RANK": "1", "STAGECRAFT_FAULT_STEP": "3", "STAGECRAFT_FAULT_KIND": "kill"}
    job = Job(args, 4, PLAN + ["--steps", "1000"], env)
    killed = job.wait_for(r"rank 1: fault switch: SIGKILL in step 3", 600)
    rc, end = job.finish(600)
    check(rc != 0, f"the job exited 0 after a rank was killed:\n{job.text()}")
    took = end - killed
    check(took <= KILL_BOUND_S, f"the job took {took:.1f} s to end after rank 1 was killed (bound {KILL_BOUND_S} s)")
    text = job.text()
    check(re.search(r"rank 1 with PID \d+ .*signal 9", text, re.S) is not None,
          f"nothing names rank 1 and signal 9:\n{text}")
    expect_no_leftovers(job)
    print(f"kill-rank: rank 1 killed in step 3; mpirun exited {rc} {took:.2f} s later, naming rank 1 and signal 9")


def kill_external(args, rng):
    rank = rng.randrange(4)
    delay = rng.uniform(0.0, 0.5)
    job = Job(args, 4, PLAN + ["--steps", "100000"])
    job.wait_for(r"^step 3/", 600)
    pid = rank_pid(job, rank)
    time.sleep(delay)
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    rc, end = job.finish(600)
    took = end - killed
    check(rc != 0, f"the job exited 0 after rank {rank} was killed:\n{job.text()}")
    check(took <= KILL_BOUND_S, f"the job took {took:.1f} s to end after rank {rank} was killed (bound {KILL_BOUND_S} s)")
    text = job.text()
    # (Open MPI 4.1 may print "PID 0" here: the rank is what it names reliably.)
    check(re.search(rf"rank {rank} with PID \d+ .*signal 9", text, re.S) is not None,
          f"nothing names rank {rank} (pid {pid}) and signal 9:\n{text}")
    expect_no_leftovers(job)
    print(f"kill-external: rank {rank} (pid {pid}) killed {delay:.2f} s after step 3; mpirun exited {rc} "
          f"{took:.2f} s later, naming it")


def checkpoint_files(d):
    return sorted(os.path.relpath(os.path.join(root, f), d) for root, _, files in os.walk(d) for f in files)


def kill_during_save(args, kind, rank):
    d = os.path.join(args.scratch, "ckpt")
    straight = run_ok(args, 4, PLAN + ["--steps", "5", "--json"])
    run_ok(args, 4, PLAN + ["--steps", "3", "--save", d, "--json"])
    before = {f: open(os.path.join(d, f), "rb").read() for f in checkpoint_files(d)}
    check("manifest.json" in before and "g000001/rank-00002.bin" in before, f"first save wrote {sorted(before)}")
    env = {"STAGECRAFT_FAULT_RANK": str(rank), "STAGECRAFT_FAULT_KIND": kind}
    job = Job(args, 4, PLAN + ["--steps", "1", "--resume", d, "--save", d], env)
    killed = job.wait_for(rf"rank {rank}: fault switch: SIGKILL halfway", 600)
    rc, end = job.finish(600)
    check(rc != 0, f"the job exited 0 after rank {rank} was killed in its save:\n{job.text()}")
    check(end - killed <= KILL_BOUND_S, f"the job took {end - killed:.1f} s to end after the kill")
    expect_no_leftovers(job)
    # Every file of the committed checkpoint is as it was, byte for byte.
    for f, content in before.items():
        with open(os.path.join(d, f), "rb") as fh:
            check(fh.read() == content, f"{f} changed in the killed save")
    left = [f for f in checkpoint_files(d) if f not in before]
    # Resuming from it continues bit for bit: 3 + 2 steps == 5 straight.
    resumed = run_ok(args, 4, PLAN + ["--steps", "2", "--resume", d, "--save", d, "--json"])
    check(resumed["first_step"] == 3, f"resumed from step {resumed['first_step']}, expected 3")
    check(resumed["losses"] == straight["losses"][3:], f"losses {resumed['losses']} != {straight['losses'][3:]}")
    check(resumed["params_checksum"] == straight["params_checksum"],
          f"parameters {resumed['params_checksum']} != straight {straight['params_checksum']}")
    after = checkpoint_files(d)
    # The leftover generation 2 is stepped over (generation 3) and removed with generation 1.
    check(after == ["g000003/rank-00000.bin", "g000003/rank-00001.bin", "g000003/rank-00002.bin",
                    "g000003/rank-00003.bin", "manifest.json"], f"after the next save: {after}")
    print(f"{kind}: rank {rank} killed mid-save; the step-3 checkpoint was intact (left beside it: {left}); "
          f"resume gave the straight run's parameters {straight['params_checksum']}; the next save left {after}")


def refuse(args):
    d = os.path.join(args.scratch, "ckpt")
    run_ok(args, 4, PLAN + ["--steps", "2", "--save", d])
    # The same split under ZeRO-2: another plan, refused by name.
    config_dir = os.environ.get("STAGECRAFT_CONFIG_DIR", os.path.join(os.path.dirname(__file__), "../../../configs"))
    with open(os.path.join(config_dir, "plans", "tiny-pp2-dp2.json")) as fh:
        plan = json.load(fh)
    plan["zero"]["stage"] = 2
    other = os.path.join(args.scratch, "tiny-pp2-dp2-zero2.json")
    with open(other, "w") as fh:
        json.dump(plan, fh)
    expect_exit(args, 4, ["--plan", other, "--steps", "1", "--resume", d], 2, ["manifest.json: /plan is"])
    expect_exit(args, 4, PLAN + ["--steps", "1", "--seed", "2", "--resume", d], 2, ["/data is"])
    f = os.path.join(d, "g000001", "rank-00001.bin")
    size = os.path.getsize(f)
    with open(f, "r+b") as fh:
        fh.seek(size // 2)
        b = fh.read(1)
        fh.seek(size // 2)
        fh.write(bytes([b[0] ^ 0xFF]))
    expect_exit(args, 4, PLAN + ["--steps", "1", "--resume", d], 2,
                ["cannot resume from " + d, "rank 1:", "g000001/rank-00001.bin: checksum", "(corrupt)"])
    os.truncate(f, size - 4)
    expect_exit(args, 4, PLAN + ["--steps", "1", "--resume", d], 2,
                [f"{size - 4} bytes, expected {size}", "truncated"])
    os.remove(f)
    expect_exit(args, 4, PLAN + ["--steps", "1", "--resume", d], 2, ["g000001/rank-00001.bin: missing"])
    print("refuse: another plan, another seed, a flipped byte, a cut file and a missing file each refused with exit 2, naming it")


def enospc(args):
    if os.environ.get("STAGECRAFT_FAULTS_IN_NAMESPACE") != "1":
        # Again, in a private mount namespace (root's, or a user namespace's) where a tmpfs can be
        # mounted without touching the system's mounts.
        for prefix in (["unshare", "--mount", "--propagation", "private"],
                       ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]):
            if shutil.which(prefix[0]) is None:
                break
            probe = subprocess.run(prefix + ["true"], capture_output=True)
            if probe.returncode == 0:
                env = dict(os.environ, STAGECRAFT_FAULTS_IN_NAMESPACE="1")
                inner = [sys.executable, os.path.abspath(__file__), "enospc", "--mpirun", args.mpirun,
                         "--stagecraft", args.stagecraft, "--scratch", args.scratch]
                return subprocess.run(prefix + inner, env=env).returncode
        print("enospc: skipped, this system allows no private mount namespace (unshare)")
        return SKIP
    disk = os.path.join(args.scratch, "disk")
    os.makedirs(disk, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", disk], capture_output=True, text=True)
    if mounted.returncode != 0:
        print(f"enospc: skipped, cannot mount a tmpfs: {mounted.stderr.strip()}")
        return SKIP
    try:
        d = os.path.join(disk, "ckpt")
        straight = run_ok(args, 4, PLAN + ["--steps", "4", "--json"])
        run_ok(args, 4, PLAN + ["--steps", "2", "--save", d])
        before = {f: open(os.path.join(d, f), "rb").read() for f in checkpoint_files(d)}
        ckpt_bytes = sum(len(v) for v in before.values())
        # Leave half a checkpoint of room: the next save must run out of space part way.
        st = os.statvfs(disk)
        free = st.f_bavail * st.f_frsize
        filler = os.path.join(disk, "filler")
        with open(filler, "wb") as fh:
            fh.truncate(0)
            fh.write(b"\0" * max(0, free - ckpt_bytes // 2))
        err = expect_exit(args, 4, PLAN + ["--steps", "1", "--resume", d, "--save", d], 2,
                          ["cannot save the checkpoint to " + d + " (the previous one there, if any, is intact)",
                           "No space left on device"])
        for f, content in before.items():
            with open(os.path.join(d, f), "rb") as fh:
                check(fh.read() == content, f"{f} changed in the failed save")
        check(checkpoint_files(d) == sorted(before), f"the failed save left {checkpoint_files(d)}")
        os.remove(filler)
        resumed = run_ok(args, 4, PLAN + ["--steps", "2", "--resume", d, "--json"])
        check(resumed["params_checksum"] == straight["params_checksum"],
              f"resumed parameters {resumed['params_checksum']} != straight {straight['params_checksum']}")
        # A trace onto a full disk: exit 2 naming it, nothing left under its name.
        fill(filler)
        trace = os.path.join(disk, "run.trace.json")
        terr = expect_exit(args, 4, PLAN + ["--steps", "1", "--trace", trace], 2,
                           ["cannot write the trace", trace, "No space left on device"])
        check(not os.path.exists(trace), "a partial trace was left")
        check(not [f for f in os.listdir(disk) if f.startswith("run.trace.json")], f"temporaries left: {os.listdir(disk)}")
        print("enospc: save with half a checkpoint of room: exit 2, " + first_line(err, "No space") +
              "; previous checkpoint byte-identical and resumable; trace on a full disk: exit 2, " +
              first_line(terr, "No space"))
    finally:
        subprocess.run(["umount", disk])
    return 0


def fill(path):
    """Writes `path` until its file system has no byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)


def first_line(text, fragment):
    return next((l.strip() for l in text.splitlines() if fragment in l), "")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--mpirun", required=True)
    p.add_argument("--stagecraft", required=True)
    p.add_argument("--scratch", required=True)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    own = os.environ.get("STAGECRAFT_FAULTS_IN_NAMESPACE") == "1"
    if not own:
        args.scratch = os.path.join(args.scratch, f"{args.scenario}-{os.getpid()}")
        shutil.rmtree(args.scratch, ignore_errors=True)
        os.makedirs(args.scratch)
    try:
        scenarios = {
            "kill-rank": lambda: kill_rank(args),
            "kill-external": lambda: kill_external(args, rng),
            "kill-writing-checkpoint": lambda: kill_during_save(args, "kill-writing-checkpoint", 2),
            "kill-writing-manifest": lambda: kill_during_save(args, "kill-writing-manifest", 0),
            "refuse": lambda: refuse(args),
            "enospc": lambda: enospc(args),
        }
        if args.scenario not in scenarios:
            print(f"unknown scenario {args.scenario}; one of {', '.join(scenarios)}", file=sys.stderr)
            return 2
        if args.scenario == "kill-external":
            print(f"seed {seed} (--seed {seed} repeats it)")
        rc = scenarios[args.scenario]()
        return rc or 0
    except Failure as e:
        print(f"FAIL {args.scenario}: {e}", file=sys.stderr)
        return 1
    finally:
        if not own:
            shutil.rmtree(args.scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
