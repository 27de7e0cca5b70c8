"""plot.py — the attention plot from saved benchmark results, without a GPU:
TFLOP/s against N, a line per implementation, a panel per head dim ×
causal (fp16), attnc once per results file (one file per -arch).

    python3 bench/plot.py OUT.png bench/results/DATE-sm_80-....json bench/results/DATE-sm_90a-....json

The peers (flash, cudnn, flex) are drawn from the first file: every file of
one run timed them in the same process as its attnc.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def draw(runs, out, title):
    """runs: lists of bench.py's attention rows, one list per attnc target;
    the peers come from the first."""
    runs = [[r for r in rows if r.get("what") == "attention" and r["dtype"] == "f16"] for rows in runs]
    dims = sorted({r["D"] for rows in runs for r in rows}) or [64, 128]
    fig, axes = plt.subplots(len(dims), 2, figsize=(11, 4 * len(dims)), sharex=True, squeeze=False)
    for ax, (D, causal) in zip(axes.flat, [(D, c) for D in dims for c in (False, True)]):
        for k, rows in enumerate(runs):
            sel = [r for r in rows if r["D"] == D and r["causal"] == causal]
            impls = ("attnc", "flash", "cudnn", "flex") if k == 0 else ("attnc",)
            for impl in impls:
                pts = [(r["N"], r[impl]) for r in sel if impl in r]
                if pts:
                    label = f"attnc {sel[0]['arch']}" if impl == "attnc" else impl
                    ax.plot(*zip(*pts), marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"fp16, head dim {D}, {'causal' if causal else 'not causal'}")
        ax.set_xlabel("N (batch·N = 16384)")
        ax.set_ylabel("TFLOP/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    draw([json.load(open(f)) for f in sys.argv[2:]], sys.argv[1], "attention forward on the H200")


if __name__ == "__main__":
    main()
