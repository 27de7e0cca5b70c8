/* support.h — the pieces every stage of attnc uses.
 *
 *   arena.c   one bump allocator per compilation; nothing is freed alone
 *   diag.c    clang-style diagnostics: file:line:col, source line, caret range
 *   file.c    reading inputs, writing outputs (atomically where safe)
 */
#ifndef ATTNC_SUPPORT_H
#define ATTNC_SUPPORT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ATTNC_VERSION "0.1.0"

/* Internal invariants fail loudly with the place they were broken. */
/* The tool die() names (attnc, attnc-opt: each main sets it). */
extern const char *die_tool;
_Noreturn void die_at(const char *file, int line, const char *fmt, ...);
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define unreachable() die("unreachable")

/* ---- arena.c ---------------------------------------------------------- */

/* A compilation allocates from one arena and frees it in one go at the end
 * (chibicc's choice, made explicit): no pass frees anything. */
typedef struct ArenaChunk ArenaChunk;
typedef struct Arena {
    ArenaChunk *head;
} Arena;

void *arena_alloc(Arena *a, size_t size);              /* zeroed */
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

#define NEW(arena, T) ((T *)arena_alloc((arena), sizeof(T)))
#define NEW_ARRAY(arena, T, n) ((T *)arena_alloc((arena), sizeof(T) * (size_t)(n)))

/* A growable array of pointers living in an arena. */
typedef struct PtrVec {
    void **items;
    int len, cap;
} PtrVec;
void vec_push(Arena *a, PtrVec *v, void *item);

/* ---- diag.c ------------------------------------------------------------ */

/* A source range: 1-based line and column of the first and last character. */
typedef struct Loc {
    int line, col;
    int end_line, end_col;
} Loc;

typedef struct Source {
    const char *name;   /* as given on the command line */
    const char *text;   /* whole file, NUL-terminated (may contain NULs) */
    size_t len;
    int line_offset;    /* added to every reported line (split-input-file) */
} Source;

typedef struct DiagHeld {
    int line, col, seq;   /* where it points (INT_MAX: nowhere), the order it came in */
    char *text;           /* the report with its source line and caret, and its notes */
    size_t len;
} DiagHeld;

typedef struct Diag {
    FILE *out;          /* where diagnostics go (stderr, or /dev/null) */
    int errors, warnings;
    bool holding;       /* diag_hold ... diag_release: reports kept, then written in source order */
    DiagHeld *held;
    int nheld, held_cap;
    int max_errors;     /* stop reporting after this many */
    const char *tool;   /* prefix of errors without a position ("attnc") */
    Source source;      /* the file being compiled (frontend_compile; its text
                           is arena memory): errors at an IR op's position
                           quote its line */
} Diag;

void diag_init(Diag *d, FILE *out);
/* Reports from diag_hold on are kept, each with its notes, and written by
 * diag_release sorted by their position: a block's errors in source order,
 * whatever order its checks ran in. */
void diag_hold(Diag *d);
void diag_release(Diag *d);
/* The length of the well-formed UTF-8 character at s (n bytes left), or 0. */
int utf8_sequence_length(const unsigned char *s, size_t n);
void diag_error(Diag *d, const Source *src, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void diag_warning(Diag *d, const Source *src, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void diag_note(Diag *d, const Source *src, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* An error with no source position (bad flag, unreadable file). */
void diag_plain(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- file.c ------------------------------------------------------------ */

/* Reads a whole file ("-" is stdin) into the arena. NULL and errno on failure. */
char *read_file(Arena *a, const char *path, size_t *len);

/* Writes text to path the way clang and LLVM do. "-" or NULL is stdout. A
 * regular file (or a new one) is replaced atomically: a temp file beside it,
 * then rename(2), keeping the old mode; a symlink is followed and its target
 * replaced. Anything that is not a plain single-link file — a character
 * device such as /dev/null, a FIFO, a file with hard links — is opened and
 * written through, never replaced. Returns false with a message in *err. */
bool write_output_file(const char *path, const char *text, size_t len, char *err, size_t errlen);
/* True when both paths name one existing file (stdin/stdout "-" never do). */
bool same_file(const char *a, const char *b);

/* An in-memory output stream (open_memstream) used by the printers. */
typedef struct StrBuf {
    FILE *f;
    char *data;
    size_t len;
} StrBuf;
void strbuf_open(StrBuf *b);
char *strbuf_finish(StrBuf *b, Arena *a, size_t *len);  /* copies into the arena */



/* ---- map.c -------------------------------------------------------------- */

/* Open-addressing hash maps in an arena: pointer keys, or string keys. */
typedef struct Map {
    int cap, len;
    const void **keys;
    void **vals;
    bool strings;      /* keys are NUL-terminated strings compared by content */
} Map;
void map_init(Map *m, bool string_keys);
void *map_get(const Map *m, const void *key);
void map_put(Arena *a, Map *m, const void *key, void *val);
void map_copy(Arena *a, Map *to, const Map *from);   /* to: a fresh map with from's entries */
#endif
