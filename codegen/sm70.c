/* sm70.c — one tile.launch → one LLVM kernel for Volta (sm_70).
 *
 * It emits what passes/sm70_layout.c decided (the nv.* attributes of the
 * tile ops; doc/codegen.md). Every tile value lives in registers, spread over
 * the block's threads by the kernel's layout (nv.layout):
 *
 *   ACC      kernels with a tile.dot. The layout of mma.m8n8k4's accumulator
 *            (f32 or f16, per the dot's type). Warp w owns rows
 *            [16·w·mrep, 16·(w+1)·mrep); each 16×16 block of a warp is four
 *            8×8 quad-pair products, QP q at rows 8·(q&1), cols 8·(q>>1).
 *   BLOCKED  the others (row kernels): thread t holds columns t, t+T, ... of
 *            every row, so a row's reduction is per thread, then per warp
 *            (shuffles), then across warps (shared memory).
 *
 * A value of shape [R, 1] or [1, C] stores only what differs along its
 * non-unit axis ("per row" / "per column"); reading it at a position of a
 * full tile is the broadcast. Positions are (a, b, i): ACC (row block,
 * column block, accumulator element), BLOCKED (row, column slot, 0).
 *
 * Loads feeding tile.dot (nv.operand) are not loaded into a layout: a
 * shared-memory tile stays a view that the dot reads fragments from (a global
 * one is first copied into a shared scratch). tile.copy_async is register
 * prefetch: the global loads are issued where the copy is, the registers
 * travel in the token (through loop-carried phis) and are stored to shared
 * memory at the tile.wait, followed by a barrier. Shared rows have the
 * padded stride nv.row_stride, free of bank conflicts.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cg.h"

/* C11 has no PI & co. */
#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453
#define SQRT1_2 0.7071067811865476
#define PI 3.141592653589793

typedef enum { LAY_ACC, LAY_BLOCKED } LayKind;

typedef struct Pos {
    int a, b, i;
} Pos;

/* A tile in registers. */
typedef struct Dist {
    ScalarKind elem;
    int64_t rows, cols;   /* the tile's shape; 1 means broadcast along that axis */
    int n;                /* storage slots */
    LLVMValueRef *v;
} Dist;

/* A 2-D window of shared memory holding a tile (row-major, `stride` elements
 * between rows); trans: the tile is the window's transpose. */
typedef struct View {
    LLVMValueRef base;    /* ptr addrspace(3) to element [0, 0] */
    int64_t stride, rows, cols;
    bool trans;
} View;

/* A memref: global (a kernel parameter) or shared (a tile.alloc). */
typedef struct Mem {
    ScalarKind elem;
    bool shared;
    int rank;
    LLVMValueRef ptr;
    LLVMValueRef dims[8], strides[8];   /* i64, in elements */
    int64_t cdims[8], cstrides[8];      /* shared: the same as numbers */
} Mem;

/* An in-flight register-prefetch copy. */
typedef struct Token {
    const Mem *dst;
    LLVMValueRef stage;
    int nregs;
    LLVMValueRef *regs;
    int64_t rows, cols;
    int vec;
} Token;

typedef enum { CV_SCALAR, CV_DIST, CV_VIEW, CV_MEM, CV_TOKEN } CvKind;
typedef struct Cv {
    CvKind kind;
    LLVMValueRef s;
    Dist *d;
    View *view;
    Mem *mem;
    Token *tok;
} Cv;

typedef struct Cg {
    Arena *a;
    Diag *d;
    bool failed;
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMValueRef fn, smem;
    LLVMTypeRef i1, i16, i32, i64, f16, f32, v2f16, p1;
    const KernelSpec *spec;
    Map vals;            /* Value* -> Cv* */
    /* the layout */
    LayKind lay;
    bool acc16;
    int nwarps, threads, mrep;
    int64_t R;
    LLVMValueRef tid, lane, warp;
    /* dynamic shared memory: live ranges, reused once their owner is dead */
    int64_t smem_bytes;               /* the peak */
    int nlive;
    struct Live { int64_t off, size; const Value *owner; } live[64];
    const Value *owner;               /* whose buffer smem_alloc makes now */
    const Block *top;                 /* the launch body */
    Map last_use;                     /* Value* -> index of its last top-level op + 1 */
} Cg;

/* ---- small helpers ---------------------------------------------------------- */

static bool err(Cg *cg, const Op *op, const char *fmt, const char *detail) {
    if (!cg->failed) {
        char msg[512];
        snprintf(msg, sizeof msg, fmt, detail ? detail : "");
        op_diag(cg->d, NULL, op, arena_printf(cg->a, "sm_70 codegen: %s", msg));
    }
    cg->failed = true;
    return false;
}

static LLVMTypeRef lty(Cg *cg, ScalarKind k) {
    switch (k) {
    case SK_I1: return cg->i1;
    case SK_I32: return cg->i32;
    case SK_I64: case SK_INDEX: return cg->i64;
    case SK_F16: return cg->f16;
    case SK_F32: return cg->f32;
    default: return NULL;
    }
}

static int esize(ScalarKind k) {
    switch (k) {
    case SK_F16: case SK_BF16: return 2;
    case SK_I1: return 1;
    case SK_I64: case SK_INDEX: case SK_F64: return 8;
    default: return 4;
    }
}

static LLVMValueRef ci64(Cg *cg, int64_t v) { return LLVMConstInt(cg->i64, (unsigned long long)v, true); }
static LLVMValueRef ci32(Cg *cg, int64_t v) { return LLVMConstInt(cg->i32, (unsigned long long)v, true); }

static LLVMValueRef call(Cg *cg, const char *name, LLVMTypeRef ret, LLVMValueRef *args, int n) {
    LLVMTypeRef pt[16];
    for (int i = 0; i < n; i++)
        pt[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef ft = LLVMFunctionType(ret, pt, (unsigned)n, false);
    LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
    if (!f)
        f = LLVMAddFunction(cg->mod, name, ft);
    return LLVMBuildCall2(cg->b, ft, f, args, (unsigned)n, "");
}

static LLVMValueRef sreg(Cg *cg, const char *name) {
    return call(cg, arena_printf(cg->a, "llvm.nvvm.read.ptx.sreg.%s", name), cg->i32, NULL, 0);
}

static void barrier(Cg *cg) { call(cg, "llvm.nvvm.barrier0", LLVMVoidTypeInContext(cg->ctx), NULL, 0); }

static LLVMValueRef zext64(Cg *cg, LLVMValueRef v) { return LLVMBuildZExt(cg->b, v, cg->i64, ""); }
static LLVMValueRef add(Cg *cg, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildAdd(cg->b, x, y, ""); }
static LLVMValueRef mul(Cg *cg, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildMul(cg->b, x, y, ""); }
static LLVMValueRef lane_bit(Cg *cg, int mask) {   /* lane & mask, as i64 */
    return zext64(cg, LLVMBuildAnd(cg->b, cg->lane, ci32(cg, mask), ""));
}
static LLVMValueRef lane_test(Cg *cg, int mask) {  /* (lane & mask) != 0 */
    return LLVMBuildICmp(cg->b, LLVMIntNE, LLVMBuildAnd(cg->b, cg->lane, ci32(cg, mask), ""), ci32(cg, 0), "");
}

/* Shuffle within the warp: the value of lane ^ mask. */
static LLVMValueRef shfl_xor(Cg *cg, LLVMValueRef v, int mask) {
    LLVMTypeRef t = LLVMTypeOf(v);
    LLVMValueRef w;
    if (t == cg->i32)
        w = v;
    else if (t == cg->f16)
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
    LLVMValueRef r = call(cg, "llvm.nvvm.shfl.sync.bfly.i32", cg->i32, args, 4);
    if (t == cg->i32)
        return r;
    if (t == cg->f16)
        return LLVMBuildBitCast(cg->b, LLVMBuildTrunc(cg->b, r, cg->i16, ""), cg->f16, "");
    if (t == cg->i1)
        return LLVMBuildTrunc(cg->b, r, cg->i1, "");
    return LLVMBuildBitCast(cg->b, r, t, "");
}

static LLVMValueRef gep(Cg *cg, ScalarKind k, LLVMValueRef ptr, LLVMValueRef off) {
    LLVMTypeRef et = k == SK_I1 ? LLVMInt8TypeInContext(cg->ctx) : lty(cg, k);
    return LLVMBuildGEP2(cg->b, et, ptr, &off, 1, "");
}

static LLVMValueRef load_elem(Cg *cg, ScalarKind k, LLVMValueRef ptr) {
    if (k == SK_I1) {
        LLVMValueRef v = LLVMBuildLoad2(cg->b, LLVMInt8TypeInContext(cg->ctx), ptr, "");
        return LLVMBuildICmp(cg->b, LLVMIntNE, v, LLVMConstInt(LLVMInt8TypeInContext(cg->ctx), 0, 0), "");
    }
    return LLVMBuildLoad2(cg->b, lty(cg, k), ptr, "");
}

static void store_elem(Cg *cg, ScalarKind k, LLVMValueRef v, LLVMValueRef ptr) {
    if (k == SK_I1)
        v = LLVMBuildZExt(cg->b, v, LLVMInt8TypeInContext(cg->ctx), "");
    LLVMBuildStore(cg->b, v, ptr);
}

/* if (cond) { body } — returns with the builder in the body; end with if_end. */
static LLVMBasicBlockRef if_begin(Cg *cg, LLVMValueRef cond) {
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "then");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "join");
    LLVMBuildCondBr(cg->b, cond, then, join);
    LLVMPositionBuilderAtEnd(cg->b, then);
    return join;
}
static void if_end(Cg *cg, LLVMBasicBlockRef join) {
    LLVMBuildBr(cg->b, join);
    LLVMPositionBuilderAtEnd(cg->b, join);
}

