/* sema_blocks.c — declarations (types, parameters) and the two blocks:
 * an mlp block's statements, and an attention block's operands, outputs
 * and hooks (mask, score) lowered to attn.attention. */
#include "frontend/sema.h"
#include "runtime/manifest.h"

#include <math.h>
#include <string.h>

/* ---- declarations: types and parameters ----------------------------------- */

static Type *resolve_type(Sema *s, const TypeSpec *ts) {
    ScalarKind k = scalar_from_name(ts->dtype);
    bool ok = true;
    if (k == SK_NONE || k == SK_INDEX || k == SK_I1 || k == SK_F64) {
        diag_error(s->d, s->src, ts->dtype_loc, "unknown dtype '%s'", ts->dtype);
        diag_note(s->d, s->src, ts->dtype_loc, "dtypes are f16, bf16, f32, i32 and i64");
        ok = false;
    } else if (k == SK_F8E4M3 || k == SK_F8E5M2) {
        diag_error(s->d, s->src, ts->dtype_loc, "dtype '%s' is reserved for a later version of attnc",
                   ts->dtype);
        ok = false;
    }
    if (ts->rank > MANIFEST_MAX_RANK) {   /* libattnrt's, the interpreter's and the kernels' limit */
        diag_error(s->d, s->src, ts->dim_locs[MANIFEST_MAX_RANK], "a tensor has at most %d dimensions, not %d",
                   MANIFEST_MAX_RANK, ts->rank);
        ok = false;
    }
    Dim *dims = NEW_ARRAY(s->a, Dim, ts->rank + 1);
    for (int i = 0; i < ts->rank; i++) {
        const char *name = ts->dim_names[i];
        if (!name) {
            if (ts->dim_sizes[i] <= 0) {
                diag_error(s->d, s->src, ts->dim_locs[i], "a dimension must be positive, not %lld",
                           (long long)ts->dim_sizes[i]);
                ok = false;
            }
            dims[i].size = ts->dim_sizes[i];
            continue;
        }
        ConstDef *c = map_get(&s->consts, name);
        if (!c) {
            dims[i].sym = name;   /* symbolic: bound at run time */
            map_put(s->a, &s->dims, name, (void *)1);
        } else if (c->val.kind == VAL_ERROR) {
            ok = false;   /* its definition's error is reported: not one more at each use */
        } else if (c->val.kind != VAL_INT || c->val.i <= 0) {
            diag_error(s->d, s->src, ts->dim_locs[i],
                       "constant '%s' is used as a dimension but is not a positive integer", name);
            if (c->val.kind == VAL_FLOAT)
                diag_note(s->d, s->src, c->loc, "'%s' is the number %g: '/' divides exactly, "
                          "'//' gives an integer", name, c->val.f);
            else
                diag_note(s->d, s->src, c->loc, "'%s' is defined here", name);
            ok = false;
        } else {
            dims[i].size = c->val.i;
        }
    }
    return ok ? type_shaped(s->a, TY_TENSOR, k, ts->rank, dims) : NULL;
}

/* Declares a block's inputs (as block arguments) and outputs. */
static bool declare_params(Sema *s, const Item *it, Block *body) {
    bool ok = true;
    for (int i = 0; i < it->ninputs + it->noutputs; i++) {
        bool input = i < it->ninputs;
        const Param *p = input ? &it->inputs[i] : &it->outputs[i - it->ninputs];
        Type *t = resolve_type(s, &p->type);
        Symbol *sym = sema_define_sym(s, input ? SYM_INPUT : SYM_OUTPUT, p->name, p->loc);
        if (!t || !sym) {
            ok = false;
            continue;
        }
        sym->param = p;
        if (input)
            sym->value = block_add_arg(s->a, body, t, p->name);
    }
    return ok;
}

static Type *declared_type(Sema *s, const Param *p) {
    Symbol *sym = sema_lookup_sym(s, p->name);
    return sym && sym->value ? sym->value->type : resolve_type(s, &p->type);
}

/* ---- statements common to both blocks ------------------------------------- */

/* acc f32; / acc f16; — at most once, before it matters. */
static void check_acc(Sema *s, const Item *it) {
    const Stmt *seen = NULL;
    s->acc = SK_F32;
    for (int i = 0; i < it->nstmts; i++) {
        const Stmt *st = it->stmts[i];
        if (st->kind != S_ACC)
            continue;
        if (seen) {
            diag_error(s->d, s->src, st->loc, "the accumulator precision is set twice");
            diag_note(s->d, s->src, seen->loc, "first set here");
            continue;
        }
        seen = st;
        ScalarKind k = scalar_from_name(st->name);
        if (k != SK_F32 && k != SK_F16)
            diag_error(s->d, s->src, st->name_loc, "the accumulator must be f32 or f16, not '%s'", st->name);
        else
            s->acc = k;
    }
}

static void warn_unused(Sema *s) {
    if (s->d->errors > s->block_errors || s->incomplete)
        return;   /* an error may have hidden the use */
    for (int i = 0; i < s->sym_list.len; i++) {
        Symbol *sym = s->sym_list.items[i];
        if (sym->kind == SYM_INPUT && !sym->used && !sym->attention_operand)
            diag_warning(s->d, s->src, sym->loc, "input '%s' is never used", sym->name);
        if (sym->kind == SYM_LOCAL && !sym->used)
            diag_warning(s->d, s->src, sym->loc, "'%s' is assigned but never used", sym->name);
    }
}

