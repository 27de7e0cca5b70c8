/* nv_layout.c — tile IR → target IR: the decisions of the code generator,
 * written onto the tile ops as `nv.*` attributes (the way TritonGPU puts
 * layouts on types; ir/nv_attrs.def lists them). One pass per target,
 * sm70-layout, sm80-layout and sm90a-layout, shares this file; what differs
 * between targets is the target's LayoutTarget (nv_layout.h), filled in by
 * layout_sm70.c (mma.m8n8k4), layout_sm80.c (mma.m16n8k16) and
 * layout_sm90a.c (wgmma, TMA, warp specialisation); codegen/sm70.c, sm80.c
 * and sm90a.c emit LLVM IR from them. `attnc FILE -emit=nv -arch sm_70`
 * prints the result.
 *
 *   tile.launch    nv.layout   "acc.f32" | "acc.f16": kernels with a tile.dot
 *                              keep every tile in the MMA's accumulator
 *                              layout; "blocked": row kernels
 *                  nv.rows, nv.warps, nv.row_blocks: the row tile, warps per
 *                              block (each owns 16·row_blocks rows)
 *                  nv.warp_cols  sm_80 GEMMs: the warps form a grid,
 *                              warps / warp_cols down the rows by warp_cols
 *                              across the columns (absent: 1, each warp
 *                              owns whole rows)
 *   tile.load      nv.operand  "smem" (a shared stage read by the dots in
 *                              place) | "scratch" (a global tile copied once
 *                              into shared memory for the dots) |
 *                              "fragments" (sm_80: copied so, then held in
 *                              registers as the A fragments of every dot
 *                              that reads it), with nv.row_stride; absent:
 *                              loaded into the layout
 *   tile.trans     nv.operand  "scratch" on the transpose of a computed tile
 *                              that dots read (the backward's dSᵀ): the tile
 *                              is stored to shared memory (nv.row_stride)
 *                              and read transposed
 *   tile.dot       nv.mma      sm_70: "m8n8k4.<A>.<B>.<acc>", the fragment
 *                              layouts (row/col) that read the operands'
 *                              memory without a transpose; sm_80:
 *                              "m16n8k16.row.col.<acc>.<ab>"
 *                  nv.a        sm_70: "smem" | "shuffle" (P, an accumulator
 *                              tile, reaches the A layout by warp shuffles);
 *                              sm_80: "ldmatrix" | "ldmatrix.trans" |
 *                              "registers" (P is the A fragment as it is) |
 *                              "fragments" (preloaded, nv.operand)
 *                  nv.b        sm_80: "ldmatrix" ([N, K] in memory) |
 *                              "ldmatrix.trans" ([K, N])
 *   tile.alloc     nv.row_stride  16-bit rows, padded so fragment loads are
 *                              free of bank conflicts; or
 *                  nv.swizzle  sm_80: 128 on a ring that cp.async fills,
 *                              64k columns wide (layout_sm80.c swizzles_ring)
 *   tile.copy_async nv.copy    sm_70: "registers" (loads issued here, stored
 *                              to shared memory at the tile.wait); sm_80:
 *                              "cp.async" (straight to shared memory, one
 *                              commit group per copy)
 *   tile.wait      nv.pending  sm_80: the copies issued after the awaited one
 *                              that may stay in flight (cp.async.wait_group);
 *                              the interpreter honours it
 *   tile.reduce    nv.partial  a row sum that each lane keeps as the sum of
 *                              its own columns (the online softmax's l,
 *                              carried so through the key loops) ...
 *   nv.lane_sum                ... until this op, after the loops, adds the
 *                              lanes' pieces (to the interpreter: the value
 *                              as it is)
 *
 * sm90a-layout (Hopper, wgmma) shares sm80-layout's decisions but for the
 * operands: wgmma reads A (unless P, from registers) and B from shared memory
 * through descriptors, so every 16-bit shared tile is laid out in 128-byte
 * swizzled panels of 64 columns (nv.swizzle = 128, no row padding), and each
 * warpgroup (4 warps, 64 rows) issues its own wgmma:
 *   tile.dot       nv.mma      "wgmma.m64n<N>k16.<acc>.<ab>"
 *                  nv.a        "smem" (K-major) | "registers" (P)
 *                  nv.b        "smem" ([N, K] in memory: K-major) |
 *                              "smem.trans" ([K, N]: MN-major)
 *   tile.alloc, tile.load "scratch"   nv.swizzle  128
 *
 * Refuses what the target cannot do (the one place that does: the code
 * generator assumes it): bf16 on sm_70 (no bf16 MMA), an f16
 * accumulator with bf16 operands, row tiles that are not a multiple of 16.
 */
