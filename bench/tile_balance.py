#!/usr/bin/env python3
"""tile_balance.py — how evenly a persistent kernel's blocks share causal
tiles, without a GPU: the slowest block's work over the mean (1.00 is a
perfect balance), for bench.py's shapes (batch·N = 16384, heads =
2048 / head dim, 128 × 128 tiles: row tile x has x + 1 key tiles).

    python3 bench/tile_balance.py [--blocks 132]

Orders compared:
  x-first    t -> (t % tiles_x, t / tiles_x), round-robin (t = b, b + G, ...)
  sections   codegen's tile_order: sections of max(1, 256 / tiles_x) heads,
             row tiles last to first, round-robin
  dynamic    the same order, each tile to the block that is free first (an
             atomic tile counter, FlashAttention-3's scheduler)
  hardware   a non-persistent grid (x fastest), blocks started as others end
"""
import argparse
import heapq


def order(tiles_x, tiles_y, section_tiles=None):
    if section_tiles is None:   # 2026-12-01's
        return [(t % tiles_x, t // tiles_x) for t in range(tiles_x * tiles_y)]
    s = max(1, section_tiles // tiles_x)
    out = []
    for first in range(0, tiles_y, s):
        heads = min(s, tiles_y - first)
        out += [(tiles_x - 1 - r // heads, first + r % heads) for r in range(tiles_x * heads)]
    return out


def imbalance(tiles, blocks, dynamic):
    work = [x + 1 for x, _ in tiles]
    if dynamic:
        heap = [(0, b) for b in range(blocks)]
        for w in work:
            load, b = heapq.heappop(heap)
            heapq.heappush(heap, (load + w, b))
        loads = [load for load, _ in heap]
    else:
        loads = [0] * blocks
        for t, w in enumerate(work):
            loads[t % blocks] += w
    return max(loads) / (sum(work) / blocks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=132, help="resident blocks (the H200's SMs, one block each)")
    g = ap.parse_args().blocks
    print("head dim   N      tiles  x-first   sections  dynamic  hardware")
    for d in (64, 128, 256):
        for n in (512, 1024, 2048, 4096, 8192, 16384):
            tx, ty = n // 128, (16384 // n) * (2048 // d)
            print(f"{d:8} {n:6} {tx * ty:8} {imbalance(order(tx, ty), g, False):9.2f} "
                  f"{imbalance(order(tx, ty, 256), g, False):9.2f} {imbalance(order(tx, ty, 256), g, True):8.2f} "
                  f"{imbalance(order(tx, ty), g, True):9.2f}")


if __name__ == "__main__":
    main()
