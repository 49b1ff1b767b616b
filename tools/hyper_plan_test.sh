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
