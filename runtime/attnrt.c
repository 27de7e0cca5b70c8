/* attnrt.c — the runtime: manifest, argument checks, launches.
 * The CUDA driver API is reached through cuda_loader.c (dlopen). */
#include "runtime/attnrt.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_loader.h"
#include "runtime/manifest.h"

/* ---- errors ------------------------------------------------------------------ */

static _Thread_local char last_error[1024];

const char *attnrt_last_error(void) { return last_error; }

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

int attnrt_cuda_fail(int code, const char *what);   /* used by cuda_loader.c */
int attnrt_cuda_fail(int code, const char *what) { return fail(ATTNRT_ERROR_CUDA, "%s", what), code; }

/* ---- the manifest -------------------------------------------------------------- */

enum { MAX_NAME = MANIFEST_MAX_NAME, MAX_DIMS = MANIFEST_MAX_DIMS, MAX_TENSORS = MANIFEST_MAX_TENSORS,
       MAX_KERNELS = MANIFEST_MAX_KERNELS, MAX_ARGS = MANIFEST_MAX_ARGS, MAX_TMAPS = MANIFEST_MAX_TMAPS };

typedef struct Dim {
    char sym[MAX_NAME];   /* "" for a number */
    int64_t size;
} Dim;

typedef struct TensorSpec {
    char name[MAX_NAME];
    int role;             /* 0 in, 1 out, 2 temporary */
    attnrt_dtype dtype;
    int rank;
    Dim dims[ATTNRT_MAX_RANK];
} TensorSpec;

/* A tensor map a kernel takes by value (sm_90a TMA; manifest "tmap"): over
 * tensor `tensor`, boxes of box[] elements (outermost first), encoded at
 * launch and kept while the tensor's pointer and shape stay the same. */
typedef struct TmapSpec {
    int tensor;
    unsigned box[ATTNRT_MAX_RANK];
    void *ptr;                          /* the cached map's */
    int64_t shape[ATTNRT_MAX_RANK];
    uint64_t map[16];                   /* a CUtensorMap (a copy: the module is malloc'd, 16-byte aligned) */
} TmapSpec;

typedef struct KernelSpec {
    char name[128];
    char grid[3][256];
    char when[256];       /* launched only where this expression of the dims holds ("": always): one
                             variant of a block's kernels per size range (tile.choose) */
    int threads;
    int64_t smem;
    bool ysplit;          /* takes its first y as a last parameter: grid.y is launched in slices */
    bool persistent;      /* loops over the grid's tiles itself: launched with one block per resident
                             slot, told the grid's x and y (after the first y) */
    int64_t resident;     /* persistent: its blocks the GPU holds at once (0: not asked yet) */
    void *tile_counter;   /* persistent: the tiles its blocks have taken (a device word, zeroed in the
                             stream before each launch; shared by its launches, like the temporaries) */
    int nargs;
    int args[MAX_ARGS];   /* tensor indices */
    void *fn;             /* CUfunction, once loaded */
    int ntmaps;           /* tensor maps, passed after the other parameters */
    TmapSpec tmaps[MAX_TMAPS];
    int nzero;            /* tensors cleared (in the stream) before the launch: accumulated into */
    int zero[MAX_ARGS];
} KernelSpec;

typedef struct Assert {
    char expr[256], message[256];
} Assert;

typedef struct Block {
    char name[MAX_NAME];
    int nasserts;
    Assert asserts[8];
    int ndims;
    char dims[MAX_DIMS][MAX_NAME];
    int ntensors;
    TensorSpec tensors[MAX_TENSORS];
    int nkernels;
    KernelSpec kernels[MAX_KERNELS];
    void *temp[MAX_TENSORS];      /* device buffers of temporaries */
    size_t temp_bytes[MAX_TENSORS];
} Block;

struct attnrt_module {
    char *ptx;
    size_t len;
    char target[16];
    int nblocks;
    Block *blocks;
    void *cumod;   /* CUmodule, loaded on first run */
};

static int dtype_size(attnrt_dtype t) {
    switch (t) {
    case ATTNRT_F16: case ATTNRT_BF16: return 2;
    case ATTNRT_I64: return 8;
    default: return 4;
    }
}

const char *attnrt_dtype_name(attnrt_dtype t) {
    static const char *names[] = {"f16", "bf16", "f32", "i32", "i64"};
    return (unsigned)t < 5 ? names[t] : "?";
}

static bool dtype_parse(const char *s, attnrt_dtype *t) {
    for (int i = 0; i < 5; i++)
        if (strcmp(s, attnrt_dtype_name((attnrt_dtype)i)) == 0) {
            *t = (attnrt_dtype)i;
            return true;
        }
    return false;
}

static int tensor_index(const Block *b, const char *name) {
    for (int i = 0; i < b->ntensors; i++)
        if (strcmp(b->tensors[i].name, name) == 0)
            return i;
    return -1;
}

static bool parse_shape(char *s, TensorSpec *t) {
    t->rank = 0;
    if (strcmp(s, "-") == 0)
        return true;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (t->rank == ATTNRT_MAX_RANK)
            return false;
        Dim *d = &t->dims[t->rank++];
        char *end;
        long long v = strtoll(tok, &end, 10);
        if (*end == 0 && end != tok) {
            d->sym[0] = 0;
            d->size = v;
        } else {
            snprintf(d->sym, sizeof d->sym, "%s", tok);
        }
    }
    return true;
}

