/* ir.c — types, attributes, ops, blocks and regions; the builder. */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const OpInfo op_info[OP__COUNT] = {
#define OP(id, name, mino, maxo, nres, nreg, verify, flags) {name, mino, maxo, nres, nreg, flags},
#include "ops.def"
#undef OP
};

OpKind op_kind_from_name(const char *name) {
    for (int k = 0; k < OP__COUNT; k++)
        if (strcmp(op_info[k].name, name) == 0)
            return (OpKind)k;
    return OP__COUNT;
}

/* ---- types ------------------------------------------------------------- */

static const char *const scalar_names[] = {
    [SK_NONE] = "?",    [SK_I1] = "i1",     [SK_I32] = "i32",       [SK_I64] = "i64",
    [SK_INDEX] = "index", [SK_F16] = "f16", [SK_BF16] = "bf16",     [SK_F32] = "f32",
    [SK_F64] = "f64",   [SK_F8E4M3] = "f8e4m3", [SK_F8E5M2] = "f8e5m2",
};

const char *scalar_name(ScalarKind k) { return scalar_names[k]; }

ScalarKind scalar_from_name(const char *name) {
    for (int k = SK_I1; k <= SK_F8E5M2; k++)
        if (strcmp(scalar_names[k], name) == 0)
            return (ScalarKind)k;
    return SK_NONE;
}

bool scalar_is_float(ScalarKind k) { return k >= SK_F16 && k <= SK_F8E5M2; }
bool scalar_is_int(ScalarKind k) { return k == SK_I32 || k == SK_I64 || k == SK_INDEX; }

Type *type_scalar(Arena *a, ScalarKind k) {
    Type *t = NEW(a, Type);
    t->kind = TY_SCALAR;
    t->elem = k;
    return t;
}

Type *type_shaped(Arena *a, TypeKind kind, ScalarKind elem, int rank, const Dim *dims) {
    Type *t = NEW(a, Type);
    t->kind = kind;
    t->elem = elem;
    t->rank = rank;
    t->dims = NEW_ARRAY(a, Dim, rank ? rank : 1);
    if (rank)
        memcpy(t->dims, dims, sizeof(Dim) * (size_t)rank);
    return t;
}

Type *type_with_elem(Arena *a, const Type *t, ScalarKind elem) {
    if (t->kind == TY_SCALAR)
        return type_scalar(a, elem);
    Type *r = type_shaped(a, t->kind, elem, t->rank, t->dims);
    r->space = t->space;
    r->layout = t->layout;
    return r;
}

bool dim_equal(Dim x, Dim y) {
    if (x.sym || y.sym)
        return x.sym && y.sym && strcmp(x.sym, y.sym) == 0;
    return x.size == y.size;
}

bool type_broadcasts_to(const Type *from, const Type *to) {
    if (from->kind == TY_SCALAR)
        return true;
    if (from->kind != to->kind || from->rank > to->rank)
        return false;
    for (int i = 1; i <= from->rank; i++) {
        Dim f = from->dims[from->rank - i], t = to->dims[to->rank - i];
        if (!dim_equal(f, t) && !(f.sym == NULL && f.size == 1))
            return false;
    }
    return true;
}

bool type_equal(const Type *x, const Type *y) {
    if (x == y)
        return true;
    if (!x || !y || x->kind != y->kind || x->elem != y->elem || x->rank != y->rank)
        return false;
    for (int i = 0; i < x->rank; i++)
        if (!dim_equal(x->dims[i], y->dims[i]))
            return false;
    if (x->kind == TY_MEMREF && x->space != y->space)
        return false;
    if (x->kind == TY_FRAG && strcmp(x->layout, y->layout) != 0)
        return false;
    return true;
}

void print_dim(FILE *f, Dim d) {
    if (d.sym)
        fputs(d.sym, f);
    else
        fprintf(f, "%lld", (long long)d.size);
}

static void print_shape(FILE *f, const Type *t) {
    fprintf(f, "%s[", scalar_name(t->elem));
    for (int i = 0; i < t->rank; i++) {
        if (i)
            fputs(", ", f);
        print_dim(f, t->dims[i]);
    }
    fputc(']', f);
}

static void print_string(FILE *f, const char *s);

