#!/usr/bin/env bash
# Builds hyper's libFuzzer targets with clang (libFuzzer + ASan + UBSan, UB aborts) in
# build-fuzz/ and runs each for a bounded time on a growing corpus, then prints a summary
# (executions, executions/s, coverage) per target. scripts/test.sh runs it after ctest.
#   bash scripts/fuzz.sh [seconds-per-target=60] [extra libFuzzer flags...]
#   bash scripts/fuzz.sh --probe     exit 0 if clang++ can build a libFuzzer target here, else 2
#   bash scripts/fuzz.sh --list      the targets, one per line
# Environment: HYPER_FUZZ_TARGETS="a b" (a subset; default all), HYPER_FUZZ_JOBS (targets run
# at once, one core each; default HYPER_JOBS or 2), HYPER_JOBS (build parallelism).
#
# The targets (docs/testing.md says what each checks):
#   header_fuzz        hyper/dcp/fuzz        safetensors header + .metadata parsers
#   read_plan_fuzz     hyper/dcp/fuzz        check_chunks_tile + read_runs (hostile boxes)
#   chunk_reader_fuzz  hyper/dcp/fuzz        CheckpointReader on corrupted checkpoints
#   path_fuzz          hyper/dcp/fuzz        ReadFile::open_beneath, resolve_inside (symlinks, '..', FIFO)
#   placement_fuzz     hyper/core/fuzz       placement/mesh/layout text forms, hyper-plan's planning
#   cli_args_fuzz      tools/cli/fuzz        the argument parser of hyperrun and the other tools
#   launch_fuzz        tools/cli/fuzz        hyperrun's options + torchrun's environment (RANK, ...)
# Each has a checked-in seed corpus (<dir>/corpus/<target>/) and a dictionary. New inputs go to
# build-fuzz/corpus/<target>/ (seeded from the checked-in corpus; it persists between runs, so
# keep build-fuzz/ between CI runs); crashes to build-fuzz/artifacts/<target>-crash-* (rerun
# one with build-fuzz/<dir>/<target> FILE).
# Exit status: 0 when no target found anything; 2 when clang++ with libFuzzer is not available;
# otherwise non-zero: the build's status, or 1 when a target failed (a crash, a sanitizer report,
# an input slower than 10 s, a leak, more than 2 GiB), with its log tail printed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"

# name  binary (under build-fuzz/)  seed corpus (under the root)  dictionary  -max_len
# max_len: past the limits each parser enforces on small inputs (header: nesting 64, length
# prefixes and counts at 2^62; path: PATH_MAX 4096; the others bound their own sizes).
targets_table() {
  cat <<'EOF'
header_fuzz       hyper/dcp/header_fuzz         hyper/dcp/fuzz/corpus/header_fuzz        hyper/dcp/fuzz/header.dict     65536
read_plan_fuzz    hyper/dcp/read_plan_fuzz      hyper/dcp/fuzz/corpus/read_plan_fuzz     hyper/dcp/fuzz/binary.dict     4096
chunk_reader_fuzz hyper/dcp/chunk_reader_fuzz   hyper/dcp/fuzz/corpus/chunk_reader_fuzz  hyper/dcp/fuzz/binary.dict     4096
path_fuzz         hyper/dcp/path_fuzz           hyper/dcp/fuzz/corpus/path_fuzz          hyper/dcp/fuzz/path.dict       8192
placement_fuzz    hyper/core/placement_fuzz     hyper/core/fuzz/corpus/placement_fuzz    hyper/core/fuzz/placement.dict 4096
cli_args_fuzz     tools/cli/cli_args_fuzz       tools/cli/fuzz/corpus/cli_args_fuzz      tools/cli/fuzz/cli_args.dict   8192
launch_fuzz       tools/cli/launch_fuzz         tools/cli/fuzz/corpus/launch_fuzz        tools/cli/fuzz/launch.dict     4096
EOF
}

# Can clang++ compile and link a libFuzzer + ASan + UBSan program? (Debian: clang + libclang-rt-dev.)
probe() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local dir
  dir=$(mktemp -d /tmp/hyper-fuzz-probe.XXXXXX)
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$dir/p.cc"
  local ok=0
  clang++ -fsanitize=fuzzer,address,undefined "$dir/p.cc" -o "$dir/p" >/dev/null 2>&1 || ok=1
  rm -rf "$dir"
  return $ok
}

