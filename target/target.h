/* target.h — one table of what attnc knows about each GPU target (QBE's
 * Target struct is the model). Every place that used to compare target
 * names reads a field here instead: the pass pipelines, tile sizes, stage
 * counts, row blocks, shared-memory limits, PTX features, and whether a code
 * generator exists. The code generator's hooks for a target live in
 * codegen/ (codegen/lower.h's CgTarget), each pointing at its Target; this
 * table is in the core library so that attnc-opt, which has no LLVM, reads
 * the same facts.
 */
#ifndef ATTNC_TARGET_H
#define ATTNC_TARGET_H

#include <stdbool.h>
#include <stdint.h>

/* A second attention tile for short rows, chosen at run time where the
 * query length is at most max_n (tiling makes both launches and a
 * tile.choose of their results): at head dims up to max_d, for keys that
 * follow the row (causal, windows) only with band_only, else also over every
 * key; never where a hook reads tensors per key. max_n 0: none. */
typedef struct AttnShortTile {
    int64_t max_d, rows, keys, max_n;
    bool band_only;
} AttnShortTile;

typedef struct Target {
    const char *name;              /* "sm_70": -arch and schedule blocks */
    const char *family;            /* "Volta": for messages */
    const char *summary;
    const char *ptx_features;      /* LLVM NVPTX features (PTX ISA version) */
    bool codegen;                  /* has a code generator (PTX) */
    bool bf16;                     /* has bf16 MMA and arithmetic */
    bool short_shared;             /* 32-bit shared-memory addresses (LLVM's -nvptx-short-ptr) */
    bool async_copies;             /* copies in flight hold no registers (cp.async, TMA): the
                                      double-buffer pass runs them on across loop segments */
    /* the double-buffer pass also pipelines f32 loads of whole rows of a
     * static length (the backward's lse and D, a row per query tile), which
     * TMA copies; the other targets' copiers move 16-bit boxes */
    bool copies_f32_rows;
    /* a GEMM K loop's waits all go to its top (double-buffer): where each
     * wait ends in a block barrier (cp.async), one barrier a K step instead
     * of one per product; not under mbarrier waits (sm_90a's TMA), where
     * the first product may start before the second's tile lands */
    bool gemm_waits_together;
    int64_t smem_limit;            /* bytes of shared memory a block may opt in to */
    int64_t attn_tile[2];          /* query rows x key rows */
    /* attention tiles at head dims up to 64 ({0, 0}: attn_tile), where the
     * keys a row sees do not follow the row (as causal's and windows' do):
     * without hooks that read a tensor per key, and with them (a document
     * mask's doc[b, j], a bias[h, i, j]: more registers per score) */
    int64_t attn_tile_d64[2], attn_tile_d64_gathers[2];
    /* attention tiles at head dims over 64 up to 128 ({0, 0}: attn_tile),
     * where no hook reads a tensor per key */
    int64_t attn_tile_d128[2];
    /* the same under a band that follows the row (causal, windows), for
     * f32 accumulation without a score hook */
    int64_t attn_tile_d128_band[2];
    AttnShortTile attn_short[2];
    /* decode's split over keys (tiling_attention.c): the tile of the split
     * kernel, the fewest query rows a program of the target takes ({0, 0}:
     * no split variant) */
    int64_t attn_split_tile[2];
    /* the split also packs a GQA group's few query rows a head into its
     * tile (Nq >= 2; tiling_attention.c): not on sm_70, where the packed
     * Q's selects spill (ptxas: 672 bytes at head dim 128) */
    bool attn_pack_rows;
    /* the backward's key-tile kernel: query rows x key rows, at head dims
     * up to 64 ({0, 0}: bwd_tile) and over (the two equal, or the keys the
     * head dim: the kernel keeps every tile in one row layout,
     * schedule.def's SD_ROW_TILES) */
    int64_t bwd_tile[2], bwd_tile_d64[2];   /* the first whose max_d the head dim does not pass */
    /* at head dims up to 64 over every key (no band from mask-analysis)
     * and not over packed sequences ({0, 0}: bwd_tile_d64); the kernel
     * then issues no dPᵀ during the exponentials (bwd_overlap), with
     * which it spills */
    int64_t bwd_tile_d64_full[2];
    /* at head dim 128 ({0, 0}: bwd_tile): 128 keys, the head dim, so that
     * dQ is computed transposed and every tile keeps 128 rows */
    int64_t bwd_tile_d128[2];
    /* the backward's key-tile kernel issues dPᵀ = V·dOᵀ right after
     * Sᵀ = K·Qᵀ (dot-hoist) unless the schedule says overlap(0) */
    bool bwd_overlap;
    /* the key-tile kernel issues dQ's product before dK's (FlashAttention-
     * 3's order): dQ's result goes to shared memory for its reduce-add
     * while dK's product runs, rather than after both; where dots hold
     * their results in registers until used (sm_80, sm_70) dQ's tile would
     * stay live across dK's product */
    bool bwd_dq_first;
    int64_t gemm_tile[3];          /* M x N x K */
    int64_t gemm_group;            /* GEMM programs start in groups of this many row tiles (tiling.c
                                      gemm_tile_of; 0 or 1: row tile by row tile) */
    int64_t stages;                /* K/V (or A/B) stages of the double-buffering pass */
    int64_t row_block;             /* rows per program of a row kernel */
    const char *const *pipeline;   /* pass names, target lowering last */
    const char *lowering;          /* the pass that makes the target IR; NULL: none yet */
} Target;

extern const Target target_sm70, target_sm80, target_sm90a;
extern const Target *const targets[];   /* each of them, in -arch order */
extern const int ntargets;

/* The target of that name, or NULL. */
const Target *target_lookup(const char *name);
/* The default -arch: a target with a code generator (sm_80). */
const Target *target_default(void);
/* "sm_70, sm_80 and sm_90a", for messages. */
const char *target_names(void);
/* "sm_70 and sm_80": the targets with a code generator, for messages. */
const char *target_codegen_names(void);

#endif
