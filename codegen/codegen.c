/* codegen.c — the driver: a kernel per tile.launch, and the manifest.
 *
 * The host side of a block (the ops of its func outside the launches: dims,
 * index arithmetic for the grids) is not compiled; it is written into the
 * manifest, which the runtime reads: which tensors a block takes and gives
 * back, which temporaries it needs, and per kernel its grid as expressions of
 * the dims, threads, shared memory and arguments. The manifest heads the PTX
 * as comment lines, so one file carries both (doc/codegen.md).
 */
#include <string.h>

#include "codegen/lower.h"
#include "passes/passes.h"

static const CgTarget *const generators[] = {&sm70_target, &sm80_target, &sm90a_target};

const CgTarget *cg_target(const Target *t) {
    for (size_t i = 0; t && i < sizeof generators / sizeof *generators; i++)
        if (generators[i]->target == t)
            return generators[i];
    return NULL;
}

bool codegen_supports(const char *arch) { return cg_target(target_lookup(arch)) != NULL; }

/* Buffer names: func args are the inputs, launch results the outputs (when
 * returned) or temporaries. */
typedef struct Names {
    Map of;   /* Value* -> const char* */
    int ntemps;
} Names;

static bool host_expr(Diag *d, StrBuf *sb, const Value *v) {
    const Op *op = v->def;
    if (!op) {
        diag_plain(d, "codegen: a grid size depends on a block argument");
        return false;
    }
    const char *bin = NULL;
    switch (op->kind) {
    case OP_CONSTANT: fprintf(sb->f, "%lld", (long long)op_attr(op, "value")->i); return true;
    case OP_DIM: fprintf(sb->f, "%s", op_attr(op, "name")->s); return true;
    case OP_NUM_SMS: fputs("$sms", sb->f); return true;   /* the runtime's device's */
    case OP_ADD: bin = "+"; break;
    case OP_SUB: bin = "-"; break;
    case OP_MUL: bin = "*"; break;
    case OP_FLOORDIV: bin = "/"; break;
    case OP_REM: bin = "%"; break;
    case OP_AND: bin = "&&"; break;
    case OP_OR: bin = "||"; break;
    case OP_CMP: {
        static const char *preds[][2] = {{"eq", "=="}, {"ne", "!="}, {"lt", "<"}, {"le", "<="}, {"gt", ">"}, {"ge", ">="}};
        for (size_t i = 0; i < sizeof preds / sizeof *preds; i++)
            if (strcmp(op_attr(op, "pred")->s, preds[i][0]) == 0)
                bin = preds[i][1];
        break;
    }
    case OP_MIN: case OP_MAX:
        fprintf(sb->f, "%s(", op->kind == OP_MIN ? "min" : "max");
        if (!host_expr(d, sb, op->operands[0]))
            return false;
        fputc(',', sb->f);
        if (!host_expr(d, sb, op->operands[1]))
            return false;
        fputc(')', sb->f);
        return true;
    default:
        op_diag(d, NULL, op, "codegen: a grid size or a check must be index arithmetic on the dims");
        return false;
    }
    fputc('(', sb->f);
    if (!host_expr(d, sb, op->operands[0]))
        return false;
    fputs(bin, sb->f);
    if (!host_expr(d, sb, op->operands[1]))
        return false;
    fputc(')', sb->f);
    return true;
}

/* host_expr of v as a string (NULL: reported, not host arithmetic). */
static const char *host_text(Arena *a, Diag *d, const Value *v) {
    StrBuf sb;
    strbuf_open(&sb);
    bool ok = host_expr(d, &sb, v);
    char *text = strbuf_finish(&sb, a, NULL);
    return ok ? text : NULL;
}

static void add_dims(Arena *a, const Type *t, PtrVec *dims) {
    for (int i = 0; i < t->rank; i++) {
        if (!t->dims[i].sym)
            continue;
        bool seen = false;
        for (int j = 0; j < dims->len; j++)
            seen |= strcmp(dims->items[j], t->dims[i].sym) == 0;
        if (!seen)
            vec_push(a, dims, (void *)t->dims[i].sym);
    }
}

/* "// tensor role=R name=N dtype=T shape=D0,D1,... [stride_units=U0,U1,...]"
 * ("-" for a scalar; a unit for each dim but the innermost) */
