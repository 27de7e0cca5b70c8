#!/usr/bin/env python3
"""Writes the CHECK lines of a diagnostics test from attnc's actual output.

    update_diag_checks.py ATTNC test/diagnostics/foo.attn

The test's cases are split by '# -----'; every `# CHECK` line is dropped and
regenerated after its case as `.attn:[[@LINE-k]]:COL: error: ...`, so the
test keeps passing when cases move. Read the diff before committing: this
records what attnc says, and only a person can tell whether that is right.
"""
import re
import subprocess
import sys

RUN = ("# RUN: not %attnc %s -split-input-file 2>&1 | FileCheck %s "
       "--implicit-check-not=error: --implicit-check-not=warning:")
DIAG = re.compile(r"^.*?:(\d+):(\d+): (error|warning|note): (.*)$")


def main(attnc, path):
    lines = [l for l in open(path).read().split("\n")
             if not l.lstrip().startswith("# CHECK") and not l.startswith("# RUN:")]
    while lines and lines[-1] == "":
        lines.pop()
    body = [RUN] + lines
    src = "\n".join(body) + "\n"
    out = subprocess.run([attnc, "-", "-split-input-file"], input=src.encode(),
                         capture_output=True).stderr.decode()
    diags = [(int(m[1]), int(m[2]), m[3], m[4]) for m in map(DIAG.match, out.splitlines()) if m]
    chunk_ends = [i - 1 for i, l in enumerate(body, 1) if re.match(r"^\s*# -----", l)] + [len(body)]
    result, new_pos, pending = [], {}, diags
    for n, line in enumerate(body, 1):
        result.append(line)
        new_pos[n] = len(result)
        if n in chunk_ends:
            mine = [d for d in pending if d[0] <= n]
            pending = [d for d in pending if d[0] > n]
            for (l, col, kind, msg) in mine:
                here = len(result) + 1
                result.append(f"# CHECK: .attn:[[@LINE-{here - new_pos[l]}]]:{col}: {kind}: {msg}")
    open(path, "w").write("\n".join(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