/* Dynamic shared memory, 16-byte aligned, first fit among the live buffers.
 * A buffer belongs to cg->owner (a value of the launch body, freed after its
 * last use there; NULL: freed by the caller). Memory that another buffer used
 * before is reused only after a barrier: other warps may still read it. */
static LLVMValueRef smem_alloc(Cg *cg, int64_t bytes) {
    bytes = (bytes + 15) & ~(int64_t)15;
    int64_t off = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (int i = 0; i < cg->nlive; i++)
            if (off < cg->live[i].off + cg->live[i].size && cg->live[i].off < off + bytes) {
                off = cg->live[i].off + cg->live[i].size;
                moved = true;
            }
    }
    if (off < cg->smem_bytes)
        barrier(cg);
    if (off + bytes > cg->smem_bytes)
        cg->smem_bytes = off + bytes;
    if (cg->nlive < 64)
        cg->live[cg->nlive++] = (struct Live){off, bytes, cg->owner};
    LLVMValueRef o = ci64(cg, off);
    return LLVMBuildGEP2(cg->b, LLVMInt8TypeInContext(cg->ctx), cg->smem, &o, 1, "");
}

/* Frees the buffers whose owners are dead after top-level op `index`
 * (owner NULL: the temporaries of one op). */
static void smem_release(Cg *cg, int index) {
    int k = 0;
    for (int i = 0; i < cg->nlive; i++) {
        const Value *o = cg->live[i].owner;
        intptr_t last = o ? (intptr_t)map_get(&cg->last_use, o) : 0;
        if (o && last > index + 1)
            cg->live[k++] = cg->live[i];
    }
    cg->nlive = k;
}

/* Records, for every value used in op (and the ops inside it), that top-level
 * op `index` uses it. */
static void note_uses(Cg *cg, const Op *op, int index) {
    for (int i = 0; i < op->noperands; i++)
        map_put(cg->a, &cg->last_use, op->operands[i], (void *)(intptr_t)(index + 1));
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for (const Op *o = op->regions[r].blocks[b]->first; o; o = o->next)
                note_uses(cg, o, index);
}

/* ---- scalar operations (index math, and each element of a tile) ---------------- */

static LLVMValueRef fconst(Cg *cg, ScalarKind k, double v) { return LLVMConstReal(lty(cg, k), v); }

static LLVMValueRef to_f32(Cg *cg, LLVMValueRef v) {
    return LLVMTypeOf(v) == cg->f16 ? LLVMBuildFPExt(cg->b, v, cg->f32, "") : v;
}

static LLVMValueRef ex2(Cg *cg, LLVMValueRef x) {   /* x: f32 */
    return call(cg, "llvm.nvvm.ex2.approx.f", cg->f32, &x, 1);
}

static LLVMValueRef fmaxmin(Cg *cg, bool max, LLVMValueRef x, LLVMValueRef y) {
    /* the interpreter's rule: x wins ties and NaN in x */
    LLVMValueRef c = LLVMBuildFCmp(cg->b, max ? LLVMRealUGT : LLVMRealULT, x, y, "");
    return LLVMBuildSelect(cg->b, c, x, y, "");
}

/* erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), for gelu. */
static LLVMValueRef erf_f32(Cg *cg, LLVMValueRef x) {
    LLVMValueRef ax = call(cg, "llvm.fabs.f32", cg->f32, &x, 1);
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
    LLVMValueRef ax = call(cg, "llvm.fabs.f32", cg->f32, &x, 1);
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
        r = LLVMBuildFMul(cg->b, call(cg, "llvm.nvvm.lg2.approx.f", cg->f32, &x, 1), fconst(cg, SK_F32, LN2), "");
        break;
    case OP_SQRT: r = call(cg, "llvm.sqrt.f32", cg->f32, &x, 1); break;
    case OP_RSQRT:
        r = LLVMBuildFDiv(cg->b, fconst(cg, SK_F32, 1), call(cg, "llvm.sqrt.f32", cg->f32, &x, 1), "");
        break;
    case OP_TANH: r = tanh_f32(cg, x); break;
    case OP_ABS: r = call(cg, "llvm.fabs.f32", cg->f32, &x, 1); break;
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
        err(cg, op, "'%s' is not supported", op_info[op->kind].name);
        return LLVMGetUndef(lty(cg, rk));
    }
    return rk == SK_F16 ? LLVMBuildFPTrunc(cg->b, r, cg->f16, "") : r;
}

static LLVMValueRef cast(Cg *cg, LLVMValueRef v, ScalarKind from, ScalarKind to) {
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

/* One element of an arith/math op. x[] are the operands' values, ks[] their
 * scalar kinds; rk the result's. */
static LLVMValueRef scalar_op(Cg *cg, const Op *op, ScalarKind rk, LLVMValueRef *x, const ScalarKind *ks) {
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
        case OP_SUB: r = LLVMBuildFSub(b, p, q, ""); break;
        case OP_MUL: r = LLVMBuildFMul(b, p, q, ""); break;
        case OP_DIV: r = LLVMBuildFDiv(b, p, q, ""); break;
        default: r = fmaxmin(cg, op->kind == OP_MAX, p, q); break;
        }
        return rk == SK_F16 ? LLVMBuildFPTrunc(b, r, cg->f16, "") : r;
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
    case OP_CMP: {
        const char *p = op_attr(op, "pred")->s;
        static const char *names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
        static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                               LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
        static const LLVMIntPredicate ip[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
        for (int i = 0; i < 6; i++)
            if (strcmp(p, names[i]) == 0) {
                if (fl)
                    return LLVMBuildFCmp(b, fp[i], to_f32(cg, x[0]), to_f32(cg, x[1]), "");
                return LLVMBuildICmp(b, ip[i], x[0], x[1], "");
            }
        err(cg, op, "unknown comparison '%s'", p);
        return LLVMGetUndef(cg->i1);
    }
    case OP_AND: return LLVMBuildAnd(b, x[0], x[1], "");
    case OP_OR: return LLVMBuildOr(b, x[0], x[1], "");
    case OP_NOT: return LLVMBuildNot(b, x[0], "");
    case OP_SELECT: return LLVMBuildSelect(b, x[0], x[1], x[2], "");
    case OP_CAST: return cast(cg, x[0], k, rk);
    default:
        if (fl)
            return math_op(cg, op, rk, x[0]);
        err(cg, op, "'%s' is not supported here", op_info[op->kind].name);
        return LLVMGetUndef(lty(cg, rk));
    }
}

/* ---- layouts ------------------------------------------------------------------ */

static int nrep_of(Cg *cg, int64_t cols) { return (int)(cols / 16); }
/* BLOCKED: column slots per thread; the last may run past the row (col >=
 * cols), where loads read the pad, stores fall outside the memref, and
 * reductions take their identity. */
static int64_t cslots(Cg *cg, int64_t cols) { return (cols + cg->threads - 1) / cg->threads; }

/* Accumulator element i: which bits of i pick the row / the column. */
static int row_bits(Cg *cg) { return cg->acc16 ? 0 : 2; }
static int col_bits(Cg *cg) { return cg->acc16 ? 7 : 5; }

static bool shape_ok(Cg *cg, const Op *op, int64_t rows, int64_t cols) {
    if (rows != 1 && rows != cg->R)
        return err(cg, op, "%s", arena_printf(cg->a, "a tile of %lld rows in a kernel of %lld-row tiles",
                                               (long long)rows, (long long)cg->R));
    if (cols == 1)
        return true;
    if (cg->lay == LAY_ACC && cols % 16)
        return err(cg, op, "%s", arena_printf(cg->a, "tile width %lld is not a multiple of 16", (long long)cols));
    return true;
}

