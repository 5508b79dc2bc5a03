#!/usr/bin/env python3
"""Checks the include arrows of ARCHITECTURE.md ("Layout"): every #include "x/..." (or <x/...>)
in a source folder must name a folder that folder may depend on.

  core      core                      traces    core, sim, traces
  sim       core, sim                 render    core, traces, render
  planner   core, sim, planner, mpi   mpi       mpi
  executor  core, executor, mpi       cli, gui, bench, tests: anything

Only includes whose first path component is one of these folders count (<mpi.h>, <Eigen/Dense>
and "fixtures.hpp" do not). A top-level folder holding C++ sources that has no rule is an
error too, so a new folder gets a rule before it gets code. Folders named build*, hidden
folders and CMake build trees are skipped.

Usage: check_layering.py [ROOT]   (default: the repository this script is in)
Prints one line per violation, "path:line: <folder> may not include "<header>" (<folder>
includes only ...)", and exits 1 when there is any; exits 0 with a summary otherwise.
"""

import os
import re
import sys

ANYTHING = None
RULES = {
    "core": {"core"},
    "sim": {"core", "sim"},
    "planner": {"core", "sim", "planner", "mpi"},
    "executor": {"core", "executor", "mpi"},
    "traces": {"core", "sim", "traces"},
    "render": {"core", "traces", "render"},
    "mpi": {"mpi"},
    "cli": ANYTHING,
    "gui": ANYTHING,
    "bench": ANYTHING,
    "tests": ANYTHING,
}
SOURCE_SUFFIXES = (".hpp", ".h", ".cpp", ".cc", ".cu", ".cuh", ".ipp", ".inl")
INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]')


def skipped(name, path):
    return name.startswith(".") or name.startswith("build") or os.path.exists(os.path.join(path, "CMakeCache.txt"))


def sources(folder):
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not skipped(d, os.path.join(dirpath, d)))
        for f in sorted(filenames):
            if f.endswith(SOURCE_SUFFIXES):
                yield os.path.join(dirpath, f)


def check_file(root, folder, path, allowed):
    problems = []
    rel = os.path.relpath(path, root)
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m or "/" not in m.group(1):
                continue
            target = m.group(1).split("/", 1)[0]
            if target in RULES and target not in allowed:
                problems.append('%s:%d: %s may not include "%s" (%s includes only %s)'
                                % (rel, number, folder, m.group(1), folder, ", ".join(sorted(allowed))))
    return problems


def check(root):
    problems, files = [], 0
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isdir(folder) or skipped(name, folder):
            continue
        paths = list(sources(folder))
        if not paths:
            continue
        if name not in RULES:
            problems.append("%s/: a folder of C++ sources without a layering rule (add one to "
                            "ARCHITECTURE.md and scripts/check_layering.py)" % name)
            continue
        files += len(paths)
        allowed = RULES[name]
        if allowed is ANYTHING:
            continue
        for path in paths:
            problems += check_file(root, name, path, allowed)
    return problems, files


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    if not os.path.isdir(root):
        print("check_layering.py: %s is not a folder" % root, file=sys.stderr)
        return 2
    problems, files = check(root)
    for p in problems:
        print(p)
    if problems:
        print("check_layering.py: %d violation(s) of the layering in ARCHITECTURE.md" % len(problems))
        return 1
    print("check_layering.py: %d source files in %s follow the layering" % (files, root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
