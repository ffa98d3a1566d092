#!/usr/bin/env bash
# Every subcommand's --help ends with examples of itself, not the program's global ones (issue 30
# item 17: `lmtrain tokenizer --help` ended with `lmtrain demo`, `lmtrain check`, ...).
#   tests/app/check_help_examples.sh PROGRAM SUBCOMMAND...
set -euo pipefail
prog=$1; shift
name=$(basename "$prog")
bad=0
for sub in "$@"; do
  out=$("$prog" "$sub" --help)
  tail=$(sed -n '/^Examples\?:/,$p' <<<"$out")
  if [ -z "$tail" ] || grep -E "^  $name " <<<"$tail" | grep -vqE "^  $name $sub( |$)"; then
    echo "$name $sub --help: its examples are not its own:"; echo "${tail:-(no examples)}"; bad=1
  fi
done
exit $bad