static int slot_of(Cg *cg, const Dist *d, Pos p) {
    bool perrow = d->cols == 1, percol = d->rows == 1;
    if (perrow && percol)
        return 0;
    if (cg->lay == LAY_ACC) {
        if (perrow)
            return p.a * 8 + (p.i & row_bits(cg));
        if (percol)
            return p.b * 8 + (p.i & col_bits(cg));
        return (p.a * nrep_of(cg, d->cols) + p.b) * 8 + p.i;
    }
    if (perrow)
        return p.a;
    if (percol)
        return p.b;
    return (int)(p.a * cslots(cg, d->cols) + p.b);
}

static Dist *dist_new(Cg *cg, ScalarKind elem, int64_t rows, int64_t cols) {
    Dist *d = NEW(cg->a, Dist);
    d->elem = elem;
    d->rows = rows;
    d->cols = cols;
    if (cg->lay == LAY_ACC)
        d->n = (rows == 1 ? 1 : cg->mrep) * (cols == 1 ? 1 : nrep_of(cg, cols)) * 8;
    else
        d->n = (int)((rows == 1 ? 1 : rows) * (cols == 1 ? 1 : cslots(cg, cols)));
    d->v = NEW_ARRAY(cg->a, LLVMValueRef, d->n);
    return d;
}

/* The positions a tile of this shape stores, one per slot in use, in
 * *out (allocated in the arena). */
static int positions(Cg *cg, int64_t rows, int64_t cols, Pos **out) {
    bool perrow = cols == 1, percol = rows == 1;
    int na = cg->lay == LAY_ACC ? (percol ? 1 : cg->mrep) : (int)(percol ? 1 : rows);
    int nb = cg->lay == LAY_ACC ? (perrow ? 1 : nrep_of(cg, cols)) : (int)(perrow ? 1 : cslots(cg, cols));
    int ni = cg->lay == LAY_ACC ? 8 : 1;
    Pos *ps = *out = NEW_ARRAY(cg->a, Pos, (size_t)na * nb * ni + 1);
    int n = 0;
    for (int a = 0; a < na; a++)
        for (int b = 0; b < nb; b++)
            for (int i = 0; i < ni; i++) {
                if (cg->lay == LAY_ACC) {
                    if (perrow && percol ? i != 0
                                         : (perrow && (i & ~row_bits(cg))) || (percol && (i & ~col_bits(cg))))
                        continue;
                }
                ps[n++] = (Pos){a, b, i};
            }
    return n;
}

static LLVMValueRef dist_get(Cg *cg, const Dist *d, Pos p) { return d->v[slot_of(cg, d, p)]; }
static void dist_set(Cg *cg, Dist *d, Pos p, LLVMValueRef v) { d->v[slot_of(cg, d, p)] = v; }

/* The (row, col) of position p in a tile of the given shape, as i64. */
static void coords(Cg *cg, Pos p, int64_t rows, int64_t cols, LLVMValueRef *row, LLVMValueRef *col) {
    if (cg->lay == LAY_BLOCKED) {
        *row = ci64(cg, rows == 1 ? 0 : p.a);
        *col = cols == 1 ? ci64(cg, 0) : add(cg, ci64(cg, (int64_t)p.b * cg->threads), zext64(cg, cg->tid));
        return;
    }
    int i = p.i;
    LLVMValueRef h4 = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 2), "");     /* 4h */
    LLVMValueRef qrow = LLVMBuildShl(cg->b, lane_bit(cg, 4), ci64(cg, 1), "");    /* 8·(qp&1) */
    LLVMValueRef qcol = lane_bit(cg, 8);                                          /* 8·(qp>>1) */
    LLVMValueRef fr, fc;
    if (cg->acc16) {
        fr = add(cg, lane_bit(cg, 3), h4);
        fc = ci64(cg, i);
    } else {
        fr = add(cg, add(cg, lane_bit(cg, 1), ci64(cg, i & 2)), h4);
        fc = add(cg, ci64(cg, (i & 4) + (i & 1)), lane_bit(cg, 2));
    }
    LLVMValueRef rb = mul(cg, add(cg, mul(cg, zext64(cg, cg->warp), ci64(cg, cg->mrep)), ci64(cg, p.a)), ci64(cg, 16));
    *row = rows == 1 ? ci64(cg, 0) : add(cg, add(cg, rb, qrow), fr);
    *col = cols == 1 ? ci64(cg, 0) : add(cg, add(cg, ci64(cg, 16 * p.b), qcol), fc);
}

/* Whether this thread is the one that writes position p of a broadcast tile
 * (the others hold copies). */
static LLVMValueRef owner(Cg *cg, int64_t rows, int64_t cols) {
    bool perrow = cols == 1, percol = rows == 1;
    LLVMValueRef yes = LLVMConstInt(cg->i1, 1, 0);
    if (!perrow && !percol)
        return yes;
    LLVMValueRef c = yes;
    LLVMValueRef zero32 = ci32(cg, 0);
    if (cg->lay == LAY_BLOCKED) {
        if (perrow)
            c = LLVMBuildICmp(cg->b, LLVMIntEQ, cg->tid, zero32, "");
        return c;
    }
    int mask = 0;
    if (perrow)   /* lane bits that move along a row */
        mask |= cg->acc16 ? 8 : 8 | 2;
    if (percol)   /* lane bits that move along a column, and the warp */
        mask |= cg->acc16 ? 16 | 4 | 3 : 16 | 4 | 1;
    c = LLVMBuildICmp(cg->b, LLVMIntEQ, LLVMBuildAnd(cg->b, cg->lane, ci32(cg, mask), ""), zero32, "");
    if (percol)
        c = LLVMBuildAnd(cg->b, c, LLVMBuildICmp(cg->b, LLVMIntEQ, cg->warp, zero32, ""), "");
    return c;
}

/* ---- values ------------------------------------------------------------------- */

static Cv *cv_get(Cg *cg, const Value *v) { return map_get(&cg->vals, v); }
static void cv_put(Cg *cg, const Value *v, Cv *c) { map_put(cg->a, &cg->vals, v, c); }
static Cv *cv_scalar(Cg *cg, LLVMValueRef s) {
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_SCALAR;
    c->s = s;
    return c;
}
static Cv *cv_dist(Cg *cg, Dist *d) {
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_DIST;
    c->d = d;
    return c;
}

static ScalarKind elem_of(const Value *v) { return v->type->elem; }

/* Reads a view's elements into the kernel's layout. */
static Dist *view_to_dist(Cg *cg, const View *w, ScalarKind elem) {
    Dist *d = dist_new(cg, elem, w->rows, w->cols);
    Pos *ps;
    int n = positions(cg, w->rows, w->cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef r, c;
        coords(cg, ps[k], w->rows, w->cols, &r, &c);
        if (w->trans) {
            LLVMValueRef t = r;
            r = c;
            c = t;
        }
        LLVMValueRef off = add(cg, mul(cg, r, ci64(cg, w->stride)), c);
        dist_set(cg, d, ps[k], load_elem(cg, elem, gep(cg, elem, w->base, off)));
    }
    return d;
}

/* The value as a tile in the kernel's layout (scalars become 1×1 tiles). */
static Dist *as_dist(Cg *cg, const Op *op, const Value *v) {
    Cv *c = cv_get(cg, v);
    if (!c) {
        err(cg, op, "internal error: operand has no value", NULL);
        Dist *d = dist_new(cg, SK_F32, 1, 1);
        d->v[0] = LLVMGetUndef(cg->f32);
        return d;
    }
    if (c->kind == CV_DIST)
        return c->d;
    if (c->kind == CV_VIEW) {
        c->d = view_to_dist(cg, c->view, elem_of(v));
        c->kind = CV_DIST;
        return c->d;
    }
    Dist *d = dist_new(cg, elem_of(v), 1, 1);
    d->v[0] = c->kind == CV_SCALAR ? c->s : LLVMGetUndef(cg->f32);
    if (c->kind != CV_SCALAR)
        err(cg, op, "a memref or token is used as a tile", NULL);
    return d;
}

static LLVMValueRef as_scalar(Cg *cg, const Op *op, const Value *v) {
    Cv *c = cv_get(cg, v);
    if (!c || c->kind != CV_SCALAR) {
        err(cg, op, "expected a scalar operand", NULL);
        return LLVMGetUndef(cg->i64);
    }
    return c->s;
}

static Mem *as_mem(Cg *cg, const Op *op, const Value *v) {
    Cv *c = cv_get(cg, v);
    if (!c || c->kind != CV_MEM) {
        err(cg, op, "expected a memref operand", NULL);
        return NULL;
    }
    return c->mem;
}

