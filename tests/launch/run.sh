#!/usr/bin/env bash
# Starts tests/launch/rank_check on 3 ranks with hyperrun and with `torchrun --no-python` of
# the installed torch 2.x (the project's virtual environment): a hyper program runs unchanged
# under both. A missing torchrun is a failure (scripts/deps.sh installs it), not a skip.
#   run.sh <hyperrun> <rank_check> [torchrun]   (default: $HYPER_TORCHRUN, set by ctest)
set -euo pipefail
hyperrun="$1"
prog="$2"
torchrun="${3:-${HYPER_TORCHRUN:-}}"

rc=0
out=$("$hyperrun" -n 3 --timeout 120 -- "$prog" 2>&1) || rc=$?
echo "$out"
[[ $rc -eq 0 ]] || { echo "hyperrun exited $rc" >&2; exit 1; }
for r in 0 1 2; do
  grep -q "^\[rank $r\]: rank $r of 3: ok" <<<"$out" || { echo "hyperrun: rank $r did not report ok" >&2; exit 1; }
done

if [[ ! -x "$torchrun" ]]; then
  echo "launch: torchrun not found at $torchrun (scripts/deps.sh installs torch into .venv)" >&2
  exit 1
fi
echo "torchrun: $("$(dirname "$torchrun")/python" -c 'import torch; print(torch.__version__)')"
rc=0
out=$(timeout 180 "$torchrun" --standalone --nnodes 1 --nproc-per-node 3 --no-python "$prog" 2>&1) || rc=$?
echo "$out"
[[ $rc -eq 0 ]] || { echo "torchrun exited $rc" >&2; exit 1; }
for r in 0 1 2; do
  grep -q "rank $r of 3: ok" <<<"$out" || { echo "torchrun: rank $r did not report ok" >&2; exit 1; }
done
echo "launch: ok"
