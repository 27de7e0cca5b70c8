#!/usr/bin/env python3
"""block_order_model.py — a model of the order the backward's key-tile
blocks start in, over the quick protocol's causal rows (B·N = 16k, H =
2048 / D, 128 keys a block, 64 queries a step): each block's work is its
query tiles (key tile j0 sees the tiles from j0 on) plus one, the blocks
start in list order on the first free one of `slots` (132 SMs, one or two
blocks each), and the efficiency is the ideal time (all work over the
slots) over the last block's end. No GPU: it says what order could gain,
not what the GPU does (doc/backward.md, "Block order").

    python3 bench/probes/block_order_model.py

Orders: head by head (the grid's own), longest first in sections of
max(1, 256 / key tiles) heads (passes/tiling_backward.c block_order), and
longest first over every head.
"""
import heapq

SLOTS = (132, 264)
SECTION_BLOCKS = 256


def finish(work, slots):
    free = [0.0] * slots
    end = 0.0
    for w in work:
        t = heapq.heappop(free) + w
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def orders(heads, tiles, work):
    per = max(1, SECTION_BLOCKS // tiles)
    sections = [work(k) for s0 in range(0, heads, per) for k in range(tiles) for _ in range(s0, min(heads, s0 + per))]
    return {
        "head by head": [work(k) for _ in range(heads) for k in range(tiles)],
        "sections": sections,
        "longest first": [work(k) for k in range(tiles) for _ in range(heads)],
    }


def main():
    print("| D | N | heads | slots | " + " | ".join(orders(1, 1, lambda k: 1)) + " |")
    print("|---|---|---|---|---|---|---|")
    for d in (64, 128):
        for n in (1024, 4096, 16384):
            heads, tiles = (16384 // n) * (2048 // d), n // 128
            work = lambda k: (n - 128 * k) / 64 + 1  # noqa: E731
            total = heads * sum(work(k) for k in range(tiles))
            for slots in SLOTS:
                eff = [total / slots / finish(o, slots) for o in orders(heads, tiles, work).values()]
                print(f"| {d} | {n} | {heads} | {slots} | " + " | ".join(f"{e:.3f}" for e in eff) + " |")


if __name__ == "__main__":
    main()
