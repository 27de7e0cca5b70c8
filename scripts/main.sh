#!/bin/sh
# main.sh — the main job: installs dependencies, builds attnc, compiles every
# example in examples/ to attn-level IR (printed), and runs it.
#
# Running: there is no GPU code generation yet (issue #4), so every example
# runs on the CPU reference interpreter, after its target's pipeline, on small
# ragged sizes, checked against a float64 evaluation (`attnc run --check`).
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh build
status=0
small="-D DIM=64 -D FF=96 -D HIDDEN=64 -D N=113 -D T=113 -D NQ=113 -D NK=77"
for f in examples/*.attn; do
  echo "==> $f"
  build/attnc "$f" || status=1
  echo "--> run on the CPU interpreter"
  build/attnc run "$f" --check $small 2>/dev/null || status=1
done
[ $status -eq 0 ] && echo "main: compiled and ran $(ls examples/*.attn | wc -l) examples"
exit $status
