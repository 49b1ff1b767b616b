#!/usr/bin/env bash
# hyper's benchmark suite, one command: builds, runs every benchmark program over the suite's
# grid of sizes and rank counts on local ranks (build/tools/hyperrun, output prefixed with
# [rank i]), then bench_report turns the result JSON into docs/benchmarks.md,
# docs/benchmarks/*.png and docs/benchmarks/results.json (the summary table leads
# docs/benchmarks.md; README.md links to it), and prints the summary table. Every row is ours
# vs a baseline timed side by side in one run.
# Machines are shared and noisy: compare ratios, not absolute times.
#
#   bash scripts/bench.sh [--quick] [--no-build] [--build-dir DIR] [--out DIR] [build-dir]
#
# Full mode (default; 15-20 minutes on an idle 2-core machine, much longer when it is shared):
#   comm_bench, redistribute_bench: size sweep 1, 4, 16, 64, 256 MiB at 4 ranks, rank sweep
#     2, 3, 4, 8 ranks at 64 MiB (the 4-rank 64 MiB run is the headline, shared by both).
#     Reps after 1 warm-up: 5 up to 16 MiB, 3 at 64 MiB; at 256 MiB and on 8 ranks one cold
#     rep (the padded and via-Replicate baselines move GiBs there: seconds to minutes a call
#     on 2 cores).
#   dcp_bench: 4, 16, 64 MiB on 4 ranks.   tp_bench (no size parameter): 2 ranks (41 reps)
#     and 4 ranks (15 reps).
#   Writes docs/benchmarks.md and docs/benchmarks/; exits 3 (after writing
#   the report) when a benchmark program is missing.
# --quick: comm_bench at 1 and 2 MiB on 2 ranks and 1 MiB on 3 ranks, redistribute_bench and
#   dcp_bench at 1 MiB on 2 ranks, tp_bench with a tiny block on 2 ranks; 1 rep each. The
#   report goes to <build-dir>/bench/quick/ (docs untouched); a missing program is a warning.
#   It smoke-tests the pipeline (ctest bench_suite_quick, about 30 s).
# --no-build: use the programs already built.  --out DIR: where the report goes.
# Results JSON: <build-dir>/bench/results/ (full) or <build-dir>/bench/quick/results/ (quick).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
quick=0
build=1
build_dir=build
out_dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --out) out_dir="$2"; shift ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "bench.sh: unknown option '$1' (see bash scripts/bench.sh --help)" >&2; exit 2 ;;
    *) build_dir="$1" ;;
  esac
  shift
done
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

start=$(date +%s)
if [[ $build == 1 ]]; then
  bash "$root/scripts/build.sh" "$build_dir"
fi
run="$build_dir/tools/hyperrun"
report="$build_dir/bench/bench_report"
for f in "$run" "$report"; do
  [[ -x "$f" ]] || { echo "bench.sh: $f is not built (run without --no-build)" >&2; exit 2; }
done

all_programs=(comm_bench redistribute_bench dcp_bench tp_bench)
if [[ $quick == 1 ]]; then
  results="$build_dir/bench/quick/results"
  out_dir="${out_dir:-$build_dir/bench/quick}"
  headline=(--headline-ranks 2 --headline-mib 1)
else
  results="$build_dir/bench/results"
  out_dir="${out_dir:-$root/docs}"
  headline=(--headline-ranks 4 --headline-mib 64)
