/* target.c — the target table (target.h). Read top to bottom to see what
 * differs between targets; the pipelines are Triton's make_ttir/make_ttgir
 * style: a list of pass names, target-independent passes first, then the
 * target's own lowering to nv IR. */
#include "target/target.h"

#include <stdio.h>
#include <string.h>

/* sm_70 (V100): 64x64 attention tiles, register prefetch of K/V */
static const char *const sm70_pipeline[] = {
    "dce",            /* what the frontend left unused */
    "fusion",         /* attention -> attn.attention; GEMM + epilogue -> attn.fused_gemm */
    "mask-analysis",  /* affine key bands of masks */
    "tiling",         /* fused ops -> tile.launch kernels; fully masked key tiles skipped */
    "online-softmax", /* one key loop: running max, sum, rescale */
    "double-buffer",  /* loads of the next iteration in flight */
    "cse",            /* the constants and index arithmetic made more than once */
    "dce",
    "sm70-layout",    /* tile IR -> sm_70 target IR (nv.* layouts, mma.m8n8k4) */
    NULL,
};

/* sm_80 (A100; full speed on H100/H200): 128x64 tiles, cp.async stages */
static const char *const sm80_pipeline[] = {
    "dce", "fusion", "mask-analysis", "tiling", "online-softmax", "double-buffer", "cse", "dce",
    "sm80-layout",    /* tile IR -> sm_80 target IR (mma.m16n8k16, ldmatrix, cp.async) */
    NULL,
};

/* sm_90a (H100/H200): 128x128 tiles, wgmma from swizzled shared memory,
 * TMA stages, warp specialisation */
static const char *const sm90a_pipeline[] = {
    "dce", "fusion", "mask-analysis", "tiling", "online-softmax", "double-buffer", "cse", "dce",
    "sm90a-layout",     /* tile IR -> sm_90a target IR (wgmma, 128-byte swizzled operands, TMA or cp.async) */
    "softmax-overlap",  /* P·V of the last key tile runs during this tile's softmax (FlashAttention-3) */
    "dot-hoist",        /* overlap(1): the backward's dPᵀ = V·dOᵀ runs during the softmax of Sᵀ = K·Qᵀ */
    "warp-roles",       /* warp-specialised launches: the producer's ops, where each stage is released */
    NULL,
};

const Target target_sm70 = {
    .name = "sm_70", .family = "Volta", .summary = "Volta: mma.sync.m8n8k4, register prefetch",
    .ptx_features = "+ptx64", .codegen = true, .bf16 = false,
    .smem_limit = 96 * 1024,
    /* GEMM programs row tile by row tile (gemm_group 0): the grouped
     * order was measured on the H200 only, and a V100's L2 is 6 MB */
    .attn_tile = {64, 64}, .gemm_tile = {64, 64, 32}, .stages = 2, .bwd_tile = {64, 64},
    .attn_split_tile = {64, 64},
    /* tiles live in registers: 2 rows of 4096 are 64 values per thread */
    .row_block = 2,
    .pipeline = sm70_pipeline, .lowering = "sm70-layout",
};

const Target target_sm80 = {
    .name = "sm_80", .family = "Ampere", .summary = "Ampere: mma.sync.m16n8k16, ldmatrix, cp.async",
    .ptx_features = "+ptx70", .codegen = true, .bf16 = true,
    /* a fragment or stage address in one register, not two (nvcc's
     * choice too); on sm_70 it measured more registers (ptxas), so not */
    .short_shared = true, .async_copies = true, .gemm_waits_together = true,
    .smem_limit = 163 * 1024,
    .attn_tile = {128, 64}, .gemm_tile = {128, 128, 64}, .stages = 2, .bwd_tile = {64, 64},
    .attn_split_tile = {64, 64}, .attn_pack_rows = true,
    /* GEMM programs in groups of 8 row tiles (Triton's GROUP_M): the
     * weights are read from DRAM once a group, not once a row tile
     * (bench/results/2026-12-03-h200/NOTES.md) */
    .gemm_group = 8,
    /* head dim 128: 32 key rows, so that 4 warps of 32 rows
     * (FlashAttention-2's) hold O and the scores without spilling in
     * the key loop (sm80-layout); at head dim 128 0.85 -> 0.92x
     * FlashAttention-2 on the H200 against 128 x 64 with 8 warps
     * (bench/results/2026-12-02-h200/NOTES.md) */
    .attn_tile_d128 = {128, 32},
    /* under a causal or window band 64 keys, 4 warps still: sm80.c's
     * orderings for P·V keep it from spilling there, and it ran 2-7 %
     * faster (2026-12-03); without the band's masks ptxas reloads three
     * loop-invariant values from local memory per key tile, so plain
     * attention keeps 32 keys (though 4-7 % faster so, 2026-12-03) */
    .attn_tile_d128_band = {128, 64},
    .row_block = 2,
    .pipeline = sm80_pipeline, .lowering = "sm80-layout",
};

