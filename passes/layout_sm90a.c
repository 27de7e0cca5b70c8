/* layout_sm90a.c — Hopper's layout (sm90a-layout): wgmma operands in
 * 128-byte swizzled shared panels, a warpgroup per 64 rows, TMA copies and
 * stores, warp specialisation with its ping-pong, persistent blocks and two
 * blocks an SM. nv_layout.c is the pass; warp_roles.c later marks the
 * producer's ops and the stage releases. */
#include "passes/nv_layout.h"

#include <string.h>

/* sm_90a: the first 16-bit shared tile (a buffer, or a global tile the dots
 * read through shared memory) that 128-byte swizzled panels of 64 columns
 * cannot hold, or NULL. */
static const Op *narrow_shared_tile(const Lower *l, const Block *top, const Block *blk) {
    for (const Op *op = blk->first; op; op = op->next) {
        const Type *t = op->results && op->nresults ? op->results[0]->type : NULL;
        if ((op->kind == OP_ALLOC && is_16bit(t->elem) && t->rank >= 2 &&
             (t->dims[t->rank - 1].sym || t->dims[t->rank - 1].size % 64 || t->dims[t->rank - 2].size % 8)) ||
            (op->kind == OP_LOAD && op->operands[0]->type->space != AS_SHARED && is_dot_operand_load(l, top, op) &&
             t->dims[1].size % 64))
            return op;
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++) {
                const Op *bad = narrow_shared_tile(l, top, op->regions[r].blocks[k]);
                if (bad)
                    return bad;
            }
    }
    return NULL;
}

/* sm_90a: whether TMA can make this copy. The source is a tensor the
 * kernel takes (the runtime encodes a tensor map over it: rank at most 5,
 * 16-bit, its rows a multiple of 16 bytes: a static innermost dim), the box
 * is rows of a contiguous run of the innermost dim, and the destination is
 * [stages, rows <= 256, 64-column panels], 128-byte swizzled (what
 * SWIZZLE_128B writes, a panel per TMA box). */
/* The box rules for elements of elem_bytes (panels of 128 bytes: 64
 * 16-bit columns, 32 f32 ones): a box of `rows` along dim row_dim by
 * `cols` of the innermost dim. */
static bool tma_box_fits(const Block *top, const Value *src, int64_t row_dim, int64_t col_dim, int64_t rows,
                         int64_t cols, int elem_bytes) {
    const Type *st = src->type;
    bool param = false;
    for (int i = 3; i < top->nargs; i++)
        param |= top->args[i] == src;
    int inner = st->rank - 1;
    return param && st->rank <= 5 && !st->dims[inner].sym && st->dims[inner].size * elem_bytes % 16 == 0 &&
           col_dim == inner && row_dim >= 0 && row_dim < inner && rows <= 256 && cols % (128 / elem_bytes) == 0;
}

static bool tma_box_ok(const Block *top, const Value *src, const Attr *dims, int64_t rows, int64_t cols) {
    return is_16bit(src->type->elem) && dims && dims->n == 2 &&
           tma_box_fits(top, src, dims->elems[0]->i, dims->elems[1]->i, rows, cols, 2);
}

/* The same for a bulk reduce-add of an f32 tile into a tensor the kernel
 * takes; a tile whose rows run along the innermost dim (the backward's
 * dQᵀ) is added through a transposed slab (codegen's tma_store). */
static bool tma_reduce_ok(const Block *top, const Op *add) {
    const Value *dst = add->operands[0];
    const Type *t = add->operands[1]->type;
    Attr *dims = op_attr(add, "dims");
    if (dst->type->elem != SK_F32 || t->elem != SK_F32 || t->kind != TY_TILE || t->rank != 2 || t->dims[0].sym ||
        t->dims[1].sym || !dims || dims->n != 2)
        return false;
    bool trans = dims->elems[0]->i == dst->type->rank - 1;
    int a = trans ? 1 : 0;   /* the tile axis along the box's rows */
    return tma_box_fits(top, dst, dims->elems[a]->i, dims->elems[1 - a]->i, t->dims[a].size, t->dims[1 - a].size, 4);
}

/* In a launch that copies by TMA, a tile added whole into an f32 tensor the
 * kernel takes (the backward's dQ accumulator) is added by TMA: the
 * threads write it to a swizzled shared slab and one thread issues a bulk
 * reduce-add per panel (nv.store = "tma", codegen's tma_store), instead
 * of an atomic a element (FlashAttention-3's dQ). Inside the loop too:
 * codegen waits for the last trip's reduction before it writes the slab
 * again. */