#include <stdint.h>
#include <string.h>

#include "passes/nv_layout.h"
#include "target/schedule.h"

bool is_16bit(ScalarKind k) { return k == SK_F16 || k == SK_BF16; }

/* sm_80 and sm_90a: ldmatrix reads 8 rows of 16 bytes per phase; rows
 * 16-byte aligned whose stride is an odd number of 16-byte units fall in 8
 * different 4-bank groups (cols + 8 for the usual multiples of 16). */
int64_t ldmatrix_stride(int64_t cols) {
    int64_t s = (cols + 7) / 8 * 8;
    return (s / 8) % 2 ? s : s + 8;
}

/* The layout attribute of a 16-bit shared tile: nv.swizzle 128 or
 * nv.row_stride (padded rows). */
void set_shared_layout(const Lower *l, Op *op, const Type *t, bool swizzle) {
    Arena *a = l->ctx->arena;
    if (swizzle)
        op_set_attr(a, op, "nv.swizzle", attr_int(a, 128));
    else
        op_set_attr(a, op, "nv.row_stride", attr_int(a, l->lt->row_stride(t->dims[t->rank - 1].size)));
}

/* ---- uses -------------------------------------------------------------------------- */

/* Whether v's uses in blk (counted in *count) are all tile.dot operands,
 * possibly through tile.trans (a_only: all operand A, as it is). */
static bool dot_uses_in(const Block *top, const Value *v, const Block *blk, bool a_only, int *count) {
    for (const Op *o = blk->first; o; o = o->next) {
        for (int i = 0; i < o->noperands; i++)
            if (o->operands[i] == v) {
                (*count)++;
                bool ok = a_only                ? o->kind == OP_DOT && i == 0
                          : o->kind == OP_TRANS ? only_dot_uses(top, o->results[0], false)
                                                : o->kind == OP_DOT && i < 2;
                if (!ok)
                    return false;
            }
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                if (!dot_uses_in(top, v, o->regions[r].blocks[k], a_only, count))
                    return false;
    }
    return true;
}

bool only_dot_uses(const Block *top, const Value *v, bool a_only) {
    int n = 0;
    return dot_uses_in(top, v, top, a_only, &n) && n > 0;
}

static bool reads_whole_stage(const Op *load) {
    const Type *bt = load->operands[0]->type, *rt = load->results[0]->type;
    return rt->dims[0].size == bt->dims[bt->rank - 2].size && rt->dims[1].size == bt->dims[bt->rank - 1].size;
}

/* Whether every use of the shared buffer v in blk is a tile.copy_async
 * into it or a tile.load of a whole stage for dots (the only readers that
 * know the swizzle: a swizzled stage is read whole). */
static bool buffer_uses_in(const Lower *l, const Block *top, const Value *v, const Block *blk) {
    for (const Op *o = blk->first; o; o = o->next) {
        for (int i = 0; i < o->noperands; i++)
            if (o->operands[i] == v && o->kind != OP_COPY_ASYNC &&
                !(o->kind == OP_LOAD && i == 0 && is_dot_operand_load(l, top, o) && reads_whole_stage(o)))
                return false;
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                if (!buffer_uses_in(l, top, v, o->regions[r].blocks[k]))
                    return false;
    }
    return true;
}

static bool only_copied_and_read_by_dots(const Lower *l, const Block *top, const Value *v) {
    return buffer_uses_in(l, top, v, top);
}

/* ---- the kernel ---------------------------------------------------------------------- */

void layout_error(const Lower *l, const Op *op, const char *msg) {
    op_diag(l->ctx->diag, NULL, op, msg);
    schedule_note(l->ctx->diag, op, l->t->name);
}