static void print_tensor(FILE *f, const char *role, const char *name, const Type *t) {
    fprintf(f, "// tensor role=%s name=%s dtype=%s shape=", role, name, scalar_name(t->elem));
    if (t->rank == 0)
        fputs("-", f);
    for (int i = 0; i < t->rank; i++) {
        if (i)
            fputc(',', f);
        if (t->dims[i].sym)
            fputs(t->dims[i].sym, f);
        else
            fprintf(f, "%lld", (long long)t->dims[i].size);
    }
    for (int i = 0; i + 1 < t->rank; i++)   /* the kernels take stride / unit (lower.c) */
        fprintf(f, "%s%lld", i ? "," : " stride_units=", (long long)stride_unit(t, i));
    fputc('\n', f);
}

/* What libattnrt's manifest can hold (runtime/manifest.h): a block past its
 * limits is refused here, at the block, rather than written for the
 * runtime to refuse or misread. */
static bool fits_manifest(Arena *a, Diag *d, const Op *func, const char *name, const PtrVec *dims, const Attr *ins,
                          const Attr *outs) {
    const char *why = NULL;
    int ntensors = ins->n + (outs ? outs->n : 0);
    enum { KERNEL_SUFFIX = 4 };   /* its kernels are named NAME_k0 ... NAME_k31 */
    if (strlen(name) + KERNEL_SUFFIX >= MANIFEST_MAX_NAME)
        why = arena_printf(a, "its name is %zu characters long; libattnrt takes block names of at most %d", strlen(name),
                           MANIFEST_MAX_NAME - 1 - KERNEL_SUFFIX);
    else if (dims->len > MANIFEST_MAX_DIMS)
        why = arena_printf(a, "it has %d symbolic dimensions; libattnrt takes at most %d", dims->len,
                           MANIFEST_MAX_DIMS);
    else if (ntensors > MANIFEST_MAX_TENSORS)
        why = arena_printf(a, "it has %d inputs and outputs; libattnrt takes at most %d tensors a block", ntensors,
                           MANIFEST_MAX_TENSORS);
    for (int i = 0; !why && i < ntensors; i++) {
        const char *t = i < ins->n ? ins->elems[i]->s : outs->elems[i - ins->n]->s;
        if (strlen(t) >= MANIFEST_MAX_NAME)
            why = arena_printf(a, "the name of tensor '%.20s...' is %zu characters long; libattnrt takes names of at "
                                  "most %d", t, strlen(t), MANIFEST_MAX_NAME - 1);
    }
    for (int i = 0; !why && i < dims->len; i++)
        if (strlen(dims->items[i]) >= MANIFEST_MAX_NAME)
            why = arena_printf(a, "the name of dimension '%.20s...' is %zu characters long; libattnrt takes names "
                                  "of at most %d", (const char *)dims->items[i], strlen(dims->items[i]),
                               MANIFEST_MAX_NAME - 1);
    if (why)
        op_diag(d, NULL, func, arena_printf(a, "codegen: block '%s' cannot be compiled: %s", name, why));
    return !why;
}

/* What a user is told of an op that no kernel took (fusion and tiling left
 * it): what the kernels compute instead. `attnc run` evaluates any of
 * these on the CPU; no target compiles them. */
static const char *unfused_message(Arena *a, const Op *op) {
    const char *why =
        op->kind == OP_MATMUL
            ? "this matrix product is not one the kernels compute: a GEMM multiplies by a weight matrix "
              "[K, N] (or its transpose), and batched products compile only as an attention, "
              "softmax(q @ transpose(k)) @ v, whose scores have no other use"
        : op->kind == OP_TRANSPOSE
            ? "this transpose is not one the kernels compute: a kernel reads a transposed weight as the right "
              "operand of '@' (x @ transpose(w)), and attention's transpose(k); the result of transpose() as a "
              "value of its own is not"
            : NULL;
    return why ? arena_printf(a, "codegen: %s", why)
               : arena_printf(a, "codegen: '%s' is left outside a kernel; no target compiles it (`attnc run` "
                                 "evaluates it on the CPU)", op_info[op->kind].name);
}

/* cond && more, either NULL for "always". */
static const char *both(Arena *a, const char *cond, const char *more) {
    return !cond ? more : !more ? cond : arena_printf(a, "(%s&&%s)", cond, more);
}

/* Which launches run where (tiling's variants, tile.choose): *when maps a
 * launch to the condition of the dims under which the runtime launches it
 * (absent: always), *buffer a chosen launch result to the value whose
 * tensor it writes (the outermost choice's result: both sides write it).
 * A side of a choice holds its condition (or "(COND==0)") and the
 * conditions of the choices that pick it in turn; a launch whose results
 * only other launches read (a split's partial results) runs where those
 * do, or always where they run under different conditions. */