fi
mkdir -p "$results"
rm -f "$results"/*.json "$results"/*.png

# grid <program>: one line per run of the program: "<ranks> <label> <arguments...>"; the
# result goes to $results/<program>_<label>.json (--out).
grid() {
  if [[ $quick == 1 ]]; then
    case "$1" in
      comm_bench) printf '%s\n' "2 2r_1mib --mib 1 --reps 1" "2 2r_2mib --mib 2 --reps 1" \
                                 "3 3r_1mib --mib 1 --reps 1" ;;
      redistribute_bench|dcp_bench) printf '%s\n' "2 2r_1mib --mib 1 --reps 1" ;;
      tp_bench) printf '%s\n' "2 2ranks --reps 1 --hidden 64 --heads 4 --ffn 128 --seq 16" ;;
    esac
    return
  fi
  case "$1" in
    comm_bench|redistribute_bench)
      for m in 1 4 16; do echo "4 4r_${m}mib --mib $m --reps 5"; done
      echo "4 4r_64mib --mib 64 --reps 3"
      echo "4 4r_256mib --mib 256 --reps 1 --warmup 0"
      for r in 2 3; do echo "$r ${r}r_64mib --mib 64 --reps 3"; done
      echo "8 8r_64mib --mib 64 --reps 1 --warmup 0" ;;
    dcp_bench) for m in 4 16 64; do echo "4 4r_${m}mib --mib $m --reps 3"; done ;;
    # A training step moves 90-140 ms from one repetition to the next on a 2-core VM: 41
    # alternating repetitions per side on 2 ranks (15 on 4) for the ratios' medians.
    tp_bench) echo "2 2ranks --reps 41"; echo "4 4ranks --reps 15" ;;
  esac
}

missing=()
failed=()
for p in "${all_programs[@]}"; do
  exe="$build_dir/bench/$p"
  if [[ ! -x "$exe" ]]; then
    echo "== $p: MISSING ($exe is not built)"
    missing+=("$p")
    continue
  fi
  while read -r ranks label args; do
    [[ -n "$ranks" ]] || continue
    echo "== $p on $ranks ranks: $args"
    t0=$(date +%s)
    # shellcheck disable=SC2086  # $args is a list of words
    if ! "$run" -n "$ranks" --timeout 1200 -- "$exe" $args --out "$results/${p}_${label}.json" \
         < /dev/null; then
      echo "== $p on $ranks ranks ($args) FAILED" >&2
      failed+=("$p:$label")
    fi
    echo "== $p on $ranks ranks ($args) took $(( $(date +%s) - t0 )) s"
  done < <(grid "$p")
done

# The real peer: hyper (bench/torch_peer_bench) and PyTorch 2.x (bench/py/torch_peer.py, the
# project's .venv) on the same cases, started the same way under hyperrun, alternately, for
# $peer_rounds rounds each; bench/py/peer_compare.py pairs them into torch_peer_<label>.json.
py="${HYPER_PYTHON:-$root/.venv/bin/python}"
peer_grid() {
  if [[ $quick == 1 ]]; then
    printf '%s\n' "2 redistribute_2r_1mib --suite redistribute --mib 1 --reps 1" \
                   "2 dcp_2r_1mib --suite dcp --mib 1 --reps 1" \
                   "1 dcp_reshard_1r --suite dcp --mode reshard --reps 1" \
                   "2 overlap_2r_1mib --suite overlap --mib 1 --reps 1" \
                   "2 tp_2r --suite tp --reps 1"
    return
  fi
  printf '%s\n' "4 redistribute_4r_64mib --suite redistribute --mib 64 --reps 5" \
                 "4 dcp_4r_16mib --suite dcp --mib 16 --reps 3" \
                 "4 dcp_4r_64mib --suite dcp --mib 64 --reps 3" \
                 "2 dcp_reshard_4to2 --suite dcp --mode reshard --reps 3" \
                 "2 overlap_2r_8mib --suite overlap --mib 8 --reps 9" \
                 "4 overlap_4r_8mib --suite overlap --mib 8 --reps 9" \
                 "2 tp_2r --suite tp --reps 9" \
                 "4 tp_4r --suite tp --reps 5"
}
peer_rounds=$([[ $quick == 1 ]] && echo 1 || echo 3)
peer_exe="$build_dir/bench/torch_peer_bench"
all_programs+=(torch_peer torch_peer_dcp torch_peer_overlap torch_peer_tp)
if [[ ! -x "$peer_exe" || ! -x "$py" ]]; then
  echo "== torch_peer: MISSING ($peer_exe or $py)"
  missing+=(torch_peer torch_peer_dcp torch_peer_overlap torch_peer_tp)
else
  peer_dir=$(mktemp -d "${TMPDIR:-/tmp}/hyper-peer.XXXXXX")
  while read -r ranks label args; do
    [[ -n "$ranks" ]] || continue
    hyper_files=() torch_files=()
    for ((round = 0; round < peer_rounds; ++round)); do
      for side in hyper torch; do
        # alternate which side goes first in each round
        if (( round % 2 == 1 )); then side=$([[ $side == hyper ]] && echo torch || echo hyper); fi
        f="$peer_dir/${label}_${side}_${round}.json"
        extra=()
        # A reshard row loads the checkpoint its side saved in the dcp run before it.
        [[ "$args" == *reshard* ]] && extra=(--from "$peer_dir/keep_${side}")
        [[ "$args" == "--suite dcp --mib"* ]] && extra=(--keep "$peer_dir/keep_${side}" --dir "$peer_dir")
        echo "== torch_peer ($side) on $ranks ranks: $args"
        if [[ $side == hyper ]]; then
          cmd=("$peer_exe")
          hyper_files+=("$f")
        else
          cmd=("$py" "$root/bench/py/torch_peer.py")
          torch_files+=("$f")
        fi
        # shellcheck disable=SC2086
        if ! "$run" -n "$ranks" --timeout 1200 -- "${cmd[@]}" $args "${extra[@]}" --out "$f" \
             < /dev/null; then
          echo "== torch_peer ($side) $label FAILED" >&2
          failed+=("torch_peer:$label:$side")
          continue 3
        fi
      done
    done
    # A reshard row joins the result file of the save/load run whose checkpoint it loaded.
    if [[ "$args" == *reshard* ]]; then
      label="$prev_label"
      hyper_files=("${prev_hyper[@]}" "${hyper_files[@]}")
      torch_files=("${prev_torch[@]}" "${torch_files[@]}")
    fi
    "$py" "$root/bench/py/peer_compare.py" --out "$results/torch_peer_${label}.json" \
      --hyper "${hyper_files[@]}" --torch "${torch_files[@]}" || failed+=("torch_peer:$label")
    prev_label="$label"
    prev_hyper=("${hyper_files[@]}")
    prev_torch=("${torch_files[@]}")
  done < <(peer_grid)
  rm -rf "$peer_dir"
fi

report_args=(--results "$results" --md "$out_dir/benchmarks.md" --plots "$out_dir/benchmarks"
             --json "$out_dir/benchmarks/results.json" --expect "$(IFS=,; echo "${all_programs[*]}")"
             "${headline[@]}" --duration-s "$(( $(date +%s) - start ))")
if [[ $quick == 1 ]]; then
  report_args+=(--command "bash scripts/bench.sh --quick")
else
  report_args+=(--command "bash scripts/bench.sh" --require)
fi
rc=0
"$report" "${report_args[@]}" || rc=$?
echo "suite took $(( $(date +%s) - start )) s; report: $out_dir/benchmarks.md"
if [[ $quick == 1 ]]; then  # the smoke test: the whole pipeline produced its outputs
  for f in "$out_dir/benchmarks.md" "$out_dir/benchmarks/results.json"; do
    [[ -s "$f" ]] || { echo "bench.sh: --quick produced no $f" >&2; exit 1; }
  done
  compgen -G "$out_dir/benchmarks/*.png" > /dev/null ||
    { echo "bench.sh: --quick produced no plot in $out_dir/benchmarks/" >&2; exit 1; }
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "bench.sh: FAILED runs: ${failed[*]}" >&2
  exit 1
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $quick == 1 ]]; then
    echo "bench.sh: warning: not built, skipped: ${missing[*]}" >&2
  else
    echo "bench.sh: the full suite needs every benchmark program; not built: ${missing[*]}" >&2
    exit 3
  fi
fi
exit $rc
