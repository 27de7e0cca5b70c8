/* lower.c — a kernel (tile IR) in LLVM IR: the op dispatch (elementwise.c,
 * memory.c and reduce.c hold most ops; target hooks, CgTarget, the MMA and
 * the async copies), transposes, loops and blocks, the stage releases, and
 * the kernel's function, entry and launch bounds. */
#include "codegen/lower.h"

#include <string.h>

/* ---- ops ---------------------------------------------------------------------- */

bool dot_fits(Cg *cg, const Op *op) {
    const Type *at = op->operands[0]->type, *bt = op->operands[1]->type, *rt = op->results[0]->type;
    int64_t M = at->dims[0].size, K = at->dims[1].size, N = bt->dims[1].size;
    if ((rt->elem == SK_F16) != cg->acc16)
        return cg_err(cg, op, "all tile.dot ops of a kernel must accumulate in one type", NULL);
    if (M != cg->R || K % 16 || N % (16 * cg->wcols))
        return cg_err(cg, op, "%s", arena_printf(cg->a, "a %lldx%lldx%lld dot does not fit the kernel's warp tiling",
                                                  (long long)M, (long long)K, (long long)N));
    return true;
}

Dist *dot_a_in_registers(Cg *cg, const Op *op) {
    Dist *p = as_dist(cg, op, op->operands[0]);
    if (cg->failed)
        return NULL;
    if (p->rows != cg->R || p->cols != op->operands[0]->type->dims[1].size) {
        cg_err(cg, op, "operand A of tile.dot must be a full tile", NULL);
        return NULL;
    }
    return p;
}

bool copy_operands(Cg *cg, const Op *op, const char *how, Mem **src, Mem **dst) {
    *src = as_mem(cg, op, op->operands[0]);
    *dst = as_mem(cg, op, op->operands[1]);
    if (!*src || !*dst)
        return false;
    Attr *copy = op_attr(op, "nv.copy");
    if (!copy || strcmp(copy->s, how) != 0)
        return cg_err(cg, op, "%s",
                      arena_printf(cg->a, "internal error: tile.copy_async has no nv.copy = \"%s\" (run %s)", how,
                                   cg->info->lowering));
    return true;
}

const Token *wait_token(Cg *cg, const Op *op) {
    Cv *c = cv_get(cg, op->operands[0]);
    if (!c || c->kind != CV_TOKEN) {
        cg_err(cg, op, "tile.wait needs a token of tile.copy_async", NULL);
        return NULL;
    }
    return c->tok;
}

ThreadIds thread_ids_here(Cg *cg) {
    ThreadIds saved = {cg->lane, cg->warp_row, cg->warp_col};
    if (!cg->rematerialise)
        return saved;
    LLVMValueRef *ids[3] = {&cg->lane, &cg->warp_row, &cg->warp_col};
    for (int i = 0; i < 3; i++)
        if (*ids[i] && !LLVMIsConstant(*ids[i]))
            *ids[i] = opaque(cg, *ids[i]);
    return saved;
}

void thread_ids_restore(Cg *cg, ThreadIds saved) {
    cg->lane = saved.lane, cg->warp_row = saved.warp_row, cg->warp_col = saved.warp_col;
}

/* A 16-bit tile in the accumulator layout into shared memory by
 * stmatrix: each 16 × 16 block of a warp's is four 8 × 8 matrices whose
 * fragments are the accumulator's (row lane / 4, columns 2·(lane % 4) and
 * + 1), its elements i = 0..7 pairs (0, 1) rows 0-7, (2, 3) rows 8-15,
 * (4, 5) columns 8-15 and (6, 7) both; lane T gives the address of row
 * T % 8 of matrix T / 8, 16 contiguous bytes (one chunk of a swizzled
 * row). One instruction where 16-bit stores were eight: the backward's
 * dSᵀ copy at 128 query columns took 8 % of the key-tile kernel's issue
 * slots element by element (ncu, H100). */
static void store_stmatrix(Cg *cg, const Dist *d, const View *w) {
    LLVMValueRef row_in = add(cg, lane_bit(cg, 8), lane_bit(cg, 7));
    LLVMValueRef col_in = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 1), "");
    for (int a = 0; a < cg->mrep; a++)
        for (int b = 0; b < nrep_of(cg, d->cols); b++) {
            LLVMValueRef args[5];
            for (int j = 0; j < 4; j++)
                args[1 + j] = pack_b32(cg, dist_get(cg, d, (Pos){a, b, 2 * j}), dist_get(cg, d, (Pos){a, b, 2 * j + 1}));
            LLVMValueRef row = add(cg, warp_row_base(cg, a), row_in);
            LLVMValueRef col = add(cg, add(cg, ci64(cg, 16 * b), col_in), warp_col_base(cg, d->cols));
            LLVMValueRef at = gep(cg, d->elem, w->base, smem_offset(cg, row, col, w->stride, w->panel_rows, w->swizzle));
            args[0] = LLVMBuildPtrToInt(cg->b, at, cg->i32, "");
            cg_asm(cg, "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}",
                   LLVMVoidTypeInContext(cg->ctx), args, 5);
        }
}

