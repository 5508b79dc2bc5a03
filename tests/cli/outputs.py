"""Outputs never clobber inputs or other runs' work (docs/reliability.md, "Output files"): calibrate's
companion report is never written over an input of its name; run --save refuses a folder holding
another run's checkpoint (and saves over its own run's).

usage: outputs.py STAGECRAFT"""
import os
import shutil
import sys
import tempfile

from clitest import Checks, call


def main():
    stagecraft = sys.argv[1]
    check = Checks()
    d = tempfile.mkdtemp(prefix="stagecraft_outputs_")
    tiny = ["--model", "tiny", "--training", "tiny-cpu", "--plan", "one-gpu"]

    # calibrate -o cal.json writes cal.json and cal.calibration.json: an input of that name is refused
    trace = os.path.join(d, "run.json")
    r = call(stagecraft, "run", *tiny, "--steps", "2", "--trace", trace)
    check(r.returncode == 0, "run --trace")
    named = os.path.join(d, "cal.calibration.json")
    shutil.copy(trace, named)
    before = open(named, "rb").read()
    r = call(stagecraft, "calibrate", named, "--cluster", "cpu-local", "-o", os.path.join(d, "cal.json"))
    check(r.returncode == 2 and "its report" in r.stderr and "an input is never overwritten" in r.stderr
          and open(named, "rb").read() == before and not os.path.exists(os.path.join(d, "cal.json")),
          f"calibrate whose report would overwrite its input trace: exit {r.returncode} (expected 2), input intact")

    # run --save over another run's checkpoint (another seed): refused before training, the old one intact
    ck = os.path.join(d, "ck")
    r = call(stagecraft, "run", *tiny, "--steps", "2", "--save", ck)
    check(r.returncode == 0, "run --save")
    manifest = open(os.path.join(ck, "manifest.json"), "rb").read()
    r = call(stagecraft, "run", *tiny, "--steps", "2", "--save", ck, "--seed", "7")
    check(r.returncode == 2 and "holds a checkpoint of another run" in r.stderr and "/data is" in r.stderr
          and open(os.path.join(ck, "manifest.json"), "rb").read() == manifest and "step 1/" not in r.stdout,
          f"run --save over another run's checkpoint: exit {r.returncode} (expected 2), nothing trained, the checkpoint intact")
    r = call(stagecraft, "run", *tiny, "--steps", "1", "--resume", ck, "--save", ck)
    check(r.returncode == 0 and "step 3/3" in r.stdout, f"run --resume DIR --save DIR (the same run) saves: exit {r.returncode}")
    shutil.rmtree(d)
    check.finish()


if __name__ == "__main__":
    main()