/* The manifest version this runtime reads (manifest.h). */
enum { MANIFEST_VERSION = ATTNC_MANIFEST_VERSION };

/* One manifest line: its entry word, then key=value words. A value has no
 * spaces, except message=, which runs to the end of the line. */
typedef struct Entry {
    const char *what;
    int n;
    const char *key[16], *val[16];
    bool used[16];
} Entry;

static bool split_entry(char *line, Entry *e) {
    e->n = 0;
    char *p = line;
    while (*p == ' ')
        p++;
    e->what = p;
    p += strcspn(p, " ");
    while (*p) {
        *p++ = 0;
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        if (e->n == 16)
            return false;
        char *eq = strchr(p, '=');
        if (!eq || eq == p)
            return false;
        *eq = 0;
        e->key[e->n] = p;
        e->val[e->n] = eq + 1;
        e->used[e->n] = false;
        e->n++;
        if (strcmp(p, "message") == 0)   /* to the end of the line */
            break;
        p = eq + 1 + strcspn(eq + 1, " ");
    }
    return true;
}

/* The value of key, or NULL; marks it read. */
static const char *get(Entry *e, const char *key) {
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->key[i], key) == 0) {
            e->used[i] = true;
            return e->val[i];
        }
    return NULL;
}

/* A key this runtime does not know may change what a launch must do (a
 * later target's tensor maps or cluster shape): refused, never skipped. */
static int check_all_read(const Entry *e, int lineno) {
    for (int i = 0; i < e->n; i++)
        if (!e->used[i])
            return fail(ATTNRT_ERROR_MANIFEST,
                        "manifest line %d: key '%s' of '%s' is not known to this runtime (manifest %d)", lineno,
                        e->key[i], e->what, MANIFEST_VERSION);
    return ATTNRT_OK;
}

/* Splits "a,b,c" (or ';'-separated) into at most max words. */
static int split_list(char *s, char sep, char **out, int max) {
    int n = 0;
    if (!*s || strcmp(s, "-") == 0)
        return 0;
    for (char *w = s; w && n < max;) {
        char *next = strchr(w, sep);
        if (next)
            *next++ = 0;
        out[n++] = w;
        w = next;
    }
    return n;
}

