/* manifest.c — the manifest attnc writes as comments in its PTX
 * (doc/runtime.md): parsed line by line into blocks, tensors and kernels,
 * each malformed line an error naming it; loading and unloading a module;
 * the blocks' names, arities and tensors. */
#include "runtime/rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_loader.h"

/* ---- the manifest -------------------------------------------------------------- */


int dtype_size(attnrt_dtype t) {
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

/* The manifest versions this runtime reads (manifest.h): a version 4
 * manifest reads as one of 5 (which added a value, swizzle=none). */
enum { MANIFEST_VERSION = ATTNC_MANIFEST_VERSION, MANIFEST_OLDEST = 4 };

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
            return rt_fail(ATTNRT_ERROR_MANIFEST,
                        "manifest line %d: key '%s' of '%s' is not known to this runtime (manifest %d)", lineno,
                        e->key[i], e->what, MANIFEST_VERSION);
    return ATTNRT_OK;
}

/* Splits "a,b,c" (or ';'-separated) into at most max words. */
static int split_list(char *s, char sep, char **out, int max) {
    int n = 0;
    if (!*s || strcmp(s, "-") == 0)
        return 0;
    for (char *w = s; w;) {
        if (n == max)
            return max + 1;   /* more than out holds: the caller refuses, never drops the rest */
        char *next = strchr(w, sep);
        if (next)
            *next++ = 0;
        out[n++] = w;
        w = next;
    }
    return n;
}

/* A name the manifest gives into a field of MAX_NAME bytes; false (and
 * nothing copied) when it would not fit whole. */
static bool copy_name(char *dst, const char *name) {
    if (strlen(name) >= MAX_NAME)
        return false;
    memcpy(dst, name, strlen(name) + 1);
    return true;
}

#define NAME_FITS(dst, name)                                                                              \
    if (!copy_name(dst, name))                                                                            \
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: the name '%.20s...' is longer than %d characters", \
                       lineno, name, MAX_NAME - 1);

/* The entry's value of key, or a message that it lacks one. */
#define NEED(v, key)                                                                                      \
    const char *v = get(e, key);                                                                          \
    if (!v)                                                                                               \
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: '%s' needs %s=", lineno, e->what, key);

/* target name=T: the target the PTX is for */
static int entry_target(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    NEED(name, "name");
    snprintf(m->target, sizeof m->target, "%s", name);
    return ATTNRT_OK;
}

/* block name=N kind=K: a new block; the entries up to end belong to it */
static int entry_block(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    NEED(name, "name");
    get(e, "kind");
    Block *nb = realloc(m->blocks, sizeof(Block) * (size_t)(m->nblocks + 1));
    if (!nb)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "out of memory reading the manifest");
    m->blocks = nb;
    Block *cur = *curp = &m->blocks[m->nblocks++];
    memset(cur, 0, sizeof *cur);
    NAME_FITS(cur->name, name);
    return ATTNRT_OK;
}

/* dims names=A,B: the block's dims */
static int entry_dims(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    Block *cur = *curp;
    NEED(names, "names");
    char buf[1024], *w[MAX_DIMS];
    snprintf(buf, sizeof buf, "%s", names);
    int n = split_list(buf, ',', w, MAX_DIMS);
    if (cur->ndims + n > MAX_DIMS)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d dims", lineno, MAX_DIMS);
    for (int i = 0; i < n; i++) {
        NAME_FITS(cur->dims[cur->ndims], w[i]);
        cur->ndims++;
    }
    return ATTNRT_OK;
}

