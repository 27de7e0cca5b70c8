#!/usr/bin/env python3
"""ncu_source.py — where a kernel's warps spend their time, from Nsight
Compute's source page: the warp-state samples of each SASS instruction,
the instructions that mark a kernel's structure (barriers, mbarrier waits,
wgmma and its waits, TMA, exits) and every instruction with more than
--min percent of the samples, each with the running total, so the share
of a region (say from a tile's start to its first HGMMA) is a difference.

    ncu --clock-control none --section SourceCounters --section WarpStateStats \\
        -k regex:row1 -c 1 -o rep python3 bench/profile_row.py ... --no-time
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep.csv
    python3 bench/ncu_source.py rep.csv [--min 0.4] [--from 869 --to 1237]

The csv may be gzipped. --from/--to (row numbers as printed) print the
share of that range and every instruction in it.
"""
import argparse
import csv
import gzip
import re
import sys

MARKERS = re.compile(r"SETMAXNREG|HGMMA|HMMA|WARPGROUP|BAR\.|SYNCS|UTMA|UBLKCP|EXIT|ATOMG|ATOMS|LDL|STL|CALL|RET")


def read(path):
    f = gzip.open(path, "rt") if path.endswith(".gz") else open(path, newline="")
    rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    hdr, data = rows[head], rows[head + 1:]
    cols = {k: hdr.index(k) for k in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed")}
    out = []
    for r in data:
        if len(r) <= max(cols.values()):
            continue
        try:
            samples = int(r[cols["Warp Stall Sampling (All Samples)"]] or 0)
            executed = int(r[cols["Instructions Executed"]] or 0)
        except ValueError:
            continue
        out.append((r[cols["Source"]].strip(), samples, executed))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--min", type=float, default=0.4, help="also print instructions with more than this %% of samples")
    ap.add_argument("--from", dest="lo", type=int)
    ap.add_argument("--to", dest="hi", type=int)
    args = ap.parse_args()
    insns = read(args.csv)
    total = sum(s for _, s, _ in insns) or 1
    if args.lo is not None:
        hi = args.hi if args.hi is not None else len(insns)
        part = insns[args.lo:hi]
        print(f"rows {args.lo}..{hi}: {100 * sum(s for _, s, _ in part) / total:.1f} % of {total} samples")
        for i, (src, s, ex) in enumerate(part, args.lo):
            print(f"{i:5d} {ex:9d} {s:6d}  {src[:100]}")
        return 0
    print(f"{total} samples, {len(insns)} instructions")
    run = 0
    for i, (src, s, ex) in enumerate(insns):
        run += s
        if MARKERS.search(src) or 100 * s / total > args.min:
            print(f"{i:5d} {ex:9d} {s:6d} {100 * s / total:5.1f} % (to here {100 * run / total:5.1f} %)  {src[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
