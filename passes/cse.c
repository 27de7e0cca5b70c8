/* cse.c — common subexpression elimination: a pure op equal to one before it
 * in the same or an enclosing block (same kind, operands, attributes and
 * result types) is replaced by that one. Mostly constants and index
 * arithmetic that the lowering passes make more than once.
 *
 *   %1 = arith.constant {value = 64} : index        %1 = arith.constant {value = 64} : index
 *   %2 = arith.mul(%pid_x, %1) : index        ==>   %2 = arith.mul(%pid_x, %1) : index
 *   %3 = arith.constant {value = 64} : index        %4 = arith.mul(%pid_y, %1) : index
 *   %4 = arith.mul(%pid_y, %3) : index
 *
 * Requires: verified IR. Guarantees: the same values. Loads are left alone
 * (memory they read may change between them: stores, async copies), as are
 * ops with regions; names restart inside isolated ops (launches).
 */
#include "passes/passes.h"

#include <stdio.h>

typedef struct Scope {
    Map ops;               /* key -> Value* */
    struct Scope *parent;
} Scope;

static const char *key_of(Arena *a, const Op *op, bool with_attrs) {
    StrBuf b;
    strbuf_open(&b);
    fprintf(b.f, "%d|", (int)op->kind);
    for (int i = 0; i < op->noperands; i++)
        fprintf(b.f, "%p,", (void *)op->operands[i]);
    fputc('|', b.f);
    for (int i = 0; with_attrs && i < op->nattrs; i++) {
        fprintf(b.f, "%s=", op->attrs[i].name);
        print_attr(b.f, op->attrs[i].value);
        fputc(';', b.f);
    }
    fputc('|', b.f);
    print_type(b.f, op->results[0]->type);
    return strbuf_finish(&b, a, NULL);
}

static bool eligible(const Op *op) {
    return (op_info[op->kind].flags & OPF_PURE) && op->nresults == 1 && op->nregions == 0 &&
           op->kind != OP_LOAD && op->kind != OP_GATHER;
}

static Value *lookup(Scope *s, const char *key) {
    for (; s; s = s->parent) {
        Value *v = map_get(&s->ops, key);
        if (v)
            return v;
    }
    return NULL;
}

/* Every op is visited once, in order, and a value is defined before its
 * uses (in the same or an enclosed block): so a removed op's uses are
 * redirected as they are visited, through `same` (removed value -> the one
 * kept), not by a walk of the whole module per removal, which made cse
 * quadratic (30 s for a block of 1,600 statements). */
static void cse_block(Arena *a, Block *blk, Scope *parent, Map *same, bool with_attrs) {
    Scope scope = {.parent = parent};
    map_init(&scope.ops, true);
    for (Op *op = blk->first, *next; op; op = next) {
        next = op->next;
        for (int i = 0; i < op->noperands; i++) {
            Value *to = map_get(same, op->operands[i]);
            if (to)
                op->operands[i] = to;
        }
        if (eligible(op)) {
            const char *key = key_of(a, op, with_attrs);
            Value *kept = lookup(&scope, key);
            if (kept) {
                map_put(a, same, op->results[0], kept);
                op_unlink(op);
                continue;
            }
            map_put(a, &scope.ops, key, op->results[0]);
        }
        bool isolated = op_info[op->kind].flags & OPF_ISOLATED;
        for (int r = 0; r < op->nregions; r++)
            for (int b = 0; b < op->regions[r].nblocks; b++)
                cse_block(a, op->regions[r].blocks[b], isolated ? NULL : &scope, same, with_attrs);
    }
}

static bool run(Op *module, PassContext *ctx, bool with_attrs) {
    Map same;
    map_init(&same, false);
    cse_block(ctx->arena, op_body(module), NULL, &same, with_attrs);
    return true;
}

bool pass_cse(Op *module, PassContext *ctx) { return run(module, ctx, true); }

/* The broken twin: ops compared without their attributes, so constants of
 * one type are all merged into the first. */
bool pass_test_cse_ignore_attrs(Op *module, PassContext *ctx) { return run(module, ctx, false); }
