/* scalar.c — one element of an arith/math op in LLVM IR, rounded as the
 * interpreter rounds it (f16 math in f32, rounded once). */
#include "codegen/lower.h"

#include <math.h>
#include <string.h>

/* ---- scalar operations (index math, and each element of a tile) ---------------- */

LLVMValueRef fconst(Cg *cg, ScalarKind k, double v) { return LLVMConstReal(lty(cg, k), v); }

LLVMValueRef to_f32(Cg *cg, LLVMValueRef v) {
    LLVMTypeRef t = LLVMTypeOf(v);
    return t == cg->f16 || t == cg->bf16 ? LLVMBuildFPExt(cg->b, v, cg->f32, "") : v;
}

LLVMValueRef round_f32(Cg *cg, LLVMValueRef r, ScalarKind k) {
    return k == SK_F16 || k == SK_BF16 ? LLVMBuildFPTrunc(cg->b, r, lty(cg, k), "") : r;
}

static LLVMValueRef ex2(Cg *cg, LLVMValueRef x) {   /* x: f32 */
    /* .ftz, as FlashAttention's exp2f under fast math: results below 2^-126
     * (a softmax weight of 1e-38) are 0. Without it each ex2 is four SASS
     * instructions (a denormal range test and two rescales around MUFU.EX2),
     * about a sixth of the attention loop's non-MMA work. */
    return cg_call(cg, "llvm.nvvm.ex2.approx.ftz.f", cg->f32, &x, 1);
}

LLVMValueRef fmaxmin(Cg *cg, bool max, LLVMValueRef x, LLVMValueRef y) {
    /* NaN propagates (the interpreter's and PyTorch's rule): IEEE 754-2019
     * maximum/minimum, one max.NaN.f32 on sm_80 */
    LLVMValueRef args[2] = {x, y};
    LLVMTypeRef t = LLVMTypeOf(x);
    const char *name = arena_printf(cg->a, "llvm.%s.%s", max ? "maximum" : "minimum",
                                    t == cg->f32 ? "f32" : t == cg->f16 ? "f16" : "bf16");
    return cg_call(cg, name, t, args, 2);
}

/* erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), for gelu. */
static LLVMValueRef erf_f32(Cg *cg, LLVMValueRef x) {
    LLVMValueRef ax = cg_call(cg, "llvm.fabs.f32", cg->f32, &x, 1);
    LLVMValueRef t = LLVMBuildFDiv(cg->b, fconst(cg, SK_F32, 1),
                                   LLVMBuildFAdd(cg->b, fconst(cg, SK_F32, 1),
                                                 LLVMBuildFMul(cg->b, fconst(cg, SK_F32, 0.3275911), ax, ""), ""),
                                   "");
    static const double c[] = {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592};
    LLVMValueRef p = fconst(cg, SK_F32, c[0]);
    for (int i = 1; i < 5; i++)
        p = LLVMBuildFAdd(cg->b, LLVMBuildFMul(cg->b, p, t, ""), fconst(cg, SK_F32, c[i]), "");
    p = LLVMBuildFMul(cg->b, p, t, "");
    LLVMValueRef e = ex2(cg, LLVMBuildFMul(cg->b, LLVMBuildFNeg(cg->b, LLVMBuildFMul(cg->b, ax, ax, ""), ""),
                                           fconst(cg, SK_F32, LOG2E), ""));
    LLVMValueRef y = LLVMBuildFSub(cg->b, fconst(cg, SK_F32, 1), LLVMBuildFMul(cg->b, p, e, ""), "");
    LLVMValueRef neg = LLVMBuildFCmp(cg->b, LLVMRealOLT, x, fconst(cg, SK_F32, 0), "");
    return LLVMBuildSelect(cg->b, neg, LLVMBuildFNeg(cg->b, y, ""), y, "");
}

static LLVMValueRef tanh_f32(Cg *cg, LLVMValueRef x) {
    /* tanh x = sign(x)·(1 − 2/(e^{2|x|} + 1)); exact at ±inf, no overflow NaN */
    LLVMValueRef ax = cg_call(cg, "llvm.fabs.f32", cg->f32, &x, 1);
    LLVMValueRef e = ex2(cg, LLVMBuildFMul(cg->b, ax, fconst(cg, SK_F32, 2 * LOG2E), ""));
    LLVMValueRef y = LLVMBuildFSub(
        cg->b, fconst(cg, SK_F32, 1),
        LLVMBuildFDiv(cg->b, fconst(cg, SK_F32, 2), LLVMBuildFAdd(cg->b, e, fconst(cg, SK_F32, 1), ""), ""), "");
    LLVMValueRef neg = LLVMBuildFCmp(cg->b, LLVMRealOLT, x, fconst(cg, SK_F32, 0), "");
    return LLVMBuildSelect(cg->b, neg, LLVMBuildFNeg(cg->b, y, ""), y, "");
}

