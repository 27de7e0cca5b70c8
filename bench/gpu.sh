#!/bin/bash
# gpu.sh — every GPU check in one go, on a machine with an NVIDIA GPU, the
# CUDA toolkit and PyTorch, run from the repository root with gpu-kit/ beside
# it (bench/gpu_kit.sh makes the kit where attnc was built): numerics of every case against
# float64 PyTorch for each target (sm_70 f16, sm_80 and sm_90a f16 and
# bf16), the backward's gradients (bench/backward_check.py), autograd and
# the training run (sm_80), attnc.attention (bench/functional_check.py),
# transformers' Llama and Mistral with attnc (bench/transformers_check.py,
# bench/train_llama.py), examples/embed, the SASS of the sm_80 and sm_90a kernels,
# compute-sanitizer memcheck, racecheck and synccheck, then the benchmarks (sm_80 and
# sm_90a: bench.py, decode_bench.py, backward_bench.py). Logs under $OUT (or ./out).
#
#   bench/gpu.sh [--quick] [--no-bench] [--no-sm70] [--arch A]... [--pack]
#   BENCH_ARGS='--schedule "warps(4);"' bench/gpu.sh   (more bench.py options)
# A kit made with a second attnc (bench/gpu_kit.sh BUILD OTHER_ATTNC) adds
# its column to the benchmark (bench.py --compare).
# --arch A (repeatable): only these targets (sm_70, sm_80, sm_90a; default all)
# --pack: at the end, everything under $OUT goes into $OUT/gpu-results.tgz
# and only that, gpu.log and the benchmark tables stay (fewer files to copy
# back from the GPU machine).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
KIT=gpu-kit
export LD_LIBRARY_PATH=$PWD/$KIT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
quick="" bench=1 pack=0 archs="" next_arch=0 no70=0
for a in "$@"; do
  if [ $next_arch = 1 ]; then archs="$archs $a"; next_arch=0; continue; fi
  case $a in --quick) quick=--quick ;; --no-bench) bench=0 ;; --no-sm70) no70=1 ;; --pack) pack=1 ;;
    --arch) next_arch=1 ;; esac
