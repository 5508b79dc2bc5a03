#!/usr/bin/env bash
# README's first command: set up, build, run `stagecraft demo` on the bundled case.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/cli/stagecraft demo
