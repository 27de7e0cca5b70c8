/* tiling.c — fused ops become tile kernels: a grid of programs, each owning
 * a tile of the output, with loops over the reduction.
 *
 * attn.fused_gemm (A [M, K] by weights [K, N]): a program per BM x BN output
 * tile; a loop over K in steps of BK accumulating one tile per product; the
 * epilogue region applied to whole tiles; one store.
 *
 *   %y = attn.fused_gemm(%x, %w, %b) ({...})   ==>
 *   %gx = ... ceil(N / BN) ...; %y = tile.launch(%gx, %gy, %c1, %x, %w, %b) ({
 *   ^bb0(%px: index, %py: index, %pz: index, %X: memref<...>, ..., %Y: memref<...>):
 *     %acc = tile.for(%c0, %K, %BK, %zero) ({ load A, load W, tile.dot ... })
 *     ... the epilogue on tiles ...; tile.store(%Y, %out, %m0, %n0) {dims = [0, 1]}
 *   })
 *
 * attn.attention: a program per BM query rows of one (batch, head); the
 * softmax over the tiled key axis is computed exactly as written, in three
 * loops over BN-key tiles (row max; row sum of exp; P·V with P normalised),
 * recomputing the scores in each, tagged {softmax = "max" | "sum" | "pv"};
 * each loop may come as a chain of segments (masked edge, unmasked interior,
 * masked edge) when mask-analysis found an exact band.
 * The online-softmax pass fuses the three into one. Key columns past the end are masked to -inf, rows past the end
 * are computed and not stored; a row with no visible key gives 0 and -inf.
 *
 * With a band from mask-analysis, each program's key loops run only over
 * the tiles its rows can see (a causal mask halves the work).
 *
 * Any other elementwise op, reduction or softmax over the last axis (on rank
 * 1 or 2 tensors with a numeric last dimension, as in an RMSNorm) becomes a
 * row kernel: a program per 16 rows holding whole rows.
 *
 * Tile sizes: the block's schedule for the target, else the target's default.
 * Requires: fused ops (passes/fusion.c); fused_gemm with a rank-2 A (others
 * stay as they are). Guarantees: the same values up to the order of the
 * softmax's additions (checked by the interpreter).
 */
#include "passes/tiling.h"

#include <math.h>
#include <string.h>

/* tile.load / tile.store of a box at `index` (one per memref dim); dims[a]
 * is the memref dim of tile axis a, -1 for a broadcast axis of size 1. */
Value *t_load(Builder *b, Value *mem, Value **index, const int *dims, Type *t, double pad) {
    int n = mem->type->rank;
    Value **ops = NEW_ARRAY(b->a, Value *, n + 1);
    ops[0] = mem;
    memcpy(ops + 1, index, sizeof(Value *) * (size_t)n);
    Value *r = b_emit(b, OP_LOAD, t, n + 1, ops);
    Attr *d[2] = {attr_int(b->a, dims[0]), attr_int(b->a, dims[1])};
    op_set_attr(b->a, r->def, "dims", attr_array(b->a, 2, d));
    if (pad != 0)
        op_set_attr(b->a, r->def, "pad", attr_float(b->a, pad));
    return r;
}

/* tile.store or tile.atomic_add (kind) of tile into mem at index: its rows
 * along memref dimension dims[0], its columns along dims[1]. */
static void write_box(Builder *b, OpKind kind, Value *mem, Value *tile, Value **index, const int *dims) {
    int n = mem->type->rank;
    Value **ops = NEW_ARRAY(b->a, Value *, n + 2);
    ops[0] = mem;
    ops[1] = tile;
    memcpy(ops + 2, index, sizeof(Value *) * (size_t)n);
    Op *op = op_create(b->a, kind, n + 2, ops, 0, NULL, 0);
    op->loc = b->loc;
    Attr *d[2] = {attr_int(b->a, dims[0]), attr_int(b->a, dims[1])};
    op_set_attr(b->a, op, "dims", attr_array(b->a, 2, d));
    block_append(b->blk, op);
}

void t_store(Builder *b, Value *mem, Value *tile, Value **index, const int *dims) {
    write_box(b, OP_STORE, mem, tile, index, dims);
}

void t_atomic_add(Builder *b, Value *mem, Value *tile, Value **index, const int *dims) {
    write_box(b, OP_ATOMIC_ADD, mem, tile, index, dims);
}

/* A t_store that writes no element at or past `bound` along memref
 * dimension bound_dim (tile.store's 'bound'). */
