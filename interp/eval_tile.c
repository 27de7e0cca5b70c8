/* eval_tile.c — the tile level: loads, stores and gathers on memrefs, the
 * tiles in registers (splat, iota, trans, dot, reductions), shared buffers
 * and the async copies that land at their waits, loops, and launches
 * (their programs in grid order, or a persistent launch's scheduler's). */
#include "interp/eval.h"

#include <string.h>

/* ---- the tile level ------------------------------------------------------- */

static Tensor *scalar_tensor(Interp *in, ScalarKind k, double x) {
    Tensor *t = tensor_new(in->arena, k, 0, NULL);
    t->data[0] = x;
    return t;
}

static int64_t index_operand(Interp *in, const Op *op, int i) {
    return (int64_t)eval_get(in, op->operands[i])->data[0];
}

/* A box of a memref at the op's indices (tile.load, tile.store): the base
 * coordinates, read once, and which memref dimension each tile axis walks. */
typedef struct Box {
    const Tensor *mem, *tile;
    int64_t base[MAX_RANK];
    int axis_dim[MAX_RANK];
    int bound_dim;         /* a bounded tile.store's dimension, or -1 */
    int64_t bound;         /* ... and its bound: coordinates from it are outside */
} Box;

static void box_init(Interp *in, const Op *op, const Tensor *mem, const Tensor *tile, int first_index, Box *b) {
    Attr *dims = op_attr(op, "dims");
    b->mem = mem;
    b->tile = tile;
    for (int d = 0; d < mem->rank; d++)
        b->base[d] = index_operand(in, op, first_index + d);
    for (int a = 0; a < tile->rank; a++)
        b->axis_dim[a] = (int)dims->elems[a]->i;
    Attr *bound = op_attr(op, "bound");
    b->bound_dim = bound ? (int)bound->i : -1;
    b->bound = bound ? index_operand(in, op, op->noperands - 1) : 0;
}

/* The memref offset of tile element `e`; -1 when it falls outside the memref. */
static int64_t box_offset(const Box *b, int64_t e) {
    int64_t coord[MAX_RANK];
    memcpy(coord, b->base, sizeof(int64_t) * (size_t)b->mem->rank);
    for (int a = b->tile->rank - 1; a >= 0; a--) {
        int64_t t = e % b->tile->dims[a];
        e /= b->tile->dims[a];
        if (b->axis_dim[a] >= 0)
            coord[b->axis_dim[a]] += t;
    }
    int64_t off = 0;
    for (int d = 0; d < b->mem->rank; d++) {
        if (coord[d] < 0 || coord[d] >= b->mem->dims[d] || (d == b->bound_dim && coord[d] >= b->bound))
            return -1;
        off = off * b->mem->dims[d] + coord[d];
    }
    return off;
}

bool eval_load(Interp *in, const Op *op) {
    Tensor *mem = eval_get(in, op->operands[0]), *r = eval_new_result(in, op);
    if (!r)
        return false;
    Attr *pad = op_attr(op, "pad");
    double fill = pad ? (pad->kind == AT_FLOAT ? pad->f : (double)pad->i) : 0;
    Box box;
    box_init(in, op, mem, r, 1, &box);
    for (int64_t e = 0; e < r->size; e++) {
        int64_t off = box_offset(&box, e);
        r->data[e] = off < 0 ? fill : mem->data[off];
        /* memory nothing wrote: a stage read before its copy landed (a
         * missing or misplaced tile.wait), a temporary read before its kernel */
        if (off >= 0 && interp_is_poison(r->data[e]))
            return eval_fail(in, op, "reads memory that nothing wrote (a copy not waited for, or a buffer not yet "
                                "stored)");
    }
    return eval_set_result(in, op, r);
}

bool eval_store(Interp *in, const Op *op) {
    Tensor *mem = eval_get(in, op->operands[0]), *t = eval_get(in, op->operands[1]);
    Box box;
    box_init(in, op, mem, t, 2, &box);
    for (int64_t e = 0; e < t->size; e++) {
        int64_t off = box_offset(&box, e);
        if (off >= 0)
            mem->data[off] = eval_round(in, mem->dtype, t->data[e]);
    }
    return true;
}

/* tile.atomic_add: adds the tile into the memref (rounding each sum to the
 * memref's type); programs run one at a time here, so atomicity is free. */
bool eval_atomic_add(Interp *in, const Op *op) {
    Tensor *mem = eval_get(in, op->operands[0]), *t = eval_get(in, op->operands[1]);
    Box box;
    box_init(in, op, mem, t, 2, &box);
    for (int64_t e = 0; e < t->size; e++) {
        int64_t off = box_offset(&box, e);
        if (off >= 0)
            mem->data[off] = eval_round(in, mem->dtype, mem->data[off] + t->data[e]);
    }
    return true;
}

