/* ir.h — attnc's one IR core, shared by every level (attn, tile, nv).
 *
 *   ir.c       types, attributes, ops, blocks, regions, the builder
 *   print.c    the generic textual form
 *   parse.c    reading the textual form back (print → parse → print is exact)
 *   verify.c   structural rules and the per-op rules named in ops.def
 *
 * An op has a dialect-qualified name, operands, results, sorted named
 * attributes and regions of blocks; blocks have arguments and a list of ops.
 * Everything lives in the Arena of the compilation. See doc/ir.md.
 */
#ifndef ATTNC_IR_H
#define ATTNC_IR_H

#include "support/support.h"

/* ---- types ------------------------------------------------------------- */

typedef enum ScalarKind {
    SK_NONE,
    SK_I1, SK_I32, SK_I64, SK_INDEX,
    SK_F16, SK_BF16, SK_F32, SK_F64,
    SK_F8E4M3, SK_F8E5M2,       /* reserved: parse and print, no kernels yet */
} ScalarKind;

typedef enum TypeKind {
    TY_SCALAR,   /* f16, i32, index, ...                                  */
    TY_TENSOR,   /* tensor<f16[B, 32, N, 128]>: a whole value, attn level  */
    TY_TILE,     /* tile<f32[128, 64]>: a block of a tensor in registers   */
    TY_MEMREF,   /* memref<f16[2, 128, 64], shared>: a buffer in a space   */
    TY_FRAG,     /* frag<f16[4], "m8n8k4.a.row">: one thread's MMA piece   */
    TY_TOKEN,    /* token: completion of an async copy                     */
    TY_MBARRIER, /* mbarrier: a shared-memory transaction barrier          */
} TypeKind;

typedef enum AddrSpace { AS_GLOBAL, AS_SHARED, AS_REGISTER } AddrSpace;

/* A dimension: concrete (sym == NULL) or symbolic, bound at run time. */
typedef struct Dim {
    const char *sym;
    int64_t size;
} Dim;

typedef struct Type {
    TypeKind kind;
    ScalarKind elem;      /* element type (the type itself for scalars) */
    int rank;
    Dim *dims;
    AddrSpace space;      /* memref */
    const char *layout;   /* frag */
} Type;

Type *type_scalar(Arena *a, ScalarKind k);
Type *type_shaped(Arena *a, TypeKind kind, ScalarKind elem, int rank, const Dim *dims);
Type *type_with_elem(Arena *a, const Type *t, ScalarKind elem);
bool type_equal(const Type *x, const Type *y);
bool dim_equal(Dim x, Dim y);
/* numpy broadcasting: `from` fits into `to` when trailing dims agree or are 1 (a scalar fits anything) */
bool type_broadcasts_to(const Type *from, const Type *to);
bool scalar_is_float(ScalarKind k);
bool scalar_is_int(ScalarKind k);     /* i32, i64, index (not i1) */
const char *scalar_name(ScalarKind k);
ScalarKind scalar_from_name(const char *name);  /* SK_NONE if unknown */
void print_type(FILE *f, const Type *t);
void print_dim(FILE *f, Dim d);

/* ---- attributes -------------------------------------------------------- */

typedef enum AttrKind { AT_INT, AT_FLOAT, AT_BOOL, AT_STR, AT_TYPE, AT_ARRAY, AT_DICT } AttrKind;

/* An op's source position: the .attn location it came from. */
typedef struct SrcLoc {
    const char *file;
    int line, col;
} SrcLoc;

typedef struct Attr Attr;
typedef struct NamedAttr {
    const char *name;
    Attr *value;
} NamedAttr;

struct Attr {
    AttrKind kind;
    int64_t i;           /* AT_INT, AT_BOOL */
    double f;            /* AT_FLOAT */
    const char *s;       /* AT_STR */
    Type *type;          /* AT_TYPE */
    int n;               /* AT_ARRAY, AT_DICT */
    Attr **elems;        /* AT_ARRAY */
    NamedAttr *entries;  /* AT_DICT, sorted by name */
    /* where in the .attn source it was written, for messages (a block's
     * schedule for a target and each directive's value); never printed */
    SrcLoc loc;
};

Attr *attr_int(Arena *a, int64_t v);
Attr *attr_float(Arena *a, double v);
Attr *attr_bool(Arena *a, bool v);
Attr *attr_str(Arena *a, const char *s);
Attr *attr_type(Arena *a, Type *t);
Attr *attr_array(Arena *a, int n, Attr **elems);
Attr *attr_dict(Arena *a);
/* Sets key in a sorted list of named attributes (an op's, or a dict's). */
void attrs_set(Arena *a, NamedAttr **list, int *n, const char *name, Attr *value);
Attr *attrs_get(NamedAttr *list, int n, const char *name);
void print_attr(FILE *f, const Attr *attr);
void print_float(FILE *f, double v);   /* shortest text that reads back exactly */

/* ---- values, ops, blocks, regions ------------------------------------- */

typedef enum OpKind {
#define OP(id, name, mino, maxo, nres, nreg, verify, flags) OP_##id,
#include "ops.def"
#undef OP
    OP__COUNT
} OpKind;

enum { OPF_TERMINATOR = 1, OPF_ISOLATED = 2, OPF_PURE = 4, OPF_ELEMENTWISE = 8, OPF_INDEX = 16, OPF_PREDICATE = 32 };