void t_store_bounded(Builder *b, Value *mem, Value *tile, Value **index, const int *dims, int bound_dim,
                     Value *bound) {
    t_store(b, mem, tile, index, dims);
    if (tiling_sequences_unbounded)   /* the broken twin */
        return;
    Op *op = b->blk->last;
    Value **ops = NEW_ARRAY(b->a, Value *, op->noperands + 1);
    memcpy(ops, op->operands, sizeof(Value *) * (size_t)op->noperands);
    ops[op->noperands] = bound;
    op->operands = ops;
    op->noperands++;
    op_set_attr(b->a, op, "bound", attr_int(b->a, bound_dim));
}

void t_yield(Builder *b, int n, Value **vals) {
    Op *y = op_create(b->a, OP_TILE_YIELD, n, vals, 0, NULL, 0);
    y->loc = b->loc;
    block_append(b->blk, y);
}

Type *memref_of(Arena *a, const Type *t) {
    Type *m = type_shaped(a, TY_MEMREF, t->elem, t->rank, t->dims);
    m->space = AS_GLOBAL;
    return m;
}

/* A tile.launch with its grid, inputs and result types (names: of the
 * results, may be NULL); its body's block arguments are returned in *args
 * (3 program ids, inputs, outputs). */
Op *make_launch(Builder *outer, SrcLoc loc, Value **grid, int nin, Value **inputs, int nres, Type **types,
                       const char **names, Value ***args) {
    Value **ops = NEW_ARRAY(outer->a, Value *, 3 + nin);
    memcpy(ops, grid, sizeof(Value *) * 3);
    memcpy(ops + 3, inputs, sizeof(Value *) * (size_t)nin);
    Op *l = op_create(outer->a, OP_LAUNCH, 3 + nin, ops, nres, types, 1);
    l->loc = loc;
    Block *body = region_add_block(outer->a, &l->regions[0]);
    static const char *const pid_names[3] = {"pid_x", "pid_y", "pid_z"};
    *args = NEW_ARRAY(outer->a, Value *, 3 + nin + nres);
    for (int i = 0; i < 3; i++)
        (*args)[i] = block_add_arg(outer->a, body, type_scalar(outer->a, SK_INDEX), pid_names[i]);
    for (int i = 0; i < nin; i++)
        (*args)[3 + i] = block_add_arg(outer->a, body, memref_of(outer->a, inputs[i]->type), inputs[i]->name);
    for (int i = 0; i < nres; i++) {
        const char *name = names ? names[i] : NULL;
        (*args)[3 + nin + i] = block_add_arg(outer->a, body, memref_of(outer->a, types[i]),
                                             name ? arena_printf(outer->a, "%s_out", name) : NULL);
        l->results[i]->name = name;
    }
    return l;
}

/* A tile.launch replacing `op`, with its results' types and names. */
Op *new_launch(Builder *outer, const Op *op, Value **grid, int nin, Value **inputs, Value ***args) {
    Type **types = NEW_ARRAY(outer->a, Type *, op->nresults + 1);
    const char **names = NEW_ARRAY(outer->a, const char *, op->nresults + 1);
    for (int i = 0; i < op->nresults; i++)
        types[i] = op->results[i]->type, names[i] = op->results[i]->name;
    return make_launch(outer, op->loc, grid, nin, inputs, op->nresults, types, names, args);
}

/* A tile.for from lb to ub by step carrying `init`; *body gets a builder
 * for the loop body, *iv and *carried its arguments. */
Op *new_for(Builder *b, Value *lb, Value *ub, Value *step, int n, Value **init, Builder *body, Value **iv,
                   Value ***carried) {
    Value **ops = NEW_ARRAY(b->a, Value *, 3 + n);
    ops[0] = lb, ops[1] = ub, ops[2] = step;
    memcpy(ops + 3, init, sizeof(Value *) * (size_t)n);
    Type **types = NEW_ARRAY(b->a, Type *, n + 1);
    for (int i = 0; i < n; i++)
        types[i] = init[i]->type;
    Op *f = op_create(b->a, OP_FOR, 3 + n, ops, n, types, 1);
    f->loc = b->loc;
    block_append(b->blk, f);
    Block *blk = region_add_block(b->a, &f->regions[0]);
    *body = (Builder){b->a, blk, NULL, b->loc};
    *iv = block_add_arg(b->a, blk, type_scalar(b->a, SK_INDEX), NULL);
    *carried = NEW_ARRAY(b->a, Value *, n + 1);
    for (int i = 0; i < n; i++)
        (*carried)[i] = block_add_arg(b->a, blk, types[i], NULL);
    return f;
}

/* ---- vectorising a scalar region onto tiles --------------------------------- */

/* Clones the scalar ops of `region` into b, with its arguments bound to
 * `args` (scalars or tiles); each op's type becomes the broadcast of its
 * operands'. attn.extract of a tensor becomes tile.gather of its memref
 * (`memrefs` maps tensors to the launch's memrefs). Returns the yielded value. */