void print_type(FILE *f, const Type *t) {
    static const char *const spaces[] = {"global", "shared", "register"};
    switch (t->kind) {
    case TY_SCALAR: fputs(scalar_name(t->elem), f); return;
    case TY_TENSOR: fputs("tensor<", f); print_shape(f, t); fputc('>', f); return;
    case TY_TILE: fputs("tile<", f); print_shape(f, t); fputc('>', f); return;
    case TY_MEMREF:
        fputs("memref<", f);
        print_shape(f, t);
        fprintf(f, ", %s>", spaces[t->space]);
        return;
    case TY_FRAG:
        fputs("frag<", f);
        print_shape(f, t);
        fputs(", ", f);
        print_string(f, t->layout);
        fputc('>', f);
        return;
    case TY_TOKEN: fputs("token", f); return;
    case TY_MBARRIER: fputs("mbarrier", f); return;
    }
    unreachable();
}

/* ---- attributes -------------------------------------------------------- */

static Attr *attr_new(Arena *a, AttrKind k) {
    Attr *attr = NEW(a, Attr);
    attr->kind = k;
    return attr;
}

Attr *attr_int(Arena *a, int64_t v) { Attr *x = attr_new(a, AT_INT); x->i = v; return x; }
Attr *attr_float(Arena *a, double v) { Attr *x = attr_new(a, AT_FLOAT); x->f = v; return x; }
Attr *attr_bool(Arena *a, bool v) { Attr *x = attr_new(a, AT_BOOL); x->i = v; return x; }
Attr *attr_str(Arena *a, const char *s) { Attr *x = attr_new(a, AT_STR); x->s = s; return x; }
Attr *attr_type(Arena *a, Type *t) { Attr *x = attr_new(a, AT_TYPE); x->type = t; return x; }
Attr *attr_dict(Arena *a) { return attr_new(a, AT_DICT); }

Attr *attr_array(Arena *a, int n, Attr **elems) {
    Attr *x = attr_new(a, AT_ARRAY);
    x->n = n;
    x->elems = NEW_ARRAY(a, Attr *, n ? n : 1);
    if (n)
        memcpy(x->elems, elems, sizeof(Attr *) * (size_t)n);
    return x;
}

/* Named attributes are kept sorted by name: one canonical order to print. */
void attrs_set(Arena *a, NamedAttr **list, int *n, const char *name, Attr *value) {
    int i = 0;
    while (i < *n && strcmp((*list)[i].name, name) < 0)
        i++;
    if (i < *n && strcmp((*list)[i].name, name) == 0) {
        (*list)[i].value = value;
        return;
    }
    NamedAttr *grown = NEW_ARRAY(a, NamedAttr, *n + 1);
    if (i)
        memcpy(grown, *list, sizeof(NamedAttr) * (size_t)i);
    grown[i] = (NamedAttr){arena_strdup(a, name), value};
    if (*n > i)
        memcpy(grown + i + 1, *list + i, sizeof(NamedAttr) * (size_t)(*n - i));
    *list = grown;
    (*n)++;
}

Attr *attrs_get(NamedAttr *list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].name, name) == 0)
            return list[i].value;
    return NULL;
}

