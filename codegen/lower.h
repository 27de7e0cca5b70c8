/* lower.h — the shared lowering of tile IR to LLVM IR (internal to codegen/),
 * and the interface a target's code generator fills in (CgTarget).
 *
 * Every tile value lives in registers, spread over the block's threads by
 * the kernel's layout (the launch's nv.layout, chosen by the target's
 * lowering pass):
 *
 *   ACC      kernels with a tile.dot: the layout of the target's MMA
 *            accumulator. Warp w owns rows [16·w·mrep, 16·(w+1)·mrep); each
 *            thread holds 8 elements of every 16×16 block of its rows; where
 *            element i of a block lies is the target's AccLayout. With
 *            wcols > 1 (sm_80 GEMMs, nv.warp_cols) the warps form a grid:
 *            warp w is row w / wcols and column w % wcols of it, and owns
 *            the rows of warp row w / wcols and a 1/wcols share of the
 *            columns; a row then spans warps, so nothing reduces along it.
 *   BLOCKED  the others (row kernels): thread t holds columns t, t+T, ... of
 *            every row, so a row's reduction is per thread, then per warp
 *            (shuffles), then across warps (shared memory).
 *
 * A value of shape [R, 1] or [1, C] stores only what differs along its
 * non-unit axis ("per row" / "per column"); reading it at a position of a
 * full tile is the broadcast. Positions are (a, b, i): ACC (row block,
 * column block, accumulator element), BLOCKED (row, column slot, 0).
 *
 *   llvm.c     LLVM plumbing: types, constants, intrinsics, shuffles, branches
 *   scalar.c   one element of arith/math ops, as the interpreter rounds it
 *   layout.c   layouts: positions, coordinates, broadcast owners; values
 *   smem.c     dynamic shared memory (live ranges), box copies through registers
 *   elementwise.c  elementwise ops; splats and iotas, index tiles kept
 *              32-bit for masks' compares
 *   memory.c   loads, stores, atomic adds and gathers on memrefs
 *   reduce.c   row reductions across lanes and warps; nv.lane_sum
 *   lower.c    the op dispatch, transposes, loops, blocks (once per warp
 *              role under warp specialisation, sm_90a) and the kernel
 *   warp_specialise.c  sm_90a's producer and consumer warpgroups, ping-pong
 *              turns, the persistent tile scheduler
 *   cp_async.c cp.async box copies into shared stages, and their waits
 *   tma.c      TMA copies and stores with tensor maps and mbarriers (sm_90a)
 *   sm70.c, sm80.c, sm90a.c   the targets: MMA fragments and operands
 */
#ifndef ATTNC_LOWER_H
#define ATTNC_LOWER_H

#include "codegen/cg.h"
#include "target/target.h"

/* C11 has no PI & co. */
#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453
#define SQRT1_2 0.7071067811865476
#define PI 3.141592653589793

typedef enum { LAY_ACC, LAY_BLOCKED } LayKind;

typedef struct Pos {
    int a, b, i;
} Pos;

/* Whether positions k and k + 1 of a thread are elements i, i + 1 (i even)
 * of one register group: in the accumulator layouts, columns 2t and 2t + 1
 * of a row, which a 16-bit tile stores with one 4-byte store. */
static inline bool pos_pair(const Pos *ps, int k, int n) {
    return k + 1 < n && ps[k].i % 2 == 0 && ps[k + 1].i == ps[k].i + 1 && ps[k + 1].a == ps[k].a &&
           ps[k + 1].b == ps[k].b;
}

/* A tile in registers. */
typedef struct Dist {
    ScalarKind elem;
    int64_t rows, cols;   /* the tile's shape; 1 means broadcast along that axis */
    int n;                /* storage slots */
    LLVMValueRef *v;
    /* An index tile made of iotas and uniform scalars (a mask's positions,
     * i + r, j + c): each element is also base + var + k, base one i64 for
     * the whole tile, var an i32 (NULL: 0) and k an i32 constant per element
     * (var/k NULL: all 0), |var + k| <= bound; comparing two such tiles is
     * one 32-bit compare with an immediate an element (elementwise.c, index_cmp) */
    bool affine;
    struct Dist *var, *k;
    LLVMValueRef base;
    int64_t bound;
} Dist;

/* A 2-D window of shared memory holding a tile (row-major, `stride` elements
 * between rows; or swizzled, smem_offset); trans: the tile is the window's
 * transpose. */
