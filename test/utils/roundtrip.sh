#!/bin/sh
# roundtrip.sh ATTNC ATTNC_OPT EXAMPLES_DIR TMP
# Every example's IR, with and without locations, prints -> parses -> prints
# identically and passes the verifier. Used by test/examples/roundtrip.test.
set -e
attnc=$1 opt=$2 dir=$3 tmp=$4
n=0
for f in "$dir"/*.attn; do
  for loc in "" -print-loc; do
    "$attnc" "$f" $loc -o "$tmp.1.ir"
    "$opt" "$tmp.1.ir" $loc -verify-roundtrip -o "$tmp.2.ir"
    diff "$tmp.1.ir" "$tmp.2.ir" || { echo "round trip differs: $f $loc"; exit 1; }
  done
  n=$((n + 1))
done
echo "round trip ok: $n examples"
