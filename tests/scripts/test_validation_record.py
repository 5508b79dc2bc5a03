"""scripts/validation_report.py's record of checked runs: update_record rewrites only its own
set, and with check=True exits 1 when the record's entries differ from this run's (a cost model
changed and the script was not rerun), so that the ctest guards can fail."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from validation_report import record_entry, update_record  # noqa: E402


def entries(set_name, ratios):
    # r["plan"]["zero"]["stage"] is what record_entry reads of a simulation; err = ratio - 1
    return [record_entry(set_name, i, "test", "fsdp", "A100", 8, {"plan": {"zero": {"stage": 3}}}, x - 1)
            for i, x in enumerate(ratios)]


def exits(f):
    try:
        f()
    except SystemExit as e:
        return e.code
    return None


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "runs.json")
        update_record(path, "a", entries("a", [1.1, 1.2]), check=False)
        update_record(path, "b", entries("b", [0.9]), check=False)
        update_record(path, "a", entries("a", [1.3, 1.4]), check=False)  # rewritten in place, b kept after it
        with open(path) as f:
            runs = json.load(f)["runs"]
        assert [(r["set"], r["measured_over_simulated"]) for r in runs] == [("a", 1.3), ("a", 1.4), ("b", 0.9)], runs
        assert exits(lambda: update_record(path, "a", entries("a", [1.3, 1.4]), check=True)) is None
        assert exits(lambda: update_record(path, "a", entries("a", [1.3, 1.41]), check=True)) == 1  # a ratio moved
        assert exits(lambda: update_record(path, "a", entries("a", [1.3]), check=True)) == 1        # a run missing
        assert exits(lambda: update_record(path, "c", entries("c", [1.0]), check=True)) == 1        # a set not written
    print("validation record: rewrite and check behave")


if __name__ == "__main__":
    main()