/* A row kernel (no dot) whose every 2-D tile is a multiple of a narrow
 * width W (the backward's preprocess, postprocess and GQA sums: the head
 * dim): W / 8 threads a row, 8 adjacent columns each, the block's row
 * groups taking the rows in turn (nv.row_threads, nv.row_vector). A row's
 * sum is then in-thread and log2(W / 8) shuffles. Without it every thread
 * holds a column of every row: at 64 rows of 64 columns half the threads
 * held nothing, a row vector (lse) was loaded by every thread 64 times, and
 * D = rowsum(dO ∘ O) took 320 shuffles and a pass through shared memory a
 * thread. Wide rows (RMSNorm over the model width) keep that layout. */
enum { ROW_VECTOR = 8 };
static void narrow_rows(Arena *a, Op *launch, const Scan *s, int64_t rows, int warps) {
    int64_t threads = s->col_gcd / ROW_VECTOR;
    if (!s->col_gcd || s->col_gcd % ROW_VECTOR || threads > 32 || (threads & (threads - 1)) ||
        rows % (32 * warps / threads))
        return;
    op_set_attr(a, launch, "nv.row_threads", attr_int(a, threads));
    op_set_attr(a, launch, "nv.row_vector", attr_int(a, ROW_VECTOR));
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

static void scan(const Block *top, const Block *blk, Scan *s) {
    for (const Op *o = blk->first; o; o = o->next) {
        for (int i = 0; i < o->nresults; i++) {
            const Type *t = o->results[i]->type;
            if (t->kind == TY_TILE && t->rank == 2 && t->dims[0].size > s->rows)
                s->rows = t->dims[0].size;
            if (t->kind != TY_TOKEN && t->elem == SK_BF16 && !s->bf16)   /* tiles, buffers and scalars */
                s->bf16 = o;
            /* (a dot operand's load stays in shared memory: not a tile of the layout) */
            if (t->kind == TY_TILE && t->rank == 2 && t->dims[1].size > 1 &&
                !(o->kind == OP_LOAD && only_dot_uses(top, o->results[i], false)))
                s->col_gcd = gcd64(s->col_gcd, t->dims[1].size);
        }
        if (o->kind == OP_TILE_REDUCE || o->kind == OP_TRANS ||
            (o->kind == OP_DOT && (!o->operands[0]->def || o->operands[0]->def->kind != OP_LOAD)))
            s->row_bound = true;
        if (o->kind == OP_GATHER && o->results[0]->type->kind == TY_TILE && o->results[0]->type->rank == 2 &&
            o->results[0]->type->dims[0].size > 1 && o->results[0]->type->dims[1].size > 1)
            s->gathers_per_score = true;
        if (o->kind == OP_DOT) {
            s->dots++;
            if (!s->bad_dot && (o->operands[0]->type->dims[1].size % 16 || o->results[0]->type->dims[1].size % 16))
                s->bad_dot = o;
            if (!s->wide_dot && (!is_16bit(o->operands[0]->type->elem) || !is_16bit(o->operands[1]->type->elem)))
                s->wide_dot = o;
            s->acc = o->results[0]->type->elem;
            s->dot_rows = o->results[0]->type->dims[0].size;
            const Op *init = o->operands[2]->def;   /* a fresh accumulator: scores, not O */
            if (init && init->kind == OP_SPLAT && o->results[0]->type->dims[1].size > s->dot_cols)
                s->dot_cols = o->results[0]->type->dims[1].size;
        }
        if (o->kind == OP_FOR) {
            int64_t cols = 0;
            for (int i = 0; i < o->nresults; i++) {
                const Type *t = o->results[i]->type;
                if (t->kind == TY_TILE && t->rank == 2 && t->dims[0].size > 1 && t->dims[1].size > 1)
                    cols += t->dims[1].size;
            }
            if (cols > s->carried_cols)
                s->carried_cols = cols;
        }
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                scan(top, o->regions[r].blocks[k], s);
    }
}

/* A tile.load that only dots read, read as whole 16-bit rows of a 2-D
 * window (sm_80's ldmatrix: 16-row, 16-column blocks). */
bool is_dot_operand_load(const Lower *l, const Block *top, const Op *op) {
    const Type *mt = op->operands[0]->type, *rt = op->results[0]->type;
    Attr *dims = op_attr(op, "dims");
    int q = l->lt->operand_multiple;
    bool elem_ok = l->lt->operand_elem(mt->elem);
    /* rows along the memref's second-last dim, or for a global tile any
     * outer one (decode's packed Q: a group's heads, kh·G + r) */
    bool rows_ok = dims && dims->n == 2 && (dims->elems[0]->i == mt->rank - 2 ||
                                            (mt->space != AS_SHARED && dims->elems[0]->i < mt->rank - 2));
    return elem_ok && rows_ok && dims->elems[1]->i == mt->rank - 1 && rt->dims[0].size % q == 0 && rt->dims[1].size % q == 0 &&
           only_dot_uses(top, op->results[0], false);
}

/* The fragment layout that reads a dot operand's memory as it lies: "row"
 * for a loaded tile, "col" for the transpose of one or of a computed tile
 * put in shared memory (nv.operand on the tile.trans), "row" again for the
 * transpose of such a transpose (the computed tile as it lies there: the
 * backward's dSᵀ as dQᵀ's B), "" if computed. */
const char *operand_layout(const Value *v) {
    const Op *d = v->def;
    if (d && d->kind == OP_LOAD && op_attr(d, "nv.operand"))
        return "row";
    if (d && d->kind == OP_TRANS && !op_attr(d, "nv.operand") && d->operands[0]->def &&
        d->operands[0]->def->kind == OP_TRANS && op_attr(d->operands[0]->def, "nv.operand"))
        return "row";
    if (d && d->kind == OP_TRANS && op_attr(d, "nv.operand"))
        return "col";
    if (d && d->kind == OP_TRANS && d->operands[0]->def && d->operands[0]->def->kind == OP_LOAD &&
        op_attr(d->operands[0]->def, "nv.operand"))
        return "col";
    return "";
}

/* sm_80: the async copies (commit groups) issued after the one whose token
 * a loop carries as its i-th token, at the top of a later iteration: those after its copy in
 * the body, plus a whole body per iteration it was passed along unchanged.
 * 0 when unknown (a wait then waits for everything). */
static int groups_after(const Block *body, int i, int depth) {
    const Op *yield = NULL;
    int copies = 0;
    for (const Op *o = body->first; o; o = o->next) {
        copies += o->kind == OP_COPY_ASYNC;
        if (o->kind == OP_TILE_YIELD)
            yield = o;
    }
    if (!yield || i >= yield->noperands || depth > 8)
        return 0;
    const Value *v = yield->operands[i];
    for (int j = 0; j + 1 < body->nargs; j++)
        if (v == body->args[1 + j])   /* passed along: a body's copies later */
            return groups_after(body, j, depth + 1) + copies;
    int after = -1;
    for (const Op *o = body->first; o; o = o->next) {
        if (after >= 0 && o->kind == OP_COPY_ASYNC)
            after++;
        if (o->kind == OP_COPY_ASYNC && o->results[0] == v)
            after = 0;
    }
    return after < 0 ? 0 : after;
}

/* sm_80's cp.async commits one group per tile.copy_async; a tile.wait may
 * leave the groups committed after its token's in flight. nv.pending says how
 * many (the interpreter lands all but that many youngest copies there, so a
 * count that is too large reads an unlanded stage and fails the check). For
 * a token a loop carries, the fewer of the first iteration's and a later
 * one's. Numbers are copy sequence numbers in issue order, +1 in the map. */
static void count_groups(const Lower *l, Block *blk, Map *group, int *count) {
    Arena *a = l->ctx->arena;
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_COPY_ASYNC) {
            map_put(a, group, op->results[0], (void *)(intptr_t)(++*count));
        } else if (op->kind == OP_WAIT) {
            intptr_t g = (intptr_t)map_get(group, op->operands[0]);
            op_set_attr(a, op, "nv.pending", attr_int(a, g ? *count - g : 0));
        } else if (op->kind == OP_FOR) {
            Block *body = op->regions[0].blocks[0];
            int before = *count;
            for (int i = 0; 3 + i < op->noperands; i++) {
                intptr_t g = (intptr_t)map_get(group, op->operands[3 + i]);
                if (!g)
                    continue;
                int first = *count - (int)g, later = groups_after(body, i, 0);
                map_put(a, group, body->args[1 + i], (void *)(intptr_t)(*count - (later < first ? later : first)));
            }
            count_groups(l, body, group, count);
            /* a token the loop hands on (the next segment of a chain waits
             * for it): younger groups are the copies after it in the last
             * iteration, or, when the loop ran no iteration, those after
             * the token it was given; the fewer of the two */
            for (int i = 0; 3 + i < op->noperands && i < op->nresults; i++) {
                intptr_t g = (intptr_t)map_get(group, op->operands[3 + i]);
                if (!g)
                    continue;
                int none = before - (int)g, last = groups_after(body, i, 0);
                map_put(a, group, op->results[i], (void *)(intptr_t)(*count - (last < none ? last : none)));
            }
        } else {
            for (int r = 0; r < op->nregions; r++)
                for (int k = 0; k < op->regions[r].nblocks; k++)
                    count_groups(l, op->regions[r].blocks[k], group, count);
        }
    }
}

