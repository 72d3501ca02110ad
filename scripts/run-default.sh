#!/usr/bin/env bash
# The main job on its built-in default: install, build, then plan MT-NLG 530B on 280 Selene nodes
# (global batch 1920) and print the ranked plans and where the published plan ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
./build/apps/foresight plan
