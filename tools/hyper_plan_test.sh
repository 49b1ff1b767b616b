#!/usr/bin/env bash
# hyper-plan's command line: messages, exit status and a plan (ctest hyper_plan_test).
#   bash tools/hyper_plan_test.sh path/to/hyper-plan
set -uo pipefail
plan="$1"
fails=0
# expect CODE FIRST-LINE-OF-STDERR ARGS...
expect() {
  local code="$1" message="$2"
  shift 2
  local err rc
  err=$("$plan" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne $code || "${err%%$'\n'*}" != "$message" ]]; then
    echo "FAIL: hyper-plan $*: exit $rc, stderr '${err%%$'\n'*}' (want $code, '$message')" >&2
    fails=$((fails + 1))
  fi
}
src='mesh=[4] placements=[S(0)] shape=[16,64]'
dst='mesh=[4] placements=[R] shape=[16,64]'
expect 2 "hyper-plan: unknown argument '--bogus'" --bogus
expect 2 "hyper-plan: unknown argument 'extra'" --src "$src" --dst "$dst" extra
expect 2 "hyper-plan: missing value after --dst" --src "$src" --dst
expect 2 "hyper-plan: both --src and --dst are required" --src "$src"
expect 2 "hyper-plan: invalid value for --element-size: '0' (expected a number of bytes per element from 1 to 1048576)" --src "$src" --dst "$dst" --element-size 0
expect 2 "hyper-plan: invalid value for --element-size: 'x' (expected a number of bytes per element from 1 to 1048576)" --src "$src" --dst "$dst" --element-size x
expect 2 "hyper-plan: invalid value for --element-size: '4x' (expected a number of bytes per element from 1 to 1048576)" --src "$src" --dst "$dst" --element-size 4x
expect 2 "hyper-plan: invalid value for --element-size: '99999999999999999999' (expected a number of bytes per element from 1 to 1048576)" --src "$src" --dst "$dst" --element-size 99999999999999999999
expect 2 "hyper-plan: option --verify takes no value (got '--verify=1')" --verify=1
expect 0 "usage: hyper-plan --src \"<layout>\" --dst \"<layout>\" [--element-size N] [--verify] [--summary]" -h
expect 2 "hyper-plan: --bucket takes no --src or --dst" --bucket "numels=[4] ranks=2" --src "$src"
expect 2 "hyper-plan: cannot parse 'numels=[4] ranks=2 blok=3' at position 19: unknown key 'blok' (expected numels, ranks, block)" --bucket "numels=[4] ranks=2 blok=3"
expect 2 "hyper-plan: cannot parse 'ranks=2' at position 7: missing 'numels=[...]'" --bucket "ranks=2"
expect 2 "hyper-plan: plan_flat_bucket: block must be at least 1 element, got 0" --bucket "numels=[4] ranks=2 block=0"
out=$("$plan" --bucket "numels=[4096,64,4096] ranks=3 block=128") || {
  echo "FAIL: hyper-plan --bucket exited $?" >&2
  fails=$((fails + 1))
}
grep -q "^  rank 1: \[2688, 5440) p0\[2688, 4096) p1\[0, 64) p2\[0, 1280)$" <<<"$out" || {
  echo "FAIL: hyper-plan --bucket: no rank 1 line in:"$'\n'"$out" >&2
  fails=$((fails + 1))
}
out=$("$plan" --src="$src" --dst "$dst" --element_size=2 --summary --verify) || {
  echo "FAIL: hyper-plan --summary --verify exited $?" >&2
  fails=$((fails + 1))
}
grep -q "^total: 6144 B on the wire" <<<"$out" || {
  echo "FAIL: hyper-plan --summary: no 'total: 6144 B' line in:"$'\n'"$out" >&2
  fails=$((fails + 1))
}
grep -q "^verify: every rank's result equals slicing" <<<"$out" || {
  echo "FAIL: hyper-plan --verify did not verify:"$'\n'"$out" >&2
  fails=$((fails + 1))
}
[[ $fails -eq 0 ]] && echo "hyper-plan: all command-line checks pass"
exit $((fails > 0))