void sema_begin_block(Sema *s) {
    s->block_errors = s->d->errors;
    s->incomplete = false;
    map_init(&s->syms, true);
    map_init(&s->dims, true);
    s->sym_list = (PtrVec){0};
    s->hook = NO_HOOK;
}

Op *sema_new_func(Sema *s, const Item *it, const char *kind) {
    Op *f = op_create(s->a, OP_FUNC, 0, NULL, 0, NULL, 1);
    f->loc = sema_srcloc(s, it->loc);
    region_add_block(s->a, &f->regions[0]);
    op_set_attr(s->a, f, "sym_name", attr_str(s->a, it->name));
    op_set_attr(s->a, f, "kind", attr_str(s->a, kind));
    Attr **in = NEW_ARRAY(s->a, Attr *, it->ninputs + 1), **out = NEW_ARRAY(s->a, Attr *, it->noutputs + 1);
    for (int i = 0; i < it->ninputs; i++)
        in[i] = attr_str(s->a, it->inputs[i].name);
    for (int i = 0; i < it->noutputs; i++)
        out[i] = attr_str(s->a, it->outputs[i].name);
    op_set_attr(s->a, f, "inputs", attr_array(s->a, it->ninputs, in));
    op_set_attr(s->a, f, "outputs", attr_array(s->a, it->noutputs, out));
    return f;
}

static void emit_return(Sema *s, const Item *it, Value **values, int n) {
    Op *ret = op_create(s->a, OP_RETURN, n, values, 0, NULL, 0);
    ret->loc = sema_srcloc(s, it->loc);
    block_append(s->insert, ret);
}

/* ---- mlp blocks ---------------------------------------------------------- */

static void check_output_type(Sema *s, const Stmt *st, Symbol *out, Value *v) {
    Type *want = declared_type(s, out->param);
    if (want && !type_equal(want, v->type)) {
        diag_error(s->d, s->src, st->value->loc, "'%s' is declared %s but assigned %s", out->name,
                   sema_type_text(s, want), sema_type_text(s, v->type));
        diag_note(s->d, s->src, out->loc, "'%s' is declared here", out->name);
    }
}

void sema_lower_mlp(Sema *s, const Item *it, Op *func) {
    Block *body = op_body(func);
    if (!declare_params(s, it, body))
        return;
    check_acc(s, it);
    s->insert = body;
    bool incomplete = false;   /* a statement was lost to a syntax error */
    for (int i = 0; i < it->nstmts; i++) {
        const Stmt *st = it->stmts[i];
        if (st->kind == S_ACC)
            continue;
        if (st->kind == S_ERROR) {
            incomplete = true;
            continue;
        }
        if (st->kind == S_CALL && strcmp(st->name, "pages")) {
            diag_error(s->d, s->src, st->name_loc, "unknown statement '%s'", st->name);
            continue;
        }
        if (st->kind != S_ASSIGN) {
            diag_error(s->d, s->src, st->name_loc, "'%s' is only allowed in an attention block",
                       st->kind == S_SCALE ? "scale" : st->name);
            continue;
        }
        Val v = sema_lower_expr(s, st->value);
        Symbol *sym = sema_lookup_sym(s, st->name);
        if (sym && sym->kind == SYM_INPUT) {
            diag_error(s->d, s->src, st->name_loc, "cannot assign to input '%s'", st->name);
            diag_note(s->d, s->src, sym->loc, "'%s' is declared here", st->name);
            continue;
        }
        if (sym && sym->value) {
            diag_error(s->d, s->src, st->name_loc, "'%s' is assigned twice", st->name);
            diag_note(s->d, s->src, sym->loc,
                      "'%s' is %s here", st->name, sym->kind == SYM_LOCAL ? "first assigned" : "declared");
            continue;
        }
        if (v.kind == VAL_ERROR) {
            if (sym)
                sym->used = true;   /* assigned, if wrongly: no "never assigned" too */
            continue;
        }
        if (v.kind != VAL_IR || v.v->type->kind != TY_TENSOR) {
            if (sym)
                sym->used = true;
            diag_error(s->d, s->src, st->value->loc, "'%s' must be a tensor, not %s", st->name,
                       sema_val_text(s, v));
            continue;
        }
        if (!sym)
            sym = sema_define_sym(s, SYM_LOCAL, st->name, st->name_loc);
        else
            check_output_type(s, st, sym, v.v);
        /* The value takes the statement's name in the printed IR. Values
         * that already carry a name (an input assigned to an output) get a
         * copy through a no-op cast so both names survive. */
        if (v.v->name)
            v.v = sema_emit(s, st->loc, OP_CAST, v.v->type, v.v, NULL);
        v.v->name = st->name;
        sym->value = v.v;
    }
    Value **outs = NEW_ARRAY(s->a, Value *, it->noutputs + 1);
    bool complete = true;
    for (int i = 0; i < it->noutputs; i++) {
        Symbol *sym = sema_lookup_sym(s, it->outputs[i].name);
        if (!sym || sym->kind != SYM_OUTPUT)
            complete = false;
        else if (!sym->value) {
            if (!sym->used && !incomplete)
                diag_error(s->d, s->src, it->outputs[i].loc, "output '%s' is never assigned", sym->name);
            complete = false;
        } else {
            outs[i] = sym->value;
        }
    }
    s->incomplete = incomplete;
    if (it->noutputs == 0)
        diag_error(s->d, s->src, it->name_loc, "block '%s' has no outputs", it->name);
    if (complete)
        emit_return(s, it, outs, it->noutputs);
    warn_unused(s);
}

