/* tiling.h — what the tiling pass's files share (internal): tiling.c holds
 * the pass, the tile sizes and the builders of launches, loops and loads;
 * tiling_gemm.c, tiling_attention.c, tiling_backward.c and tiling_rows.c
 * each tile one kind of op. */
#ifndef ATTNC_TILING_H
#define ATTNC_TILING_H

#include "ir/builder.h"
#include "passes/passes.h"
#include "target/schedule.h"
#include "target/target.h"

/* What the default attention tile depends on besides the head dim: whether
 * the keys a row sees follow the row (an exact band from mask-analysis with
 * a row term: causal, windows), and else whether the hooks read a tensor
 * per key. */
typedef enum { KEYS_ALL, KEYS_GATHERED, KEYS_FOLLOW_ROW } KeyShape;

/* The key tiles a program's rows [r0, r0 + BM) visit, as segments of
 * [start, end): without a band, all of [0, Nk), masked. With one, only the
 * range its rows can see (start rounded down to a tile); with an exact band,
 * split into a masked edge, an unmasked interior (tiles every row sees
 * entirely, inside Nk) and a masked edge. Tiles outside are never visited. */
typedef struct Segment {
    Value *start, *end;
    bool masked;
} Segment;

/* tiling.c: loads, stores and yields of boxes; launches and loops; a
 * scalar region made elementwise over tiles; an op replaced by what a
 * builder made; the tile sizes */
Value *t_load(Builder *b, Value *mem, Value **index, const int *dims, Type *t, double pad);
void t_store(Builder *b, Value *mem, Value *tile, Value **index, const int *dims);
void t_atomic_add(Builder *b, Value *mem, Value *tile, Value **index, const int *dims);   /* (t_store's box) */
void t_store_bounded(Builder *b, Value *mem, Value *tile, Value **index, const int *dims, int bound_dim,
                     Value *bound);
void t_yield(Builder *b, int n, Value **vals);
Type *memref_of(Arena *a, const Type *t);
Op *make_launch(Builder *outer, SrcLoc loc, Value **grid, int nin, Value **inputs, int nres, Type **types, const char **names, Value ***args);
Op *new_launch(Builder *outer, const Op *op, Value **grid, int nin, Value **inputs, Value ***args);
Op *new_for(Builder *b, Value *lb, Value *ub, Value *step, int n, Value **init, Builder *body, Value **iv, Value ***carried);
Value *vectorise(Builder *b, const Block *region, Value **args, const Map *memrefs);
void replace_with(PassContext *ctx, Op *op, Block *tmp, Value **results);
void replace_with_launch(PassContext *ctx, Op *op, Block *tmp, Op *l);
int64_t schedule_tile(const Op *func, const char *arch, int axis, int64_t fallback);
void schedule_on_launch(PassContext *ctx, const Op *func, Op *launch);
int64_t default_tile(const char *arch, bool attention, int axis, int64_t D, KeyShape keys, bool lean);
int64_t fit_keys(const char *arch, const Op *func, int64_t BM, int64_t BN, int64_t D);
/* a dim the host computes before the launches (decode's split count, the
 * backward's query tiles): a name no dim of func has, and its definition */
const char *fresh_dim_name(Arena *a, const Op *func, const char *name);
void define_dim(PassContext *ctx, Builder *outer, const Op *op, const char *name, Value *count);

/* tiling_attention.c, shared with the backward: a mask's band at row i, the
 * tensors the hooks read, the key segments a query tile visits */
Value *band_at(Builder *b, const Attr *bound, Value *i);
void collect_side_tensors(const Op *att, Arena *a, PtrVec *out);
void add_side_tensor(Arena *a, PtrVec *side, Value *x);   /* (unless there) */
int key_segments(Builder *b, const Op *att, int mask_region, Value *r0, int64_t BM, int64_t BN, Value *nk, Segment *seg);
/* packed sequences (attn.pad): the attn.pad operand of att reads through,
 * or NULL; the i32 element of memref mem at n indices, as an index; the
 * sequence and first row (*r0) of program p of those making a tile of
 * `rows` rows of every one of B sequences in order, their rows at offsets
 * cu (a scan of cu; past the last tile, sequence B); the mask's key-count
 * conjunct (the frontend's, marked key_count) made true, the kernels ending
 * each sequence's keys at its count */
const Op *padded(const Op *att, int operand);
Value *read_index(Builder *b, Value *mem, int n, Value **idx);
Value *sequence_of_tile(Builder *b, Value *p, Value *cu, Value *B, int64_t rows, Value **r0);
/* query tile p of `rows` rows (sequence_of_tile over cu_q): its sequence,
 * first row in it, the sequence's first rows of q and k, its key count and
 * the end of its rows of q */
typedef struct QueryTile {
    Value *seq, *r0, *q_start, *k_start, *nk, *q_end;
} QueryTile;
QueryTile sequence_query_tile(Builder *b, Value *p, Value *cu_q, Value *cu_k, Value *B, int64_t rows);
void drop_key_count(Arena *a, Op *att, int mask_region);

/* one file each: a kind of op made a tile.launch */
bool tile_gemm(PassContext *ctx, Op *func, Op *g);
bool tile_attention(PassContext *ctx, Op *func, Op *att);
bool tile_attention_backward(PassContext *ctx, Op *func, Op *op);
bool is_row_op(const Op *op);
bool tile_rows(PassContext *ctx, Op *func, Op *op);

/* the broken twin test-tiling-rows-round-down: attention's query tiles
 * counted rounding down */
extern bool tiling_rows_round_down;
/* the broken twin test-tiling-split-round-down: a split's key tiles
 * counted rounding down, so the last keys are in no split */
extern bool tiling_split_round_down;
/* the broken twin test-tiling-pages-in-order: a paged cache's pages read
 * in order (batch b's key j on page b·max_pages + j // page_size), the
 * block table ignored */
extern bool tiling_pages_in_order;
/* test-tiling-sequences-unbounded: packed sequences' stores not bounded by
 * the sequence's end (a tile's rows past it land in the next sequence's) */
extern bool tiling_sequences_unbounded;

#endif