/* tile.gather: element-wise reads at index tiles; outside the memref reads 0
 * (padding lanes of a tile compute on indices past the end). */
bool eval_gather(Interp *in, const Op *op) {
    Tensor *mem = eval_get(in, op->operands[0]), *r = eval_new_result(in, op);
    if (!r)
        return false;
    int64_t strides[MAX_RANK][MAX_RANK], idx[MAX_RANK] = {0};
    Tensor *ix[MAX_RANK];
    for (int d = 0; d < mem->rank; d++) {
        ix[d] = eval_get(in, op->operands[1 + d]);
        broadcast_strides(ix[d], r->rank, strides[d]);
    }
    for (int64_t e = 0; e < r->size; e++) {
        int64_t off = 0;
        bool inside = true;
        for (int d = 0; d < mem->rank; d++) {
            int64_t o = 0;
            for (int a = 0; a < r->rank; a++)
                o += idx[a] * strides[d][a];
            int64_t c = (int64_t)ix[d]->data[o];
            inside &= c >= 0 && c < mem->dims[d];
            off = off * mem->dims[d] + c;
        }
        r->data[e] = inside ? mem->data[off] : 0;
        for (int a = r->rank - 1; a >= 0 && ++idx[a] == r->dims[a]; a--)
            idx[a] = 0;
    }
    return eval_set_result(in, op, r);
}

bool eval_tile_misc(Interp *in, const Op *op) {
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    if (op->kind == OP_SPLAT) {
        double x = eval_get(in, op->operands[0])->data[0];
        for (int64_t e = 0; e < r->size; e++)
            r->data[e] = x;
    } else if (op->kind == OP_IOTA) {
        int axis = (int)op_attr(op, "axis")->i;
        int64_t inner = 1;
        for (int d = axis + 1; d < r->rank; d++)
            inner *= r->dims[d];
        for (int64_t e = 0; e < r->size; e++)
            r->data[e] = (double)((e / inner) % r->dims[axis]);
    } else if (op->kind == OP_LANE_SUM) {   /* the target's bookkeeping: the value is the operand's */
        memcpy(r->data, eval_get(in, op->operands[0])->data, sizeof(double) * (size_t)r->size);
    } else if (op->kind == OP_TRANS) {
        Tensor *x = eval_get(in, op->operands[0]);
        for (int64_t i = 0; i < r->dims[0]; i++)
            for (int64_t j = 0; j < r->dims[1]; j++)
                r->data[i * r->dims[1] + j] = x->data[j * x->dims[1] + i];
    } else if (op->kind == OP_DOT) {
        Tensor *a = eval_get(in, op->operands[0]), *b = eval_get(in, op->operands[1]), *c = eval_get(in, op->operands[2]);
        memcpy(r->data, c->data, sizeof(double) * (size_t)r->size);
        matmul_acc(in, r->dtype, a->data, b->data, r->data, a->dims[0], a->dims[1], b->dims[1]);
    } else {  /* tile.reduce over each row */
        Tensor *x = eval_get(in, op->operands[0]);
        bool max = strcmp(op_attr(op, "kind")->s, "max") == 0;
        int64_t n = x->dims[1];
        for (int64_t i = 0; i < r->dims[0]; i++) {
            double acc = max ? -INFINITY : 0;
            for (int64_t j = 0; j < n; j++) {
                double v = x->data[i * n + j];
                acc = max ? nan_max(acc, v) : eval_round(in, r->dtype, acc + v);
            }
            r->data[i] = acc;
        }
    }
    return eval_set_result(in, op, r);
}

/* ---- shared buffers and async copies ---------------------------------------
 * A copy is only recorded when issued; it lands when a tile.wait for it (or
 * for a later copy: copies complete in order) runs. Until then the stage
 * holds whatever it held (NaN in a new buffer), so a missing wait or a wrong
 * stage index reads the wrong data, as it would on the GPU. */

bool eval_alloc(Interp *in, const Op *op) {
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    for (int64_t e = 0; e < r->size; e++)
        r->data[e] = interp_poison();
    return eval_set_result(in, op, r);
}

