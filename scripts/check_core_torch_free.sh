#!/usr/bin/env bash
# The core must not depend on LibTorch (docs/architecture.md). Debian installs LibTorch's
# headers in /usr/include, so a clean build does not prove it; this check does:
#  1. no file under hyper/core (.h/.cc, recursively) nor hyper/core.h includes a header
#     beginning with ATen/, c10/ or torch/ (any quotes, any spacing);
#  2. no core test binary (<build-dir>/hyper/core/**/*_test) has a DT_NEEDED entry on a
#     torch or c10 library.
#   bash scripts/check_core_torch_free.sh [build-dir]    (default build; step 2 skipped if absent)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
cd "$root"

fail=0
sources=()
[[ -f hyper/core.h ]] && sources+=(hyper/core.h)
if [[ -d hyper/core ]]; then
  while IFS= read -r -d '' f; do sources+=("$f"); done \
    < <(find hyper/core -type f \( -name '*.h' -o -name '*.cc' \) -print0 | sort -z)
fi
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "check_core_torch_free: no sources under hyper/core" >&2
  exit 1
fi

# '#', optional blanks, 'include', optional blanks, '<' or '"', optional blanks, the prefix.
re='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][[:space:]]*(ATen|c10|torch)/'
while IFS= read -r hit; do
  [[ -z "$hit" ]] && continue
  # hit is FILE:LINE:TEXT
  echo "check_core_torch_free: ${hit%%:*}:$(cut -d: -f2 <<<"$hit"): the core includes a" \
       "LibTorch header: $(cut -d: -f3- <<<"$hit" | sed 's/^[[:space:]]*//')" >&2
  fail=1
done < <(grep -nE "$re" "${sources[@]}" /dev/null || true)

checked=0
if [[ -d "$build_dir/hyper/core" ]]; then
  while IFS= read -r -d '' exe; do
    # Only ELF files (skip e.g. CMake's *_test[1]_include.cmake or directories).
    [[ "$(head -c 4 "$exe" | od -An -c | tr -d ' ')" == '177ELF' ]] || continue
    checked=$((checked + 1))
    needed=$(readelf -d "$exe" | grep '(NEEDED)' || true)
    if bad=$(grep -E 'torch|c10' <<<"$needed"); then
      echo "check_core_torch_free: $exe links LibTorch:" >&2
      echo "$bad" >&2
      fail=1
    fi
  done < <(find "$build_dir/hyper/core" -type f -name '*_test' -print0)
fi

if [[ $fail -ne 0 ]]; then
  exit 1
fi
echo "check_core_torch_free: ok (${#sources[@]} source files, $checked core test binaries)"