/* ---- ops ---------------------------------------------------------------------- */

static void emit_block(Cg *cg, const Block *blk, const Value **yielded_ops, Cv **yielded);

static void emit_elementwise(Cg *cg, const Op *op) {
    const Type *rt = op->results[0]->type;
    if (rt->kind == TY_SCALAR) {
        LLVMValueRef x[3];
        ScalarKind ks[3];
        for (int i = 0; i < op->noperands; i++) {
            x[i] = as_scalar(cg, op, op->operands[i]);
            ks[i] = elem_of(op->operands[i]);
        }
        cv_put(cg, op->results[0], cv_scalar(cg, scalar_op(cg, op, rt->elem, x, ks)));
        return;
    }
    int64_t rows = rt->dims[0].size, cols = rt->dims[1].size;
    if (!shape_ok(cg, op, rows, cols))
        return;
    Dist *ops[3];
    ScalarKind ks[3];
    for (int i = 0; i < op->noperands; i++) {
        ops[i] = as_dist(cg, op, op->operands[i]);
        ks[i] = elem_of(op->operands[i]);
    }
    Dist *r = dist_new(cg, rt->elem, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef x[3];
        for (int i = 0; i < op->noperands; i++)
            x[i] = dist_get(cg, ops[i], ps[k]);
        dist_set(cg, r, ps[k], scalar_op(cg, op, rt->elem, x, ks));
    }
    cv_put(cg, op->results[0], cv_dist(cg, r));
}

/* Memref coordinates of a tile element: the op's base indices plus the tile
 * coordinates along the memref dims `dims` names. */
static void mem_coords(Cg *cg, const Op *op, const Mem *m, int first, LLVMValueRef row, LLVMValueRef col,
                       LLVMValueRef *co) {
    Attr *dims = op_attr(op, "dims");
    for (int d = 0; d < m->rank; d++)
        co[d] = as_scalar(cg, op, op->operands[first + d]);
    LLVMValueRef t[2] = {row, col};
    for (int a = 0; a < dims->n && a < 2; a++)
        if (dims->elems[a]->i >= 0)
            co[dims->elems[a]->i] = add(cg, co[dims->elems[a]->i], t[a]);
}

/* Offset of the coordinates, and whether they are inside the memref. */
static LLVMValueRef mem_offset(Cg *cg, const Mem *m, LLVMValueRef *co, LLVMValueRef *inside) {
    LLVMValueRef off = ci64(cg, 0), in = LLVMConstInt(cg->i1, 1, 0);
    for (int d = 0; d < m->rank; d++) {
        /* unsigned compare: negative coordinates are outside too */
        in = LLVMBuildAnd(cg->b, in, LLVMBuildICmp(cg->b, LLVMIntULT, co[d], m->dims[d], ""), "");
        off = add(cg, off, mul(cg, co[d], m->strides[d]));
    }
    *inside = in;
    return off;
}

/* Loads one element at off if inside, else gives fill (no branch: the address
 * is clamped to element 0). */
/* The memref offset of position p of a rows×cols tile at the op's indices
 * (operands from `first`), and whether it is inside the memref. */
static LLVMValueRef tile_offset(Cg *cg, const Op *op, const Mem *m, int first, Pos p, int64_t rows, int64_t cols,
                                LLVMValueRef *inside) {
    LLVMValueRef r, c, co[8];
    coords(cg, p, rows, cols, &r, &c);
    mem_coords(cg, op, m, first, r, c, co);
    return mem_offset(cg, m, co, inside);
}

static LLVMValueRef guarded_load(Cg *cg, const Mem *m, LLVMValueRef off, LLVMValueRef inside, LLVMValueRef fill) {
    LLVMValueRef safe = LLVMBuildSelect(cg->b, inside, off, ci64(cg, 0), "");
    LLVMValueRef v = load_elem(cg, m->elem, gep(cg, m->elem, m->ptr, safe));
    return LLVMBuildSelect(cg->b, inside, v, fill, "");
}


static void emit_view_copy(Cg *cg, const Op *op, const Mem *m, View *w);

static void emit_load(Cg *cg, const Op *op) {
    Mem *m = as_mem(cg, op, op->operands[0]);
    if (!m)
        return;
    const Type *rt = op->results[0]->type;
    int64_t rows = rt->dims[0].size, cols = rt->dims[1].size;
    if (op_attr(op, "nv.operand")) {   /* sm70-layout: the dots read it from shared memory */
        View *w = NEW(cg->a, View);
        w->rows = rows;
        w->cols = cols;
        if (m->shared) {   /* a stage of a shared buffer: the dot reads it in place */
            LLVMValueRef co[8], inside;
            mem_coords(cg, op, m, 1, ci64(cg, 0), ci64(cg, 0), co);
            w->base = gep(cg, m->elem, m->ptr, mem_offset(cg, m, co, &inside));
            w->stride = m->cstrides[m->rank - 2];
        } else {
            emit_view_copy(cg, op, m, w);
        }
        Cv *c = NEW(cg->a, Cv);
        c->kind = CV_VIEW;
        c->view = w;
        cv_put(cg, op->results[0], c);
        return;
    }
    if (!shape_ok(cg, op, rows, cols))
        return;
    Attr *pad = op_attr(op, "pad");
    double padv = pad ? (pad->kind == AT_FLOAT ? pad->f : (double)pad->i) : 0;
    LLVMValueRef fill = scalar_is_float(rt->elem) ? fconst(cg, rt->elem, padv)
                                                  : LLVMConstInt(lty(cg, rt->elem), (unsigned long long)padv, 1);
    Dist *d = dist_new(cg, rt->elem, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef inside, off = tile_offset(cg, op, m, 1, ps[k], rows, cols, &inside);
        dist_set(cg, d, ps[k], guarded_load(cg, m, off, inside, fill));
    }
    cv_put(cg, op->results[0], cv_dist(cg, d));
}

static void emit_store(Cg *cg, const Op *op) {
    Mem *m = as_mem(cg, op, op->operands[0]);
    if (!m)
        return;
    const Type *t = op->operands[1]->type;
    int64_t rows = t->dims[0].size, cols = t->dims[1].size;
    Dist *d = as_dist(cg, op, op->operands[1]);
    if (cg->failed)
        return;
    LLVMValueRef own = owner(cg, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef inside, off = tile_offset(cg, op, m, 2, ps[k], rows, cols, &inside);
        LLVMBasicBlockRef join = if_begin(cg, LLVMBuildAnd(cg->b, inside, own, ""));
        LLVMValueRef v = cast(cg, dist_get(cg, d, ps[k]), d->elem, m->elem);
        store_elem(cg, m->elem, v, gep(cg, m->elem, m->ptr, off));
        if_end(cg, join);
    }
}

static void emit_gather(Cg *cg, const Op *op) {
    Mem *m = as_mem(cg, op, op->operands[0]);
    if (!m)
        return;
    const Type *rt = op->results[0]->type;
    if (rt->kind == TY_SCALAR) {   /* every index a scalar: one load, the same in all threads */
        LLVMValueRef co[8], inside;
        for (int i = 0; i < m->rank; i++)
            co[i] = cast(cg, as_scalar(cg, op, op->operands[1 + i]), elem_of(op->operands[1 + i]), SK_INDEX);
        LLVMValueRef off = mem_offset(cg, m, co, &inside);
        cv_put(cg, op->results[0], cv_scalar(cg, guarded_load(cg, m, off, inside, LLVMConstNull(lty(cg, m->elem)))));
        return;
    }
    int64_t rows = rt->dims[0].size, cols = rt->dims[1].size;
    if (!shape_ok(cg, op, rows, cols))
        return;
    Dist *ix[8];
    for (int i = 0; i < m->rank; i++)
        ix[i] = as_dist(cg, op, op->operands[1 + i]);
    Dist *d = dist_new(cg, rt->elem, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef co[8], inside;
        for (int i = 0; i < m->rank; i++)
            co[i] = cast(cg, dist_get(cg, ix[i], ps[k]), ix[i]->elem, SK_INDEX);
        LLVMValueRef off = mem_offset(cg, m, co, &inside);
        dist_set(cg, d, ps[k], guarded_load(cg, m, off, inside, LLVMConstNull(lty(cg, m->elem))));
    }
    cv_put(cg, op->results[0], cv_dist(cg, d));
}

