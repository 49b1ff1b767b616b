#!/usr/bin/env bash
# The project's test command (README, .ci/run): build, run every ctest test, then check that
# the torch-free core builds, installs and is consumable with HYPER_WITH_TORCH=OFF.
#   HYPER_JOBS=N             parallel build jobs and ctest jobs (default 2)
#   HYPER_BUILD_DIR=dir      main build dir (default build)
#   HYPER_SKIP_NOTORCH=1     skip the HYPER_WITH_TORCH=OFF core build
#   HYPER_CTEST_ARGS="..."   extra ctest arguments, e.g. "-L core" or "-LE install"
#   HYPER_FUZZ_SECONDS=N     how long each of the seven fuzz targets runs (default 12; two at a time)
#   HYPER_SKIP_FUZZ=1        skip the fuzzer (local runs only; refused in CI)
# In CI (CI=true) the fuzzer is required: without clang++/libFuzzer, or with HYPER_SKIP_FUZZ=1,
# the command fails. Locally it is skipped with a note.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${HYPER_JOBS:-2}"
build_dir="${HYPER_BUILD_DIR:-build}"

bash scripts/build.sh "$build_dir"

# shellcheck disable=SC2086
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" ${HYPER_CTEST_ARGS:-}

# The libFuzzer targets (ASan + UBSan) for a bounded time each (docs/testing.md); a crash fails.
in_ci=0
[[ "${CI:-}" == true || "${CI:-}" == 1 ]] && in_ci=1
if [[ "${HYPER_SKIP_FUZZ:-0}" == 1 ]]; then
  if [[ $in_ci == 1 ]]; then
    echo "test.sh: HYPER_SKIP_FUZZ=1 is for local runs; CI must run the fuzzer" >&2
    exit 1
  fi
  echo "== fuzz: skipped (HYPER_SKIP_FUZZ=1) =="
elif bash scripts/fuzz.sh --probe; then
  echo "== fuzz: every target for ${HYPER_FUZZ_SECONDS:-12} s =="
  bash scripts/fuzz.sh "${HYPER_FUZZ_SECONDS:-12}"
elif [[ $in_ci == 1 ]]; then
  echo "test.sh: the fuzzer cannot run: clang++ with libFuzzer (-fsanitize=fuzzer) is missing." >&2
  echo "  Install it with: bash scripts/deps.sh   (Debian packages clang, libclang-rt-dev)" >&2
  exit 1
else
  echo "== fuzz: SKIPPED locally: clang++ with libFuzzer is missing (bash scripts/deps.sh" \
       "installs clang and libclang-rt-dev); CI fails here =="
fi

if [[ "${HYPER_SKIP_NOTORCH:-0}" != 1 ]]; then
  echo "== core without LibTorch (HYPER_WITH_TORCH=OFF) =="
  HYPER_SKIP_DEPS=1 bash scripts/build.sh "${build_dir}-notorch" \
    -DHYPER_WITH_TORCH=OFF -DHYPER_BUILD_TESTS=OFF -DHYPER_BUILD_TOOLS=OFF
  bash tests/install_consumer/run.sh "${build_dir}-notorch"
fi
echo "test.sh: all passed"