static int parse_entry(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    Block *cur = *curp;
#define NEED(v, key)                                                                                      \
    const char *v = get(e, key);                                                                          \
    if (!v)                                                                                               \
        return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: '%s' needs %s=", lineno, e->what, key);
    if (strcmp(e->what, "target") == 0) {
        NEED(name, "name");
        snprintf(m->target, sizeof m->target, "%s", name);
    } else if (strcmp(e->what, "block") == 0) {
        NEED(name, "name");
        get(e, "kind");
        Block *nb = realloc(m->blocks, sizeof(Block) * (size_t)(m->nblocks + 1));
        if (!nb)
            return fail(ATTNRT_ERROR_MANIFEST, "out of memory reading the manifest");
        m->blocks = nb;
        cur = *curp = &m->blocks[m->nblocks++];
        memset(cur, 0, sizeof *cur);
        snprintf(cur->name, sizeof cur->name, "%s", name);
    } else if (!cur) {
        return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: '%s' outside a block", lineno, e->what);
    } else if (strcmp(e->what, "dims") == 0) {
        NEED(names, "names");
        char buf[1024], *w[MAX_DIMS];
        snprintf(buf, sizeof buf, "%s", names);
        int n = split_list(buf, ',', w, MAX_DIMS);
        if (cur->ndims + n > MAX_DIMS)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d dims", lineno, MAX_DIMS);
        for (int i = 0; i < n; i++)
            snprintf(cur->dims[cur->ndims++], MAX_NAME, "%s", w[i]);
    } else if (strcmp(e->what, "tensor") == 0) {
        NEED(role, "role");
        NEED(name, "name");
        NEED(dtype, "dtype");
        NEED(shape, "shape");
        if (cur->ntensors == MAX_TENSORS)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d tensors", lineno, MAX_TENSORS);
        TensorSpec *t = &cur->tensors[cur->ntensors++];
        t->role = strcmp(role, "in") == 0 ? 0 : strcmp(role, "out") == 0 ? 1 : strcmp(role, "tmp") == 0 ? 2 : -1;
        snprintf(t->name, sizeof t->name, "%s", name);
        char buf[512];
        snprintf(buf, sizeof buf, "%s", shape);
        if (t->role < 0 || !dtype_parse(dtype, &t->dtype) || !parse_shape(buf, t))
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: bad tensor '%s'", lineno, name);
    } else if (strcmp(e->what, "kernel") == 0) {
        NEED(name, "name");
        NEED(grid, "grid");
        NEED(threads, "threads");
        NEED(smem, "smem");
        NEED(args, "args");
        if (cur->nkernels == MAX_KERNELS)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d kernels", lineno, MAX_KERNELS);
        KernelSpec *k = &cur->kernels[cur->nkernels++];
        snprintf(k->name, sizeof k->name, "%s", name);
        char buf[1024], *w[MAX_ARGS];
        snprintf(buf, sizeof buf, "%s", grid);
        if (split_list(buf, ';', w, 3) != 3)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: grid= needs three expressions", lineno);
        for (int g = 0; g < 3; g++)
            snprintf(k->grid[g], sizeof k->grid[g], "%s", w[g]);
        k->threads = atoi(threads);
        k->smem = atoll(smem);
        const char *ysplit = get(e, "ysplit");   /* optional */
        k->ysplit = ysplit && strcmp(ysplit, "1") == 0;
        const char *persistent = get(e, "persistent");   /* optional: "counter", the one kind there is */
        if (persistent && strcmp(persistent, "counter") != 0)
            return fail(ATTNRT_ERROR_MANIFEST,
                        "manifest line %d: persistent=%s is not a kind this libattnrt knows (it knows 'counter': "
                        "recompile the block with this attnc)",
                        lineno, persistent);
        k->persistent = persistent != NULL;
        if (k->persistent && strcmp(k->grid[2], "1") != 0)   /* its blocks loop over x and y only */
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: a persistent kernel needs grid z = 1, not '%s'",
                        lineno, k->grid[2]);
        snprintf(buf, sizeof buf, "%s", args);
        int n = split_list(buf, ',', w, MAX_ARGS);
        for (int i = 0; i < n; i++) {
            int t = tensor_index(cur, w[i]);
            if (t < 0)
                return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: unknown tensor '%s'", lineno, w[i]);
            k->args[k->nargs++] = t;
        }
        const char *when = get(e, "when");   /* optional */
        if (when && strlen(when) >= sizeof k->when)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: when= is longer than %d characters", lineno,
                        (int)sizeof k->when - 1);
        snprintf(k->when, sizeof k->when, "%s", when ? when : "");
        const char *zero = get(e, "zero");   /* optional */
        if (zero) {
            snprintf(buf, sizeof buf, "%s", zero);
            n = split_list(buf, ',', w, MAX_ARGS);
            for (int i = 0; i < n; i++) {
                int t = tensor_index(cur, w[i]);
                if (t < 0)
                    return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: unknown tensor '%s' in zero=", lineno, w[i]);
                k->zero[k->nzero++] = t;
            }
        }
    } else if (strcmp(e->what, "tmap") == 0) {   /* belongs to the kernel line before it */
        NEED(kernel, "kernel");
        NEED(tensor, "tensor");
        NEED(box, "box");
        NEED(swizzle, "swizzle");
        KernelSpec *k = cur->nkernels ? &cur->kernels[cur->nkernels - 1] : NULL;
        if (!k || strcmp(k->name, kernel) != 0)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: tmap of kernel '%s' does not follow its kernel line",
                        lineno, kernel);
        if (k->ntmaps == MAX_TMAPS)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d tensor maps", lineno, MAX_TMAPS);
        TmapSpec *tm = &k->tmaps[k->ntmaps++];
        tm->tensor = tensor_index(cur, tensor);
        if (tm->tensor < 0)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: unknown tensor '%s'", lineno, tensor);
        const TensorSpec *ts = &cur->tensors[tm->tensor];
        if (ts->dtype != ATTNRT_F16 && ts->dtype != ATTNRT_BF16)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: tmap of a %s tensor (TMA maps f16 and bf16)", lineno,
                        attnrt_dtype_name(ts->dtype));
        if (strcmp(swizzle, "128") != 0)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: swizzle=%s is not known to this runtime", lineno,
                        swizzle);
        char buf[256], *w[ATTNRT_MAX_RANK + 1];
        snprintf(buf, sizeof buf, "%s", box);
        int n = split_list(buf, ',', w, ATTNRT_MAX_RANK + 1);
        if (n != ts->rank || n > 5)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: box=%s needs one size per dim of '%s' (at most 5)",
                        lineno, box, tensor);
        for (int i = 0; i < n; i++) {
            char *end;
            long v = strtol(w[i], &end, 10);
            if (*end || v < 1 || v > 256)
                return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: box size '%s' is not in 1..256", lineno, w[i]);
            tm->box[i] = (unsigned)v;
        }
    } else if (strcmp(e->what, "assert") == 0) {
        NEED(expr, "expr");
        NEED(message, "message");
        if (cur->nasserts == 8)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than 8 asserts", lineno);
        Assert *as = &cur->asserts[cur->nasserts++];
        snprintf(as->expr, sizeof as->expr, "%s", expr);
        snprintf(as->message, sizeof as->message, "%s", message);
    } else if (strcmp(e->what, "end") == 0) {
        *curp = NULL;
    } else {
        return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: unknown entry '%s'", lineno, e->what);
    }
#undef NEED
    return check_all_read(e, lineno);
}

/* Reads the manifest from the comment lines heading the PTX. */
static int parse_manifest(attnrt_module *m) {
    const char *p = m->ptx, *end = m->ptx + m->len;
    int lineno = 0;
    bool header = false;
    Block *cur = NULL;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char line[2048];
        lineno++;
        if (n >= sizeof line)
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d is too long", lineno);
        memcpy(line, p, n);
        line[n] = 0;
        if (n && line[n - 1] == '\r')
            line[n - 1] = 0;
        p = nl ? nl + 1 : end;
        if (strncmp(line, "// ", 3) != 0)
            break;
        if (!header) {
            int version;
            char extra;
            if (sscanf(line, "// attnc-manifest %d%c", &version, &extra) != 1)
                break;
            if (version != MANIFEST_VERSION)
                return fail(ATTNRT_ERROR_MANIFEST,
                            "manifest version %d is not supported (this runtime reads %d): compile the block again "
                            "with the attnc that matches this libattnrt",
                            version, MANIFEST_VERSION);
            header = true;
            continue;
        }
        Entry e;
        if (!split_entry(line + 3, &e))
            return fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: malformed (expected 'entry key=value ...')",
                        lineno);
        if (!*e.what)
            continue;
        int rc = parse_entry(m, &cur, &e, lineno);
        if (rc)
            return rc;
    }
    if (!header)
        return fail(ATTNRT_ERROR_MANIFEST, "no attnc manifest at the head of the PTX (was it written by attnc?)");
    if (m->nblocks == 0)
        return fail(ATTNRT_ERROR_MANIFEST, "the manifest names no blocks");
    return ATTNRT_OK;
}

