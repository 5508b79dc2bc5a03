"""A stopped rank ends the job, named (docs/reliability.md, "A stopped rank"). `mpirun -n 2
stagecraft run ... --watchdog 4`, rank 1 stopped with SIGSTOP after the first step: rank 0 sees no
progress for the deadline (4 s), pings every rank, gets no answer from rank 1 within the grace
(4 / 5 = 0.8 s, raised to the 1 s floor) and ends the job with exit 3 and "rank 1 stopped
answering" instead of waiting forever. Usage: watchdog.py STAGECRAFT MPIRUN."""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import Checks  # noqa: E402

DEADLINE_S = 4
# Long enough for the first step on a loaded machine, short against "forever".
LIMIT_S = 240


def rank_pids(mpirun_pid):
    """The pids of the job's ranks by OMPI_COMM_WORLD_RANK, among mpirun's descendants."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid != mpirun_pid:
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(kv.split(b"=", 1)[1])] = int(pid)
    return found


def main():
    stagecraft, mpirun = sys.argv[1], sys.argv[2]
    ok = Checks()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "stdout")
        err = os.path.join(tmp, "stderr")
        cmd = [mpirun, "-n", "2", "--oversubscribe", stagecraft, "run", "--model", "tiny", "--training", "tiny-cpu",
               "--plan", "tiny-zero3", "--steps", "100000", "--watchdog", str(DEADLINE_S), "--json"]
        with open(log, "w") as out, open(err, "w") as errf:
            job = subprocess.Popen(cmd, stdout=out, stderr=errf, env=env)
        stopped = None
        t0 = time.monotonic()
        try:
            # the first step done (--json: progress on stderr): both ranks are inside the training loop
            while time.monotonic() - t0 < LIMIT_S and job.poll() is None:
                with open(err) as f:
                    if "step 1/" in f.read():
                        break
                time.sleep(0.1)
            pids = rank_pids(job.pid)
            ok(1 in pids, f"rank 1's process found among mpirun's children ({pids})")
            if 1 in pids:
                stopped = pids[1]
                os.kill(stopped, signal.SIGSTOP)
                t_stop = time.monotonic()
                try:
                    rc = job.wait(timeout=LIMIT_S)
                except subprocess.TimeoutExpired:
                    rc = None
                waited = time.monotonic() - t_stop
                with open(err) as f:
                    stderr = f.read()
                ok(rc is not None, f"the job ended after rank 1 stopped (waited {waited:.1f} s)")
                ok(rc == 3, f"exit {rc}, expected 3 (a rank ended the job)")
                ok("rank 1 stopped answering" in stderr, f"the message names rank 1: {stderr.strip()[-600:]!r}")
                ok("--watchdog" in stderr, "the message names the option that sets the deadline")
                # the deadline (4 s) and the grace (1 s) at least: not ended by something else
                ok(waited >= DEADLINE_S, f"ended after the deadline: {waited:.1f} s >= {DEADLINE_S} s")
        finally:
            if stopped is not None:
                try:
                    os.kill(stopped, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            if job.poll() is None:
                job.kill()
                job.wait()
    ok.finish()


if __name__ == "__main__":
    main()