/* ---- attention blocks ---------------------------------------------------- */

typedef struct AttnShape {
    Symbol *q, *k, *v;
    Dim batch, hq, hkv, nq, nk, d, dv;
    ScalarKind dtype;
} AttnShape;

/* pages(TABLE, LENS); — k and v are a paged KV cache [pages, page_size,
 * Hkv, D] (FlashAttention's flash_attn_with_kvcache and vLLM's layout):
 * batch b's key j is row j % page_size of page TABLE[b, j // page_size],
 * and its keys are the first LENS[b]. */
typedef struct Paging {
    const Stmt *st;
    Symbol *table, *lens;
    int64_t page_size;
} Paging;

enum { MIN_PAGE_SIZE = 16, MAX_PAGE_SIZE = 256 };

/* sequences(CU_Q, CU_K); — q [Tq, H, D] and k, v [Tk, Hkv, D] are a batch
 * of sequences of different lengths packed end to end (FlashAttention's
 * varlen layout): sequence b is rows CU_Q[b] to CU_Q[b + 1] of q, CU_K[b]
 * to CU_K[b + 1] of k and v. The block sees them as [B, H, Tq, D] (and
 * [B, Hkv, Tk, D]), B the offsets' count less one, each sequence's rows
 * from 0. */
typedef struct Sequences {
    const Stmt *st;
    Symbol *cu_q, *cu_k;
} Sequences;

/* A statement's index inputs (pages' table and lengths, sequences'
 * offsets): inputs of the block, not q, k, v, of i32 and the rank asked. */
typedef struct IndexInput {
    const char *what;    /* "the block table" */
    int rank;
    const char *shape;   /* "i32[batch, max_pages]" */
} IndexInput;

static bool resolve_index_inputs(Sema *s, const Item *it, const Stmt *st, const char *usage, const IndexInput *want,
                                 Symbol **syms) {
    if (st->nvars != 2) {
        diag_error(s->d, s->src, st->name_loc, "%s takes two inputs, %s and %s: %s, not %d", st->name, want[0].what,
                   want[1].what, usage, st->nvars);
        return false;
    }
    for (int i = 0; i < 2; i++) {
        Symbol *sym = sema_lookup_sym(s, st->vars[i]);
        syms[i] = sym;
        if (!sym || sym->kind != SYM_INPUT) {
            diag_error(s->d, s->src, st->var_locs[i], "%s '%s' must be an input of the block", want[i].what,
                       st->vars[i]);
            return false;
        }
        if (!sym->value)
            return false;   /* its declaration's error is reported */
        sym->used = true;
        const Type *t = sym->value->type;
        bool operand = false;
        for (int k = 0; k < 3 && k < it->ninputs; k++)
            operand |= !strcmp(it->inputs[k].name, sym->name);
        if (operand || t->elem != SK_I32 || t->rank != want[i].rank) {
            diag_error(s->d, s->src, st->var_locs[i], "%s '%s' must be %s, not %s", want[i].what, sym->name,
                       want[i].shape, sema_type_text(s, t));
            diag_note(s->d, s->src, sym->loc, "'%s' is declared here", sym->name);
            return false;
        }
    }
    return true;
}

static bool resolve_paging(Sema *s, const Item *it, const Stmt *st, Paging *pg) {
    static const IndexInput want[2] = {{"the block table", 2, "i32[batch, max_pages]"},
                                       {"the lengths", 1, "i32[batch]"}};
    Symbol *syms[2];
    pg->st = st;
    if (!resolve_index_inputs(s, it, st, "pages(table, lens)", want, syms))
        return false;
    pg->table = syms[0];
    pg->lens = syms[1];
    return true;
}

static bool resolve_sequences(Sema *s, const Item *it, const Stmt *st, Sequences *sq) {
    static const IndexInput want[2] = {{"the query offsets", 1, "i32[batch + 1]"},
                                       {"the key offsets", 1, "i32[batch + 1]"}};
    Symbol *syms[2];
    sq->st = st;
    if (!resolve_index_inputs(s, it, st, "sequences(cu_q, cu_k)", want, syms))
        return false;
    sq->cu_q = syms[0];
    sq->cu_k = syms[1];
    return true;
}

static bool same_dim(Sema *s, Dim want, Dim got, const char *what, Symbol *who, Symbol *ref, int axis) {
    if (dim_equal(want, got))
        return true;
    diag_error(s->d, s->src, who->param->type.dim_locs[axis], "%s of '%s' (%s) differs from '%s' (%s)",
               what, who->name, sema_dim_text(s, got), ref->name, sema_dim_text(s, want));
    return false;
}

/* A paged cache's shapes: k and v [pages, page_size, Hkv, D], the page size
 * a number from 16 to 256 and a power of two, the table's and lengths'
 * batch q's. The keys' dimension is max_pages · page_size. */