int attnrt_load_data(const char *ptx, size_t len, attnrt_module **out) {
    *out = NULL;
    if (!ptx)
        return fail(ATTNRT_ERROR_ARGUMENT, "ptx is NULL");
    attnrt_module *m = calloc(1, sizeof *m);
    m->ptx = malloc(len + 1);
    memcpy(m->ptx, ptx, len);
    m->ptx[len] = 0;
    m->len = len;
    int rc = parse_manifest(m);
    if (rc) {
        attnrt_unload(m);
        return rc;
    }
    *out = m;
    return ATTNRT_OK;
}

int attnrt_load_file(const char *path, attnrt_module **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(ATTNRT_ERROR_IO, "cannot open '%s'", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)(n > 0 ? n : 1));
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    if (n < 0 || got != (size_t)n) {
        free(buf);
        return fail(ATTNRT_ERROR_IO, "cannot read '%s'", path);
    }
    int rc = attnrt_load_data(buf, got, out);
    free(buf);
    if (rc == ATTNRT_ERROR_MANIFEST) {
        char msg[sizeof last_error];
        memcpy(msg, last_error, sizeof msg);
        fail(rc, "%.256s: %.700s", path, msg);
    }
    return rc;
}

void attnrt_unload(attnrt_module *m) {
    if (!m)
        return;
    for (int b = 0; b < m->nblocks; b++) {   /* each block's device memory: temporaries, tile counters */
        for (int t = 0; t < MAX_TENSORS; t++)
            if (m->blocks[b].temp[t])
                cuda_free(m->blocks[b].temp[t]);
        for (int k = 0; k < m->blocks[b].nkernels; k++)
            if (m->blocks[b].kernels[k].tile_counter)
                cuda_free(m->blocks[b].kernels[k].tile_counter);
    }
    if (m->cumod)
        cuda_module_unload(m->cumod);
    free(m->blocks);
    free(m->ptx);
    free(m);
}

int attnrt_block_count(const attnrt_module *m) { return m ? m->nblocks : 0; }

const char *attnrt_block_name(const attnrt_module *m, int i) {
    return m && i >= 0 && i < m->nblocks ? m->blocks[i].name : NULL;
}