static bool launch_conditions(Arena *a, Diag *d, const Block *body, Map *buffer, Map *when) {
    Map cond, picked, read;   /* value -> its condition, the choice that picks it, a launch that reads it */
    map_init(&cond, false);
    map_init(&picked, false);
    map_init(&read, false);
    map_init(buffer, false);
    map_init(when, false);
    int n = 0;
    for_each_op(op, body) n++;
    const Op **ops = NEW_ARRAY(a, const Op *, n + 1);
    n = 0;
    for_each_op(op, body) ops[n++] = op;
    for (int k = n - 1; k >= 0; k--) {   /* users before what they use */
        const Op *op = ops[k];
        if (op->kind == OP_CHOOSE) {
            const char *text = host_text(a, d, op->operands[0]);
            if (!text)
                return false;
            const char *outer = map_get(&cond, op->results[0]);
            const Value *buf = map_get(buffer, op->results[0]);
            for (int s = 1; s <= 2; s++) {
                const Value *v = op->operands[s];
                if (!v->def || (v->def->kind != OP_LAUNCH && v->def->kind != OP_CHOOSE) || map_get(&picked, v)) {
                    op_diag(d, NULL, op, "codegen: tile.choose picks between the results of two launches or choices, "
                                         "each once");
                    return false;
                }
                map_put(a, &picked, v, (void *)op);
                map_put(a, &cond, v, (void *)both(a, outer, s == 1 ? text : arena_printf(a, "(%s==0)", text)));
                map_put(a, buffer, v, (void *)(buf ? buf : op->results[0]));
            }
        } else if (op->kind == OP_LAUNCH) {
            const char *c = op->nresults ? map_get(&cond, op->results[0]) : NULL;
            for (int r = 1; r < op->nresults; r++)
                if ((map_get(&cond, op->results[r]) != NULL) != (c != NULL) ||
                    (c && strcmp(c, map_get(&cond, op->results[r])) != 0)) {
                    op_diag(d, NULL, op, "codegen: a launch's results are chosen under one condition, on one side");
                    return false;
                }
            if (c)
                map_put(a, when, op, (void *)c);
            for (int i = 3; i < op->noperands; i++) {   /* what it reads of other launches runs where it does */
                const Value *v = op->operands[i];
                if (!v->def || v->def->kind != OP_LAUNCH || map_get(&picked, v))
                    continue;
                const char *had = map_get(&cond, v);
                bool agree = map_get(&read, v) && (had == c || (had && c && strcmp(had, c) == 0));
                map_put(a, &cond, v, (void *)(!map_get(&read, v) || agree ? c : NULL));
                map_put(a, &read, v, (void *)op);
            }
        }
    }
    return true;
}