void print_float(FILE *f, double v) {
    if (isnan(v)) { fputs("nan", f); return; }
    if (isinf(v)) { fputs(v < 0 ? "-inf" : "inf", f); return; }
    /* Plain decimals for everyday magnitudes (30.0, 0.125), exponents
     * otherwise (1e-05); always the fewest digits that read back exactly. */
    char buf[64];
    bool plain = fabs(v) >= 1e-4 && fabs(v) < 1e16;
    for (int prec = plain ? 0 : 1; prec <= (plain ? 21 : 17); prec++) {
        snprintf(buf, sizeof buf, plain ? "%.*f" : "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, f);
    if (!strpbrk(buf, ".e"))
        fputs(".0", f);   /* keep it a float when read back */
}

static void print_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 32 || *p >= 127)
            fprintf(f, "\\%02X", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void print_named_attrs(FILE *f, const NamedAttr *list, int n) {
    fputc('{', f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s%s = ", i ? ", " : "", list[i].name);
        print_attr(f, list[i].value);
    }
    fputc('}', f);
}

void print_attr(FILE *f, const Attr *attr) {
    switch (attr->kind) {
    case AT_INT: fprintf(f, "%lld", (long long)attr->i); return;
    case AT_FLOAT: print_float(f, attr->f); return;
    case AT_BOOL: fputs(attr->i ? "true" : "false", f); return;
    case AT_STR: print_string(f, attr->s); return;
    case AT_TYPE: print_type(f, attr->type); return;
    case AT_ARRAY:
        fputc('[', f);
        for (int i = 0; i < attr->n; i++) {
            if (i)
                fputs(", ", f);
            print_attr(f, attr->elems[i]);
        }
        fputc(']', f);
        return;
    case AT_DICT: print_named_attrs(f, attr->entries, attr->n); return;
    }
    unreachable();
}

/* Exposed to print.c through a tiny declaration there. */
void print_attr_dict(FILE *f, const NamedAttr *list, int n) { print_named_attrs(f, list, n); }
void print_quoted(FILE *f, const char *s) { print_string(f, s); }

/* ---- ops --------------------------------------------------------------- */

Op *op_create(Arena *a, OpKind kind, int noperands, Value **operands, int nresults,
              Type **result_types, int nregions) {
    Op *op = NEW(a, Op);
    op->kind = kind;
    op->noperands = noperands;
    op->operands = NEW_ARRAY(a, Value *, noperands ? noperands : 1);
    if (noperands)
        memcpy(op->operands, operands, sizeof(Value *) * (size_t)noperands);
    op->nresults = nresults;
    op->results = NEW_ARRAY(a, Value *, nresults ? nresults : 1);
    for (int i = 0; i < nresults; i++) {
        Value *v = NEW(a, Value);
        v->type = result_types[i];
        v->def = op;
        v->index = i;
        op->results[i] = v;
    }
    op->nregions = nregions;
    op->regions = NEW_ARRAY(a, Region, nregions ? nregions : 1);
    for (int i = 0; i < nregions; i++)
        op->regions[i].parent = op;
    return op;
}

void op_set_attr(Arena *a, Op *op, const char *name, Attr *value) {
    attrs_set(a, &op->attrs, &op->nattrs, name, value);
}

Attr *op_attr(const Op *op, const char *name) { return attrs_get(op->attrs, op->nattrs, name); }

bool gemm_weight_transposed(const Op *g, int i) {
    Attr *tr = op_attr(g, "b_transposed");
    return tr && tr->kind == AT_ARRAY && i < tr->n && tr->elems[i]->kind == AT_INT && tr->elems[i]->i;
}

bool op_reads_result_of(const Op *op, OpKind kind) {
    for (int i = 0; i < op->noperands; i++)
        if (op->operands[i]->def && op->operands[i]->def->kind == kind)
            return true;
    return false;
}

bool block_holds(const Block *blk, OpKind kind, const char *name, const char *value) {
    for (const Op *op = blk->first; op; op = op->next) {
        Attr *at = op->kind == kind ? op_attr(op, name) : NULL;
        if (at && at->kind == AT_STR && strcmp(at->s, value) == 0)
            return true;
        for (int r = 0; r < op->nregions; r++)
            for (int b = 0; b < op->regions[r].nblocks; b++)
                if (block_holds(op->regions[r].blocks[b], kind, name, value))
                    return true;
    }
    return false;
}

Block *region_add_block(Arena *a, Region *r) {
    Block **blocks = NEW_ARRAY(a, Block *, r->nblocks + 1);
    if (r->nblocks)
        memcpy(blocks, r->blocks, sizeof(Block *) * (size_t)r->nblocks);
    Block *b = NEW(a, Block);
    b->parent = r;
    blocks[r->nblocks++] = b;
    r->blocks = blocks;
    return b;
}

Value *block_add_arg(Arena *a, Block *b, Type *type, const char *name) {
    Value **args = NEW_ARRAY(a, Value *, b->nargs + 1);
    if (b->nargs)
        memcpy(args, b->args, sizeof(Value *) * (size_t)b->nargs);
    Value *v = NEW(a, Value);
    v->type = type;
    v->owner = b;
    v->index = b->nargs;
    v->name = name;
    args[b->nargs++] = v;
    b->args = args;
    return v;
}

void block_append(Block *b, Op *op) {
    op->parent = b;
    op->prev = b->last;
    op->next = NULL;
    if (b->last)
        b->last->next = op;
    else
        b->first = op;
    b->last = op;
}

Block *op_body(const Op *op) {
    if (op->nregions < 1 || op->regions[0].nblocks < 1)
        return NULL;
    return op->regions[0].blocks[0];
}

Op *module_create(Arena *a) {
    Op *m = op_create(a, OP_MODULE, 0, NULL, 0, NULL, 1);
    region_add_block(a, &m->regions[0]);
    return m;
}

bool op_is_scalar_math(const Op *op) {
    return op->kind != OP_LOAD && (op_info[op->kind].flags & OPF_PURE) && op->nresults == 1 &&
           op->results[0]->type->kind == TY_SCALAR;
}

/* ---- rewriting ----------------------------------------------------------- */

void op_unlink(Op *op) {
    Block *b = op->parent;
    if (op->prev)
        op->prev->next = op->next;
    else
        b->first = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        b->last = op->prev;
    op->prev = op->next = NULL;
    op->parent = NULL;
}

void op_insert_before(Op *anchor, Op *op) {
    Block *b = anchor->parent;
    op->parent = b;
    op->next = anchor;
    op->prev = anchor->prev;
    if (anchor->prev)
        anchor->prev->next = op;
    else
        b->first = op;
    anchor->prev = op;
}

void count_uses(const Op *root, Map *uses, Arena *a) {
    for (int i = 0; i < root->noperands; i++) {
        intptr_t n = (intptr_t)map_get(uses, root->operands[i]);
        map_put(a, uses, root->operands[i], (void *)(n + 1));
    }
    for (int r = 0; r < root->nregions; r++)
        for (int b = 0; b < root->regions[r].nblocks; b++)
            for_each_op(op, root->regions[r].blocks[b]) count_uses(op, uses, a);
}

void replace_all_uses(Op *root, const Value *from, Value *to) {
    for (int i = 0; i < root->noperands; i++)
        if (root->operands[i] == from)
            root->operands[i] = to;
    for (int r = 0; r < root->nregions; r++)
        for (int b = 0; b < root->regions[r].nblocks; b++)
            for_each_op(op, root->regions[r].blocks[b]) replace_all_uses(op, from, to);
}

void region_take(Region *to, Region *from) {
    to->nblocks = from->nblocks;
    to->blocks = from->blocks;
    for (int b = 0; b < to->nblocks; b++)
        to->blocks[b]->parent = to;
    from->nblocks = 0;
    from->blocks = NULL;
}

/* ---- copying ------------------------------------------------------------ */

static Value *mapped(const Map *map, Value *v) {
    Value *to = map_get(map, v);
    return to ? to : v;
}

Op *op_clone(Arena *a, const Op *op, Map *map) {
    Value **ops = NEW_ARRAY(a, Value *, op->noperands ? op->noperands : 1);
    for (int i = 0; i < op->noperands; i++)
        ops[i] = mapped(map, op->operands[i]);
    Type **types = NEW_ARRAY(a, Type *, op->nresults ? op->nresults : 1);
    for (int i = 0; i < op->nresults; i++)
        types[i] = op->results[i]->type;
    Op *c = op_create(a, op->kind, op->noperands, ops, op->nresults, types, op->nregions);
    for (int i = 0; i < op->nresults; i++) {
        c->results[i]->name = op->results[i]->name;
        map_put(a, map, op->results[i], c->results[i]);
    }
    for (int i = 0; i < op->nattrs; i++)
        op_set_attr(a, c, op->attrs[i].name, op->attrs[i].value);
    for (int r = 0; r < op->nregions; r++)
        region_clone(a, &c->regions[r], &op->regions[r], map);
    c->loc = op->loc;
    return c;
}

void region_clone(Arena *a, Region *to, const Region *from, Map *map) {
    for (int bi = 0; bi < from->nblocks; bi++) {
        const Block *src = from->blocks[bi];
        Block *dst = region_add_block(a, to);
        for (int i = 0; i < src->nargs; i++)
            map_put(a, map, src->args[i], block_add_arg(a, dst, src->args[i]->type, src->args[i]->name));
        for_each_op(op, src) block_append(dst, op_clone(a, op, map));
    }
}

const Value *token_buffer(const Value *tok) {
    for (int depth = 0; tok && depth < 64; depth++) {
        const Op *d = tok->def;
        if (d && d->kind == OP_COPY_ASYNC)
            return d->operands[1];
        if (d && d->kind == OP_FOR)   /* a loop's result: what it was given */
            tok = d->operands[3 + tok->index];
        else if (!d && tok->owner && tok->owner->parent && tok->owner->parent->parent &&
                 tok->owner->parent->parent->kind == OP_FOR && tok->index > 0)   /* a loop body's argument */
            tok = tok->owner->parent->parent->operands[3 + tok->index - 1];
        else
            return NULL;
    }
    return NULL;
}
