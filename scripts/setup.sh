#!/usr/bin/env bash
# Installs the Debian packages Stagecraft's build and tests need, only those missing, and the
# interop tests' Python environment (.venv-interop: Debian's python3-torch plus transformers from
# PyPI, pinned; tests/interop/ are reported skipped without it).
# Idempotent: a second run installs nothing and does not touch the package index or PyPI.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
transformers_version=4.46.3

# .venv-interop: a virtual environment over Debian's python3 (with its torch) holding transformers.
interop_env() {
  local venv="$root/.venv-interop"
  if "$venv/bin/python" -c "import torch, transformers" >/dev/null 2>&1 &&
    [ "$("$venv/bin/python" -c 'import transformers; print(transformers.__version__)')" = "$transformers_version" ]; then
    echo "setup: interop environment present (torch, transformers $transformers_version)"
    return 0
  fi
  echo "setup: creating $venv (transformers $transformers_version over Debian's torch)"
  if /usr/bin/python3 -m venv --system-site-packages "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check "transformers==$transformers_version"; then
    return 0
  fi
  echo "setup: warning: could not build $venv (no PyPI?); the interop tests will be reported skipped" >&2
}

packages=(
  cmake g++ make ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libeigen3-dev libcli11-dev libsqlite3-dev
  libopenmpi-dev openmpi-bin
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libxkbcommon-dev fonts-dejavu-core
  python3 python3-venv python3-torch python3-numpy
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  interop_env
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
interop_env
