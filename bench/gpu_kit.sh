#!/bin/sh
# gpu_kit.sh — gathers what a GPU machine without LLVM needs into gpu-kit/
# (ignored by git; copied there with the repository): the statically linked
# attnc, stripped, libattnrt and attnc-embed. attnc is built where LLVM is
# and runs there.
#
#   sh bench/gpu_kit.sh [BUILD] [COMPARE_ATTNC]
# COMPARE_ATTNC: another attnc binary (say the last commit's) to A/B
# against: stripped and xz-compressed into gpu-kit/compare-attnc.xz (the
# kit stays small enough to copy), which bench/gpu.sh unpacks and hands to
# bench.py --compare.
set -eu
BUILD=${1:-build}
COMPARE=${2:-}
cmake --build "$BUILD" -j2 --target attnc attnrt attnc-embed >/dev/null
rm -rf gpu-kit && mkdir -p gpu-kit
strip -o gpu-kit/attnc "$BUILD/attnc"
cp -L "$BUILD/libattnrt.so" gpu-kit/libattnrt.so
cp -L "$BUILD/libattnrt.so" gpu-kit/libattnrt.so.0
cp "$BUILD/attnc-embed" gpu-kit/
if [ -n "$COMPARE" ]; then
  strip -o gpu-kit/compare-attnc "$COMPARE"
  xz -T2 gpu-kit/compare-attnc
fi
du -sh gpu-kit
