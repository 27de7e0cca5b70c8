/* map.c — small hash maps for names and pointers (never shrink; arena-backed). */
#include "support.h"

#include <string.h>

void map_init(Map *m, bool string_keys) {
    memset(m, 0, sizeof *m);
    m->strings = string_keys;
}

static uint64_t hash_key(const Map *m, const void *key) {
    uint64_t h = 1469598103934665603ull;
    if (m->strings) {
        for (const unsigned char *p = key; *p; p++)
            h = (h ^ *p) * 1099511628211ull;
    } else {
        h ^= (uint64_t)(uintptr_t)key;
        h *= 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    return h;
}

static bool same_key(const Map *m, const void *x, const void *y) {
    return m->strings ? strcmp(x, y) == 0 : x == y;
}

void *map_get(const Map *m, const void *key) {
    if (!m->cap)
        return NULL;
    for (uint64_t i = hash_key(m, key) & (uint64_t)(m->cap - 1);; i = (i + 1) & (uint64_t)(m->cap - 1)) {
        if (!m->keys[i])
            return NULL;
        if (same_key(m, m->keys[i], key))
            return m->vals[i];
    }
}

static void insert(Map *m, const void *key, void *val) {
    for (uint64_t i = hash_key(m, key) & (uint64_t)(m->cap - 1);; i = (i + 1) & (uint64_t)(m->cap - 1)) {
        if (!m->keys[i]) {
            m->keys[i] = key;
            m->vals[i] = val;
            m->len++;
            return;
        }
        if (same_key(m, m->keys[i], key)) {
            m->vals[i] = val;
            return;
        }
    }
}

void map_put(Arena *a, Map *m, const void *key, void *val) {
    if ((m->len + 1) * 2 > m->cap) {
        Map old = *m;
        m->cap = old.cap ? old.cap * 2 : 16;
        m->len = 0;
        m->keys = NEW_ARRAY(a, const void *, m->cap);
        m->vals = NEW_ARRAY(a, void *, m->cap);
        for (int i = 0; i < old.cap; i++)
            if (old.keys[i])
                insert(m, old.keys[i], old.vals[i]);
    }
    insert(m, key, val);
}

void map_copy(Arena *a, Map *to, const Map *from) {
    map_init(to, from->strings);
    for (int i = 0; i < from->cap; i++)
        if (from->keys[i])
            map_put(a, to, from->keys[i], from->vals[i]);
}