/* A computed tile (registers) that dots read transposed (nv.operand on the
 * tile.trans): stored row-major into a shared buffer of its own, which the
 * dots then read as a View. The barrier before the stores lets the previous
 * loop iteration's readers finish; the one after publishes them. */
static View *registers_to_view(Cg *cg, const Op *op, const Dist *d) {
    Attr *sw = op_attr(op, "nv.swizzle"), *rs = op_attr(op, "nv.row_stride");
    int swizzle = sw ? (int)sw->i : 0;
    View *w = NEW(cg->a, View);
    w->rows = d->rows, w->cols = d->cols;
    w->stride = swizzle ? d->cols : rs->i;
    w->swizzle = swizzle;
    w->panel_rows = d->rows;
    cg->owner = op->results[0];
    w->base = smem_alloc_aligned(cg, d->rows * w->stride * esize(d->elem), swizzle ? 1024 : 16);
    cg->owner = NULL;
    cg_barrier(cg);
    ThreadIds ids = thread_ids_here(cg);
    /* a whole 16-bit tile in the accumulator layout */
    bool whole16 = cg->lay == LAY_ACC && esize(d->elem) == 2 && d->rows > 1 && d->cols > 1;
    if (whole16 && cg->target->stmatrix)
        store_stmatrix(cg, d, w);
    else {
        Pos *ps;
        int n = positions(cg, d->rows, d->cols, &ps);
        LLVMValueRef own = tile_owner(cg, d->rows, d->cols);
        for (int k = 0; k < n; k++) {
            LLVMValueRef row, col;
            coords(cg, ps[k], d->rows, d->cols, &row, &col);
            LLVMValueRef at = gep(cg, d->elem, w->base, smem_offset(cg, row, col, w->stride, w->panel_rows, swizzle));
            LLVMBasicBlockRef join = if_begin(cg, own);
            if (whole16 && cg->target->pair_stores && pos_pair(ps, k, n)) {   /* adjacent: one 32-bit store */
                store_elem(cg, SK_I32, pack_b32(cg, dist_get(cg, d, ps[k]), dist_get(cg, d, ps[k + 1])), at);
                k++;
            } else
                store_elem(cg, d->elem, dist_get(cg, d, ps[k]), at);
            if_end(cg, join);
        }
    }
    thread_ids_restore(cg, ids);
    proxy_fence(cg);
    cg_barrier(cg);
    return w;
}

static void emit_trans(Cg *cg, const Op *op) {
    Cv *c = cv_get(cg, op->operands[0]);
    View *from = c && c->kind == CV_VIEW ? c->view : NULL;
    if (c && c->kind == CV_DIST && op_attr(op, "nv.operand") && c->d->rows == op->operands[0]->type->dims[0].size &&
        c->d->cols == op->operands[0]->type->dims[1].size)
        from = registers_to_view(cg, op, c->d);
    if (!from) {
        cg_err(cg, op, "tile.trans is supported on loaded tiles, and on computed tiles only dots read", NULL);
        return;
    }
    View *w = NEW(cg->a, View);
    *w = *from;
    w->trans = !w->trans;
    int64_t t = w->rows;
    w->rows = w->cols;
    w->cols = t;
    Cv *r = NEW(cg->a, Cv);
    r->kind = CV_VIEW;
    r->view = w;
    cv_put(cg, op->results[0], r);
}

/* ---- control flow --------------------------------------------------------------- */

/* Loop-carried state: a phi per stored slot of a tile, per register of a
 * token, or one for a scalar. */
typedef struct Carried {
    Cv *cv;
    int n;
    LLVMValueRef *phis;
} Carried;

static Cv *make_phis(Cg *cg, const Op *op, const Value *arg, Cv *init, Carried *c) {
    Cv *cv = NEW(cg->a, Cv);
    const Type *t = arg->type;
    if (t->kind == TY_TILE) {
        int64_t rows = t->dims[0].size, cols = t->dims[1].size;
        Dist *d = dist_new(cg, t->elem, rows, cols);
        Pos *ps;
        int n = positions(cg, rows, cols, &ps);
        c->phis = NEW_ARRAY(cg->a, LLVMValueRef, d->n);
        for (int k = 0; k < n; k++) {
            LLVMValueRef p = LLVMBuildPhi(cg->b, lty(cg, t->elem), "");
            dist_set(cg, d, ps[k], p);
        }
        for (int s = 0; s < d->n; s++)
            c->phis[s] = d->v[s];
        c->n = d->n;
        cv->kind = CV_DIST;
        cv->d = d;
    } else if (t->kind == TY_TOKEN) {
        if (!init || init->kind != CV_TOKEN) {
            cg_err(cg, op, "a loop-carried token must come from tile.copy_async", NULL);
            return cv;
        }
        Token *tok = NEW(cg->a, Token);
        *tok = *init->tok;
        tok->regs = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)tok->nregs);
        c->n = tok->nregs + 1;
        c->phis = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)c->n);
        for (int j = 0; j < tok->nregs; j++)
            c->phis[j] = tok->regs[j] = LLVMBuildPhi(cg->b, LLVMTypeOf(init->tok->regs[j]), "");
        c->phis[tok->nregs] = tok->stage = LLVMBuildPhi(cg->b, cg->i64, "");
        cv->kind = CV_TOKEN;
        cv->tok = tok;
    } else {
        c->n = 1;
        c->phis = NEW_ARRAY(cg->a, LLVMValueRef, 1);
        c->phis[0] = LLVMBuildPhi(cg->b, lty(cg, t->elem), "");
        cv->kind = CV_SCALAR;
        cv->s = c->phis[0];
    }
    c->cv = cv;
    return cv;
}

