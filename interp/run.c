/* run.c — `attnc run`: binds dimensions, makes seeded random inputs, runs
 * every block, and with --check compares each output against the exact
 * (float64) evaluation of the unoptimised attn IR. */
#include "interp/interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- dimensions ---------------------------------------------------------- */

/* Unbound dimensions take small defaults: 2 for names starting with B or H
 * (batch, heads), 17 (a length no tile size divides) for the rest. */
static int64_t default_dim(const char *name) { return name[0] == 'B' || name[0] == 'H' ? 2 : 17; }

static void collect_dims(const Type *t, Arena *a, Map *seen, PtrVec *order) {
    if (t->kind == TY_SCALAR)
        return;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i].sym && !map_get(seen, t->dims[i].sym)) {
            map_put(a, seen, t->dims[i].sym, (void *)1);
            vec_push(a, order, (void *)t->dims[i].sym);
        }
}

static void collect_op_dims(const Op *op, Arena *a, Map *seen, PtrVec *order) {
    if (op->kind == OP_DEFINE_DIM) {   /* computed by the program: never defaulted */
        map_put(a, seen, op_attr(op, "name")->s, (void *)1);
        return;
    }
    for (int i = 0; i < op->nresults; i++)
        collect_dims(op->results[i]->type, a, seen, order);
    if (op->kind == OP_DIM)
        collect_dims(&(Type){.kind = TY_TENSOR, .rank = 1,
                             .dims = &(Dim){op_attr(op, "name")->s, 0}}, a, seen, order);
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++) {
            const Block *blk = op->regions[r].blocks[b];
            for (int i = 0; i < blk->nargs; i++)
                collect_dims(blk->args[i]->type, a, seen, order);
            for_each_op(inner, blk) collect_op_dims(inner, a, seen, order);
        }
}

/* ---- inputs and comparison ----------------------------------------------- */

/* Whether blk (or a region inside it) multiplies by v as a weight: v is
 * operand B of an attn.matmul. */
static bool used_as_weight(const Block *blk, const Value *v) {
    for (const Op *o = blk->first; o; o = o->next) {
        if (o->kind == OP_MATMUL && o->operands[1] == v)
            return true;
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                if (used_as_weight(o->regions[r].blocks[k], v))
                    return true;
    }
    return false;
}