static void tma_reductions(Arena *a, const Block *top, const Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_ATOMIC_ADD && tma_reduce_ok(top, op))
            op_set_attr(a, op, "nv.store", attr_str(a, "tma"));
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                tma_reductions(a, top, op->regions[r].blocks[k]);
    }
}

/* Or an f32 row (double-buffer's whole rows: the backward's lse and D)
 * into an unswizzled [stages, 1, cols <= 256] buffer: one box a stage. */
static bool tma_copy_ok(const Block *top, const Op *op) {
    const Type *dt = op->operands[1]->type;
    const Op *alloc = op->operands[1]->def;
    Attr *dims = op_attr(op, "dims");
    if (dt->rank != 3 || !alloc)
        return false;
    if (op->operands[0]->type->elem == SK_F32)
        return dt->elem == SK_F32 && dt->dims[1].size == 1 && dt->dims[2].size <= 256 && dims && dims->n == 2 &&
               !op_attr(alloc, "nv.swizzle") && tma_box_fits(top, op->operands[0], dims->elems[0]->i, dims->elems[1]->i, 1, dt->dims[2].size, 4);
    return tma_box_ok(top, op->operands[0], dims, dt->dims[1].size, dt->dims[2].size) && op_attr(alloc, "nv.swizzle");
}

/* Moves [first, last] (a new buffer, its index constants, its copy) up
 * past the pure ops, allocs and copies before it that define none of its
 * operands: Q's copy then goes ahead of the first K/V copies, which
 * double-buffer hoisted above Q's load. A persistent block's producer, which
 * issues them in this order, so fetches the next tile's Q as soon as the
 * consumers release the buffer, not after K's first stage is free too. */
static void hoist_copy(Op *first, Op *last) {
    Op *pos = first;
    for (;;) {
        Op *p = pos->prev;
        if (!p || !((op_info[p->kind].flags & OPF_PURE) || p->kind == OP_ALLOC || p->kind == OP_COPY_ASYNC))
            break;
        bool used = false;
        for (Op *o = first; o != last->next && !used; o = o->next)
            for (int i = 0; i < o->noperands; i++)
                for (int r = 0; r < p->nresults; r++)
                    used |= o->operands[i] == p->results[r];
        if (used)
            break;
        pos = p;
    }
    if (pos == first)
        return;
    Op *stop = last->next;
    for (Op *o = first, *next; o != stop; o = next) {
        next = o->next;
        op_unlink(o);
        op_insert_before(pos, o);
    }
}

/* Under warp specialisation a global tile the dots read (Q, copied once into
 * a shared scratch by the consumers) becomes a TMA copy the producer issues
 * before the first K/V copies, into a one-stage buffer the consumers wait
 * for and release after its last reader (FlashAttention-3's Q): the
 * consumers no longer load it themselves, and a persistent block's producer
 * fetches the next tile's Q while they finish this one. */
/* Does a consumer write shared memory (a transpose through a scratch
 * buffer, nv.operand on tile.trans)? */
static bool consumers_write_shared(const Block *blk) { return block_holds(blk, OP_TRANS, "nv.operand", "scratch"); }