/* tensor role=in|out|tmp name=N dtype=T shape=[...] */
static int entry_tensor(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    Block *cur = *curp;
    NEED(role, "role");
    NEED(name, "name");
    NEED(dtype, "dtype");
    NEED(shape, "shape");
    if (cur->ntensors == MAX_TENSORS)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d tensors", lineno, MAX_TENSORS);
    TensorSpec *t = &cur->tensors[cur->ntensors++];
    t->role = strcmp(role, "in") == 0 ? 0 : strcmp(role, "out") == 0 ? 1 : strcmp(role, "tmp") == 0 ? 2 : -1;
    NAME_FITS(t->name, name);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", shape);
    if (t->role < 0 || !dtype_parse(dtype, &t->dtype) || !parse_shape(buf, t))
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: bad tensor '%s'", lineno, name);
    const char *units = get(e, "stride_units");   /* each dim's but the innermost: powers of two to 16 bytes */
    int nunits = 0;
    if (units) {
        char ubuf[256], *w[ATTNRT_MAX_RANK + 1];
        snprintf(ubuf, sizeof ubuf, "%s", units);
        nunits = split_list(ubuf, ',', w, ATTNRT_MAX_RANK + 1);
        for (int d = 0; d < nunits && d < t->rank; d++) {
            char *end;
            long long u = strtoll(w[d], &end, 10);
            if (*end || end == w[d] || u < 1 || u * dtype_size(t->dtype) > 16 || (u & (u - 1)))
                nunits = -1;
            else
                t->stride_unit[d] = u;
        }
    }
    if (nunits != (t->rank > 1 ? t->rank - 1 : 0))
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: tensor '%s' needs stride_units=, a power of two of "
                       "at most 16 bytes for each dim but the innermost", lineno, name);
    if (t->rank)
        t->stride_unit[t->rank - 1] = 1;
    for (int d = 0; d < t->rank; d++) {   /* each symbolic dim one the block declared */
        bool declared = !t->dims[d].sym[0];
        for (int i = 0; i < cur->ndims && !declared; i++)
            declared = strcmp(cur->dims[i], t->dims[d].sym) == 0;
        if (!declared)
            return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: tensor '%s' has dim '%s', which the block's dims "
                           "line does not name", lineno, name, t->dims[d].sym);
    }
    return ATTNRT_OK;
}

/* kernel name=N grid=X;Y;Z threads=T smem=S args=A,B [ysplit=1] [persistent=counter] [when=C] [zero=A,B] */
static int entry_kernel(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    Block *cur = *curp;
    NEED(name, "name");
    NEED(grid, "grid");
    NEED(threads, "threads");
    NEED(smem, "smem");
    NEED(args, "args");
    if (cur->nkernels == MAX_KERNELS)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d kernels", lineno, MAX_KERNELS);
    KernelSpec *k = &cur->kernels[cur->nkernels++];
    NAME_FITS(k->name, name);
    char buf[1024], *w[MAX_ARGS];
    snprintf(buf, sizeof buf, "%s", grid);
    if (split_list(buf, ';', w, 3) != 3)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: grid= needs three expressions", lineno);
    for (int g = 0; g < 3; g++)
        snprintf(k->grid[g], sizeof k->grid[g], "%s", w[g]);
    k->threads = atoi(threads);
    k->smem = atoll(smem);
    const char *ysplit = get(e, "ysplit");   /* optional */
    k->ysplit = ysplit && strcmp(ysplit, "1") == 0;
    const char *persistent = get(e, "persistent");   /* optional: "counter", the one kind there is */
    if (persistent && strcmp(persistent, "counter") != 0)
        return rt_fail(ATTNRT_ERROR_MANIFEST,
                    "manifest line %d: persistent=%s is not a kind this libattnrt knows (it knows 'counter': "
                    "recompile the block with this attnc)",
                    lineno, persistent);
    k->persistent = persistent != NULL;
    if (k->persistent && strcmp(k->grid[2], "1") != 0)   /* its blocks loop over x and y only */
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: a persistent kernel needs grid z = 1, not '%s'",
                    lineno, k->grid[2]);
    snprintf(buf, sizeof buf, "%s", args);
    int n = split_list(buf, ',', w, MAX_ARGS);
    if (n > MAX_ARGS)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d arguments", lineno, MAX_ARGS);
    for (int i = 0; i < n; i++) {
        int t = tensor_index(cur, w[i]);
        if (t < 0)
            return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: unknown tensor '%s'", lineno, w[i]);
        k->args[k->nargs++] = t;
    }
    const char *when = get(e, "when");   /* optional */
    if (when && strlen(when) >= sizeof k->when)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: when= is longer than %d characters", lineno,
                    (int)sizeof k->when - 1);
    snprintf(k->when, sizeof k->when, "%s", when ? when : "");
    const char *zero = get(e, "zero");   /* optional */
    if (zero) {
        snprintf(buf, sizeof buf, "%s", zero);
        n = split_list(buf, ',', w, MAX_ARGS);
        if (n > MAX_ARGS)
            return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d tensors in zero=", lineno, MAX_ARGS);
        for (int i = 0; i < n; i++) {
            int t = tensor_index(cur, w[i]);
            if (t < 0)
                return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: unknown tensor '%s' in zero=", lineno, w[i]);
            if (cur->tensors[t].role != 2)   /* cleared whole with a memset: a caller's strided tensor is not */
                return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: zero= names '%s', which is not a temporary",
                               lineno, w[i]);
            k->zero[k->nzero++] = t;
        }
    }
    return ATTNRT_OK;
}

