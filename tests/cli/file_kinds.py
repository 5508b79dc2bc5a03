"""Every input is read by one reader that refuses what is not a regular file and honours each kind's
size limit (docs/reliability.md, "File kinds"): a device, a FIFO, a symbolic-link loop or an oversized
file is exit 2 naming it, at once, never a read until memory runs out or a wait for a writer.

usage: file_kinds.py STAGECRAFT"""
import os
import shutil
import sys
import tempfile
import time

from clitest import Checks, call


def main():
    stagecraft = sys.argv[1]
    check = Checks()
    d = tempfile.mkdtemp(prefix="stagecraft_file_kinds_")
    tiny = ["--model", "tiny", "--training", "tiny-cpu"]

    def refused(what, args, expected, seconds=20):
        t0 = time.time()
        r = call(stagecraft, *args, timeout=seconds)
        took = time.time() - t0
        check(r.returncode == 2 and expected in r.stderr,
              f"{what}: exit {r.returncode} (expected 2) in {took:.1f} s: {r.stderr.strip().splitlines()[0][:150] if r.stderr.strip() else ''}")

    # token files (run --data, eval --data): /dev/zero was read until the OOM killer (12 GB, 57 s)
    refused("run --data /dev/zero", ["run", *tiny, "--plan", "one-gpu", "--data", "/dev/zero"], "is a character device")
    hf = os.path.join(d, "hf")
    r = call(stagecraft, "run", *tiny, "--plan", "one-gpu", "--steps", "1", "--save-hf", hf)
    check(r.returncode == 0, "run --save-hf wrote a folder")
    refused("eval --data /dev/urandom", ["eval", "--weights", hf, "--data", "/dev/urandom"], "is a character device")
    # a sparse 5 GiB token file: above the 4 GiB limit, refused by its size before a byte is read
    big = os.path.join(d, "big.bin")
    with open(big, "wb") as f:
        f.truncate(5 << 30)
    refused("run --data with a 5 GiB file", ["run", *tiny, "--plan", "one-gpu", "--data", big], "above the limit of 4294967296 bytes")

    # specs and traces: a FIFO waited forever for a writer; a symbolic-link loop read as "no such file"
    fifo = os.path.join(d, "model.json")
    os.mkfifo(fifo)
    refused("info --model FIFO", ["info", "--model", fifo], "is a FIFO (named pipe)", seconds=10)
    loop_a, loop_b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
    os.symlink(loop_b, loop_a)
    os.symlink(loop_a, loop_b)
    refused("info --model a symbolic-link loop", ["info", "--model", loop_a], "Too many levels of symbolic links")
    sim = os.path.join(d, "sim.json")
    r = call(stagecraft, "simulate", *tiny, "--plan", "one-gpu", "--cluster", "cpu-local", "--gpus", "1", "--trace", sim)
    check(r.returncode == 0, "simulate --trace")
    refused("compare against /dev/zero", ["compare", sim, "/dev/zero"], "is a character device")

    # weights: model.safetensors as a FIFO
    hf_fifo = os.path.join(d, "hf-fifo")
    shutil.copytree(hf, hf_fifo)
    os.remove(os.path.join(hf_fifo, "model.safetensors"))
    os.mkfifo(os.path.join(hf_fifo, "model.safetensors"))
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog. " * 200)
    refused("eval --weights with a FIFO for model.safetensors", ["eval", "--weights", hf_fifo, "--data", text],
            "is a FIFO (named pipe)", seconds=10)
    shutil.rmtree(d)
    check.finish()


if __name__ == "__main__":
    main()