static void tma_scratch_loads(Arena *a, Op *launch) {
    Block *body = launch->regions[0].blocks[0];
    for (Op *op = body->first, *next; op; op = next) {
        next = op->next;
        Attr *operand = op_attr(op, "nv.operand");
        if (op->kind != OP_LOAD || !operand || strcmp(operand->s, "scratch") != 0)
            continue;
        const Type *t = op->results[0]->type;
        if (t->rank != 2 || t->dims[0].sym || t->dims[1].sym ||
            !tma_box_ok(body, op->operands[0], op_attr(op, "dims"), t->dims[0].size, t->dims[1].size))
            continue;
        Builder b = {a, NULL, op, op->loc};
        Dim dims[3] = {{NULL, 1}, t->dims[0], t->dims[1]};
        Type *bt = type_shaped(a, TY_MEMREF, t->elem, 3, dims);
        bt->space = AS_SHARED;
        Value *buf = b_emit(&b, OP_ALLOC, bt, 0, NULL);
        op_set_attr(a, buf->def, "nv.swizzle", attr_int(a, 128));
        int n = op->noperands - 1;
        Value **ops = NEW_ARRAY(a, Value *, n + 3);
        ops[0] = op->operands[0];
        ops[1] = buf;
        ops[2] = b_index(&b, 0);
        memcpy(ops + 3, op->operands + 1, sizeof(Value *) * (size_t)n);
        Type *tok = NEW(a, Type);
        tok->kind = TY_TOKEN;
        Value *copy = b_emit(&b, OP_COPY_ASYNC, tok, n + 3, ops);
        op_set_attr(a, copy->def, "dims", op_attr(op, "dims"));
        op_set_attr(a, copy->def, "nv.copy", attr_str(a, "tma"));
        hoist_copy(buf->def, copy->def);
        b_emit(&b, OP_WAIT, NULL, 1, &copy);
        Value *lops[4] = {buf, b_index(&b, 0), b_index(&b, 0), b_index(&b, 0)};
        Value *ld = b_emit(&b, OP_LOAD, op->results[0]->type, 4, lops);
        op_set_attr(a, ld->def, "dims", attr_array(a, 2, (Attr *[]){attr_int(a, 1), attr_int(a, 2)}));
        op_set_attr(a, ld->def, "nv.operand", attr_str(a, "smem"));
        replace_all_uses(launch, op->results[0], ld);
        op_unlink(op);
    }
}

/* Under warp specialisation a 16-bit tile stored whole into an output the
 * kernel takes (O) is stored by TMA (nv.store = "tma": through a swizzled
 * shared buffer, codegen's tma_store). Head dim 256's 64 KB buffer fits
 * only where it can take memory a dead buffer held (Q's): not persistent. */
static void tma_stores(Arena *a, const Block *body) {
    for (Op *op = body->first; op; op = op->next) {
        if (op->kind != OP_STORE || op_attr(op, "bound"))   /* (a TMA box clips at the tensor's end only) */
            continue;
        const Type *t = op->operands[1]->type;
        if (t->kind == TY_TILE && t->rank == 2 && !t->dims[0].sym && !t->dims[1].sym &&
            op->operands[0]->type->elem == t->elem &&
            tma_box_ok(body, op->operands[0], op_attr(op, "dims"), t->dims[0].size, t->dims[1].size))
            op_set_attr(a, op, "nv.store", attr_str(a, "tma"));
    }
}

/* Whether v is computed from x; seen: the values already looked at (each
 * once, so shared subexpressions cost nothing more). */
static bool depends_on(Arena *a, Map *seen, const Value *v, const Value *x) {
    if (v == x)
        return true;
    if (!v->def || map_get(seen, v))
        return false;
    map_put(a, seen, v, (void *)1);
    for (int i = 0; i < v->def->noperands; i++)
        if (depends_on(a, seen, v->def->operands[i], x))
            return true;
    return false;
}

/* Whether a loop's key range in blk depends on the query tile (pid x): a
 * causal mask or a window. */
static bool keys_follow_queries(Arena *a, const Block *blk, const Value *pid_x) {
    Map seen;
    map_init(&seen, false);
    for (const Op *op = blk->first; op; op = op->next)
        if (op->kind == OP_FOR && (depends_on(a, &seen, op->operands[0], pid_x) ||
                                   depends_on(a, &seen, op->operands[1], pid_x)))
            return true;
    return false;
}

/* Whether blk's own ops (not its loops') include one of `kind`, with the
 * attribute `attr` where one is named. */
static bool holds_at_top(const Block *blk, OpKind kind, const char *attr) {
    for (const Op *op = blk->first; op; op = op->next)
        if (op->kind == kind && (!attr || op_attr(op, attr)))
            return true;
    return false;
}

/* Whether blk stores a tile bounded by a sequence's end (tile.store's
 * 'bound': packed sequences). */
static bool bounded_stores(const Block *blk) { return holds_at_top(blk, OP_STORE, "bound"); }

/* Whether blk gathers scalars (packed sequences' offsets, a paged cache's
 * block table). */
static bool gathers(const Block *blk) { return holds_at_top(blk, OP_GATHER, NULL); }

/* Whether every copy in blk can be a TMA copy (and there is one): a launch
 * takes TMA for all its copies or none, so cp.async's group counts
 * (nv.pending) never mix with mbarriers. */
