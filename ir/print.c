/* print.c — the generic textual form of the IR.
 *
 *   %0, %1 = dialect.op(%a, %b) ({
 *   ^bb0(%x: f32):
 *     ...
 *   }) {key = value, ...} : type0, type1 loc("file.attn":3:5)
 *
 * Values print under their name hint (deduplicated with _1, _2 ...) or a
 * number; names restart inside ops flagged OPF_ISOLATED, and the names taken
 * inside a region are free again once it closes. A region whose one
 * block has no arguments and at least one op omits the ^bb0: label.
 */
#include "ir.h"

#include <ctype.h>
#include <string.h>

void print_attr_dict(FILE *f, const NamedAttr *list, int n);
void print_quoted(FILE *f, const char *s);

typedef struct Printer {
    FILE *f;
    Arena arena;
    Map names;      /* Value* -> printed name */
    Map used;       /* printed name -> non-NULL, within the current scope */
    PtrVec defined; /* names in the order they were taken, to release at region end */
    int next_number;
    PrintOptions opts;
} Printer;

static const char *value_name(Printer *p, const Value *v) {
    const char *name = map_get(&p->names, v);
    if (name)
        return name;
    if (v->name && v->name[0]) {
        name = v->name;
        for (int k = 1; map_get(&p->used, name); k++)
            name = arena_printf(&p->arena, "%s_%d", v->name, k);
    } else {
        do
            name = arena_printf(&p->arena, "%d", p->next_number++);
        while (map_get(&p->used, name));
    }
    map_put(&p->arena, &p->used, name, (void *)1);
    map_put(&p->arena, &p->names, v, (void *)name);
    vec_push(&p->arena, &p->defined, (void *)name);
    return name;
}

static void indent(Printer *p, int depth) {
    for (int i = 0; i < depth; i++)
        fputs("  ", p->f);
}

static void print_op(Printer *p, const Op *op, int depth);

static bool block_needs_label(const Region *r, const Block *b) {
    return r->nblocks > 1 || b->nargs > 0 || !b->first;
}

/* Names taken inside a region are free again after it: sibling hooks can
 * both call their arguments %b, %h, %i, %j. */
static void print_region(Printer *p, const Region *r, int depth) {
    int mark = p->defined.len;
    fputs("{\n", p->f);
    for (int bi = 0; bi < r->nblocks; bi++) {
        const Block *b = r->blocks[bi];
        if (block_needs_label(r, b)) {
            indent(p, depth);
            fprintf(p->f, "^bb%d", bi);
            if (b->nargs) {
                fputc('(', p->f);
                for (int i = 0; i < b->nargs; i++) {
                    fprintf(p->f, "%s%%%s: ", i ? ", " : "", value_name(p, b->args[i]));
                    print_type(p->f, b->args[i]->type);
                }
                fputc(')', p->f);
            }
            fputs(":\n", p->f);
        }
        for_each_op(op, b) print_op(p, op, depth + 1);
    }
    indent(p, depth);
    fputc('}', p->f);
    for (int i = mark; i < p->defined.len; i++)
        map_put(&p->arena, &p->used, p->defined.items[i], NULL);
    p->defined.len = mark;
}

static void print_op(Printer *p, const Op *op, int depth) {
    indent(p, depth);
    /* Results are named before the regions so numbering follows the text. */
    for (int i = 0; i < op->nresults; i++)
        fprintf(p->f, "%s%%%s", i ? ", " : "", value_name(p, op->results[i]));
    if (op->nresults)
        fputs(" = ", p->f);
    fputs(op_info[op->kind].name, p->f);
    if (op->noperands) {
        fputc('(', p->f);
        for (int i = 0; i < op->noperands; i++)
            fprintf(p->f, "%s%%%s", i ? ", " : "", value_name(p, op->operands[i]));
        fputc(')', p->f);
    }
    if (op->nregions) {
        Printer saved = *p;
        if (op_info[op->kind].flags & OPF_ISOLATED) {
            map_init(&p->used, true);
            p->next_number = 0;
        }
        fputs(" (", p->f);
        for (int i = 0; i < op->nregions; i++) {
            if (i)
                fputs(", ", p->f);
            print_region(p, &op->regions[i], depth);
        }
        fputc(')', p->f);
        if (op_info[op->kind].flags & OPF_ISOLATED) {
            p->used = saved.used;
            p->next_number = saved.next_number;
        }
    }
    if (op->nattrs) {
        fputc(' ', p->f);
        print_attr_dict(p->f, op->attrs, op->nattrs);
    }
    if (op->nresults) {
        fputs(" : ", p->f);
        for (int i = 0; i < op->nresults; i++) {
            if (i)
                fputs(", ", p->f);
            print_type(p->f, op->results[i]->type);
        }
    }
    if (p->opts.locations && op->loc.file) {
        fputs(" loc(", p->f);
        print_quoted(p->f, op->loc.file);
        fprintf(p->f, ":%d:%d)", op->loc.line, op->loc.col);
    }
    fputc('\n', p->f);
}

void ir_print(FILE *f, const Op *op, PrintOptions opts) {
    Printer p = {.f = f, .opts = opts};
    map_init(&p.names, false);
    map_init(&p.used, true);
    print_op(&p, op, 0);
    arena_free(&p.arena);
}

char *ir_print_to_string(Arena *a, const Op *op, PrintOptions opts, size_t *len) {
    StrBuf b;
    strbuf_open(&b);
    ir_print(b.f, op, opts);
    return strbuf_finish(&b, a, len);
}

bool ir_roundtrip_check(Arena *a, const Op *root, PrintOptions opts, Diag *d) {
    size_t len1, len2;
    char *first = ir_print_to_string(a, root, opts, &len1);
    Source src = {.name = "<roundtrip>", .text = first, .len = len1};
    Op *again = ir_parse(a, d, &src);
    if (!again)
        return false;
    char *second = ir_print_to_string(a, again, opts, &len2);
    if (len1 == len2 && memcmp(first, second, len1) == 0)
        return true;
    size_t line = 1, i = 0;
    while (i < len1 && i < len2 && first[i] == second[i])
        if (first[i++] == '\n')
            line++;
    diag_plain(d, "IR round trip differs at line %zu of the printed IR", line);
    return false;
}
