#!/bin/sh
# main.sh — the main job: installs dependencies, builds attnc, and compiles
# every example in examples/ to attn-level IR, printing it.
#
# Running the compiled blocks (on the GPU when there is one, else on the CPU
# reference interpreter) joins this job when the interpreter and the code
# generators land (issues #3 and #4).
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh build
status=0
for f in examples/*.attn; do
  echo "==> $f"
  build/attnc "$f" || status=1
done
[ $status -eq 0 ] && echo "main: compiled $(ls examples/*.attn | wc -l) examples"
exit $status