typedef struct View {
    LLVMValueRef base;    /* ptr addrspace(3) to element [0, 0] */
    int64_t stride, rows, cols;
    int swizzle;          /* 0, or 128: panels of 64 columns, panel_rows × 128 bytes each */
    int64_t panel_rows;
    bool trans;
    LLVMValueRef *frags;  /* the A fragments, when the target preloaded them */
} View;

/* A memref: global (a kernel parameter) or shared (a tile.alloc). */
typedef struct Mem {
    ScalarKind elem;
    bool shared;
    int rank;
    LLVMValueRef ptr;
    LLVMValueRef dims[8], strides[8];   /* i64, in elements */
    int64_t cdims[8], cstrides[8];      /* shared: the same as numbers */
    LLVMValueRef stride_param[8];       /* global: the parameter, stride / stride_unit (NULL: innermost) */
    int64_t stride_unit[8];             /* global: the unit (1: innermost) */
    int swizzle;                        /* shared: 0, or 128 (the last two dims as smem_offset lays them out) */
} Mem;

/* A shared buffer that TMA fills (sm_90a): an mbarrier per stage, and, in
 * an i32 alloca that mem2reg turns into one register, a bit per stage for
 * the parity of the phase its next fill completes (bits 0-15) and one for
 * a fill in flight (issued, not waited: bits 16-31). */
typedef struct Ring {
    const Mem *buf;
    int stages;
    LLVMValueRef bars;             /* ptr addrspace(3): stages × 8 bytes */
    LLVMValueRef state;            /* i32 alloca */
    /* warp specialisation: a stage's "empty" mbarrier, which each consumer
     * warp arrives on when done reading it, and the producer's parities */
    LLVMValueRef empty, empty_phase;
} Ring;

/* Which threads the code being emitted runs on (warp specialisation). */
typedef enum Role {
    ROLE_ALL,        /* every warp copies and computes */
    ROLE_CONSUMER,   /* the consumer warps: compute, wait for stages, release them */
    ROLE_PRODUCER,   /* the producer warpgroup: the copies and the index arithmetic they need */
} Role;

/* An in-flight copy (tile.copy_async): register prefetch holds the loaded
 * registers; an asynchronous copy holds none (TMA: its ring). */