typedef struct OpInfo {
    const char *name;
    int min_operands, max_operands, results, regions, flags;
} OpInfo;
extern const OpInfo op_info[OP__COUNT];
OpKind op_kind_from_name(const char *name);  /* OP__COUNT if unknown */
static inline bool op_kind_has(OpKind k, int flags) { return (op_info[k].flags & flags) != 0; }

typedef struct Op Op;
typedef struct Block Block;
typedef struct Region Region;

typedef struct Value {
    Type *type;
    Op *def;           /* defining op, or NULL for a block argument */
    Block *owner;      /* block of a block argument */
    int index;         /* result or argument number */
    const char *name;  /* name hint for the printer (NULL: numbered) */
} Value;

struct Region {
    Op *parent;
    int nblocks;
    Block **blocks;
};

struct Block {
    Region *parent;
    int nargs;
    Value **args;
    Op *first, *last;
};

struct Op {
    OpKind kind;
    int noperands, nresults, nattrs, nregions;
    Value **operands;
    Value **results;
    NamedAttr *attrs;
    Region *regions;
    SrcLoc loc;        /* where in the .attn source it came from (printed by loc(...)) */
    Loc text_loc;      /* where in IR text it was parsed from (never printed) */
    Block *parent;
    Op *prev, *next;
};

/* Checks attribute `at` (named nv.*) of op against ir/nv_attrs.def for the
 * module's target (NULL: not nv IR). On failure writes why into msg. */
bool nv_attr_check(const Op *op, const NamedAttr *at, const char *target, char *msg, size_t size);

/* Builder. */
Op *op_create(Arena *a, OpKind kind, int noperands, Value **operands, int nresults,
              Type **result_types, int nregions);
void op_set_attr(Arena *a, Op *op, const char *name, Attr *value);
Attr *op_attr(const Op *op, const char *name);
/* Whether attn.fused_gemm g reads its weight i as an [N, K] matrix
 * transposed (b_transposed[i] = 1, x @ transpose(w)). */
bool gemm_weight_transposed(const Op *g, int i);
/* Whether blk, or a block nested in one of its ops, holds an op of `kind`
 * whose string attribute `name` is `value`. */
bool block_holds(const Block *blk, OpKind kind, const char *name, const char *value);
/* Whether one of op's operands is a result of an op of `kind`. */
bool op_reads_result_of(const Op *op, OpKind kind);
/* Whether op computes one scalar from its operands alone, touching no memory
 * (index arithmetic, constants): code may move across it. */
bool op_is_scalar_math(const Op *op);
Block *region_add_block(Arena *a, Region *r);
Value *block_add_arg(Arena *a, Block *b, Type *type, const char *name);
void block_append(Block *b, Op *op);
/* Rewriting. */
void op_unlink(Op *op);                       /* out of its block */
void op_insert_before(Op *anchor, Op *op);
/* Counts the uses of every value under root: Value* -> (void *)(intptr_t)count. */
void count_uses(const Op *root, Map *uses, Arena *a);
/* Replaces every use of `from` under root with `to`. */
void replace_all_uses(Op *root, const Value *from, Value *to);
/* Moves the blocks of `from` into `to` (which must have none). */
void region_take(Region *to, Region *from);
/* Copies op (its regions too); operands found in `map` (Value* -> Value*)
 * are replaced, and each copied result and block argument is added to it. */
Op *op_clone(Arena *a, const Op *op, Map *map);
/* Copies the blocks of `from` into `to` (which must have none), as op_clone. */
void region_clone(Arena *a, Region *to, const Region *from, Map *map);

/* The buffer (tile.copy_async's destination) that the copy behind a token
 * fills, followed through the tile.for loops that carry the token (their
 * results and block arguments), or NULL. */
const Value *token_buffer(const Value *tok);

/* The single block of a module or func body. */
Block *op_body(const Op *op);
Op *module_create(Arena *a);

#define for_each_op(op, block) for (Op *op = (block)->first; op; op = op->next)

/* ---- print.c / parse.c / verify.c -------------------------------------- */

typedef struct PrintOptions {
    bool locations;    /* append loc("file":line:col) to every op */
} PrintOptions;
void ir_print(FILE *f, const Op *op, PrintOptions opts);
char *ir_print_to_string(Arena *a, const Op *op, PrintOptions opts, size_t *len);

/* Parses the textual form; diagnostics go to d with file:line:col. */
Op *ir_parse(Arena *a, Diag *d, const Source *src);

/* Checks structure and every op's rule. An error points at the op's place in
 * `text` (the IR it was parsed from) or at its .attn location, whichever is
 * known; `text` may be NULL. Returns the number of errors. */
int ir_verify(Op *root, Diag *d, const Source *text);

/* Reports msg as an error at op's best-known position: where it was parsed
 * in `text` (may be NULL), else its .attn location, else none. */
void op_diag(Diag *d, const Source *text, const Op *op, const char *msg);
/* A note at a source position (an attribute's loc), as op_diag places its
 * messages. */
void srcloc_note(Diag *d, SrcLoc at, const char *msg);
/* The same as a warning. */
void op_warn(Diag *d, const Source *text, const Op *op, const char *msg);

/* print → parse → print must give identical text; false and a message if not. */
bool ir_roundtrip_check(Arena *a, const Op *root, PrintOptions opts, Diag *d);

#endif