/* tmap kernel=K tensor=T box=A,B swizzle=128|none: a tensor map of the kernel line before it */
static int entry_tmap(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    Block *cur = *curp;
    /* belongs to the kernel line before it */
    NEED(kernel, "kernel");
    NEED(tensor, "tensor");
    NEED(box, "box");
    NEED(swizzle, "swizzle");
    KernelSpec *k = cur->nkernels ? &cur->kernels[cur->nkernels - 1] : NULL;
    if (!k || strcmp(k->name, kernel) != 0)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: tmap of kernel '%s' does not follow its kernel line",
                    lineno, kernel);
    if (k->ntmaps == MAX_TMAPS)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d tensor maps", lineno, MAX_TMAPS);
    TmapSpec *tm = &k->tmaps[k->ntmaps++];
    tm->tensor = tensor_index(cur, tensor);
    if (tm->tensor < 0)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: unknown tensor '%s'", lineno, tensor);
    const TensorSpec *ts = &cur->tensors[tm->tensor];
    if (ts->dtype != ATTNRT_F16 && ts->dtype != ATTNRT_BF16 && ts->dtype != ATTNRT_F32)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: tmap of a %s tensor (TMA maps f16, bf16 and f32)", lineno,
                    attnrt_dtype_name(ts->dtype));
    if (strcmp(swizzle, "128") != 0 && strcmp(swizzle, "none") != 0)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: swizzle=%s is not known to this runtime", lineno,
                    swizzle);
    tm->swizzle128 = strcmp(swizzle, "128") == 0;
    char buf[256], *w[ATTNRT_MAX_RANK + 1];
    snprintf(buf, sizeof buf, "%s", box);
    int n = split_list(buf, ',', w, ATTNRT_MAX_RANK + 1);
    if (n != ts->rank || n > 5)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: box=%s needs one size per dim of '%s' (at most 5)",
                    lineno, box, tensor);
    for (int i = 0; i < n; i++) {
        char *end;
        long v = strtol(w[i], &end, 10);
        if (*end || v < 1 || v > 256)
            return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: box size '%s' is not in 1..256", lineno, w[i]);
        tm->box[i] = (unsigned)v;
    }
    return ATTNRT_OK;
}

/* assert expr=E message=M: checked at each call */
static int entry_assert(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    Block *cur = *curp;
    NEED(expr, "expr");
    NEED(message, "message");
    if (cur->nasserts == 8)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than 8 asserts", lineno);
    Assert *as = &cur->asserts[cur->nasserts++];
    snprintf(as->expr, sizeof as->expr, "%s", expr);
    snprintf(as->message, sizeof as->message, "%s", message);
    return ATTNRT_OK;
}

/* let name=X expr=E: dim X (the dims line names it) computed from the
 * others and $sms at each run */
static int entry_let(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    Block *cur = *curp;
    NEED(name, "name");
    NEED(expr, "expr");
    if (cur->nlets == (int)(sizeof cur->lets / sizeof *cur->lets))
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: more than %d lets", lineno,
                       (int)(sizeof cur->lets / sizeof *cur->lets));
    int dim = -1;
    for (int i = 0; i < cur->ndims; i++)
        if (strcmp(cur->dims[i], name) == 0)
            dim = i;
    if (dim < 0 || dim_is_let(cur, dim))
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: let '%s' is not a dim of the block's dims line, or "
                       "is one twice", lineno, name);
    if (strlen(expr) >= sizeof cur->lets[0].expr)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: let '%s' is longer than %d characters", lineno, name,
                       (int)sizeof cur->lets[0].expr - 1);
    Let *l = &cur->lets[cur->nlets++];
    l->dim = dim;
    snprintf(l->expr, sizeof l->expr, "%s", expr);
    return ATTNRT_OK;
}

bool dim_is_let(const Block *b, int i) {
    for (int k = 0; k < b->nlets; k++)
        if (b->lets[k].dim == i)
            return true;
    return false;
}

/* end: the block's last entry */
static int entry_end(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    *curp = NULL;
    return ATTNRT_OK;
}

#undef NEED