static bool tma_copies(const Block *top, const Block *blk, int *n) {
    for (const Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_COPY_ASYNC && !tma_copy_ok(top, op))
            return false;
        *n += op->kind == OP_COPY_ASYNC;
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                if (!tma_copies(top, op->regions[r].blocks[k], n))
                    return false;
    }
    return true;
}

/* sm_90a: every copy of the launch is a TMA copy (tma_copies). */
static void annotate_tma(Arena *a, const Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_COPY_ASYNC)
            op_set_attr(a, op, "nv.copy", attr_str(a, "tma"));
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                annotate_tma(a, op->regions[r].blocks[k]);
    }
}

static void annotate_dot(const Lower *l, Op *op) {   /* wgmma: "row" A is K-major; B is K-major when stored [N, K] ("col") */
    Arena *a = l->ctx->arena;
    const char *al = operand_layout(op->operands[0]), *bl = operand_layout(op->operands[1]);
    const char *acc = op->results[0]->type->elem == SK_F16 ? "f16" : "f32";
    op_set_attr(a, op, "nv.a", attr_str(a, !*al ? "registers" : strcmp(al, "row") == 0 ? "smem" : "smem.trans"));
    op_set_attr(a, op, "nv.b", attr_str(a, strcmp(bl, "col") == 0 ? "smem" : "smem.trans"));
    op_set_attr(a, op, "nv.mma", attr_str(a, arena_printf(a, "wgmma.m64n%lldk16.%s.%s",
                                                           (long long)op->results[0]->type->dims[1].size, acc,
                                                           scalar_name(op->operands[1]->type->elem))));
}

/* A warpgroup (4 warps) per 64 rows, each warp 16; the schedule's warps(N)
 * can only agree. */
static bool pick_warps(const Lower *l, Op *launch, const Scan *s, int64_t rows, int *warps, Attr **hint) {
    (void)s;
    PassContext *ctx = l->ctx;
    const Block *body = launch->regions[0].blocks[0];
    const Op *narrow = narrow_shared_tile(l, body, body);
    const char *why =
        rows % 64 ? arena_printf(ctx->arena, "the row tile (%lld) must be a multiple of 64 (a warpgroup's wgmma "
                                             "covers 64 rows)", (long long)rows)
        : *hint && (*hint)->i != rows / 16
            ? arena_printf(ctx->arena, "warps(%lld): a %lld-row tile takes %lld warps (a warpgroup per 64 rows)",
                           (long long)(*hint)->i, (long long)rows, (long long)(rows / 16))
        : narrow ? "wgmma reads shared tiles in 128-byte swizzled panels of 64 columns: the head dim (or "
                   "a schedule's tile width) must be a multiple of 64"
                 : NULL;
    if (why) {
        layout_error(l, narrow && !(rows % 64) ? narrow : launch,
                arena_printf(ctx->arena, "%s codegen: %s", l->t->name, why));
        return false;
    }
    *warps = (int)(rows / 16);
    *hint = NULL;
    return true;
}

/* The mbarrier ring of each buffer TMA fills (nv.ring on its tile.alloc):
 * per stage a "full" barrier the copy completes and a wait spins on, and
 * under warp specialisation an "empty" one the consumers arrive at when
 * they release the stage and the producer waits on before it fills it. */
static void mark_rings(Arena *a, const Block *blk, bool empty) {
    for (const Op *op = blk->first; op; op = op->next) {
        Op *buf = op->kind == OP_COPY_ASYNC ? op->operands[1]->def : NULL;
        if (buf && buf->kind == OP_ALLOC)
            op_set_attr(a, buf, "nv.ring", attr_str(a, empty ? "full,empty" : "full"));
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                mark_rings(a, op->regions[r].blocks[k], empty);
    }
}

/* Every copy of the launch by TMA where TMA can make each, and then warp
 * specialisation and its schedule. */
