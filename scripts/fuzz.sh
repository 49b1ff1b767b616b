#!/usr/bin/env bash
# Builds the libFuzzer target of the checkpoint parsers with clang (ASan + libFuzzer) in
# build-fuzz/ and runs it for a bounded time on a copy of the seed corpus.
#   bash scripts/fuzz.sh [seconds=60] [extra libFuzzer flags...]
# Exit status: 0 when no crash was found; libFuzzer's status (and a crash-* file in
# build-fuzz/artifacts/) otherwise.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
shift || true
build="$root/build-fuzz"

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found" >&2; exit 2; }
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
gen=()
[[ -f "$build/CMakeCache.txt" ]] || gen=(-G Ninja)
cmake -S "$root" -B "$build" "${gen[@]}" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer" \
  -DHYPER_BUILD_FUZZ=ON -DHYPER_BUILD_TESTS=OFF -DHYPER_BUILD_TOOLS=OFF >/dev/null
cmake --build "$build" --target header_fuzz -j "${HYPER_JOBS:-2}"

# Work on a copy: new inputs the fuzzer finds do not land in the source tree.
corpus="$build/corpus"
mkdir -p "$corpus" "$build/artifacts"
cp -n "$root"/hyper/dcp/fuzz/corpus/* "$corpus"/ 2>/dev/null || true
start=$(date +%s)
"$build/hyper/dcp/header_fuzz" "$corpus" -max_total_time="$seconds" -max_len=8192 \
  -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/" -print_final_stats=1 "$@"
echo "fuzz.sh: ran $(( $(date +%s) - start )) s, corpus $(ls "$corpus" | wc -l) inputs"