static LLVMValueRef sigmoid_f32(Cg *cg, LLVMValueRef x) {
    LLVMValueRef e = ex2(cg, LLVMBuildFMul(cg->b, x, fconst(cg, SK_F32, -LOG2E), ""));
    return LLVMBuildFDiv(cg->b, fconst(cg, SK_F32, 1), LLVMBuildFAdd(cg->b, fconst(cg, SK_F32, 1), e, ""), "");
}

/* A unary math op, computed in f32 and rounded to the result type. */
static LLVMValueRef math_op(Cg *cg, const Op *op, ScalarKind rk, LLVMValueRef xin) {
    LLVMValueRef x = to_f32(cg, xin), r = NULL;
    switch (op->kind) {
    case OP_EXP: r = ex2(cg, LLVMBuildFMul(cg->b, x, fconst(cg, SK_F32, LOG2E), "")); break;
    case OP_EXP2: r = ex2(cg, x); break;
    case OP_LOG:
        r = LLVMBuildFMul(cg->b, cg_call(cg, "llvm.nvvm.lg2.approx.f", cg->f32, &x, 1), fconst(cg, SK_F32, LN2), "");
        break;
    case OP_SQRT: r = cg_call(cg, "llvm.sqrt.f32", cg->f32, &x, 1); break;
    case OP_RSQRT:
        r = LLVMBuildFDiv(cg->b, fconst(cg, SK_F32, 1), cg_call(cg, "llvm.sqrt.f32", cg->f32, &x, 1), "");
        break;
    case OP_TANH: r = tanh_f32(cg, x); break;
    case OP_ABS: r = cg_call(cg, "llvm.fabs.f32", cg->f32, &x, 1); break;
    case OP_SIGMOID: r = sigmoid_f32(cg, x); break;
    case OP_SILU: r = LLVMBuildFMul(cg->b, x, sigmoid_f32(cg, x), ""); break;
    case OP_RELU:
        r = LLVMBuildSelect(cg->b, LLVMBuildFCmp(cg->b, LLVMRealOGT, x, fconst(cg, SK_F32, 0), ""), x,
                            fconst(cg, SK_F32, 0), "");
        break;
    case OP_GELU: {
        LLVMValueRef e = erf_f32(cg, LLVMBuildFMul(cg->b, x, fconst(cg, SK_F32, SQRT1_2), ""));
        r = LLVMBuildFMul(cg->b, LLVMBuildFMul(cg->b, fconst(cg, SK_F32, 0.5), x, ""),
                          LLVMBuildFAdd(cg->b, fconst(cg, SK_F32, 1), e, ""), "");
        break;
    }
    case OP_GELU_TANH: {
        LLVMValueRef x3 = LLVMBuildFMul(cg->b, LLVMBuildFMul(cg->b, x, x, ""), x, "");
        LLVMValueRef in = LLVMBuildFMul(
            cg->b, fconst(cg, SK_F32, sqrt(2 / PI)),
            LLVMBuildFAdd(cg->b, x, LLVMBuildFMul(cg->b, fconst(cg, SK_F32, 0.044715), x3, ""), ""), "");
        r = LLVMBuildFMul(cg->b, LLVMBuildFMul(cg->b, fconst(cg, SK_F32, 0.5), x, ""),
                          LLVMBuildFAdd(cg->b, fconst(cg, SK_F32, 1), tanh_f32(cg, in), ""), "");
        break;
    }
    default: break;
    }
    if (!r) {
        cg_err(cg, op, "'%s' is not supported", op_info[op->kind].name);
        return LLVMGetUndef(lty(cg, rk));
    }
    return round_f32(cg, r, rk);
}

