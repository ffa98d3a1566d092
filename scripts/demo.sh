#!/usr/bin/env bash
# The main job of the README: set up, build, and run the whole chain on the bundled sample.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the product needs: the tests' oracles (transformers, llama.cpp) are scripts/test.sh's.
LM_SETUP_SCOPE=product TARGETS="lmtrain lmeval" bash scripts/build.sh
exec ./build/app/lmtrain demo "$@"