static void emit_splat_iota(Cg *cg, const Op *op) {
    const Type *rt = op->results[0]->type;
    int64_t rows = rt->dims[0].size, cols = rt->dims[1].size;
    if (!shape_ok(cg, op, rows, cols))
        return;
    if (op->kind == OP_SPLAT) {
        Dist *d = dist_new(cg, rt->elem, 1, 1);
        d->v[0] = as_scalar(cg, op, op->operands[0]);
        cv_put(cg, op->results[0], cv_dist(cg, d));
        return;
    }
    int axis = (int)op_attr(op, "axis")->i;
    Dist *d = dist_new(cg, rt->elem, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef r, c;
        coords(cg, ps[k], rows, cols, &r, &c);
        dist_set(cg, d, ps[k], cast(cg, axis == 0 ? r : c, SK_INDEX, rt->elem));
    }
    cv_put(cg, op->results[0], cv_dist(cg, d));
}

static LLVMValueRef combine(Cg *cg, const char *kind, ScalarKind k, LLVMValueRef x, LLVMValueRef y) {
    if (strcmp(kind, "sum") == 0) {
        LLVMValueRef r = LLVMBuildFAdd(cg->b, to_f32(cg, x), to_f32(cg, y), "");
        return k == SK_F16 ? LLVMBuildFPTrunc(cg->b, r, cg->f16, "") : r;
    }
    return fmaxmin(cg, strcmp(kind, "max") == 0, x, y);
}

static void emit_reduce(Cg *cg, const Op *op) {
    const char *kind = op_attr(op, "kind")->s;
    if (strcmp(kind, "sum") && strcmp(kind, "max") && strcmp(kind, "min")) {
        err(cg, op, "reduction '%s' is not supported", kind);
        return;
    }
    const Type *xt = op->operands[0]->type, *rt = op->results[0]->type;
    int64_t rows = xt->dims[0].size, cols = xt->dims[1].size;
    if (!shape_ok(cg, op, rows, cols))
        return;
    Dist *x = as_dist(cg, op, op->operands[0]);
    Dist *r = dist_new(cg, rt->elem, rows, 1);
    if (cols == 1) {   /* already one per row */
        for (int k = 0; k < r->n; k++)
            r->v[k] = x->v[k] ? cast(cg, x->v[k], x->elem, rt->elem) : NULL;
        cv_put(cg, op->results[0], cv_dist(cg, r));
        return;
    }
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    if (cg->lay == LAY_ACC) {
        /* in-thread over the row's elements, then across the lanes sharing the row */
        LLVMValueRef *acc = NEW_ARRAY(cg->a, LLVMValueRef, cg->mrep * 8);
        for (int k = 0; k < n; k++) {
            int s = ps[k].a * 8 + (ps[k].i & row_bits(cg));
            LLVMValueRef v = cast(cg, dist_get(cg, x, ps[k]), x->elem, rt->elem);
            acc[s] = acc[s] ? combine(cg, kind, rt->elem, acc[s], v) : v;
        }
        for (int s = 0; s < cg->mrep * 8; s++) {
            if (!acc[s])
                continue;
            LLVMValueRef v = acc[s];
            if (!cg->acc16)
                v = combine(cg, kind, rt->elem, v, shfl_xor(cg, v, 2));
            v = combine(cg, kind, rt->elem, v, shfl_xor(cg, v, 8));
            r->v[s] = v;
        }
        cv_put(cg, op->results[0], cv_dist(cg, r));
        return;
    }
    /* BLOCKED: per thread, per warp, then across warps through shared memory */
    LLVMValueRef scratch = smem_alloc(cg, (int64_t)rows * cg->nwarps * 4);
    for (int64_t row = 0; row < rows; row++) {
        LLVMValueRef v = NULL;
        for (int64_t j = 0; j < cslots(cg, cols); j++) {
            LLVMValueRef e = cast(cg, dist_get(cg, x, (Pos){(int)row, (int)j, 0}), x->elem, SK_F32);
            if ((j + 1) * cg->threads > cols) {   /* past the row's end: the identity */
                double id = strcmp(kind, "sum") == 0 ? 0 : strcmp(kind, "max") == 0 ? -INFINITY : INFINITY;
                LLVMValueRef col = add(cg, ci64(cg, j * cg->threads), zext64(cg, cg->tid));
                e = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntULT, col, ci64(cg, cols), ""), e,
                                    fconst(cg, SK_F32, id), "");
            }
            v = v ? combine(cg, kind, SK_F32, v, e) : e;
        }
        for (int m = 16; m >= 1; m /= 2)
            v = combine(cg, kind, SK_F32, v, shfl_xor(cg, v, m));
        LLVMBasicBlockRef join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntEQ, cg->lane, ci32(cg, 0), ""));
        LLVMValueRef slot = add(cg, mul(cg, zext64(cg, cg->warp), ci64(cg, rows)), ci64(cg, row));
        LLVMBuildStore(cg->b, v, gep(cg, SK_F32, scratch, slot));
        if_end(cg, join);
    }
    barrier(cg);
    for (int64_t row = 0; row < rows; row++) {
        LLVMValueRef v = NULL;
        for (int w = 0; w < cg->nwarps; w++) {
            LLVMValueRef e = LLVMBuildLoad2(cg->b, cg->f32, gep(cg, SK_F32, scratch, ci64(cg, w * rows + row)), "");
            v = v ? combine(cg, kind, SK_F32, v, e) : e;
        }
        r->v[row] = cast(cg, v, SK_F32, rt->elem);
    }
    barrier(cg);
    cv_put(cg, op->results[0], cv_dist(cg, r));
}

/* ---- tile.dot on mma.m8n8k4 ----------------------------------------------------- */

static LLVMValueRef pack2(Cg *cg, LLVMValueRef x, LLVMValueRef y) {
    LLVMValueRef v = LLVMGetUndef(cg->v2f16);
    v = LLVMBuildInsertElement(cg->b, v, x, ci32(cg, 0), "");
    return LLVMBuildInsertElement(cg->b, v, y, ci32(cg, 1), "");
}

/* Four consecutive f16 from shared memory as two f16x2 words. */
static void load4(Cg *cg, LLVMValueRef base, LLVMValueRef off, int64_t stride, LLVMValueRef *w) {
    LLVMTypeRef v4 = LLVMVectorType(cg->f16, 4);
    LLVMValueRef p = gep(cg, SK_F16, base, off);
    LLVMValueRef v = LLVMBuildLoad2(cg->b, v4, p, "");
    LLVMSetAlignment(v, stride % 4 == 0 ? 8 : 2);
    LLVMValueRef lo[2] = {ci32(cg, 0), ci32(cg, 1)}, hi[2] = {ci32(cg, 2), ci32(cg, 3)};
    w[0] = LLVMBuildShuffleVector(cg->b, v, LLVMGetUndef(v4), LLVMConstVector(lo, 2), "");
    w[1] = LLVMBuildShuffleVector(cg->b, v, LLVMGetUndef(v4), LLVMConstVector(hi, 2), "");
}

/* A fragment (rows of row block a, k-step ks) from a view: .row if the view
 * is [M, K] in memory, .col if it holds Aᵀ. */
static void frag_a_view(Cg *cg, const View *w, int a, int ks, LLVMValueRef *out, const char **lay) {
    LLVMValueRef m0 = add(cg, mul(cg, add(cg, mul(cg, zext64(cg, cg->warp), ci64(cg, cg->mrep)), ci64(cg, a)),
                                  ci64(cg, 16)),
                          LLVMBuildShl(cg->b, lane_bit(cg, 4), ci64(cg, 1), ""));
    LLVMValueRef h4 = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 2), "");
    LLVMValueRef r = lane_bit(cg, 3);
    if (!w->trans) {   /* element i at (m0 + r + 4h, 4ks + i) */
        LLVMValueRef row = add(cg, add(cg, m0, r), h4);
        load4(cg, w->base, add(cg, mul(cg, row, ci64(cg, w->stride)), ci64(cg, 4 * ks)), w->stride, out);
        *lay = "row";
    } else {           /* element i at (m0 + 4h + i, 4ks + r): memory [K][M] */
        LLVMValueRef krow = add(cg, ci64(cg, 4 * ks), r);
        load4(cg, w->base, add(cg, mul(cg, krow, ci64(cg, w->stride)), add(cg, m0, h4)), w->stride, out);
        *lay = "col";
    }
}

/* B fragment (columns of block b, k-step ks): .row if the view is [K, N] in
 * memory, .col if it holds Bᵀ (as K of Q·Kᵀ). */