static void annotate(const Lower *l, const Block *top, const Block *blk) {
    Arena *a = l->ctx->arena;
    for (Op *op = blk->first; op; op = op->next) {
        switch (op->kind) {
        case OP_LOAD:
            if (is_dot_operand_load(l, top, op)) {
                bool shared = op->operands[0]->type->space == AS_SHARED;
                /* sm_80: a global tile that only A operands read (Q) is held
                 * in registers as A fragments, loaded once */
                bool frags = !shared && l->lt->holds_a_fragments && only_dot_uses(top, op->results[0], true) &&
                             l->lt->holds_a_fragments(l, op->results[0]->type);
                op_set_attr(a, op, "nv.operand", attr_str(a, shared ? "smem" : frags ? "fragments" : "scratch"));
                if (!shared)   /* sm_80's scratch stays padded (layout_sm80.c swizzles_ring) */
                    set_shared_layout(l, op, op->results[0]->type, l->lt->swizzle_all);
            }
            break;
        case OP_TRANS: {   /* a computed tile's transpose read by dots (the backward's dSᵀ): via shared memory */
            const Op *src = op->operands[0]->def;
            const Type *t = op->operands[0]->type;
            int q = l->lt->operand_multiple;
            bool elem_ok = l->lt->operand_elem(t->elem);
            /* (a transpose of a transpose reads the inner one's copy in place) */
            if ((!src || (src->kind != OP_LOAD && src->kind != OP_TRANS)) && elem_ok && t->dims[0].size % q == 0 && t->dims[1].size % q == 0 &&
                only_dot_uses(top, op->results[0], false)) {
                op_set_attr(a, op, "nv.operand", attr_str(a, "scratch"));
                set_shared_layout(l, op, t, l->lt->swizzle_all);
            }
            break;
        }
        case OP_ALLOC: {
            const Type *t = op->results[0]->type;
            if (l->lt->swizzle_all && is_16bit(t->elem) && t->rank >= 2)
                op_set_attr(a, op, "nv.swizzle", attr_int(a, 128));
            else if (l->lt->operand_elem(t->elem) && t->rank >= 2 && !t->dims[t->rank - 1].sym)
                set_shared_layout(l, op, t, l->lt->swizzles_ring && l->lt->swizzles_ring(t) &&
                                                only_copied_and_read_by_dots(l, top, op->results[0]));
            break;
        }
        case OP_COPY_ASYNC:
            op_set_attr(a, op, "nv.copy", attr_str(a, l->lt->copy));
            break;
        case OP_DOT: l->lt->annotate_dot(l, op); break;
        default: break;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                annotate(l, top, op->regions[r].blocks[k]);
    }
}

/* ---- row sums left in pieces (FlashAttention-2) -------------------------------- */

/* The online softmax carries each row's sum l' = l·α + rowsum(P) through the
 * key loop, and nothing reads it before the loop ends. Each lane can carry
 * the sum of its own columns instead, scaled by the same α (every lane of a
 * row holds α): the reduce gets nv.partial, and one nv.lane_sum after the
 * loops adds the lanes' pieces. That takes the shuffles out of every
 * iteration. The carry qualifies when its yield is arith.add of
 * arith.mul(arg, α) and a tile.reduce "sum" of a score tile, each used only
 * there, and its start is a splat of 0 or the same carry of an earlier loop
 * (the key loop's segments). */

typedef struct Partial {
    Arena *a;
    Map nuses;     /* Value -> use count, in the launch */
    Map pieces;    /* Values held in pieces: qualifying carries' args and the loops' results */
    Map lane_sum;  /* a loop result -> its nv.lane_sum */
} Partial;

static int nuses(const Partial *p, const Value *v) { return (int)(intptr_t)map_get(&p->nuses, v); }

static bool is_zero_splat(const Value *v) {
    const Op *s = v->def, *c = s && s->kind == OP_SPLAT ? s->operands[0]->def : NULL;
    Attr *x = c && c->kind == OP_CONSTANT ? op_attr(c, "value") : NULL;
    return x && (x->kind == AT_FLOAT ? x->f == 0 : x->kind == AT_INT && x->i == 0);
}

static bool is_row_vector(const Type *t) {
    return t->kind == TY_TILE && t->rank == 2 && !t->dims[0].sym && t->dims[0].size > 1 && !t->dims[1].sym &&
           t->dims[1].size == 1 && scalar_is_float(t->elem);
}

/* The reduce of carry i of loop f, when the carry qualifies. */
static Op *partial_reduce(const Partial *p, const Op *f, int i) {
    const Block *body = f->regions[0].blocks[0];
    Value *arg = body->args[1 + i], *init = f->operands[3 + i];
    const Op *add = body->last->operands[i]->def;
    if (!is_row_vector(arg->type) || (!is_zero_splat(init) && !map_get(&p->pieces, init)) || nuses(p, arg) != 1 ||
        !add || add->kind != OP_ADD || add->parent != body || nuses(p, add->results[0]) != 1)
        return NULL;
    for (int s = 0; s < 2; s++) {
        Op *mul = add->operands[s]->def, *red = add->operands[1 - s]->def;
        if (!mul || !red || mul->kind != OP_MUL || red->kind != OP_TILE_REDUCE ||
            strcmp(op_attr(red, "kind")->s, "sum") != 0 || nuses(p, mul->results[0]) != 1 ||
            nuses(p, red->results[0]) != 1)
            continue;
        const Type *x = red->operands[0]->type;   /* a score tile: every element in one lane */
        if (x->dims[1].sym || x->dims[1].size % 16 || !type_equal(red->results[0]->type, arg->type) ||
            !type_equal(add->results[0]->type, arg->type))
            continue;
        int k = mul->operands[0] == arg ? 0 : mul->operands[1] == arg ? 1 : -1;
        const Type *alpha = k < 0 ? NULL : mul->operands[1 - k]->type;   /* the same in every lane of a row */
        if (alpha && (alpha->kind != TY_TILE || is_row_vector(alpha)) && type_equal(mul->results[0]->type, arg->type))
            return red;
    }
    return NULL;
}

static void find_partials(Partial *p, Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_FOR)
            for (int i = 0; i < op->nresults; i++) {
                Op *red = partial_reduce(p, op, i);
                if (!red)
                    continue;
                op_set_attr(p->a, red, "nv.partial", attr_bool(p->a, true));
                map_put(p->a, &p->pieces, op->regions[0].blocks[0]->args[1 + i], (void *)1);
                map_put(p->a, &p->pieces, op->results[i], (void *)1);
            }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                find_partials(p, op->regions[r].blocks[k]);
    }
}

