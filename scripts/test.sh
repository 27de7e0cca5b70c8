#!/bin/sh
# test.sh — installs dependencies, builds attnc three ways and runs the tests:
#   build/        the lit suite (ctest)
#   build-asan/   the same suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   build-fuzz/   the libFuzzer target, FUZZ_SECONDS (default 60) from a seed
#                 corpus of the examples and test inputs; any crash fails
#   build-debug/  a Debug build (-O0: gcc's other warnings), which must build too
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh

echo "==> build and test"
sh scripts/build.sh build
LIT_OPTS="--param slow=1" ctest --test-dir build --output-on-failure   # with the slow sweeps

echo "==> install, then build examples/embed against the installed libattnrt (pkg-config, CMake)"
rm -rf build/install-check && cmake --install build --prefix build/install-check >/dev/null
prefix=$PWD/build/install-check
echo "installed: $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"
cc examples/embed/embed.c -o build/install-user-embed \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs attnrt) -lm -Wl,-rpath,$prefix/lib
rm -rf build/install-user && mkdir -p build/install-user
printf 'cmake_minimum_required(VERSION 3.20)\nproject(u C)\nfind_package(attnrt REQUIRED)\nadd_executable(embed %s/examples/embed/embed.c)\ntarget_link_libraries(embed attnc::attnrt m)\n' "$PWD" \
  > build/install-user/CMakeLists.txt
cmake -S build/install-user -B build/install-user/build -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build/install-user/build >/dev/null

echo "==> pip: build the wheel, install it into a clean virtual environment, compile an example with it"
rm -rf build/wheel build/wheel-venv
python3 -m venv build/wheel-venv
build/wheel-venv/bin/pip wheel -q --no-deps -w build/wheel .
build/wheel-venv/bin/pip install -q build/wheel/attnc-*.whl
(cd build/wheel && ../wheel-venv/bin/python - "$PWD/../../examples/mha.attn" <<'PY'
import os, sys, attnc
site = os.path.dirname(attnc.__file__)
assert attnc.find_attnc().startswith(site), f"attnc from {attnc.find_attnc()}, not the wheel's ({site})"
attnc.compile(sys.argv[1], arch="sm_90a", output="mha.ptx", cache=False)
print(f"wheel: {os.path.basename(attnc.find_attnc())} in {site} compiled mha.attn ({os.path.getsize('mha.ptx')} bytes of PTX)")
PY
)

echo "==> a Debug build (-O0) builds too"
sh scripts/build.sh build-debug -DCMAKE_BUILD_TYPE=Debug

echo "==> build and test with ASan + UBSan"
sh scripts/build.sh build-asan -DATTNC_SANITIZE=ON
ctest --test-dir build-asan --output-on-failure

echo "==> fuzz the frontend and the IR parser for ${FUZZ_SECONDS:-60} s"
CC=clang sh scripts/build.sh build-fuzz -DATTNC_FUZZ=ON
corpus=build-fuzz/corpus
rm -rf "$corpus" && mkdir -p "$corpus"
cp examples/*.attn test/diagnostics/*.attn test/frontend/*.attn test/ir/*.ir test/verifier/*.ir \
   test/passes/*.ir "$corpus"/
build-fuzz/attnc-fuzz -max_total_time="${FUZZ_SECONDS:-60}" -dict=test/fuzz/attn.dict \
   -artifact_prefix=build-fuzz/ -print_final_stats=1 "$corpus" 2>build-fuzz/fuzz.log ||
  { tail -40 build-fuzz/fuzz.log; echo "fuzzing found a crash: see build-fuzz/crash-*"; exit 1; }
grep -E "stat::number_of_executed_units" build-fuzz/fuzz.log || true
echo "test: all passed"