done
archs=${archs:-sm_70 sm_80 sm_90a}
[ $no70 = 1 ] && archs=$(echo $archs | sed 's/sm_70//')
has() { case " $archs " in *" $1 "*) return 0 ;; esac; return 1; }
status=0
summary=""
step() { echo "== $*"; }
note() { summary="$summary$*"$'\n'; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if ldd $KIT/attnc | grep -q "not found"; then ldd $KIT/attnc; echo "attnc cannot run here"; exit 1; fi

# label log command...: one checker's run under a time limit (a hang shows
# as a failure), its failures shown and its count of checks (else its last
# line) noted
check() {
  label=$1 log=$2; shift 2
  step "$label"
  timeout 1800 "$@" > "$log" 2>&1 || status=1
  grep -E "^FAIL" "$log" | head -20
  line=$(grep -E 'checks,' "$log" | tail -1)
  note "$label: ${line:-$(tail -1 "$log")}"
}
checks() {   # arch dtype
  check "numerics $1 $2" "$OUT/numerics-$1-$2.log" python3 bench/gpu_check.py --kit $KIT --out "$OUT" --arch "$1" --dtype "$2" $quick
}
if has sm_70; then checks sm_70 f16; fi
if has sm_80; then checks sm_80 f16; checks sm_80 bf16; fi
if has sm_90a; then checks sm_90a f16; checks sm_90a bf16; fi

backward() {   # arch dtype [schedule]: the backward's gradients against float64 autograd (doc/backward.md)
  check "backward $1 $2${3:+ $3}" "$OUT/backward-$1-$2${3:+-schedule}.txt" \
    python3 bench/backward_check.py --kit $KIT --out "$OUT" --arch "$1" --dtype "$2" --schedule "${3:-}" $quick
}
if has sm_70; then backward sm_70 f16; fi
if has sm_80; then backward sm_80 f16; backward sm_80 bf16; fi
if has sm_90a; then backward sm_90a f16; backward sm_90a bf16; fi
# the plain key-tile kernel (the default is warp-specialised, doc/backward.md)
if has sm_90a; then backward sm_90a f16 "producer(0);"; fi
if has sm_80; then
  step "autograd, custom op, torch.compile; a small GPT trained with attnc and with SDPA"
  python3 bench/autograd_check.py --kit $KIT --out "$OUT" > "$OUT/autograd.txt" 2>&1 || status=1
  note "autograd: $(tail -1 "$OUT/autograd.txt")"
  python3 bench/train_gpt.py --kit $KIT --out "$OUT/train" > "$OUT/train.txt" 2>&1 || status=1
  note "$(tail -1 "$OUT/train.txt")"
fi
functional() {   # arch dtype: attnc.attention's torch path (python/attnc/functional.py)
  check "attnc.attention $1 $2" "$OUT/functional-$1-$2.txt" \
    python3 bench/functional_check.py --kit $KIT --out "$OUT" --arch "$1" --dtype "$2"
}
if has sm_70; then functional sm_70 f16; fi
if has sm_80; then functional sm_80 f16; fi
if has sm_90a; then functional sm_90a f16; functional sm_90a bf16; fi
if has sm_90a; then
  step "transformers: Llama and Mistral with attn_implementation=\"attnc\" against SDPA; prefill and training step"
  python3 bench/transformers_check.py --kit $KIT --out "$OUT" > "$OUT/transformers.txt" 2>&1 || status=1
  grep -E "^FAIL" "$OUT/transformers.txt" | head -20
  note "$(tail -1 "$OUT/transformers.txt")"
  for model in llama mistral; do
    python3 bench/train_llama.py --kit $KIT --out "$OUT/$model" --model $model > "$OUT/$model.txt" 2>&1 || status=1
    note "$model: $(grep -E '^prefill|^training step' "$OUT/$model.txt" | tr '\n' ' ') $(tail -1 "$OUT/$model.txt")"
  done
fi

step "embed (C, libattnrt only)"
for arch in $archs; do
  $KIT/attnc examples/mha.attn -arch $arch -o /tmp/attn-$arch.ptx && $KIT/attnc-embed /tmp/attn-$arch.ptx 2 1000 ||
    status=1
done

step "SASS of the attention kernels (ptxas for this GPU): sm_80 HMMA.16816, sm_90a HGMMA and UTMALDG; no local memory inside loops"
for ex in mha gqa_causal softcap_alibi sliding_window document_mask cross_attention; do
  if has sm_80; then
  $KIT/attnc examples/$ex.attn -arch sm_80 -o /tmp/$ex-80.ptx || { status=1; continue; }
  /usr/local/cuda/bin/ptxas -arch=sm_90 /tmp/$ex-80.ptx -o /tmp/$ex-80.cubin || { status=1; continue; }
  line=$(/usr/local/cuda/bin/cuobjdump -sass /tmp/$ex-80.cubin |
         python3 bench/sass_check.py --need HMMA.16816 --need LDSM --need LDGSTS) || status=1
  echo "sm_80 $line"
  note "SASS sm_80 $line"
  fi
  has sm_90a || continue
  $KIT/attnc examples/$ex.attn -arch sm_90a -o /tmp/$ex-90.ptx || { status=1; continue; }
  /usr/local/cuda/bin/ptxas -arch=sm_90a /tmp/$ex-90.ptx -o /tmp/$ex-90.cubin || { status=1; continue; }
  line=$(/usr/local/cuda/bin/cuobjdump -sass /tmp/$ex-90.cubin |
         python3 bench/sass_check.py --need HGMMA --need UTMALDG) || status=1   # test/utils/check-sass.sh
  echo "sm_90a $line"
  note "SASS sm_90a $line"
done

SAN=/usr/local/cuda/bin/compute-sanitizer
san=/tmp/attnc-san && rm -rf $san && mkdir -p $san
for tool in memcheck racecheck synccheck; do   # synccheck: barriers, named barriers
  for arch in $archs; do
    step "compute-sanitizer $tool $arch"
    $SAN --tool $tool --error-exitcode 9 $KIT/attnc-embed /tmp/attn-$arch.ptx 1 17 > $san/$tool-$arch-embed.log 2>&1 ||
      status=1
    [ $tool = synccheck ] && { note "sanitizer synccheck $arch embed: $(grep -hE 'ERROR SUMMARY' $san/$tool-$arch-embed.log)"; continue; }
    # (--only sanitize computes its references on the CPU: cuBLAS's kernels
    # are not ours to check, and racecheck once flagged one of them)
    $SAN --tool $tool --error-exitcode 9 python3 bench/gpu_check.py --kit $KIT --out /tmp/san --arch $arch --only sanitize \
      > $san/$tool-$arch-python.log 2>&1 || status=1
    for w in embed python; do
      note "sanitizer $tool $arch $w: $(grep -hE '(ERROR|RACECHECK) SUMMARY|checks,' $san/$tool-$arch-$w.log | tr '\n' ' ')"
    done
  done
done
for f in $san/*.log; do echo "=== $f"; cat "$f"; done > "$OUT/sanitizers.log"

if [ $bench = 1 ]; then
  compare=""   # gpu_kit.sh's second attnc: an A/B of two compilers, row by row
  if [ -f $KIT/compare-attnc.xz ]; then
    xz -dc $KIT/compare-attnc.xz > /tmp/compare-attnc && chmod +x /tmp/compare-attnc && compare="--compare /tmp/compare-attnc"
  fi
  for arch in $archs; do
    [ $arch = sm_70 ] && continue
    step "benchmark ($arch PTX against SDPA flash / cuDNN / flex; SwiGLU against torch)"
    mkdir -p "$OUT/bench-$arch"
    eval "python3 bench/bench.py --kit $KIT --out \"$OUT/bench-$arch\" --arch $arch $quick $compare ${BENCH_ARGS:-}" \
      > "$OUT/bench-$arch.log" 2>&1 || status=1
    tail -30 "$OUT/bench-$arch.log"
  done
  for arch in $archs; do
    [ $arch = sm_70 ] && continue
    step "decode benchmark ($arch PTX against SDPA cuDNN / flash, GB/s of K and V)"
    python3 bench/decode_bench.py --kit $KIT --out "$OUT/bench-decode" --arch $arch $quick > "$OUT/bench-decode-$arch.log" 2>&1 ||
      status=1
    tail -12 "$OUT/bench-decode-$arch.log"
  done
  bw_archs=""
  for arch in $archs; do [ $arch = sm_70 ] || bw_archs="$bw_archs --arch $arch"; done
  if [ -n "$bw_archs" ]; then
    step "backward benchmark ($bw_archs against SDPA flash / cuDNN backward)"
    python3 bench/backward_bench.py --kit $KIT --out "$OUT/bench-backward" $bw_archs $quick > "$OUT/bench-backward.log" 2>&1 ||
      status=1
    tail -20 "$OUT/bench-backward.log"
  fi
fi
echo
echo "$summary"
echo "status $status"
if [ $pack = 1 ]; then
  cp $san/*.log "$OUT/" 2>/dev/null
  (cd "$OUT" && tar czf /tmp/gpu-results.tgz . && find . -mindepth 1 -delete && mv /tmp/gpu-results.tgz . &&
   tar xzf gpu-results.tgz ./bench-sm_80/bench.md ./bench-sm_90a/bench.md ./bench-backward/backward-bench.md 2>/dev/null)
fi
exit $status
