#!/usr/bin/env bash
# The lint's own test (ctest lint_selftest): scripts/lint.sh on small fixture trees made here
# in a temp dir. A clean tree passes; a tree with one violation of each kind fails, naming
# every violating file and line and nothing else.
#   bash tests/lint/selftest.sh <path to scripts/lint.sh>
set -euo pipefail
lint="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
tmp=$(mktemp -d /tmp/hyper-lint-selftest.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
errors=0
fail() { echo "lint_selftest: $*" >&2; errors=$((errors + 1)); }

put() {  # put FILE LINES...
  mkdir -p "$(dirname "$1")"
  local f="$1"; shift
  printf '%s\n' "$@" >"$f"
}

# A clean tree: a layer including its own internals (by full path and relative), a CMake file
# compiling its own internal source, a core with standard headers only.
clean="$tmp/clean"
put "$clean/hyper/core/a.h" '#pragma once' '#include <vector>' '#include "hyper/core/internal/t.h"'
put "$clean/hyper/core/internal/t.h" '#pragma once'
put "$clean/hyper/tp/internal/r.h" '#pragma once'
put "$clean/hyper/tp/t.cc" '#include "hyper/tp/internal/r.h"' '#include "internal/r.h"' \
    '#include "hyper/tensor/dtensor.h"'
put "$clean/hyper/tp/CMakeLists.txt" 'add_library(tp t.cc internal/r.cc)'
put "$clean/bench/b.cc" '#include "hyper/tp/timeline.h"' '// #include "hyper/tp/internal/r.h" in prose'
put "$clean/tests/CMakeLists.txt" '# nothing'
if ! out=$(bash "$lint" --root "$clean" --build "$tmp/nobuild" 2>&1); then
  fail "the clean fixture failed:"$'\n'"$out"
fi

# One violation of each kind, each at a known line.
bad="$tmp/bad"
cp -r "$clean" "$bad"
put "$bad/hyper/tp/style.cc" '#include <vector>' '' '#include "hyper/tensor/internal/redistribute.h"'
put "$bad/bench/report.cc" '#include <string>' '#  include <hyper/tp/internal/raster.h>'
put "$bad/hyper/dcp/x.cc" '#include "../tp/internal/r.h"'
put "$bad/tests/t.cc" '#include "hyper/comm/internal/state.h"'
put "$bad/bench/CMakeLists.txt" 'add_executable(r report.cc' \
    '  "${PROJECT_SOURCE_DIR}/hyper/tp/internal/raster.cc")'
put "$bad/hyper/core/b.h" '#pragma once' '# include < ATen/ATen.h >'
if out=$(bash "$lint" --root "$bad" --build "$tmp/nobuild" 2>&1); then
  fail "the fixture with violations passed:"$'\n'"$out"
fi
expect=(
  "lint: internal-includes: hyper/tp/style.cc:3: includes hyper/tensor/internal/redistribute.h"
  "lint: internal-includes: bench/report.cc:2: includes hyper/tp/internal/raster.h"
  "lint: internal-includes: hyper/dcp/x.cc:1: includes ../tp/internal/r.h"
  "lint: internal-includes: tests/t.cc:1: includes hyper/comm/internal/state.h"
  "lint: internal-includes: bench/CMakeLists.txt:2: names hyper/tp/internal/raster.cc"
  "lint: core-torch-free: hyper/core/b.h:2: a torch-free module includes a LibTorch header"
)
for e in "${expect[@]}"; do
  grep -qF -- "$e" <<<"$out" || fail "missing: $e"$'\n'"in:"$'\n'"$out"
done
reported=$(grep -c '^lint: [a-z-]*: .*:[0-9]*: ' <<<"$out" || true)
[[ "$reported" -eq ${#expect[@]} ]] ||
  fail "expected ${#expect[@]} violations, got $reported:"$'\n'"$out"

# Checks can be run one at a time.
if ! bash "$lint" --root "$bad" --build "$tmp/nobuild" core-torch-free >/dev/null 2>&1; then
  :  # expected: the core violation
else
  fail "core-torch-free alone missed hyper/core/b.h"
fi
rm "$bad/hyper/core/b.h"
bash "$lint" --root "$bad" --build "$tmp/nobuild" core-torch-free >/dev/null 2>&1 ||
  fail "core-torch-free alone reported the include violations"

if [[ $errors -ne 0 ]]; then
  echo "lint_selftest: $errors failure(s)" >&2
  exit 1
fi
echo "lint_selftest: ok"