static bool specialise(const Lower *l, Op *launch, const Scan *s, int warps) {
    Arena *a = l->ctx->arena;
    Block *body = launch->regions[0].blocks[0];
    int ncopies = 0;
    if (!tma_copies(body, body, &ncopies) || !ncopies)
        return false;
    annotate_tma(a, body);
    tma_reductions(a, body, body);
    /* warp specialisation: a producer warpgroup issues the copies.
     * Default (measured on the H200, bench/results/2026-12-01-h200/NOTES.md):
     * on for attention with 128-wide score tiles, outputs wider than 128
     * (head dim 256) or key ranges that follow the query tile (causal,
     * windows); off for 64-wide score tiles over every key (head dim 64, no
     * mask), which without it fit two blocks per SM and run faster so, and
     * for GEMMs (no score tile; the same speed either way). The schedule's
     * producer(0|1) decides. */
    Attr *ws = op_attr(launch, "schedule.producer"), *pp = op_attr(launch, "schedule.pingpong");
    bool wide = s->dot_cols > 64 || (s->dot_cols && s->carried_cols > 128);
    bool band = keys_follow_queries(a, body, body->args[0]);   /* causal, windows */
    /* The backward's key-tile kernel (consumers that write shared memory,
     * the dSᵀ scratch) is specialised by default, FlashAttention-3's
     * backward: the producer loads K and V once and streams Q and dO
     * (H100, 2026-12-07, bench/results/2026-12-07-h100-producer/: 0.81 →
     * 0.85× cuDNN over the quick protocol, no row slower by more than 2 %);
     * over packed sequences (it gathers their offsets) it stays plain, the
     * kernel the GPU checks verified there. */
    /* (Other launches over packed sequences, whose stores a sequence's end
     * bounds, stay plain too: the plain TMA kernel, the paged split
     * kernels' kind, is the one timed, bench/results/2026-12-07-h100-varlen/;
     * the warp-specialised persistent one passes the same checks since
     * codegen/tma.c's release fix, not yet timed) */
    bool specialise = ws                           ? ws->i != 0
                      : consumers_write_shared(body) ? !gathers(body)
                                                     : (wide || band) && !bounded_stores(body);
    if (specialise) {
        op_set_attr(a, launch, "nv.producer_warps", attr_int(a, 4));
        tma_scratch_loads(a, launch);
        tma_stores(a, body);
        /* persistent blocks: each loops over the grid's tiles, so the
         * producer fetches the next tile's Q and K/V while the
         * consumers finish this one, and O's TMA store runs beside the
         * next tile. Default (bench/results/2026-12-02-h200/NOTES.md): on for
         * attention whose O goes through a TMA store (head dim up to
         * 128: 6–18 % faster at N ≤ 2k, even at 8k), off for head dim
         * 256 (O's buffer then would not fit beside the stages; with O
         * from registers it was 15 % slower). The schedule's
         * persistent(0|1) decides. Needs grid z = 1. */
        Attr *ps = op_attr(launch, "schedule.persistent");
        bool persist = ps ? ps->i != 0 : s->dot_cols && s->carried_cols <= 128;
        /* a block's next tile would need every consumer past its last
         * read of shared memory the consumers write (the backward's dSᵀ
         * scratch): not persistent there, whatever the schedule says */
        persist = persist && !consumers_write_shared(body);
        const Op *z = launch->operands[2]->def;
        if (persist && z && z->kind == OP_CONSTANT && op_attr(z, "value")->i == 1)
            op_set_attr(a, launch, "nv.persistent", attr_int(a, 1));
        /* one consumer warpgroup (a 64-row tile): two blocks an SM
         * where their buffers fit twice, so two consumers share it as
         * in a 128-row tile but each with its own producer, tiles and
         * epilogue (2026-12-02, head dim 64 causal N 512: 201 → 235
         * TFLOP/s at 64 × 64; one block an SM before) */
        if (warps == 4 && 2 * nv_buffer_bytes(body, op_attr(launch, "nv.persistent")) <= l->t->smem_limit)
            op_set_attr(a, launch, "nv.blocks_per_sm", attr_int(a, 2));
        /* ping-pong between consumer warpgroups, a turn holding Q·Kᵀ(j)
         * and P·V(j−1). Default (2026-12-02, H200, same run): on where
         * the keys do not follow the query tile, up to head dim 128
         * (head dim 64 +5 to 7 %, 128 +1 to 2 %); off under a causal
         * band (head dim 64 −5 %, 128 ±2 %) and at head dim 256 (−1 to
         * −3 %). The schedule's pingpong(0|1) decides. */
        bool ping = pp ? pp->i != 0 : s->carried_cols <= 128 && !band;
        /* consumers that exchange a tile through shared memory (the
         * backward's dSᵀ, each warpgroup's keys against every query) meet
         * at a barrier of them all in each step; taking turns as well,
         * each would wait at one for the other for ever (the backward's
         * 128 × 128 tile at head dim 64 hung so on the H100): never
         * ping-pong there, whatever the schedule says */
        ping = ping && !consumers_write_shared(body);
        if (warps >= 8 && ping)
            op_set_attr(a, launch, "nv.pingpong", attr_int(a, 1));
    }
    /* Without warp specialisation no setmaxnreg gives the computing warps
     * more registers: where they are scarce, the dots' descriptors and the
     * shared addresses of each element are formed where they are used
     * rather than held across the loop one register each, which ptxas
     * spilled (codegen's nv.rematerialise; the key-tile kernel at head dim
     * 128, 64 × 64 tiles: 252 registers and no spills, against 255 and
     * 372 bytes of spills). GEMMs (no score tile) spill neither way. A
     * warp-specialised backward key-tile kernel (consumers that write
     * shared memory) is rematerialised too: ptxas allocates its consumers
     * within the launch's 168-register entry, and they spilled 280 bytes
     * at head dim 128 (64 × 128) and 400 at head dim 64 (128 × 128) without. */
    if ((!specialise && registers_scarce(s)) || (specialise && consumers_write_shared(body)))
        op_set_attr(a, launch, "nv.rematerialise", attr_int(a, 1));
    mark_rings(a, body, specialise);
    return true;
}

