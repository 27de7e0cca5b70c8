#!/bin/sh
# check-ptxas.sh ATTNC PTXAS EXAMPLES_DIR ARCH [ATTNC_FLAG]
# Compiles every example for ARCH (sm_70, sm_80, sm_90a; with ATTNC_FLAG,
# e.g. -backward, given to attnc; -backward leaves out the examples of a
# paged KV cache, which have none) and assembles the
# PTX with a CUDA 12 ptxas; prints per kernel: registers, spill bytes, shared
# memory. Fails if attnc or ptxas fails, or if the PTX touches local memory.
set -e
attnc=$1 ptxas=$2 dir=$3 arch=$4 flag=${5:-}
tmp=${TMPDIR:-/tmp}/attnc-ptxas.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for f in "$dir"/*.attn; do
  n=$(basename "$f" .attn)
  # a paged KV cache has no backward (attnc refuses -backward: doc/dsl.md)
  if [ "$flag" = -backward ] && grep -qE '^ *pages\(' "$f"; then continue; fi
  "$attnc" "$f" -arch "$arch" $flag -o "$tmp/$n.ptx"
  if grep -q '\.local' "$tmp/$n.ptx"; then echo "$n: the PTX uses local memory"; exit 1; fi
  "$ptxas" -arch="$arch" -v "$tmp/$n.ptx" -o "$tmp/$n.cubin" 2>"$tmp/$n.log" || { cat "$tmp/$n.log"; exit 1; }
  # ptxas -v: "Compiling entry function 'K'", "... N bytes spill stores ...", "Used R registers"
  awk -v ex="$n" '
    /Compiling entry function/ { match($0, /\047[^\047]*\047/); k = substr($0, RSTART + 1, RLENGTH - 2) }
    /bytes spill stores/ { for (i = 1; i <= NF; i++) if ($i == "spill" && $(i+1) == "stores,") s = $(i-2) }
    /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i+1);
                              printf "%s %s: registers %s, spill stores %s bytes\n", ex, k, r, s }
  ' "$tmp/$n.log"
  grep -o '^// kernel name=[a-z_0-9]* .* smem=[0-9]*' "$tmp/$n.ptx" | sed "s|^// kernel name=|$n kernel |; s| grid=.*smem=| smem |"
done
echo "assembled all examples"
