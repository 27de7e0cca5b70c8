#!/usr/bin/env python3
"""sass_check.py — what the SASS of a cubin does, per kernel, from
`cuobjdump -sass` on stdin: the count of each instruction of interest, and
how many local-memory instructions (LDL/STL: register spills) lie inside
loops, that is between a backward branch and its target.

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
    insns = []   # (address, opcode, text)
    for line in lines:
        m = INSN.search(line)
        if m:
            insns.append((int(m.group(1), 16), m.group(3), line))
    loops = []
    for addr, op, line in insns:
        b = BRANCH.search(line)
        if op.startswith("BRA") and b and b.group(1):
            target = int(b.group(1), 16)
            if target < addr:   # (a branch to itself is the end-of-kernel trap)
                loops.append((target, addr))
    local = [(a, op) for a, op, _ in insns if op.split(".")[0] in ("LDL", "STL")]
    in_loops = [a for a, _ in local if any(lo <= a <= hi for lo, hi in loops)]
    counts = {}
    for _, op, _ in insns:
        counts[op] = counts.get(op, 0) + 1
    return counts, len(local), len(in_loops), len(loops)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--need", action="append", default=[], help="an opcode prefix every kernel must have")
    ap.add_argument("--spills-known", type=int, default=0,
                    help="local-memory instructions inside loops that are known and accepted (at most)")
    args = ap.parse_args()
    status = 0
    for name, lines in kernels(sys.stdin.read()):
        counts, local, in_loops, nloops = analyse(lines)
        need = {n: sum(c for op, c in counts.items() if op.startswith(n)) for n in args.need}
        ok = all(need.values()) and in_loops <= args.spills_known
        status |= not ok
        parts = [f"{n} {c}" for n, c in need.items()] + [f"local memory {local} ({in_loops} inside {nloops} loops)"]
        known = " (known spill)" if in_loops and ok else ""
        print(f"{'ok' if ok else 'FAIL'} {name}: " + ", ".join(parts) + known)
    return status


if __name__ == "__main__":
    sys.exit(main())
