#!/usr/bin/env bash
# Installs what hyper needs to build and test, and nothing else:
#   1. Debian packages (apt), only those missing;
#   2. the project's Python virtual environment (default <repo>/.venv, ignored by git) with the
#      pinned torch wheel (LibTorch 2.x for CMake, torchrun, PyTorch DTensor/DCP for the
#      benchmarks), safetensors (the independent reader in the tests) and numpy.
# Idempotent: when nothing is missing it prints nothing and returns in well under a second
# (no apt-get update, no pip).
#   HYPER_SKIP_DEPS=1     skip this script entirely (e.g. a machine without apt)
#   HYPER_EXTRA_DEPS="p"  more Debian packages to ensure (space-separated)
#   HYPER_SKIP_FUZZ=1     leave out clang + libclang-rt-dev (only scripts/fuzz.sh needs them)
#   HYPER_VENV=dir        the virtual environment (default <repo>/.venv)
#   HYPER_SKIP_VENV=1     leave the virtual environments alone (LibTorch then comes from CMake's
#                         own search, e.g. Torch_DIR)
#   HYPER_MS_VENV=dir     the MindSpore environment of hyper.mindspore's tests (default
#                         <repo>/.venv-ms): MindSpore 2.10 and its numpy, no torch
#   HYPER_SKIP_MINDSPORE=1  do not make it (its tests then fail: they never skip)
set -euo pipefail

if [[ "${HYPER_SKIP_DEPS:-0}" == 1 ]]; then
  exit 0
fi
root="$(cd "$(dirname "$0")/.." && pwd)"

# The pinned Python packages. torch 2.15.0 is the newest on PyPI (2026-11); its Linux wheel
# is a CUDA 13 build (libtorch_cuda, NCCL 2.30) with the C++11 ABI, so hyper links it with
# Debian's g++ and gtest. safetensors: the reference reader of our chunk files. pytest: the
# Python package's tests (python/tests); expecttest: what the wheel's OpInfo corpus imports.
PY_PINS=(torch==2.15.0 safetensors==0.8.0 numpy==2.4.6 pytest==9.2.0 expecttest==0.3.0)

# The MindSpore environment (hyper.mindspore, python/mindspore_tests): its own, because MindSpore
# 2.10 needs numpy < 2 (its extension modules are built against numpy 1.x) and must not see torch.
# safetensors: the checkpoint tests read chunk files with the reference reader.
MS_PINS=(mindspore==2.10.0 numpy==1.26.4 pytest==9.2.0 safetensors==0.8.0)

# Build: compiler, CMake, Ninja, ccache, gloo headers (LibTorch's ProcessGroupGloo.hpp includes
# them; the wheel does not ship them), JSON, xxHash, cairo + pkg-config + DejaVu fonts (the trace
# module's step picture and benchmark plots).
# Test: gtest/gmock, google-benchmark; iproute2 (ip netns / ip link / tc: the multi-host test,
# tests/multihost, builds its hosts as network namespaces).
# Fuzzing (scripts/fuzz.sh, run by scripts/test.sh): clang + libclang-rt-dev (libFuzzer, ASan).
PACKAGES=(
  g++ cmake ninja-build ccache python3
  libgloo-dev nlohmann-json3-dev libxxhash-dev libcairo2-dev pkg-config fonts-dejavu-core
  libgtest-dev libgmock-dev libbenchmark-dev iproute2
)
if [[ "${HYPER_SKIP_FUZZ:-0}" != 1 ]]; then
  PACKAGES+=(clang libclang-rt-dev)
fi
# Debian's own python3 makes virtual environments only with python3-venv (ensurepip).
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  PACKAGES+=(python3-venv)
fi
# Packages we skip (with a warning) when this distribution has no candidate for them
# (test.sh then skips the fuzzer with a note).
OPTIONAL=(clang libclang-rt-dev)
# shellcheck disable=SC2206
PACKAGES+=(${HYPER_EXTRA_DEPS:-})

