/* cp_async.c — cp.async (sm_80, and sm_90a where TMA cannot): a box of a global tensor copied
 * straight into a stage of a shared buffer, one commit group per
 * tile.copy_async, zero-filled outside the tensor; tile.wait waits with
 * cp.async.wait_group nv.pending (the younger groups that may stay in
 * flight, counted by the layout pass), then a barrier. The destination is
 * padded rows or 128-byte swizzled panels, as the buffer says. TMA copies
 * are tma.c's. */
#include "codegen/lower.h"

#include <string.h>

/* Element offset of (row, col) in a stage of dst. */
static LLVMValueRef dst_offset(Cg *cg, const Mem *dst, LLVMValueRef row, LLVMValueRef col) {
    return smem_offset(cg, row, col, dst->cstrides[1], dst->cdims[1], dst->swizzle);
}

/* The common case of a box copy: every thread issues n vectors (no thread
 * idle) at one column, rows threads/per_row apart. Then vector j's shared
 * address is vector 0's plus a constant, written into the instruction as
 * an immediate offset (inline PTX), and its global address vector 0's plus
 * the row stride's kernel parameter times a constant, formed inside the
 * instruction's own PTX block (ptxas reads the parameter from the constant
 * bank): two registers for all of a thread's copies instead of two per
 * copy, which is what made head dim 128 spill (LLVM would hoist each
 * vector's offset out of the loop, a register each).
 * Rows outside the tensor copy 0 bytes and zero-fill (CUTLASS's zfill):
 * nothing is read there, so the address is left as computed. False when
 * the case does not apply. */
static bool copy_with_offsets(Cg *cg, const Op *op, const Mem *src, const Mem *dst, const Token *t, LLVMValueRef base,
                              int n, int bytes) {
    Attr *dims = op_attr(op, "dims");
    int row_dim = (int)dims->elems[0]->i;
    int64_t rows_apart = box_rows_apart(cg, t);
    if (!rows_apart || row_dim < 0)
        return false;
    if (dst->swizzle && rows_apart % 8)   /* the swizzle would differ between a thread's vectors */
        return false;
    /* vector j is j·rows_apart rows on: j · step_bytes bytes times the
     * parameter (or times 1, along the innermost dim) */
    LLVMValueRef step_param = src->stride_param[row_dim];
    int64_t step_bytes = rows_apart * esize(src->elem) * src->stride_unit[row_dim];
    int64_t dst_step = rows_apart * (dst->swizzle ? 64 : dst->cstrides[1]) * esize(src->elem);
    LLVMValueRef row, col, co[8], inside;
    box_vector(cg, t, 0, &row, &col);
    mem_coords(cg, op, src, 3, row, col, co);
    LLVMValueRef off = mem_offset(cg, src, co, &inside);
    LLVMValueRef d0 = LLVMBuildPtrToInt(cg->b, gep(cg, src->elem, base, dst_offset(cg, dst, row, col)), cg->i32, "");
    LLVMValueRef s0 = LLVMBuildPtrToInt(cg->b, gep(cg, src->elem, src->ptr, off), cg->i64, "");
    /* only the row moves: vector j is inside while j·rows_apart rows remain
     * (one register for all, not a row index per vector) */
    LLVMValueRef room = LLVMBuildSub(cg->b, src->dims[row_dim], co[row_dim], "");
    LLVMValueRef inside0 = inside;
    for (int j = 0; j < n; j++) {
        if (j > 0)
            inside = LLVMBuildAnd(cg->b, inside0,
                                  LLVMBuildICmp(cg->b, LLVMIntSGT, room, ci64(cg, j * rows_apart), ""), "");
        const char *cp = bytes == 16 ? "cg" : "ca";
        LLVMValueRef size = LLVMBuildSelect(cg->b, inside, ci32(cg, bytes), ci32(cg, 0), "");
        if (j == 0 || !step_param) {
            const char *text = arena_printf(cg->a, "cp.async.%s.shared.global [$0+%lld], [$1+%lld], %d, $2;", cp,
                                            (long long)(j * dst_step), (long long)(j * step_bytes), bytes);
            cg_asm(cg, text, "r,l,r,~{memory}", LLVMVoidTypeInContext(cg->ctx), (LLVMValueRef[]){d0, s0, size}, 3);
            continue;
        }
        const char *text = arena_printf(cg->a,
                                        "{ .reg .u64 %%cpa; mad.lo.u64 %%cpa, $3, %lld, $1; "
                                        "cp.async.%s.shared.global [$0+%lld], [%%cpa], %d, $2; }",
                                        (long long)(j * step_bytes), cp, (long long)(j * dst_step), bytes);
        cg_asm(cg, text, "r,l,r,l,~{memory}", LLVMVoidTypeInContext(cg->ctx), (LLVMValueRef[]){d0, s0, size, step_param}, 4);
    }
    return true;
}