/* One block (func): its kernels into mod, its manifest lines into man. */
static bool block(const CgTarget *t, Arena *a, Diag *d, LLVMContextRef ctx, LLVMModuleRef mod, const Op *func,
                  FILE *man) {
    const char *name = op_attr(func, "sym_name")->s;
    Attr *ins = op_attr(func, "inputs"), *outs = op_attr(func, "outputs"), *kind = op_attr(func, "kind");
    Block *body = op_body(func);
    Names nm;
    map_init(&nm.of, false);
    nm.ntemps = 0;
    PtrVec dims = {0};
    for (int i = 0; i < body->nargs; i++) {
        map_put(a, &nm.of, body->args[i], (void *)ins->elems[i]->s);
        add_dims(a, body->args[i]->type, &dims);
    }
    const Op *ret = NULL;
    for_each_op(op, body) {
        if (op->kind == OP_RETURN)
            ret = op;
        if (op->kind == OP_DEFINE_DIM)   /* computed at the run (a let line), then a dim like the others */
            vec_push(a, &dims, (void *)op_attr(op, "name")->s);
    }
    if (!fits_manifest(a, d, func, name, &dims, ins, outs))
        return false;
    fprintf(man, "// block name=%s kind=%s\n// dims names=", name, kind ? kind->s : "-");
    for (int i = 0; i < dims.len; i++)
        fprintf(man, "%s%s", i ? "," : "", (const char *)dims.items[i]);
    if (!dims.len)
        fputc('-', man);
    fprintf(man, "\n");
    for (int i = 0; i < body->nargs; i++)
        print_tensor(man, "in", ins->elems[i]->s, body->args[i]->type);
    for (int i = 0; ret && i < ret->noperands; i++)
        print_tensor(man, "out", outs->elems[i]->s, ret->operands[i]->type);
    Map buffer, when;
    if (!launch_conditions(a, d, body, &buffer, &when))
        return false;
    int nkern = 0;
    for_each_op(op, body) {
        switch (op->kind) {
        case OP_CONSTANT: case OP_DIM: case OP_ADD: case OP_SUB: case OP_MUL: case OP_FLOORDIV:
        case OP_REM: case OP_MIN: case OP_MAX: case OP_CMP: case OP_AND: case OP_OR: case OP_RETURN:
        case OP_CHOOSE: case OP_NUM_SMS:
            continue;   /* host arithmetic: read through host_expr; choices: the launches' when= */
        case OP_DEFINE_DIM: {   /* a dim the runtime computes before the launches */
            const char *text = host_text(a, d, op->operands[0]);
            if (!text)
                return false;
            fprintf(man, "// let name=%s expr=%s\n", op_attr(op, "name")->s, text);
            continue;
        }
        case OP_ASSERT: {   /* a check of the dims, made by the runtime before launching */
            const char *text = host_text(a, d, op->operands[0]);
            if (!text)
                return false;
            Attr *msg = op_attr(op, "message");
            fprintf(man, "// assert expr=%s message=%s\n", text, msg ? msg->s : "a shape check failed");
            continue;
        }
        case OP_LAUNCH: break;
        default:
            op_diag(d, NULL, op, unfused_message(a, op));
            return false;
        }
        /* name the launch's results: a chosen one is the buffer the choice
         * (or the choice of choices) makes, which each side writes */
        for (int r = 0; r < op->nresults; r++) {
            const Value *v = map_get(&buffer, op->results[r]);
            v = v ? v : op->results[r];
            const char *bn = map_get(&nm.of, v);
            for (int i = 0; !bn && ret && i < ret->noperands; i++)
                if (ret->operands[i] == v)
                    bn = outs->elems[i]->s;
            if (!bn && ins->n + (outs ? outs->n : 0) + nm.ntemps == MANIFEST_MAX_TENSORS) {
                op_diag(d, NULL, func, arena_printf(a, "codegen: block '%s' cannot be compiled: with the temporaries "
                                                       "its kernels pass each other it has more than %d tensors, "
                                                       "libattnrt's limit", name, MANIFEST_MAX_TENSORS));
                return false;
            }
            if (!bn) {
                bn = arena_printf(a, "tmp%d", nm.ntemps++);
                print_tensor(man, "tmp", bn, v->type);
            }
            map_put(a, &nm.of, v, (void *)bn);
            map_put(a, &nm.of, op->results[r], (void *)bn);
        }
        if (nkern == MANIFEST_MAX_KERNELS) {
            op_diag(d, NULL, func, arena_printf(a, "codegen: block '%s' cannot be compiled: it takes more than %d "
                                                   "kernels, libattnrt's limit", name, MANIFEST_MAX_KERNELS));
            return false;
        }
        char *kname = arena_printf(a, "%s_k%d", name, nkern++);
        for (char *c = kname; *c; c++)   /* PTX names have no '.' (NAME.backward) */
            if (*c == '.')
                *c = '_';
        KernelSpec k = {.launch = op, .name = kname, .ndims = dims.len,
                        .dims = (const char **)dims.items};
        KernelInfo info = {0};
        if (!emit_kernel(t, a, d, ctx, mod, &k, &info))
            return false;
        StrBuf grid;
        strbuf_open(&grid);
        for (int g = 0; g < 3; g++) {
            if (g)
                fputc(';', grid.f);   /* min(a,b) has commas */
            if (!host_expr(d, &grid, op->operands[g])) {
                strbuf_finish(&grid, a, NULL);
                return false;
            }
        }
        /* ysplit=1: every kernel takes its first y as a last parameter (lower.c) */
        fprintf(man, "// kernel name=%s grid=%s threads=%d smem=%lld ysplit=1 args=", k.name,
                strbuf_finish(&grid, a, NULL), info.threads, (long long)info.smem_bytes);
        for (int i = 3; i < op->noperands + op->nresults; i++)
            fprintf(man, "%s%s", i > 3 ? "," : "",
                    (const char *)map_get(&nm.of, i < op->noperands ? op->operands[i]
                                                                  : op->results[i - op->noperands]));
        Attr *zeroed = op_attr(op, "zeroed");   /* outputs the runtime clears before the launch */
        for (int z = 0; zeroed && z < zeroed->n; z++)
            fprintf(man, "%s%s", z ? "," : " zero=", (const char *)map_get(&nm.of, op->results[zeroed->elems[z]->i]));
        if (info.persistent)   /* loops over the grid's tiles; takes the grid's x and y and a tile counter after y_offset */
            fprintf(man, " persistent=counter");
        const char *cond = map_get(&when, op);
        if (cond)
            fprintf(man, " when=%s", cond);
        fputc('\n', man);
        /* the tensor maps it takes by value, after y_offset, in order */
        for (int j = 0; j < info.ntmaps; j++) {
            const KernelTmap *m = &info.tmaps[j];
            fprintf(man, "// tmap kernel=%s tensor=%s box=", k.name,
                    (const char *)map_get(&nm.of, 3 + m->arg < op->noperands
                                                      ? op->operands[3 + m->arg]
                                                      : op->results[3 + m->arg - op->noperands]));
            for (int i = 0; i < m->rank; i++)
                fprintf(man, "%s%lld", i ? "," : "", (long long)m->box[i]);
            fprintf(man, " swizzle=%s\n", m->swizzle ? "128" : "none");
        }
    }
    fprintf(man, "// end\n");
    return true;
}

