#!/usr/bin/env bash
# Trains the example transformer block on 4 ranks with TP (losses checked against the
# single-device block by tp_train itself), checkpoints it, then resumes the checkpoint on 2
# ranks (resharded on load), checks every parameter against the single-device block after the
# same steps and runs one more checked step. Twice: the plain torch::nn block (the default),
# then the hookable block with async sequence parallelism, saved on 4 ranks and resumed as
# the plain block on 2 (the two forms share parameter names, so one's checkpoint loads into
# the other).
#   run.sh <hyperrun> <tp_train>
set -euo pipefail
hyperrun="$1"
prog="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

for save_model in plain hookable; do
rm -rf "$dir/ckpt"
out=$("$hyperrun" -n 4 --timeout 300 -- "$prog" --model "$save_model" --steps 3 --save "$dir/ckpt")
echo "$out"
grep -q "^\[rank 0\]: step 3 .* ok$" <<<"$out" || { echo "tp_train: step 3 not reported ok" >&2; exit 1; }
grep -q "^\[rank 0\]: saved .* step 3 to " <<<"$out" || { echo "tp_train: no checkpoint saved" >&2; exit 1; }
test -f "$dir/ckpt/.metadata" || { echo "tp_train: $dir/ckpt/.metadata missing" >&2; exit 1; }

out=$("$hyperrun" -n 2 --timeout 300 -- "$prog" --load "$dir/ckpt")
echo "$out"
grep -q "^\[rank 0\]: loaded step 3: all .* parameters equal" <<<"$out" || { echo "tp_train: load check not reported" >&2; exit 1; }
grep -q "^\[rank 0\]: step 4 .* ok$" <<<"$out" || { echo "tp_train: step 4 not reported ok" >&2; exit 1; }
grep -q "^\[rank 0\]: tp_train: ok$" <<<"$out" || { echo "tp_train: resume did not finish ok" >&2; exit 1; }
echo "tp_train: $save_model on 4 ranks, resumed as plain on 2: ok"
done
echo "tp_train: ok"
