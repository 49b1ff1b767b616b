#!/usr/bin/env bash
# ctest demo_quick: runs scripts/demo.sh's two phases (4 ranks, then 2) in a small
# configuration on an existing build, and checks what it promises: no mismatch, every
# redistribution at its lower bound, both phases' rows in the summary, a Chrome trace, a PNG
# and a verified checkpoint.
#   run.sh BUILD_DIR OUT_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build_dir="$1"
out="$2"
log="$out.log"
mkdir -p "$(dirname "$out")"

fail() { echo "demo_quick: $*" >&2; exit 1; }

bash "$root/scripts/demo.sh" "$build_dir" --no-build --quick --out "$out" --timeout 240 \
  2>&1 | tee "$log"

grep -q "MISMATCH\|FAILED" "$log" && fail "the demo reported a mismatch"
# Six redistributions, each moving exactly its lower bound (marked '=' or zero bytes).
n=$(grep -cE '^   (RS\(|S\(|R ).*-> ' "$log" || true)
[[ "$n" == 6 ]] || fail "expected 6 redistribution rows, found $n"
n=$(grep -E '^   (RS\(|S\(|R ).*-> ' "$log" | grep -c ' = ' || true)
[[ "$n" == 6 ]] || fail "expected 6 redistributions at their lower bound, found $n"
# Summary rows 1-5, all ok.
for s in 1 2 3 4 5; do
  grep -qE "^$s"$'\t'".*"$'\t'"ok" "$out/summary.tsv" || fail "summary row $s missing or not ok"
done
grep -q '"traceEvents"' "$out/tp_step_trace.json" || fail "trace has no traceEvents"
[[ "$(head -c 8 "$out/tp_step.png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
  fail "tp_step.png is not a PNG"
grep -q "phase 2 done" "$log" || fail "phase 2 did not finish"
grep -q "Python part: ok" "$log" || fail "the Python part did not report ok"
echo "demo_quick: ok"
