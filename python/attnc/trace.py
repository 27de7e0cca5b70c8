"""trace.py — FlexAttention's score_mod and mask_mod, written in Python, as
the .attn hooks they describe.

    def rel_bias(score, b, h, q_idx, kv_idx):
        return score + bias[h, q_idx, kv_idx]          # bias: a tensor the function captures

    def document(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

trace(score_mod, mask_mod) calls each function once with symbols for its
arguments (Sym), as torch.fx and FlexAttention's own tracing do, and gets
the expression it computes back as .attn text over the hooks' parameters
(s, b, h, i, j). Python arithmetic and comparisons, & | ~ on conditions,
torch.where, the elementwise functions the DSL has (torch.tanh, exp, exp2,
log, sqrt, rsqrt, sigmoid, relu, abs, minimum, maximum, clamp) and
indexing a tensor the function captures, one index per dimension, are
traced; anything else, and branching on a traced value (`if q_idx > 3:`),
raises AttncError naming it. Each captured tensor becomes a side input of
the block (f32 for floating tensors, i32 for integer and bool ones, its
sizes as numbers), passed at every call, so a new tensor of the same shape
reuses the compiled block. A score_mod's `torch.where(c, x, -inf)` at its
top is split into the score x and the mask c (the DSL has no infinite
constants); other infinities are refused.
"""
import math
import sys

_FUNCS = ("tanh", "exp", "exp2", "log", "sqrt", "rsqrt", "sigmoid", "relu", "abs")
# torch.Tensor's operators and functions of two operands -> Sym's method for them
_TENSOR_OPS = {"__add__": "__add__", "__radd__": "__radd__", "__sub__": "__sub__", "__rsub__": "__rsub__",
               "__mul__": "__mul__", "__rmul__": "__rmul__", "__truediv__": "__truediv__",
               "__rtruediv__": "__rtruediv__", "add": "__add__", "sub": "__sub__", "mul": "__mul__",
               "div": "__truediv__", "__and__": "__and__", "__or__": "__or__", "__eq__": "__eq__",
               "__ne__": "__ne__", "__lt__": "__lt__", "__le__": "__le__", "__gt__": "__gt__",
               "__ge__": "__ge__", "logical_and": "__and__", "logical_or": "__or__"}


def _error(msg):
    from . import AttncError
    return AttncError(msg)