static void incoming(Cg *cg, const Op *op, Carried *c, const Value *src_val, Cv *src, LLVMBasicBlockRef bb) {
    if (c->cv->kind == CV_DIST) {
        Dist *d = c->cv->d;
        Dist *s = src->kind == CV_DIST ? src->d : as_dist(cg, op, src_val);
        Pos *ps;
        int n = positions(cg, d->rows, d->cols, &ps);
        for (int k = 0; k < n; k++) {
            LLVMValueRef v = cg_cast(cg, dist_get(cg, s, ps[k]), s->elem, d->elem);
            LLVMValueRef phi = dist_get(cg, d, ps[k]);
            LLVMAddIncoming(phi, &v, &bb, 1);
        }
    } else if (c->cv->kind == CV_TOKEN) {
        if (src->kind != CV_TOKEN || src->tok->nregs != c->cv->tok->nregs || src->tok->dst != c->cv->tok->dst) {
            cg_err(cg, op, "the tokens a loop carries must copy into the same buffer", NULL);
            return;
        }
        for (int j = 0; j < src->tok->nregs; j++)
            LLVMAddIncoming(c->phis[j], &src->tok->regs[j], &bb, 1);
        LLVMAddIncoming(c->phis[c->n - 1], &src->tok->stage, &bb, 1);
    } else {
        LLVMValueRef v = src->kind == CV_SCALAR ? src->s : LLVMGetUndef(LLVMTypeOf(c->phis[0]));
        LLVMAddIncoming(c->phis[0], &v, &bb, 1);
    }
}

static void emit_for(Cg *cg, const Op *op) {
    LLVMValueRef lb = as_scalar(cg, op, op->operands[0]), ub = as_scalar(cg, op, op->operands[1]),
                 step = as_scalar(cg, op, op->operands[2]);
    int ncarry = op->noperands - 3;
    const Block *body = op->regions[0].blocks[0];
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "loop");
    LLVMBasicBlockRef bodybb = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "exit");
    /* values of the inits, as seen from the preheader */
    Cv **init = NEW_ARRAY(cg->a, Cv *, ncarry + 1);
    for (int i = 0; i < ncarry; i++)
        init[i] = cv_get(cg, op->operands[3 + i]);
    /* the producer carries no tiles (it computes none) */
    bool *skip = NEW_ARRAY(cg->a, bool, ncarry + 1);
    for (int i = 0; i < ncarry; i++)
        skip[i] = cg->hopper.role == ROLE_PRODUCER && body->args[1 + i]->type->kind == TY_TILE;
    /* make sure tile inits are tiles before leaving the preheader */
    for (int i = 0; i < ncarry; i++)
        if (!skip[i] && body->args[1 + i]->type->kind == TY_TILE && init[i] && init[i]->kind == CV_VIEW)
            as_dist(cg, op, op->operands[3 + i]);
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, head);
    LLVMValueRef iv = LLVMBuildPhi(cg->b, cg->i64, "iv");
    LLVMAddIncoming(iv, &lb, &pre, 1);
    Carried *car = NEW_ARRAY(cg->a, Carried, ncarry + 1);
    for (int i = 0; i < ncarry; i++)
        if (!skip[i])
            cv_put(cg, body->args[1 + i], make_phis(cg, op, body->args[1 + i], init[i], &car[i]));
    if (cg->failed)
        return;
    /* incoming from the preheader: build any conversions there */
    LLVMBasicBlockRef save = LLVMGetInsertBlock(cg->b);
    LLVMPositionBuilderBefore(cg->b, LLVMGetBasicBlockTerminator(pre));
    for (int i = 0; i < ncarry; i++)
        if (!skip[i])
            incoming(cg, op, &car[i], op->operands[3 + i], init[i], pre);
    LLVMPositionBuilderAtEnd(cg->b, save);
    cv_put(cg, body->args[0], cv_scalar(cg, iv));
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, iv, ub, ""), bodybb, exit);
    LLVMPositionBuilderAtEnd(cg->b, bodybb);
    const Value **yv = NEW_ARRAY(cg->a, const Value *, ncarry + 1);
    Cv **ys = NEW_ARRAY(cg->a, Cv *, ncarry + 1);
    emit_block(cg, body, yv, ys);
    if (cg->failed)
        return;
    LLVMValueRef next = LLVMBuildAdd(cg->b, iv, step, "");
    for (int i = 0; i < ncarry; i++) {
        if (!skip[i] && ys[i] && ys[i]->kind == CV_VIEW)
            as_dist(cg, op, yv[i]);
    }
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(cg->b);
    for (int i = 0; i < ncarry; i++)
        if (!skip[i])
            incoming(cg, op, &car[i], yv[i], ys[i], latch);
    LLVMAddIncoming(iv, &next, &latch, 1);
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, exit);
    for (int i = 0; i < ncarry; i++)
        if (!skip[i])
            cv_put(cg, op->results[i], car[i].cv);
}