bool eval_copy_async(Interp *in, const Op *op) {
    Copy *c = NEW(in->arena, Copy);
    c->src = eval_get(in, op->operands[0]);
    c->dst = eval_get(in, op->operands[1]);
    c->stage = index_operand(in, op, 2);
    for (int d = 0; d < c->src->rank; d++)
        c->src_index[d] = index_operand(in, op, 3 + d);
    c->op = op;
    c->seq = in->copies.len;
    if (c->stage < 0 || c->stage >= c->dst->dims[0])
        return eval_fail(in, op, "stage %lld is outside the buffer's %lld stages", (long long)c->stage,
                    (long long)c->dst->dims[0]);
    vec_push(in->arena, &in->copies, c);
    Tensor *tok = scalar_tensor(in, SK_INDEX, (double)c->seq);
    tok->dtype = SK_NONE;
    map_put(in->arena, &in->values, op->results[0], tok);
    return true;
}

static void land(Copy *c) {
    Attr *dims = op_attr(c->op, "dims");
    int64_t box[MAX_RANK], n = 1;
    int rank = c->dst->rank - 1;
    for (int a = 0; a < rank; a++)
        n *= box[a] = c->dst->dims[1 + a];
    for (int64_t e = 0; e < n; e++) {
        int64_t t[MAX_RANK], r = e, coord[MAX_RANK], off = 0;
        for (int a = rank - 1; a >= 0; a--) {
            t[a] = r % box[a];
            r /= box[a];
        }
        memcpy(coord, c->src_index, sizeof coord);
        for (int a = 0; a < rank; a++)
            if (dims->elems[a]->i >= 0)
                coord[dims->elems[a]->i] += t[a];
        bool inside = true;
        for (int d = 0; d < c->src->rank; d++) {
            inside &= coord[d] >= 0 && coord[d] < c->src->dims[d];
            off = off * c->src->dims[d] + coord[d];
        }
        c->dst->data[c->stage * n + e] = inside ? c->src->data[off] : 0;
    }
    c->done = true;
}

/* The copy a tile.wait waited for. */
Copy *waited_copy(Interp *in, const Op *wait) {
    int64_t seq = (int64_t)eval_get(in, wait->operands[0])->data[0];
    return seq >= 0 && seq < in->copies.len ? in->copies.items[seq] : NULL;
}

/* tile.wait lands its copy and every earlier one (copies complete in
 * order). With nv.pending = P (sm_80's cp.async.wait_group P) it lands all
 * but the P copies issued last instead, whichever copy it names: a P that
 * leaves the named copy in flight reads an unlanded stage. A TMA copy
 * (nv.copy "tma", sm_90a) completes on its own stage's mbarrier: the wait
 * lands that copy only. */
bool eval_wait(Interp *in, const Op *op) {
    int64_t seq = (int64_t)eval_get(in, op->operands[0])->data[0];
    Copy *mine = waited_copy(in, op);
    Attr *how = mine ? op_attr(mine->op, "nv.copy") : NULL;
    if (how && how->kind == AT_STR && strcmp(how->s, "tma") == 0) {
        if (!mine->done)
            land(mine);
        return true;
    }
    Attr *pending = op_attr(op, "nv.pending");
    if (pending) {
        if (pending->kind != AT_INT || pending->i < 0)
            return eval_fail(in, op, "nv.pending must be a count of copies");
        seq = in->copies.len - 1 - pending->i;
    }
    for (int i = 0; i <= seq && i < in->copies.len; i++) {
        Copy *c = in->copies.items[i];
        if (!c->done)
            land(c);
    }
    return true;
}

bool eval_for(Interp *in, const Op *op) {
    int64_t lb = index_operand(in, op, 0), ub = index_operand(in, op, 1), step = index_operand(in, op, 2);
    if (step <= 0)
        return eval_fail(in, op, "the step must be positive, not %lld", (long long)step);
    int n = op->noperands - 3;
    const Block *b = op->regions[0].blocks[0];
    Tensor **carried = NEW_ARRAY(in->arena, Tensor *, n + 1);
    for (int i = 0; i < n; i++)
        carried[i] = eval_get(in, op->operands[3 + i]);
    for (int64_t iv = lb; iv < ub; iv += step) {
        map_put(in->arena, &in->values, b->args[0], scalar_tensor(in, SK_INDEX, (double)iv));
        for (int i = 0; i < n; i++)
            map_put(in->arena, &in->values, b->args[1 + i], carried[i]);
        if (!eval_block(in, b, carried))
            return false;
    }
    for (int i = 0; i < n; i++)
        map_put(in->arena, &in->values, op->results[i], carried[i]);
    return true;
}

/* A persistent launch's tile t (of tiles_x · tiles_y) as pid (x, y), in
 * the order warp-roles' nv.scheduler takes them (codegen/warp_specialise.c
 * emits the same): FlashAttention-3's longest-first order, the y tiles in
 * sections of S = max(1, section_tiles / tiles_x) and a section's tiles
 * from the last x to the first, each x over the section's heads. */
