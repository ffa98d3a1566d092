#!/usr/bin/env bash
# The main job of the README: set up, build, and run the whole chain on the bundled sample.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/app/lmtrain ]; then
  echo "demo: first run on this clone: set-up (~2.9 GB download once per machine) and the build of lmtrain and"
  echo "demo: lmeval take about 6 minutes on 2 quiet cores (measured 2026-12-06: set-up 1.2, build 5.1; 35+ on a loaded"
  echo "demo: machine; README.md), then the demo 2-5 minutes."
else
  echo "demo: build up to date or incremental; the demo takes 2-5 minutes on 2 quiet cores (README.md)."
fi
# Only what the product needs: the tests' oracles (transformers, llama.cpp) are scripts/test.sh's.
LM_SETUP_SCOPE=product TARGETS="lmtrain lmeval" bash scripts/build.sh
exec ./build/app/lmtrain demo "$@"