static bool check_paged_operands(Sema *s, AttnShape *sh, Paging *pg) {
    const Type *k = sh->k->value->type, *v = sh->v->value->type;
    bool ok = true;
    Dim ps = k->dims[1];
    if (ps.sym || ps.size < MIN_PAGE_SIZE || ps.size > MAX_PAGE_SIZE || (ps.size & (ps.size - 1))) {
        diag_error(s->d, s->src, sh->k->param->type.dim_locs[1],
                   "the page size of '%s' must be a power of two from %d to %d, not %s", sh->k->name, MIN_PAGE_SIZE,
                   MAX_PAGE_SIZE, sema_dim_text(s, ps));
        diag_note(s->d, s->src, pg->st->name_loc, "'%s' is a paged cache [pages, page_size, kv_heads, head_dim] here",
                  sh->k->name);
        ok = false;
    }
    pg->page_size = ps.size;
    sh->hkv = k->dims[2];
    ok &= same_dim(s, k->dims[0], v->dims[0], "page count", sh->v, sh->k, 0);
    ok &= same_dim(s, ps, v->dims[1], "page size", sh->v, sh->k, 1);
    ok &= same_dim(s, sh->hkv, v->dims[2], "head count", sh->v, sh->k, 2);
    ok &= same_dim(s, sh->batch, pg->table->value->type->dims[0], "batch", pg->table, sh->q, 0);
    ok &= same_dim(s, sh->batch, pg->lens->value->type->dims[0], "batch", pg->lens, sh->q, 0);
    Dim maxp = pg->table->value->type->dims[1];
    sh->nk = maxp.sym ? (Dim){arena_printf(s->a, "%sx%lld", maxp.sym, (long long)pg->page_size), 0}
                      : (Dim){NULL, maxp.size * pg->page_size};
    if (ok && sh->nk.sym && map_get(&s->dims, sh->nk.sym)) {
        diag_error(s->d, s->src, pg->st->name_loc, "the paged keys' dimension '%s' is a dimension of the block too",
                   sh->nk.sym);
        ok = false;
    }
    return ok;
}

/* Packed sequences' shapes: q [Tq, H, D], k and v [Tk, Hkv, D], both
 * offsets of one size (the batch's, plus one). The block's batch is that
 * size less one: a number, or the dim SEQS (SEQS_ if the block has an
 * SEQS) defined so. */
static bool check_sequence_operands(Sema *s, AttnShape *sh, const Sequences *sq) {
    const Type *q = sh->q->value->type, *k = sh->k->value->type, *v = sh->v->value->type;
    bool ok = true;
    sh->hq = q->dims[1]; sh->nq = q->dims[0]; sh->d = q->dims[2];
    sh->hkv = k->dims[1]; sh->nk = k->dims[0]; sh->dv = v->dims[2];
    ok &= same_dim(s, sh->nk, v->dims[0], "token count", sh->v, sh->k, 0);
    ok &= same_dim(s, sh->hkv, v->dims[1], "head count", sh->v, sh->k, 1);
    Dim n = sq->cu_q->value->type->dims[0];
    ok &= same_dim(s, n, sq->cu_k->value->type->dims[0], "size", sq->cu_k, sq->cu_q, 0);
    if (!n.sym) {
        sh->batch = (Dim){NULL, n.size - 1};
        if (n.size < 2) {
            diag_error(s->d, s->src, sq->cu_q->param->type.dim_locs[0],
                       "'%s' holds a batch's offsets and its end: at least 2, not %lld", sq->cu_q->name,
                       (long long)n.size);
            ok = false;
        }
        return ok;
    }
    const char *name = "SEQS";
    while (map_get(&s->dims, name) || map_get(&s->consts, name))
        name = arena_printf(s->a, "%s_", name);
    sh->batch = (Dim){name, 0};
    return ok;
}

