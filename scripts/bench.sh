#!/usr/bin/env bash
# Runs hyper's benchmark programs on 4 local ranks (hyperrun) and leaves their JSON results in
# <build-dir>/bench/results/. Each prints ours vs a baseline measured side by side, with the
# ratio and its target. Machines are shared and noisy: compare ratios, not absolute times.
#   bash scripts/bench.sh [build-dir]      (default build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

bash "$root/scripts/build.sh" "$build_dir"
run="$build_dir/tools/hyperrun"
for b in comm_bench redistribute_bench; do
  echo "== $b (4 ranks) =="
  "$run" -n 4 --timeout 1200 -- "$build_dir/bench/$b"
done
echo "results: $build_dir/bench/results/"
