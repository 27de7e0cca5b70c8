/* llvm.c — LLVM plumbing for the lowering: types, intrinsics, shuffles,
 * branches (lower.h). */
#include "codegen/lower.h"
#include "target/schedule.h"

#include <stdio.h>
#include <string.h>


bool cg_err(Cg *cg, const Op *op, const char *fmt, const char *detail) {
    if (!cg->failed) {
        char msg[512];
        snprintf(msg, sizeof msg, fmt, detail ? detail : "");
        op_diag(cg->d, NULL, op, arena_printf(cg->a, "%s codegen: %s", cg->info->name, msg));
        schedule_note(cg->d, op, cg->info->name);
    }
    cg->failed = true;
    return false;
}

LLVMTypeRef lty(Cg *cg, ScalarKind k) {
    switch (k) {
    case SK_I1: return cg->i1;
    case SK_I32: return cg->i32;
    case SK_I64: case SK_INDEX: return cg->i64;
    case SK_F16: return cg->f16;
    case SK_BF16: return cg->bf16;
    case SK_F32: return cg->f32;
    default: return NULL;
    }
}

int esize(ScalarKind k) {
    switch (k) {
    case SK_F16: case SK_BF16: return 2;
    case SK_I1: return 1;
    case SK_I64: case SK_INDEX: case SK_F64: return 8;
    default: return 4;
    }
}