static bool check_attention_operands(Sema *s, const Item *it, AttnShape *sh, Paging *pg, const Sequences *sq) {
    if (it->ninputs < 3) {
        diag_error(s->d, s->src, it->name_loc,
                   "attention block '%s' needs q, k and v as its first three inputs", it->name);
        return false;
    }
    Symbol *qkv[3];
    bool ok = true;
    int rank = sq ? 3 : 4;
    for (int i = 0; i < 3; i++) {
        qkv[i] = sema_lookup_sym(s, it->inputs[i].name);
        if (!qkv[i] || !qkv[i]->value)
            return false;
        qkv[i]->attention_operand = true;
        const Type *t = qkv[i]->value->type;
        if (t->rank != rank) {
            diag_error(s->d, s->src, it->inputs[i].type.loc, "'%s' must have rank %d %s, not %d", qkv[i]->name,
                       rank, sq ? "[tokens, heads, head_dim]" : "[batch, heads, seq, head_dim]", t->rank);
            if (sq)
                diag_note(s->d, s->src, sq->st->name_loc, "the sequences are packed end to end here");
            ok = false;
        } else if (t->elem != SK_F16 && t->elem != SK_BF16) {
            diag_error(s->d, s->src, it->inputs[i].type.dtype_loc,
                       "attention operands must be f16 or bf16, not %s", scalar_name(t->elem));
            ok = false;
        }
    }
    if (!ok)
        return false;
    sh->q = qkv[0]; sh->k = qkv[1]; sh->v = qkv[2];
    const Type *q = sh->q->value->type, *k = sh->k->value->type, *v = sh->v->value->type;
    sh->dtype = q->elem;
    for (int i = 1; i < 3; i++)
        if (qkv[i]->value->type->elem != sh->dtype) {
            diag_error(s->d, s->src, it->inputs[i].type.dtype_loc, "'%s' is %s but '%s' is %s",
                       qkv[i]->name, scalar_name(qkv[i]->value->type->elem), sh->q->name,
                       scalar_name(sh->dtype));
            ok = false;
        }
    int hd_axis = rank - 1;   /* the head dim's */
    if (!sq) {
        sh->batch = q->dims[0]; sh->hq = q->dims[1]; sh->nq = q->dims[2]; sh->d = q->dims[3];
        sh->dv = v->dims[3];
    }
    if (sq) {
        ok &= check_sequence_operands(s, sh, sq);
    } else if (pg) {
        ok &= check_paged_operands(s, sh, pg);
    } else {
        sh->hkv = k->dims[1]; sh->nk = k->dims[2];
        ok &= same_dim(s, sh->batch, k->dims[0], "batch", sh->k, sh->q, 0);
        ok &= same_dim(s, sh->batch, v->dims[0], "batch", sh->v, sh->q, 0);
        ok &= same_dim(s, sh->hkv, v->dims[1], "head count", sh->v, sh->k, 1);
        ok &= same_dim(s, sh->nk, v->dims[2], "sequence length", sh->v, sh->k, 2);
    }
    ok &= same_dim(s, sh->d, k->dims[hd_axis], "head dimension", sh->k, sh->q, hd_axis);
    for (int i = 0; i < 3; i += 2) {
        Dim hd = i == 0 ? sh->d : sh->dv;
        if (hd.sym) {
            diag_error(s->d, s->src, qkv[i]->param->type.dim_locs[hd_axis],
                       "the head dimension of '%s' must be a compile-time constant, not '%s'",
                       qkv[i]->name, hd.sym);
            ok = false;
        }
    }
    /* GQA/MQA: query heads are groups of kv heads. Provable now when both are
     * numbers; when either is symbolic the runtime checks it on binding. */
    if (!dim_equal(sh->hq, sh->hkv) && !sh->hq.sym && !sh->hkv.sym && sh->hq.size % sh->hkv.size) {
        diag_error(s->d, s->src, sh->k->param->type.dim_locs[pg ? 2 : 1],
                   "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)sh->hq.size,
                   (long long)sh->hkv.size);
        diag_note(s->d, s->src, sh->q->param->type.dim_locs[1], "query heads are declared here");
        ok = false;
    }
    return ok;
}

/* Packed sequences' outputs are packed too: o [Tq, H, Dv], lse [H, Tq]
 * (FlashAttention's varlen softmax_lse). */
static bool check_attention_outputs(Sema *s, const Item *it, const AttnShape *sh, bool packed) {
    if (it->noutputs < 1 || it->noutputs > 2) {
        diag_error(s->d, s->src, it->name_loc,
                   "attention block '%s' has %d outputs; it needs o, and optionally lse", it->name,
                   it->noutputs);
        return false;
    }
    bool ok = true;
    Dim o_dims[4] = {sh->batch, sh->hq, sh->nq, sh->dv}, packed_dims[3] = {sh->nq, sh->hq, sh->dv};
    Type *o_want = packed ? type_shaped(s->a, TY_TENSOR, sh->dtype, 3, packed_dims)
                          : type_shaped(s->a, TY_TENSOR, sh->dtype, 4, o_dims);
    Type *lse_want = packed ? type_shaped(s->a, TY_TENSOR, SK_F32, 2, (Dim[]){sh->hq, sh->nq})
                            : type_shaped(s->a, TY_TENSOR, SK_F32, 3, o_dims);
    for (int i = 0; i < it->noutputs; i++) {
        Type *want = i == 0 ? o_want : lse_want;
        Type *got = declared_type(s, &it->outputs[i]);
        if (got && !type_equal(got, want)) {
            diag_error(s->d, s->src, it->outputs[i].type.loc, "%s '%s' must be %s, not %s",
                       i == 0 ? "the attention output" : "the log-sum-exp output", it->outputs[i].name,
                       sema_type_text(s, want), sema_type_text(s, got));
            ok = false;
        }
    }
    return ok;
}

/* Lowers one hook into the region of `op`: block arguments are the hook's
 * parameters, the body computes the expression, attn.yield returns it. */
static bool lower_hook(Sema *s, const Stmt *st, Op *op, HookKind kind) {
    int want = kind == HOOK_MASK ? 4 : 5;
    if (st->nvars != want) {
        diag_error(s->d, s->src, st->name_loc, "a %s hook takes %d parameters (%s), not %d",
                   hook_name(kind), want, kind == HOOK_MASK ? "b, h, i, j" : "s, b, h, i, j", st->nvars);
        return false;
    }
    Block *saved = s->insert;
    Block *b = region_add_block(s->a, &op->regions[0]);
    map_init(&s->hook_vars, true);
    bool ok = true;
    for (int i = 0; i < st->nvars; i++) {
        if (map_get(&s->hook_vars, st->vars[i])) {
            diag_error(s->d, s->src, st->var_locs[i], "hook parameter '%s' is named twice", st->vars[i]);
            ok = false;
        }
        bool score = kind == HOOK_SCORE && i == 0;
        Value *arg = block_add_arg(s->a, b, type_scalar(s->a, score ? SK_F32 : SK_INDEX), st->vars[i]);
        map_put(s->a, &s->hook_vars, st->vars[i], arg);
    }
    s->insert = b;
    s->hook = kind;
    Val v = sema_lower_expr(s, st->value);
    Value *result = NULL;
    if (v.kind != VAL_ERROR) {
        if (kind == HOOK_MASK) {
            if (sema_need_bool(s, v, st->value, "a mask hook"))
                result = sema_materialize(s, st->value->loc, v, SK_I1);
        } else if (sema_val_elem(v) == SK_I1) {
            diag_error(s->d, s->src, st->value->loc, "a score hook must give a number, not a bool");
            diag_note(s->d, s->src, st->value->loc, "to hide scores, write a mask hook");
        } else {
            result = sema_float_operand(s, st->value, v);
        }
    }
    if (result) {
        Value *ops[1] = {result};
        sema_emit_op(s, st->value->loc, OP_YIELD, 1, ops, NULL);
    }
    s->hook = NO_HOOK;
    s->insert = saved;
    return ok && result;
}

