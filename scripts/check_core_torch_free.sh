#!/usr/bin/env bash
# The core (and the torch-free trace module) must not depend on LibTorch
# (docs/architecture.md). Debian installs LibTorch's headers in /usr/include, so a clean build
# does not prove it; this check does:
#  1. no file under hyper/core or hyper/trace (.h/.cc, recursively) nor hyper/core.h or
#     hyper/trace.h includes a header beginning with ATen/, c10/ or torch/ (any quotes, any
#     spacing);
#  2. no test binary of theirs (<build-dir>/hyper/{core,trace}/**/*_test) has a DT_NEEDED
#     entry on a torch or c10 library.
#   bash scripts/check_core_torch_free.sh [build-dir]    (default build; step 2 skipped if absent)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
cd "$root"

fail=0
sources=()
for module in core trace; do
  [[ -f hyper/$module.h ]] && sources+=("hyper/$module.h")
  if [[ -d hyper/$module ]]; then
    while IFS= read -r -d '' f; do sources+=("$f"); done \
      < <(find "hyper/$module" -type f \( -name '*.h' -o -name '*.cc' \) -print0 | sort -z)
  fi
done
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
for module in core trace; do
if [[ -d "$build_dir/hyper/$module" ]]; then
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
  done < <(find "$build_dir/hyper/$module" -type f -name '*_test' -print0)
fi
done

if [[ $fail -ne 0 ]]; then
  exit 1
fi
echo "check_core_torch_free: ok (${#sources[@]} source files, $checked test binaries)"