static Block *find_block(const attnrt_module *m, const char *name) {
    if (!m) {
        fail(ATTNRT_ERROR_ARGUMENT, "module is NULL");
        return NULL;
    }
    for (int i = 0; i < m->nblocks; i++)
        if (name && strcmp(m->blocks[i].name, name) == 0)
            return &m->blocks[i];
    char names[512] = "";
    for (int i = 0; i < m->nblocks; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", m->blocks[i].name);
    fail(ATTNRT_ERROR_ARGUMENT, "no block '%s' in this module (it has: %s)", name ? name : "(null)", names);
    return NULL;
}

static int count_role(const Block *b, int role) {
    int n = 0;
    for (int i = 0; i < b->ntensors; i++)
        n += b->tensors[i].role == role;
    return n;
}

static const TensorSpec *nth_role(const Block *b, int role, int i) {
    for (int t = 0; t < b->ntensors; t++)
        if (b->tensors[t].role == role && i-- == 0)
            return &b->tensors[t];
    return NULL;
}

int attnrt_block_arity(const attnrt_module *m, const char *block, int *ninputs, int *noutputs) {
    Block *b = find_block(m, block);
    if (!b)
        return ATTNRT_ERROR_ARGUMENT;
    *ninputs = count_role(b, 0);
    *noutputs = count_role(b, 1);
    return ATTNRT_OK;
}

int attnrt_block_tensor(const attnrt_module *m, const char *block, int is_output, int i, const char **name,
                        attnrt_dtype *dtype, int *rank, int64_t *shape) {
    Block *b = find_block(m, block);
    if (!b)
        return ATTNRT_ERROR_ARGUMENT;
    const TensorSpec *t = nth_role(b, is_output ? 1 : 0, i);
    if (!t)
        return fail(ATTNRT_ERROR_ARGUMENT, "block '%s' has no %s %d", block, is_output ? "output" : "input", i);
    *name = t->name;
    *dtype = t->dtype;
    if (rank)
        *rank = t->rank;
    for (int d = 0; shape && d < t->rank; d++)
        shape[d] = t->dims[d].sym[0] ? -1 : t->dims[d].size;
    return ATTNRT_OK;
}

/* ---- checking tensors, binding dims ---------------------------------------------- */

typedef struct Binding {
    int n;
    char names[MAX_DIMS][MAX_NAME];
    int64_t values[MAX_DIMS];
    const char *from[MAX_DIMS];   /* which tensor bound it */
} Binding;

static int64_t *lookup(Binding *bd, const char *name) {
    for (int i = 0; i < bd->n; i++)
        if (strcmp(bd->names[i], name) == 0)
            return &bd->values[i];
    return NULL;
}

/* ---- grids: the manifest's expressions over the dims ------------------------------- */

typedef struct Expr {
    const char *p;
    Binding *bd;
    bool bad;
} Expr;

static int64_t expr_sum(Expr *e);
static int64_t expr_logic(Expr *e);

static int64_t expr_atom(Expr *e) {
    const char *p = e->p;
    if (*p == '(') {
        e->p++;
        int64_t v = expr_logic(e);
        if (*e->p != ')')
            e->bad = true;
        else
            e->p++;
        return v;
    }
    if (*p >= '0' && *p <= '9') {
        char *end;
        int64_t v = strtoll(p, &end, 10);
        e->p = end;
        return v;
    }
    char name[MAX_NAME];
    int n = 0;
    while ((p[n] == '_' || (p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
            (p[n] >= '0' && p[n] <= '9')) && n < MAX_NAME - 1)
        n++;
    if (n == 0) {
        e->bad = true;
        return 0;
    }
    memcpy(name, p, (size_t)n);
    name[n] = 0;
    e->p = p + n;
    if ((strcmp(name, "min") == 0 || strcmp(name, "max") == 0) && *e->p == '(') {
        e->p++;
        int64_t x = expr_sum(e);
        if (*e->p++ != ',')
            e->bad = true;
        int64_t y = expr_sum(e);
        if (*e->p++ != ')')
            e->bad = true;
        return name[1] == 'i' ? (x < y ? x : y) : (x > y ? x : y);
    }
    int64_t *v = lookup(e->bd, name);
    if (!v)
        e->bad = true;
    return v ? *v : 0;
}

static int64_t floordiv(int64_t x, int64_t y) {
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}

static int64_t expr_prod(Expr *e) {
    int64_t v = expr_atom(e);
    while (*e->p == '*' || *e->p == '/' || *e->p == '%') {
        char op = *e->p++;
        int64_t r = expr_atom(e);
        if (op == '*')
            v *= r;
        else if (r == 0)
            e->bad = true;
        else
            v = op == '/' ? floordiv(v, r) : v - floordiv(v, r) * r;
    }
    return v;
}

static int64_t expr_sum(Expr *e) {
    int64_t v = expr_prod(e);
    while (*e->p == '+' || *e->p == '-') {
        char op = *e->p++;
        int64_t r = expr_prod(e);
        v = op == '+' ? v + r : v - r;
    }
    return v;
}

/* Comparisons give 1 or 0; && and || combine them (no short cut needed:
 * the operands are pure). */
static int64_t expr_cmp(Expr *e) {
    int64_t v = expr_sum(e);
    static const char *ops[] = {"==", "!=", "<=", ">=", "<", ">"};
    for (int i = 0; i < 6; i++)
        if (strncmp(e->p, ops[i], strlen(ops[i])) == 0) {
            e->p += strlen(ops[i]);
            int64_t r = expr_sum(e);
            switch (i) {
            case 0: return v == r;
            case 1: return v != r;
            case 2: return v <= r;
            case 3: return v >= r;
            case 4: return v < r;
            default: return v > r;
            }
        }
    return v;
}

static int64_t expr_logic(Expr *e) {
    int64_t v = expr_cmp(e);
    while (strncmp(e->p, "&&", 2) == 0 || strncmp(e->p, "||", 2) == 0) {
        bool and = e->p[0] == '&';
        e->p += 2;
        int64_t r = expr_cmp(e);
        v = and ? (v && r) : (v || r);
    }
    return v;
}

/* A condition of the dims (an assert's, a kernel's when=) into *holds;
 * false: the text is not an expression. */
static bool eval_condition(const char *text, Binding *bd, int64_t *holds) {
    Expr e = {text, bd, false};
    *holds = expr_logic(&e);
    return !e.bad && !*e.p;
}

static int eval_grid(const Block *b, const KernelSpec *k, Binding *bd, int64_t *grid) {
    for (int g = 0; g < 3; g++) {
        Expr e = {k->grid[g], bd, false};
        grid[g] = expr_sum(&e);
        if (e.bad || *e.p)
            return fail(ATTNRT_ERROR_MANIFEST, "block '%s', kernel %s: bad grid expression '%s'", b->name, k->name,
                        k->grid[g]);
        /* y over 65,535 (B·H of a decode batch): launched in slices, below */
        int64_t most = g == 0 || (g == 1 && k->ysplit) ? 2147483647LL : 65535;
        if (grid[g] < 0 || grid[g] > most)
            return fail(ATTNRT_ERROR_ARGUMENT, "block '%s', kernel %s: grid size %lld (from '%s') is out of range",
                        b->name, k->name, (long long)grid[g], k->grid[g]);
    }
    return ATTNRT_OK;
}

/* A declared dim's value under the binding (which check_all made complete). */
static int64_t dim_value(Binding *bd, const Dim *d) { return d->sym[0] ? *lookup(bd, d->sym) : d->size; }

static void shape_text(const TensorSpec *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s[", attnrt_dtype_name(t->dtype));
    for (int i = 0; i < t->rank && k < n; i++) {
        if (t->dims[i].sym[0])
            k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", t->dims[i].sym);
        else
            k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->dims[i].size);
    }
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static size_t tensor_bytes(const attnrt_tensor *x) {
    size_t n = (size_t)dtype_size(x->dtype);
    for (int i = 0; i < x->rank; i++)
        n *= (size_t)(x->shape[i] > 0 ? x->shape[i] : 0);
    return n;
}

static int check_tensor(const Block *b, const TensorSpec *s, const attnrt_tensor *x, Binding *bd, bool bind) {
    char want[256];
    shape_text(s, want, sizeof want);
    const char *kind = s->role == 0 ? "input" : "output";
    if (!x)
        return fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s' is NULL (expected %s)", kind, s->name, b->name,
                    want);
    if (x->dtype != s->dtype)
        return fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s' has dtype %s; expected %s", kind, s->name,
                    b->name, attnrt_dtype_name(x->dtype), want);
    if (x->rank != s->rank)
        return fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s' has rank %d; expected %d (%s)", kind, s->name,
                    b->name, x->rank, s->rank, want);
    for (int i = 0; i < s->rank; i++) {
        int64_t got = x->shape[i];
        if (got < 0)
            return fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': dimension %d is %lld; expected %s with sizes >= 0",
                        kind, s->name, b->name, i, (long long)got, want);
        if (!s->dims[i].sym[0]) {
            if (got != s->dims[i].size)
                return fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': dimension %d is %lld; expected %lld (%s)",
                            kind, s->name, b->name, i, (long long)got, (long long)s->dims[i].size, want);
            continue;
        }
        int64_t *v = lookup(bd, s->dims[i].sym);
        if (v && *v != got) {
            const char *from = bd->from[v - bd->values];
            return fail(ATTNRT_ERROR_ARGUMENT,
                        "%s '%s' of block '%s': dimension %d (%s) is %lld, but %s is %lld from '%s' (expected %s)", kind,
                        s->name, b->name, i, s->dims[i].sym, (long long)got, s->dims[i].sym, (long long)*v, from, want);
        }
        if (!v) {
            if (!bind)
                return fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': dim %s is not bound by any input", kind,
                            s->name, b->name, s->dims[i].sym);
            snprintf(bd->names[bd->n], MAX_NAME, "%s", s->dims[i].sym);
            bd->values[bd->n] = got;
            bd->from[bd->n++] = s->name;
        }
    }
    int64_t expect = 1;
    for (int i = s->rank - 1; i >= 0 && tensor_bytes(x); i--) {   /* an empty tensor has no layout */
        if (x->shape[i] > 1 && x->strides[i] != expect)
            return fail(ATTNRT_ERROR_ARGUMENT,
                        "%s '%s' of block '%s' is not contiguous: stride %d is %lld, expected %lld (row-major %s)", kind,
                        s->name, b->name, i, (long long)x->strides[i], (long long)expect, want);
        expect *= x->shape[i];
    }
    if (tensor_bytes(x) && (uintptr_t)x->data % 16)   /* an empty tensor's pointer is never used */
        return fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': data pointer %p is not 16-byte aligned", kind,
                    s->name, b->name, x->data);
    return ATTNRT_OK;
}