LLVMValueRef cg_cast(Cg *cg, LLVMValueRef v, ScalarKind from, ScalarKind to) {
    LLVMTypeRef t = lty(cg, to);
    if (from == to || (scalar_is_int(from) && scalar_is_int(to) && esize(from) == esize(to)))
        return v;
    bool ff = scalar_is_float(from), tf = scalar_is_float(to);
    if (ff && tf)
        return esize(to) > esize(from) ? LLVMBuildFPExt(cg->b, v, t, "") : LLVMBuildFPTrunc(cg->b, v, t, "");
    if (ff)
        return to == SK_I1 ? LLVMBuildFCmp(cg->b, LLVMRealUNE, v, LLVMConstNull(LLVMTypeOf(v)), "")
                           : LLVMBuildFPToSI(cg->b, v, t, "");
    if (from == SK_I1)
        return tf ? LLVMBuildUIToFP(cg->b, v, t, "") : LLVMBuildZExt(cg->b, v, t, "");
    if (tf)
        return LLVMBuildSIToFP(cg->b, v, t, "");
    if (to == SK_I1)
        return LLVMBuildICmp(cg->b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
    return esize(to) > esize(from) ? LLVMBuildSExt(cg->b, v, t, "") : LLVMBuildTrunc(cg->b, v, t, "");
}

/* arith.cmp's predicate as an index into int_preds (eq ne lt le gt ge), or -1. */
const LLVMIntPredicate int_preds[6] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
int cmp_pred(const Op *op) {
    static const char *names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    const char *p = op_attr(op, "pred")->s;
    for (int i = 0; i < 6; i++)
        if (strcmp(p, names[i]) == 0)
            return i;
    return -1;
}

/* One element of an arith/math op. x[] are the operands' values, ks[] their
 * scalar kinds; rk the result's. */
LLVMValueRef scalar_op(Cg *cg, const Op *op, ScalarKind rk, LLVMValueRef *x, const ScalarKind *ks) {
    ScalarKind k = ks[0];
    bool fl = scalar_is_float(k);
    LLVMBuilderRef b = cg->b;
    switch (op->kind) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MIN: case OP_MAX: {
        if (!fl) {
            switch (op->kind) {
            case OP_ADD: return LLVMBuildAdd(b, x[0], x[1], "");
            case OP_SUB: return LLVMBuildSub(b, x[0], x[1], "");
            case OP_MUL: return LLVMBuildMul(b, x[0], x[1], "");
            case OP_DIV: return LLVMBuildSDiv(b, x[0], x[1], "");
            case OP_MIN: return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, x[0], x[1], ""), x[0], x[1], "");
            default: return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSGT, x[0], x[1], ""), x[0], x[1], "");
            }
        }
        /* f16 arithmetic is done in f32 and rounded once, as the interpreter does */
        LLVMValueRef p = to_f32(cg, x[0]), q = to_f32(cg, x[1]), r;
        switch (op->kind) {
        case OP_ADD: r = LLVMBuildFAdd(b, p, q, ""); break;
        case OP_SUB:
            r = LLVMBuildFSub(b, p, q, "");
            /* x·c − m, the exponent of a softmax (online-softmax makes the
             * product for this subtraction only): one fma */
            if (LLVMIsAInstruction(p) && LLVMGetInstructionOpcode(p) == LLVMFMul) {
                LLVMSetFastMathFlags(p, LLVMFastMathAllowContract);
                LLVMSetFastMathFlags(r, LLVMFastMathAllowContract);
            }
            break;
        case OP_MUL: r = LLVMBuildFMul(b, p, q, ""); break;
        case OP_DIV: r = LLVMBuildFDiv(b, p, q, ""); break;
        default: r = fmaxmin(cg, op->kind == OP_MAX, p, q); break;
        }
        return round_f32(cg, r, rk);
    }
    case OP_FLOORDIV: case OP_REM: {
        LLVMValueRef q = LLVMBuildSDiv(b, x[0], x[1], ""), r = LLVMBuildSRem(b, x[0], x[1], "");
        LLVMValueRef zero = LLVMConstNull(LLVMTypeOf(r));
        LLVMValueRef adj = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntNE, r, zero, ""),
                                        LLVMBuildICmp(b, LLVMIntNE, LLVMBuildICmp(b, LLVMIntSLT, r, zero, ""),
                                                      LLVMBuildICmp(b, LLVMIntSLT, x[1], zero, ""), ""),
                                        "");
        if (op->kind == OP_FLOORDIV)
            return LLVMBuildSub(b, q, LLVMBuildZExt(b, adj, LLVMTypeOf(q), ""), "");
        return LLVMBuildSelect(b, adj, LLVMBuildAdd(b, r, x[1], ""), r, "");
    }
    case OP_NEG:
        return fl ? LLVMBuildFNeg(b, x[0], "") : LLVMBuildNeg(b, x[0], "");
    case OP_ABS:   /* an integer's (a band's |i − j|); a float's is math_op's */
        if (!fl)
            return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, x[0], LLVMConstNull(LLVMTypeOf(x[0])), ""),
                                   LLVMBuildNeg(b, x[0], ""), x[0], "");
        return math_op(cg, op, rk, x[0]);
    case OP_CMP: {
        static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                               LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
        int i = cmp_pred(op);
        if (i >= 0)
            return fl ? LLVMBuildFCmp(b, fp[i], to_f32(cg, x[0]), to_f32(cg, x[1]), "")
                      : LLVMBuildICmp(b, int_preds[i], x[0], x[1], "");
        cg_err(cg, op, "unknown comparison '%s'", op_attr(op, "pred")->s);
        return LLVMGetUndef(cg->i1);
    }
    case OP_AND: return LLVMBuildAnd(b, x[0], x[1], "");
    case OP_OR: return LLVMBuildOr(b, x[0], x[1], "");
    case OP_NOT: return LLVMBuildNot(b, x[0], "");
    case OP_SELECT: return LLVMBuildSelect(b, x[0], x[1], x[2], "");
    case OP_CAST: return cg_cast(cg, x[0], k, rk);
    default:
        if (fl)
            return math_op(cg, op, rk, x[0]);
        cg_err(cg, op, "'%s' is not supported here", op_info[op->kind].name);
        return LLVMGetUndef(lty(cg, rk));
    }
}