static void frag_b_view(Cg *cg, const View *w, int b, int ks, LLVMValueRef *out, const char **lay) {
    LLVMValueRef n0 = add(cg, ci64(cg, 16 * b), lane_bit(cg, 8));
    LLVMValueRef h4 = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 2), "");
    LLVMValueRef r = lane_bit(cg, 3);
    if (!w->trans) {   /* element i at (k = 4ks + r, n = n0 + 4h + i) */
        LLVMValueRef krow = add(cg, ci64(cg, 4 * ks), r);
        load4(cg, w->base, add(cg, mul(cg, krow, ci64(cg, w->stride)), add(cg, n0, h4)), w->stride, out);
        *lay = "row";
    } else {           /* element i at (k = 4ks + i, n = n0 + r + 4h): memory [N][K] */
        LLVMValueRef nrow = add(cg, add(cg, n0, r), h4);
        load4(cg, w->base, add(cg, mul(cg, nrow, ci64(cg, w->stride)), ci64(cg, 4 * ks)), w->stride, out);
        *lay = "col";
    }
}

/* P (an accumulator-layout tile, [R, K]) as A fragments, by shuffles only:
 * first each thread gathers its A row (r + 4h) of its quad pair's 8 columns
 * (f32 layout: one xor-2 exchange of an f16 pair per half), then the two quad
 * pairs of a row block swap halves (xor 8). out[(a·K/4 + ks)·2 + word]. */
static void frags_from_acc(Cg *cg, const Dist *p, int64_t K, LLVMValueRef *out) {
    LLVMValueRef odd = lane_test(cg, 2), hi = lane_test(cg, 8);
    int nb = (int)(K / 16);
    for (int a = 0; a < cg->mrep; a++)
        for (int b = 0; b < nb; b++)
            for (int c0 = 0; c0 < 8; c0 += 4) {
                LLVMValueRef v[8];
                for (int i = 0; i < 8; i++)
                    v[i] = cast(cg, dist_get(cg, p, (Pos){a, b, i}), p->elem, SK_F16);
                LLVMValueRef w[2];
                if (cg->acc16) {
                    w[0] = pack2(cg, v[c0], v[c0 + 1]);
                    w[1] = pack2(cg, v[c0 + 2], v[c0 + 3]);
                } else {
                    LLVMValueRef own = pack2(cg, LLVMBuildSelect(cg->b, odd, v[c0 + 2], v[c0], ""),
                                             LLVMBuildSelect(cg->b, odd, v[c0 + 3], v[c0 + 1], ""));
                    LLVMValueRef send = pack2(cg, LLVMBuildSelect(cg->b, odd, v[c0], v[c0 + 2], ""),
                                              LLVMBuildSelect(cg->b, odd, v[c0 + 1], v[c0 + 3], ""));
                    LLVMValueRef recv = shfl_xor(cg, send, 2);
                    w[0] = LLVMBuildSelect(cg->b, odd, recv, own, "");
                    w[1] = LLVMBuildSelect(cg->b, odd, own, recv, "");
                }
                LLVMValueRef other[2] = {shfl_xor(cg, w[0], 8), shfl_xor(cg, w[1], 8)};
                for (int ch = 0; ch < 2; ch++) {
                    int ks = b * 4 + ch * 2 + c0 / 4;
                    for (int j = 0; j < 2; j++)
                        out[((int64_t)a * (K / 4) + ks) * 2 + j] =
                            ch == 0 ? LLVMBuildSelect(cg->b, hi, other[j], w[j], "")
                                    : LLVMBuildSelect(cg->b, hi, w[j], other[j], "");
                }
            }
}

static void emit_dot(Cg *cg, const Op *op) {
    const Type *at = op->operands[0]->type, *bt = op->operands[1]->type, *rt = op->results[0]->type;
    int64_t M = at->dims[0].size, K = at->dims[1].size, N = bt->dims[1].size;
    bool f16acc = rt->elem == SK_F16;
    if (at->elem != SK_F16 || bt->elem != SK_F16) {
        err(cg, op, "mma.m8n8k4 multiplies f16 operands only", NULL);
        return;
    }
    if (f16acc != cg->acc16) {
        err(cg, op, "all tile.dot ops of a kernel must accumulate in one type", NULL);
        return;
    }
    if (M != cg->R || K % 16 || N % 16) {
        err(cg, op, "%s", arena_printf(cg->a, "a %lldx%lldx%lld dot does not fit the kernel's warp tiling",
                                        (long long)M, (long long)K, (long long)N));
        return;
    }
    Cv *ca = cv_get(cg, op->operands[0]), *cb = cv_get(cg, op->operands[1]);
    if (!cb || cb->kind != CV_VIEW) {
        err(cg, op, "operand B of tile.dot must be a tile loaded from memory", NULL);
        return;
    }
    LLVMValueRef *pfr = NULL;
    if (!ca || ca->kind != CV_VIEW) {
        Dist *p = as_dist(cg, op, op->operands[0]);
        if (cg->failed)
            return;
        if (p->rows != cg->R || p->cols != K) {
            err(cg, op, "operand A of tile.dot must be a full tile", NULL);
            return;
        }
        pfr = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)(cg->mrep * (K / 4) * 2));
        frags_from_acc(cg, p, K, pfr);
    }
    Dist *c = as_dist(cg, op, op->operands[2]);
    int nb = (int)(N / 16);
    Dist *r = dist_new(cg, rt->elem, M, N);
    /* accumulators, in mma argument order */
    int nacc = f16acc ? 4 : 8;
    LLVMValueRef *acc = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)(cg->mrep * nb * nacc));
    for (int a = 0; a < cg->mrep; a++)
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < nacc; j++) {
                LLVMValueRef *slot = &acc[(a * nb + b) * nacc + j];
                if (f16acc)
                    *slot = pack2(cg, cast(cg, dist_get(cg, c, (Pos){a, b, 2 * j}), c->elem, SK_F16),
                                  cast(cg, dist_get(cg, c, (Pos){a, b, 2 * j + 1}), c->elem, SK_F16));
                else
                    *slot = cast(cg, dist_get(cg, c, (Pos){a, b, j}), c->elem, SK_F32);
            }
    LLVMTypeRef et = f16acc ? cg->v2f16 : cg->f32;
    LLVMTypeRef fields[8];
    for (int j = 0; j < nacc; j++)
        fields[j] = et;
    LLVMTypeRef st = LLVMStructTypeInContext(cg->ctx, fields, (unsigned)nacc, false);
    for (int ks = 0; ks < K / 4; ks++) {
        LLVMValueRef afr[8][2], bfr[64][2];
        const char *alay = "row", *blay = "row";
        for (int a = 0; a < cg->mrep; a++) {
            if (pfr) {
                afr[a][0] = pfr[((int64_t)a * (K / 4) + ks) * 2];
                afr[a][1] = pfr[((int64_t)a * (K / 4) + ks) * 2 + 1];
            } else {
                frag_a_view(cg, ca->view, a, ks, afr[a], &alay);
            }
        }
        for (int b = 0; b < nb; b++)
            frag_b_view(cg, cb->view, b, ks, bfr[b], &blay);
        const char *acc_t = f16acc ? "f16" : "f32";
        const char *name = arena_printf(cg->a, "llvm.nvvm.mma.m8n8k4.%s.%s.%s.%s", alay, blay, acc_t, acc_t);
        Attr *mma = op_attr(op, "nv.mma");
        if (ks == 0 && (!mma || strcmp(mma->s, arena_printf(cg->a, "m8n8k4.%s.%s.%s", alay, blay, acc_t)) != 0)) {
            err(cg, op, "internal error: the fragments disagree with nv.mma '%s'", mma ? mma->s : "(none)");
            return;
        }
        for (int a = 0; a < cg->mrep; a++)
            for (int b = 0; b < nb; b++) {
                LLVMValueRef args[12] = {afr[a][0], afr[a][1], bfr[b][0], bfr[b][1]};
                LLVMValueRef *ac = &acc[(a * nb + b) * nacc];
                for (int j = 0; j < nacc; j++)
                    args[4 + j] = ac[j];
                LLVMValueRef res = call(cg, name, st, args, 4 + nacc);
                for (int j = 0; j < nacc; j++)
                    ac[j] = LLVMBuildExtractValue(cg->b, res, (unsigned)j, "");
            }
    }
    for (int a = 0; a < cg->mrep; a++)
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < nacc; j++) {
                LLVMValueRef v = acc[(a * nb + b) * nacc + j];
                if (f16acc) {
                    dist_set(cg, r, (Pos){a, b, 2 * j}, LLVMBuildExtractElement(cg->b, v, ci32(cg, 0), ""));
                    dist_set(cg, r, (Pos){a, b, 2 * j + 1}, LLVMBuildExtractElement(cg->b, v, ci32(cg, 1), ""));
                } else {
                    dist_set(cg, r, (Pos){a, b, j}, v);
                }
            }
    cv_put(cg, op->results[0], cv_dist(cg, r));
}