void cp_async_copy(Cg *cg, const Op *op) {
    Mem *src, *dst;
    if (!copy_operands(cg, op, "cp.async", &src, &dst))
        return;
    if (dst->rank != 3 || esize(src->elem) != 2 || dst->elem != src->elem) {
        cg_err(cg, op, "tile.copy_async is supported for 16-bit boxes into [stages, rows, cols] buffers", NULL);
        return;
    }
    /* The stage written now was read in the previous iteration: every warp
     * must be done with it. The double-buffer pass issues a loop's copies
     * right after a tile.wait, whose barrier does (the index arithmetic
     * between them, such as the last segment's clamp of the index, touches
     * no memory); elsewhere, one barrier for a run of copies. */
    const Op *before = op->prev;
    while (before && op_is_scalar_math(before))
        before = before->prev;
    if (!before || (before->kind != OP_COPY_ASYNC && before->kind != OP_WAIT))
        cg_barrier(cg);
    Attr *dims = op_attr(op, "dims");
    Token *t = NEW(cg->a, Token);
    t->dst = dst;
    t->stage = as_scalar(cg, op, op->operands[2]);
    t->rows = dst->cdims[1];
    t->cols = dst->cdims[2];
    t->elem = src->elem;
    t->vec = copy_vec(src, t->cols, (int)dims->elems[1]->i, inner_size_of(op->operands[0]));
    LLVMValueRef base = gep(cg, dst->elem, dst->ptr, mul(cg, t->stage, ci64(cg, dst->cstrides[0])));
    if (t->vec < 2) {   /* 2-byte pieces: cp.async moves 4, 8 or 16 bytes; copy through registers now */
        Token *r = prefetch(cg, op, src, 3, t->rows, t->cols, inner_size_of(op->operands[0]));
        land(cg, r, base, dst->cstrides[1], dst->cdims[1], dst->swizzle);
    } else {
        int64_t total = t->rows * t->cols / t->vec;
        int n = (int)((total + cg->threads - 1) / cg->threads);
        int bytes = t->vec * esize(src->elem);
        if (copy_with_offsets(cg, op, src, dst, t, base, n, bytes))
            goto committed;
        const char *text = arena_printf(cg->a, "cp.async.%s.shared.global [$0], [$1], %d, $2;",
                                        bytes == 16 ? "cg" : "ca", bytes);
        for (int j = 0; j < n; j++) {
            LLVMValueRef row, col, f = box_vector(cg, t, j, &row, &col);
            LLVMValueRef co[8], inside;
            mem_coords(cg, op, src, 3, row, col, co);
            LLVMValueRef off = mem_offset(cg, src, co, &inside);
            LLVMBasicBlockRef join = NULL;
            if (total % cg->threads)
                join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntULT, f, ci64(cg, total), ""));
            /* outside the tensor the source size is 0: cp.async reads
             * nothing and zero-fills (CUTLASS's zfill), so the address is
             * left as computed, no select */
            LLVMValueRef args[3] = {
                LLVMBuildPtrToInt(cg->b, gep(cg, src->elem, base, dst_offset(cg, dst, row, col)), cg->i32, ""),
                gep(cg, src->elem, src->ptr, off),
                LLVMBuildSelect(cg->b, inside, ci32(cg, bytes), ci32(cg, 0), ""),   /* 0: zero-fill */
            };
            cg_asm(cg, text, "r,l,r,~{memory}", LLVMVoidTypeInContext(cg->ctx), args, 3);
            if (join)
                if_end(cg, join);
        }
    }
committed:
    /* one group per copy, empty for a copy made through registers: the
     * counts of nv.pending hold */
    cg_call(cg, "llvm.nvvm.cp.async.commit.group", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
    cg->async = true;
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_TOKEN;
    c->tok = t;
    cv_put(cg, op->results[0], c);
}

/* Whether another tile.wait comes after op before any code reads shared
 * memory: the views of shared tiles and a dot that waits for its partner
 * (nv.pair: SwiGLU's gate and up products wait for both B
 * operands before either is emitted) emit none. That wait's barrier then
 * makes both copies visible, one barrier instead of two back to back. */
static bool wait_follows(const Cg *cg, const Op *op) {
    for (const Op *x = op->next; x; x = x->next) {
        if (x->kind == OP_WAIT)
            return true;
        if (x->kind == OP_LOAD && op_attr(x, "nv.operand") && x->operands[0]->type->space == AS_SHARED)
            continue;
        if (x->kind == OP_DOT && paired_dot(x))
            continue;
        return false;
    }
    return false;
}

void cp_async_wait(Cg *cg, const Op *op) {
    if (!wait_token(cg, op))
        return;
    Attr *pending = op_attr(op, "nv.pending");
    if (!pending || pending->kind != AT_INT) {
        cg_err(cg, op, "internal error: tile.wait has no nv.pending (run %s)", cg->info->lowering);
        return;
    }
    /* a wait right before one that leaves no more groups in flight is
     * implied by it (a GEMM's K loop waits for all its tiles at the top) */
    Attr *then = op->next && op->next->kind == OP_WAIT ? op_attr(op->next, "nv.pending") : NULL;
    if (then && then->kind == AT_INT && then->i <= pending->i)
        return;
    LLVMValueRef younger = ci32(cg, pending->i);   /* the younger groups that may stay in flight */
    cg_call(cg, "llvm.nvvm.cp.async.wait.group", LLVMVoidTypeInContext(cg->ctx), &younger, 1);
    proxy_fence(cg);   /* cp.async writes through the generic proxy; wgmma reads through the async one */
    if (!(cg->target->dot_pair && wait_follows(cg, op)))
        cg_barrier(cg);
}

void cp_async_drain(Cg *cg) {
    if (cg->async)
        cg_call(cg, "llvm.nvvm.cp.async.wait.all", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
}
