#!/usr/bin/env python3
"""current.py — writes bench/results/CURRENT.md: where attnc stands against
its peers now, one table per target and block, from the newest measurement
of each in bench/results/DATE-MACHINE/*.json (the files bench.py writes),
and the decode table (decode_bench.py's decode-*.json: the fullest run).
Needs no GPU.

    python3 bench/current.py [--check]

--check: exit 1 if CURRENT.md is not what the json says (a test runs this).
"""
import argparse
import glob
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

# per block: the peers bench.py times beside attnc (the json's keys), and what a row is
BLOCKS = {
    "attention": {"peers": ["cudnn", "flash", "flex"], "key": ("dtype", "D", "causal")},
    "mlp": {"peers": ["compile", "eager", "triton_sm80"], "key": ("block", "T")},
}
PEER_NAMES = {"cudnn": "cuDNN", "flash": "FlashAttention-2", "flex": "FlexAttention",
              "compile": "torch.compile", "eager": "PyTorch eager", "triton_sm80": "Triton sm_80 matmul"}


def runs():
    """Every json run, oldest first: (folder, file, records)."""
    found = []
    for path in glob.glob(os.path.join(RESULTS, "*", "*.json")):
        folder = os.path.basename(os.path.dirname(path))
        if not re.match(r"\d{4}-\d\d-\d\d-", folder):
            continue
        try:
            records = json.load(open(path))
        except ValueError:
            continue
        if isinstance(records, list):
            found.append((folder, os.path.basename(path), records))
    # the date folder, then the time in the file's name (NAME-HHMM[a-z].json)
    def when(run):
        m = re.search(r"-(\d{4})([a-z]?)\.json$", run[1])
        return (run[0], m.group(1) if m else "0000", m.group(2) if m else "", run[1])
    return sorted(found, key=when)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(block, arch, folder, name, rows):
    spec = BLOCKS[block]
    peers = [p for p in spec["peers"] if any(isinstance(r.get(p), (int, float)) for r in rows)]
    out = ["### %s, %s" % (arch, "attention forward" if block == "attention" else "MLP block"), "",
           "From [%s/%s](%s/%s) (%d rows; TFLOP/s; ratios are attnc's rate over the peer's, geometric mean "
           "and lowest row)." % (folder, name, folder, name, len(rows)), ""]
    out.append("| " + " | ".join(list(spec["key"]) + ["attnc"] + ["× %s" % PEER_NAMES[p] for p in peers]) + " |")
    out.append("|" + "---|" * (len(spec["key"]) + 1 + len(peers)))
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in spec["key"]), []).append(r)
    for key in sorted(groups, key=lambda k: tuple(str(x) for x in k)):
        g = groups[key]
        rates = [r["attnc"] for r in g]
        cells = [str(k) for k in key] + ["%.0f–%.0f" % (min(rates), max(rates)) if len(g) > 1 else "%.0f" % rates[0]]
        for p in peers:
            ratios = [r["attnc"] / r[p] for r in g if isinstance(r.get(p), (int, float)) and r[p] > 0]
            cells.append("%.2f (min %.2f)" % (geomean(ratios), min(ratios)) if ratios else "—")
        out.append("| " + " | ".join(cells) + " |")
    alls = []
    for p in peers:
        ratios = [r["attnc"] / r[p] for r in rows if isinstance(r.get(p), (int, float)) and r[p] > 0]
        if ratios:
            alls.append("%s **%.3f×** (min %.3f)" % (PEER_NAMES[p], geomean(ratios), min(ratios)))
    out += ["", "Over every row: " + "; ".join(alls) + ".", ""]
    return out