/* PyTorch's rule for out=: an output may share memory with no input and no
 * other output (a kernel would read what another thread already wrote). */
static int check_overlap(const Block *b, const attnrt_tensor *in, int nin, const attnrt_tensor *out, int nout) {
    for (int o = 0; o < nout; o++) {
        uintptr_t lo = (uintptr_t)out[o].data, hi = lo + tensor_bytes(&out[o]);
        for (int j = 0; j < nin + o; j++) {
            const attnrt_tensor *x = j < nin ? &in[j] : &out[j - nin];
            uintptr_t xlo = (uintptr_t)x->data, xhi = xlo + tensor_bytes(x);
            if (lo < hi && xlo < xhi && lo < xhi && xlo < hi)
                return fail(ATTNRT_ERROR_ARGUMENT,
                            "output '%s' of block '%s' overlaps %s '%s' in memory; outputs may not share memory "
                            "with inputs or other outputs (as PyTorch's out=)",
                            nth_role(b, 1, o)->name, b->name, j < nin ? "input" : "output",
                            j < nin ? nth_role(b, 0, j)->name : nth_role(b, 1, j - nin)->name);
        }
    }
    return ATTNRT_OK;
}

static int check_all(const Block *b, const attnrt_tensor *in, int nin, const attnrt_tensor *out, int nout,
                     Binding *bd) {
    memset(bd, 0, sizeof *bd);
    int want_in = count_role(b, 0), want_out = count_role(b, 1);
    if (nin != want_in || (out && nout != want_out))
        return fail(ATTNRT_ERROR_ARGUMENT, "block '%s' takes %d inputs and %d outputs; got %d and %d", b->name, want_in,
                    want_out, nin, nout);
    if (nin && !in)
        return fail(ATTNRT_ERROR_ARGUMENT, "inputs is NULL");
    for (int i = 0; i < nin; i++) {
        int rc = check_tensor(b, nth_role(b, 0, i), &in[i], bd, true);
        if (rc)
            return rc;
    }
    for (int i = 0; out && i < nout; i++) {
        int rc = check_tensor(b, nth_role(b, 1, i), &out[i], bd, false);
        if (rc)
            return rc;
    }
    if (out) {
        int rc = check_overlap(b, in, nin, out, nout);
        if (rc)
            return rc;
    }
    for (int i = 0; i < b->ndims; i++)
        if (!lookup(bd, b->dims[i]))
            return fail(ATTNRT_ERROR_ARGUMENT, "block '%s': dim %s is not bound by any input", b->name, b->dims[i]);
    for (int i = 0; i < b->nasserts; i++) {
        int64_t holds;
        if (!eval_condition(b->asserts[i].expr, bd, &holds))
            return fail(ATTNRT_ERROR_MANIFEST, "block '%s': bad check '%s'", b->name, b->asserts[i].expr);
        if (!holds) {
            char dims[256] = "";
            for (int d = 0; d < bd->n; d++)
                snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%s = %lld", d ? ", " : "",
                         bd->names[d], (long long)bd->values[d]);
            return fail(ATTNRT_ERROR_ARGUMENT, "block '%s': %s (%s; the check is %s)", b->name,
                        b->asserts[i].message, dims, b->asserts[i].expr);
        }
    }
    return ATTNRT_OK;
}

