#!/bin/sh
# emit-tile-all.sh ATTNC EXAMPLES_DIR — every example's tile IR for every target.
set -e
for f in "$2"/*.attn; do
  for t in sm_70 sm_80 sm_90a; do
    echo "// $f $t"
    "$1" "$f" -emit=tile -arch $t
  done
done
