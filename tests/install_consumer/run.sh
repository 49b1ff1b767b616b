#!/usr/bin/env bash
# Install a hyper build into a temporary prefix, build this consumer project against it (with
# CMAKE_PREFIX_PATH pointing at that prefix only) and run its programs.
#   bash tests/install_consumer/run.sh <build-dir>
# HYPER_KEEP_INSTALL=1 keeps the temporary directory (its path is printed).
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 <build-dir>" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
build_dir="$(cd "$1" && pwd)"

tmp="$(mktemp -d /tmp/hyper-install-consumer.XXXXXX)"
if [[ "${HYPER_KEEP_INSTALL:-0}" == 1 ]]; then
  echo "install_consumer: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
prefix="$tmp/prefix"
cbuild="$tmp/build"

echo "== install $build_dir into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log" >&2; exit 1; }
test -f "$prefix/lib/cmake/hyper/hyperConfig.cmake" \
  || test -f "$prefix/lib64/cmake/hyper/hyperConfig.cmake" \
  || { echo "install_consumer: no hyperConfig.cmake installed" >&2; exit 1; }
# Only public headers: no internal/ or testing/ directories, testing_*.h or test sources.
if bad=$(find "$prefix/include" \( -name internal -o -name 'testing*' -o -name '*_test*' \) \
           -print | head -5) \
   && [[ -n "$bad" ]]; then
  echo "install_consumer: installed what is not public:" >&2
  echo "$bad" >&2
  exit 1
fi

# internal/ and testing/ are not installed, so no installed header may include one of theirs.
if bad=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^>"]*/(internal/|testing)' \
           "$prefix/include" | sed "s|^$prefix/include/||") && [[ -n "$bad" ]]; then
  echo "install_consumer: public headers include internal/ or testing/ headers (not installed):" >&2
  echo "$bad" >&2
  exit 1
fi

gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
echo "== configure the consumer"
cmake -S "$here" -B "$cbuild" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
echo "== build the consumer"
cmake --build "$cbuild" -j "${HYPER_JOBS:-2}"

echo "== run"
"$cbuild/core_consumer"
"$cbuild/trace_consumer"
if [[ -x "$cbuild/full_consumer" ]]; then
  "$cbuild/full_consumer"
else
  echo "(no hyper::comm in this package: full_consumer not built)"
fi
echo "== core only, with LibTorch hidden from CMake"
cmake -S "$here" -B "$tmp/build-core" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DHYPER_CONSUMER_CORE_ONLY=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON --no-warn-unused-cli \
  >"$tmp/core.log" || {
  cat "$tmp/core.log" >&2; exit 1; }
cmake --build "$tmp/build-core" -j "${HYPER_JOBS:-2}" >>"$tmp/core.log" || {
  cat "$tmp/core.log" >&2; exit 1; }
"$tmp/build-core/core_consumer"
echo "install_consumer: ok"