int attnrt_output_shape(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs, int i,
                        int *rank, int64_t *shape) {
    Block *b = find_block(m, block);
    if (!b)
        return ATTNRT_ERROR_ARGUMENT;
    Binding bd;
    int rc = check_all(b, inputs, ninputs, NULL, count_role(b, 1), &bd);
    if (rc)
        return rc;
    const TensorSpec *t = nth_role(b, 1, i);
    if (!t)
        return fail(ATTNRT_ERROR_ARGUMENT, "block '%s' has no output %d", block, i);
    *rank = t->rank;
    for (int d = 0; d < t->rank; d++)
        shape[d] = dim_value(&bd, &t->dims[d]);
    return ATTNRT_OK;
}

/* attnrt_validate, giving back the block and the bound dims. */
static int validate(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
                    const attnrt_tensor *outputs, int noutputs, int check_pointers, Block **bp, Binding *bd) {
    Block *b = *bp = find_block(m, block);
    if (!b)
        return ATTNRT_ERROR_ARGUMENT;
    if (!outputs && noutputs)
        return fail(ATTNRT_ERROR_ARGUMENT, "outputs is NULL");
    int rc = check_all(b, inputs, ninputs, outputs, noutputs, bd);
    if (rc || !check_pointers)
        return rc;
    for (int i = 0; i < ninputs + noutputs; i++) {
        const attnrt_tensor *x = i < ninputs ? &inputs[i] : &outputs[i - ninputs];
        const TensorSpec *s = i < ninputs ? nth_role(b, 0, i) : nth_role(b, 1, i - ninputs);
        if (!tensor_bytes(x))   /* empty: its pointer is never used (PyTorch's may be 0) */
            continue;
        int dev = 0;
        if ((rc = cuda_is_device_pointer(x->data, &dev)))
            return rc;
        if (!dev)
            return fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': %p is not a CUDA device pointer",
                        i < ninputs ? "input" : "output", s->name, b->name, x->data);
    }
    return ATTNRT_OK;
}

int attnrt_validate(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
                    const attnrt_tensor *outputs, int noutputs, int check_pointers) {
    Block *b;
    Binding bd;
    return validate(m, block, inputs, ninputs, outputs, noutputs, check_pointers, &b, &bd);
}

/* ---- running --------------------------------------------------------------------- */

/* The tensor map of tm for this launch's tensor: encoded when its pointer or
 * shape changed since the last launch (the tensor is contiguous, checked).
 * An empty tensor gets a map over one element at a stand-in address: the
 * kernel copies no box that starts past a tensor's end, so it is never read
 * (codegen/tma.c's TMA copy), but the driver refuses size 0. */
static int encode_tmap(const Block *b, KernelSpec *k, TmapSpec *tm, void *const *ptrs, Binding *bd) {
    const TensorSpec *ts = &b->tensors[tm->tensor];
    int64_t shape[ATTNRT_MAX_RANK];
    bool empty = false;
    for (int d = 0; d < ts->rank; d++)
        empty |= (shape[d] = dim_value(bd, &ts->dims[d])) == 0;
    void *ptr = empty ? (void *)(uintptr_t)256 : ptrs[tm->tensor];
    if (tm->ptr == ptr && memcmp(tm->shape, shape, sizeof(int64_t) * (size_t)ts->rank) == 0)
        return ATTNRT_OK;
    uint64_t dims[ATTNRT_MAX_RANK], strides[ATTNRT_MAX_RANK];
    unsigned box[ATTNRT_MAX_RANK];
    uint64_t stride = (uint64_t)dtype_size(ts->dtype);
    for (int i = 0; i < ts->rank; i++) {   /* innermost first */
        int d = ts->rank - 1 - i;
        dims[i] = empty ? 1 : (uint64_t)shape[d];
        box[i] = tm->box[d];
        if (i)
            strides[i - 1] = stride;
        stride *= dims[i];
    }
    char what[192];
    snprintf(what, sizeof what, "(kernel %s, tensor '%s')", k->name, ts->name);
    tm->ptr = NULL;
    _Alignas(64) uint64_t map[16];   /* CUtensorMap's alignment */
    int rc = cuda_tensor_map(map, ts->dtype == ATTNRT_BF16, ts->rank, ptr, dims, strides, box, what);
    if (rc)
        return rc;
    memcpy(tm->map, map, sizeof map);
    tm->ptr = ptr;
    memcpy(tm->shape, shape, sizeof(int64_t) * (size_t)ts->rank);
    return ATTNRT_OK;
}