static void emit_op(Cg *cg, const Op *op) {
    switch (op->kind) {
    case OP_CONSTANT: {
        const Type *t = op->results[0]->type;
        Attr *v = op_attr(op, "value");
        double x = v->kind == AT_FLOAT ? v->f : (double)v->i;
        LLVMValueRef c = scalar_is_float(t->elem) ? fconst(cg, t->elem, x)
                                                  : LLVMConstInt(lty(cg, t->elem), (unsigned long long)v->i, 1);
        cv_put(cg, op->results[0], cv_scalar(cg, c));
        return;
    }
    case OP_DIM: {
        const char *name = op_attr(op, "name")->s;
        for (int i = 0; i < cg->spec->ndims; i++)
            if (strcmp(cg->spec->dims[i], name) == 0) {
                cv_put(cg, op->results[0],
                       cv_scalar(cg, LLVMGetParam(cg->fn, (unsigned)(cg->spec->launch->noperands - 3 +
                                                                     cg->spec->launch->nresults + i))));
                return;
            }
        cg_err(cg, op, "unknown dim '%s'", name);
        return;
    }
    case OP_LOAD: emit_load(cg, op); return;
    case OP_STORE: emit_store(cg, op); return;
    case OP_ATOMIC_ADD: emit_store(cg, op); return;
    case OP_GATHER: emit_gather(cg, op); return;
    case OP_SPLAT: case OP_IOTA: emit_splat_iota(cg, op); return;
    case OP_TILE_REDUCE: emit_reduce(cg, op); return;
    case OP_LANE_SUM: emit_lane_sum(cg, op); return;
    case OP_DOT: cg->target->dot(cg, op); return;
    case OP_TRANS: emit_trans(cg, op); return;
    case OP_ALLOC: emit_alloc(cg, op); return;
    case OP_COPY_ASYNC: cg->target->copy_async(cg, op); return;
    case OP_WAIT: cg->target->wait(cg, op); return;
    case OP_FOR: emit_for(cg, op); return;
    default: break;
    }
    const char *name = op_info[op->kind].name;
    if (op_kind_has(op->kind, OPF_ELEMENTWISE)) {   /* (bf16 where the target has none: refused by its layout pass) */
        emit_elementwise(cg, op);
        return;
    }
    cg_err(cg, op, "%s", arena_printf(cg->a, "'%s' cannot be lowered for %s", name, cg->info->name));
}

/* ---- warp roles (the producer's ops and the stage releases: warp-roles) ----------- */

/* Consumer: where in blk each waited stage is free again, as the
 * warp-roles pass decided (nv.free_after: that many ops after the wait). */
static void plan_releases(Cg *cg, const Block *blk) {
    for (const Op *w = blk->first; w; w = w->next) {
        Attr *after = w->kind == OP_WAIT ? op_attr(w, "nv.free_after") : NULL;
        if (!after)
            continue;
        const Op *last = w;
        for (int64_t k = 0; k < after->i && last->next; k++)
            last = last->next;
        PtrVec *v = map_get(&cg->hopper.releases, last);
        if (!v) {
            v = NEW(cg->a, PtrVec);
            map_put(cg->a, &cg->hopper.releases, last, v);
        }
        vec_push(cg->a, v, (void *)w);
    }
}

/* The ops the producer warpgroup runs (warp-roles' nv.producer). */
static bool producer_runs(const Op *op) { return op_attr(op, "nv.producer") != NULL; }

void release_stages(Cg *cg, const Op *op) {
    PtrVec *free = cg->hopper.role == ROLE_CONSUMER ? map_get(&cg->hopper.releases, op) : NULL;
    for (int i = 0; free && i < free->len && !cg->failed; i++) {
        const Token *t = map_get(&cg->hopper.wait_tok, free->items[i]);
        if (t && t->ring)
            tma_release(cg, t);
    }
}

static struct InFlight *in_flight(Cg *cg, const Op *op) {
    for (int i = 0; i < cg->hopper.nin_flight; i++)
        if (cg->hopper.in_flight[i].op == op)
            return &cg->hopper.in_flight[i];
    return NULL;
}

/* The dot a tile.dot marked nv.pair is emitted with: the next one in its
 * block (the layout pass checked that only waits and loads stand between). */
const Op *paired_dot(const Op *d1) {
    if (!op_attr(d1, "nv.pair"))
        return NULL;
    for (const Op *x = d1->next; x; x = x->next)
        if (x->kind == OP_DOT)
            return x;
    return NULL;
}