/* Every use of a loop result held in pieces, other than the start of the
 * same carry of a later loop, reads its nv.lane_sum, placed right after the
 * loop. */
static void join_partials(Partial *p, Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        for (int i = 0; i < op->noperands && op->kind != OP_LANE_SUM; i++) {
            Value *v = op->operands[i];
            if (!v->def || v->def->kind != OP_FOR || !map_get(&p->pieces, v))
                continue;
            if (op->kind == OP_FOR && i >= 3 && map_get(&p->pieces, op->regions[0].blocks[0]->args[1 + i - 3]))
                continue;
            Value *whole = map_get(&p->lane_sum, v);
            if (!whole) {
                Builder b = {.a = p->a, .blk = v->def->parent, .before = v->def->next, .loc = v->def->loc};
                whole = b_emit(&b, OP_LANE_SUM, v->type, 1, &v);
                map_put(p->a, &p->lane_sum, v, whole);
            }
            op->operands[i] = whole;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                join_partials(p, op->regions[r].blocks[k]);
    }
}

static void partial_row_sums(Arena *a, Op *launch) {
    Partial p = {.a = a};
    map_init(&p.nuses, false);
    map_init(&p.pieces, false);
    map_init(&p.lane_sum, false);
    count_uses(launch, &p.nuses, a);
    find_partials(&p, launch->regions[0].blocks[0]);
    join_partials(&p, launch->regions[0].blocks[0]);
}


