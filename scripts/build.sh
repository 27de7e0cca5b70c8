#!/bin/sh
# build.sh [DIR [CMAKE_ARGS...]] — configures and builds attnc into DIR
# (default build/).
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
[ $# -gt 0 ] && shift
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