void emit_block(Cg *cg, const Block *blk, const Value **yv, Cv **ys) {
    int index = 0;
    if (cg->hopper.role == ROLE_CONSUMER)
        plan_releases(cg, blk);
    for (const Op *op = blk->first; op && !cg->failed; op = op->next, index++) {
        /* the dots in flight that op needs complete first; at the top level
         * (outside loops) and at the end of a loop body every one does:
         * nothing there overlaps with them, shared memory is reused at the
         * top, and no dot stays in flight across a back edge */
        if (cg->target->complete && cg->hopper.role != ROLE_PRODUCER)
            cg->target->complete(cg, blk == cg->top || op->kind == OP_TILE_YIELD ? NULL : op);
        /* (a persistent kernel's next tile reuses every buffer: no reuse
         * within the tile, which the producer may already be filling) */
        if (blk == cg->top && index > 0 && cg->hopper.role != ROLE_PRODUCER && !cg->hopper.persistent)
            smem_release(cg, index - 1);
        if (op->kind == OP_TILE_YIELD) {
            for (int i = 0; i < op->noperands; i++) {
                if (yv)
                    yv[i] = op->operands[i];
                if (ys)
                    ys[i] = cv_get(cg, op->operands[i]);
            }
            continue;
        }
        if (cg->hopper.role == ROLE_PRODUCER && !producer_runs(op))
            continue;
        if (op->kind == OP_ALLOC && cv_get(cg, op->results[0]))   /* a TMA buffer, made before the roles split */
            continue;
        const Op *pair = op->kind == OP_DOT ? paired_dot(op) : NULL;
        if (pair && !cg->target->dot_pair) {
            cg_err(cg, op, "internal error: nv.pair on a target that emits dots one by one", NULL);
            return;
        }
        if (pair) {
            for (const Op *x = op->next; x != pair && !cg->failed; x = x->next, index++) {
                emit_op(cg, x);
                release_stages(cg, x);
            }
            cg->target->dot_pair(cg, op, pair);
            release_stages(cg, op);
            release_stages(cg, pair);
            op = pair;
            index++;
            continue;
        }
        emit_op(cg, op);
        struct InFlight *f = in_flight(cg, op);
        if (f)
            f->deferred = true;
        else
            release_stages(cg, op);
    }
}


/* ---- the kernel ----------------------------------------------------------------- */

/* The LLVM types every lowering uses. */
static void init_types(Cg *cg) {
    LLVMContextRef ctx = cg->ctx;
    cg->i1 = LLVMInt1TypeInContext(ctx);
    cg->i16 = LLVMInt16TypeInContext(ctx);
    cg->i32 = LLVMInt32TypeInContext(ctx);
    cg->i64 = LLVMInt64TypeInContext(ctx);
    cg->f16 = LLVMHalfTypeInContext(ctx);
    cg->bf16 = LLVMBFloatTypeInContext(ctx);
    cg->f32 = LLVMFloatTypeInContext(ctx);
    cg->v2f16 = LLVMVectorType(cg->f16, 2);
    cg->p1 = LLVMPointerTypeInContext(ctx, 1);
}

/* The layout the target's lowering pass chose, and the warp
 * specialisation the sm_90a passes did. */
static bool read_layout(Cg *cg, const Op *launch) {
    const CgTarget *target = cg->target;
    Attr *lay = op_attr(launch, "nv.layout"), *rows = op_attr(launch, "nv.rows"),
         *warps = op_attr(launch, "nv.warps"), *blocks = op_attr(launch, "nv.row_blocks");
    if (!lay || !rows || !warps || !blocks)
        return cg_err(cg, launch, "internal error: the launch has no nv.layout (run %s first)", cg->info->lowering);
    cg->lay = strcmp(lay->s, "blocked") == 0 ? LAY_BLOCKED : LAY_ACC;
    cg->acc16 = strcmp(lay->s, "acc.f16") == 0;
    cg->acc = target->acc_layout(cg->acc16);
    cg->R = rows->i;
    cg->nwarps = (int)warps->i;
    cg->mrep = (int)blocks->i;
    Attr *wcols = op_attr(launch, "nv.warp_cols");
    cg->wcols = wcols ? (int)wcols->i : 1;
    if (cg->wcols < 1 || (cg->wcols > 1 && (!target->warp_grid || cg->lay != LAY_ACC || cg->nwarps % cg->wcols ||
                                            cg->R != 16 * cg->mrep * (cg->nwarps / cg->wcols))))
        return cg_err(cg, launch, "internal error: nv.warps, nv.warp_cols and nv.row_blocks do not tile the rows "
                                  "(a grid of warps needs the accumulator layout, on sm_80)", NULL);
    cg->threads = 32 * cg->nwarps;   /* the threads that compute (the consumers) */
    Attr *rt = op_attr(launch, "nv.row_threads"), *rv = op_attr(launch, "nv.row_vector");
    cg->row_threads = rt ? (int)rt->i : cg->threads;
    cg->row_vec = rv ? (int)rv->i : 1;
    if (cg->lay == LAY_BLOCKED &&
        (cg->row_vec < 1 || cg->row_threads < 1 || (cg->row_threads & (cg->row_threads - 1)) ||
         (cg->row_threads != cg->threads && (cg->row_threads > 32 || cg->R % (cg->threads / cg->row_threads)))))
        return cg_err(cg, launch, "internal error: nv.row_threads does not divide the threads into row groups "
                                  "of a warp or less that tile the rows", NULL);
    Attr *overlap = op_attr(launch, "nv.overlap");
    cg->hopper.lazy_dots = overlap && overlap->i;
    Attr *remat = op_attr(launch, "nv.rematerialise");
    cg->rematerialise = remat && remat->i;
    return read_skeleton(cg, launch);
}

