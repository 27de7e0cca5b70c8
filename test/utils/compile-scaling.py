"""compile-scaling.py ATTNC SCRATCH [blocks|terms] — attnc's compile time
(CPU seconds) and memory grow with the program, not faster.

blocks (the default): files of N and 4N small mlp blocks for sm_80 (a
module of all blocks held every block's LLVM IR through O3 and emission);
`ok` when 4N blocks take at most 6x N's time (linear: 4x) and add at most
2 MB of peak memory a block (one LLVM module for the file added 2.8 MB a
block).

terms: a GEMM whose epilogue adds N and 4N terms (`x @ w + x * c1 + ...`,
one kernel, one basic block of the terms times a thread's elements, where
LLVM's SLP vectorizer grew faster than the block: codegen/ptx.c
bound_slp); `ok` when 4N terms take at most 7x N's time (x4.8 measured
alone, x6.2 beside other compiles on two cores; x8.5 without the bound,
x13 before it).
"""
import os
import subprocess
import sys


def blocks(n):
    return "\n".join(f"mlp m{b}(x: f16[T, 64], w: f16[64, 64]) -> (y: f16[T, 64]) {{\n"
                     f"  y = silu(x @ w) + x * {b + 1};\n}}\n" for b in range(n))


def terms(n):
    return ("mlp g(x: f16[T, 64], w: f16[64, 64]) -> (y: f16[T, 64]) {\n  y = (x @ w) + "
            + " + ".join(f"x * {i + 1}.0e-3" for i in range(n)) + ";\n}\n")


SOURCES = {"blocks": (blocks, 5), "terms": (terms, 250)}


def compile_stats(attnc, scratch, kind, n):
    path = os.path.join(scratch, f"{kind}{n}.attn")
    with open(path, "w") as f:
        f.write(SOURCES[kind][0](n))
    # each compile in a child of its own, so that its rusage is that
    # compile's: CPU time (not the wall clock, which the tests lit runs
    # beside it share) and peak memory
    child = subprocess.run([sys.executable, "-c", f"""
import resource, subprocess, sys
r = subprocess.run({[attnc, path, "-arch", "sm_80", "-o", path[:-5] + ".ptx"]!r})
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(u.ru_utime + u.ru_stime, u.ru_maxrss)
sys.exit(r.returncode)
"""], capture_output=True, text=True)
    if child.returncode:
        sys.exit(f"attnc failed on {n} {kind}: {child.stderr}")
    cpu, rss = child.stdout.split()
    return float(cpu), int(rss) / 1024


def main():
    attnc, scratch = sys.argv[1], sys.argv[2]
    kind = sys.argv[3] if len(sys.argv) > 3 else "blocks"
    n = SOURCES[kind][1]
    os.makedirs(scratch, exist_ok=True)
    t1, m1 = compile_stats(attnc, scratch, kind, n)
    t4, m4 = compile_stats(attnc, scratch, kind, 4 * n)
    per_unit = (m4 - m1) / (3 * n)
    print(f"{n} {kind}: {t1:.2f} s, {m1:.0f} MB; {4 * n} {kind}: {t4:.2f} s, {m4:.0f} MB "
          f"(time x{t4 / t1:.2f}, {per_unit:.2f} MB a {kind[:-1]})")
    limit = 6 if kind == "blocks" else 7
    print("ok" if t4 <= limit * t1 and (kind != "blocks" or per_unit <= 2) else "FAIL")


if __name__ == "__main__":
    main()
