#!/bin/sh
# check-backward.sh ATTNC EXAMPLES_DIR
# Runs every attention example's backward block (-backward) through `attnc
# run --check` on each target's pipeline, at ragged lengths (cross-attention
# with NQ != NK): the lowered backward must agree with the float64
# evaluation of the unoptimised one, and the float64 gradients with central
# differences of the forward. Prints every check's line.
set -e
attnc=$1 dir=$2
for e in mha gqa_causal sliding_window document_mask softcap_alibi cross_attention; do
  for run in "1 sm_70 23" "2 sm_80 1" "3 sm_90a 40" "4 sm_80 130"; do
    set -- $run
    args="--seed $1 -arch $2 -D N=$3 -D NQ=$3 -D NK=$(($3 + 6))"
    "$attnc" run "$dir/$e.attn" -backward --check $args || { echo "FAILED: $e $args"; exit 1; }
  done
done
