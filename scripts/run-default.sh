#!/usr/bin/env bash
# The main job on its built-in default: install, build, then show MT-NLG 530B on 280 Selene nodes.
# (Becomes "plan MT-NLG 530B on Selene" once the planner lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
./build/apps/foresight describe mt-nlg-530b-selene-280
