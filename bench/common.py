"""common.py — what the GPU scripts share: the kit's arguments (--kit,
--out), pointing the attnc Python binding at the kit's attnc and
libattnrt, and the geometric mean their reports print. Importing it puts
the repository's python/ on the path, so `import attnc` follows it.

    import common
    ap = common.kit_parser(__doc__)   # --kit KIT --out DIR, then the script's own
    args = ap.parse_args()
    common.use_kit(args.kit)
"""
import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))


def kit_parser(description=None, out=True):
    """An argument parser with --kit (the folder bench/gpu_kit.sh made) and,
    unless out=False, --out (where logs and tables go)."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kit", required=True, help="the folder bench/gpu_kit.sh made (attnc, libattnrt.so)")
    if out:
        ap.add_argument("--out", required=True, help="the folder for logs and tables")
    return ap


def use_kit(kit):
    """The binding compiles with the kit's attnc and loads its libattnrt;
    returns the attnc path."""
    kit = os.path.abspath(kit)
    os.environ["ATTNC"] = os.path.join(kit, "attnc")
    os.environ["ATTNC_RUNTIME"] = os.path.join(kit, "libattnrt.so")
    return os.environ["ATTNC"]


def use_arch(arch):
    """attnc.attention (and what calls it: attnc.register_transformers())
    compiles for `arch` instead of the GPU's own target (functional.target_of):
    sm_70 and sm_80 PTX run on newer GPUs, so one Hopper checks all three.
    None: the GPU's."""
    if arch:
        from attnc import functional
        functional.target_of = lambda device: arch


def geomean(xs):
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
