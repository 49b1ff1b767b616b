#!/usr/bin/env bash
# Starts tests/launch/rank_check on 3 ranks with hyperrun and, where Debian's python3-torch
# provides it, with `torchrun --no-python`: a hyper program runs unchanged under both.
#   run.sh <hyperrun> <rank_check>
set -euo pipefail
hyperrun="$1"
prog="$2"

out=$("$hyperrun" -n 3 --timeout 120 -- "$prog")
echo "$out"
for r in 0 1 2; do
  grep -q "^\[rank $r\]: rank $r of 3: ok" <<<"$out" || { echo "hyperrun: rank $r did not report ok" >&2; exit 1; }
done

if command -v torchrun >/dev/null 2>&1; then
  # Debian's torch 1.13 under Python 3.11 cannot map the default redirect value 0 (NONE) to
  # its IntFlag enum (AttributeError in to_map); a non-zero value avoids that code path:
  # stderr is teed to the console and also logged under a throwaway --log_dir.
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
  out=$(timeout 180 torchrun --standalone --nnodes 1 --nproc_per_node 3 \
          --redirects 2 --tee 2 --log_dir "$logs" --no_python "$prog" 2>&1)
  echo "$out"
  for r in 0 1 2; do
    grep -q "rank $r of 3: ok" <<<"$out" || { echo "torchrun: rank $r did not report ok" >&2; exit 1; }
  done
else
  echo "torchrun not installed (Debian package python3-torch): torchrun half skipped"
fi
echo "launch: ok"
