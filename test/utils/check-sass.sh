#!/bin/sh
# check-sass.sh ATTNC PTXAS13 CUOBJDUMP EXAMPLES_DIR SASS_CHECK...
# Compiles every example for sm_80, assembles it for the H200 (ptxas
# -arch=sm_90, as the driver does with sm_80 PTX there) and reads the SASS:
# per kernel the local memory (spills) inside loops and, for the attention
# examples, the MMA, ldmatrix and cp.async counts. Fails if an attention
# kernel lacks one, or any kernel spills in a loop.
set -e
attnc=$1 ptxas=$2 cuobjdump=$3 dir=$4
shift 4
tmp=${TMPDIR:-/tmp}/attnc-sass.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for f in "$dir"/*.attn; do
  n=$(basename "$f" .attn)
  "$attnc" "$f" -arch sm_80 -o "$tmp/$n.ptx"
  "$ptxas" -arch=sm_90 "$tmp/$n.ptx" -o "$tmp/$n.cubin"
  "$cuobjdump" -sass "$tmp/$n.cubin" > "$tmp/$n.sass"
  case $n in   # the attention examples (one kernel each) use every sm_80 feature
    mha|gqa_causal|softcap_alibi|sliding_window|document_mask|cross_attention)
      "$@" --need HMMA.16816 --need LDSM --need LDGSTS < "$tmp/$n.sass" ;;
    *) "$@" < "$tmp/$n.sass" ;;
  esac
done