/* The manifest's entries, each read by its function; every entry but
 * target and block belongs to the block before it. */
static const struct {
    const char *what;
    int (*read)(attnrt_module *m, Block **curp, Entry *e, int lineno);
    bool in_block;
} entries[] = {
    {"target", entry_target, false},
    {"block", entry_block, false},
    {"dims", entry_dims, true},
    {"tensor", entry_tensor, true},
    {"kernel", entry_kernel, true},
    {"tmap", entry_tmap, true},
    {"assert", entry_assert, true},
    {"let", entry_let, true},
    {"end", entry_end, true},
};

static int parse_entry(attnrt_module *m, Block **curp, Entry *e, int lineno) {
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        if (strcmp(e->what, entries[i].what) != 0)
            continue;
        if (entries[i].in_block && !*curp)
            return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: '%s' outside a block", lineno, e->what);
        int rc = entries[i].read(m, curp, e, lineno);
        return rc != ATTNRT_OK ? rc : check_all_read(e, lineno);
    }
    return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: unknown entry '%s'", lineno, e->what);
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
            return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d is too long", lineno);
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
            if (version < MANIFEST_OLDEST || version > MANIFEST_VERSION)
                return rt_fail(ATTNRT_ERROR_MANIFEST,
                            "manifest version %d is not supported (this runtime reads %d to %d): compile the block "
                            "again with the attnc that matches this libattnrt",
                            version, MANIFEST_OLDEST, MANIFEST_VERSION);
            header = true;
            continue;
        }
        Entry e;
        if (!split_entry(line + 3, &e))
            return rt_fail(ATTNRT_ERROR_MANIFEST, "manifest line %d: malformed (expected 'entry key=value ...')",
                        lineno);
        if (!*e.what)
            continue;
        int rc = parse_entry(m, &cur, &e, lineno);
        if (rc)
            return rc;
    }
    if (!header)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "no attnc manifest at the head of the PTX (was it written by attnc?)");
    /* attnc ends each block with an end line: a manifest cut short (a
     * partial copy, a cut file) stops inside a block */
    if (cur)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "the manifest stops inside block '%s' (line %d, no end line): it is cut "
                       "short; compile the block again", cur->name, lineno);
    if (m->nblocks == 0)
        return rt_fail(ATTNRT_ERROR_MANIFEST, "the manifest names no blocks");
    return ATTNRT_OK;
}

int attnrt_load_data(const char *ptx, size_t len, attnrt_module **out) {
    *out = NULL;
    if (!ptx)
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "ptx is NULL");
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
        return rt_fail(ATTNRT_ERROR_IO, "cannot open '%s'", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)(n > 0 ? n : 1));
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    if (n < 0 || got != (size_t)n) {
        free(buf);
        return rt_fail(ATTNRT_ERROR_IO, "cannot read '%s'", path);
    }
    int rc = attnrt_load_data(buf, got, out);
    free(buf);
    if (rc == ATTNRT_ERROR_MANIFEST) {
        char msg[1024];   /* (the message is rewritten from itself) */
        snprintf(msg, sizeof msg, "%s", attnrt_last_error());
        rt_fail(rc, "%.256s: %.700s", path, msg);
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

Block *find_block(const attnrt_module *m, const char *name) {
    if (!m) {
        rt_fail(ATTNRT_ERROR_ARGUMENT, "module is NULL");
        return NULL;
    }
    for (int i = 0; i < m->nblocks; i++)
        if (name && strcmp(m->blocks[i].name, name) == 0)
            return &m->blocks[i];
    char names[512] = "";
    for (int i = 0; i < m->nblocks; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", m->blocks[i].name);
    rt_fail(ATTNRT_ERROR_ARGUMENT, "no block '%s' in this module (it has: %s)", name ? name : "(null)", names);
    return NULL;
}

int count_role(const Block *b, int role) {
    int n = 0;
    for (int i = 0; i < b->ntensors; i++)
        n += b->tensors[i].role == role;
    return n;
}

const TensorSpec *nth_role(const Block *b, int role, int i) {
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
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s' has no %s %d", block, is_output ? "output" : "input", i);
    *name = t->name;
    *dtype = t->dtype;
    if (rank)
        *rank = t->rank;
    for (int d = 0; shape && d < t->rank; d++)
        shape[d] = t->dims[d].sym[0] ? -1 : t->dims[d].size;
    return ATTNRT_OK;
}
