#!/bin/sh
# deps.sh — installs what building and testing attnc needs, from Debian 12's
# own archive: a C compiler, CMake, Flex, Bison, LLVM 19 (the C API, FileCheck,
# lit), clang + libFuzzer for the fuzz target. Installs only what is missing.
set -eu
PKGS="build-essential cmake flex bison llvm-19-dev llvm-19-tools clang libclang-rt-14-dev
      python3 zlib1g-dev libzstd-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps.sh: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