/* The attn.pages reading arg as its block table (1) or lengths (2), or NULL. */
static const Op *paged_by(const Block *body, const Value *arg, int operand) {
    for_each_op(op, body)
        if (op->kind == OP_PAGES && op->operands[operand] == arg)
            return op;
    return NULL;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The fewest rows of the packed tensors arg is the sequence offsets of
 * (attn.pad's operand 1), or -1: none. */
static int64_t offsets_of(Interp *in, const Block *body, const Value *arg) {
    int64_t rows = -1;
    for_each_op(op, body) {
        int64_t dims[MAX_RANK];
        if (op->kind == OP_PAD && op->operands[1] == arg && concrete_shape(in, op->operands[0]->type, dims)) {
            int64_t n = op->operands[0]->type->rank == 2 ? dims[1] : dims[0];   /* (an lse's [H, T]) */
            rows = rows < 0 || n < rows ? n : rows;
        }
    }
    return rows;
}

/* N(0, 1) numbers, or for a weight [.., K, N] N(0, 1/K), as initialised
 * weights are: then x @ w stays N(0, 1)-sized at any K, and f16 blocks at
 * their real sizes do not overflow. Integers (indices) are 0..4, but a
 * paged cache's block table holds random pages of the cache (0 to
 * pages − 1), and its lengths 0 to max_pages · page_size (each length
 * 0, 1 and the most as likely as a tenth of the rest); packed sequences'
 * offsets run from 0 to all the rows, cut at random. */
static Tensor *random_input(Interp *in, const Block *body, const Value *arg, Rng *rng) {
    const Type *t = arg->type;
    int64_t dims[MAX_RANK];
    if (!concrete_shape(in, t, dims))
        return NULL;
    int rank = t->kind == TY_SCALAR ? 0 : t->rank;
    Tensor *x = tensor_new(in->arena, t->elem, rank, dims);
    double scale = rank >= 2 && used_as_weight(body, arg) ? 1 / sqrt((double)dims[rank - 2]) : 1;
    const Op *table = paged_by(body, arg, 1), *lens = paged_by(body, arg, 2);
    int64_t pages = 0, most = 0;
    if (table || lens) {   /* the cache's pages, and max_pages · page_size keys */
        const Op *p = table ? table : lens;
        int64_t cdims[MAX_RANK], tdims[MAX_RANK];
        if (!concrete_shape(in, p->operands[0]->type, cdims) || !concrete_shape(in, p->operands[1]->type, tdims))
            return NULL;
        pages = cdims[0];
        most = tdims[1] * op_attr(p, "page_size")->i;
    }
    int64_t packed = rank == 1 ? offsets_of(in, body, arg) : -1;
    if (packed >= 0) {   /* from 0 to all the rows, cut at random (empty sequences among them) */
        for (int64_t e = 0; e < x->size; e++)
            x->data[e] = e == 0 ? 0 : e == x->size - 1 ? (double)packed : (double)(rng_next(rng) % (uint64_t)(packed + 1));
        qsort(x->data, (size_t)x->size, sizeof(double), compare_doubles);
        return x;
    }
    for (int64_t e = 0; e < x->size; e++) {
        if (table) {
            x->data[e] = (double)(rng_next(rng) % (uint64_t)pages);
        } else if (lens) {
            uint64_t r = rng_next(rng) % 13;
            x->data[e] = r == 0 ? 0 : r == 1 ? 1 : r == 2 ? (double)most : (double)(rng_next(rng) % (uint64_t)(most + 1));
        } else {
            x->data[e] = scalar_is_float(t->elem) ? round_to(t->elem, scale * rng_normal(rng))
                                                  : (double)(rng_next(rng) % 5);
        }
    }
    return x;
}

/* The fixed part of the documented tolerance (doc/interpreter.md): every
 * element must satisfy |got - want| <= tol * (|want| + rms(want)); tol follows
 * from the output's dtype and the block's accumulator precision. */
static double tolerance(ScalarKind out, bool f16_acc) {
    double t = out == SK_BF16 ? 1.6e-2 : out == SK_F16 ? 4e-3 : 1e-3;
    return f16_acc ? t * 8 : t;
}

static bool uses_f16_acc(const Op *func) {
    for_each_op(op, op_body(func)) {
        Attr *acc = op_attr(op, "acc");
        if (acc && acc->kind == AT_TYPE && acc->type->elem == SK_F16)
            return true;
    }
    return false;
}

typedef struct Worst {
    double err;      /* |got - want| / (|want| + rms(want)) */
    int64_t at;
    double got, want;
} Worst;

static Worst compare(const Tensor *got, const Tensor *want) {
    double sq = 0;
    int64_t finite = 0;
    for (int64_t e = 0; e < want->size; e++)
        if (isfinite(want->data[e])) {
            sq += want->data[e] * want->data[e];
            finite++;
        }
    double rms = finite ? sqrt(sq / (double)finite) : 0;
    if (rms == 0)
        rms = 1;
    Worst w = {-1, 0, 0, 0};
    for (int64_t e = 0; e < want->size; e++) {
        double g = got->data[e], x = want->data[e], err;
        if (interp_is_poison(g))   /* never written: wrong whatever the reference says */
            err = INFINITY;
        else if (isnan(g) || isnan(x))
            err = isnan(g) && isnan(x) ? 0 : INFINITY;
        else if (isinf(x) || isinf(g))
            err = g == x ? 0 : INFINITY;
        else
            err = fabs(g - x) / (fabs(x) + rms);
        if (err > w.err)
            w = (Worst){err, e, g, x};
    }
    if (w.err < 0)
        w.err = 0;   /* an empty tensor */
    return w;
}

static void print_index(FILE *out, const Tensor *t, int64_t e) {
    int64_t idx[MAX_RANK];
    for (int d = t->rank - 1; d >= 0; d--) {
        idx[d] = e % t->dims[d];
        e /= t->dims[d];
    }
    fputc('[', out);
    for (int d = 0; d < t->rank; d++)
        fprintf(out, "%s%lld", d ? ", " : "", (long long)idx[d]);
    fputc(']', out);
}

static void print_summary(FILE *out, const Tensor *t) {
    double sum = 0, amax = 0;
    int64_t finite = 0, nan = 0, inf = 0;
    for (int64_t e = 0; e < t->size; e++)
        if (isfinite(t->data[e])) {
            sum += t->data[e];
            amax = fabs(t->data[e]) > amax ? fabs(t->data[e]) : amax;
            finite++;
        } else if (isnan(t->data[e])) {
            nan++;
        } else {
            inf++;
        }
    fprintf(out, "%s[", scalar_name(t->dtype));
    for (int d = 0; d < t->rank; d++)
        fprintf(out, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
    fputc(']', out);
    if (finite)   /* the mean and max of the finite elements; with none, there are none to give */
        fprintf(out, " mean %.6g, max |x| %.6g,", sum / (double)finite, amax);
    fprintf(out, " %lld of %lld finite", (long long)finite, (long long)t->size);
    if (nan || inf)
        fprintf(out, " (%lld NaN, %lld infinite)", (long long)nan, (long long)inf);
}

/* ---- the run ------------------------------------------------------------- */

static const Op *find_func(const Op *module, const char *name) {
    for_each_op(f, op_body(module))
        if (strcmp(op_attr(f, "sym_name")->s, name) == 0)
            return f;
    return NULL;
}

/* A block's inputs and reference outputs: made once per run, or once per
 * `attnc run --check-each-pass` through opts->cache. */
typedef struct Reference {
    Tensor **inputs, **want, **base;
} Reference;

static Reference *reference_for(Arena *a, Diag *d, Bindings *bind, const Op *refmod, const Op *ref,
                                const RunOptions *opts);

static Tensor *rounded_copy(Arena *a, const Tensor *t, ScalarKind dtype) {
    Tensor *r = tensor_new(a, dtype, t->rank, t->dims);
    for (int64_t e = 0; e < t->size; e++)
        r->data[e] = round_to(dtype, t->data[e]);
    return r;
}

/* A backward block's inputs: its forward's inputs, the forward's o and lse
 * (evaluated exactly, then rounded to their types, as a GPU forward would
 * hand them over), and a random gradient of o. */
static bool backward_inputs(Arena *a, Diag *d, Bindings *bind, const Op *refmod, const Op *ref,
                            const RunOptions *opts, Tensor **inputs, Rng *rng) {
    const Op *fwd = find_func(refmod, op_attr(ref, "forward")->s);
    if (!fwd)
        die("run: a backward block without its forward");
    RunOptions fopts = *opts;
    fopts.check = false;
    Reference *fr = reference_for(a, d, bind, refmod, fwd, &fopts);
    if (!fr)
        return false;
    int nf = op_body(fwd)->nargs;
    Interp exact = {.arena = a, .diag = d, .bind = bind, .exact = true};
    map_init(&exact.values, false);
    Tensor *outs[2];
    if (!interp_func(&exact, fwd, fr->inputs, outs))
        return false;
    const Block *body = op_body(ref);
    for (int i = 0; i < nf; i++)
        inputs[i] = fr->inputs[i];
    inputs[nf] = rounded_copy(a, outs[0], body->args[nf]->type->elem);
    inputs[nf + 1] = rounded_copy(a, outs[1], SK_F32);
    Interp run = {.arena = a, .diag = d, .bind = bind};
    map_init(&run.values, false);
    return (inputs[nf + 2] = random_input(&run, body, body->args[nf + 2], rng)) != NULL;
}

static Reference *reference_for(Arena *a, Diag *d, Bindings *bind, const Op *refmod, const Op *ref,
                                const RunOptions *opts) {
    const char *name = op_attr(ref, "sym_name")->s;
    Reference *r = opts->cache ? map_get(opts->cache, name) : NULL;
    if (r)
        return r;
    r = NEW(a, Reference);
    Interp run = {.arena = a, .diag = d, .bind = bind};
    map_init(&run.values, false);
    Rng rng = {opts->seed * 0x9E3779B97F4A7C15ull + 1};
    const Block *body = op_body(ref);
    int nout = op_attr(ref, "outputs")->n;
    r->inputs = NEW_ARRAY(a, Tensor *, body->nargs + 1);
    if (op_attr(ref, "forward")) {
        if (!backward_inputs(a, d, bind, refmod, ref, opts, r->inputs, &rng))
            return NULL;
    } else {
        for (int i = 0; i < body->nargs; i++)
            if (!(r->inputs[i] = random_input(&run, body, body->args[i], &rng)))
                return NULL;
    }
    /* --check: the exact evaluation of the unoptimised program, and the
     * unoptimised program at the lowered one's precisions (the baseline). */
    if (opts->check) {
        Interp exact = {.arena = a, .diag = d, .bind = bind, .exact = true};
        Interp plain = {.arena = a, .diag = d, .bind = bind};
        map_init(&exact.values, false);
        map_init(&plain.values, false);
        r->want = NEW_ARRAY(a, Tensor *, nout + 1);
        r->base = NEW_ARRAY(a, Tensor *, nout + 1);
        if (!interp_func(&exact, ref, r->inputs, r->want) || !interp_func(&plain, ref, r->inputs, r->base))
            return NULL;
    }
    if (opts->cache && opts->check)
        map_put(a, opts->cache, name, r);
    return r;
}

/* ---- the gradient check ------------------------------------------------------ */

/* L(q, k, v) = Σ o·do, evaluated exactly. */
static bool loss(Arena *a, Diag *d, Bindings *bind, const Op *fwd, Tensor **inputs, const Tensor *dout,
                 double *l) {
    Interp exact = {.arena = a, .diag = d, .bind = bind, .exact = true};
    map_init(&exact.values, false);
    Tensor *outs[2];
    if (!interp_func(&exact, fwd, inputs, outs))
        return false;
    *l = 0;
    for (int64_t e = 0; e < dout->size; e++)
        *l += outs[0]->data[e] * dout->data[e];
    return true;
}

/* Checks a backward block's derivation, independently of any pass: its
 * exact gradients (fed the exact o and lse) against central differences of
 * the exact forward's loss Σ o·do, at a few seeded elements of q, k and v.
 * Both sides are float64 and the forward is smooth where the hooks are, so
 * they agree to about h² = 1e-8 relative. */
static bool gradient_check(Arena *a, Diag *d, Bindings *bind, const Op *refmod, const Op *bwd,
                           const Reference *r, const RunOptions *opts, FILE *out) {
    const char *name = op_attr(bwd, "sym_name")->s;
    const Op *fwd = find_func(refmod, op_attr(bwd, "forward")->s);
    int nf = op_body(fwd)->nargs;
    Interp exact = {.arena = a, .diag = d, .bind = bind, .exact = true};
    map_init(&exact.values, false);
    Tensor *fouts[2], *grads[3];
    Tensor **inputs = NEW_ARRAY(a, Tensor *, nf + 3);
    for (int i = 0; i < nf + 3; i++)
        inputs[i] = r->inputs[i];
    if (!interp_func(&exact, fwd, inputs, fouts))
        return false;
    inputs[nf] = fouts[0];
    inputs[nf + 1] = fouts[1];
    Interp exact2 = {.arena = a, .diag = d, .bind = bind, .exact = true};
    map_init(&exact2.values, false);
    if (!interp_func(&exact2, bwd, inputs, grads))
        return false;
    Rng rng = {opts->seed * 0x2545F4914F6CDD1Dull + 7};
    double worst = 0;
    int checked = 0;
    const char *worst_at = "";
    for (int t = 0; t < 3; t++) {
        Tensor *x = r->inputs[t], *g = grads[t];
        double sq = 0;
        for (int64_t e = 0; e < g->size; e++)
            sq += g->data[e] * g->data[e];
        double rms = g->size && sq > 0 ? sqrt(sq / (double)g->size) : 1;
        for (int n = 0; n < 4 && x->size; n++, checked++) {
            int64_t e = (int64_t)(rng_next(&rng) % (uint64_t)x->size);
            double keep = x->data[e], h = 1e-4 * fmax(1, fabs(keep)), lp, lm;
            Tensor *px = tensor_new(a, x->dtype, x->rank, x->dims);
            memcpy(px->data, x->data, sizeof(double) * (size_t)x->size);
            inputs[t] = px;
            px->data[e] = keep + h;
            bool ok = loss(a, d, bind, fwd, inputs, r->inputs[nf + 2], &lp);
            px->data[e] = keep - h;
            ok = ok && loss(a, d, bind, fwd, inputs, r->inputs[nf + 2], &lm);
            inputs[t] = x;
            if (!ok)
                return false;
            double fd = (lp - lm) / (2 * h), err = fabs(fd - g->data[e]) / (fabs(g->data[e]) + rms);
            if (err > worst) {
                worst = err;
                worst_at = arena_printf(a, "%s element %lld: backward %.9g, finite difference %.9g",
                                        op_attr(bwd, "outputs")->elems[t]->s, (long long)e, g->data[e], fd);
            }
        }
    }
    bool pass = worst <= 1e-5;
    if (!pass || !opts->quiet)
        fprintf(out, "%s %s: gradients vs central differences of the forward: max error %.3g over %d elements%s%s\n",
                pass ? "ok  " : "FAIL", name, worst, checked, *worst_at ? " at " : "", worst_at);
    return pass;
}

/* The bits of x, a value f16 can hold exactly (the interpreter rounds). */
static uint16_t f16_bits(double x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    x = fabs(x);
    if (isnan(x))
        return 0x7e00;
    if (isinf(x))
        return sign | 0x7c00;
    if (x == 0)
        return sign;
    int e;
    double m = frexp(x, &e);   /* x = m·2^e, m in [0.5, 1) */
    int biased = e + 14;
    if (biased >= 1)
        return sign | (uint16_t)(biased << 10) | (uint16_t)((m * 2 - 1) * 1024);
    return sign | (uint16_t)(x * 16777216.0);   /* subnormal: a multiple of 2^-24 */
}

/* Writes t as a NumPy .npy file (format 1.0) in its own dtype (the
 * reference, exact, as f8). */
static bool write_npy(Diag *d, const char *dir, const char *block, const char *kind, const char *name,
                      const Tensor *t, bool exact) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s.%s.npy", dir, block, kind, name);
    const char *descr;
    int size;
    switch (exact ? SK_F64 : t->dtype) {
    case SK_F16: descr = "<f2", size = 2; break;
    case SK_F32: descr = "<f4", size = 4; break;
    case SK_F64: descr = "<f8", size = 8; break;
    case SK_I32: descr = "<i4", size = 4; break;
    case SK_I64: case SK_INDEX: descr = "<i8", size = 8; break;
    case SK_I1: descr = "|b1", size = 1; break;
    default:
        diag_plain(d, "--dump: %s has a dtype .npy cannot hold (%s)", path, scalar_name(t->dtype));
        return false;
    }
    char header[256];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->rank; i++)
        n += snprintf(header + n, sizeof header - (size_t)n, "%lld,%s", (long long)t->dims[i],
                      i + 1 < t->rank ? " " : "");
    n += snprintf(header + n, sizeof header - (size_t)n, "), }");
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;   /* magic+len, header, '\n': 64-aligned */
    FILE *f = fopen(path, "wb");
    if (!f) {
        diag_plain(d, "--dump: cannot write '%s'", path);
        return false;
    }
    unsigned hlen = (unsigned)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc((int)(hlen & 255), f);
    fputc((int)(hlen >> 8), f);
    fwrite(header, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    for (int64_t e = 0; e < t->size; e++) {
        double x = t->data[e];
        unsigned char buf[8];
        if (exact || t->dtype == SK_F64) {
            memcpy(buf, &x, 8);
        } else if (t->dtype == SK_F32) {
            float v = (float)x;
            memcpy(buf, &v, 4);
        } else if (t->dtype == SK_F16) {
            uint16_t h = f16_bits(x);
            memcpy(buf, &h, 2);
        } else if (t->dtype == SK_I32) {
            int32_t v = (int32_t)x;
            memcpy(buf, &v, 4);
        } else if (t->dtype == SK_I1) {
            buf[0] = x != 0;
        } else {
            int64_t v = (int64_t)x;
            memcpy(buf, &v, 8);
        }
        fwrite(buf, 1, (size_t)size, f);
    }
    return fclose(f) == 0;
}

static bool run_func(Arena *a, Diag *d, Bindings *bind, const Op *refmod, const Op *ref, const Op *low,
                     const RunOptions *opts, FILE *out) {
    const char *name = op_attr(low, "sym_name")->s;
    Attr *out_names = op_attr(low, "outputs");
    Reference *r = reference_for(a, d, bind, refmod, ref, opts);
    if (!r)
        return false;
    Interp run = {.arena = a, .diag = d, .bind = bind};
    map_init(&run.values, false);
    Tensor **got = NEW_ARRAY(a, Tensor *, out_names->n + 1);
    if (!interp_func(&run, low, r->inputs, got))
        return false;
    Tensor **want = r->want, **base = r->base;
    if (opts->dump_dir) {
        Attr *in_names = op_attr(low, "inputs");
        for (int i = 0; i < in_names->n; i++)
            if (!write_npy(d, opts->dump_dir, name, "in", in_names->elems[i]->s, r->inputs[i], false))
                return false;
        for (int i = 0; i < out_names->n; i++)
            if (!write_npy(d, opts->dump_dir, name, "out", out_names->elems[i]->s, got[i], false) ||
                (want && !write_npy(d, opts->dump_dir, name, "ref", out_names->elems[i]->s, want[i], true)))
                return false;
    }
    bool ok = true, f16_acc = uses_f16_acc(ref);
    for (int i = 0; i < out_names->n; i++) {
        const char *oname = out_names->elems[i]->s;
        if (!opts->check) {
            fprintf(out, "%s.%s: ", name, oname);
            print_summary(out, got[i]);
            fputc('\n', out);
            continue;
        }
        /* The FlashAttention rule, on the CPU: no worse than twice the
         * unoptimised program at the same precisions, and never worse than
         * the fixed tolerance unless that baseline is too. */
        double base_err = compare(base[i], want[i]).err;
        /* a baseline that is itself off by inf (overflow) loosens nothing:
         * a non-finite error is never within tolerance */
        double tol = isfinite(base_err) ? fmax(tolerance(want[i]->dtype, f16_acc), 2 * base_err)
                                        : tolerance(want[i]->dtype, f16_acc);
        Worst w = compare(got[i], want[i]);
        bool pass = w.err <= tol;
        ok &= pass;
        if (pass && opts->quiet)
            continue;
        fprintf(out, "%s %s.%s: max error %.3g (tolerance %.3g; unoptimised %.3g) at ", pass ? "ok  " : "FAIL",
                name, oname, w.err, tol, base_err);
        print_index(out, want[i], w.at);
        if (interp_is_poison(w.got))
            fprintf(out, ": never written (want %.9g)\n", w.want);
        else
            fprintf(out, ": got %.9g, want %.9g\n", w.got, w.want);
    }
    /* the derivation itself, once (not after every pass of --check-each-pass) */
    if (opts->check && op_attr(ref, "forward") && (!opts->cache || !opts->quiet))
        ok &= gradient_check(a, d, bind, refmod, ref, r, opts, out);
    return ok;
}

void interp_warn_unused_binds(Arena *a, Diag *d, const Op *module, const RunOptions *opts) {
    Map seen;
    map_init(&seen, true);
    PtrVec order = {0};
    collect_op_dims(module, a, &seen, &order);
    for (int i = 0; i < opts->nbinds; i++) {
        const char *name = opts->bind_names[i];
        if (!map_get(&seen, name) && (!opts->consts || !map_get(opts->consts, name)))
            diag_warning(d, NULL, (Loc){0}, "-D %s: the program has no dimension or constant '%s'",
                         name, name);
    }
}

bool interp_run_module(Arena *a, Diag *d, const Op *reference, const Op *lowered,
                       const RunOptions *opts, FILE *out) {
    /* Bind every symbolic dimension: from -D, else its default. */
    Map seen;
    map_init(&seen, true);
    PtrVec order = {0};
    collect_op_dims(lowered, a, &seen, &order);
    collect_op_dims(reference, a, &seen, &order);
    Bindings bind = {0};
    map_init(&bind.dims, true);
    for (int i = 0; i < order.len; i++)
        map_put(a, &bind.dims, order.items[i], (void *)(intptr_t)default_dim(order.items[i]));
    for (int i = 0; i < opts->nbinds; i++)
        if (map_get(&seen, opts->bind_names[i]))
            map_put(a, &bind.dims, opts->bind_names[i], (void *)(intptr_t)opts->bind_values[i]);
    if (!opts->quiet && order.len) {
        fputs("dims:", out);
        for (int i = 0; i < order.len; i++)
            fprintf(out, " %s=%lld", (char *)order.items[i],
                    (long long)(intptr_t)map_get(&bind.dims, order.items[i]));
        fputc('\n', out);
    }
    bool ok = true;
    for_each_op(low, op_body(lowered)) {
        const char *name = op_attr(low, "sym_name")->s;
        const Op *ref = find_func(reference, name);
        Attr *lo = op_attr(low, "outputs"), *ro = ref ? op_attr(ref, "outputs") : NULL;
        /* a pass that adds a block or outputs (backward, run as a pass)
         * leaves nothing to compare them with */
        if (!ref || lo->n != ro->n) {
            diag_plain(d, "run: '%s' %s the program before the passes, so there is nothing to check it against "
                          "(derive backward blocks with -backward, not -passes=backward)",
                       name, ref ? "has outputs that are not in" : "is not in");
            ok = false;
            continue;
        }
        int errors = d->errors;
        ok &= run_func(a, d, &bind, reference, ref, low, opts, out) && d->errors == errors;
    }
    return ok;
}