static void emit_trans(Cg *cg, const Op *op) {
    Cv *c = cv_get(cg, op->operands[0]);
    if (!c || c->kind != CV_VIEW) {
        err(cg, op, "tile.trans is supported on loaded tiles only", NULL);
        return;
    }
    View *w = NEW(cg->a, View);
    *w = *c->view;
    w->trans = !w->trans;
    int64_t t = w->rows;
    w->rows = w->cols;
    w->cols = t;
    Cv *r = NEW(cg->a, Cv);
    r->kind = CV_VIEW;
    r->view = w;
    cv_put(cg, op->results[0], r);
}

/* ---- shared memory, register prefetch -------------------------------------------- */

/* Row-major strides; f16 rows padded to `row_stride` (sm70-layout's choice),
 * others by 16 bytes. */
static Mem *shared_mem(Cg *cg, const Type *t, int64_t row_stride) {
    Mem *m = NEW(cg->a, Mem);
    m->elem = t->elem;
    m->shared = true;
    m->rank = t->rank;
    int64_t s = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        m->cdims[d] = t->dims[d].size;
        m->cstrides[d] = s;
        if (d == t->rank - 1 && t->rank >= 2)
            s = row_stride > 0 ? row_stride : t->dims[d].size + 16 / esize(t->elem);
        else
            s *= t->dims[d].size;
    }
    for (int d = 0; d < t->rank; d++) {
        m->dims[d] = ci64(cg, m->cdims[d]);
        m->strides[d] = ci64(cg, m->cstrides[d]);
    }
    m->ptr = smem_alloc(cg, s * esize(t->elem));
    return m;
}

static void emit_alloc(Cg *cg, const Op *op) {
    const Type *t = op->results[0]->type;
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d].sym) {
            err(cg, op, "a shared buffer needs numeric dims", NULL);
            return;
        }
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_MEM;
    cg->owner = op->results[0];
    Attr *stride = op_attr(op, "nv.row_stride");
    c->mem = shared_mem(cg, t, stride ? stride->i : 0);
    cg->owner = NULL;
    cv_put(cg, op->results[0], c);
}

/* Vector width of a copy of rows×cols from m: 8 f16 (16 bytes) when the tile's
 * columns run along m's innermost, numeric, dim. */
static int copy_vec(const Mem *m, int64_t cols, int inner_axis_dim, int64_t inner_size) {
    if (m->elem != SK_F16 || inner_axis_dim != m->rank - 1 || inner_size <= 0)
        return 1;
    for (int v = 8; v > 1; v /= 2)
        if (cols % v == 0 && inner_size % v == 0)
            return v;
    return 1;
}

/* Vector j of this thread in a copied box: its number f (vectors are dealt
 * out round-robin), and the (row, col) of its first element. */
static LLVMValueRef box_vector(Cg *cg, const Token *t, int j, LLVMValueRef *row, LLVMValueRef *col) {
    LLVMValueRef f = add(cg, ci64(cg, (int64_t)j * cg->threads), zext64(cg, cg->tid));
    LLVMValueRef per_row = ci64(cg, t->cols / t->vec);
    *row = LLVMBuildUDiv(cg->b, f, per_row, "");
    *col = mul(cg, LLVMBuildURem(cg->b, f, per_row, ""), ci64(cg, t->vec));
    return f;
}

/* Global loads of a rows×cols box into registers, each thread a few vectors;
 * outside the memref reads 0. */
static Token *prefetch(Cg *cg, const Op *op, const Mem *src, int first_index, int64_t rows, int64_t cols,
                       int64_t inner_size) {
    Attr *dims = op_attr(op, "dims");
    Token *t = NEW(cg->a, Token);
    t->rows = rows;
    t->cols = cols;
    t->vec = copy_vec(src, cols, (int)dims->elems[1]->i, inner_size);
    int64_t total = rows * cols / t->vec;
    t->nregs = (int)((total + cg->threads - 1) / cg->threads);
    t->regs = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)t->nregs);
    LLVMTypeRef vt = t->vec > 1 ? LLVMVectorType(cg->f16, (unsigned)t->vec) : lty(cg, src->elem);
    for (int j = 0; j < t->nregs; j++) {
        LLVMValueRef row, col, f = box_vector(cg, t, j, &row, &col);
        LLVMValueRef co[8], inside;
        mem_coords(cg, op, src, first_index, row, col, co);
        LLVMValueRef off = mem_offset(cg, src, co, &inside);
        if (total % cg->threads)
            inside = LLVMBuildAnd(cg->b, inside, LLVMBuildICmp(cg->b, LLVMIntULT, f, ci64(cg, total), ""), "");
        LLVMValueRef safe = LLVMBuildSelect(cg->b, inside, off, ci64(cg, 0), "");
        LLVMValueRef v = LLVMBuildLoad2(cg->b, vt, gep(cg, src->elem, src->ptr, safe), "");
        LLVMSetAlignment(v, (unsigned)(t->vec * esize(src->elem)));
        t->regs[j] = LLVMBuildSelect(cg->b, inside, v, LLVMConstNull(vt), "");
    }
    return t;
}

/* Stores a prefetched box into rows×cols of shared memory at base (row stride
 * `stride` elements). */
static void land(Cg *cg, const Token *t, LLVMValueRef base, int64_t stride) {
    int64_t total = t->rows * t->cols / t->vec;
    for (int j = 0; j < t->nregs; j++) {
        LLVMValueRef row, col, f = box_vector(cg, t, j, &row, &col);
        LLVMValueRef off = add(cg, mul(cg, row, ci64(cg, stride)), col);
        LLVMBasicBlockRef join = NULL;
        if (total % cg->threads)
            join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntULT, f, ci64(cg, total), ""));
        LLVMValueRef s = LLVMBuildStore(cg->b, t->regs[j], gep(cg, SK_F16, base, off));
        int64_t row_align = (stride * 2) & -(stride * 2);   /* rows start this aligned */
        LLVMSetAlignment(s, (unsigned)(row_align < t->vec * 2 ? row_align : t->vec * 2));
        if (join)
            if_end(cg, join);
    }
}

static int64_t inner_size_of(const Value *mem) {
    const Type *t = mem->type;
    return t->dims[t->rank - 1].sym ? -1 : t->dims[t->rank - 1].size;
}

static void emit_copy_async(Cg *cg, const Op *op) {
    Mem *src = as_mem(cg, op, op->operands[0]), *dst = as_mem(cg, op, op->operands[1]);
    if (!src || !dst)
        return;
    if (dst->rank != 3 || src->elem != SK_F16 || dst->elem != SK_F16) {
        err(cg, op, "tile.copy_async is supported for f16 boxes into [stages, rows, cols] buffers", NULL);
        return;
    }
    Token *t = prefetch(cg, op, src, 3, dst->cdims[1], dst->cdims[2], inner_size_of(op->operands[0]));
    t->dst = dst;
    t->stage = as_scalar(cg, op, op->operands[2]);
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_TOKEN;
    c->tok = t;
    cv_put(cg, op->results[0], c);
}

static void emit_wait(Cg *cg, const Op *op) {
    Cv *c = cv_get(cg, op->operands[0]);
    if (!c || c->kind != CV_TOKEN) {
        err(cg, op, "tile.wait needs a token of tile.copy_async", NULL);
        return;
    }
    const Token *t = c->tok;
    if (t->dst->cdims[0] < 2)   /* one stage: others may still read it */
        barrier(cg);
    LLVMValueRef base = gep(cg, SK_F16, t->dst->ptr, mul(cg, t->stage, ci64(cg, t->dst->cstrides[0])));
    land(cg, t, base, t->dst->cstrides[1]);
    barrier(cg);
}

