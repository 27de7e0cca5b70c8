/* sema.h — what the files of the checker share (frontend/sema*.c): the
 * values it sees, its symbols and its state. Internal to the frontend;
 * frontend.h is the interface. */
#ifndef ATTNC_SEMA_H
#define ATTNC_SEMA_H

#include "frontend/frontend.h"

/* ---- values seen by the checker ----------------------------------------- */

typedef enum ValKind { VAL_ERROR, VAL_INT, VAL_FLOAT, VAL_BOOL, VAL_IR } ValKind;

typedef struct Val {
    ValKind kind;
    int64_t i;     /* VAL_INT, VAL_BOOL */
    double f;      /* VAL_FLOAT */
    Value *v;      /* VAL_IR */
} Val;

static const Val ERROR_VAL = {VAL_ERROR, 0, 0, NULL};

typedef enum SymKind { SYM_INPUT, SYM_LOCAL, SYM_OUTPUT, SYM_HOOK_VAR } SymKind;

typedef struct Symbol {
    SymKind kind;
    const char *name;
    Loc loc;            /* where it was defined */
    Value *value;       /* NULL for an output not yet assigned */
    const Param *param; /* inputs and outputs */
    bool attention_operand;  /* q, k, v of an attention block */
    bool used;
} Symbol;

typedef struct ConstDef {
    Val val;
    Loc loc;
} ConstDef;

typedef enum HookKind { NO_HOOK, HOOK_MASK, HOOK_SCORE } HookKind;

typedef struct Sema {
    Arena *a;
    Diag *d;
    const Source *src;
    Op *module;
    Map consts;     /* name -> ConstDef */
    Map blocks;     /* name -> Op (builtin.func) */
    Map items;      /* name -> Item */
    /* the block being checked */
    Map syms;       /* name -> Symbol */
    PtrVec sym_list;
    Map dims;       /* dimension name -> (void *)1: names seen in the block's types */
    Block *insert;  /* where ops go; NULL in a constant context */
    const char *const_context;  /* what needs a constant, for the message */
    HookKind hook;
    Map hook_vars;  /* name -> Value* while lowering a hook */
    ScalarKind acc;
    int block_errors;   /* errors reported before this block */
    bool incomplete;    /* the block lost a statement to a syntax error */
    int depth;          /* of expression nesting */
    bool too_deep;      /* reported that once */
    const Map *overrides;  /* constants replaced from the command line */
} Sema;

static inline const char *hook_name(HookKind h) { return h == HOOK_MASK ? "mask" : "score"; }

static inline Val ir_val(Value *v) { return (Val){VAL_IR, 0, 0, v}; }
static inline double num(Val v) { return v.kind == VAL_FLOAT ? v.f : (double)v.i; }
static inline bool is_num_const(Val v) { return v.kind == VAL_INT || v.kind == VAL_FLOAT; }

/* sema.c: messages in the DSL's spelling, emitting ops, shapes and dtypes,
 * constant folding */
const char *sema_type_text(Sema *s, const Type *t);
const char *sema_dim_text(Sema *s, Dim d);
const char *sema_val_text(Sema *s, Val v);
bool sema_can_emit(Sema *s, Loc loc);   /* false (reported) in a constant context */
/* A position in the file being compiled, as ops and attributes carry it
 * (lines counted from the file's start when it is one chunk of several). */
static inline SrcLoc sema_srcloc(const Sema *s, Loc loc) {
    return (SrcLoc){s->src->name, loc.line + s->src->line_offset, loc.col};
}
Op *sema_emit_op(Sema *s, Loc loc, OpKind kind, int n, Value **operands, Type *result);
Value *sema_emit(Sema *s, Loc loc, OpKind kind, Type *result, Value *x, Value *y);
Value *sema_emit_constant(Sema *s, Loc loc, Val c, ScalarKind k);
Value *sema_emit_cast(Sema *s, Loc loc, Value *v, ScalarKind to);
ScalarKind sema_promote(ScalarKind x, ScalarKind y);
bool sema_broadcast(Sema *s, const Type *x, const Type *y, int *rank, Dim **dims);
Type *sema_result_type(Sema *s, const Type *x, const Type *y, ScalarKind elem, Loc loc, bool *ok);
Val sema_fold_binary(Sema *s, BinOp op, Val x, Val y, Loc loc);

/* sema_expr.c: names and expressions */
Symbol *sema_lookup_sym(Sema *s, const char *name);
Symbol *sema_define_sym(Sema *s, SymKind kind, const char *name, Loc loc);
Value *sema_materialize(Sema *s, Loc loc, Val c, ScalarKind k);
ScalarKind sema_val_elem(Val v);
ScalarKind sema_meet(Val x, Val y);
bool sema_need_bool(Sema *s, Val v, const Expr *e, const char *what);
Value *sema_float_operand(Sema *s, const Expr *e, Val x);
Val sema_lower_expr(Sema *s, const Expr *e);
Val sema_const_expr(Sema *s, const Expr *e, const char *context);

/* sema_blocks.c: declarations, mlp and attention blocks */
void sema_begin_block(Sema *s);
Op *sema_new_func(Sema *s, const Item *it, const char *kind);
void sema_lower_mlp(Sema *s, const Item *it, Op *func);
void sema_lower_attention(Sema *s, const Item *it, Op *func);

/* sema_schedule.c: schedule items */
void sema_lower_schedule(Sema *s, const Item *it);

#endif
