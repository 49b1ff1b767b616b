#!/usr/bin/env bash
# Builds the libFuzzer target of the checkpoint parsers (hyper/dcp/fuzz/header_fuzz.cc: the
# safetensors header and the .metadata JSON) with clang (ASan + libFuzzer) in build-fuzz/ and
# runs it for a bounded time on a copy of the seed corpus. scripts/test.sh runs it after ctest.
#   bash scripts/fuzz.sh [seconds=60] [extra libFuzzer flags...]
#   bash scripts/fuzz.sh --probe     exit 0 if clang++ can build a libFuzzer target here, else 2
# Exit status: 0 when no crash was found; 2 when clang++ with libFuzzer is not available;
# otherwise non-zero: the build's status, or libFuzzer's (a crash, a sanitizer report, an input
# slower than 10 s or a leak), with a crash-*/timeout-* file in build-fuzz/artifacts/ (rerun
# one with build-fuzz/hyper/dcp/header_fuzz FILE).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"

# Can clang++ compile and link a libFuzzer + ASan program? (Debian: clang + libclang-rt-dev.)
probe() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local dir
  dir=$(mktemp -d /tmp/hyper-fuzz-probe.XXXXXX)
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$dir/p.cc"
  local ok=0
  clang++ -fsanitize=fuzzer,address "$dir/p.cc" -o "$dir/p" >/dev/null 2>&1 || ok=1
  rm -rf "$dir"
  return $ok
}

if [[ "${1:-}" == --probe ]]; then
  probe && exit 0
  exit 2
fi
seconds="${1:-60}"
shift || true
if ! probe; then
  echo "fuzz.sh: clang++ with libFuzzer (-fsanitize=fuzzer) not available (Debian: apt-get install clang libclang-rt-dev)" >&2
  exit 2
fi

# ccache as in build.sh (the top CMakeLists.txt sets it as the compiler launcher).
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
mkdir -p "$CCACHE_DIR"
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
  -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/" -print_final_stats=1 "$@"
echo "fuzz.sh: ran $(( $(date +%s) - start )) s, no crash; corpus $(ls "$corpus" | wc -l) inputs"