typedef struct Token {
    const Mem *dst;
    Ring *ring;
    LLVMValueRef stage;
    int nregs;
    LLVMValueRef *regs;
    int64_t rows, cols;
    int vec;
    ScalarKind elem;
    /* TMA, consumer: whether the fill this token's wait waited for was
     * issued (i1; NULL: it was); only an issued fill's stage is released */
    LLVMValueRef issued;
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

typedef struct Cg Cg;

/* Where element i (0..7) of a warp's 16×16 accumulator block lies. */
typedef struct AccLayout {
    int row_bits, col_bits;   /* the bits of i that move the row / the column */
    int row_lanes;            /* lane bits that move along a row: the xor partners of a row reduction */
    int col_lanes;            /* lane bits that move along a column */
} AccLayout;

/* What a target's code generator provides (Triton's per-generation MMA
 * lowering: MMAv1 = sm70.c, MMAv2 = sm80.c). */
typedef struct CgTarget {
    const Target *target;   /* the target table's entry this generates for */
    /* the accumulator layout of the kernel's MMA (acc16: f16 accumulator) */
    AccLayout (*acc_layout)(bool acc16);
    /* (row, col), as i64 within a rows×cols tile, of ACC position p (0 along
     * a unit axis) */
    void (*acc_coords)(Cg *cg, Pos p, int64_t rows, int64_t cols, LLVMValueRef *row, LLVMValueRef *col);
    void (*dot)(Cg *cg, const Op *op);          /* tile.dot */
    /* two tile.dots with one A operand from shared memory, emitted together
     * at the second (the layout pass's nv.pair; lower.c, paired_dot); NULL:
     * each on its own */
    void (*dot_pair)(Cg *cg, const Op *first, const Op *second);
    /* loads a view's A fragments into registers (nv.operand "fragments") */
    void (*preload_a)(Cg *cg, View *w, ScalarKind k);
    void (*copy_async)(Cg *cg, const Op *op);   /* tile.copy_async */
    void (*wait)(Cg *cg, const Op *op);         /* tile.wait */
    /* completes every async copy in flight: before shared memory is reused
     * and before the kernel returns (NULL: copies are synchronous) */
    void (*drain)(Cg *cg);
    /* wgmma reads shared memory through the async proxy: what threads
     * store or cp.async copies there needs fence.proxy.async before it */
    bool async_proxy;
    int smem_align;   /* of the dynamic shared memory (swizzled tiles: 1024) */
    /* completes the dots still in flight that op needs (wgmma groups,
     * sm_90a): those whose results it reads, those that read the buffer it
     * copies into, and every one when op is NULL or has regions. NULL: a
     * target whose dots complete when they are emitted. */
    void (*complete)(Cg *cg, const Op *op);
    /* the accumulator's element pairs (i, i + 1) are adjacent columns:
     * 16-bit outputs are stored two at a time (sm_80; on sm_70 the checks
     * cost registers and the pairs are not adjacent) */
    bool pair_stores;
    /* stmatrix stores 16-bit accumulator tiles into shared memory (sm_90) */
    bool stmatrix;
    /* a GEMM's warps may form a grid over rows and columns (nv.warp_cols) */
    bool warp_grid;
    /* whether the online softmax's rescale mul (O·α: an f32 tile by a row
     * vector, in a key loop) may go behind a warp vote that skips it when
     * every α is 1 (elementwise.c, skips_unit_scale); NULL: never */
    bool (*may_skip_unit_scale)(const Cg *cg, const Op *mul);
} CgTarget;

extern const CgTarget sm70_target, sm80_target, sm90a_target;
/* m16n8k16's accumulator layout, which wgmma's is per warp (sm80.c) */
AccLayout mma16_acc_layout(bool acc16);
void mma16_acc_coords(Cg *cg, Pos p, int64_t rows, int64_t cols, LLVMValueRef *row, LLVMValueRef *col);
/* accumulator register j of n8 tile n8 of row block a, to and from a tile
 * (f32, or an f16 pair as <2 x half>: acc16) */
LLVMValueRef mma16_acc_get(Cg *cg, const Dist *c, int a, int n8, int j, bool acc16);
void mma16_acc_set(Cg *cg, Dist *r, int a, int n8, int j, bool acc16, LLVMValueRef v);
/* two 16-bit A-operand elements (of P) as one b32 register */
LLVMValueRef mma16_pack_a(Cg *cg, LLVMValueRef lo, LLVMValueRef hi, ScalarKind k);
/* The code generator of a target, or NULL (codegen.c). */
const CgTarget *cg_target(const Target *t);   /* NULL: no code generator */

/* Named barriers of a warp-specialised kernel (16 a block; 0 is the
 * block's bar.sync 0), whose ids warp-roles chose (the launch's
 * nv.barrier.NAME; the first of one per consumer warpgroup where marked w):
 *   consumers      the consumer warps (cg_barrier under warp specialisation)
 *   turn + w       warpgroup w's ping-pong turn (sm90a.c)
 *   sched_empty    the tile scheduler's EMPTY: consumers arrive, the copier syncs
 *   sched_full + w the scheduler's FULL for warpgroup w: the copier arrives, w syncs
 *   warpgroup + w  warpgroup w alone (its slab of a TMA store, tma.c) */
typedef enum { NB_CONSUMERS, NB_TURN, NB_SCHED_EMPTY, NB_SCHED_FULL, NB_WARPGROUP, NB_COUNT } NamedBarrier;

/* What only sm_90a's kernels keep while they are emitted: TMA (tma.c), warp
 * specialisation (warp_specialise.c) and wgmma's asynchronous dots (sm90a.c). */
typedef struct Sm90State {
    /* TMA (sm_90a, tma.c): the tensor maps the kernel takes, the buffers
     * TMA fills (alloc Value* -> 1) and their rings */
    int ntmaps;
    KernelTmap tmaps[MANIFEST_MAX_TMAPS];
    const Value *tmap_src[MANIFEST_MAX_TMAPS];
    LLVMValueRef tmap_param[MANIFEST_MAX_TMAPS];
    Map tma_bufs;
    int nrings;
    Ring rings[8];
    /* warp specialisation (sm_90a, the launch's nv.producer_warps): warps
     * [0, nwarps) compute, a producer warpgroup after them issues the TMA
     * copies; the body is emitted once per role (warp_specialise.c) */
    Role role;
    int producer_warps;
    int producer_regs, consumer_regs;   /* setmaxnreg (nv.producer_regs, nv.consumer_regs) */
    int barrier[NB_COUNT];              /* named barrier ids (nv.barrier.NAME; -1: none) */
    /* persistent (nv.persistent): each block loops over the grid's tiles,
     * tiles_x · tiles_y of them (i64 parameters), so the producer fetches
     * the next tile's K/V while the consumers finish this one */
    bool persistent;
    int blocks_per_sm;   /* nv.blocks_per_sm: blocks an SM holds at once (launch bounds, setmaxnreg) */
    int64_t section_tiles;   /* the tile order's sections (nv.section_tiles) */
    LLVMValueRef tiles_x, tiles_y;
    LLVMValueRef tile_counter;   /* i32 in global memory, zeroed before the launch: tiles taken */
    LLVMValueRef sched;          /* shared: the tile scheduler's slot (warp_specialise.c, emit_tiles) */
    bool tma_stores;             /* a TMA store was issued: drain waits for it (tma.c) */
    bool tile_smem;              /* consumers allocated shared memory in this tile (smem.c): emit_tiles refuses it */
    bool pingpong;  /* consumer warpgroups take turns at the tensor cores (nv.pingpong) */
    Map releases;   /* consumer: Op* -> PtrVec* of the tile.waits whose stage is free after it */
    /* sm_90a: dots issued (committed wgmma groups) and not yet waited for,
     * oldest first; their stages are released when they complete */
    struct InFlight {
        const Op *op;
        bool deferred;         /* the stages it read are released when it completes */
        Dist *r;               /* its result, whose registers the wait redefines */
        LLVMValueRef *acc;     /* the accumulator registers, in wgmma order */
        int nacc, per;
        bool acc16;
    } in_flight[8];
    int nin_flight;
    /* dots complete at the first op that needs them (the launch's
     * nv.overlap, which softmax-overlap sets on the launches it rotated);
     * otherwise each right after it is issued */
    bool lazy_dots;
    Map wait_tok;   /* consumer: tile.wait Op* -> the Token it waited for */
} Sm90State;

struct Cg {
    Arena *a;
    Diag *d;
    bool failed;
    const CgTarget *target;
    const Target *info;
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMValueRef fn, smem;
    LLVMTypeRef i1, i16, i32, i64, f16, bf16, f32, v2f16, p1;
    const KernelSpec *spec;
    Map vals;            /* Value* -> Cv* */
    /* the layout */
    LayKind lay;
    bool acc16;
    AccLayout acc;
    int nwarps, threads, mrep;
    int wcols;           /* warps across the columns (the grid above) */
    /* BLOCKED: a row's threads (consecutive, a power of two: all of them,
     * or a group within a warp) and the adjacent columns each holds a slot
     * (nv.row_threads, nv.row_vector; by default every thread, 1) */
    int row_threads, row_vec;
    int64_t R;
    LLVMValueRef tid, lane, warp;
    LLVMValueRef warp_row, warp_col;   /* warp / wcols, warp % wcols */
    /* nv.rematerialise: addresses and wgmma descriptors formed where they
     * are used (thread_ids_here, sm90a.c's operand), not held across loops */
    bool rematerialise;
    bool async;          /* async copies were issued (drain them) */
    bool short_shared;   /* shared pointers are 32-bit (target.h short_shared) */
    /* dynamic shared memory: live ranges, reused once their owner is dead */
    int64_t smem_bytes;               /* the peak */
    int nlive;
    struct Live { int64_t off, size; const Value *owner; } live[64], dead[64];
    int ndead;                        /* freed buffers (-1: more than dead[] holds) */
    const Value *owner;               /* whose buffer smem_alloc makes now */
    const Block *top;                 /* the launch body */
    Map last_use;                     /* Value* -> index of its last top-level op + 1 */
    Sm90State hopper;   /* sm_90a's TMA, warp specialisation and async dots */
};

/* ---- llvm.c ------------------------------------------------------------------ */

bool cg_err(Cg *cg, const Op *op, const char *fmt, const char *detail);
LLVMTypeRef lty(Cg *cg, ScalarKind k);
int esize(ScalarKind k);
LLVMValueRef cg_call(Cg *cg, const char *name, LLVMTypeRef ret, LLVMValueRef *args, int n);
LLVMValueRef cg_asm(Cg *cg, const char *text, const char *constraints, LLVMTypeRef ret, LLVMValueRef *args, int n);
LLVMValueRef opaque_scaled(Cg *cg, LLVMValueRef param, int64_t k);
LLVMValueRef opaque(Cg *cg, LLVMValueRef v);
LLVMValueRef opaque_ptr(Cg *cg, LLVMValueRef p);
LLVMValueRef sreg(Cg *cg, const char *name);
void cg_barrier(Cg *cg);
/* bar.sync or bar.arrive ("sync", "arrive") on barrier `which` of warpgroup
 * wg (i32; ignored for NB_CONSUMERS and NB_SCHED_EMPTY) among `threads`
 * threads: the id is the launch's nv.barrier.NAME (+ wg) */
void named_barrier(Cg *cg, const char *how, NamedBarrier which, LLVMValueRef wg, int threads);
LLVMValueRef warpgroup_of(Cg *cg);   /* this thread's warpgroup (i32) */
static inline LLVMValueRef ci64(Cg *cg, int64_t v) { return LLVMConstInt(cg->i64, (unsigned long long)v, true); }
static inline LLVMValueRef ci32(Cg *cg, int64_t v) { return LLVMConstInt(cg->i32, (unsigned long long)v, true); }
static inline LLVMValueRef zext64(Cg *cg, LLVMValueRef v) { return LLVMBuildZExt(cg->b, v, cg->i64, ""); }
static inline LLVMValueRef add(Cg *cg, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildAdd(cg->b, x, y, ""); }
static inline LLVMValueRef mul(Cg *cg, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildMul(cg->b, x, y, ""); }
/* The thread's coordinates (lane, warp_row, warp_col), made opaque where
 * an op starts under the launch's nv.rematerialise: the per-element
 * addresses it forms from them are then formed there, a few integer ops
 * each, instead of LLVM holding each across the enclosing loop in a
 * register of its own (which ptxas spills beside large accumulators).
 * thread_ids_restore puts the plain ones back at the op's end. */
typedef struct ThreadIds {
    LLVMValueRef lane, warp_row, warp_col;
} ThreadIds;
ThreadIds thread_ids_here(Cg *cg);
void thread_ids_restore(Cg *cg, ThreadIds saved);

static inline LLVMValueRef lane_bit(Cg *cg, int mask) {   /* lane & mask, as i64 */
    return zext64(cg, LLVMBuildAnd(cg->b, cg->lane, ci32(cg, mask), ""));
}
static inline LLVMValueRef lane_test(Cg *cg, int mask) {  /* (lane & mask) != 0 */
    return LLVMBuildICmp(cg->b, LLVMIntNE, LLVMBuildAnd(cg->b, cg->lane, ci32(cg, mask), ""), ci32(cg, 0), "");
}
LLVMValueRef shfl_xor(Cg *cg, LLVMValueRef v, int mask);
LLVMValueRef gep(Cg *cg, ScalarKind k, LLVMValueRef ptr, LLVMValueRef off);
/* the dot after d1 that shares its A operand, emitted with it (lower.c) */
const Op *paired_dot(const Op *d1);   /* nv.pair's partner, or NULL */
LLVMValueRef load_elem(Cg *cg, ScalarKind k, LLVMValueRef ptr);
void store_elem(Cg *cg, ScalarKind k, LLVMValueRef v, LLVMValueRef ptr);
LLVMBasicBlockRef if_begin(Cg *cg, LLVMValueRef cond);
void if_end(Cg *cg, LLVMBasicBlockRef join);
LLVMValueRef pack2(Cg *cg, LLVMValueRef x, LLVMValueRef y);   /* two 16-bit values as a 2-vector */
LLVMValueRef pack_b32(Cg *cg, LLVMValueRef x, LLVMValueRef y);   /* ... and as one b32 register */

/* ---- scalar.c ------------------------------------------------------------------ */

LLVMValueRef fconst(Cg *cg, ScalarKind k, double v);
LLVMValueRef to_f32(Cg *cg, LLVMValueRef v);   /* 16-bit floats widened */
LLVMValueRef round_f32(Cg *cg, LLVMValueRef r, ScalarKind k);   /* an f32 rounded to a 16-bit k */
LLVMValueRef fmaxmin(Cg *cg, bool max, LLVMValueRef x, LLVMValueRef y);
LLVMValueRef cg_cast(Cg *cg, LLVMValueRef v, ScalarKind from, ScalarKind to);
LLVMValueRef scalar_op(Cg *cg, const Op *op, ScalarKind rk, LLVMValueRef *x, const ScalarKind *ks);
extern const LLVMIntPredicate int_preds[6];
int cmp_pred(const Op *op);

/* ---- layout.c ------------------------------------------------------------------ */

int nrep_of(Cg *cg, int64_t cols);   /* ACC: 16-column blocks a warp owns of a tile this wide */
int64_t cslots(Cg *cg, int64_t cols);
bool shape_ok(Cg *cg, const Op *op, int64_t rows, int64_t cols);
Dist *dist_new(Cg *cg, ScalarKind elem, int64_t rows, int64_t cols);
int positions(Cg *cg, int64_t rows, int64_t cols, Pos **out);
LLVMValueRef dist_get(Cg *cg, const Dist *d, Pos p);
void dist_set(Cg *cg, Dist *d, Pos p, LLVMValueRef v);
void coords(Cg *cg, Pos p, int64_t rows, int64_t cols, LLVMValueRef *row, LLVMValueRef *col);
LLVMValueRef warp_row_base(Cg *cg, int a);   /* i64: the first row of row block a of this warp */
/* i64: the first column this warp owns of a tile `cols` wide (0 unless wcols > 1) */
LLVMValueRef warp_col_base(Cg *cg, int64_t cols);
LLVMValueRef tile_owner(Cg *cg, int64_t rows, int64_t cols);
Cv *cv_get(Cg *cg, const Value *v);
void cv_put(Cg *cg, const Value *v, Cv *c);
Cv *cv_scalar(Cg *cg, LLVMValueRef s);
Cv *cv_dist(Cg *cg, Dist *d);
ScalarKind elem_of(const Value *v);
Dist *as_dist(Cg *cg, const Op *op, const Value *v);
LLVMValueRef as_scalar(Cg *cg, const Op *op, const Value *v);
Mem *as_mem(Cg *cg, const Op *op, const Value *v);

/* ---- smem.c -------------------------------------------------------------------- */

LLVMValueRef smem_alloc(Cg *cg, int64_t bytes);
LLVMValueRef smem_alloc_aligned(Cg *cg, int64_t bytes, int64_t align);
LLVMValueRef smem_alloc_pinned(Cg *cg, int64_t bytes, int64_t align);   /* never reused: mbarriers */
/* i64 element offset of (row, col) in a shared tile: row-major with `stride`,
 * or swizzle 128 (panels of 64 columns, panel_rows rows each) */
LLVMValueRef smem_offset(Cg *cg, LLVMValueRef row, LLVMValueRef col, int64_t stride, int64_t panel_rows, int swizzle);
LLVMValueRef smem_offset_swizzled(Cg *cg, LLVMValueRef row, LLVMValueRef col, int64_t panel_rows, int elem_bytes);
void proxy_fence(Cg *cg);   /* fence.proxy.async, where the target's MMA reads through the async proxy */
void smem_release(Cg *cg, int index);
void note_uses(Cg *cg, const Op *op, int index);
void emit_alloc(Cg *cg, const Op *op);
int64_t inner_size_of(const Value *mem);
int copy_vec(const Mem *m, int64_t cols, int inner_axis_dim, int64_t inner_size);
LLVMValueRef box_vector(Cg *cg, const Token *t, int j, LLVMValueRef *row, LLVMValueRef *col);
/* How many rows apart a thread's vectors of box t are when every thread
 * copies the same number of them, all at one column (their rows then step
 * by it); 0 otherwise. */
int64_t box_rows_apart(const Cg *cg, const Token *t);
Token *prefetch(Cg *cg, const Op *op, const Mem *src, int first_index, int64_t rows, int64_t cols,
                int64_t inner_size);
void land(Cg *cg, const Token *t, LLVMValueRef base, int64_t stride, int64_t panel_rows, int swizzle);
void emit_view_copy(Cg *cg, const Op *op, const Mem *m, View *w);

/* ---- cp_async.c (sm_80, sm_90a) and tma.c (sm_90a) ------------------------------ */

void cp_async_copy(Cg *cg, const Op *op);
void cp_async_wait(Cg *cg, const Op *op);
void cp_async_drain(Cg *cg);
/* TMA (sm_90a): the kernel's tensor maps (before its parameters are made),
 * the mbarriers of a buffer TMA fills (at its tile.alloc), the copies, the
 * waits on their stages' mbarriers, and the drain of fills in flight */
bool tma_collect(Cg *cg, const Block *blk);
void tma_ring_init(Cg *cg, const Op *alloc, const Mem *m, LLVMValueRef bars, bool empty);   /* empty: nv.ring's */
void tma_copy(Cg *cg, const Op *op);
void tma_store(Cg *cg, const Op *op);   /* tile.store {nv.store = "tma"} */
void tma_store_wait(Cg *cg);            /* the TMA stores issued so far have read their buffers */
void tma_wait(Cg *cg, const Op *op);
void tma_drain(Cg *cg);
/* persistent consumers, after each tile: the fills in flight land and their
 * stages are released (the producer fills them again for the next tile) */
void tma_drain_release(Cg *cg);
/* warp specialisation: the stage a tile.wait waited for is free (consumer) */
void tma_release(Cg *cg, const Token *t);
void wait_phase(Cg *cg, LLVMValueRef bar, LLVMValueRef parity);

/* ---- the ops (elementwise.c, memory.c, reduce.c, lower.c) ------------------------ */

/* elementwise.c: the elementwise ops; splats and iotas (index tiles) */
void emit_elementwise(Cg *cg, const Op *op);
void emit_splat_iota(Cg *cg, const Op *op);
/* memory.c: loads, stores (and atomic adds), gathers */
void emit_load(Cg *cg, const Op *op);
void emit_store(Cg *cg, const Op *op);
void emit_gather(Cg *cg, const Op *op);
/* reduce.c: row reductions; nv.lane_sum */
void emit_reduce(Cg *cg, const Op *op);
void emit_lane_sum(Cg *cg, const Op *op);
void mem_coords(Cg *cg, const Op *op, const Mem *m, int first, LLVMValueRef row, LLVMValueRef col,
                LLVMValueRef *co);
LLVMValueRef mem_offset(Cg *cg, const Mem *m, LLVMValueRef *co, LLVMValueRef *inside);
/* What every target's tile.dot checks: one accumulator type per kernel, a
 * shape the warp tiling covers (reported; false otherwise). */
bool dot_fits(Cg *cg, const Op *op);
/* tile.dot's operand A computed in registers (P): a full tile, or NULL (reported). */
Dist *dot_a_in_registers(Cg *cg, const Op *op);
/* tile.copy_async's source and destination, when its nv.copy is `how` (the
 * copy this target makes); false (reported) otherwise. */
bool copy_operands(Cg *cg, const Op *op, const char *how, Mem **src, Mem **dst);
/* Releases the stages whose last reader was op (warp specialisation's
 * consumers): after op, or, for a dot in flight, when it completes. */
void release_stages(Cg *cg, const Op *op);
/* tile.wait's token, or NULL (reported). */
const Token *wait_token(Cg *cg, const Op *op);
/* One kernel for a launch, lowered for the target; see cg.h. */
/* lower.c: the ops of blk, in the role cg->hopper.role (yv, ys: what its
 * tile.yield yields, or NULL) */
void emit_block(Cg *cg, const Block *blk, const Value **yv, Cv **ys);
/* warp_specialise.c: a warp-specialised kernel's body, once per role */
void emit_specialised(Cg *cg, const Block *body);
/* The launch's warp specialisation, as warp-roles wrote it (nv.producer_warps,
 * nv.pingpong, nv.persistent, nv.blocks_per_sm, the roles' registers, the
 * named barriers, the scheduler's sections); false after an error. */
bool read_skeleton(Cg *cg, const Op *launch);

bool emit_kernel(const CgTarget *t, Arena *a, Diag *d, LLVMContextRef ctx, LLVMModuleRef mod, const KernelSpec *k,
                 KernelInfo *info);
/* The unit of a global tensor's stride along dim d (not its innermost, whose
 * stride is 1), in elements: what its contiguous stride, the product of
 * the dims inside d, is always a multiple of — the power of two its
 * numeric dims give, at most 16 bytes. libattnrt refuses a stride that is
 * not a multiple of it and passes stride / unit (the manifest's
 * stride_units), so that the kernel knows the alignment a constant stride
 * showed (16-byte vectors, paired stores). */
int64_t stride_unit(const Type *t, int d);

#endif