/* The shared memory a launch's buffers take (its swizzled allocs, the
 * tiles TMA stores or adds through a slab of their own, in loops too), and
 * 4 KiB for its mbarriers and row vectors, as tiling's fit_keys counts. */
static int64_t buffer_bytes(const Block *blk);

static int64_t nested_bytes(const Op *op) {
    int64_t bytes = 0;
    for (int r = 0; r < op->nregions; r++)
        for (int k = 0; k < op->regions[r].nblocks; k++)
            bytes += buffer_bytes(op->regions[r].blocks[k]);
    return bytes;
}

static int64_t own_bytes(const Op *op) {
    const Type *t = op->kind == OP_ALLOC && op_attr(op, "nv.swizzle") ? op->results[0]->type
                    : (op->kind == OP_STORE || op->kind == OP_ATOMIC_ADD) && op_attr(op, "nv.store")
                        ? op->operands[1]->type
                        : NULL;
    int64_t n = !t ? 0 : is_16bit(t->elem) ? 2 : 4;   /* (16-bit tiles, or f32 ones added by TMA) */
    for (int d = 0; t && d < t->rank; d++)
        n *= t->dims[d].size;
    return n;
}

static int64_t buffer_bytes(const Block *blk) {
    int64_t bytes = 0;
    for (const Op *op = blk->first; op; op = op->next)
        bytes += own_bytes(op) + nested_bytes(op);
    return bytes;
}

