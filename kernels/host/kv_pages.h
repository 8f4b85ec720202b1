// What the KV host checks share: kestrel-tensor's KvTable on the host (KV_ENTRY words a token,
// kv_rows.cuh), and a paged copy of a contiguous cache (its rows in pages of 2^shift rows,
// placed out of order in a pool whose other pages hold NaN, so a row read from the wrong page
// shows). A paged launch must give the bits of the contiguous one. Include after kv_rows.cuh.
#pragma once
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

struct HostTable {
    std::vector<unsigned long long> w;
    explicit HostTable(int tokens) : w((size_t)KV_ENTRY * tokens, 0) {}
    // Token t's caches (and page table, or none).
    void set(int t, const void *k, const void *v, const int *pages = nullptr, int shift = 0) {
        unsigned long long *e = w.data() + (size_t)KV_ENTRY * t;
        e[0] = (unsigned long long)k;
        e[1] = (unsigned long long)v;
        e[2] = (unsigned long long)pages;
        e[3] = (unsigned long long)shift;
    }
    const unsigned long long *data() const { return w.data(); }
};

// A pool holding `rows` rows of `row_bytes` bytes in pages of 2^shift rows: page i of the cache
// is page pages[i] of the pool, which has twice as many pages plus one (the others NaN: 0xFF
// bytes, a NaN in f16 and in a q8_0 block's scale).
struct PagedCache {
    std::vector<unsigned char> pool;
    std::vector<int> pages;
    int shift;
    size_t row_bytes;

    PagedCache(size_t rows, size_t row_bytes_, int shift_, unsigned seed) : shift(shift_), row_bytes(row_bytes_) {
        const size_t page_rows = (size_t)1 << shift, n = (rows + page_rows - 1) / page_rows;
        std::vector<int> ids(2 * n + 1);
        for (size_t i = 0; i < ids.size(); i++) ids[i] = (int)i;
        std::mt19937 g(seed);
        std::shuffle(ids.begin(), ids.end(), g);
        pages.assign(ids.begin(), ids.begin() + n);
        pool.assign(ids.size() * page_rows * row_bytes, 0xFF);
    }
    size_t row_at(size_t pos) const {
        return ((size_t)pages[pos >> shift] << shift) | (pos & (((size_t)1 << shift) - 1));
    }
    template <typename T> T *data() { return reinterpret_cast<T *>(pool.data()); }
    // Copies the first `rows` rows of a contiguous cache in.
    void put(const void *src, size_t rows) {
        for (size_t p = 0; p < rows; p++)
            std::memcpy(pool.data() + row_at(p) * row_bytes, (const unsigned char *)src + p * row_bytes, row_bytes);
    }
    // Whether the first `rows` rows equal those of a contiguous cache, byte for byte.
    bool same(const void *want, size_t rows) const {
        for (size_t p = 0; p < rows; p++)
            if (std::memcmp(pool.data() + row_at(p) * row_bytes, (const unsigned char *)want + p * row_bytes,
                            row_bytes) != 0)
                return false;
        return true;
    }
};
