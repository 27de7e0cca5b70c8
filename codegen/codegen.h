/* codegen.h — tile IR → LLVM IR → PTX, plus the manifest the runtime reads.
 *
 *   codegen.c   the driver: one LLVM module per .attn file, a kernel per
 *               tile.launch, the host side (grid rules, temporaries, dims)
 *               written as the manifest
 *   lower.h     the shared lowering of a kernel (llvm.c, scalar.c, layout.c,
 *               smem.c, elementwise.c, memory.c, reduce.c, lower.c,
 *               warp_specialise.c) and the interface of a target (CgTarget)
 *   sm70.c      Volta: mma.m8n8k4, register prefetch, P by shuffles
 *   sm80.c      Ampere: mma.m16n8k16, ldmatrix
 *   sm90a.c     Hopper: wgmma from 128-byte swizzled shared memory
 *   cp_async.c  cp.async copies and waits (sm_80, sm_90a)
 *   tma.c       TMA copies, stores, tensor maps and mbarriers (sm_90a)
 *   ptx.c       LLVM's NVPTX target: O3, then PTX text
 *
 * See doc/codegen.md for the layouts and the manifest format.
 */
#ifndef ATTNC_CODEGEN_H
#define ATTNC_CODEGEN_H

#include "ir/ir.h"
#include "runtime/manifest.h"   /* the manifest's version and limits, shared with libattnrt */

typedef enum CodegenEmit { CG_EMIT_PTX, CG_EMIT_LLVM } CodegenEmit;


/* True for the targets codegen can emit (target/target.c: sm_70, sm_80 and sm_90a). */
bool codegen_supports(const char *arch);

/* Lowers a module already through the target's pipeline (nv IR) to PTX
 * with its manifest, or to LLVM IR text. Diagnostics go to d; false on
 * errors. The text is allocated in a. */
bool codegen_module(Arena *a, Diag *d, Op *module, const char *arch, CodegenEmit emit, char **text,
                    size_t *len);

#endif