/* Appends one block's PTX module to the file's: the first whole, later ones
 * without LLVM's header (its comment, .version, .target, .address_size) and
 * without a module-scope declaration the file already has (the dynamic
 * shared memory every kernel names, `.extern .shared ... attnc_smem[]`). */
static void append_ptx(FILE *out, const char *ptx, size_t len, bool first, Map *declared, Arena *a) {
    bool header = !first;
    for (const char *line = ptx, *end = ptx + len; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t n = nl ? (size_t)(nl - line) + 1 : (size_t)(end - line);
        bool skip = false;
        if (header) {
            skip = n == 1 || strncmp(line, "//", 2) == 0 || strncmp(line, ".version", 8) == 0 ||
                   strncmp(line, ".target", 7) == 0 || strncmp(line, ".address_size", 13) == 0;
            header = skip;
        }
        if (!skip && (strncmp(line, ".extern", 7) == 0 || strncmp(line, ".global", 7) == 0 ||
                      strncmp(line, ".shared", 7) == 0 || strncmp(line, ".const", 6) == 0)) {
            const char *decl = arena_strndup(a, line, n);
            skip = map_get(declared, decl) != NULL;
            map_put(a, declared, decl, (void *)decl);
        }
        if (!skip)
            fwrite(line, 1, n, out);
        line += n;
    }
}

/* Each block's kernels are an LLVM module of their own, optimised and
 * emitted on their own and freed before the next, with the code
 * generator's state for it (an arena of its own): the compile's time and
 * memory grow with one block, not with the file (a module of all blocks
 * held every block's IR through O3 and emission: 2.8 MB a small mlp block;
 * the state in the file's arena, 0.6 MB a block more).
 * -emit=llvm prints the modules one after another. */
bool codegen_module(Arena *a, Diag *d, Op *module, const char *arch, CodegenEmit emit, char **text,
                    size_t *len) {
    const CgTarget *t = cg_target(target_lookup(arch));
    if (!t) {
        diag_plain(d, "no code generator for target '%s' yet (codegen targets: %s)", arch, target_codegen_names());
        return false;
    }
    StrBuf man, body;
    strbuf_open(&man);
    strbuf_open(&body);
    fprintf(man.f, "// attnc-manifest %d\n// target name=%s\n", ATTNC_MANIFEST_VERSION, arch);
    Map declared;
    map_init(&declared, true);
    bool ok = true, first = true;
    for_each_op(func, op_body(module)) {
        if (func->kind != OP_FUNC)
            continue;
        LLVMContextRef ctx = LLVMContextCreate();
        LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(op_attr(func, "sym_name")->s, ctx);
        Arena blk = {0};   /* the block's code generator state and its PTX: freed once appended */
        char *part = NULL;
        size_t plen = 0;
        ok = block(t, &blk, d, ctx, mod, func, man.f) &&
             ptx_emit(&blk, d, mod, arch, emit == CG_EMIT_LLVM, &part, &plen);
        LLVMDisposeModule(mod);
        LLVMContextDispose(ctx);
        if (ok && emit == CG_EMIT_LLVM)
            fwrite(part, 1, plen, body.f);
        else if (ok)
            append_ptx(body.f, part, plen, first, &declared, a);
        arena_free(&blk);
        if (!ok)
            break;
        first = false;
    }
    size_t mlen, blen;
    char *manifest = strbuf_finish(&man, a, &mlen);
    char *ptx = strbuf_finish(&body, a, &blen);
    if (!ok)
        return false;
    if (emit == CG_EMIT_LLVM) {
        *text = ptx;
        *len = blen;
        return true;
    }
    *len = mlen + blen;
    *text = arena_alloc(a, *len + 1);
    memcpy(*text, manifest, mlen);
    memcpy(*text + mlen, ptx, blen);
    return true;
}