Value *vectorise(Builder *b, const Block *region, Value **args, const Map *memrefs) {
    Map map;
    map_init(&map, false);
    for (int i = 0; i < region->nargs; i++)
        map_put(b->a, &map, region->args[i], args[i]);
    for_each_op(op, region) {
        if (op->kind == OP_YIELD)
            return map_get(&map, op->operands[0]);
        int n = op->noperands;
        Value **ops = NEW_ARRAY(b->a, Value *, n + 1);
        for (int i = 0; i < n; i++) {
            ops[i] = map_get(&map, op->operands[i]);
            if (!ops[i] && op->kind == OP_EXTRACT && i == 0)
                ops[i] = map_get(memrefs, op->operands[i]);
            if (!ops[i])
                die("tiling: a region value from outside the region");
        }
        Type *t;
        OpKind k = op->kind;
        if (k == OP_CONSTANT || k == OP_DIM) {
            t = op->results[0]->type;
        } else if (k == OP_EXTRACT) {
            k = OP_GATHER;
            t = type_scalar(b->a, op->results[0]->type->elem);
            for (int i = 1; i < n; i++)
                t = b_bcast(b, t, ops[i]->type, t->elem);
        } else {
            t = type_scalar(b->a, op->results[0]->type->elem);
            for (int i = 0; i < n; i++)
                t = b_bcast(b, t, ops[i]->type, t->elem);
        }
        Value *r = b_emit(b, k, t, n, ops);
        r->def->attrs = op->attrs;
        r->def->nattrs = op->nattrs;
        r->def->loc = op->loc;
        map_put(b->a, &map, op->results[0], r);
    }
    die("tiling: a region without a yield");
}

/* op's results -> the launch's, for the ops after it: pass_tiling redirects
 * each op's uses as it reaches it (redirect), not by a walk of the whole
 * function per launch, which made tiling quadratic (3 s for 1,600 ops). */
static Map replaced;
/* The broken twin's mistake (test-tiling-rows-round-down): attention's query
 * tiles counted by floor(N / BM), so a ragged last tile has no program. */
bool tiling_rows_round_down, tiling_split_round_down, tiling_pages_in_order, tiling_sequences_unbounded;

/* Puts the ops built in `tmp` (grid computations, launches) where `op`
 * was, and `results` in place of op's. */
void replace_with(PassContext *ctx, Op *op, Block *tmp, Value **results) {
    for (Op *o = tmp->first, *next_op; o; o = next_op) {
        next_op = o->next;
        op_insert_before(op, o);
    }
    for (int i = 0; i < op->nresults; i++)
        map_put(ctx->arena, &replaced, op->results[i], results[i]);
    op_unlink(op);
}

/* The grid computation (built in `tmp`) and the launch where `op` was. */
void replace_with_launch(PassContext *ctx, Op *op, Block *tmp, Op *l) {
    block_append(tmp, l);
    replace_with(ctx, op, tmp, l->results);
}

static void redirect(Op *op) {
    for (int i = 0; i < op->noperands; i++) {
        Value *to = map_get(&replaced, op->operands[i]);
        if (to)
            op->operands[i] = to;
    }
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for_each_op(o, op->regions[r].blocks[b]) redirect(o);
}

/* ---- tile sizes ------------------------------------------------------------- */

int64_t schedule_tile(const Op *func, const char *arch, int axis, int64_t fallback) {
    Attr *tile = schedule_directive(func, arch, SCHED_TILE);
    return tile && tile->kind == AT_ARRAY && axis < tile->n ? tile->elems[axis]->i : fallback;
}

/* The directives the target lowering decides by (warps, and sm_90a's
 * producer, pingpong, overlap, persistent: schedule.def's SD_ON_LAUNCH),
 * recorded on the launch as schedule.NAME for sm90a-layout and
 * softmax-overlap (which check them: warps(N) must split the row tile into
 * 16-row blocks). */
void schedule_on_launch(PassContext *ctx, const Op *func, Op *launch) {
    for (int i = 0; i < SCHED__COUNT; i++) {
        Attr *v = schedule_info[i].flags & SD_ON_LAUNCH ? schedule_directive(func, ctx->arch, (ScheduleId)i) : NULL;
        if (v)
            op_set_attr(ctx->arena, launch, schedule_launch_attr((ScheduleId)i), attr_int(ctx->arena, v->i));
    }
}


/* Defaults per target: query rows x key rows for attention, M x N x K for
 * GEMMs. */
