#!/usr/bin/env bash
# Every subcommand's --help ends with examples of itself, not the program's global ones (issue 30
# item 17: `lmtrain tokenizer --help` ended with `lmtrain demo`, `lmtrain check`, ...; CLI11 copies
# the program's footer into each subcommand that sets none). The subcommands are the ones
# `PROGRAM --help` lists, so a new one without its own examples fails here.
#   tests/app/check_help_examples.sh PROGRAM
set -euo pipefail
prog=$1
name=$(basename "$prog")
main=$("$prog" --help)
subs=$(sed -n '/^Subcommands:/,/^$/p' <<<"$main" | awk 'NR > 1 && NF { print $1 }')
global=$(sed -n '/^Examples\?:/,$p' <<<"$main")  # the program's examples, the whole block
[ -n "$subs" ] && [ -n "$global" ] || { echo "$name --help: no subcommands or no global examples:"; echo "$main"; exit 1; }
bad=0
for sub in $subs; do
  out=$("$prog" "$sub" --help)
  tail=$(sed -n '/^Examples\?:/,$p' <<<"$out")
  if [ -z "$tail" ] || ! grep -qE "^  $name $sub( |$)" <<<"$tail" ||
     grep -E "^  $name " <<<"$tail" | grep -vqE "^  $name $sub( |$)" || [[ "$out" == *"$global"* ]]; then
    echo "$name $sub --help: its examples are not its own:"; echo "${tail:-(no examples)}"; bad=1
  else
    echo "ok: $name $sub --help: $(grep -cE "^  $name $sub( |$)" <<<"$tail") examples of its own"
  fi
done
exit $bad
