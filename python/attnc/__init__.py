"""attnc — run kernels compiled by attnc on PyTorch CUDA tensors.

    import attnc, torch
    mod = attnc.load("attn.ptx")                 # PTX + manifest from attnc
    o = mod.run("mha", q, k, v)                  # -> torch tensor (or a tuple)

    mod = attnc.compile("model.attn")                # runs the attnc binary (default target sm_80),
                                                     # or loads the PTX from the cache (attnc.cache)
    o = attnc.attention(q, k, v, causal=True)        # no .attn file: functional.py
    attnc.register_transformers()                    # attn_implementation="attnc" in transformers: hf.py

ctypes over libattnrt (no compile step). Kernels launch on the current torch
stream. Inputs are CUDA tensors of the manifest's dtypes, contiguous or
strided views (innermost stride 1, 16-byte aligned rows), read with no copy;
outputs are allocated (or passed with out=, views too). See doc/python.md.
"""
import ctypes
import os
import shutil
import subprocess
import tempfile

from . import cache as _cache

__all__ = ["AttncError", "Module", "load", "compile", "compile_text", "attention", "register_transformers",
           "find_attnc"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_MAX_RANK = 8


class AttncError(RuntimeError):
    """A bad argument, a bad file, or a CUDA failure, with libattnrt's message."""


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * _MAX_RANK), ("strides", ctypes.c_int64 * _MAX_RANK)]


def _candidates(name, env):
    if os.environ.get(env):
        yield os.environ[env]
    for d in (_HERE, os.path.join(_HERE, "..", "..", "build"), os.path.join(_HERE, "..", "..", "lib")):
        yield os.path.join(d, name)


_lib = None


def _runtime():
    global _lib
    if _lib is not None:
        return _lib
    for path in list(_candidates("libattnrt.so", "ATTNC_RUNTIME")) + ["libattnrt.so"]:
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError:
            continue
    else:
        raise AttncError("cannot find libattnrt.so: build attnc (cmake) or set ATTNC_RUNTIME to its path")
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    lib.attnrt_last_error.restype = S
    lib.attnrt_load_file.argtypes = [S, ctypes.POINTER(P)]
    lib.attnrt_unload.argtypes = [P]
    lib.attnrt_block_count.argtypes = [P]
    lib.attnrt_block_name.argtypes = [P, I]
    lib.attnrt_block_name.restype = S
    lib.attnrt_block_arity.argtypes = [P, S, ctypes.POINTER(I), ctypes.POINTER(I)]
    lib.attnrt_block_tensor.argtypes = [P, S, I, I, ctypes.POINTER(S), ctypes.POINTER(I), ctypes.POINTER(I),
                                        ctypes.POINTER(ctypes.c_int64)]
    lib.attnrt_output_shape.argtypes = [P, S, ctypes.POINTER(_Tensor), I, I, ctypes.POINTER(I),
                                        ctypes.POINTER(ctypes.c_int64)]
    lib.attnrt_run.argtypes = [P, S, ctypes.POINTER(_Tensor), I, ctypes.POINTER(_Tensor), I, P]
    _lib = lib
    return lib


def _check(rc):
    if rc:
        raise AttncError(_runtime().attnrt_last_error().decode())


_DTYPES = ("f16", "bf16", "f32", "i32", "i64")


def _torch_dtypes():
    import torch
    return {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2, torch.int32: 3, torch.int64: 4}


def _as_tensor(block, kind, name, want, t):
    import torch
    if not isinstance(t, torch.Tensor):
        raise AttncError(f"{kind} '{name}' of block '{block}' must be a torch.Tensor, not {type(t).__name__}")
    if not t.is_cuda:
        raise AttncError(f"{kind} '{name}' of block '{block}' is on {t.device}; expected a CUDA tensor")
    dt = _torch_dtypes().get(t.dtype)
    if dt is None or dt != want:
        raise AttncError(f"{kind} '{name}' of block '{block}' has dtype {t.dtype}; expected {_DTYPES[want]}")
    if t.dim() > _MAX_RANK:
        raise AttncError(f"{kind} '{name}' of block '{block}' has rank {t.dim()} > {_MAX_RANK}")
    s = _Tensor()
    s.data = t.data_ptr()
    s.dtype = dt
    s.rank = t.dim()
    for i in range(t.dim()):
        s.shape[i] = t.shape[i]
        s.strides[i] = t.stride(i)
    return s


