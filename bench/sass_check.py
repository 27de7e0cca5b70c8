#!/usr/bin/env python3
"""sass_check.py — what the SASS of a cubin does, per kernel, from
`cuobjdump -sass` on stdin: the count of each instruction of interest, and
how many local-memory instructions (LDL/STL: register spills) lie inside
the main loops. A loop lies between a backward branch and its target; the
main loops are those that run tensor-core MMAs (HGMMA, HMMA) with no such
loop inside them: the key loops of attention and the k loops of a GEMM,
not a persistent kernel's loop over its tiles around them, whose spills
cost an access per tile. In a kernel without MMAs every loop counts.

    cuobjdump -sass k.cubin | python3 bench/sass_check.py [--need HMMA.16816 ...]

Prints one line per kernel; exits 1 when a kernel lacks a --need
instruction or has local memory inside a loop (more than --spills-known
instructions of it: a known spill, documented where it is accepted).
"""
import argparse
import re
import sys

INSN = re.compile(r"/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
BRANCH = re.compile(r"\bBRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")


def kernels(text):
    name, lines = None, []
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, lines
            name, lines = m.group(1), []
        elif name:
            lines.append(line)
    if name:
        yield name, lines


def analyse(lines):
    insns = []   # (address, opcode, text, predicated)
    for line in lines:
        m = INSN.search(line)
        if m:
            insns.append((int(m.group(1), 16), m.group(3), line, bool(m.group(2))))
    # ptxas puts slow paths (an mbarrier wait's retry) after the kernel's
    # last EXIT; their branch back into the body is a return, not a loop
    body_end = max((a for a, op, _, predicated in insns if op == "EXIT" and not predicated), default=None)
    loops = []
    for addr, op, line, _ in insns:
        b = BRANCH.search(line)
        if op.startswith("BRA") and b and b.group(1):
            target = int(b.group(1), 16)
            stub = body_end is not None and target <= body_end < addr
            if target < addr and not stub:   # (a branch to itself is the end-of-kernel trap)
                loops.append((target, addr))
    mma = [a for a, op, _, _ in insns if op.split(".")[0] in ("HGMMA", "HMMA")]
    runs_mma = [(lo, hi) for lo, hi in loops if any(lo <= a <= hi for a in mma)]
    main = [(lo, hi) for lo, hi in runs_mma
            if not any((lo2, hi2) != (lo, hi) and lo <= lo2 and hi2 <= hi for lo2, hi2 in runs_mma)]
    if not runs_mma:
        main = loops
    local = [(a, op) for a, op, _, _ in insns if op.split(".")[0] in ("LDL", "STL")]
    in_loops = [a for a, _ in local if any(lo <= a <= hi for lo, hi in main)]
    counts = {}
    for _, op, _, _ in insns:
        counts[op] = counts.get(op, 0) + 1
    return counts, len(local), len(in_loops), len(main)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--need", action="append", default=[], help="an opcode prefix every kernel must have")
    ap.add_argument("--need-if-mma", action="store_true",
                    help="check --need only in kernels that run tensor-core products (a block's row kernels, "
                         "such as decode's split combine, run none)")
    ap.add_argument("--spills-known", type=int, default=0,
                    help="local-memory instructions inside loops that are known and accepted (at most)")
    args = ap.parse_args()
    status = 0
    for name, lines in kernels(sys.stdin.read()):
        counts, local, in_loops, nloops = analyse(lines)
        mma = any(op.startswith(("HMMA", "HGMMA")) for op in counts)
        wanted = args.need if mma or not args.need_if_mma else []
        need = {n: sum(c for op, c in counts.items() if op.startswith(n)) for n in wanted}
        ok = all(need.values()) and in_loops <= args.spills_known
        status |= not ok
        parts = [f"{n} {c}" for n, c in need.items()] + [f"local memory {local} ({in_loops} inside {nloops} main loops)"]
        known = " (known spill)" if in_loops and ok else ""
        print(f"{'ok' if ok else 'FAIL'} {name}: " + ", ".join(parts) + known)
    return status


if __name__ == "__main__":
    sys.exit(main())
