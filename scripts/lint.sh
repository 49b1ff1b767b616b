#!/usr/bin/env bash
# Static checks of the layer rules (docs/architecture.md, docs/testing.md):
#   internal-includes  no file includes hyper/<L>/internal/... unless it lives under hyper/<L>/
#                      (sources, headers and tests under hyper/, tools/, bench/, examples/,
#                      tests/), and no CMake file outside hyper/<L>/ names a file under
#                      hyper/<L>/internal/ (compiling another layer's internals is the same
#                      reach). What another layer needs becomes public API of layer L.
#   core-torch-free    no file under hyper/core or hyper/trace (.h/.cc) nor hyper/core.h or
#                      hyper/trace.h includes a header
#                      beginning with ATen/, c10/ or torch/ (any quotes, any spacing), and no
#                      core test binary (<build-dir>/hyper/core/**/*_test) has a DT_NEEDED
#                      entry on a torch or c10 library (Debian installs LibTorch's headers in
#                      /usr/include, so a clean build alone does not prove it). The same for
#                      hyper::dcp_storage's files and hyper._core (python/src/core_module.cc,
#                      placement_tuple.h; <build-dir>/python/hyper/_core*.so).
# Every violation is printed as `lint: <check>: FILE:LINE: ...`; the exit status is 1 if any.
#   bash scripts/lint.sh [--root DIR] [--build DIR] [CHECK...]   (default: every check)
# --root: the tree to check (default: this checkout); --build: the build dir whose core test
# binaries are inspected (default <root>/build; skipped if absent).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir=""
checks=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --root) root="$(cd "$2" && pwd)"; shift 2 ;;
    --build) build_dir="$2"; shift 2 ;;
    internal-includes|core-torch-free) checks+=("$1"); shift ;;
    *) echo "lint.sh: unknown argument '$1' (checks: internal-includes, core-torch-free)" >&2
       exit 2 ;;
  esac
