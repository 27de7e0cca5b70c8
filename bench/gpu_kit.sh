#!/bin/sh
# gpu_kit.sh — gathers what the GPU machine needs into gpu-kit/ (ignored by
# git; carried by the device tool): the statically linked attnc, stripped,
# libattnrt and attnc-embed. The GPU machine has no LLVM, so attnc is built
# here and runs there.
set -eu
BUILD=${1:-build}
cmake --build "$BUILD" -j2 --target attnc attnrt attnc-embed >/dev/null
rm -rf gpu-kit && mkdir -p gpu-kit
strip -o gpu-kit/attnc "$BUILD/attnc"
cp -L "$BUILD/libattnrt.so" gpu-kit/libattnrt.so
cp -L "$BUILD/libattnrt.so" gpu-kit/libattnrt.so.0
cp "$BUILD/attnc-embed" gpu-kit/
du -sh gpu-kit
