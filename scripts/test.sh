#!/usr/bin/env bash
# The project's test command (README, .ci/run): build, run every ctest test, then check that
# the torch-free core builds, installs and is consumable with HYPER_WITH_TORCH=OFF.
#   HYPER_JOBS=N             parallel build jobs and ctest jobs (default 2)
#   HYPER_BUILD_DIR=dir      main build dir (default build)
#   HYPER_SKIP_NOTORCH=1     skip the HYPER_WITH_TORCH=OFF core build
#   HYPER_CTEST_ARGS="..."   extra ctest arguments, e.g. "-L core" or "-LE install"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${HYPER_JOBS:-2}"
build_dir="${HYPER_BUILD_DIR:-build}"

bash scripts/build.sh "$build_dir"

# shellcheck disable=SC2086
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" ${HYPER_CTEST_ARGS:-}

if [[ "${HYPER_SKIP_NOTORCH:-0}" != 1 ]]; then
  echo "== core without LibTorch (HYPER_WITH_TORCH=OFF) =="
  HYPER_SKIP_DEPS=1 bash scripts/build.sh "${build_dir}-notorch" \
    -DHYPER_WITH_TORCH=OFF -DHYPER_BUILD_TESTS=OFF -DHYPER_BUILD_TOOLS=OFF
  bash tests/install_consumer/run.sh "${build_dir}-notorch"
fi
echo "test.sh: all passed"