class Module:
    """A loaded PTX file with its manifest; its blocks run on torch tensors."""

    def __init__(self, path):
        lib = _runtime()
        self._m = ctypes.c_void_p()
        _check(lib.attnrt_load_file(os.fsencode(path), ctypes.byref(self._m)))
        self.path = path

    def __del__(self):
        if getattr(self, "_m", None) and _lib is not None:
            _lib.attnrt_unload(self._m)
            self._m = None

    @property
    def blocks(self):
        lib = _runtime()
        return [lib.attnrt_block_name(self._m, i).decode() for i in range(lib.attnrt_block_count(self._m))]

    def signature(self, block):
        """([(name, dtype, shape)] of inputs, the same of outputs); symbolic dims read -1."""
        lib = _runtime()
        nin, nout = ctypes.c_int(), ctypes.c_int()
        _check(lib.attnrt_block_arity(self._m, block.encode(), ctypes.byref(nin), ctypes.byref(nout)))
        sig = ([], [])
        for is_out, n in ((0, nin.value), (1, nout.value)):
            for i in range(n):
                name, dt, rank = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int()
                shape = (ctypes.c_int64 * _MAX_RANK)()
                _check(lib.attnrt_block_tensor(self._m, block.encode(), is_out, i, ctypes.byref(name),
                                               ctypes.byref(dt), ctypes.byref(rank), shape))
                sig[is_out].append((name.value.decode(), dt.value, tuple(shape[:rank.value])))
        return sig

    def run(self, block, *inputs, out=None):
        """Runs `block` on the input tensors; returns its outputs (one tensor,
        or a tuple in the block's order), written into `out` if given."""
        import torch
        lib = _runtime()
        ins, outs = self.signature(block)
        if len(inputs) != len(ins):
            names = ", ".join(n for n, _, _ in ins)
            raise AttncError(f"block '{block}' takes {len(ins)} inputs ({names}); got {len(inputs)}")
        cin = (_Tensor * max(1, len(ins)))(*[_as_tensor(block, "input", n, dt, t)
                                            for (n, dt, _), t in zip(ins, inputs)])
        if out is None:
            dev = inputs[0].device if inputs else torch.device("cuda")
            rev = {v: k for k, v in _torch_dtypes().items()}
            out = []
            for i, (name, dt, _) in enumerate(outs):
                rank = ctypes.c_int()
                shape = (ctypes.c_int64 * _MAX_RANK)()
                _check(lib.attnrt_output_shape(self._m, block.encode(), cin, len(ins), i, ctypes.byref(rank), shape))
                out.append(torch.empty(tuple(shape[:rank.value]), dtype=rev[dt], device=dev))
        elif isinstance(out, torch.Tensor):
            out = [out]
        out = list(out)
        if len(out) != len(outs):
            raise AttncError(f"block '{block}' has {len(outs)} outputs; out= gives {len(out)}")
        cout = (_Tensor * max(1, len(outs)))(*[_as_tensor(block, "output", n, dt, t)
                                              for (n, dt, _), t in zip(outs, out)])
        stream = torch.cuda.current_stream(out[0].device if out else None).cuda_stream
        _check(lib.attnrt_run(self._m, block.encode(), cin, len(ins), cout, len(outs), ctypes.c_void_p(stream)))
        return out[0] if len(out) == 1 else tuple(out)

    def autograd(self, block):
        """The attention block as a differentiable op: f(q, k, v, *side) -> o,
        whose backward runs the compiled NAME.backward; it is a torch.library
        custom op, so torch.compile graphs can hold it (compile the module with
        backward=True). See autograd.py and doc/python.md."""
        from .autograd import make_function
        return make_function(self, block)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self.blocks:
            return lambda *a, **kw: self.run(name, *a, **kw)
        raise AttributeError(f"module {self.path} has no block '{name}' (blocks: {', '.join(self.blocks)})")


def load(path):
    """Loads a PTX file written by attnc."""
    return Module(path)


def find_attnc():
    """The attnc binary: $ATTNC, beside this package, the build folder, or PATH."""
    for path in _candidates("attnc", "ATTNC"):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("attnc")
    if not found:
        raise AttncError("cannot find the attnc binary: build it or set ATTNC to its path")
    return found


def _read(source):
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError:
        return None   # attnc reports it


def compile_text(text, arch=None, backward=False):
    """compile() of .attn source text (str) rather than a file: through the
    same on-disk cache, which keys on the text."""
    fd, path = tempfile.mkstemp(suffix=".attn", prefix="attnc-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return compile(path, arch=arch, backward=backward)
    finally:
        os.remove(path)


def attention(q, k, v, **options):
    """Attention on PyTorch tensors, compiled for their GPU and cached:
    attnc.functional.attention (its text says what the options mean)."""
    from .functional import attention as run
    return run(q, k, v, **options)


def register_transformers(name="attnc"):
    """attnc as transformers' attention backend `name`:
    from_pretrained(..., attn_implementation="attnc") (attnc.hf)."""
    from .hf import register
    return register(name)


def compile(source, arch=None, output=None, backward=False, cache=True):
    """Compiles a .attn file with attnc for `arch` (None: attnc's default
    target, sm_80) and loads the PTX (written to `output`, or to a temporary
    file that is removed once loaded). backward=True also compiles each
    attention block's backward, NAME.backward (attnc -backward).

    With cache=True the PTX is kept in the on-disk cache (attnc.cache:
    $ATTNC_CACHE_DIR, else ~/.cache/attnc), keyed by the source text, the
    target, the flag and the attnc binary; a later compile of the same
    text, in this process or another, loads it without running attnc."""
    compiler = find_attnc()
    text = _read(source) if cache else None
    k = _cache.key(text, arch, backward, compiler) if text is not None else None
    hit = _cache.lookup(k) if k else None
    if hit:
        try:
            if output is not None:
                shutil.copyfile(hit, output)
            return load(output if output is not None else hit)
        except (AttncError, OSError):
            _cache.drop(k)   # an entry that no longer loads: compile again
    keep = output is not None
    if not keep:
        fd, output = tempfile.mkstemp(suffix=".ptx", prefix="attnc-")
        os.close(fd)
    try:
        cmd = [compiler, os.fspath(source), "-emit=ptx", "-o", output] + (["-arch", arch] if arch else [])
        if backward:
            cmd.append("-backward")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise AttncError(r.stderr.strip() or f"attnc failed with status {r.returncode}")
        mod = load(output)
        if k and _read(source) == text:   # (not if the file changed while attnc read it)
            _cache.store(k, output)
        return mod
    finally:
        if not keep and os.path.exists(output):
            os.remove(output)
