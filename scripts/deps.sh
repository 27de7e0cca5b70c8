#!/bin/sh
# deps.sh — installs what building and testing attnc needs, from Debian 12's
# own archive: a C compiler, CMake, Flex, Bison, LLVM 19 (the C API, FileCheck,
# lit), clang + libFuzzer for the fuzz target. Installs only what is missing.
set -eu
PKGS="build-essential cmake flex bison llvm-19-dev llvm-19-tools clang libclang-rt-14-dev
      python3 python3-pip python3-venv zlib1g-dev libzstd-dev pkg-config"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ -n "$missing" ]; then
  echo "deps.sh: installing$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# CUDA 13's ptxas no longer assembles sm_70: a CUDA 12 ptxas, from PyPI, checks
# the sm_70 PTX (CMake finds it in /opt/attnc-cuda12).
PTXAS12=/opt/attnc-cuda12/nvidia/cuda_nvcc/bin/ptxas
if [ ! -x "$PTXAS12" ]; then
  echo "deps.sh: installing a CUDA 12 ptxas (PyPI nvidia-cuda-nvcc-cu12)"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --no-deps --target /opt/attnc-cuda12 \
    nvidia-cuda-nvcc-cu12==12.9.86 >/dev/null
fi
# cuobjdump and the nvdisasm it runs (PyPI): the tests read the SASS that CUDA 13's
# ptxas (/usr/local/cuda) makes of the sm_80 PTX for the H200 (sm_90).
CUOBJDUMP=/opt/attnc-cuobjdump/nvidia/cu13/bin/cuobjdump
if [ ! -x "$CUOBJDUMP" ]; then
  echo "deps.sh: installing cuobjdump (PyPI nvidia-cuda-cuobjdump)"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --no-deps --target /opt/attnc-cuobjdump \
    nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37 >/dev/null
fi
