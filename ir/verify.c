/* verify.c — the IR's invariants.
 *
 * Structure (for every op): operand/result/region counts from ops.def,
 * operands defined before use and visible from the use, terminators last and
 * only last. Then the op's own rule, verify_<rule> named in ops.def, and
 * each nv.* attribute against ir/nv_attrs.def (nv_attrs.c).
 */
#include "ir.h"

#include <string.h>

typedef struct Verifier {
    Diag *diag;
    const Source *text;
    Arena arena;
    Map visible;   /* Value* -> non-NULL while in scope */
    const char *target;   /* the module's nv.target: nv IR for that target */
    bool nv_checked;      /* nv attributes are checked (the module's own are right) */
    int errors;
} Verifier;

static void op_error(Verifier *v, const Op *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void op_error(Verifier *v, const Op *op, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    v->errors++;
    char full[600];
    snprintf(full, sizeof full, "'%s' op %s", op_info[op->kind].name, msg);
    op_diag(v->diag, v->text, op, full);
}

typedef void (*Report)(Diag *, const Source *, Loc, const char *, ...);

/* A message at a source position: where IR text was parsed from (text_loc,
 * in text), else the .attn location (at). */
static void report_at(Diag *d, const Source *text, SrcLoc at, Loc text_loc, Report report, const char *msg) {
    if (!text && !text_loc.line && at.file && d->source.name && strcmp(d->source.name, at.file) == 0)
        text = &d->source;   /* the .attn file being compiled */
    if (text && text_loc.line) {
        report(d, text, text_loc, "%s", msg);
    } else if (at.file) {
        Source s = {.name = at.file};
        if (text && text->name && strcmp(text->name, at.file) == 0)
            s = *text;
        /* at counts lines of the whole file; s may be one chunk of it */
        int line = at.line - s.line_offset;
        Loc l = {line, at.col, line, at.col};
        report(d, &s, l, "%s", msg);
    } else if (report == diag_warning) {
        diag_warning(d, NULL, (Loc){0}, "%s", msg);
    } else {
        diag_plain(d, "%s", msg);
    }
}

static void op_report(Diag *d, const Source *text, const Op *op, bool warning, const char *msg) {
    report_at(d, text, op->loc, op->text_loc, warning ? diag_warning : diag_error, msg);
}

void srcloc_note(Diag *d, SrcLoc at, const char *msg) {
    if (at.file)
        report_at(d, NULL, at, (Loc){0}, diag_note, msg);
}

void op_diag(Diag *d, const Source *text, const Op *op, const char *msg) { op_report(d, text, op, false, msg); }

void op_warn(Diag *d, const Source *text, const Op *op, const char *msg) { op_report(d, text, op, true, msg); }

/* ---- helpers ----------------------------------------------------------- */

static const char *type_str(Verifier *v, const Type *t) {
    StrBuf b;
    strbuf_open(&b);
    print_type(b.f, t);
    return strbuf_finish(&b, &v->arena, NULL);
}

static bool is_tensor(const Type *t) { return t->kind == TY_TENSOR; }
static bool is_valued(const Type *t) { return t->kind == TY_SCALAR || t->kind == TY_TENSOR || t->kind == TY_TILE; }

static const char *attr_string(const Op *op, const char *name) {
    Attr *a = op_attr(op, name);
    return a && a->kind == AT_STR ? a->s : NULL;
}

static bool need_attr(Verifier *v, const Op *op, const char *name, AttrKind kind, const char *what) {
    Attr *a = op_attr(op, name);
    if (!a || a->kind != kind) {
        op_error(v, op, "needs attribute '%s' (%s)", name, what);
        return false;
    }
    return true;
}

/* Elementwise ops: every operand broadcasts to the result's shape, and
 * element types are checked by the caller. */
static bool elementwise_shapes(Verifier *v, const Op *op) {
    const Type *r = op->results[0]->type;
    if (!is_valued(r)) {
        op_error(v, op, "result must be a scalar, tensor or tile, not %s", type_str(v, r));
        return false;
    }
    for (int i = 0; i < op->noperands; i++) {
        const Type *t = op->operands[i]->type;
        if (!type_broadcasts_to(t, r)) {
            op_error(v, op, "operand %d of type %s does not broadcast to the result type %s", i,
                     type_str(v, t), type_str(v, r));
            return false;
        }
    }
    return true;
}

static bool same_elem_as_result(Verifier *v, const Op *op, int first_operand) {
    ScalarKind e = op->results[0]->type->elem;
    for (int i = first_operand; i < op->noperands; i++)
        if (op->operands[i]->type->elem != e) {
            op_error(v, op, "operand %d has element type %s, the result %s", i,
                     scalar_name(op->operands[i]->type->elem), scalar_name(e));
            return false;
        }
    return true;
}

/* A hook region: one block with the given argument types, yielding `yield_type`.
 * An optional hook (attn.attention's) may have no block at all. */
static bool verify_region_signature(Verifier *v, const Op *op, int region, int nargs,
                                    const ScalarKind *args, ScalarKind yield_type, bool optional) {
    const Region *r = &op->regions[region];
    if (optional && r->nblocks == 0)
        return true;
    if (r->nblocks != 1) {
        op_error(v, op, "region %d must have exactly one block", region);
        return false;
    }
    const Block *b = r->blocks[0];
    if (b->nargs != nargs) {
        op_error(v, op, "region %d block needs %d arguments, has %d", region, nargs, b->nargs);
        return false;
    }
    for (int i = 0; i < b->nargs; i++)
        if (b->args[i]->type->kind != TY_SCALAR || b->args[i]->type->elem != args[i]) {
            op_error(v, op, "region %d argument %d must be %s", region, i, scalar_name(args[i]));
            return false;
        }
    const Op *y = b->last;
    if (y && y->kind == OP_YIELD && y->noperands == 1) {
        const Type *t = y->operands[0]->type;
        if (t->kind != TY_SCALAR || t->elem != yield_type) {
            op_error(v, op, "region %d must yield %s, yields %s", region, scalar_name(yield_type),
                     type_str(v, t));
            return false;
        }
    }
    return true;
}

static const ScalarKind score_args[5] = {SK_F32, SK_INDEX, SK_INDEX, SK_INDEX, SK_INDEX};

static void verify_hook(Verifier *v, const Op *op, int nscore_args, ScalarKind yield_type) {
    const Type *in = op->operands[0]->type, *out = op->results[0]->type;
    if (!verify_region_signature(v, op, 0, nscore_args + 4, score_args + 1 - nscore_args, yield_type, false))
        return;
    if (!is_tensor(in) || in->rank != 4 || !scalar_is_float(in->elem))
        op_error(v, op, "operand must be a rank-4 float tensor of scores, not %s", type_str(v, in));
    else if (!type_equal(in, out))
        op_error(v, op, "result type %s differs from the operand type %s", type_str(v, out),
                 type_str(v, in));
}

/* ---- per-op rules ------------------------------------------------------ */

static void verify_module(Verifier *v, Op *op) {
    Block *b = op_body(op);
    if (op->regions[0].nblocks != 1 || (b && b->nargs)) {
        op_error(v, op, "body must be one block without arguments");
        return;
    }
    Map names;
    map_init(&names, true);
    for_each_op(f, b) {
        if (f->kind != OP_FUNC) {
            op_error(v, f, "only builtin.func may appear in a module");
            continue;
        }
        const char *name = attr_string(f, "sym_name");
        if (name && map_get(&names, name))
            op_error(v, f, "redefinition of function '%s'", name);
        else if (name)
            map_put(&v->arena, &names, name, f);
    }
    /* a backward's forward: an attention func of this module, before it */
    for_each_op(f, b) {
        Attr *fwd = f->kind == OP_FUNC ? op_attr(f, "forward") : NULL;
        if (!fwd || fwd->kind != AT_STR)
            continue;
        Op *target = map_get(&names, fwd->s);
        const char *kind = target ? attr_string(target, "kind") : NULL;
        if (!kind || strcmp(kind, "attention") != 0)
            op_error(v, f, "'forward' must name an attention func of this module, not '%s'", fwd->s);
    }
}

static void verify_func(Verifier *v, Op *op) {
    if (!need_attr(v, op, "sym_name", AT_STR, "a string") ||
        !need_attr(v, op, "kind", AT_STR, "\"attention\", \"attention_backward\" or \"mlp\"") ||
        !need_attr(v, op, "inputs", AT_ARRAY, "input names") ||
        !need_attr(v, op, "outputs", AT_ARRAY, "output names"))
        return;
    const char *kind = attr_string(op, "kind");
    if (strcmp(kind, "attention") != 0 && strcmp(kind, "attention_backward") != 0 && strcmp(kind, "mlp") != 0)
        op_error(v, op, "kind must be \"attention\", \"attention_backward\" or \"mlp\", not \"%s\"", kind);
    else if (strcmp(kind, "attention_backward") == 0 && !op_attr(op, "forward"))
        op_error(v, op, "an attention_backward func needs attribute 'forward' (its forward's name)");
    Block *b = op_body(op);
    if (op->regions[0].nblocks != 1 || !b) {
        op_error(v, op, "body must be exactly one block");
        return;
    }
    Attr *inputs = op_attr(op, "inputs"), *outputs = op_attr(op, "outputs");
    if (inputs->n != b->nargs)
        op_error(v, op, "names %d inputs but the body has %d arguments", inputs->n, b->nargs);
    for (int i = 0; i < inputs->n; i++)
        if (inputs->elems[i]->kind != AT_STR)
            op_error(v, op, "input names must be strings");
    for (int i = 0; i < b->nargs; i++)
        if (!is_tensor(b->args[i]->type))
            op_error(v, op, "input %d must be a tensor, not %s", i, type_str(v, b->args[i]->type));
    Op *ret = b->last;
    if (!ret || !(op_info[ret->kind].flags & OPF_TERMINATOR))
        return;   /* reported as a block without a terminator */
    if (ret->kind != OP_RETURN)
        op_error(v, op, "body must end with builtin.return");
    else if (ret->noperands != outputs->n)
        op_error(v, op, "names %d outputs but returns %d values", outputs->n, ret->noperands);
}

static void verify_return_(Verifier *v, Op *op) {
    Op *parent = op->parent && op->parent->parent ? op->parent->parent->parent : NULL;
    if (!parent || parent->kind != OP_FUNC)
        op_error(v, op, "must be the terminator of a builtin.func");
}

static void verify_yield(Verifier *v, Op *op) {
    Op *parent = op->parent && op->parent->parent ? op->parent->parent->parent : NULL;
    if (!parent || (parent->kind != OP_SCORE_MOD && parent->kind != OP_MASK &&
                    parent->kind != OP_ATTENTION && parent->kind != OP_ATTENTION_BWD && parent->kind != OP_FUSED_GEMM &&
                    parent->kind != OP_FUSED_MAP))
        op_error(v, op, "must end a region of attn.score_mod, attn.mask, attn.attention, "
                        "attn.attention_backward, attn.fused_gemm or attn.fused_map");
}

static void verify_matmul(Verifier *v, Op *op) {
    const Type *a = op->operands[0]->type, *b = op->operands[1]->type, *r = op->results[0]->type;
    if (!is_tensor(a) || !is_tensor(b) || !is_tensor(r) || a->rank < 2 || b->rank < 2) {
        op_error(v, op, "operands and result must be tensors of rank 2 or more");
        return;
    }
    if (a->elem != b->elem || !scalar_is_float(a->elem)) {
        op_error(v, op, "operands must share a float element type, not %s and %s",
                 scalar_name(a->elem), scalar_name(b->elem));
        return;
    }
    Attr *acc = op_attr(op, "acc");
    if (!acc || acc->kind != AT_TYPE || acc->type->kind != TY_SCALAR ||
        (acc->type->elem != SK_F32 && acc->type->elem != SK_F16)) {
        op_error(v, op, "needs attribute 'acc' (f32 or f16, the accumulator type)");
        return;
    }
    if (!dim_equal(a->dims[a->rank - 1], b->dims[b->rank - 2])) {
        op_error(v, op, "contracting dimensions differ: %s and %s", type_str(v, a), type_str(v, b));
        return;
    }
    int rank = a->rank > b->rank ? a->rank : b->rank;
    if (r->rank != rank || !dim_equal(r->dims[rank - 2], a->dims[a->rank - 2]) ||
        !dim_equal(r->dims[rank - 1], b->dims[b->rank - 1])) {
        op_error(v, op, "result type %s does not match the operands' shapes", type_str(v, r));
        return;
    }
    /* batch dims: both operands' leading dims broadcast to the result's */
    Type ra = *r, rb = *r;
    ra.rank = rank - 2;
    rb.rank = rank - 2;
    Type ba = *a, bb = *b;
    ba.rank = a->rank - 2;
    bb.rank = b->rank - 2;
    if (!type_broadcasts_to(&ba, &ra) || !type_broadcasts_to(&bb, &rb))
        op_error(v, op, "batch dimensions of the operands do not broadcast to the result's");
}

static void verify_transpose(Verifier *v, Op *op) {
    const Type *in = op->operands[0]->type, *r = op->results[0]->type;
    Attr *perm = op_attr(op, "perm");
    if (!is_tensor(in) || !is_tensor(r) || in->rank != r->rank || in->elem != r->elem) {
        op_error(v, op, "operand and result must be tensors of one rank and element type");
        return;
    }
    if (!perm || perm->kind != AT_ARRAY || perm->n != in->rank) {
        op_error(v, op, "needs attribute 'perm', a permutation of %d dimensions", in->rank);
        return;
    }
    unsigned seen = 0;
    for (int i = 0; i < perm->n; i++) {
        Attr *e = perm->elems[i];
        if (e->kind != AT_INT || e->i < 0 || e->i >= in->rank || in->rank > 32 || (seen >> e->i) & 1) {
            op_error(v, op, "'perm' is not a permutation of 0..%d", in->rank - 1);
            return;
        }
        seen |= 1u << e->i;
        if (!dim_equal(r->dims[i], in->dims[e->i])) {
            op_error(v, op, "result dimension %d should be operand dimension %lld", i, (long long)e->i);
            return;
        }
    }
}

/* attn.expand_heads [B, Hkv, N, D] -> [B, Hq, N, D], and its adjoint
 * attn.sum_heads [B, Hq, N, D] -> [B, Hkv, N, D] (GQA's gradient). */
static void verify_expand_heads(Verifier *v, Op *op) {
    const Type *in = op->operands[0]->type, *r = op->results[0]->type;
    if (!is_tensor(in) || !is_tensor(r) || in->rank != 4 || r->rank != 4 || in->elem != r->elem) {
        op_error(v, op, "operand and result must be rank-4 tensors of one element type");
        return;
    }
    for (int i = 0; i < 4; i++)
        if (i != 1 && !dim_equal(in->dims[i], r->dims[i])) {
            op_error(v, op, "only the head dimension (1) may change");
            return;
        }
    Dim few = op->kind == OP_SUM_HEADS ? r->dims[1] : in->dims[1];
    Dim many = op->kind == OP_SUM_HEADS ? in->dims[1] : r->dims[1];
    if (!few.sym && !many.sym && many.size % few.size != 0)
        op_error(v, op, "%lld heads are not a multiple of %lld", (long long)many.size, (long long)few.size);
}

/* attn.pages(%cache, %table, %lens) {page_size}: a paged KV cache
 * [pages, page_size, Hkv, D] read as [B, Hkv, Nk, D], batch b's key j at
 * row j % page_size of page table[b, j // page_size] (i32[B, max_pages]),
 * keys at or past lens[b] (i32[B]) zero. Nk is max_pages · page_size. */
static void verify_pages(Verifier *v, Op *op) {
    const Type *c = op->operands[0]->type, *t = op->operands[1]->type, *l = op->operands[2]->type;
    const Type *r = op->results[0]->type;
    Attr *ps = op_attr(op, "page_size");
    if (!is_tensor(c) || !is_tensor(r) || c->rank != 4 || r->rank != 4 || c->elem != r->elem) {
        op_error(v, op, "cache and result must be rank-4 tensors of one element type");
        return;
    }
    if (!is_tensor(t) || t->rank != 2 || t->elem != SK_I32 || !is_tensor(l) || l->rank != 1 || l->elem != SK_I32) {
        op_error(v, op, "needs an i32[B, max_pages] block table and i32[B] lengths");
        return;
    }
    if (!ps || ps->kind != AT_INT || ps->i <= 0 || !dim_equal(c->dims[1], (Dim){NULL, ps->i})) {
        op_error(v, op, "needs attribute 'page_size', the cache's dimension 1");
        return;
    }
    if (!dim_equal(r->dims[0], t->dims[0]) || !dim_equal(r->dims[0], l->dims[0]) ||
        !dim_equal(r->dims[1], c->dims[2]) || !dim_equal(r->dims[3], c->dims[3]))
        op_error(v, op, "result must be [B, Hkv, Nk, D] of the table's B and the cache's Hkv and D");
    else if (!t->dims[1].sym && !dim_equal(r->dims[2], (Dim){NULL, t->dims[1].size * ps->i}))
        op_error(v, op, "result's keys must be max_pages · page_size");
}

/* Whether cu is the i32[B + 1] offsets of a batch of `batch` sequences. */
static bool is_offsets_of(const Type *cu, Dim batch) {
    return is_tensor(cu) && cu->rank == 1 && cu->elem == SK_I32 &&
           (cu->dims[0].sym || batch.sym || cu->dims[0].size == batch.size + 1);
}

/* attn.pad(x, cu): packed sequences x [T, H, D] (sequence b is rows cu[b]
 * to cu[b + 1]) as [B, H, T, D], each sequence's rows from 0 and zero
 * past its length, or its `fill` (an lse's [H, T] as [B, H, T]: the
 * backward's, filled with +inf, so that P = exp(S − lse) = 0 in the rows
 * past a sequence's length). */
static void verify_pad(Verifier *v, Op *op) {
    const Type *x = op->operands[0]->type, *cu = op->operands[1]->type, *r = op->results[0]->type;
    if (!is_tensor(x) || !is_tensor(r) || (x->rank != 3 && x->rank != 2) || r->rank != x->rank + 1 ||
        x->elem != r->elem) {
        op_error(v, op, "operand must be [T, H, D] or [H, T] and the result one rank more, of its element type");
        return;
    }
    bool ok = x->rank == 3 ? dim_equal(r->dims[1], x->dims[1]) && dim_equal(r->dims[2], x->dims[0]) &&
                                 dim_equal(r->dims[3], x->dims[2])
                           : dim_equal(r->dims[1], x->dims[0]) && dim_equal(r->dims[2], x->dims[1]);
    if (!is_offsets_of(cu, r->dims[0]))
        op_error(v, op, "needs i32[B + 1] sequence offsets of the result's B");
    else if (!ok)
        op_error(v, op, "result must be [B, H, T, D] of the operand's [T, H, D] (or [B, H, T] of [H, T])");
}

/* attn.unpad(y, cu): attn.pad's inverse, [B, H, T, D] to [T, H, D] (or an
 * lse's [B, H, T] to [H, T]): row i of sequence b to row cu[b] + i. */
static void verify_unpad(Verifier *v, Op *op) {
    const Type *y = op->operands[0]->type, *cu = op->operands[1]->type, *r = op->results[0]->type;
    if (!is_tensor(y) || !is_tensor(r) || (y->rank != 4 && y->rank != 3) || r->rank != y->rank - 1 ||
        y->elem != r->elem) {
        op_error(v, op, "operand must be [B, H, T, D] or [B, H, T] and the result one rank less, of its element type");
        return;
    }
    bool ok = y->rank == 4 ? dim_equal(r->dims[0], y->dims[2]) && dim_equal(r->dims[1], y->dims[1]) &&
                                 dim_equal(r->dims[2], y->dims[3])
                           : dim_equal(r->dims[0], y->dims[1]) && dim_equal(r->dims[1], y->dims[2]);
    if (!is_offsets_of(cu, y->dims[0]))
        op_error(v, op, "needs i32[B + 1] sequence offsets of the operand's B");
    else if (!ok)
        op_error(v, op, "result must be [T, H, D] of [B, H, T, D] (or [H, T] of [B, H, T])");
}

/* attn.reshape: adds or drops dimensions of size 1 (the elements keep their
 * row-major order). */
static void verify_reshape(Verifier *v, Op *op) {
    const Type *in = op->operands[0]->type, *r = op->results[0]->type;
    if (!is_tensor(in) || !is_tensor(r) || in->elem != r->elem) {
        op_error(v, op, "operand and result must be tensors of one element type");
        return;
    }
    int i = 0, j = 0;
    for (;;) {
        while (i < in->rank && !in->dims[i].sym && in->dims[i].size == 1)
            i++;
        while (j < r->rank && !r->dims[j].sym && r->dims[j].size == 1)
            j++;
        if (i == in->rank || j == r->rank)
            break;
        if (!dim_equal(in->dims[i], r->dims[j])) {
            op_error(v, op, "may only add or drop dimensions of size 1");
            return;
        }
        i++, j++;
    }
    if (i != in->rank || j != r->rank)
        op_error(v, op, "may only add or drop dimensions of size 1");
}

static void verify_score_mod(Verifier *v, Op *op) { verify_hook(v, op, 1, SK_F32); }

/* What attn.attention and its backward share: q, k, v (operands 0-2) rank-4
 * tensors of one element type, and the attributes acc and scale. */
static bool verify_qkv(Verifier *v, Op *op) {
    const Type *q = op->operands[0]->type, *k = op->operands[1]->type, *vt = op->operands[2]->type;
    if (!is_tensor(q) || !is_tensor(k) || !is_tensor(vt) || q->rank != 4 || k->rank != 4 || vt->rank != 4 ||
        q->elem != k->elem || q->elem != vt->elem) {
        op_error(v, op, "q, k and v must be rank-4 tensors of one element type");
        return false;
    }
    Attr *acc = op_attr(op, "acc"), *scale = op_attr(op, "scale");
    if (!acc || acc->kind != AT_TYPE || !scale || scale->kind != AT_FLOAT) {
        op_error(v, op, "needs attributes 'acc' (a type) and 'scale' (a float)");
        return false;
    }
    return true;
}

/* attn.attention(q, k, v) ({score}, {mask}) {acc, scale} : o [, lse] */
static void verify_attention(Verifier *v, Op *op) {
    if (!verify_qkv(v, op))
        return;
    const Type *q = op->operands[0]->type, *k = op->operands[1]->type, *vt = op->operands[2]->type;
    if (op->nresults < 1 || op->nresults > 2) {
        op_error(v, op, "has o and optionally lse as results, not %d results", op->nresults);
        return;
    }
    Dim o_dims[4] = {q->dims[0], q->dims[1], q->dims[2], vt->dims[3]};
    Type o = {.kind = TY_TENSOR, .elem = q->elem, .rank = 4, .dims = o_dims};
    Type lse = {.kind = TY_TENSOR, .elem = SK_F32, .rank = 3, .dims = o_dims};
    if (!type_equal(op->results[0]->type, &o))
        op_error(v, op, "o must be %s", type_str(v, &o));
    if (op->nresults == 2 && !type_equal(op->results[1]->type, &lse))
        op_error(v, op, "lse must be %s", type_str(v, &lse));
    if (!dim_equal(k->dims[2], vt->dims[2]) || !dim_equal(q->dims[3], k->dims[3]) ||
        !dim_equal(k->dims[1], vt->dims[1]))
        op_error(v, op, "k and v must agree in heads and length, q and k in head dimension");
    verify_region_signature(v, op, 0, 5, score_args, SK_F32, true);
    verify_region_signature(v, op, 1, 4, score_args + 1, SK_I1, true);
}

/* attn.attention_backward(q, k, v, o, lse, do) ({score}, {score'}, {mask})
 * {acc, scale} : dq, dk, dv */
static void verify_attention_backward(Verifier *v, Op *op) {
    if (!verify_qkv(v, op))
        return;
    const Type *q = op->operands[0]->type, *vt = op->operands[2]->type;
    const Type *o = op->operands[3]->type, *lse = op->operands[4]->type, *dout = op->operands[5]->type;
    Dim o_dims[4] = {q->dims[0], q->dims[1], q->dims[2], vt->dims[3]};
    Type ot = {.kind = TY_TENSOR, .elem = q->elem, .rank = 4, .dims = o_dims};
    Type lt = {.kind = TY_TENSOR, .elem = SK_F32, .rank = 3, .dims = o_dims};
    if (!type_equal(o, &ot) || !type_equal(dout, &ot) || !type_equal(lse, &lt))
        op_error(v, op, "o and do must be %s, lse %s", type_str(v, &ot), type_str(v, &lt));
    for (int i = 0; i < 3; i++)
        if (!type_equal(op->results[i]->type, op->operands[i]->type))
            op_error(v, op, "result %d must have operand %d's type", i, i);
    if (op->regions[0].nblocks != op->regions[1].nblocks)
        op_error(v, op, "has a score hook region exactly when it has its derivative's");
    verify_region_signature(v, op, 0, 5, score_args, SK_F32, true);
    verify_region_signature(v, op, 1, 5, score_args, SK_F32, true);
    verify_region_signature(v, op, 2, 4, score_args + 1, SK_I1, true);
}

/* attn.fused_gemm(a, b0..b{n-1}, e0, ...) ({^bb0(p0.., e0..): ...}) {acc, num_b[, b_transposed]}:
 * the products a @ b_i (b_i [K, N], or with b_transposed[i] = 1 a [N, K]
 * weight read as its transpose) and the extra operands' elements, combined
 * by the region. */
static void verify_fused_gemm(Verifier *v, Op *op) {
    Attr *nb = op_attr(op, "num_b"), *acc = op_attr(op, "acc");
    if (!nb || nb->kind != AT_INT || nb->i < 1 || nb->i >= op->noperands || !acc || acc->kind != AT_TYPE) {
        op_error(v, op, "needs attributes 'num_b' (1 to operands - 1) and 'acc'");
        return;
    }
    const Type *a = op->operands[0]->type, *r = op->results[0]->type;
    if (!is_tensor(a) || !is_tensor(r) || a->rank < 2 || r->rank != a->rank) {
        op_error(v, op, "operand 0 and the result must be tensors of one rank, 2 or more");
        return;
    }
    for (int i = 0; i < a->rank - 1; i++)
        if (!dim_equal(a->dims[i], r->dims[i])) {
            op_error(v, op, "the result's leading dimensions must be operand 0's");
            return;
        }
    int n = (int)nb->i, nextra = op->noperands - 1 - n;
    Attr *tr = op_attr(op, "b_transposed");
    if (tr && (tr->kind != AT_ARRAY || tr->n != n)) {
        op_error(v, op, "'b_transposed' must list one 0 or 1 per weight (%d)", n);
        return;
    }
    ScalarKind *args = NEW_ARRAY(&v->arena, ScalarKind, n + nextra + 1);
    for (int i = 0; i < n; i++) {
        const Type *b = op->operands[1 + i]->type;
        bool t = gemm_weight_transposed(op, i);
        if (!is_tensor(b) || b->rank != 2 || b->elem != a->elem ||
            !dim_equal(a->dims[a->rank - 1], b->dims[t ? 1 : 0]) || !dim_equal(b->dims[t ? 0 : 1], r->dims[r->rank - 1])) {
            op_error(v, op, "operand %d must be a %s weight for a %s and a %s result", 1 + i, t ? "[N, K]" : "[K, N]",
                     type_str(v, a), type_str(v, r));
            return;
        }
    }
    const Block *blk = op->regions[0].nblocks == 1 ? op->regions[0].blocks[0] : NULL;
    for (int i = 0; i < n; i++)  /* products arrive in the region's declared types */
        args[i] = blk && blk->nargs == n + nextra ? blk->args[i]->type->elem : SK_F32;
    for (int i = 0; i < nextra; i++) {
        const Type *e = op->operands[1 + n + i]->type;
        if (!type_broadcasts_to(e, r)) {
            op_error(v, op, "operand %d of type %s does not broadcast to the result type %s", 1 + n + i,
                     type_str(v, e), type_str(v, r));
            return;
        }
        args[n + i] = e->elem;
    }
    verify_region_signature(v, op, 0, n + nextra, args, r->elem, false);
}
/* attn.fused_map(x0, x1, ...) ({^bb0(e0, e1, ...): ...}): an elementwise
 * chain as one op, the region computing an element of the result from the
 * operands' elements (each broadcast to the result's shape). */
static void verify_fused_map(Verifier *v, Op *op) {
    const Type *r = op->results[0]->type;
    if (!is_tensor(r)) {
        op_error(v, op, "the result must be a tensor");
        return;
    }
    ScalarKind *args = NEW_ARRAY(&v->arena, ScalarKind, op->noperands);
    for (int i = 0; i < op->noperands; i++) {
        const Type *t = op->operands[i]->type;
        if (t->kind != TY_SCALAR && !type_broadcasts_to(t, r)) {
            op_error(v, op, "operand %d of type %s does not broadcast to the result type %s", i, type_str(v, t),
                     type_str(v, r));
            return;
        }
        args[i] = t->elem;
    }
    verify_region_signature(v, op, 0, op->noperands, args, r->elem, false);
}

static void verify_mask(Verifier *v, Op *op) { verify_hook(v, op, 0, SK_I1); }

static void verify_same_type(Verifier *v, Op *op) {
    const Type *in = op->operands[0]->type, *r = op->results[0]->type;
    if (!is_tensor(in) || in->rank < 1 || !scalar_is_float(in->elem) || !type_equal(in, r))
        op_error(v, op, "operand and result must be one float tensor type");
}

static void verify_reduce(Verifier *v, Op *op) {
    const Type *in = op->operands[0]->type, *r = op->results[0]->type;
    const char *kind = attr_string(op, "kind");
    static const char *const kinds[] = {"sum", "mean", "max", "logsumexp"};
    bool known = false;
    for (int i = 0; kind && i < 4; i++)
        known |= strcmp(kind, kinds[i]) == 0;
    if (!known) {
        op_error(v, op, "needs attribute 'kind' (\"sum\", \"mean\", \"max\" or \"logsumexp\")");
        return;
    }
    if (!is_tensor(in) || in->rank < 1 || !is_tensor(r) || !scalar_is_float(in->elem) ||
        r->elem != in->elem) {
        op_error(v, op, "operand and result must be float tensors of one element type");
        return;
    }
    /* Reduces the last axis: the result keeps it as 1, or drops it. */
    bool keep = r->rank == in->rank, drop = r->rank == in->rank - 1;
    for (int i = 0; i < in->rank - 1 && (keep || drop); i++)
        if (!dim_equal(in->dims[i], r->dims[i]))
            keep = drop = false;
    if (keep && (r->dims[in->rank - 1].sym || r->dims[in->rank - 1].size != 1))
        keep = false;
    if (!keep && !drop)
        op_error(v, op, "result %s must be the operand %s with its last dimension dropped or 1",
                 type_str(v, r), type_str(v, in));
}

static void verify_extract(Verifier *v, Op *op) {
    const Type *t = op->operands[0]->type, *r = op->results[0]->type;
    if (!is_tensor(t) || t->rank != op->noperands - 1) {
        op_error(v, op, "needs a tensor and one index per dimension");
        return;
    }
    for (int i = 1; i < op->noperands; i++)
        if (op->operands[i]->type->kind != TY_SCALAR || op->operands[i]->type->elem != SK_INDEX) {
            op_error(v, op, "index %d must be of type index", i - 1);
            return;
        }
    if (r->kind != TY_SCALAR || r->elem != t->elem)
        op_error(v, op, "result must be the tensor's element type %s", scalar_name(t->elem));
}

static void verify_dim(Verifier *v, Op *op) {
    if (need_attr(v, op, "name", AT_STR, "the dimension's name") &&
        (op->results[0]->type->kind != TY_SCALAR || op->results[0]->type->elem != SK_INDEX))
        op_error(v, op, "result must be index");
}

/* A run-time check on bound dimensions (the runtime evaluates it on the host). */
static void verify_assert_(Verifier *v, Op *op) {
    const Type *c = op->operands[0]->type;
    if (c->kind != TY_SCALAR || c->elem != SK_I1 || !attr_string(op, "message"))
        op_error(v, op, "needs an i1 condition and attribute 'message'");
}

/* One of two launches' results, by a host condition on the dims: the
 * runtime launches only the kernels that make the chosen one (tiling's
 * variants per size range; the interpreter runs both). */
static void verify_choose(Verifier *v, Op *op) {
    const Type *c = op->operands[0]->type, *r = op->results[0]->type;
    if (c->kind != TY_SCALAR || c->elem != SK_I1)
        op_error(v, op, "condition must be an i1 scalar");
    else if (r->kind != TY_TENSOR || !type_equal(op->operands[1]->type, r) || !type_equal(op->operands[2]->type, r))
        op_error(v, op, "chooses between two tensors of its result's type");
}

/* A dimension the host computes from the bound ones (tiling's split
 * count): after it, types and attn.dim may name it like any dimension. */
static void verify_define_dim(Verifier *v, Op *op) {
    const Type *x = op->operands[0]->type;
    if (x->kind != TY_SCALAR || x->elem != SK_INDEX || !attr_string(op, "name"))
        op_error(v, op, "needs an index operand and attribute 'name'");
}

/* The GPU's streaming multiprocessors, known on the host at the launch. */
static void verify_num_sms(Verifier *v, Op *op) {
    const Type *r = op->results[0]->type;
    if (r->kind != TY_SCALAR || r->elem != SK_INDEX)
        op_error(v, op, "result must be index");
}

static void verify_constant(Verifier *v, Op *op) {
    Attr *val = op_attr(op, "value");
    const Type *r = op->results[0]->type;
    if (!val || r->kind != TY_SCALAR) {
        op_error(v, op, "needs attribute 'value' and a scalar result");
        return;
    }
    bool ok = scalar_is_float(r->elem) ? val->kind == AT_FLOAT
            : r->elem == SK_I1         ? val->kind == AT_BOOL
                                       : val->kind == AT_INT;
    if (!ok)
        op_error(v, op, "value does not fit the result type %s", scalar_name(r->elem));
}

static void verify_numeric(Verifier *v, Op *op) {
    ScalarKind e = op->results[0]->type->elem;
    if (!scalar_is_float(e) && !scalar_is_int(e))
        op_error(v, op, "needs numbers, not %s", scalar_name(e));
    else if (elementwise_shapes(v, op))
        same_elem_as_result(v, op, 0);
}

static void verify_integer(Verifier *v, Op *op) {
    if (!scalar_is_int(op->results[0]->type->elem))
        op_error(v, op, "needs integers, not %s", scalar_name(op->results[0]->type->elem));
    else if (elementwise_shapes(v, op))
        same_elem_as_result(v, op, 0);
}

static void verify_floating(Verifier *v, Op *op) {
    if (!scalar_is_float(op->results[0]->type->elem))
        op_error(v, op, "needs floats, not %s", scalar_name(op->results[0]->type->elem));
    else if (elementwise_shapes(v, op))
        same_elem_as_result(v, op, 0);
}

static void verify_boolean(Verifier *v, Op *op) {
    if (op->results[0]->type->elem != SK_I1)
        op_error(v, op, "needs i1, not %s", scalar_name(op->results[0]->type->elem));
    else if (elementwise_shapes(v, op))
        same_elem_as_result(v, op, 0);
}

static void verify_cmp(Verifier *v, Op *op) {
    const char *pred = attr_string(op, "pred");
    static const char *const preds[] = {"lt", "le", "gt", "ge", "eq", "ne"};
    bool known = false;
    for (int i = 0; pred && i < 6; i++)
        known |= strcmp(pred, preds[i]) == 0;
    if (!known)
        op_error(v, op, "needs attribute 'pred' (\"lt\", \"le\", \"gt\", \"ge\", \"eq\" or \"ne\")");
    else if (op->results[0]->type->elem != SK_I1)
        op_error(v, op, "result must be i1");
    else if (op->operands[0]->type->elem != op->operands[1]->type->elem)
        op_error(v, op, "compares %s with %s", scalar_name(op->operands[0]->type->elem),
                 scalar_name(op->operands[1]->type->elem));
    else
        elementwise_shapes(v, op);
}

static void verify_select(Verifier *v, Op *op) {
    if (op->operands[0]->type->elem != SK_I1)
        op_error(v, op, "condition must be i1");
    else if (elementwise_shapes(v, op))
        same_elem_as_result(v, op, 1);
}

static void verify_cast(Verifier *v, Op *op) {
    if (op->results[0]->type->kind != op->operands[0]->type->kind)
        op_error(v, op, "casts element types only; %s and %s differ in kind",
                 type_str(v, op->operands[0]->type), type_str(v, op->results[0]->type));
    else
        elementwise_shapes(v, op);
}

/* ---- tile ------------------------------------------------------------------ */

static bool is_tile(const Type *t) { return t->kind == TY_TILE; }
static bool is_index(const Type *t) { return t->kind == TY_SCALAR && t->elem == SK_INDEX; }

static Op *parent_op(const Op *op) {
    return op->parent && op->parent->parent ? op->parent->parent->parent : NULL;
}

/* tile.launch(gx, gy, gz, inputs...) ({^bb0(px, py, pz, in memrefs..., out memrefs...)}) : outputs */
/* A ping-pong launch's turns (warp-roles' nv.turn and nv.barrier.turn): in each block a turn
 * opens at a first dot, holds middle dots and closes at a last one (an only
 * dot is a turn alone); inside a turn no op has regions or reads a dot's
 * result (the warpgroup holding the turn never waits for a dot), and no
 * turn is open at the block's end. */
static void verify_turns(Verifier *v, Block *blk) {
    Op *open = NULL;   /* the dot that opened the turn */
    for_each_op(op, blk) {
        for (int r = 0; r < op->nregions; r++)
            for (int b = 0; b < op->regions[r].nblocks; b++)
                verify_turns(v, op->regions[r].blocks[b]);
        Attr *t = op->kind == OP_DOT ? op_attr(op, "nv.turn") : NULL;
        if (op->kind == OP_DOT && (!t || t->kind != AT_STR)) {
            op_error(v, op, "in a ping-pong launch needs nv.turn (run warp-roles)");
            return;
        }
        if (open && (op->nregions || op_reads_result_of(op, OP_DOT))) {
            op_error(v, op, "is inside a ping-pong turn, which holds no loop and waits for no dot");
            return;
        }
        if (!t)
            continue;
        bool opens = strcmp(t->s, "first") == 0 || strcmp(t->s, "only") == 0;
        if (opens != !open) {
            op_error(v, op, open ? "opens a ping-pong turn inside another" : "continues a ping-pong turn none opened");
            return;
        }
        open = strcmp(t->s, "first") == 0 || strcmp(t->s, "middle") == 0 ? (open ? open : op) : NULL;
    }
    if (open)
        op_error(v, open, "opens a ping-pong turn its block never closes");
}

static void verify_launch(Verifier *v, Op *op) {
    for (int i = 0; i < 3; i++)
        if (!is_index(op->operands[i]->type)) {
            op_error(v, op, "operand %d (a grid size) must be index", i);
            return;
        }
    const Block *b = op->regions[0].nblocks == 1 ? op->regions[0].blocks[0] : NULL;
    int nin = op->noperands - 3;
    if (!b || b->nargs != 3 + nin + op->nresults) {
        op_error(v, op, "body needs one block with 3 program ids, %d input and %d output buffers", nin,
                 op->nresults);
        return;
    }
    for (int i = 0; i < b->nargs; i++) {
        const Type *t = b->args[i]->type;
        const Type *want = i < 3 ? NULL : i < 3 + nin ? op->operands[i]->type : op->results[i - 3 - nin]->type;
        if (i < 3 ? !is_index(t)
                  : t->kind != TY_MEMREF || t->space != AS_GLOBAL || t->elem != want->elem || t->rank != want->rank) {
            op_error(v, op, "body argument %d must be %s", i, i < 3 ? "an index (program id)"
                                                                   : "a global memref of its tensor's shape");
            return;
        }
    }
    if (op_attr(op, "nv.barrier.turn"))   /* (ping-pong's turns, once warp-roles has marked them) */
        verify_turns(v, op->regions[0].blocks[0]);
}

static void verify_for_(Verifier *v, Op *op) {
    for (int i = 0; i < 3; i++)
        if (!is_index(op->operands[i]->type)) {
            op_error(v, op, "bounds and step must be index");
            return;
        }
    int n = op->noperands - 3;
    const Block *b = op->regions[0].nblocks == 1 ? op->regions[0].blocks[0] : NULL;
    if (op->nresults != n || !b || b->nargs != n + 1 || !is_index(b->args[0]->type)) {
        op_error(v, op, "needs one block (index, carried values...) and a result per carried value");
        return;
    }
    for (int i = 0; i < n; i++)
        if (!type_equal(op->operands[3 + i]->type, b->args[1 + i]->type) ||
            !type_equal(op->operands[3 + i]->type, op->results[i]->type)) {
            op_error(v, op, "carried value %d changes type", i);
            return;
        }
    const Op *y = b->last;
    if (y && y->kind == OP_TILE_YIELD) {
        bool ok = y->noperands == n;
        for (int i = 0; ok && i < n; i++)
            ok = type_equal(y->operands[i]->type, op->results[i]->type);
        if (!ok)
            op_error(v, op, "must yield one value per carried value, of its type");
    }
}

static void verify_tile_yield(Verifier *v, Op *op) {
    Op *p = parent_op(op);
    if (!p || (p->kind != OP_FOR && p->kind != OP_LAUNCH))
        op_error(v, op, "must end a tile.for or tile.launch body");
    else if (p->kind == OP_LAUNCH && op->noperands)
        op_error(v, op, "ends a launch: yields nothing");
}

/* A box of a memref: one index per memref dimension; `dims` maps each tile
 * axis to a memref dimension (or -1 for a broadcast axis of size 1). */
static bool verify_box(Verifier *v, const Op *op, const Type *mem, const Type *tile, int first_index) {
    Attr *dims = op_attr(op, "dims");
    if (mem->kind != TY_MEMREF || op->noperands - first_index != mem->rank) {
        op_error(v, op, "needs a memref and one index per dimension");
        return false;
    }
    for (int i = first_index; i < op->noperands; i++)
        if (!is_index(op->operands[i]->type)) {
            op_error(v, op, "indices must be index");
            return false;
        }
    if (!is_tile(tile) || tile->elem != mem->elem || !dims || dims->kind != AT_ARRAY || dims->n != tile->rank) {
        op_error(v, op, "needs a tile of the memref's element type and 'dims', one per tile axis");
        return false;
    }
    for (int i = 0; i < dims->n; i++) {
        Attr *d = dims->elems[i];
        if (d->kind != AT_INT || d->i < -1 || d->i >= mem->rank ||
            (d->i == -1 && (tile->dims[i].sym || tile->dims[i].size != 1))) {
            op_error(v, op, "'dims' entry %d must name a memref dimension (or -1 for an axis of size 1)", i);
            return false;
        }
    }
    return true;
}

static void verify_load(Verifier *v, Op *op) {
    verify_box(v, op, op->operands[0]->type, op->results[0]->type, 1);
}

/* tile.store (and tile.atomic_add): a tile at the indices; with 'bound' =
 * d, a last operand: memref rows at or past it along dimension d are not
 * written (a sequence's end inside a packed tensor). */
static void verify_store(Verifier *v, Op *op) {
    Attr *bound = op_attr(op, "bound");
    const Type *mem = op->operands[0]->type;
    if (!bound) {
        verify_box(v, op, mem, op->operands[1]->type, 2);
        return;
    }
    if (op->kind != OP_STORE || bound->kind != AT_INT || mem->kind != TY_MEMREF || bound->i < 0 ||
        bound->i >= mem->rank || op->noperands != mem->rank + 3 || !is_index(op->operands[op->noperands - 1]->type)) {
        op_error(v, op, "'bound' must name a memref dimension, with the bound (an index) as the last operand");
        return;
    }
    op->noperands--;   /* the box without its bound */
    verify_box(v, op, mem, op->operands[1]->type, 2);
    op->noperands++;
}

static void verify_gather(Verifier *v, Op *op) {
    const Type *m = op->operands[0]->type, *r = op->results[0]->type;
    if (m->kind != TY_MEMREF || op->noperands - 1 != m->rank || r->elem != m->elem) {
        op_error(v, op, "needs a memref, one index (or index tile) per dimension, and its element type");
        return;
    }
    for (int i = 1; i < op->noperands; i++) {
        const Type *t = op->operands[i]->type;
        if (t->elem != SK_INDEX || (t->kind != TY_SCALAR && !is_tile(t)) || !type_broadcasts_to(t, r)) {
            op_error(v, op, "index %d must be an index or an index tile broadcasting to the result", i - 1);
            return;
        }
    }
}

static void verify_splat(Verifier *v, Op *op) {
    const Type *x = op->operands[0]->type, *r = op->results[0]->type;
    if (x->kind != TY_SCALAR || !is_tile(r) || r->elem != x->elem)
        op_error(v, op, "makes a tile of a scalar's type");
}

static void verify_iota(Verifier *v, Op *op) {
    const Type *r = op->results[0]->type;
    Attr *axis = op_attr(op, "axis");
    if (!is_tile(r) || r->elem != SK_INDEX || !axis || axis->kind != AT_INT || axis->i < 0 || axis->i >= r->rank)
        op_error(v, op, "makes an index tile and needs 'axis', one of its dimensions");
}

static void verify_dot(Verifier *v, Op *op) {
    const Type *a = op->operands[0]->type, *b = op->operands[1]->type, *c = op->operands[2]->type;
    if (!is_tile(a) || !is_tile(b) || !is_tile(c) || a->rank != 2 || b->rank != 2 || c->rank != 2 ||
        a->elem != b->elem || !dim_equal(a->dims[1], b->dims[0]) || !dim_equal(c->dims[0], a->dims[0]) ||
        !dim_equal(c->dims[1], b->dims[1]) || !type_equal(c, op->results[0]->type))
        op_error(v, op, "needs tiles [M, K] and [K, N] of one type and an accumulator [M, N]");
}

static void verify_trans(Verifier *v, Op *op) {
    const Type *x = op->operands[0]->type, *r = op->results[0]->type;
    if (!is_tile(x) || x->rank != 2 || !is_tile(r) || r->rank != 2 || x->elem != r->elem ||
        !dim_equal(x->dims[0], r->dims[1]) || !dim_equal(x->dims[1], r->dims[0]))
        op_error(v, op, "transposes a 2-D tile");
}

static void verify_tile_reduce(Verifier *v, Op *op) {
    const Type *x = op->operands[0]->type, *r = op->results[0]->type;
    const char *kind = attr_string(op, "kind");
    if (!kind || (strcmp(kind, "max") != 0 && strcmp(kind, "sum") != 0)) {
        op_error(v, op, "needs attribute 'kind' (\"max\" or \"sum\")");
        return;
    }
    if (!is_tile(x) || x->rank != 2 || !is_tile(r) || r->rank != 2 || r->elem != x->elem ||
        !dim_equal(r->dims[0], x->dims[0]) || r->dims[1].sym || r->dims[1].size != 1)
        op_error(v, op, "reduces the rows of a 2-D tile to [M, 1]");
}

/* nv.lane_sum : a row vector [M, 1] whose lanes held pieces of its sums
 * (tile.reduce with nv.partial, passes/nv_layout.c), made whole; the value
 * itself is unchanged. */
static void verify_lane_sum(Verifier *v, Op *op) {
    const Type *x = op->operands[0]->type, *r = op->results[0]->type;
    if (!is_tile(x) || x->rank != 2 || x->dims[1].sym || x->dims[1].size != 1 || !scalar_is_float(x->elem) ||
        !type_equal(x, r))
        op_error(v, op, "takes and gives one float row vector tile [M, 1]");
}

/* tile.alloc : memref<..., shared> — a buffer of the program's own */
static void verify_alloc(Verifier *v, Op *op) {
    const Type *t = op->results[0]->type;
    if (t->kind != TY_MEMREF || t->space != AS_SHARED)
        op_error(v, op, "allocates a shared memref");
    for (int i = 0; t->kind == TY_MEMREF && i < t->rank; i++)
        if (t->dims[i].sym)
            op_error(v, op, "needs a shape of numbers");
}

/* tile.copy_async(%src, %dst, %stage, %src_idx...) {dims} : token — starts
 * copying the box of src at src_idx (shape dst's without its first
 * dimension; `dims` as for tile.load) into dst[stage]. */
static void verify_copy_async(Verifier *v, Op *op) {
    const Type *src = op->operands[0]->type, *dst = op->operands[1]->type;
    if (src->kind != TY_MEMREF || dst->kind != TY_MEMREF || dst->space != AS_SHARED || dst->rank < 2 ||
        dst->elem != src->elem || op->results[0]->type->kind != TY_TOKEN || !is_index(op->operands[2]->type)) {
        op_error(v, op, "copies from a memref into a stage of a shared memref, giving a token");
        return;
    }
    Attr *dims = op_attr(op, "dims");
    if (op->noperands - 3 != src->rank || !dims || dims->kind != AT_ARRAY || dims->n != dst->rank - 1) {
        op_error(v, op, "needs one source index per source dimension and 'dims', one per box axis");
        return;
    }
    for (int i = 3; i < op->noperands; i++)
        if (!is_index(op->operands[i]->type)) {
            op_error(v, op, "indices must be index");
            return;
        }
    for (int i = 0; i < dims->n; i++)
        if (dims->elems[i]->kind != AT_INT || dims->elems[i]->i < -1 || dims->elems[i]->i >= src->rank) {
            op_error(v, op, "'dims' entry %d must name a source dimension (or -1)", i);
            return;
        }
}

static void verify_wait(Verifier *v, Op *op) {
    if (op->operands[0]->type->kind != TY_TOKEN)
        op_error(v, op, "waits for a token");
}

typedef void (*VerifyFn)(Verifier *, Op *);
static const VerifyFn verify_fns[OP__COUNT] = {
#define OP(id, name, mino, maxo, nres, nreg, verify, flags) verify_##verify,
#include "ops.def"
#undef OP
};

/* ---- structure --------------------------------------------------------- */

static void verify_op(Verifier *v, Op *op);

static void verify_block(Verifier *v, Block *b, PtrVec *scope) {
    for (int i = 0; i < b->nargs; i++) {
        map_put(&v->arena, &v->visible, b->args[i], (void *)1);
        vec_push(&v->arena, scope, b->args[i]);
    }
    for_each_op(op, b) {
        if (op->parent != b)
            die("op's parent link is broken");
        verify_op(v, op);
        if ((op_info[op->kind].flags & OPF_TERMINATOR) && op->next)
            op_error(v, op, "must be the last op of its block");
        for (int i = 0; i < op->nresults; i++) {
            map_put(&v->arena, &v->visible, op->results[i], (void *)1);
            vec_push(&v->arena, scope, op->results[i]);
        }
    }
}

static bool verify_nv_attrs(Verifier *v, const Op *op) {
    bool ok = true;
    for (int i = 0; i < op->nattrs; i++) {
        char msg[400];
        if (strncmp(op->attrs[i].name, "nv.", 3) == 0 && !nv_attr_check(op, &op->attrs[i], v->target, msg, sizeof msg)) {
            op_error(v, op, "%s", msg);
            ok = false;
        }
    }
    return ok;
}

static void verify_op(Verifier *v, Op *op) {
    if (op->kind == OP_MODULE) {   /* its nv.target: the target its nv attributes are for */
        Attr *t = op_attr(op, "nv.target");
        v->target = t && t->kind == AT_STR ? t->s : NULL;
        v->nv_checked = verify_nv_attrs(v, op);   /* a bad target: said once, not at every nv attribute */
    }
    const OpInfo *info = &op_info[op->kind];
    int before = v->errors;
    if (op->noperands < info->min_operands ||
        (info->max_operands >= 0 && op->noperands > info->max_operands))
    {
        if (info->max_operands < 0)
            op_error(v, op, "takes at least %d operands, has %d", info->min_operands, op->noperands);
        else if (info->max_operands == info->min_operands)
            op_error(v, op, "takes %d operands, has %d", info->min_operands, op->noperands);
        else
            op_error(v, op, "takes %d to %d operands, has %d", info->min_operands,
                     info->max_operands, op->noperands);
    }
    if (info->results >= 0 && op->nresults != info->results)
        op_error(v, op, "has %d results, needs %d", op->nresults, info->results);
    if (op->nregions != info->regions)
        op_error(v, op, "has %d regions, needs %d", op->nregions, info->regions);
    for (int i = 0; i < op->noperands; i++)
        if (!map_get(&v->visible, op->operands[i]))
            op_error(v, op, "operand %d is used where its definition is not visible", i);
    bool shaped_right = v->errors == before;   /* the op's own rule may rely on this */
    /* Regions: names defined inside are visible only inside; an isolated op
     * sees nothing from outside. */
    Map saved = v->visible;
    if (info->flags & OPF_ISOLATED)
        map_init(&v->visible, false);
    for (int r = 0; r < op->nregions; r++) {
        PtrVec scope = {0};
        for (int b = 0; b < op->regions[r].nblocks; b++) {
            Block *blk = op->regions[r].blocks[b];
            verify_block(v, blk, &scope);
            if (op->kind != OP_MODULE && (!blk->last || !(op_info[blk->last->kind].flags & OPF_TERMINATOR)))
                op_error(v, op, "region %d block %d does not end with a terminator", r, b);
        }
        for (int i = 0; i < scope.len; i++)
            map_put(&v->arena, &v->visible, scope.items[i], NULL);
    }
    if (info->flags & OPF_ISOLATED)
        v->visible = saved;
    if (shaped_right)
        verify_fns[op->kind](v, op);
    if (op->kind != OP_MODULE && v->nv_checked)
        verify_nv_attrs(v, op);
}

int ir_verify(Op *root, Diag *d, const Source *text) {
    Verifier v = {.diag = d, .text = text};
    map_init(&v.visible, false);
    verify_op(&v, root);
    arena_free(&v.arena);
    return v.errors;
}
