"""compile-scaling.py ATTNC SCRATCH — attnc's compile time and memory grow
with the blocks of a file, not faster (issue: a module of all blocks held
every block's LLVM IR through O3 and emission).

Compiles files of N and 4N small mlp blocks for sm_80 and prints the time
and peak memory of each; then `ok` when 4N blocks take at most 6x N's time
(linear: 4x) and add at most 2 MB of peak memory a block (one LLVM module
for the file added 2.8 MB a block).
"""
import os
import resource
import subprocess
import sys
import time

N = 5


def source(n):
    return "\n".join(f"mlp m{b}(x: f16[T, 64], w: f16[64, 64]) -> (y: f16[T, 64]) {{\n"
                     f"  y = silu(x @ w) + x * {b + 1};\n}}\n" for b in range(n))


def compile_stats(attnc, scratch, n):
    path = os.path.join(scratch, f"blocks{n}.attn")
    with open(path, "w") as f:
        f.write(source(n))
    start = time.perf_counter()
    # each compile in a child of its own, so that ru_maxrss is that compile's peak
    child = subprocess.run([sys.executable, "-c", f"""
import resource, subprocess, sys
r = subprocess.run({[attnc, path, "-arch", "sm_80", "-o", path[:-5] + ".ptx"]!r})
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
"""], capture_output=True, text=True)
    if child.returncode:
        sys.exit(f"attnc failed on {n} blocks: {child.stderr}")
    return time.perf_counter() - start, int(child.stdout) / 1024


def main():
    attnc, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    t1, m1 = compile_stats(attnc, scratch, N)
    t4, m4 = compile_stats(attnc, scratch, 4 * N)
    per_block = (m4 - m1) / (3 * N)
    print(f"{N} blocks: {t1:.2f} s, {m1:.0f} MB; {4 * N} blocks: {t4:.2f} s, {m4:.0f} MB "
          f"(time x{t4 / t1:.2f}, {per_block:.2f} MB a block)")
    print("ok" if t4 <= 6 * t1 and per_block <= 2 else "FAIL")


if __name__ == "__main__":
    main()
