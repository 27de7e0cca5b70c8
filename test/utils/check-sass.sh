#!/bin/sh
# check-sass.sh ATTNC PTXAS13 CUOBJDUMP EXAMPLES_DIR SASS_CHECK...
# Compiles each attention example for sm_80, assembles it for the H200
# (ptxas -arch=sm_90, as the driver does with sm_80 PTX there) and reads the
# SASS: per kernel the MMA, ldmatrix and cp.async counts and the local memory
# (spills) inside loops. Fails if a kernel lacks one or spills in a loop.
set -e
attnc=$1 ptxas=$2 cuobjdump=$3 dir=$4
shift 4
tmp=${TMPDIR:-/tmp}/attnc-sass.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for n in mha gqa_causal softcap_alibi sliding_window document_mask cross_attention; do
  "$attnc" "$dir/$n.attn" -arch sm_80 -o "$tmp/$n.ptx"
  "$ptxas" -arch=sm_90 "$tmp/$n.ptx" -o "$tmp/$n.cubin"
  "$cuobjdump" -sass "$tmp/$n.cubin" > "$tmp/$n.sass"
  "$@" --need HMMA.16816 --need LDSM --need LDGSTS < "$tmp/$n.sass"
done