def decode_table():
    """The decode table (decode_bench.py's json: {device, copy_GBps, rows}):
    the run with the most rows, the newest of those; GB/s of K and V read,
    grouped by head dim, query rows and heads."""
    best = None
    for path in sorted(glob.glob(os.path.join(RESULTS, "*", "decode-*.json"))):
        folder, name = os.path.basename(os.path.dirname(path)), os.path.basename(path)
        m = re.match(r"decode-(sm_\w+?)[-.]", name)
        try:
            run = json.load(open(path))
        except ValueError:
            continue
        if not m or not re.match(r"\d{4}-\d\d-\d\d-", folder) or not isinstance(run, dict):
            continue
        rows = [r for r in run.get("rows", []) if isinstance(r.get("attnc"), (int, float))]
        if rows and (best is None or (len(rows), folder) >= (len(best[3]), best[0])):
            best = (folder, name, m.group(1), rows, run)
    if best is None:
        return []
    folder, name, arch, rows, run = best
    peer = lambda r: max(x for x in (r.get("cudnn"), r.get("flash2")) if isinstance(x, (int, float)))  # noqa: E731
    out = ["### %s, decode (attention against a KV cache)" % arch, "",
           "From [%s/%s](%s/%s) (%d rows, %s; GB/s of K and V read; ratios are attnc's over the better of cuDNN "
           "and FlashAttention-2, geometric mean and lowest row, and over the copy bandwidth of the same run, "
           "%.0f GB/s)." % (folder, name, folder, name, len(rows), run.get("device", "?"), run.get("copy_GBps", 0)),
           "", "| D | Nq | heads | attnc | × best peer | rows ≥ 1.0 | × copy |", "|---|---|---|---|---|---|---|"]
    groups = {}
    for r in rows:
        groups.setdefault((r["D"], r["Nq"], "%d/%d" % (r["H"], r["Hkv"])), []).append(r)
    for key in sorted(groups, key=lambda k: (-k[0], k[1], k[2])):
        g = groups[key]
        ratios = [r["attnc"] / peer(r) for r in g]
        copy = [r["attnc"] / run["copy_GBps"] for r in g]
        out.append("| %d | %d | %s | %.0f–%.0f | %.2f (min %.2f) | %d of %d | %.2f–%.2f |" % (
            key[0], key[1], key[2], min(r["attnc"] for r in g), max(r["attnc"] for r in g), geomean(ratios),
            min(ratios), sum(x >= 1 for x in ratios), len(g), min(copy), max(copy)))
    ratios = [r["attnc"] / peer(r) for r in rows]
    out += ["", "Over every row: the better peer **%.3f×** (min %.3f); %d of %d rows at or above it." % (
        geomean(ratios), min(ratios), sum(x >= 1 for x in ratios), len(rows)), ""]
    return out


def render():
    newest = {}   # (block, arch) -> (folder, file, rows): the newest run that measured it
    for folder, name, records in runs():
        by = {}
        for r in records:
            if r.get("what") in BLOCKS and isinstance(r.get("attnc"), (int, float)):
                by.setdefault((r["what"], r["arch"]), []).append(r)
        for k, rows in by.items():
            newest[k] = (folder, name, rows)
    lines = ["# Where attnc stands now", "",
             "Generated by `python3 bench/current.py` from the newest json run of each target and block under "
             "bench/results/ (do not edit by hand; rerun it after adding a run). Each run's folder, "
             "DATE-MACHINE/, holds its tables, logs, plots and NOTES.md (what was measured, how, and what it "
             "showed). The peers were timed in the same process as attnc, on the same GPU.", ""]
    for block in BLOCKS:
        for arch in sorted({a for b, a in newest if b == block}):
            folder, name, rows = newest[(block, arch)]
            lines += table(block, arch, folder, name, rows)
    lines += decode_table()
    return "\n".join(lines).rstrip() + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if CURRENT.md is out of date")
    args = ap.parse_args()
    text = render()
    path = os.path.join(RESULTS, "CURRENT.md")
    if args.check:
        if not os.path.exists(path) or open(path).read() != text:
            sys.exit("bench/results/CURRENT.md is out of date: run python3 bench/current.py")
        return
    open(path, "w").write(text)
    print("wrote", path)


if __name__ == "__main__":
    main()