case "${1:-}" in
  --probe) probe && exit 0; exit 2 ;;
  --list) targets_table | awk '{print $1}'; exit 0 ;;
esac
seconds="${1:-60}"
shift || true
if ! probe; then
  echo "fuzz.sh: clang++ with libFuzzer (-fsanitize=fuzzer,address,undefined) not available (Debian: apt-get install clang libclang-rt-dev)" >&2
  exit 2
fi
selected="${HYPER_FUZZ_TARGETS:-$(targets_table | awk '{print $1}' | tr '\n' ' ')}"
for t in $selected; do
  targets_table | awk -v t="$t" '$1 == t {found=1} END {exit !found}' ||
    { echo "fuzz.sh: unknown target '$t' (bash scripts/fuzz.sh --list)" >&2; exit 1; }
done

# ccache as in build.sh (the top CMakeLists.txt sets it as the compiler launcher).
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
mkdir -p "$CCACHE_DIR"
gen=()
[[ -f "$build/CMakeCache.txt" ]] || gen=(-G Ninja)
build_start=$(date +%s)
# The code under test gets coverage + ASan + UBSan instrumentation; the targets link libFuzzer
# (hyper_add_fuzzer in cmake/HyperHelpers.cmake).
cmake -S "$root" -B "$build" "${gen[@]}" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DHYPER_BUILD_FUZZ=ON -DHYPER_BUILD_TESTS=OFF -DHYPER_BUILD_TOOLS=OFF \
  -DHYPER_BUILD_BENCH=OFF -DHYPER_BUILD_EXAMPLES=OFF >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" --target $selected -j "${HYPER_JOBS:-2}"
echo "fuzz.sh: build $(( $(date +%s) - build_start )) s"

mkdir -p "$build/artifacts" "$build/logs"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

run_one() {
  local name=$1 bin=$2 seeds=$3 dict=$4 max_len=$5
  shift 5
  local corpus="$build/corpus/$name"
  mkdir -p "$corpus"
  # Seed (again) from the checked-in corpus; what the fuzzer adds stays in build-fuzz/.
  cp -n "$root/$seeds"/* "$corpus"/ 2>/dev/null || true
  "$build/$bin" "$corpus" -max_total_time="$seconds" -max_len="$max_len" -dict="$root/$dict" \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$name-" \
    -print_final_stats=1 "$@" >"$build/logs/$name.log" 2>&1
}

jobs_max="${HYPER_FUZZ_JOBS:-${HYPER_JOBS:-2}}"
declare -A pid_of
start=$(date +%s)
for t in $selected; do
  read -r name bin seeds dict max_len < <(targets_table | awk -v t="$t" '$1 == t')
  while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
  run_one "$name" "$bin" "$seeds" "$dict" "$max_len" "$@" &
  pid_of[$name]=$!
done
failed=()
for t in $selected; do
  wait "${pid_of[$t]}" || failed+=("$t")
done

# Summary from libFuzzer's final stats (-print_final_stats=1) and its last status line.
echo
printf '%-18s %10s %9s %7s %7s %7s  %s\n' target execs exec/s cov ft corpus result
for t in $selected; do
  log="$build/logs/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  result=ok
  [[ " ${failed[*]} " == *" $t "* ]] && result=FAILED
  printf '%-18s %10s %9s %7s %7s %7s  %s\n' "$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" \
    "$(ls "$build/corpus/$t" | wc -l)" "$result"
done
echo "fuzz.sh: ran $(( $(date +%s) - start )) s (${seconds} s per target, ${jobs_max} at a time)"
if (( ${#failed[@]} )); then
  for t in "${failed[@]}"; do
    echo
    echo "== $t failed; last lines of build-fuzz/logs/$t.log =="
    tail -40 "$build/logs/$t.log"
  done
  echo "fuzz.sh: reproduce with build-fuzz/<dir>/<target> build-fuzz/artifacts/<target>-crash-<hash>" >&2
  exit 1
fi