/* The i64 stride parameters a memref of rank r takes: one per dim but the
 * innermost, whose stride is 1 (libattnrt's rule). */
static int stride_params(const Type *t) { return t->rank > 1 ? t->rank - 1 : 0; }

/* The function: memref pointers, the block's dims, each memref's strides
 * (stride_params, in memref order, outermost dim first), the first y of
 * this launch (begin_entry), a persistent kernel's grid and tile counter,
 * then the tensor maps of its TMA copies (sm_90a). Returns y_offset's
 * index, or -1 after an error. */
static int declare_kernel(Cg *cg, const Block *body) {
    Arena *a = cg->a;
    LLVMContextRef ctx = cg->ctx;
    LLVMModuleRef mod = cg->mod;
    const KernelSpec *k = cg->spec;
    const Op *launch = k->launch;
    map_init(&cg->hopper.tma_bufs, false);
    if (!tma_collect(cg, body))
        return -1;
    int nmem = launch->noperands - 3 + launch->nresults, nstrides = 0;
    for (int i = 0; i < nmem; i++)
        nstrides += stride_params(body->args[3 + i]->type);
    int y_param = nmem + k->ndims + nstrides, tmap0 = y_param + 1 + (cg->hopper.persistent ? 3 : 0), nparams = tmap0 + cg->hopper.ntmaps;
    LLVMTypeRef *pt = NEW_ARRAY(a, LLVMTypeRef, nparams + 1);
    for (int i = 0; i < nparams; i++)
        pt[i] = i < nmem ? cg->p1 : i < y_param ? cg->i64 : i == y_param ? cg->i32
                : i >= tmap0 ? LLVMPointerTypeInContext(ctx, 0) : i < y_param + 3 ? cg->i64 : cg->p1;
    LLVMTypeRef ft = LLVMFunctionType(LLVMVoidTypeInContext(ctx), pt, (unsigned)nparams, false);
    cg->fn = LLVMAddFunction(mod, k->name, ft);
    LLVMSetFunctionCallConv(cg->fn, 71 /* ptx_kernel */);
    for (int i = 0; i < nmem; i++) {
        LLVMValueRef p = LLVMGetParam(cg->fn, (unsigned)i);
        unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
        LLVMAddAttributeAtIndex(cg->fn, (unsigned)(i + 1), LLVMCreateEnumAttribute(ctx, noalias, 0));
        LLVMSetValueName2(p, body->args[3 + i]->name ? body->args[3 + i]->name : "mem",
                          strlen(body->args[3 + i]->name ? body->args[3 + i]->name : "mem"));
    }
    for (int i = 0; i < k->ndims; i++)
        LLVMSetValueName2(LLVMGetParam(cg->fn, (unsigned)(nmem + i)), k->dims[i], strlen(k->dims[i]));
    for (int i = 0, p = nmem + k->ndims; i < nmem; i++)
        for (int d = 0; d < stride_params(body->args[3 + i]->type); d++) {
            const char *nm = arena_printf(a, "%s_stride%d", body->args[3 + i]->name ? body->args[3 + i]->name : "mem", d);
            LLVMSetValueName2(LLVMGetParam(cg->fn, (unsigned)p++), nm, strlen(nm));
        }
    LLVMSetValueName2(LLVMGetParam(cg->fn, (unsigned)y_param), "y_offset", 8);
    if (cg->hopper.persistent) {
        cg->hopper.tiles_x = LLVMGetParam(cg->fn, (unsigned)y_param + 1);
        cg->hopper.tiles_y = LLVMGetParam(cg->fn, (unsigned)y_param + 2);
        cg->hopper.tile_counter = LLVMGetParam(cg->fn, (unsigned)y_param + 3);
        LLVMSetValueName2(cg->hopper.tiles_x, "tiles_x", 7);
        LLVMSetValueName2(cg->hopper.tiles_y, "tiles_y", 7);
        LLVMSetValueName2(cg->hopper.tile_counter, "tile_counter", 12);
    }
    /* A CUtensorMap (128 bytes) by value: byval, 64-byte aligned, and
     * grid_constant, so that its address is the parameter's own (cvta.param,
     * what TMA reads) instead of a copy in local memory. */
    LLVMMetadataRef gc[MANIFEST_MAX_TMAPS];
    for (int j = 0; j < cg->hopper.ntmaps; j++) {
        unsigned at = (unsigned)(tmap0 + j);
        LLVMValueRef p = cg->hopper.tmap_param[j] = LLVMGetParam(cg->fn, at);
        LLVMTypeRef map = LLVMArrayType(LLVMInt8TypeInContext(ctx), 128);
        unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5), align = LLVMGetEnumAttributeKindForName("align", 5);
        LLVMAddAttributeAtIndex(cg->fn, at + 1, LLVMCreateTypeAttribute(ctx, byval, map));
        LLVMAddAttributeAtIndex(cg->fn, at + 1, LLVMCreateEnumAttribute(ctx, align, 64));
        const char *src = body->args[3 + cg->hopper.tmaps[j].arg]->name;
        const char *nm = arena_printf(a, "tmap_%s", src ? src : "mem");
        LLVMSetValueName2(p, nm, strlen(nm));
        gc[j] = LLVMValueAsMetadata(ci32(cg, at + 1));   /* 1-based */
    }
    if (cg->hopper.ntmaps) {
        LLVMMetadataRef ann[3] = {LLVMValueAsMetadata(cg->fn), LLVMMDStringInContext2(ctx, "grid_constant", 13),
                                  LLVMMDNodeInContext2(ctx, gc, (size_t)cg->hopper.ntmaps)};
        LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                                    LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, ann, 3)));
    }
    return y_param;
}