/* Codegen frees a buffer made inside a top-level op (a loop's) once that
 * op is done (codegen/smem.c smem_release), except in a persistent kernel,
 * whose next tile reuses every buffer: so the top-level loops of a kernel
 * that is not persistent, one after another, need the largest loop's
 * buffers, not their sum. */
int64_t nv_buffer_bytes(const Block *body, bool persistent) {
    if (persistent)
        return 4096 + buffer_bytes(body);
    int64_t bytes = 4096, loops = 0;
    for (const Op *op = body->first; op; op = op->next) {
        bytes += own_bytes(op);
        int64_t nested = nested_bytes(op);
        loops = nested > loops ? nested : loops;
    }
    return bytes + loops;
}

static bool layout_launch(const Lower *l, Op *launch) {
    PassContext *ctx = l->ctx;
    const Block *body = launch->regions[0].blocks[0];
    if (l->lt->prepare_launch)
        l->lt->prepare_launch(l, launch);
    Scan s = {.acc = SK_F32};
    scan(body, body, &s);
    if (s.bf16 && !l->t->bf16) {
        layout_error(l, launch,
                arena_printf(ctx->arena, "%s codegen: bf16 tensors are not supported on %s (%s has no bf16 MMA); use f16",
                             l->t->name, l->t->name, l->t->family));
        return false;
    }
    if (s.bf16 && s.dots && s.acc == SK_F16) {
        layout_error(l, launch,
                arena_printf(ctx->arena, "%s codegen: bf16 operands accumulate in f32 only (use acc f32)", l->t->name));
        return false;
    }
    if (s.wide_dot) {   /* (sema refuses such products; IR text can still hold one) */
        layout_error(l, s.wide_dot,
                arena_printf(ctx->arena, "%s codegen: a matrix product of %s operands; the tensor cores take f16 or "
                                         "bf16", l->t->name, scalar_name(s.wide_dot->operands[0]->type->elem)));
        return false;
    }
    if (s.bad_dot) {   /* before anything trips over the shape (head dim 1) */
        const Type *at = s.bad_dot->operands[0]->type, *rt = s.bad_dot->results[0]->type;
        layout_error(l, launch,
                arena_printf(ctx->arena,
                             "%s codegen: a matrix product of [%lld x %lld] by [%lld x %lld]: both widths must be "
                             "multiples of 16 (the head dims of an attention block, the widths of an mlp block)",
                             l->t->name, (long long)at->dims[0].size, (long long)at->dims[1].size,
                             (long long)at->dims[1].size, (long long)rt->dims[1].size));
        return false;
    }
    int64_t rows = s.dots ? s.dot_rows : s.rows > 0 ? s.rows : 1;
    int warps = 4, row_blocks = 1, warp_cols = 1;
    if (s.dots) {
        if (rows % 16) {
            layout_error(l, launch,
                    arena_printf(ctx->arena, "%s codegen: the row tile (%lld) must be a multiple of 16", l->t->name,
                                 (long long)rows));
            return false;
        }
        /* 4 warps, each 16·row_blocks rows (fewer warps for tiles under 64
         * rows); the target may choose otherwise (pick_warps: sm_80's 8 warps
         * at the register limit, sm_90a's warpgroups) */
        warps = rows % 64 == 0 ? 4 : (int)(rows / 16);
        Attr *hint = op_attr(launch, "schedule.warps");
        if (l->lt->pick_warps && !l->lt->pick_warps(l, launch, &s, rows, &warps, &hint))
            return false;
        if (hint) {
            if (rows % (16 * hint->i)) {
                layout_error(l, launch,
                        arena_printf(ctx->arena,
                                     "%s codegen: warps(%lld) does not split the row tile (%lld) into 16-row blocks",
                                     l->t->name, (long long)hint->i, (long long)rows));
                return false;
            }
            warps = (int)hint->i;
        }
        row_blocks = (int)(rows / 16 / warps);
        if (l->lt->warp_grid)
            l->lt->warp_grid(&s, rows, hint, &warps, &warp_cols, &row_blocks);
    }
    Arena *a = ctx->arena;
    op_set_attr(a, launch, "nv.layout", attr_str(a, !s.dots ? "blocked" : s.acc == SK_F16 ? "acc.f16" : "acc.f32"));
    op_set_attr(a, launch, "nv.rows", attr_int(a, rows));
    op_set_attr(a, launch, "nv.warps", attr_int(a, warps));
    op_set_attr(a, launch, "nv.row_blocks", attr_int(a, row_blocks));
    if (warp_cols > 1)
        op_set_attr(a, launch, "nv.warp_cols", attr_int(a, warp_cols));
    if (!s.dots)
        narrow_rows(a, launch, &s, rows, warps);
    Lower lw = *l;
    lw.row_blocks = row_blocks;
    lw.registers_scarce = registers_scarce(&s);
    l = &lw;
    annotate(l, body, body);   /* in order: a dot's loads come before it (and allocs before copies) */
    if (l->lt->annotate_launch)
        lw.tma = l->lt->annotate_launch(l, launch, &s, warps);
    if (s.dots)
        partial_row_sums(a, launch);
    if (l->lt->counts_groups && !l->tma) {
        Map group;
        map_init(&group, false);
        int count = 0;
        count_groups(l, launch->regions[0].blocks[0], &group, &count);
    }
    return true;
}

static bool walk(const Lower *l, Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_LAUNCH) {
            if (!layout_launch(l, op))
                return false;
            continue;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                if (!walk(l, op->regions[r].blocks[k]))
                    return false;
    }
    return true;
}

bool nv_layout_run(const LayoutTarget *lt, Op *module, PassContext *ctx) {
    op_set_attr(ctx->arena, module, "nv.target", attr_str(ctx->arena, lt->target->name));
    Lower l = {ctx, lt, lt->target, 1, false, false};
    return walk(&l, op_body(module));
}