class Sym:
    """A traced value: its .attn text and kind ("int", "float" or "bool")."""
    __slots__ = ("code", "kind", "tracer")

    def __init__(self, code, kind, tracer):
        self.code, self.kind, self.tracer = code, kind, tracer

    # -- arithmetic --------------------------------------------------------
    def _arith(self, other, op, swap=False):
        a, b = self, self.tracer.lift(other)
        if swap:
            a, b = b, a
        a, b = (Sym(f"({x.code} ? 1 : 0)", "int", x.tracer) if x.kind == "bool" else x for x in (a, b))  # as torch
        kind = "int" if a.kind == b.kind == "int" and op in "+-*//%" and op != "/" else "float"
        return Sym(f"({a.code} {op} {b.code})", kind, self.tracer)

    def __add__(self, o): return self._arith(o, "+")
    def __radd__(self, o): return self._arith(o, "+", True)
    def __sub__(self, o): return self._arith(o, "-")
    def __rsub__(self, o): return self._arith(o, "-", True)
    def __mul__(self, o): return self._arith(o, "*")
    def __rmul__(self, o): return self._arith(o, "*", True)
    def __truediv__(self, o): return self._arith(o, "/")
    def __rtruediv__(self, o): return self._arith(o, "/", True)
    def __floordiv__(self, o): return self._arith(o, "//")
    def __rfloordiv__(self, o): return self._arith(o, "//", True)
    def __mod__(self, o): return self._arith(o, "%")
    def __rmod__(self, o): return self._arith(o, "%", True)

    def __neg__(self):
        self.tracer.number(self, "-")
        return Sym(f"(-{self.code})", self.kind, self.tracer)

    def __pos__(self):
        return self

    def __pow__(self, n):
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 4:
            raise _error(f"x ** {n!r} in a {self.tracer.what}: only whole powers 1 to 4 are traced")
        out = self
        for _ in range(n - 1):
            out = out * self
        return out

    def __abs__(self):
        return self.tracer.call("abs", self)

    # -- comparisons and conditions -----------------------------------------
    def _cmp(self, other, op, swap=False):
        a, b = self, self.tracer.lift(other)
        if swap:
            a, b = b, a
        if "bool" in (a.kind, b.kind) and op not in ("==", "!="):
            raise _error(f"'{op}' of a condition in a {self.tracer.what}")
        return Sym(f"({a.code} {op} {b.code})", "bool", self.tracer)

    def __lt__(self, o): return self._cmp(o, "<")
    def __le__(self, o): return self._cmp(o, "<=")
    def __gt__(self, o): return self._cmp(o, ">")
    def __ge__(self, o): return self._cmp(o, ">=")
    def __eq__(self, o): return self._cmp(o, "==")   # noqa: E704
    def __ne__(self, o): return self._cmp(o, "!=")
    __hash__ = None

    def _logic(self, other, op, swap=False):
        a, b = self, self.tracer.lift(other)
        if swap:
            a, b = b, a
        if a.kind != "bool" or b.kind != "bool":
            raise _error(f"'{op}' of numbers in a {self.tracer.what}: & | ~ take conditions (bit operations "
                         "on integers are not traced)")
        return Sym(f"({a.code} {'&&' if op == '&' else '||'} {b.code})", "bool", self.tracer)

    def __and__(self, o): return self._logic(o, "&")
    def __rand__(self, o): return self._logic(o, "&", True)
    def __or__(self, o): return self._logic(o, "|")
    def __ror__(self, o): return self._logic(o, "|", True)

    def __invert__(self):
        if self.kind != "bool":
            raise _error(f"'~' of a number in a {self.tracer.what}")
        return Sym(f"(!{self.code})", "bool", self.tracer)

    def logical_and(self, o): return self._logic(o, "&")
    def logical_or(self, o): return self._logic(o, "|")
    def logical_not(self): return ~self

    def __bool__(self):
        raise _error(f"a {self.tracer.what} branched on a traced value ({self.code}); it is traced once, "
                     "so write conditions with torch.where, & | ~")

    def __index__(self):
        raise _error(f"a {self.tracer.what} used a traced value ({self.code}) as a Python integer; index a "
                     "captured tensor with it instead")

    def __getitem__(self, idx):
        raise _error(f"a {self.tracer.what} indexed a traced value ({self.code})")

    # -- methods as torch.Tensor has them ---------------------------------
    def tanh(self): return self.tracer.call("tanh", self)
    def exp(self): return self.tracer.call("exp", self)
    def exp2(self): return self.tracer.call("exp2", self)
    def log(self): return self.tracer.call("log", self)
    def sqrt(self): return self.tracer.call("sqrt", self)
    def rsqrt(self): return self.tracer.call("rsqrt", self)
    def sigmoid(self): return self.tracer.call("sigmoid", self)
    def relu(self): return self.tracer.call("relu", self)
    def abs(self): return self.tracer.call("abs", self)

    def clamp(self, min=None, max=None):  # noqa: A002 — torch's names
        return self.tracer.clamp(self, min, max)

    def float(self):
        self.tracer.number(self, "float()")
        return Sym(f"f32({self.code})", "float", self.tracer)

    def to(self, *args, **kwargs):
        torch = _torch()
        dtype = kwargs.get("dtype", args[0] if args else None)
        if torch is not None and isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            return self.float()
        raise _error(f"x.to({dtype}) in a {self.tracer.what}: only a conversion to a floating type is traced")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tracer = next(a.tracer for a in _flatten(args) if isinstance(a, Sym))
        return tracer.torch_function(func, args, kwargs)


