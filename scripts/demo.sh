#!/usr/bin/env bash
# The main demo: build hyper, then ask hyper-plan for the redistribution plan between two
# RaggedShard layouts of a [16, 64] tensor on a 4-rank mesh (who sends which boxes to whom).
#   bash scripts/demo.sh [build-dir]      (default build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

bash "$root/scripts/build.sh" "$build_dir"

plan="$build_dir/tools/hyper-plan"
if [[ ! -x "$plan" ]]; then
  echo "demo.sh: $plan was not built (tools/ not there yet, or HYPER_BUILD_TOOLS=OFF)" >&2
  exit 1
fi
exec "$plan" \
  --src "mesh=[4] placements=[RS((0,1),(1,1,1,13))] shape=[16,64]" \
  --dst "mesh=[4] placements=[RS((0,1),(13,1,1,1))] shape=[16,64]"