const Target target_sm90a = {
    .name = "sm_90a", .family = "Hopper", .summary = "Hopper: TMA, mbarriers, warp specialisation, wgmma",
    .ptx_features = "+ptx80", .codegen = true, .bf16 = true, .async_copies = true, .short_shared = true,
    .copies_f32_rows = true,
    .smem_limit = 227 * 1024,
    /* measured on the H200 (bench/results/): 128 x 128 at head dim
     * 128 (2026-12-01) and at head dim 64 under a causal band (
     * 2026-12-01, +3 to 8 %); at head dim 64 otherwise 192 x 128, three consumer
     * warpgroups (2026-12-02: +11 to 21 % from N 2k on against
     * 128 x 64; FlashAttention-3's choice too; causal lost up to 20 %
     * at N <= 1k), but 128 x 64 where the hooks read tensors per key
     * (a document mask spilled at 128 key rows) */
    .attn_tile = {128, 128}, .attn_tile_d64 = {192, 128}, .attn_tile_d64_gathers = {128, 64},
    /* short rows in 64 x 64 tiles, two blocks an SM (2026-12-02, f16:
     * head dim 64 causal N 512 / 1k 201 / 281 -> 235 / 293 TFLOP/s;
     * head dim 128 causal N 512 296 -> 315, but 1k 408 -> 378). Over
     * every key head dim 64 ran faster in 192 x 128 with ping-pong
     * (2026-12-02: N 1k 389 in 64 x 64, 415 so). Since the persistent
     * consumers no longer wait for each other between tiles, 128 x 128
     * is ahead at head dim 64 causal N 1k too (2026-12-02, two calls:
     * +0.3 to +4.8 %, f16 and bf16) and 64 x 64 only at N 512 (+9 %) */
    .attn_split_tile = {64, 64}, .attn_pack_rows = true,
    .attn_short = {{.max_d = 64, .rows = 64, .keys = 64, .max_n = 512, .band_only = true},
                   {.max_d = 128, .rows = 64, .keys = 64, .max_n = 512, .band_only = true}},
    .gemm_tile = {128, 128, 64}, .gemm_group = 8, .stages = 2,
    .bwd_tile = {64, 64},
    /* two warpgroups of 64 keys each over 64-query steps (FlashAttention-
     * 3's head dim 128 causal tile), dQᵀ = Kᵀ·dSᵀ: 0.678× cuDNN over the
     * quick protocol's head dim 128 rows on the H100 against 0.480 at
     * 64 × 64 (bench/results/2026-12-06-h100-bwd-d128/) */
    .bwd_tile_d128 = {64, 128},
    /* over every key at head dim 64, two warpgroups of 64 keys over
     * 128-query steps: 0.86–0.92× cuDNN against 0.83 at 64 × 64 (H100,
     * bench/results/2026-12-07-h100-producer/); under a causal band it
     * ran slower (0.68–0.82 against 0.87–0.98), so there 64 × 64 stays */
    .bwd_tile_d64_full = {128, 128},
    /* dPᵀ during the exponentials of Pᵀ: 3 % faster over the quick
     * protocol on the H100, no row slower (bench/results/2026-12-06-h100/
     * NOTES.md, item 3); numerics: bench/results/2026-12-06-h100-overlap/ */
    .bwd_overlap = true, .bwd_dq_first = true,
    .row_block = 2,
    .pipeline = sm90a_pipeline, .lowering = "sm90a-layout",
};

const Target *const targets[] = {&target_sm70, &target_sm80, &target_sm90a};
const int ntargets = sizeof targets / sizeof targets[0];

const Target *target_lookup(const char *name) {
    for (int i = 0; name && i < ntargets; i++)
        if (strcmp(targets[i]->name, name) == 0)
            return targets[i];
    return NULL;
}

const Target *target_default(void) { return target_lookup("sm_80"); }

/* "a, b and c" of the targets that pass the filter. */
static const char *join(char *buf, size_t cap, bool codegen_only) {
    const Target *pick[8];
    int n = 0;
    for (int i = 0; i < ntargets && n < 8; i++)
        if (!codegen_only || targets[i]->codegen)
            pick[n++] = targets[i];
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ",
                                pick[i]->name);
    return buf;
}

const char *target_names(void) {
    static char buf[128];
    return join(buf, sizeof buf, false);
}

const char *target_codegen_names(void) {
    static char buf[128];
    return join(buf, sizeof buf, true);
}