/* A dot in a loop whose A is a tile computed before the loop (the packed
 * rows' Q of a split, assembled from each head's rows by selects) reads it
 * from shared memory, stored there once: the dot takes trans(trans(A)),
 * the inner transpose's scratch copy read in place (nv_layout.c's
 * operand_layout: "row", wgmma's K-major A). Held in registers across the
 * loop as a wgmma RS operand, ptxas (CUDA 13.0) gave those registers to
 * the loop's other RS operand, P, so from the second key tile on Q·Kᵀ
 * read P (SASS: both HGMMAs' A in R100; wrong scores in a paged decode's
 * packed split). FlashAttention-3 keeps Q in shared memory too. */
static void stage_invariant_a(Arena *a, Block *blk, bool in_loop, Map *staged) {
    for (Op *op = blk->first; op; op = op->next) {
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                stage_invariant_a(a, op->regions[r].blocks[k], in_loop || op->kind == OP_FOR, staged);
        Op *def = op->kind == OP_DOT && in_loop ? op->operands[0]->def : NULL;
        if (!def || def->parent == op->parent || def->kind == OP_LOAD || def->kind == OP_TRANS)
            continue;
        Value *twice = map_get(staged, op->operands[0]);
        if (!twice) {
            const Type *t = op->operands[0]->type;
            Type *tt = type_shaped(a, TY_TILE, t->elem, 2, (Dim[]){t->dims[1], t->dims[0]});
            Op *inner = op_create(a, OP_TRANS, 1, (Value *[]){op->operands[0]}, 1, &tt, 0);
            Op *outer = op_create(a, OP_TRANS, 1, (Value *[]){inner->results[0]}, 1, (Type *[]){(Type *)t}, 0);
            inner->loc = outer->loc = def->loc;
            Op *after = def->next;
            if (after) {
                op_insert_before(after, inner);
                op_insert_before(after, outer);
            } else {
                block_append(def->parent, inner);
                block_append(def->parent, outer);
            }
            twice = outer->results[0];
            map_put(a, staged, op->operands[0], twice);
        }
        op->operands[0] = twice;
    }
}

static void prepare(const Lower *l, Op *launch) {
    if (op_attr(launch, "nv.layout"))   /* laid out already (the pass run again on target IR): as it was */
        return;
    Map staged;
    map_init(&staged, false);
    stage_invariant_a(l->ctx->arena, launch->regions[0].blocks[0], false, &staged);
}

const LayoutTarget layout_sm90a = {
    .target = &target_sm90a,
    .operand_multiple = 16, .operand_elem = is_16bit, .row_stride = ldmatrix_stride,
    .swizzle_all = true,
    .copy = "cp.async", .counts_groups = true,
    .annotate_dot = annotate_dot, .pick_warps = pick_warps, .annotate_launch = specialise,
    .prepare_launch = prepare,
};

bool pass_sm90a_layout(Op *module, PassContext *ctx) { return nv_layout_run(&layout_sm90a, module, ctx); }