apt_deps() {
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps.sh: dpkg-query not found: not a Debian-like system; install these yourself:" >&2
  echo "  ${PACKAGES[*]}" >&2
  return 0
fi

# A package counts as present when dpkg says it is installed, or when what we need from it is
# already there by other means (a toolchain from elsewhere, nodesource's nodejs that bundles
# npm and conflicts with Debian's npm package, gtest built into /usr/local, ...).
declare -A PROVIDES=(
  [g++]="cmd:g++"            [cmake]="cmd:cmake"        [ninja-build]="cmd:ninja"
  [ccache]="cmd:ccache"      [clang]="cmd:clang++"      [python3]="cmd:python3"
  [libclang-rt-dev]="glob:/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a"
  [libgtest-dev]="inc:gtest/gtest.h"    [libgmock-dev]="inc:gmock/gmock.h"
  [libbenchmark-dev]="inc:benchmark/benchmark.h"
  [nlohmann-json3-dev]="inc:nlohmann/json.hpp" [libxxhash-dev]="inc:xxhash.h"
  [libcairo2-dev]="inc:cairo/cairo.h"  [pkg-config]="cmd:pkg-config"
  [fonts-dejavu-core]="glob:/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
  [libgloo-dev]="inc:gloo/allgatherv.h"  [iproute2]="cmd:ip"
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
  return 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "deps.sh: missing packages and not root (no sudo): ${missing[*]}" >&2
    echo "deps.sh: run as root: apt-get install --no-install-recommends ${missing[*]}" >&2
    return 1
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
  return 0
fi

# dpkg's progress goes to a log, shown only when the installation fails.
log=$(mktemp /tmp/hyper-deps.XXXXXX.log)
if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${to_install[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  echo "deps.sh: apt-get install failed (log: $log)" >&2
  return 1
fi
rm -f "$log"
echo "deps.sh: installed ${to_install[*]}"
}

# A virtual environment with pinned packages: `pinned_venv DIR WHAT IMPORTS VERSION_OF PINS...`
# makes DIR with the first python3 >= 3.9 found and installs PINS, then checks that IMPORTS
# (a Python import statement) works. A stamp file holding the pins makes the check free once
# done; a changed pin list reinstalls (pip's wheel cache keeps that a local install).
pinned_venv() {
  local venv=$1 what=$2 imports=$3 version_of=$4
  shift 4
  local stamp="$venv/.hyper-pins"
  local want="$*"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  local py
  py=$(command -v python3 || true)
  if [[ -z "$py" ]] || ! "$py" -c 'import sys, venv; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    echo "deps.sh: python3 >= 3.9 with the venv module is needed for $what" >&2
    return 1
  fi
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "deps.sh: creating the virtual environment $venv ($what)"
    if ! "$py" -m venv "$venv"; then
      # Debian's own python3 needs python3-venv (ensurepip) for this.
      rm -rf "$venv"
      echo "deps.sh: '$py -m venv' failed; on Debian install python3-venv (apt-get install" \
           "python3-venv) or point HYPER_VENV / HYPER_MS_VENV at an existing environment" >&2
      return 1
    fi
  fi
  echo "deps.sh: installing $* into $venv (first time: a few GB, minutes)"
  local log
  log=$(mktemp /tmp/hyper-pip.XXXXXX.log)
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
      "$@" >"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "deps.sh: pip install failed (log: $log)" >&2
    return 1
  fi
  rm -f "$log"
  "$venv/bin/python" -c "$imports" || return 1
  printf '%s' "$want" >"$stamp"
  echo "deps.sh: $what $("$venv/bin/python" -c "$version_of" 2>/dev/null) ready in $venv"
}

# The project's environment (torch), and the MindSpore environment of hyper.mindspore's tests.
venv_deps() {
  [[ "${HYPER_SKIP_VENV:-0}" == 1 ]] && return 0
  pinned_venv "${HYPER_VENV:-$root/.venv}" "torch" \
    'import torch, safetensors, numpy, pytest, expecttest' \
    'import torch; print(torch.__version__)' "${PY_PINS[@]}"
}

ms_venv_deps() {
  [[ "${HYPER_SKIP_VENV:-0}" == 1 || "${HYPER_SKIP_MINDSPORE:-0}" == 1 ]] && return 0
  pinned_venv "${HYPER_MS_VENV:-$root/.venv-ms}" "MindSpore" \
    'import mindspore, numpy, pytest, safetensors' \
    'import mindspore; print(mindspore.__version__)' "${MS_PINS[@]}"
}

apt_deps
venv_deps
ms_venv_deps
