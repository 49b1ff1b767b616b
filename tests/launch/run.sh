#!/usr/bin/env bash
# Starts tests/launch/rank_check on 3 ranks with hyperrun, on 2 x 2 ranks with two hyperruns
# (--nnodes 2, both nodes on this machine), and on 3 ranks with `torchrun --no-python` of
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

# Two nodes on this machine: one hyperrun per node (--nnodes 2 --node-rank K), 2 ranks each,
# one job of 4 ranks (tests/multihost does the same across network namespaces).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
node_pids=()
for k in 0 1; do
  "$hyperrun" --nnodes 2 --node-rank $k --master-addr 127.0.0.1 --master-port "$port" -n 2 \
    --timeout 120 -- "$prog" >"$logs/node$k" 2>&1 &
  node_pids+=($!)
done
rc=0
for p in "${node_pids[@]}"; do wait "$p" || rc=$?; done
cat "$logs/node0" "$logs/node1"
[[ $rc -eq 0 ]] || { echo "hyperrun --nnodes 2 exited $rc" >&2; exit 1; }
for r in 0 1 2 3; do
  node=$((r / 2))
  grep -q "^\[rank $r\]: rank $r of 4: ok" "$logs/node$node" ||
    { echo "hyperrun --nnodes 2: rank $r did not report ok on node $node" >&2; exit 1; }
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
