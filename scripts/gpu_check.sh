#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, builds hyper's CUDA configuration and runs
# every GPU test, then prints a summary of what ran and what it found. Prepared to run once,
# unattended, on a lent accelerator machine (docs/testing.md, "GPU check").
#
#   bash scripts/gpu_check.sh [--build-dir DIR] [--no-build] [--timeout S]
#
# What it runs (tests/cuda/cuda_mp_test.cc, one gtest binary):
#   - CUDA tensors on Gloo across ranks (ranks as threads sharing GPU 0; device memory staged
#     through the host): every collective, redistribute between all layout pairs, async, grads;
#   - NCCL with one rank per GPU (as many ranks as GPUs are visible, at most 4);
#   - async tensor parallelism (Colwise + Rowwise) on CUDA vs the single-device module;
#   - checkpoint save from CUDA DTensors, load into CUDA and host targets.
# Then, as a smoke test of the CPU suite on that machine, ctest -L 'comm|tensor' (fast).
#
# LibTorch: the project's .venv (scripts/deps.sh) when present or installable; else the
# Python named by $HYPER_PYTHON if its torch is a CUDA build. Without either, or without a
# visible GPU, it says why and exits 3 (nothing ran). Exit 0: every GPU test ran and passed;
# 1: a GPU test failed (the summary names it); 2: the build failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build_dir="$root/build-gpu"
build=1
timeout=900
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift ;;
    --no-build) build=0 ;;
    --timeout) timeout="$2"; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
log="$build_dir/gpu_check.log"
mkdir -p "$build_dir"
: >"$log"
say() { echo "gpu_check: $*" | tee -a "$log"; }
cannot() {
  say "COULD NOT RUN: $*"
  say "summary: nothing ran"
  exit 3
}

say "started $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(nproc) cores)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1 |
    sed 's/^/gpu_check:   gpu /' | tee -a "$log"
else
  say "nvidia-smi not found"
fi

# LibTorch with CUDA.
py="${HYPER_PYTHON:-$root/.venv/bin/python}"
if [[ ! -x "$py" ]]; then
  say "no $py: trying scripts/deps.sh (needs PyPI)"
  HYPER_SKIP_FUZZ=1 bash "$root/scripts/deps.sh" >>"$log" 2>&1 ||
    cannot "no LibTorch: $py is missing and scripts/deps.sh failed (no network?); set HYPER_PYTHON to a Python whose torch is a CUDA build"
fi
info=$("$py" -c 'import torch; print(torch.__version__, torch.version.cuda or "none", torch.cuda.is_available(), torch.cuda.device_count())' 2>"$build_dir/torch_import.err") ||
  cannot "the torch of $py does not import: $(tail -3 "$build_dir/torch_import.err")"
info=$(tail -1 <<<"$info")
read -r tv cuda_v avail ngpu <<<"$info"
say "torch $tv (CUDA $cuda_v) from $py: cuda available=$avail, devices=$ngpu"
[[ "$cuda_v" != none ]] || cannot "torch $tv is not a CUDA build"
[[ "$avail" == True && "$ngpu" -ge 1 ]] || cannot "torch sees no CUDA device (driver? CUDA_VISIBLE_DEVICES?)"
command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]] ||
  cannot "no nvcc: LibTorch's CMake package needs the CUDA toolkit"

if [[ $build == 1 ]]; then
  say "building the CUDA configuration in $build_dir (HYPER_WITH_CUDA=ON)"
  t0=$(date +%s)
  if ! HYPER_SKIP_DEPS=1 HYPER_TARGETS="cuda_mp_test comm_test tensor_test" \
       bash "$root/scripts/build.sh" "$build_dir" -DHYPER_WITH_CUDA=ON -DHYPER_PYTHON="$py" \
       -DHYPER_BUILD_BENCH=OFF -DHYPER_BUILD_EXAMPLES=OFF >>"$log" 2>&1; then
    tail -40 "$log"
    say "summary: BUILD FAILED (log: $log)"
    exit 2
  fi
  say "built in $(( $(date +%s) - t0 )) s"
fi
grep -q '^HYPER_WITH_CUDA:BOOL=ON' "$build_dir/CMakeCache.txt" ||
  cannot "$build_dir is not a HYPER_WITH_CUDA=ON build"

status=0
say "running cuda_mp_test"
out=$(timeout "$timeout" "$build_dir/tests/cuda_mp_test" 2>&1)
rc=$?
echo "$out" >>"$log"
echo "$out" | grep -E '^\[ +(OK|FAILED|SKIPPED) +\]' | sed 's/^/gpu_check:   /' | tee -a "$log"
# gtest prints a FAILED / SKIPPED test twice (when it ends and in the summary): count the
# lines written when a test ends, which carry its time "(N ms)".
ran=$(grep -cE '^\[ +OK +\] .*\([0-9]+ ms\)$' <<<"$out")
failed=$(grep -cE '^\[ +FAILED +\] .*\([0-9]+ ms\)$' <<<"$out")
skipped=$(grep -cE '^\[ +SKIPPED +\] .*\([0-9]+ ms\)$' <<<"$out")
# A skip that only says the machine has one GPU (NCCL needs two) is not a failure.
nccl_skips=$(grep -c 'skipped: NCCL needs 2 GPUs' <<<"$out")
if [[ $rc -ne 0 || $failed -gt 0 ]]; then
  status=1
  echo "$out" | grep -E 'Failure|error|Expected|Which is' | head -40 | sed 's/^/gpu_check:   /'
fi
if [[ $nccl_skips -gt 0 ]]; then
  say "NOTE: the NCCL test needs 2 GPUs; this machine has $ngpu (NCCL not exercised)"
fi
if [[ $skipped -gt $nccl_skips ]]; then
  say "WARNING: $((skipped - nccl_skips)) GPU test(s) skipped on a machine that has a GPU"
  status=1
fi

say "running the CPU comm and tensor tests on this machine"
if (cd "$build_dir" && timeout "$timeout" ctest -R '^(comm_test|tensor_test)$' --output-on-failure) >>"$log" 2>&1; then
  cpu="passed"
else
  cpu="FAILED"
  status=1
fi
say "summary: GPU tests: $ran passed, $failed failed, $skipped skipped (torch $tv, $ngpu GPU(s)); CPU comm/tensor tests: $cpu; log: $log"
exit $status