static void tile_order(int64_t t, int64_t tiles_x, int64_t tiles_y, int64_t section_tiles, int64_t pid[2]) {
    int64_t s = section_tiles / tiles_x > 0 ? section_tiles / tiles_x : 1;
    int64_t first_y = t / (s * tiles_x) * s;
    int64_t heads = tiles_y - first_y < s ? tiles_y - first_y : s;
    int64_t r = t - first_y * tiles_x;
    pid[0] = tiles_x - 1 - r / heads;
    pid[1] = first_y + r % heads;
}

/* The programs of a launch in the order they run: the grid's, or a
 * persistent launch's scheduler's (which must visit every tile once; z is
 * then 1). NULL after an error. */
typedef struct { int64_t id[3]; } Pid;

static Pid *launch_order(Interp *in, const Op *op, const int64_t grid[3], int64_t *n) {
    *n = grid[0] * grid[1] * grid[2];
    Pid *pids = NEW_ARRAY(in->arena, Pid, *n > 0 ? *n : 1);
    Attr *sched = op_attr(op, "nv.scheduler"), *section = op_attr(op, "nv.section_tiles");
    if (!sched) {
        int64_t i = 0;
        for (int64_t z = 0; z < grid[2]; z++)
            for (int64_t y = 0; y < grid[1]; y++)
                for (int64_t x = 0; x < grid[0]; x++, i++)
                    pids[i] = (Pid){{x, y, z}};
        return pids;
    }
    if (grid[2] != 1 || !section)
        return eval_fail(in, op, "nv.scheduler needs grid z = 1 and nv.section_tiles"), NULL;
    bool *seen = NEW_ARRAY(in->arena, bool, *n > 0 ? *n : 1);
    for (int64_t t = 0; t < *n; t++) {
        int64_t pid[2];
        tile_order(t, grid[0], grid[1], section->i, pid);
        if (pid[0] < 0 || pid[0] >= grid[0] || pid[1] < 0 || pid[1] >= grid[1] || seen[pid[1] * grid[0] + pid[0]])
            return eval_fail(in, op, "nv.scheduler's tile %lld is (%lld, %lld): outside the grid or taken before",
                        (long long)t, (long long)pid[0], (long long)pid[1]), NULL;
        seen[pid[1] * grid[0] + pid[0]] = true;
        pids[t] = (Pid){{pid[0], pid[1], 0}};
    }
    return pids;
}

/* tile.launch: outputs start poisoned (NaN), so an element no program writes
 * shows; each program runs alone, with its own scratch memory. */
bool eval_launch(Interp *in, const Op *op) {
    int64_t grid[3];
    for (int i = 0; i < 3; i++)
        grid[i] = index_operand(in, op, i);
    int nin = op->noperands - 3;
    Tensor **outs = NEW_ARRAY(in->arena, Tensor *, op->nresults + 1);
    Attr *zeroed = op_attr(op, "zeroed");   /* outputs that start at 0 (accumulated into) */
    for (int i = 0; i < op->nresults; i++) {
        if (!(outs[i] = eval_new_result_n(in, op, i)))
            return false;
        bool zero = false;
        for (int z = 0; zeroed && z < zeroed->n; z++)
            zero |= zeroed->elems[z]->i == i;
        for (int64_t e = 0; e < outs[i]->size; e++)
            outs[i]->data[e] = zero ? 0 : interp_poison();
    }
    const Block *b = op->regions[0].blocks[0];
    int64_t n;
    Pid *pids = launch_order(in, op, grid, &n);
    if (!pids)
        return false;
    for (int64_t t = 0; t < n; t++) {
        Arena scratch = {0};
        Interp prog = *in;
        prog.arena = &scratch;
        prog.copies = (PtrVec){0};   /* a program's copies are its own */
        map_init(&prog.values, false);
        for (int i = 0; i < 3; i++)
            map_put(&scratch, &prog.values, b->args[i], scalar_tensor(&prog, SK_INDEX, (double)pids[t].id[i]));
        for (int i = 0; i < nin; i++)
            map_put(&scratch, &prog.values, b->args[3 + i], eval_get(in, op->operands[3 + i]));
        for (int i = 0; i < op->nresults; i++)
            map_put(&scratch, &prog.values, b->args[3 + nin + i], outs[i]);
        bool ok = eval_block(&prog, b, NULL);
        arena_free(&scratch);
        if (!ok) {
            in->failed = true;
            return false;
        }
    }
    for (int i = 0; i < op->nresults; i++)
        map_put(in->arena, &in->values, op->results[i], outs[i]);
    return true;
}
