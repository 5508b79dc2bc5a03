#!/usr/bin/env bash
# The README's GUI screenshots (docs/images/gui-*.png), made by the application itself
# (stagecraft-gui --screenshots): the demo case searched, each view saved, then the Compare
# workspace on a real measurement — the CPU executor's trace of tiny-pp2-dp2 on 4 MPI ranks.
# Under Xvfb when xvfb-run is installed (the real xcb window path), else with the offscreen
# platform. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
export STAGECRAFT_CONFIG_DIR="$PWD/configs"
out=docs/images
mkdir -p "$out"
run_gui() {
  if command -v xvfb-run >/dev/null 2>&1; then
    xvfb-run -a -s "-screen 0 1920x1200x24" "$@"
  else
    QT_QPA_PLATFORM=offscreen "$@"
  fi
}
run_gui build/gui/stagecraft-gui --demo --screenshots "$out" --quit-after 120000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 4 --oversubscribe \
  build/cli/stagecraft-full run --model tiny --training tiny-cpu --plan tiny-pp2-dp2 --steps 3 --trace "$tmp/measured.json" >/dev/null
run_gui build/gui/stagecraft-gui --model tiny --cluster cpu-local --nodes 2 --training tiny-cpu --plan tiny-pp2-dp2 \
  --measured "$tmp/measured.json" --screenshots "$tmp/shots" --quit-after 120000
cp "$tmp/shots/gui-compare.png" "$tmp/shots/gui-compare-ranks.png" "$out/"
ls -1 "$out"/gui-*.png
