#!/usr/bin/env bash
# The project's test command (README, .ci/run): build, run every ctest test, then check that
# the torch-free core builds, installs and is consumable with HYPER_WITH_TORCH=OFF.
#   HYPER_JOBS=N             parallel build jobs and ctest jobs (default 2)
#   HYPER_BUILD_DIR=dir      main build dir (default build)
#   HYPER_SKIP_NOTORCH=1     skip the HYPER_WITH_TORCH=OFF core build
#   HYPER_CTEST_ARGS="..."   extra ctest arguments, e.g. "-L core" or "-LE install"
#   HYPER_FUZZ_SECONDS=N     how long the checkpoint parsers' fuzzer runs (default 30)
#   HYPER_SKIP_FUZZ=1        skip the fuzzer (it is skipped, with a note, without clang/libFuzzer)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${HYPER_JOBS:-2}"
build_dir="${HYPER_BUILD_DIR:-build}"

bash scripts/build.sh "$build_dir"

# shellcheck disable=SC2086
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" ${HYPER_CTEST_ARGS:-}

# The checkpoint parsers' libFuzzer target for a bounded time (docs/testing.md); a crash fails.
if [[ "${HYPER_SKIP_FUZZ:-0}" != 1 ]]; then
  if bash scripts/fuzz.sh --probe; then
    echo "== fuzz: header_fuzz for ${HYPER_FUZZ_SECONDS:-30} s =="
    bash scripts/fuzz.sh "${HYPER_FUZZ_SECONDS:-30}"
  else
    echo "== fuzz: skipped (clang++ with libFuzzer not available; scripts/deps.sh installs it) =="
  fi
fi

if [[ "${HYPER_SKIP_NOTORCH:-0}" != 1 ]]; then
  echo "== core without LibTorch (HYPER_WITH_TORCH=OFF) =="
  HYPER_SKIP_DEPS=1 bash scripts/build.sh "${build_dir}-notorch" \
    -DHYPER_WITH_TORCH=OFF -DHYPER_BUILD_TESTS=OFF -DHYPER_BUILD_TOOLS=OFF
  bash tests/install_consumer/run.sh "${build_dir}-notorch"
fi
echo "test.sh: all passed"