def _torch():
    """torch if the process has imported it (a function that uses torch
    has), else None: tracing plain Python arithmetic needs no torch."""
    return sys.modules.get("torch")


def _flatten(xs):
    for x in xs:
        if isinstance(x, (tuple, list)):
            yield from _flatten(x)
        else:
            yield x


class Tracer:
    """One tracing of a score_mod or mask_mod: the tensors it captured
    (shared by both functions of a call: `captured`)."""

    def __init__(self, what, captured):
        self.what = what            # "score_mod" or "mask_mod", for messages
        self.captured = captured    # [(name, tensor, dsl type)], in order of first use

    def lift(self, x):
        torch = _torch()
        if isinstance(x, Sym):
            return x
        if torch is not None and isinstance(x, torch.Tensor) and x.dim() == 0:
            x = x.item()
        if isinstance(x, bool):
            return Sym("(0 == 0)" if x else "(0 != 0)", "bool", self)
        if isinstance(x, int):
            return Sym(str(x) if x >= 0 else f"({x})", "int", self)
        if isinstance(x, float):
            if not math.isfinite(x):
                raise _error(f"a {self.what} used {x}: attnc's hooks have no infinite or NaN constants; hide "
                             "scores with a mask_mod (or torch.where(c, score, -inf) as a score_mod's result)")
            return Sym(repr(x) if x >= 0 else f"({x!r})", "float", self)
        if torch is not None and isinstance(x, torch.Tensor):
            raise _error(f"a {self.what} used a captured tensor of shape {tuple(x.shape)} without indexing it; "
                         "index it with the function's arguments, one index per dimension")
        raise _error(f"a {self.what} used {type(x).__name__} {x!r}, which attnc does not trace")

    def number(self, x, op):
        if x.kind == "bool":
            raise _error(f"'{op}' of a condition ({x.code}) in a {self.what}")

    def call(self, fn, x):
        x = self.lift(x)
        self.number(x, fn)
        kind = x.kind if fn == "abs" else "float"
        return Sym(f"{fn}({x.code})", kind, self)

    def minmax(self, fn, a, b):
        a, b = self.lift(a), self.lift(b)
        self.number(a, fn), self.number(b, fn)
        return Sym(f"{fn}({a.code}, {b.code})", "int" if a.kind == b.kind == "int" else "float", self)

    def clamp(self, x, lo, hi):
        x = self.lift(x)
        if lo is not None:
            x = self.minmax("max", x, lo)
        if hi is not None:
            x = self.minmax("min", x, hi)
        return x

    def where(self, c, a, b):
        c, a, b = self.lift(c), self.lift(a), self.lift(b)
        if c.kind != "bool":
            raise _error(f"torch.where's condition in a {self.what} is a number ({c.code}), not a condition")
        if "bool" in (a.kind, b.kind) and a.kind != b.kind:
            raise _error(f"torch.where in a {self.what} chose between a condition and a number")
        kind = a.kind if a.kind == b.kind else "float"
        return Sym(f"({c.code} ? {a.code} : {b.code})", kind, self)

    def index(self, t, idx):
        import torch
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != t.dim():
            raise _error(f"a {self.what} indexed a captured tensor of shape {tuple(t.shape)} with {len(idx)} "
                         f"index(es); attnc reads one element: one index per dimension")
        codes = []
        for x in idx:
            if isinstance(x, slice) or x is None or x is Ellipsis:
                raise _error(f"a {self.what} sliced a captured tensor; attnc reads one element, one index per "
                             "dimension")
            x = self.lift(x)
            if x.kind != "int":
                raise _error(f"a {self.what} indexed a captured tensor with {x.code}, not an integer")
            codes.append(x.code)
        if t.requires_grad:
            raise _error(f"a {self.what} captured a tensor of shape {tuple(t.shape)} that requires grad; attnc "
                         "gives no gradient to captured tensors (detach it)")
        for name, u, _ in self.captured:
            if u is t:
                break
        else:
            name = f"cap{len(self.captured)}"
            elem = "f32" if t.is_floating_point() else "i32"
            self.captured.append((name, t, f"{elem}[{', '.join(str(d) for d in t.shape)}]"))
        read = f"{name}[{', '.join(codes)}]"
        if t.dtype == torch.bool:
            return Sym(f"({read} != 0)", "bool", self)
        return Sym(read, "float" if t.is_floating_point() else "int", self)

    def torch_function(self, func, args, kwargs):
        import torch
        import torch.nn.functional as F
        name = getattr(func, "__name__", str(func))
        if func is torch.Tensor.__getitem__:
            return self.index(args[0], args[1])
        if func is torch.where:
            return self.where(*args, **kwargs)
        for fn in _FUNCS:
            if func in (getattr(torch, fn, None), getattr(torch.Tensor, fn, None), getattr(F, fn, None)):
                return self.call(fn, args[0])
        if func in (torch.minimum, torch.Tensor.minimum, torch.maximum, torch.Tensor.maximum):
            return self.minmax("min" if "min" in name else "max", args[0], args[1])
        if func in (torch.clamp, torch.Tensor.clamp):
            lo = kwargs.get("min", args[1] if len(args) > 1 else None)
            hi = kwargs.get("max", args[2] if len(args) > 2 else None)
            return self.clamp(args[0], lo, hi)
        if name in _TENSOR_OPS and len(args) == 2 and not kwargs:   # a 0-dim tensor or a number beside a Sym
            a, b = args
            return getattr(a if isinstance(a, Sym) else self.lift(a), _TENSOR_OPS[name])(b)
        raise _error(f"a {self.what} called {getattr(func, '__module__', '') or ''}.{name}, which attnc does not "
                     f"trace (it traces arithmetic, comparisons, & | ~, torch.where, indexing captured tensors "
                     f"and {', '.join(_FUNCS)}, minimum, maximum, clamp)")


