#!/usr/bin/env bash
# Installs what Foresight needs from Debian 12 packages, skipping what is already there.
# Idempotent and non-interactive. `install-deps.sh cli` installs only what the command line needs
# (scripts/run-default.sh); without an argument, also what the tests and the report need.
# CUDA (optional) is not installed here: it is expected at /usr/local/cuda, and without it
# everything but the GPU parts builds and tests.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config git
  libsimgrid-dev libeigen3-dev libboost-graph-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  libopenmpi-dev openmpi-bin
)
if [ "${1:-all}" != cli ]; then
  packages+=(
    googletest libgtest-dev libgmock-dev
    python3-matplotlib chromium   # foresight report draws its figures; its test renders the page
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
