#!/bin/sh
# check-examples.sh ATTNC EXAMPLES_DIR
# Runs every example through `attnc run --check` on ragged sizes, several
# seeds and each target's pipeline (so each target's tile sizes): the lowered
# program must agree with the float64 evaluation of the unoptimised one; and
# once more with the check after every pass (each prefix of the pipeline).
# Sizes are kept small enough for CI (a few seconds each). sm_90a takes
# head dims that fill its 64-column panels: DIM 64 over one head.
set -e
attnc=$1 dir=$2
small="-D DIM=64 -D FF=96 -D HIDDEN=64 -D B=2 -D H=3"
# the example, and head counts that target $1 compiles
src() {
  if [ "$1" = sm_90a ]; then echo "$2 -D HEADS=1 -D KV_HEADS=1"; else echo "$2 -D HEADS=4 -D KV_HEADS=2"; fi
}
n=0
for f in "$dir"/*.attn; do
  for len in 1 17 113; do
    for run in "1 sm_70" "2 sm_80" "3 sm_90a"; do
      set -- $run
      args="--seed $1 -arch $2 $small -D N=$len -D T=$len -D NQ=$len -D NK=$((len + 6))"
      g=$(src $2 "$f")
      "$attnc" run $g --check -q $args 2>/dev/null ||
        { echo "FAILED: $g $args"; "$attnc" run $g --check $args; exit 1; }
      n=$((n + 1))
    done
  done
done
# after every pass of every target's pipeline (each prefix), on several key
# tiles; and N = 257 (three 128-key tiles and a ragged end)
for f in "$dir"/*.attn; do
  for run in "4 sm_70 100" "5 sm_80 150" "6 sm_90a 257"; do
    set -- $run
    args="--seed $1 -arch $2 $small -D N=$3 -D T=$3 -D NQ=$3 -D NK=$(($3 - 10))"
    g=$(src $2 "$f")
    "$attnc" run $g --check-each-pass -q $args 2>/dev/null ||
      { echo "FAILED: $g --check-each-pass $args"; "$attnc" run $g --check-each-pass $args; exit 1; }
    n=$((n + 1))
  done
done
# a batch of 3
"$attnc" run "$dir/mha.attn" --check -q -arch sm_70 -D N=257 -D B=3
n=$((n + 1))
echo "checked $n runs"
