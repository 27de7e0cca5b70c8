/* ptx.c — LLVM's NVPTX backend: verify, O3, print PTX. */
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen/cg.h"
#include "target/target.h"

/* Instructions of a basic block past which LLVM's SLP vectorizer is not
 * run on its function. The code generator unrolls tiles, so a long
 * epilogue or map chain is one basic block of its ops times a thread's
 * elements, and the vectorizer's scheduling of a block grows faster than
 * its length (an epilogue of 1,000 terms: 42 s, 26–38 % of it in
 * BoUpSLP::BlockScheduling; doc/codegen.md "Compile time"). Below the
 * bound, every example's kernels: their f16 pair arithmetic comes from it. */
enum { SLP_BLOCK_LIMIT = 40000 };

/* noimplicitfloat, which the SLP and loop vectorizers respect and NVPTX
 * does not otherwise use, on each function with a block past the limit. */
static void bound_slp(LLVMModuleRef mod) {
    LLVMContextRef ctx = LLVMGetModuleContext(mod);
    unsigned kind = LLVMGetEnumAttributeKindForName("noimplicitfloat", 15);
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
        unsigned biggest = 0;
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb)) {
            unsigned n = 0;
            for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i))
                n++;
            biggest = n > biggest ? n : biggest;
        }
        if (biggest > SLP_BLOCK_LIMIT)
            LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, kind, 0));
    }
}

bool ptx_emit(Arena *a, Diag *d, LLVMModuleRef mod, const char *arch, bool llvm_ir, char **text, size_t *len) {
    const Target *t = target_lookup(arch);
    const char *features = t->ptx_features;   /* the PTX ISA version: the oldest with what we emit */
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    /* LLVM's options are process-wide and parsed once: a process compiles
     * for one target (the tools and the Python binding run one per -arch) */
    static bool options_set;
    if (!options_set && t->short_shared) {
        const char *argv[] = {"attnc", "-nvptx-short-ptr"};
        LLVMParseCommandLineOptions(2, argv, NULL);
        options_set = true;
    }
    const char *triple = "nvptx64-nvidia-cuda";
    char *msg = NULL;
    LLVMTargetRef target;
    if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
        diag_plain(d, "LLVM has no NVPTX target: %s", msg);
        LLVMDisposeMessage(msg);
        return false;
    }
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, arch, features, LLVMCodeGenLevelAggressive,
                                                      LLVMRelocDefault, LLVMCodeModelDefault);
    LLVMSetTarget(mod, triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(mod, dl);
    LLVMDisposeTargetData(dl);
    bool ok = false;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        diag_plain(d, "internal error: codegen made invalid LLVM IR:\n%s", msg);
        goto done;
    }
    LLVMDisposeMessage(msg);
    msg = NULL;
    bound_slp(mod);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(mod, "default<O3>", tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (e) {
        char *m = LLVMGetErrorMessage(e);
        diag_plain(d, "internal error: LLVM's O3 pipeline failed: %s", m);
        LLVMDisposeErrorMessage(m);
        goto done;
    }
    if (llvm_ir) {
        char *ir = LLVMPrintModuleToString(mod);
        *len = strlen(ir);
        *text = arena_strndup(a, ir, *len);
        LLVMDisposeMessage(ir);
        ok = true;
        goto done;
    }
    LLVMMemoryBufferRef buf;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &buf)) {
        diag_plain(d, "internal error: PTX emission failed: %s", msg);
        goto done;
    }
    *len = LLVMGetBufferSize(buf);
    *text = arena_strndup(a, LLVMGetBufferStart(buf), *len);
    LLVMDisposeMemoryBuffer(buf);
    ok = true;
done:
    if (msg)
        LLVMDisposeMessage(msg);
    LLVMDisposeTargetMachine(tm);
    return ok;
}
