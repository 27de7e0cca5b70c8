"""The Python binding's parts that need no GPU and no torch: compiling,
loading, the manifest's blocks and signatures, and its errors."""
import glob
import os
import sys
import tempfile

import attnc

before = set(glob.glob(os.path.join(tempfile.gettempdir(), "attnc-*.ptx")))
mod = attnc.compile(os.path.join(sys.argv[1], "gqa_causal.attn"))
print("blocks:", mod.blocks)
ins, outs = mod.signature("gqa_causal")
print("inputs:", ins)
print("outputs:", outs)
print("temporary left behind:", set(glob.glob(os.path.join(tempfile.gettempdir(), "attnc-*.ptx"))) - before)
for what, fn in (("compile error", lambda: attnc.compile(sys.argv[2], arch="sm_70")),
                 ("missing file", lambda: attnc.load("/nonexistent/attn.ptx")),
                 ("no block", lambda: mod.signature("nope"))):
    try:
        fn()
        print(what, "-> no error")
    except attnc.AttncError as e:
        print(what, "->", str(e).splitlines()[0])
try:
    mod.nope
except AttributeError as e:
    print("attribute ->", str(e).split(" has ")[1])