def _split_ninf(tracer, fn, args):
    """The score_mod's result; torch.where(c, x, -inf) at its top is (x, c)."""
    torch = _torch()
    calls = []

    orig = tracer.torch_function

    def spy(func, a, kw):
        if torch is not None and func is torch.where:
            c, x, y = (list(a) + [kw.get(k) for k in ("condition", "input", "other")][len(a):])[:3]
            if isinstance(y, torch.Tensor) and y.dim() == 0:
                y = y.item()
            if isinstance(y, float) and y == -math.inf:
                out = tracer.lift(x)
                calls.append((out, tracer.lift(c)))
                return out
        return orig(func, a, kw)
    tracer.torch_function = spy
    try:
        out = fn(*args)
    finally:
        tracer.torch_function = orig
    for x, c in calls:
        if x is out:
            return out, c
    if calls:
        raise _error("a score_mod used torch.where(c, x, -inf) inside its expression; attnc takes it only as "
                     "the result (or hide the scores with a mask_mod)")
    return out, None


def trace(score_mod=None, mask_mod=None):
    """(score text or None, mask text or None, captured [(name, tensor,
    dsl type)]) of FlexAttention-style functions: score_mod(score, b, h,
    q_idx, kv_idx) -> number, mask_mod(b, h, q_idx, kv_idx) -> bool."""
    captured, score, mask = [], None, []
    if score_mod is not None:
        t = Tracer("score_mod", captured)
        args = [Sym("s", "float", t)] + [Sym(n, "int", t) for n in "bhij"]
        out, cond = _split_ninf(t, score_mod, args)
        out = t.lift(out)
        if out.kind == "bool":
            raise _error("score_mod gave a condition, not a number (a mask is mask_mod's)")
        score = out.code
        if cond is not None:
            mask.append(cond.code)
    if mask_mod is not None:
        t = Tracer("mask_mod", captured)
        out = t.lift(mask_mod(*[Sym(n, "int", t) for n in "bhij"]))
        if out.kind != "bool":
            raise _error(f"mask_mod gave a number ({out.code}), not a condition (True: the score is kept)")
        mask.append(out.code)
    return score, " && ".join(mask) or None, captured
