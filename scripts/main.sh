#!/bin/sh
# main.sh — the main job: installs dependencies, builds attnc and libattnrt,
# compiles every example to sm_70, sm_80 and sm_90a PTX
# (build/examples/*.sm_XX.ptx, assembled by a CUDA 12 ptxas when there is
# one), then runs the examples:
#   - with an NVIDIA GPU (and PyTorch): every example's kernels on the GPU,
#     for every target, against float64 PyTorch (bench/gpu_check.py --quick),
#     and the C program examples/embed on the mha kernel;
#   - without: each example on the CPU reference interpreter, after each
#     target's pipeline, on small ragged sizes, checked against a float64
#     evaluation (`attnc run --check`).
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh build
status=0
mkdir -p build/examples
ptxas=/opt/attnc-cuda12/nvidia/cuda_nvcc/bin/ptxas
for f in examples/*.attn; do
  n=$(basename "$f" .attn)
  for arch in sm_70 sm_80 sm_90a; do
    echo "==> $f -> build/examples/$n.$arch.ptx"
    build/attnc "$f" -arch $arch -o "build/examples/$n.$arch.ptx" || { status=1; continue; }
    grep '^// kernel' "build/examples/$n.$arch.ptx" | sed 's|^// |    |'
    if [ -x "$ptxas" ]; then
      "$ptxas" -arch=$arch "build/examples/$n.$arch.ptx" -o /dev/null || status=1
    fi
  done
done
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
   python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "==> running on the GPU: $(nvidia-smi -L | head -1)"
  sh bench/gpu_kit.sh build >/dev/null
  for arch in sm_70 sm_80 sm_90a; do
    LD_LIBRARY_PATH=$PWD/gpu-kit gpu-kit/attnc-embed build/examples/mha.$arch.ptx 2 1000 || status=1
    log=build/gpu-check-$arch.log
    if python3 bench/gpu_check.py --kit gpu-kit --out build/gpu-check --arch $arch --quick > $log 2>&1; then
      tail -2 $log
    else
      grep -E "^FAIL|Error|error" $log | head -20; tail -3 $log; status=1
    fi
  done
else
  echo "==> no GPU here: running every example on the CPU interpreter (sm_70, sm_80 and sm_90a pipelines)"
  small="-D DIM=64 -D FF=96 -D HIDDEN=64 -D N=113 -D T=113 -D NQ=113 -D NK=77"
  for f in examples/*.attn; do
    for arch in sm_70 sm_80 sm_90a; do
      heads="-D HEADS=4 -D KV_HEADS=2"
      [ $arch = sm_90a ] && heads="-D HEADS=1 -D KV_HEADS=1"   # head dims that fill a 64-column panel
      printf '%s (%s): ' "$f" $arch
      build/attnc run "$f" -arch $arch --check -q $small $heads 2>/dev/null && echo ok || { echo FAILED; status=1; }
    done
  done
fi
[ $status -eq 0 ] && echo "main: compiled and ran $(ls examples/*.attn | wc -l) examples"
exit $status
