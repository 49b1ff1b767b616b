#!/usr/bin/env bash
# The main demo (docs/demo.md walks through its output): installs what is missing, builds the
# demo and the tools it uses, then on local ranks:
#   0. hyper-plan prints the plan of a RaggedShard -> RaggedShard redistribution (no ranks);
#   1. phase train-save on 4 ranks: a RaggedShard parameter, redistributions with bytes vs the
#      lower bound, tensor-parallel training steps with async overlap (trace + PNG), an async
#      checkpoint save of mixed layouts;
#   2. hyper-dcp verify checks the checkpoint's checksums;
#   3. phase load on 2 ranks: the checkpoint loaded into other layouts, every value checked,
#      and the summary table;
#   4. the Python part on 2 ranks (examples/demo.py under torchrun): RaggedShard, the
#      checkpoint loaded from Python into hyper and PyTorch DTensors, a torch.nn block with
#      hyper.tp beside one device, three such blocks with hyper.fsdp.fully_shard beside one
#      device.
#
#   bash scripts/demo.sh [build-dir] [--no-build] [--quick] [--out DIR] [--timeout S]
#                        [-- extra demo arguments, given to both phases]
# build-dir: default build. --no-build: use the binaries already in build-dir (the ctest).
# --quick: small sizes (seconds; the ctest). --out: output dir (default <build-dir>/demo).
# --timeout: per phase, for hyperrun (default 600 s). Exit status: non-zero on any mismatch.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

build_dir=build
build=1
out=
timeout=600
demo_args=()
if [[ $# -gt 0 && "$1" != -* ]]; then
  build_dir="$1"
  shift
fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-build) build=0 ;;
    --quick) demo_args+=(--rows 64 --cols 50 --steps 2 --hidden 64 --ffn 128 --batch 2 --seq 16) ;;
    --out) out="$2"; shift ;;
    --timeout) timeout="$2"; shift ;;
    --) shift; demo_args+=("$@"); break ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
out="${out:-$build_dir/demo}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

if [[ "$build" == 1 ]]; then
  HYPER_TARGETS="${HYPER_TARGETS:-demo hyperrun hyper-plan hyper-dcp hyper_python_module hyper_python_files}" \
    bash "$root/scripts/build.sh" "$build_dir"
fi

hyperrun="$build_dir/tools/hyperrun"
plan="$build_dir/tools/hyper-plan"
dcp="$build_dir/tools/hyper-dcp"
demo="$build_dir/examples/demo"
python="$root/.venv/bin/python"
for exe in "$hyperrun" "$plan" "$dcp" "$demo" "$python"; do
  if [[ ! -x "$exe" ]]; then
    echo "demo.sh: $exe was not built (HYPER_BUILD_TOOLS / HYPER_BUILD_EXAMPLES off?)" >&2
    exit 1
  fi
done
if ! ls "$build_dir"/python/hyper/_C*.so >/dev/null 2>&1; then
  echo "demo.sh: the Python package was not built in $build_dir/python (HYPER_BUILD_PYTHON off?)" >&2
  exit 1
fi

ckpt="$out/checkpoint"
# Remove only what an earlier run left (never the whole --out directory).
rm -rf "$ckpt" "$out/reference" "$out/summary.tsv" "$out/tp_step_trace.json" "$out/tp_step.png"
mkdir -p "$out"
start=$SECONDS

echo "== 0. The plan of a RaggedShard units change, computed by the torch-free core (hyper-plan)"
echo "   a [16, 64] float32 tensor on 4 ranks, units (1,1,1,13) -> (13,1,1,1)"
"$plan" --summary --verify \
  --src "mesh=[4] placements=[RS((0,1),(1,1,1,13))] shape=[16,64]" \
  --dst "mesh=[4] placements=[RS((0,1),(13,1,1,1))] shape=[16,64]" | sed 's/^/   /'
echo "   (hyper-plan without --summary lists every box each rank sends and receives)"
echo

# Rank 0 tells the story: its prefix is dropped; other ranks only speak up on errors.
"$hyperrun" -n 4 --timeout "$timeout" -- \
  "$demo" --phase train-save --dir "$ckpt" --out "$out" "${demo_args[@]}" | sed 's/^\[rank 0\]: //'

echo
echo "== hyper-dcp verify: every chunk's checksums"
"$dcp" verify "$ckpt" | tail -n 3 | sed 's/^/   /'
echo

"$hyperrun" -n 2 --timeout "$timeout" -- \
  "$demo" --phase load --dir "$ckpt" --out "$out" "${demo_args[@]}" | sed 's/^\[rank 0\]: //'

echo
# The Python part: the same checkpoint from Python, on 2 ranks (torchrun; rank 0 prints).
PYTHONPATH="$build_dir/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 \
  timeout "$timeout" "$python" -m torch.distributed.run --standalone --nproc-per-node 2 \
  "$root/examples/demo.py" --dir "$ckpt" 2>&1 | grep -v "^W[0-9]* .*run.py\|^\*\*\*\*\|OMP_NUM_THREADS"

for f in "$out/tp_step_trace.json" "$out/tp_step.png" "$ckpt/.metadata"; do
  if [[ ! -s "$f" ]]; then
    echo "demo.sh: expected output $f is missing" >&2
    exit 1
  fi
done
echo
echo "demo.sh: done in $((SECONDS - start)) s (both phases and the Python part); outputs in $out"
