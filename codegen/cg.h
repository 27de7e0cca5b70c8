/* cg.h — what the pieces of codegen/ share (internal). */
#ifndef ATTNC_CG_H
#define ATTNC_CG_H

#include <llvm-c/Core.h>

#include "codegen/codegen.h"

/* One kernel to emit: a tile.launch, the name it gets, and its parameters:
 * the launch's memrefs (as pointers), then every symbolic dim of the block
 * (as i64), in the order `dims` lists them. */
typedef struct KernelSpec {
    const Op *launch;
    const char *name;
    int ndims;
    const char **dims;
} KernelSpec;

/* A tensor map a kernel takes by value (sm_90a TMA): over memref parameter
 * `arg` (its index among the launch's memrefs), boxes of box[] elements
 * (outermost dim first), 128-byte swizzled. */
typedef struct KernelTmap {
    int arg, rank;
    int64_t box[8];
    int64_t swizzle;   /* 128 (SWIZZLE_128B: 16-bit panels, f32 slabs) or 0 (none: f32 rows); (no padding: compared by memcmp) */
} KernelTmap;

/* What the emitter found out, for the manifest. */
typedef struct KernelInfo {
    int threads;         /* per block */
    int64_t smem_bytes;  /* dynamic shared memory */
    bool persistent;     /* loops over the grid's tiles (grid x and y: i64 parameters after y_offset) */
    int ntmaps;          /* tensor maps, the last parameters, in this order */
    KernelTmap tmaps[MANIFEST_MAX_TMAPS];
} KernelInfo;

/* Runs O3 on mod and prints it as PTX for arch (or, llvm_ir, as LLVM IR). */
bool ptx_emit(Arena *a, Diag *d, LLVMModuleRef mod, const char *arch, bool llvm_ir, char **text, size_t *len);

#endif
