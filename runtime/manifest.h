/* manifest.h — what the code generator (codegen/codegen.c, which writes the
 * manifest beside the PTX) and libattnrt (runtime/manifest.c, which reads it)
 * must agree on: the manifest's version and the limits the runtime holds
 * (doc/runtime.md describes the format). */
#ifndef ATTNC_MANIFEST_H
#define ATTNC_MANIFEST_H

/* The manifest format written; libattnrt refuses others. */
#define ATTNC_MANIFEST_VERSION 5   /* 3: kernels take each tensor's strides (stride_units=); 4: let lines,
                                      dims the runtime computes at each run ($sms, the device's SMs);
                                      5: tmap swizzle=none (the backward's f32 rows), 12 maps a kernel */

enum {
    MANIFEST_MAX_NAME = 64,      /* bytes of a block, kernel or tensor name */
    MANIFEST_MAX_DIMS = 16,      /* symbolic dimensions of a block */
    MANIFEST_MAX_TENSORS = 32,   /* tensors of a block */
    MANIFEST_MAX_KERNELS = 32,   /* kernels of a block */
    MANIFEST_MAX_ARGS = 32,      /* tensor arguments of a kernel */
    MANIFEST_MAX_TMAPS = 12,     /* TMA tensor maps of a kernel */
    MANIFEST_MAX_RANK = 8,       /* dimensions of a tensor (attnrt.h's ATTNRT_MAX_RANK) */
};

#endif