/* The entry block: the thread's lane and warp, and the program ids. */
static void begin_entry(Cg *cg, const Block *body, int y_param) {
    LLVMContextRef ctx = cg->ctx;
    cg->smem = LLVMGetNamedGlobal(cg->mod, "attnc_smem");
    if (!cg->smem) {
        LLVMTypeRef at = LLVMArrayType(LLVMInt8TypeInContext(ctx), 0);
        cg->smem = LLVMAddGlobalInAddressSpace(cg->mod, at, "attnc_smem", 3);
        LLVMSetLinkage(cg->smem, LLVMExternalLinkage);
        LLVMSetAlignment(cg->smem, (unsigned)(cg->target->smem_align ? cg->target->smem_align : 16));
    }
    cg->b = LLVMCreateBuilderInContext(ctx);
    LLVMPositionBuilderAtEnd(cg->b, LLVMAppendBasicBlockInContext(ctx, cg->fn, "entry"));
    cg->tid = sreg(cg, "tid.x");
    cg->lane = LLVMBuildAnd(cg->b, cg->tid, ci32(cg, 31), "lane");
    cg->warp = LLVMBuildLShr(cg->b, cg->tid, ci32(cg, 5), "warp");
    cg->warp_row = cg->warp;
    cg->warp_col = ci32(cg, 0);
    if (cg->wcols > 1) {
        cg->warp_row = LLVMBuildUDiv(cg->b, cg->warp, ci32(cg, cg->wcols), "warp_row");
        cg->warp_col = LLVMBuildURem(cg->b, cg->warp, ci32(cg, cg->wcols), "warp_col");
    }
    static const char *pids[3] = {"ctaid.x", "ctaid.y", "ctaid.z"};
    for (int i = 0; i < 3; i++)
        cv_put(cg, body->args[i], cv_scalar(cg, zext64(cg, sreg(cg, pids[i]))));
    /* grid.y is at most 65,535, and attention puts B·H there (a decode
     * batch, B = 4096 and H = 32, has 131,072): the runtime launches the
     * kernel once per 65,535 rows of y, passing each launch's first y as
     * the last parameter (manifest ysplit=1). ctaid.y and a parameter are
     * both re-read by ptxas at no register cost (a z split folded back here,
     * with a bounds test, made sm_70 spill). */
    cv_put(cg, body->args[1], cv_scalar(cg, zext64(cg, LLVMBuildAdd(cg->b, sreg(cg, "ctaid.y"),
                                                                    LLVMGetParam(cg->fn, (unsigned)y_param), ""))));

}

int64_t stride_unit(const Type *t, int d) {
    int64_t bytes = esize(t->elem);
    for (int i = d + 1; i < t->rank && bytes < 16; i++) {
        int64_t n = t->dims[i].sym ? 1 : t->dims[i].size;
        int64_t pow2 = n & -n;   /* 0 for a size 0: a multiple of everything */
        bytes = pow2 == 0 || pow2 >= 16 ? 16 : bytes * pow2;
    }
    return (bytes > 16 ? 16 : bytes) / esize(t->elem);
}

/* Memrefs: their dims, and their strides from the parameters (stride /
 * stride_unit; the innermost 1). */
