#!/usr/bin/env bash
# Configure (Ninja) and build hyper.
#   bash scripts/build.sh [build-dir] [extra cmake -D options...]
# Default build dir: build. Jobs: $HYPER_JOBS (default 2: CI machines have 2 cores).
# $HYPER_TARGETS (space-separated, e.g. "demo hyperrun") builds only those targets and what
# they need; unset or empty: everything.
# ccache is picked up by the top CMakeLists.txt; its cache persists in $CCACHE_DIR
# (default ~/.cache/ccache) so reruns and fresh build dirs are fast.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${1:-build}"
shift || true

bash "$root/scripts/deps.sh"

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
mkdir -p "$CCACHE_DIR"
# Hits across checkouts and build dirs (a CI clone lives in another folder): paths under the
# repository are hashed relative to it, and the compiler's working dir is not hashed.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"

case "$build_dir" in
  /*) ;;
  *) build_dir="$root/$build_dir" ;;
esac

gen=()
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  gen=(-G Ninja)   # an existing build dir keeps the generator it was made with
fi
cmake -S "$root" -B "$build_dir" "${gen[@]}" "$@"
targets=()
for t in ${HYPER_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "${HYPER_JOBS:-2}" "${targets[@]}"
