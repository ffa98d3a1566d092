#!/usr/bin/env bash
# The main job of the README: set up, build, and run the whole chain on the bundled sample.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS="lmtrain lmeval" bash scripts/build.sh
exec ./build/app/lmtrain demo "$@"