static bool bind_memrefs(Cg *cg, const Block *body, int nmem) {
    const KernelSpec *k = cg->spec;
    int stride_param = nmem + k->ndims;
    for (int i = 0; i < nmem; i++) {
        const Value *arg = body->args[3 + i];
        const Type *t = arg->type;
        Mem *m = NEW(cg->a, Mem);
        m->elem = t->elem;
        m->rank = t->rank;
        m->ptr = LLVMGetParam(cg->fn, (unsigned)i);
        for (int dd = 0; dd < t->rank; dd++) {
            if (t->dims[dd].sym) {
                m->dims[dd] = NULL;
                for (int j = 0; j < k->ndims; j++)
                    if (strcmp(k->dims[j], t->dims[dd].sym) == 0)
                        m->dims[dd] = LLVMGetParam(cg->fn, (unsigned)(nmem + j));
                if (!m->dims[dd])
                    return cg_err(cg, k->launch, "unknown dim '%s'", t->dims[dd].sym);
            } else {
                m->dims[dd] = ci64(cg, t->dims[dd].size);
            }
        }
        for (int dd = 0; dd < t->rank; dd++) {
            bool inner = dd == t->rank - 1;
            m->stride_param[dd] = inner ? NULL : LLVMGetParam(cg->fn, (unsigned)stride_param++);
            m->stride_unit[dd] = inner ? 1 : stride_unit(t, dd);
            m->strides[dd] = inner ? ci64(cg, 1) : LLVMBuildNUWMul(cg->b, m->stride_param[dd], ci64(cg, m->stride_unit[dd]), "");
        }
        Cv *c = NEW(cg->a, Cv);
        c->kind = CV_MEM;
        c->mem = m;
        cv_put(cg, arg, c);
    }
    return true;
}

/* The kernel's launch bounds (nvvm.annotations). */
static void annotate_bounds(Cg *cg, int launch_threads) {
    LLVMContextRef ctx = cg->ctx;
    LLVMModuleRef mod = cg->mod;
    /* launch bounds: exactly `threads` per block (and, for setmaxnreg to
     * take effect, at least one block per SM, or nv.blocks_per_sm; see
     * min_blocks) */
    LLVMMetadataRef ann[3] = {
        LLVMValueAsMetadata(cg->fn),
        LLVMMDStringInContext2(ctx, "maxntidx", 8),
        LLVMValueAsMetadata(ci32(cg, launch_threads)),
    };
    LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                                LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, ann, 3)));
    /* as the passes decided (nv.blocks_per_sm: sm90a-layout under warp
     * specialisation, softmax-overlap for plain kernels it rotated); a
     * warp-specialised kernel always says, for setmaxnreg */
    int min_blocks = cg->hopper.producer_warps || cg->hopper.blocks_per_sm > 1 ? cg->hopper.blocks_per_sm : 0;
    if (min_blocks) {
        LLVMMetadataRef min[3] = {LLVMValueAsMetadata(cg->fn), LLVMMDStringInContext2(ctx, "minctasm", 8),
                                  LLVMValueAsMetadata(ci32(cg, min_blocks))};
        LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                                    LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, min, 3)));
    }
}

bool emit_kernel(const CgTarget *target, Arena *a, Diag *d, LLVMContextRef ctx, LLVMModuleRef mod, const KernelSpec *k,
                 KernelInfo *info) {
    Cg cgs = {.a = a, .d = d, .ctx = ctx, .mod = mod, .spec = k, .target = target, .info = target->target};
    cgs.short_shared = cgs.info->short_shared;
    Cg *cg = &cgs;
    map_init(&cg->vals, false);
    init_types(cg);
    const Op *launch = k->launch;
    const Block *body = launch->regions[0].blocks[0];
    if (!read_layout(cg, launch))
        return false;
    int launch_threads = cg->threads + 32 * cg->hopper.producer_warps;
    map_init(&cg->hopper.releases, false);
    map_init(&cg->hopper.wait_tok, false);
    int y_param = declare_kernel(cg, body);
    if (y_param < 0)
        return false;
    begin_entry(cg, body, y_param);
    if (!bind_memrefs(cg, body, launch->noperands - 3 + launch->nresults))
        return false;
    cg->top = body;
    map_init(&cg->last_use, false);
    int index = 0;
    for (const Op *o = body->first; o; o = o->next)
        note_uses(cg, o, index++);
    if (!cg->hopper.producer_warps) {
        emit_block(cg, body, NULL, NULL);
        if (!cg->failed && target->complete)
            target->complete(cg, NULL);
        if (!cg->failed && target->drain)
            target->drain(cg);
    } else {
        emit_specialised(cg, body);
    }
    if (!cg->failed)
        LLVMBuildRetVoid(cg->b);
    LLVMDisposeBuilder(cg->b);
    if (cg->failed)
        return false;

    annotate_bounds(cg, launch_threads);
    if (cg->smem_bytes > cg->info->smem_limit)   /* the most a block can opt in to */
        return cg_err(cg, launch, "%s",
                      arena_printf(a, "the kernel needs %lld bytes of shared memory; %s has %lld",
                                   (long long)cg->smem_bytes, cg->info->name, (long long)cg->info->smem_limit));
    info->threads = launch_threads;
    info->persistent = cg->hopper.persistent;
    info->ntmaps = cg->hopper.ntmaps;
    memcpy(info->tmaps, cg->hopper.tmaps, sizeof cg->hopper.tmaps);
    info->smem_bytes = (cg->smem_bytes + 15) & ~(int64_t)15;
    return true;
}

