#!/usr/bin/env bash
# The test command of the README: set up, build, run every test except those labelled slow.
# LM_TEST_ALL=1 also runs the slow ones.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export CI=${CI:-true}  # no progress bars in test logs
label_args=(-LE slow)
[ "${LM_TEST_ALL:-0}" = 1 ] && label_args=()
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "${label_args[@]}"
