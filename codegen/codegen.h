/* codegen.h — tile IR → LLVM IR → PTX, plus the manifest the runtime reads.
 *
 *   codegen.c   the driver: one LLVM module per .attn file, a kernel per
 *               tile.launch, the host side (grid rules, temporaries, dims)
 *               written as the manifest
 *   sm70.c      the sm_70 kernel emitter: register layouts, mma.m8n8k4,
 *               register prefetch, the P layout change by shuffles
 *   ptx.c       LLVM's NVPTX target: O3, then PTX text
 *
 * See doc/codegen.md for the layouts and the manifest format.
 */
#ifndef ATTNC_CODEGEN_H
#define ATTNC_CODEGEN_H

#include "ir/ir.h"

typedef enum CodegenEmit { CG_EMIT_PTX, CG_EMIT_LLVM } CodegenEmit;

/* True for the targets codegen can emit (today: sm_70). */
bool codegen_supports(const char *arch);

/* Lowers a module already through the target's pipeline (tile IR) to PTX
 * with its manifest, or to LLVM IR text. Diagnostics go to d; false on
 * errors. The text is allocated in a. */
bool codegen_module(Arena *a, Diag *d, Op *module, const char *arch, CodegenEmit emit, char **text,
                    size_t *len);

#endif
