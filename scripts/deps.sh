#!/usr/bin/env bash
# Installs the Debian packages hyper needs to build and test, and nothing else.
# Idempotent: asks dpkg which packages are missing and installs only those; when nothing is
# missing it prints nothing and returns in well under a second (no apt-get update).
#   HYPER_SKIP_DEPS=1     skip this script entirely (e.g. a machine without apt)
#   HYPER_EXTRA_DEPS="p"  more packages to ensure (space-separated)
#   HYPER_SKIP_FUZZ=1     leave out clang + libclang-rt-dev (only scripts/fuzz.sh needs them)
set -euo pipefail

if [[ "${HYPER_SKIP_DEPS:-0}" == 1 ]]; then
  exit 0
fi

# Build: compiler, CMake, Ninja, ccache, LibTorch (+ c10d/Gloo), JSON, xxHash, zlib (tp's PNG
# timeline writer; also pulled in by libtorch-dev, listed because hyper uses it directly).
# Test: gtest/gmock, google-benchmark, python3-torch (/usr/bin/torchrun for the launcher
# interop test), node + npm (an independent safetensors reader for checkpoint tests).
# Fuzzing (scripts/fuzz.sh, run by scripts/test.sh): clang + libclang-rt-dev (libFuzzer, ASan).
PACKAGES=(
  g++ cmake ninja-build ccache
  libtorch-dev libgloo-dev nlohmann-json3-dev libxxhash-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch nodejs npm
)
if [[ "${HYPER_SKIP_FUZZ:-0}" != 1 ]]; then
  PACKAGES+=(clang libclang-rt-dev)
fi
# Packages we skip (with a warning) when this distribution has no candidate for them
# (test.sh then skips the fuzzer with a note).
OPTIONAL=(python3-torch clang libclang-rt-dev)
# shellcheck disable=SC2206
PACKAGES+=(${HYPER_EXTRA_DEPS:-})

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps.sh: dpkg-query not found: not a Debian-like system; install these yourself:" >&2
  echo "  ${PACKAGES[*]}" >&2
  exit 0
fi

# A package counts as present when dpkg says it is installed, or when what we need from it is
# already there by other means (a toolchain from elsewhere, nodesource's nodejs that bundles
# npm and conflicts with Debian's npm package, gtest built into /usr/local, ...).
declare -A PROVIDES=(
  [g++]="cmd:g++"            [cmake]="cmd:cmake"        [ninja-build]="cmd:ninja"
  [ccache]="cmd:ccache"      [nodejs]="cmd:node"        [npm]="cmd:npm"
  [python3-torch]="cmd:torchrun"     [clang]="cmd:clang++"
  [libclang-rt-dev]="glob:/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a"
  [libgtest-dev]="inc:gtest/gtest.h"    [libgmock-dev]="inc:gmock/gmock.h"
  [libbenchmark-dev]="inc:benchmark/benchmark.h"
  [nlohmann-json3-dev]="inc:nlohmann/json.hpp" [libxxhash-dev]="inc:xxhash.h"
  [zlib1g-dev]="inc:zlib.h"
)
provided() {
  local what=${PROVIDES[$1]:-}
  case "$what" in
    cmd:*) command -v "${what#cmd:}" >/dev/null 2>&1 ;;
    inc:*) [[ -e /usr/include/${what#inc:} || -e /usr/local/include/${what#inc:} ]] ;;
    glob:*) compgen -G "${what#glob:}" >/dev/null ;;
    *) return 1 ;;
  esac
}

# One dpkg-query call for all packages; "install ok installed" means present.
missing=()
status=$(dpkg-query -W -f='${Package} ${Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)
for p in "${PACKAGES[@]}"; do
  if ! grep -qx "$p install ok installed" <<<"$status" && ! provided "$p"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "deps.sh: missing packages and not root (no sudo): ${missing[*]}" >&2
    echo "deps.sh: run as root: apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

echo "deps.sh: installing ${missing[*]}"
"${SUDO[@]}" apt-get update -qq >/dev/null

# Drop optional packages that this distribution does not have (checked after the update:
# a fresh image may have empty package lists).
to_install=()
for p in "${missing[@]}"; do
  if [[ " ${OPTIONAL[*]} " == *" $p "* ]]; then
    candidate=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then
      echo "deps.sh: warning: $p has no installation candidate here; skipping it" >&2
      continue
    fi
  fi
  to_install+=("$p")
done
if [[ ${#to_install[@]} -eq 0 ]]; then
  exit 0
fi

# dpkg's progress goes to a log, shown only when the installation fails.
log=$(mktemp /tmp/hyper-deps.XXXXXX.log)
if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${to_install[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  echo "deps.sh: apt-get install failed (log: $log)" >&2
  exit 1
fi
rm -f "$log"
echo "deps.sh: installed ${to_install[*]}"
