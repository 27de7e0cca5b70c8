#!/bin/sh
# check-examples.sh ATTNC EXAMPLES_DIR TARGET [EACH_PASS_N [BATCH]]
# Runs every example through `attnc run --check` on TARGET's pipeline (so its
# tile sizes): the lowered program must agree with the float64 evaluation of
# the unoptimised one. Without EACH_PASS_N: at ragged lengths 1, 17 and 113,
# batch and heads > 1, GQA, cross-attention with NQ != NK. With it: once at
# length EACH_PASS_N and batch BATCH (default 2), with the check after every
# pass (each prefix of the pipeline). sm_90a takes head dims that fill its 64-column panels: DIM 64
# over one head. Each target has its own seed.
set -e
attnc=$1 dir=$2 arch=$3 each=${4:-} batch=${5:-2}
case $arch in sm_70) seed=1 ;; sm_80) seed=2 ;; sm_90a) seed=3 ;; *) echo "unknown target $arch"; exit 2 ;; esac
small="-D DIM=64 -D FF=96 -D HIDDEN=64 -D H=3"
heads="-D HEADS=4 -D KV_HEADS=2"
[ "$arch" = sm_90a ] && heads="-D HEADS=1 -D KV_HEADS=1"
check() {   # FILE MODE LEN SEED NK [B]
  args="$2 --seed $4 -arch $arch $small -D B=${6:-2} $heads -D N=$3 -D T=$3 -D NQ=$3 -D NK=$5"
  "$attnc" run "$1" $args -q 2>/dev/null ||
    { echo "FAILED: $1 $args"; "$attnc" run "$1" $args; exit 1; }
  n=$((n + 1))
}
n=0
for f in "$dir"/*.attn; do
  if [ -z "$each" ]; then
    for len in 1 17 113; do check "$f" --check $len $seed $((len + 6)); done
  else
    check "$f" --check-each-pass "$each" $((seed + 3)) $((each - 10)) "$batch"
  fi
done
echo "checked $n runs"
