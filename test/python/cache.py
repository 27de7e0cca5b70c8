"""attnc.compile's on-disk cache (attnc.cache), without a GPU or torch.
argv: the examples folder, a scratch folder, a log that the attnc wrapper
($ATTNC) appends a line to each time it runs, and the step to run (each
step is its own process, as a second program would be)."""
import glob
import os
import shutil
import sys

import attnc

examples, scratch, log, step = sys.argv[1:5]
src = os.path.join(examples, "gqa_causal.attn")


def runs():
    return len(open(log).read().splitlines()) if os.path.exists(log) else 0


def entries():
    return sorted(glob.glob(os.path.join(attnc.cache.directory(), "*", "*.ptx")))


before = runs()
if step == "first":
    mod = attnc.compile(src)
elif step == "again":            # another process, the same text: no attnc run
    mod = attnc.compile(src)
elif step == "renamed":          # the same text under another name: a hit
    other = os.path.join(scratch, "renamed.attn")
    shutil.copyfile(src, other)
    mod = attnc.compile(other)
elif step == "edited":           # other text: a miss
    other = os.path.join(scratch, "edited.attn")
    open(other, "w").write(open(src).read() + "\n# an edit\n")
    mod = attnc.compile(other)
elif step == "variants":         # another target, the backward: misses
    mod = attnc.compile(src, arch="sm_90a")
    mod = attnc.compile(src, backward=True)
elif step == "output":           # a hit copied to output=
    out = os.path.join(scratch, "out.ptx")
    mod = attnc.compile(src, output=out)
    print("output same as entry:", any(open(e).read() == open(out).read() for e in entries()))
elif step == "corrupt":          # an entry that does not load is compiled again
    for e in entries():
        open(e, "w").write("not ptx\n")
    mod = attnc.compile(src)
elif step == "nocache":
    n = len(entries())
    mod = attnc.compile(os.path.join(examples, "mha.attn"), cache=False)
    print("new entries:", len(entries()) - n)
elif step == "unwritable":       # a cache that cannot be written: compiling still works
    mod = attnc.compile(src)
print(step, "attnc runs:", runs() - before, "entries:", len(entries()), "blocks:", mod.blocks)
print("temporaries:", glob.glob(os.path.join(attnc.cache.directory(), "*", ".tmp-*")))