/* A paged cache as the [B, Hkv, Nk, D] tensor the block reads:
 * attn.pages(cache, table, lens), after the keys' dimension is defined
 * (max_pages · page_size, a tile.define_dim where max_pages is symbolic). */
/* Once, before its first use: the dim `name` defined as `from` (op) k
 * (a tile.define_dim at the attn level: the runtime's let line). */
static void define_dim_once(Sema *s, Loc loc, const char *name, const char *from, OpKind op, int64_t k) {
    if (map_get(&s->dims, name))
        return;
    Op *d = sema_emit_op(s, loc, OP_DIM, 0, NULL, type_scalar(s->a, SK_INDEX));
    op_set_attr(s->a, d, "name", attr_str(s->a, from));
    Value *n = sema_emit(s, loc, op, type_scalar(s->a, SK_INDEX), d->results[0],
                         sema_emit_constant(s, loc, (Val){VAL_INT, k, 0, NULL}, SK_INDEX));
    Op *def = sema_emit_op(s, loc, OP_DEFINE_DIM, 1, &n, NULL);
    op_set_attr(s->a, def, "name", attr_str(s->a, name));
    map_put(s->a, &s->dims, name, (void *)1);
}

static Value *paged_view(Sema *s, const AttnShape *sh, const Paging *pg, Symbol *cache, Dim head_dim) {
    if (sh->nk.sym)
        define_dim_once(s, pg->st->loc, sh->nk.sym, pg->table->value->type->dims[1].sym, OP_MUL, pg->page_size);
    Dim dims[4] = {sh->batch, sh->hkv, sh->nk, head_dim};
    Value *ops[3] = {cache->value, pg->table->value, pg->lens->value};
    Op *view = sema_emit_op(s, cache->loc, OP_PAGES, 3, ops, type_shaped(s->a, TY_TENSOR, sh->dtype, 4, dims));
    op_set_attr(s->a, view, "page_size", attr_int(s->a, pg->page_size));
    return view->results[0];
}

/* Packed sequences as the [B, H, T, D] tensor the block reads:
 * attn.pad(x, cu), after the batch's dim is defined (the offsets' count
 * less one, a tile.define_dim where it is symbolic). */
static Value *padded_view(Sema *s, const AttnShape *sh, const Sequences *sq, Symbol *x, Symbol *cu, Dim heads,
                          Dim rows) {
    if (sh->batch.sym)
        define_dim_once(s, sq->st->loc, sh->batch.sym, cu->value->type->dims[0].sym, OP_SUB, 1);
    const Type *t = x->value->type;
    Dim dims[4] = {sh->batch, heads, rows, t->dims[2]};
    Value *ops[2] = {x->value, cu->value};
    return sema_emit_op(s, x->loc, OP_PAD, 2, ops, type_shaped(s->a, TY_TENSOR, sh->dtype, 4, dims))->results[0];
}

/* The keys batch b has: a paged cache's LENS[b], a packed sequence's
 * CU_K[b + 1] - CU_K[b]; an index, emitted into the mask hook's block. */
static Value *key_count(Sema *s, Loc loc, const Paging *pg, const Sequences *sq, Value *b) {
    Type *i32 = type_scalar(s->a, SK_I32), *idx = type_scalar(s->a, SK_INDEX);
    if (pg) {
        Value *ops[2] = {pg->lens->value, b};
        return sema_emit_cast(s, loc, sema_emit_op(s, loc, OP_EXTRACT, 2, ops, i32)->results[0], SK_INDEX);
    }
    Value *next = sema_emit(s, loc, OP_ADD, idx, b, sema_emit_constant(s, loc, (Val){VAL_INT, 1, 0, NULL}, SK_INDEX));
    Value *at[2] = {b, next}, *off[2];
    for (int i = 0; i < 2; i++) {
        Value *ops[2] = {sq->cu_k->value, at[i]};
        off[i] = sema_emit_cast(s, loc, sema_emit_op(s, loc, OP_EXTRACT, 2, ops, i32)->results[0], SK_INDEX);
    }
    return sema_emit(s, loc, OP_SUB, idx, off[1], off[0]);
}

/* A paged cache's or a packed sequence's batch b has key_count keys: the
 * mask hook (`mask`, made if the block has none) also keeps only those,
 * j < key_count(b). */
