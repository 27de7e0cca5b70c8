#!/bin/bash
# sm70_gpu.sh — everything sm_70 on a GPU machine, in one go (the device
# tool runs it with gpu-kit/ carried): numerics of every case against
# float64 PyTorch, examples/embed, compute-sanitizer memcheck and racecheck.
# Logs under $OUT (or ./out). Usage: bench/sm70_gpu.sh [--quick]
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
KIT=gpu-kit
export LD_LIBRARY_PATH=$PWD/$KIT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
status=0
step() { echo "== $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if ldd $KIT/attnc | grep -q "not found"; then ldd $KIT/attnc; echo "attnc cannot run here"; exit 1; fi
step numerics
python3 bench/sm70_check.py --kit $KIT --out "$OUT" "$@" > "$OUT/numerics.log" 2>&1 || status=1
grep -E "^FAIL|checks," "$OUT/numerics.log" | head -40
tail -3 "$OUT/numerics.log"
step embed
$KIT/attnc examples/mha.attn -arch sm_70 -o /tmp/attn.ptx && $KIT/attnc-embed /tmp/attn.ptx 2 1000 || status=1
step "HBM traffic (ncu): mha, B=4 H=16 N=4096 D=64; minimum = q+k+v read, o written = 134217728 bytes"
/usr/local/cuda/bin/ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum --csv \
  $KIT/attnc-embed /tmp/attn.ptx 4 4096 > "$OUT/ncu-mha.csv" 2>&1 || status=1
grep -E "dram__|gpu__time|l1tex__" "$OUT/ncu-mha.csv" | awk -F'","' '{print $(NF-2), $(NF-1), $NF}'
SAN=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck; do
  step "compute-sanitizer $tool"
  $SAN --tool $tool --error-exitcode 9 $KIT/attnc-embed /tmp/attn.ptx 1 17 > "$OUT/san-$tool-embed.log" 2>&1 || status=1
  tail -2 "$OUT/san-$tool-embed.log"
  $SAN --tool $tool --error-exitcode 9 python3 bench/sm70_check.py --kit $KIT --out /tmp/san --only sanitize \
    > "$OUT/san-$tool-python.log" 2>&1 || status=1
  grep -E "ERROR SUMMARY|checks," "$OUT/san-$tool-python.log" | tail -2
done
echo "status $status"
exit $status