/* A global tile feeding a dot: copied once into a shared scratch. */
static void emit_view_copy(Cg *cg, const Op *op, const Mem *m, View *w) {
    int64_t stride = op_attr(op, "nv.row_stride")->i;
    cg->owner = op->results[0];
    LLVMValueRef base = smem_alloc(cg, w->rows * stride * 2);
    cg->owner = NULL;
    Token *t = prefetch(cg, op, m, 1, w->rows, w->cols, inner_size_of(op->operands[0]));
    land(cg, t, base, stride);
    barrier(cg);
    w->base = base;
    w->stride = stride;
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
            err(cg, op, "a loop-carried token must come from tile.copy_async", NULL);
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
            LLVMValueRef v = cast(cg, dist_get(cg, s, ps[k]), s->elem, d->elem);
            LLVMValueRef phi = dist_get(cg, d, ps[k]);
            LLVMAddIncoming(phi, &v, &bb, 1);
        }
    } else if (c->cv->kind == CV_TOKEN) {
        if (src->kind != CV_TOKEN || src->tok->nregs != c->cv->tok->nregs || src->tok->dst != c->cv->tok->dst) {
            err(cg, op, "the tokens a loop carries must copy into the same buffer", NULL);
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
    /* make sure tile inits are tiles before leaving the preheader */
    for (int i = 0; i < ncarry; i++)
        if (body->args[1 + i]->type->kind == TY_TILE && init[i] && init[i]->kind == CV_VIEW)
            as_dist(cg, op, op->operands[3 + i]);
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, head);
    LLVMValueRef iv = LLVMBuildPhi(cg->b, cg->i64, "iv");
    LLVMAddIncoming(iv, &lb, &pre, 1);
    Carried *car = NEW_ARRAY(cg->a, Carried, ncarry + 1);
    for (int i = 0; i < ncarry; i++) {
        Cv *cv = make_phis(cg, op, body->args[1 + i], init[i], &car[i]);
        cv_put(cg, body->args[1 + i], cv);
    }
    if (cg->failed)
        return;
    /* incoming from the preheader: build any conversions there */
    LLVMBasicBlockRef save = LLVMGetInsertBlock(cg->b);
    LLVMPositionBuilderBefore(cg->b, LLVMGetBasicBlockTerminator(pre));
    for (int i = 0; i < ncarry; i++)
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
        if (ys[i] && ys[i]->kind == CV_VIEW)
            as_dist(cg, op, yv[i]);
    }
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(cg->b);
    for (int i = 0; i < ncarry; i++)
        incoming(cg, op, &car[i], yv[i], ys[i], latch);
    LLVMAddIncoming(iv, &next, &latch, 1);
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, exit);
    for (int i = 0; i < ncarry; i++)
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
        err(cg, op, "unknown dim '%s'", name);
        return;
    }
    case OP_LOAD: emit_load(cg, op); return;
    case OP_STORE: emit_store(cg, op); return;
    case OP_GATHER: emit_gather(cg, op); return;
    case OP_SPLAT: case OP_IOTA: emit_splat_iota(cg, op); return;
    case OP_TILE_REDUCE: emit_reduce(cg, op); return;
    case OP_DOT: emit_dot(cg, op); return;
    case OP_TRANS: emit_trans(cg, op); return;
    case OP_ALLOC: emit_alloc(cg, op); return;
    case OP_COPY_ASYNC: emit_copy_async(cg, op); return;
    case OP_WAIT: emit_wait(cg, op); return;
    case OP_FOR: emit_for(cg, op); return;
    default: break;
    }
    const char *name = op_info[op->kind].name;
    if ((strncmp(name, "arith.", 6) == 0 || strncmp(name, "math.", 5) == 0) && op->nresults == 1) {
        for (int i = 0; i < op->noperands; i++)
            if (op->operands[i]->type->elem == SK_BF16) {
                err(cg, op, "bf16 has no arithmetic on sm_70 (Volta has no bf16 MMA); use f16", NULL);
                return;
            }
        emit_elementwise(cg, op);
        return;
    }
    err(cg, op, "'%s' cannot be lowered for sm_70", name);
}

static void emit_block(Cg *cg, const Block *blk, const Value **yv, Cv **ys) {
    int index = 0;
    for (const Op *op = blk->first; op && !cg->failed; op = op->next, index++) {
        if (blk == cg->top && index > 0)
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
        emit_op(cg, op);
    }
}

/* ---- the kernel ----------------------------------------------------------------- */

bool sm70_emit_kernel(Arena *a, Diag *d, LLVMContextRef ctx, LLVMModuleRef mod, const KernelSpec *k,
                      KernelInfo *info) {
    Cg cgs = {.a = a, .d = d, .ctx = ctx, .mod = mod, .spec = k};
    Cg *cg = &cgs;
    map_init(&cg->vals, false);
    cg->i1 = LLVMInt1TypeInContext(ctx);
    cg->i16 = LLVMInt16TypeInContext(ctx);
    cg->i32 = LLVMInt32TypeInContext(ctx);
    cg->i64 = LLVMInt64TypeInContext(ctx);
    cg->f16 = LLVMHalfTypeInContext(ctx);
    cg->f32 = LLVMFloatTypeInContext(ctx);
    cg->v2f16 = LLVMVectorType(cg->f16, 2);
    cg->p1 = LLVMPointerTypeInContext(ctx, 1);
    const Op *launch = k->launch;
    const Block *body = launch->regions[0].blocks[0];

    /* the layout sm70-layout chose */
    Attr *lay = op_attr(launch, "nv.layout"), *rows = op_attr(launch, "nv.rows"),
         *warps = op_attr(launch, "nv.warps"), *blocks = op_attr(launch, "nv.row_blocks");
    if (!lay || !rows || !warps || !blocks)
        return err(cg, launch, "internal error: the launch has no nv.layout (run sm70-layout first)", NULL);
    cg->lay = strcmp(lay->s, "blocked") == 0 ? LAY_BLOCKED : LAY_ACC;
    cg->acc16 = strcmp(lay->s, "acc.f16") == 0;
    cg->R = rows->i;
    cg->nwarps = (int)warps->i;
    cg->mrep = (int)blocks->i;
    cg->threads = 32 * cg->nwarps;

    /* the function: memref pointers, then the block's dims */
    int nmem = launch->noperands - 3 + launch->nresults;
    int nparams = nmem + k->ndims;
    LLVMTypeRef *pt = NEW_ARRAY(a, LLVMTypeRef, nparams + 1);
    for (int i = 0; i < nparams; i++)
        pt[i] = i < nmem ? cg->p1 : cg->i64;
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
    cg->smem = LLVMGetNamedGlobal(mod, "attnc_smem");
    if (!cg->smem) {
        LLVMTypeRef at = LLVMArrayType(LLVMInt8TypeInContext(ctx), 0);
        cg->smem = LLVMAddGlobalInAddressSpace(mod, at, "attnc_smem", 3);
        LLVMSetLinkage(cg->smem, LLVMExternalLinkage);
        LLVMSetAlignment(cg->smem, 16);
    }
    cg->b = LLVMCreateBuilderInContext(ctx);
    LLVMPositionBuilderAtEnd(cg->b, LLVMAppendBasicBlockInContext(ctx, cg->fn, "entry"));
    cg->tid = sreg(cg, "tid.x");
    cg->lane = LLVMBuildAnd(cg->b, cg->tid, ci32(cg, 31), "lane");
    cg->warp = LLVMBuildLShr(cg->b, cg->tid, ci32(cg, 5), "warp");
    static const char *pids[3] = {"ctaid.x", "ctaid.y", "ctaid.z"};
    for (int i = 0; i < 3; i++)
        cv_put(cg, body->args[i], cv_scalar(cg, zext64(cg, sreg(cg, pids[i]))));

    /* memrefs: row-major, strides from the dims */
    for (int i = 0; i < nmem; i++) {
        const Value *arg = body->args[3 + i];
        const Type *t = arg->type;
        Mem *m = NEW(a, Mem);
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
                    return err(cg, launch, "unknown dim '%s'", t->dims[dd].sym);
            } else {
                m->dims[dd] = ci64(cg, t->dims[dd].size);
            }
        }
        LLVMValueRef s = ci64(cg, 1);
        for (int dd = t->rank - 1; dd >= 0; dd--) {
            m->strides[dd] = s;
            s = mul(cg, s, m->dims[dd]);
        }
        Cv *c = NEW(a, Cv);
        c->kind = CV_MEM;
        c->mem = m;
        cv_put(cg, arg, c);
    }
    cg->top = body;
    map_init(&cg->last_use, false);
    int index = 0;
    for (const Op *o = body->first; o; o = o->next)
        note_uses(cg, o, index++);
    emit_block(cg, body, NULL, NULL);
    if (!cg->failed)
        LLVMBuildRetVoid(cg->b);
    LLVMDisposeBuilder(cg->b);
    if (cg->failed)
        return false;

    /* launch bounds: exactly `threads` per block */
    LLVMMetadataRef ann[3] = {
        LLVMValueAsMetadata(cg->fn),
        LLVMMDStringInContext2(ctx, "maxntidx", 8),
        LLVMValueAsMetadata(ci32(cg, cg->threads)),
    };
    LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                                LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, ann, 3)));
    if (cg->smem_bytes > 96 * 1024)   /* the most a V100 block can opt in to */
        return err(cg, launch, "%s",
                   arena_printf(a, "the kernel needs %lld bytes of shared memory; sm_70 has 98304",
                                (long long)cg->smem_bytes));
    info->threads = cg->threads;
    info->smem_bytes = (cg->smem_bytes + 15) & ~(int64_t)15;
    return true;
}