static Value *mask_lengths(Sema *s, Loc loc, const Paging *pg, const Sequences *sq, Op *mask, Value *scores) {
    Block *saved = s->insert;
    Value *keep = NULL;
    if (!mask) {
        Value *ops[1] = {scores};
        Type *rt = scores->type;
        mask = op_create(s->a, OP_MASK, 1, ops, 1, &rt, 1);
        mask->loc = sema_srcloc(s, loc);
        Block *b = region_add_block(s->a, &mask->regions[0]);
        static const char *const names[4] = {"b", "h", "i", "j"};
        for (int i = 0; i < 4; i++)
            block_add_arg(s->a, b, type_scalar(s->a, SK_INDEX), names[i]);
        block_append(s->insert, mask);
    } else {   /* the user's hook: its yield goes, its value is and-ed */
        Op *yield = mask->regions[0].blocks[0]->last;
        keep = yield->operands[0];
        op_unlink(yield);
    }
    Block *b = mask->regions[0].blocks[0];
    s->insert = b;
    Value *len = key_count(s, loc, pg, sq, b->args[0]);
    Value *in = sema_emit(s, loc, OP_CMP, type_scalar(s->a, SK_I1), b->args[3], len);
    op_set_attr(s->a, in->def, "pred", attr_str(s->a, "lt"));
    /* tiling ends each program's keys at this count: mask-analysis takes
     * the conjunct as said (doc/passes.md) */
    op_set_attr(s->a, in->def, "key_count", attr_bool(s->a, true));
    if (keep)
        in = sema_emit(s, loc, OP_AND, type_scalar(s->a, SK_I1), keep, in);
    sema_emit_op(s, loc, OP_YIELD, 1, &in, NULL);
    s->insert = saved;
    return mask->results[0];
}