LLVMValueRef cg_call(Cg *cg, const char *name, LLVMTypeRef ret, LLVMValueRef *args, int n) {
    LLVMTypeRef pt[16];
    for (int i = 0; i < n; i++)
        pt[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef ft = LLVMFunctionType(ret, pt, (unsigned)n, false);
    LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
    if (!f)
        f = LLVMAddFunction(cg->mod, name, ft);
    return LLVMBuildCall2(cg->b, ft, f, args, (unsigned)n, "");
}

/* Inline PTX (volatile): what LLVM 19 has no intrinsic for, and opaque(). */
LLVMValueRef cg_asm(Cg *cg, const char *text, const char *constraints, LLVMTypeRef ret, LLVMValueRef *args, int n) {
    LLVMTypeRef *pt = NEW_ARRAY(cg->a, LLVMTypeRef, (size_t)n + 1);
    for (int i = 0; i < n; i++)
        pt[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef ft = LLVMFunctionType(ret, pt, (unsigned)n, false);
    LLVMValueRef f = LLVMGetInlineAsm(ft, text, strlen(text), constraints, strlen(constraints), true, false,
                                      LLVMInlineAsmDialectATT, false);
    return LLVMBuildCall2(cg->b, ft, f, args, (unsigned)n, "");
}

/* v (an i32 or i64), as a value LLVM cannot see through, made here: what
 * is computed from it here stays here instead of being hoisted out of the
 * loop, one register per result. */
LLVMValueRef opaque(Cg *cg, LLVMValueRef v) {
    bool wide = LLVMTypeOf(v) == cg->i64;
    return cg_asm(cg, wide ? "mov.b64 $0, $1;" : "mov.b32 $0, $1;", wide ? "=l,l" : "=r,r", LLVMTypeOf(v), &v, 1);
}

/* p made opaque: addresses made from it here stay here (base + immediate). */
LLVMValueRef opaque_ptr(Cg *cg, LLVMValueRef p) {
    bool shared = LLVMGetPointerAddressSpace(LLVMTypeOf(p)) == 3 && cg->short_shared;
    LLVMValueRef i = LLVMBuildPtrToInt(cg->b, p, shared ? cg->i32 : cg->i64, "");
    return LLVMBuildIntToPtr(cg->b, opaque(cg, i), LLVMTypeOf(p), "");
}

/* param · k (i64), formed here and not hoisted: vector j of a box copy is
 * row-stride parameter · j·k elements past vector 0, and LLVM would
 * otherwise keep each product in a register of its own across the loop
 * (ptxas reads the parameter from the constant bank). */
LLVMValueRef opaque_scaled(Cg *cg, LLVMValueRef param, int64_t k) {
    const char *text = arena_printf(cg->a, "mul.lo.u64 $0, $1, %lld;", (long long)k);
    return cg_asm(cg, text, "=l,l", cg->i64, &param, 1);
}

LLVMValueRef sreg(Cg *cg, const char *name) {
    return cg_call(cg, arena_printf(cg->a, "llvm.nvvm.read.ptx.sreg.%s", name), cg->i32, NULL, 0);
}

/* A barrier of the threads running this code: the block, or (warp
 * specialisation) the consumer warps only, on their named barrier. */
void cg_barrier(Cg *cg) {
    if (cg->hopper.role == ROLE_CONSUMER) {
        named_barrier(cg, "sync", NB_CONSUMERS, NULL, cg->threads);
        return;
    }
    cg_call(cg, "llvm.nvvm.barrier0", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
}

void named_barrier(Cg *cg, const char *how, NamedBarrier which, LLVMValueRef wg, int threads) {
    int base = cg->hopper.barrier[which];
    if (base < 0) {
        cg_err(cg, cg->spec->launch, "internal error: the launch names no such barrier (run warp-roles)", NULL);
        return;
    }
    bool one = which == NB_CONSUMERS || which == NB_SCHED_EMPTY;
    LLVMValueRef id = one ? ci32(cg, base) : LLVMBuildAdd(cg->b, wg, ci32(cg, base), "");
    if (LLVMIsAConstantInt(id)) {   /* (an immediate id, as ptxas likes best) */
        cg_asm(cg, arena_printf(cg->a, "bar.%s %lld, %d;", how, LLVMConstIntGetSExtValue(id), threads), "~{memory}",
               LLVMVoidTypeInContext(cg->ctx), NULL, 0);
        return;
    }
    cg_asm(cg, arena_printf(cg->a, "bar.%s $0, %d;", how, threads), "r,~{memory}", LLVMVoidTypeInContext(cg->ctx),
           &id, 1);
}

LLVMValueRef warpgroup_of(Cg *cg) { return LLVMBuildLShr(cg->b, cg->warp, ci32(cg, 2), ""); }


/* Shuffle within the warp: the value of lane ^ mask. */
LLVMValueRef shfl_xor(Cg *cg, LLVMValueRef v, int mask) {
    LLVMTypeRef t = LLVMTypeOf(v);
    LLVMValueRef w;
    if (t == cg->i32)
        w = v;
    else if (t == cg->f16 || t == cg->bf16)
        w = LLVMBuildZExt(cg->b, LLVMBuildBitCast(cg->b, v, cg->i16, ""), cg->i32, "");
    else if (t == cg->i1)
        w = LLVMBuildZExt(cg->b, v, cg->i32, "");
    else if (t == cg->i64) {
        LLVMValueRef lo = LLVMBuildTrunc(cg->b, v, cg->i32, "");
        LLVMValueRef hi = LLVMBuildTrunc(cg->b, LLVMBuildLShr(cg->b, v, ci64(cg, 32), ""), cg->i32, "");
        lo = shfl_xor(cg, lo, mask);
        hi = shfl_xor(cg, hi, mask);
        return LLVMBuildOr(cg->b, zext64(cg, lo), LLVMBuildShl(cg->b, zext64(cg, hi), ci64(cg, 32), ""), "");
    } else
        w = LLVMBuildBitCast(cg->b, v, cg->i32, "");
    LLVMValueRef args[4] = {ci32(cg, -1), w, ci32(cg, mask), ci32(cg, 31)};
    LLVMValueRef r = cg_call(cg, "llvm.nvvm.shfl.sync.bfly.i32", cg->i32, args, 4);
    if (t == cg->i32)
        return r;
    if (t == cg->f16 || t == cg->bf16)
        return LLVMBuildBitCast(cg->b, LLVMBuildTrunc(cg->b, r, cg->i16, ""), t, "");
    if (t == cg->i1)
        return LLVMBuildTrunc(cg->b, r, cg->i1, "");
    return LLVMBuildBitCast(cg->b, r, t, "");
}

LLVMValueRef gep(Cg *cg, ScalarKind k, LLVMValueRef ptr, LLVMValueRef off) {
    LLVMTypeRef et = k == SK_I1 ? LLVMInt8TypeInContext(cg->ctx) : lty(cg, k);
    return LLVMBuildGEP2(cg->b, et, ptr, &off, 1, "");
}

LLVMValueRef load_elem(Cg *cg, ScalarKind k, LLVMValueRef ptr) {
    if (k == SK_I1) {
        LLVMValueRef v = LLVMBuildLoad2(cg->b, LLVMInt8TypeInContext(cg->ctx), ptr, "");
        return LLVMBuildICmp(cg->b, LLVMIntNE, v, LLVMConstInt(LLVMInt8TypeInContext(cg->ctx), 0, 0), "");
    }
    return LLVMBuildLoad2(cg->b, lty(cg, k), ptr, "");
}

void store_elem(Cg *cg, ScalarKind k, LLVMValueRef v, LLVMValueRef ptr) {
    if (k == SK_I1)
        v = LLVMBuildZExt(cg->b, v, LLVMInt8TypeInContext(cg->ctx), "");
    LLVMBuildStore(cg->b, v, ptr);
}

/* if (cond) { body } — returns with the builder in the body; end with if_end. */
LLVMBasicBlockRef if_begin(Cg *cg, LLVMValueRef cond) {
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "then");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "join");
    LLVMBuildCondBr(cg->b, cond, then, join);
    LLVMPositionBuilderAtEnd(cg->b, then);
    return join;
}
void if_end(Cg *cg, LLVMBasicBlockRef join) {
    LLVMBuildBr(cg->b, join);
    LLVMPositionBuilderAtEnd(cg->b, join);
}

LLVMValueRef pack2(Cg *cg, LLVMValueRef x, LLVMValueRef y) {
    LLVMValueRef v = LLVMGetUndef(LLVMVectorType(LLVMTypeOf(x), 2));
    v = LLVMBuildInsertElement(cg->b, v, x, ci32(cg, 0), "");
    return LLVMBuildInsertElement(cg->b, v, y, ci32(cg, 1), "");
}

LLVMValueRef pack_b32(Cg *cg, LLVMValueRef x, LLVMValueRef y) {
    return LLVMBuildBitCast(cg->b, pack2(cg, x, y), cg->i32, "");
}