int attnrt_run(attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
               const attnrt_tensor *outputs, int noutputs, void *stream) {
    Block *b;
    Binding bd;
    int rc = validate(m, block, inputs, ninputs, outputs, noutputs, 1, &b, &bd);
    if (rc)
        return rc;
    if (!m->cumod && (rc = cuda_module_load(m->ptx, &m->cumod)))
        return rc;
    /* every tensor's device pointer: inputs, outputs, temporaries */
    void *ptrs[MAX_TENSORS] = {0};
    int iin = 0, iout = 0;
    for (int t = 0; t < b->ntensors; t++) {
        const TensorSpec *s = &b->tensors[t];
        if (s->role == 0)
            ptrs[t] = inputs[iin++].data;
        else if (s->role == 1)
            ptrs[t] = outputs[iout++].data;
        else {
            size_t bytes = (size_t)dtype_size(s->dtype);
            for (int d = 0; d < s->rank; d++)
                bytes *= (size_t)dim_value(&bd, &s->dims[d]);
            if (bytes && b->temp_bytes[t] < bytes) {
                if (b->temp[t]) {
                    cuda_free(b->temp[t]);
                    b->temp[t] = NULL;
                    b->temp_bytes[t] = 0;
                }
                if ((rc = cuda_malloc(&b->temp[t], bytes)))
                    return rc;
                b->temp_bytes[t] = bytes;
            }
            ptrs[t] = b->temp[t];
        }
    }
    int64_t dimvals[MAX_DIMS];
    for (int i = 0; i < b->ndims; i++)
        dimvals[i] = *lookup(&bd, b->dims[i]);
    for (int ki = 0; ki < b->nkernels; ki++) {
        KernelSpec *k = &b->kernels[ki];
        if (k->when[0]) {   /* a variant for other sizes: not this call's */
            int64_t holds;
            if (!eval_condition(k->when, &bd, &holds))
                return fail(ATTNRT_ERROR_MANIFEST, "block '%s', kernel %s: bad when= expression '%s'", b->name, k->name,
                            k->when);
            if (!holds)
                continue;
        }
        int64_t grid[3];
        if ((rc = eval_grid(b, k, &bd, grid)))
            return rc;
        if (!grid[0] || !grid[1] || !grid[2])
            continue;
        if (!k->fn && (rc = cuda_get_function(m->cumod, k->name, k->smem, &k->fn)))
            return rc;
        for (int j = 0; j < k->ntmaps; j++)
            if ((rc = encode_tmap(b, k, &k->tmaps[j], ptrs, &bd)))
                return rc;
        for (int z = 0; z < k->nzero; z++) {
            const TensorSpec *s = &b->tensors[k->zero[z]];
            size_t bytes = (size_t)dtype_size(s->dtype);
            for (int d = 0; d < s->rank; d++)
                bytes *= (size_t)dim_value(&bd, &s->dims[d]);
            if (bytes && (rc = cuda_memset_async(ptrs[k->zero[z]], 0, bytes, stream)))
                return rc;
        }
        void *params[MAX_ARGS + MAX_DIMS + 4 + MAX_TMAPS];   /* 4: y_offset, a persistent kernel's three */
        int np = 0;
        for (int i = 0; i < k->nargs; i++)
            params[np++] = &ptrs[k->args[i]];
        for (int i = 0; i < b->ndims; i++)
            params[np++] = &dimvals[i];
        /* grid.y is at most 65,535: a larger y (B·H) in slices, each told
         * its first y */
        int64_t y_total = grid[1], y_offset = 0;
        if (k->ysplit)
            params[np++] = &y_offset;
        if (k->persistent) {   /* grid[0] · grid[1] tiles (z is 1), as many blocks as fit the GPU at once */
            if (grid[0] * grid[1] > INT32_MAX / 2)   /* its tile counter is 32-bit */
                return fail(ATTNRT_ERROR_ARGUMENT, "kernel %s: %lld tiles are more than a persistent kernel counts",
                            k->name, (long long)(grid[0] * grid[1]));
            if (!k->tile_counter && (rc = cuda_malloc(&k->tile_counter, 4)))
                return rc;
            if ((rc = cuda_memset_async(k->tile_counter, 0, 4, stream)))
                return rc;
            params[np++] = &grid[0];
            params[np++] = &grid[1];
            params[np++] = &k->tile_counter;
        }
        for (int j = 0; j < k->ntmaps; j++)
            params[np++] = k->tmaps[j].map;
        if (k->persistent) {
            if (!k->resident && (rc = cuda_resident_blocks(k->fn, k->threads, k->smem, &k->resident)))
                return rc;   /* asked once per kernel, like its function */
            int64_t tiles = grid[0] * grid[1] * grid[2];
            int64_t blocks[3] = {tiles < k->resident ? tiles : k->resident, 1, 1};
            if ((rc = cuda_launch(k->fn, blocks, k->threads, k->smem, stream, params)))
                return rc;
            continue;
        }
        for (; y_offset < y_total; y_offset += 65535) {
            int64_t slice[3] = {grid[0], y_total - y_offset < 65535 ? y_total - y_offset : 65535, grid[2]};
            if ((rc = cuda_launch(k->fn, slice, k->threads, k->smem, stream, params)))
                return rc;
        }
    }
    return ATTNRT_OK;
}

/* ---- memory helpers -------------------------------------------------------------- */

int attnrt_malloc(void **ptr, size_t bytes) { return cuda_malloc(ptr, bytes); }
int attnrt_free(void *ptr) { return ptr ? cuda_free(ptr) : ATTNRT_OK; }
int attnrt_memcpy_htod(void *dst, const void *src, size_t bytes) { return cuda_copy(dst, src, bytes, 1); }
int attnrt_memcpy_dtoh(void *dst, const void *src, size_t bytes) { return cuda_copy(dst, src, bytes, 0); }
int attnrt_memset(void *dst, unsigned char byte, size_t bytes) { return cuda_memset(dst, byte, bytes); }
int attnrt_synchronize(void) { return cuda_synchronize(); }