int64_t default_tile(const char *arch, bool attention, int axis, int64_t D, KeyShape keys, bool lean) {
    const Target *t = target_lookup(arch);
    const int64_t *d64 = keys == KEYS_ALL ? t->attn_tile_d64 : keys == KEYS_GATHERED ? t->attn_tile_d64_gathers : NULL;
    if (attention && axis < 2 && D <= 64 && d64 && d64[axis])
        return d64[axis];
    if (attention && axis < 2 && D > 64 && D <= 128 && keys == KEYS_FOLLOW_ROW && lean && t->attn_tile_d128_band[axis])
        return t->attn_tile_d128_band[axis];
    if (attention && axis < 2 && D > 64 && D <= 128 && keys != KEYS_GATHERED && t->attn_tile_d128[axis])
        return t->attn_tile_d128[axis];
    return attention ? t->attn_tile[axis] : t->gemm_tile[axis];
}

/* The default key rows, halved while Q's tile and the K and V stages (16-bit)
 * would not fit the target's shared memory (head dim 256: 128 × 64 on
 * sm_90a, 64 KiB of Q and 128 of K/V). A schedule's tile is taken as it is
 * (too large a one is the code generator's clear error). */
int64_t fit_keys(const char *arch, const Op *func, int64_t BM, int64_t BN, int64_t D) {
    const Target *t = target_lookup(arch);
    Attr *st = schedule_directive(func, arch, SCHED_STAGES);
    int64_t stages = st && st->i >= 2 ? st->i : t->stages ? t->stages : 2;
    while (BN > 16 && 2 * (BM * D + 2 * stages * BN * D) > t->smem_limit - 4096)   /* 4 KiB: barriers, row vectors */
        BN /= 2;
    return BN;
}

static bool run(Op *module, PassContext *ctx);

bool pass_tiling(Op *module, PassContext *ctx) {
    tiling_rows_round_down = tiling_split_round_down = tiling_pages_in_order = tiling_sequences_unbounded = false;
    return run(module, ctx);
}

bool pass_test_tiling_split_round_down(Op *module, PassContext *ctx) {
    tiling_split_round_down = true;
    bool ok = run(module, ctx);
    tiling_split_round_down = false;
    return ok;
}

bool pass_test_tiling_pages_in_order(Op *module, PassContext *ctx) {
    tiling_pages_in_order = true;
    bool ok = run(module, ctx);
    tiling_pages_in_order = false;
    return ok;
}

bool pass_test_tiling_sequences_unbounded(Op *module, PassContext *ctx) {
    tiling_sequences_unbounded = true;
    bool ok = run(module, ctx);
    tiling_sequences_unbounded = false;
    return ok;
}

bool pass_test_tiling_rows_round_down(Op *module, PassContext *ctx) {
    tiling_rows_round_down = true;
    bool ok = run(module, ctx);
    tiling_rows_round_down = false;
    return ok;
}

static bool run(Op *module, PassContext *ctx) {
    if (!ctx->arch)
        ctx->arch = target_default()->name;
    map_init(&replaced, false);
    for_each_op(func, op_body(module))
        for (Op *op = op_body(func)->first, *next; op; op = next) {
            next = op->next;
            redirect(op);   /* a value defined before op is used by op or later */
            if (op->kind == OP_UNPAD && op->operands[0]->def && op->operands[0]->def->kind == OP_LAUNCH) {
                /* packed sequences' output: the launch stored it packed (tile_attention) */
                map_put(ctx->arena, &replaced, op->results[0], op->operands[0]);
                op_unlink(op);
                continue;
            }
            bool ok = op->kind == OP_FUSED_GEMM ? tile_gemm(ctx, func, op)
                    : op->kind == OP_ATTENTION  ? tile_attention(ctx, func, op)
                    : op->kind == OP_ATTENTION_BWD ? tile_attention_backward(ctx, func, op)
                    : is_row_op(op)             ? tile_rows(ctx, func, op)
                                                : true;
            if (!ok)
                return false;
        }
    return true;
}

/* A name for a dim the tiling defines (define_dim) that none of the
 * block's dims has: `name`, or with underscores added. */
const char *fresh_dim_name(Arena *a, const Op *func, const char *name) {
    for (bool taken = true; taken;) {
        taken = false;
        const Block *body = op_body((Op *)func);
        for (int i = 0; i < body->nargs && !taken; i++) {
            const Type *t = body->args[i]->type;
            for (int d = 0; t->kind != TY_SCALAR && d < t->rank; d++)
                taken |= t->dims[d].sym && strcmp(t->dims[d].sym, name) == 0;
        }
        if (taken)
            name = arena_printf(a, "%s_", name);
    }
    return name;
}

/* Into outer's block: `count` bound as the dim `name` (a let line for the
 * runtime), for op's kernels. */
void define_dim(PassContext *ctx, Builder *outer, const Op *op, const char *name, Value *count) {
    Op *def = op_create(ctx->arena, OP_DEFINE_DIM, 1, &count, 0, NULL, 0);
    def->loc = op->loc;
    op_set_attr(ctx->arena, def, "name", attr_str(ctx->arena, name));
    block_append(outer->blk, def);
}
