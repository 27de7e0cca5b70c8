#!/bin/sh
# check-sass.sh ARCH ATTNC PTXAS13 CUOBJDUMP EXAMPLES_DIR SASS_CHECK...
# Compiles every example for ARCH (sm_80 or sm_90a), assembles it for the
# H200 (sm_80 PTX with ptxas -arch=sm_90, as the driver does there; ARCH
# sm_80@sm_80: for sm_80 itself, the SASS an A100 runs) and
# reads the SASS: per kernel the local memory (spills) inside loops and, for
# the attention examples, the counts of the instructions the target must
# use (sm_80: HMMA.16816, LDSM, LDGSTS; sm_90a: HGMMA, UTMALDG: TMA loads). Fails if an
# attention kernel lacks one, or any kernel spills in a loop (after all
# examples are checked).
set -e
arch=$1 attnc=$2 ptxas=$3 cuobjdump=$4 dir=$5
shift 5
case $arch in
  sm_80) sass_arch=sm_90 need="--need HMMA.16816 --need LDSM --need LDGSTS" ;;
  sm_80@sm_80) arch=sm_80 sass_arch=sm_80 need="--need HMMA.16816 --need LDSM --need LDGSTS" ;;
  sm_90a) sass_arch=sm_90a need="--need HGMMA --need UTMALDG" ;;
  *) echo "check-sass.sh: unknown arch $arch"; exit 2 ;;
esac
tmp=${TMPDIR:-/tmp}/attnc-sass.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for f in "$dir"/*.attn; do
  n=$(basename "$f" .attn)
  "$attnc" "$f" -arch "$arch" -o "$tmp/$n.ptx"
  "$ptxas" -arch=$sass_arch "$tmp/$n.ptx" -o "$tmp/$n.cubin"
  "$cuobjdump" -sass "$tmp/$n.cubin" > "$tmp/$n.sass"
  known=0   # local accesses inside loops known and accepted:
  # sliding_window on sm_80 (255 registers): since tensors take their
  # strides as parameters, ptxas keeps the K and V tiles' 64-bit row
  # pointers in local memory and reloads them in the band's loops (4 LDL;
  # with constant strides it spilled 4 bytes under CUDA 12's sm_80 ptxas
  # instead). Its speed is measured beside the old build in
  # bench/results/2026-12-06-h100-strides/.
  # (Assembled for sm_80 itself, an A100's SASS, it keeps them in registers.)
  [ "$sass_arch" = sm_90 ] && [ "$(basename "$f" .attn)" = sliding_window ] && known=4
  # varlen_prefill on sm_80 (255 registers, a packed sequence's offsets
  # beside the band's): the same 4 reloads at the top of its band's loop;
  # assembled for sm_80 itself none.
  [ "$sass_arch" = sm_90 ] && [ "$(basename "$f" .attn)" = varlen_prefill ] && known=4
  case $n in   # the attention examples' kernels use every feature of the target (cross_attention's
              # combine of a split over keys, a row kernel, runs no products)
    mha|gqa_causal|softcap_alibi|sliding_window|document_mask|cross_attention|varlen_prefill)
      "$@" $need --need-if-mma --spills-known $known < "$tmp/$n.sass" || failed=1 ;;
    *) "$@" < "$tmp/$n.sass" || failed=1 ;;
  esac
done
exit ${failed:-0}