done
[[ ${#checks[@]} -gt 0 ]] || checks=(internal-includes core-torch-free)
build_dir="${build_dir:-$root/build}"
case "$build_dir" in /*) ;; *) build_dir="$PWD/$build_dir" ;; esac
cd "$root"

fail=0
report() {  # report CHECK FILE LINE MESSAGE
  echo "lint: $1: $2:$3: $4" >&2
  fail=1
}

# The layer a path belongs to (hyper/<L>/...), or "" outside hyper/<L>/.
layer_of() {
  if [[ "$1" =~ ^hyper/([^/]+)/ ]]; then echo "${BASH_REMATCH[1]}"; else echo ""; fi
}

# Files under the given top-level folders whose name ends in one of the given suffixes.
files_under() {  # files_under "dir..." "-name pattern..."
  local dirs=() d
  for d in $1; do [[ -d "$d" ]] && dirs+=("$d"); done
  [[ ${#dirs[@]} -gt 0 ]] || return 0
  # shellcheck disable=SC2086
  find "${dirs[@]}" -type f \( $2 \) -print | LC_ALL=C sort
}

# The lines of the files named on stdin that match the extended regex $1, one per line as
# FILE<TAB>LINE<TAB>TEXT.
matching_lines() {
  xargs -r -d '\n' grep -nHE "$1" -- | sed -E 's/^([^:]*):([0-9]+):/\1\t\2\t/' || true
}

check_internal_includes() {
  local f line text inc target owner mine sources cmakes
  local re='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][[:space:]]*([^">[:space:]]+)'
  sources=$(files_under "hyper tools bench examples tests" \
              "-name *.h -o -name *.hpp -o -name *.cc -o -name *.cpp -o -name *.inc")
  while IFS=$'\t' read -r f line text; do
    [[ "$text" =~ $re ]] || continue
    inc="${BASH_REMATCH[1]}"
    # A relative include ("internal/x.h", "../tp/internal/x.h") is resolved against the
    # including file's folder; "hyper/..." is taken from the root.
    if [[ "$inc" == hyper/* ]]; then
      target="$inc"
    else
      target="$(realpath -m --relative-to=. "$(dirname "$f")/$inc")"
    fi
    owner="$(layer_of "$target")"
    mine="$(layer_of "$f")"
    [[ -z "$owner" || "$owner" == "$mine" ]] && continue
    report internal-includes "$f" "$line" \
      "includes $inc, an internal header of layer '$owner'$( [[ -n "$mine" ]] && echo " (this file is in layer '$mine')" ); make what is needed public API of '$owner'"
  done < <(matching_lines '^[[:space:]]*#[[:space:]]*include.*(^|[<"/])internal/' <<<"$sources")
  # CMake files: naming another layer's internal file (e.g. compiling it into a target).
  cmakes=$( { [[ -f CMakeLists.txt ]] && echo CMakeLists.txt;
              files_under "cmake hyper tools bench examples tests" \
                "-name CMakeLists.txt -o -name *.cmake"; } )
  while IFS=$'\t' read -r f line text; do
    mine="$(layer_of "$f")"
    while [[ "$text" =~ hyper/([a-z0-9_]+)/internal/([A-Za-z0-9_./-]*) ]]; do
      owner="${BASH_REMATCH[1]}"
      if [[ "$owner" != "$mine" ]]; then
        report internal-includes "$f" "$line" \
          "names hyper/$owner/internal/${BASH_REMATCH[2]}, an internal file of layer '$owner'; link hyper::$owner and use its public API"
      fi
      text="${text#*hyper/"$owner"/internal/}"
    done
  done < <(matching_lines 'hyper/[a-z0-9_]+/internal/' <<<"$cmakes")
  echo "lint: internal-includes: $(grep -c . <<<"$sources") sources and" \
       "$(grep -c . <<<"$cmakes") CMake files checked"
}

check_core_torch_free() {
  local sources=() f hit exe needed bad checked=0 module
  # The core and the torch-free trace module (docs/architecture.md).
  for module in core trace; do
    [[ -f hyper/$module.h ]] && sources+=("hyper/$module.h")
    while IFS= read -r f; do sources+=("$f"); done < <(files_under "hyper/$module" "-name *.h -o -name *.cc")
  done
  # hyper::dcp_storage (the checkpoint's files, writer and save protocol) and hyper._core, the
  # extension module of the MindSpore package, which imports without torch.
  for f in hyper/dcp/{fs,dir_lock,checksum,safetensors,metadata,reader,writer,save_protocol}.{h,cc} \
           hyper/dcp/internal/json.{h,cc} python/src/core_module.cc python/src/placement_tuple.h; do
    [[ -f $f ]] && sources+=("$f")
  done
  if [[ ${#sources[@]} -eq 0 ]]; then
    report core-torch-free hyper/core 0 "no sources under hyper/core"
    return
  fi
  # '#', optional blanks, 'include', optional blanks, '<' or '"', optional blanks, the prefix.
  local re='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][[:space:]]*(ATen|c10|torch)/'
  while IFS= read -r hit; do
    [[ -z "$hit" ]] && continue
    # hit is FILE:LINE:TEXT
    report core-torch-free "${hit%%:*}" "$(cut -d: -f2 <<<"$hit")" \
      "a torch-free module includes a LibTorch header: $(cut -d: -f3- <<<"$hit" | sed 's/^[[:space:]]*//')"
  done < <(grep -nE "$re" "${sources[@]}" /dev/null || true)
  for module in core trace; do
    [[ -d "$build_dir/hyper/$module" ]] || continue
    while IFS= read -r -d '' exe; do
      # Only ELF files (skip e.g. CMake's *_test[1]_include.cmake or directories).
      [[ "$(head -c 4 "$exe" | od -An -c | tr -d ' ')" == '177ELF' ]] || continue
      checked=$((checked + 1))
      needed=$(readelf -d "$exe" | grep '(NEEDED)' || true)
      if bad=$(grep -E 'torch|c10' <<<"$needed"); then
        report core-torch-free "$exe" 0 "links LibTorch: $(tr '\n' ' ' <<<"$bad")"
      fi
    done < <(find "$build_dir/hyper/$module" -type f -name '*_test' -print0)
  done
  while IFS= read -r -d '' exe; do
    checked=$((checked + 1))
    needed=$(readelf -d "$exe" | grep '(NEEDED)' || true)
    if bad=$(grep -E 'torch|c10' <<<"$needed"); then
      report core-torch-free "$exe" 0 "links LibTorch: $(tr '\n' ' ' <<<"$bad")"
    fi
  done < <(find "$build_dir/python/hyper" -maxdepth 1 -type f -name '_core*.so' -print0 2>/dev/null)
  echo "lint: core-torch-free: ${#sources[@]} source files, $checked test binaries checked"
}

for c in "${checks[@]}"; do
  case "$c" in
    internal-includes) check_internal_includes ;;
    core-torch-free) check_core_torch_free ;;
  esac
done
if [[ $fail -ne 0 ]]; then
  echo "lint: FAILED (violations above)" >&2
  exit 1
fi
echo "lint: ok (${checks[*]})"