void sema_lower_attention(Sema *s, const Item *it, Op *func) {
    Block *body = op_body(func);
    if (!declare_params(s, it, body))
        return;
    /* pages(...) and sequences(...) first: they say how q, k and v are shaped */
    Paging paging, *pg = NULL;
    Sequences seqs, *sq = NULL;
    const Stmt *layout = NULL;
    for (int i = 0; i < it->nstmts; i++) {
        const Stmt *st = it->stmts[i];
        if (st->kind != S_CALL)
            continue;
        bool pages = !strcmp(st->name, "pages");
        if (!pages && strcmp(st->name, "sequences")) {
            diag_error(s->d, s->src, st->name_loc, "unknown statement '%s'", st->name);
            diag_note(s->d, s->src, st->name_loc,
                      "an attention block takes acc, scale, mask, score, pages and sequences");
            return;
        }
        if (layout) {
            bool twice = !strcmp(layout->name, st->name);
            if (twice)
                diag_error(s->d, s->src, st->name_loc, "'%s' is given twice", st->name);
            else
                diag_error(s->d, s->src, st->name_loc, "'pages' and 'sequences' do not go together: a block reads "
                           "either a paged cache or packed sequences");
            diag_note(s->d, s->src, layout->name_loc, twice ? "first given here" : "'%s' is given here", layout->name);
            return;
        }
        layout = st;
        if (pages ? !resolve_paging(s, it, st, &paging) : !resolve_sequences(s, it, st, &seqs))
            return;
        if (pages)
            pg = &paging;
        else
            sq = &seqs;
    }
    AttnShape sh;
    if (!check_attention_operands(s, it, &sh, pg, sq) || !check_attention_outputs(s, it, &sh, sq != NULL))
        return;
    check_acc(s, it);
    if (s->acc == SK_F16 && sh.dtype != SK_F16) {
        diag_error(s->d, s->src, it->inputs[0].type.dtype_loc,
                   "an f16 accumulator needs f16 operands, not %s", scalar_name(sh.dtype));
        return;
    }
    const Stmt *scale = NULL, *mask = NULL, *score = NULL;
    for (int i = 0; i < it->nstmts; i++) {
        const Stmt *st = it->stmts[i];
        const Stmt **slot = st->kind == S_SCALE ? &scale : st->kind == S_MASK ? &mask
                          : st->kind == S_SCORE ? &score : NULL;
        if (st->kind == S_ASSIGN)
            diag_error(s->d, s->src, st->name_loc,
                       "assignments are only allowed in mlp blocks; an attention block "
                       "takes acc, scale, mask, score, pages and sequences");
        if (!slot)
            continue;
        if (*slot) {
            diag_error(s->d, s->src, st->name_loc, "'%s' is given twice", st->kind == S_SCALE ? "scale" : st->name);
            diag_note(s->d, s->src, (*slot)->name_loc, "first given here");
            continue;
        }
        *slot = st;
    }
    double scale_value = 1 / sqrt((double)sh.d.size);
    if (scale) {
        Val v = sema_const_expr(s, scale->value, "the scale");
        if (v.kind == VAL_ERROR)
            return;
        if (!is_num_const(v) || !(num(v) > 0) || !isfinite(num(v))) {
            diag_error(s->d, s->src, scale->value->loc, "the scale must be a positive number, not %s",
                       is_num_const(v) ? arena_printf(s->a, "%g", num(v)) : sema_val_text(s, v));
            return;
        }
        /* the kernels multiply by it in f32 */
        if (!isfinite((float)num(v)) || (float)num(v) == 0) {
            diag_error(s->d, s->src, scale->value->loc, "the scale %g is %s in f32", num(v),
                       (float)num(v) == 0 ? "zero" : "infinite");
            return;
        }
        scale_value = num(v);
    }
    s->insert = body;
    Loc loc = it->loc;
    Value *q = sh.q->value, *k = sh.k->value, *v = sh.v->value;
    if (pg) {
        k = paged_view(s, &sh, pg, sh.k, sh.d);
        v = paged_view(s, &sh, pg, sh.v, sh.dv);
    } else if (sq) {
        q = padded_view(s, &sh, sq, sh.q, sq->cu_q, sh.hq, sh.nq);
        k = padded_view(s, &sh, sq, sh.k, sq->cu_k, sh.hkv, sh.nk);
        v = padded_view(s, &sh, sq, sh.v, sq->cu_k, sh.hkv, sh.nk);
    }
    if (!dim_equal(sh.hq, sh.hkv)) {  /* GQA: each kv head serves Hq/Hkv query heads */
        Dim kd[4] = {sh.batch, sh.hq, sh.nk, sh.d}, vd[4] = {sh.batch, sh.hq, sh.nk, sh.dv};
        k = sema_emit(s, sh.k->loc, OP_EXPAND_HEADS, type_shaped(s->a, TY_TENSOR, sh.dtype, 4, kd), k, NULL);
        v = sema_emit(s, sh.v->loc, OP_EXPAND_HEADS, type_shaped(s->a, TY_TENSOR, sh.dtype, 4, vd), v, NULL);
    }
    Dim kt_dims[4] = {sh.batch, sh.hq, sh.d, sh.nk};
    Value *kt_ops[1] = {k};
    Op *kt = sema_emit_op(s, loc, OP_TRANSPOSE, 1, kt_ops, type_shaped(s->a, TY_TENSOR, sh.dtype, 4, kt_dims));
    Attr *perm[4] = {attr_int(s->a, 0), attr_int(s->a, 1), attr_int(s->a, 3), attr_int(s->a, 2)};
    op_set_attr(s->a, kt, "perm", attr_array(s->a, 4, perm));
    Dim s_dims[4] = {sh.batch, sh.hq, sh.nq, sh.nk};
    Type *scores_t = type_shaped(s->a, TY_TENSOR, s->acc, 4, s_dims);
    Value *qk[2] = {q, kt->results[0]};
    Op *mm = sema_emit_op(s, loc, OP_MATMUL, 2, qk, scores_t);
    op_set_attr(s->a, mm, "acc", attr_type(s->a, type_scalar(s->a, s->acc)));
    Value *scores = sema_emit(s, scale ? scale->loc : loc, OP_MUL, scores_t, mm->results[0],
                         sema_emit_constant(s, loc, (Val){VAL_FLOAT, 0, scale_value, NULL}, s->acc));
    Op *hooks[2] = {NULL, NULL};
    const Stmt *hook_stmts[2] = {score, mask};
    bool ok = true;
    for (int h = 0; h < 2; h++) {
        if (!hook_stmts[h])
            continue;
        Value *ops[1] = {scores};
        Type *rt = scores_t;
        hooks[h] = op_create(s->a, h ? OP_MASK : OP_SCORE_MOD, 1, ops, 1, &rt, 1);
        hooks[h]->loc = sema_srcloc(s, hook_stmts[h]->loc);
        ok &= lower_hook(s, hook_stmts[h], hooks[h], h ? HOOK_MASK : HOOK_SCORE);
        block_append(body, hooks[h]);
        scores = hooks[h]->results[0];
    }
    if (!ok)
        return;
    if (layout)
        scores = mask_lengths(s, layout->loc, pg, sq, hooks[1], scores);
    Value *probs = sema_emit(s, loc, OP_SOFTMAX, scores_t, scores, NULL);
    Value *p = sema_emit_cast(s, loc, probs, sh.dtype);
    Dim o_dims[4] = {sh.batch, sh.hq, sh.nq, sh.dv};
    Value *pv[2] = {p, v};
    Op *o = sema_emit_op(s, loc, OP_MATMUL, 2, pv, type_shaped(s->a, TY_TENSOR, sh.dtype, 4, o_dims));
    op_set_attr(s->a, o, "acc", attr_type(s->a, type_scalar(s->a, s->acc)));
    Value *outs[2] = {o->results[0], NULL};
    if (it->noutputs == 2) {
        Value *s32 = sema_emit_cast(s, loc, scores, SK_F32);
        Value *ops[1] = {s32};
        Op *lse = sema_emit_op(s, loc, OP_REDUCE, 1, ops, type_shaped(s->a, TY_TENSOR, SK_F32, 3, o_dims));
        op_set_attr(s->a, lse, "kind", attr_str(s->a, "logsumexp"));
        outs[1] = lse->results[0];
    }
    for (int i = 0; sq && i < it->noutputs; i++) {   /* packed as q is: attn.unpad */
        const Type *t = outs[i]->type;
        Dim packed[3] = {sh.nq, sh.hq, sh.dv};
        Type *pt = i ? type_shaped(s->a, TY_TENSOR, SK_F32, 2, (Dim[]){sh.hq, sh.nq})
                     : type_shaped(s->a, TY_TENSOR, t->elem, 3, packed);
        Value *ops[2] = {outs[i], sq->cu_q->value};
        outs[i] = sema_emit_op(s, sq->st->loc, OP_UNPAD, 2, ops, pt)->results[0];
    }
    for (int i = 0; i < it->noutputs; i++)
        outs[i]->name = it->outputs[i].name;
    emit_return(s, it, outs, it->noutputs);
    warn_unused(s);
}
