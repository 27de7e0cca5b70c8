#!/bin/sh
# ptx-diff.sh BASE_ATTNC NEW_ATTNC [OUTDIR]
# Compiles every example for every target, forward and with -backward, and the
# nv IR of each, with two attnc binaries; reports each output that differs
# (cmp). A behaviour-preserving change leaves the PTX byte-identical; the nv
# IR may differ only where the change is to the nv level itself.
# Exit status: 0 when all PTX is identical, 1 otherwise.
set -u
cd "$(dirname "$0")/.."
base=$1 new=$2 out=${3:-$(mktemp -d)}
mkdir -p "$out/base" "$out/new"
ptx_diff=0 nv_diff=0 n=0
for f in examples/*.attn; do
  e=$(basename "$f" .attn)
  for arch in sm_70 sm_80 sm_90a; do
    for mode in fwd bwd; do
      flag=""; [ "$mode" = bwd ] && flag=-backward
      for kind in ptx nv; do
        name="$e.$arch.$mode.$kind"
        "$base" "$f" -arch $arch $flag -emit=$kind -o "$out/base/$name" 2>"$out/base/$name.err"
        rb=$?
        "$new" "$f" -arch $arch $flag -emit=$kind -o "$out/new/$name" 2>"$out/new/$name.err"
        rn=$?
        n=$((n + 1))
        if [ $rb != $rn ] || ! cmp -s "$out/base/$name" "$out/new/$name" 2>/dev/null ||
           ! cmp -s "$out/base/$name.err" "$out/new/$name.err"; then
          echo "differs: $name (exit $rb -> $rn)"
          if [ $kind = ptx ]; then ptx_diff=$((ptx_diff + 1)); else nv_diff=$((nv_diff + 1)); fi
        fi
      done
    done
  done
done
echo "ptx-diff: $n outputs compared, $ptx_diff PTX and $nv_diff nv differ ($out)"
[ $ptx_diff = 0 ]
