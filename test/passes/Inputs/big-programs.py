"""Writes PREFIX.statements.attn (one mlp block of 10,000 statements),
PREFIX.blocks.attn (1,000 causal attention blocks) and PREFIX.gemms.attn
(one mlp block summing 1,000 GEMMs with epilogues), for compile-time.test."""
import sys

prefix = sys.argv[1]
n = 10000
lines = ["mlp big(x: f16[T, 64]) -> (y: f16[T, 64]) {", "  a0 = x * 0.5 + x;"]
lines += [f"  a{i} = a{i - 1} * 0.5 + x;" for i in range(1, n)]
lines += [f"  y = a{n - 1};", "}"]
with open(prefix + ".statements.attn", "w") as f:
    f.write("\n".join(lines) + "\n")
with open(prefix + ".blocks.attn", "w") as f:
    for i in range(1000):
        f.write(f"attention b{i}(q: f16[B, 2, N, 64], k: f16[B, 2, N, 64], v: f16[B, 2, N, 64])"
                f" -> (o: f16[B, 2, N, 64]) {{\n  mask(b, h, i, j) = j <= i;\n}}\n")
with open(prefix + ".gemms.attn", "w") as f:
    terms = " + ".join(f"silu(x @ w * {i + 1}.5)" for i in range(1000))
    f.write(f"mlp gemms(x: f16[T, 64], w: f16[64, 64]) -> (y: f16[T, 64]) {{\n  y = {terms};\n}}\n")
