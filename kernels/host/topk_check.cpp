// The device top-k (topk.cu) against the sampler's rule, exactly: the candidates (not NaN, not
// -inf) sorted by logit in f32's total order, larger first, equal logits by lower id, the first
// k; ids, logits (as bits) and counts. Rows with NaNs and -infs, runs of equal logits across
// the k-th place, -0 and +0, +inf, fewer candidates than k, none at all, k from 1 to TOPK_MAX.
//
// Built and run by `cargo xtask kernels --check`; exits 1 on a mismatch.
#include "../topk.cu"

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

static std::mt19937 rng(5);

static uint32_t order_bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// A row of `n` logits of kind `kind`.
static std::vector<float> row_of(int n, int kind) {
    std::vector<float> r(n);
    for (auto &v : r) v = (float)((int)(rng() % 2001) - 1000) / 64.0f;
    switch (kind) {
    case 1:  // NaNs and -infs sprinkled, one +inf
        for (int i = 0; i < n; i += 7) r[i] = NAN;
        for (int i = 3; i < n; i += 5) r[i] = -INFINITY;
        r[n / 2] = INFINITY;
        break;
    case 2:  // few distinct values: long runs of ties across the k-th place
        for (auto &v : r) v = (float)(rng() % 4);
        break;
    case 3:  // zeros of both signs and little else
        for (int i = 0; i < n; i++) r[i] = (i % 3 == 0) ? -0.0f : (i % 3 == 1 ? 0.0f : -1.0f);
        break;
    case 4:  // almost nothing is a candidate
        for (auto &v : r) v = -INFINITY;
        r[n - 1] = 2.0f;
        if (n > 4) r[1] = NAN, r[2] = -3.0f;
        break;
    case 5:  // nothing is a candidate
        for (int i = 0; i < n; i++) r[i] = i % 2 ? NAN : -INFINITY;
        break;
    }
    return r;
}

int main() {
    int bad = 0;
    const int ns[] = {1, 5, 300, 4099};
    const int ks[] = {1, 2, 40, 256};
    for (int n : ns)
        for (int k : ks)
            for (int kind = 0; kind < 6; kind++) {
                const int rows = 2;
                std::vector<float> x;
                for (int r = 0; r < rows; r++) {
                    const auto row = row_of(n, (kind + r) % 6);
                    x.insert(x.end(), row.begin(), row.end());
                }
                std::vector<unsigned> out(rows * (1 + 2 * k), 0xDEADBEEFu);
                launch(rows, 1, 64, 1, [&] { topk_f32(x.data(), n, k, out.data()); });
                for (int r = 0; r < rows; r++) {
                    const unsigned *o = out.data() + r * (1 + 2 * k);
                    std::vector<int> cand;
                    for (int j = 0; j < n; j++) {
                        const float v = x[r * n + j];
                        if (!std::isnan(v) && v != -INFINITY) cand.push_back(j);
                    }
                    std::sort(cand.begin(), cand.end(), [&](int a, int b) {
                        const uint32_t ka = order_bits(x[r * n + a]), kb = order_bits(x[r * n + b]);
                        return ka != kb ? ka > kb : a < b;
                    });
                    const int want = std::min(k, (int)cand.size());
                    bool ok = o[0] == (unsigned)want;
                    for (int i = 0; ok && i < want; i++) {
                        const float v = x[r * n + cand[i]];
                        ok = o[1 + i] == (unsigned)cand[i] && std::memcmp(&o[1 + k + i], &v, 4) == 0;
                    }
                    if (!ok && bad++ < 5)
                        std::printf("topk n=%d k=%d kind=%d row %d: count %u (want %d), first id %u (want %d)\n", n, k,
                                    kind, r, o[0], want, o[1], want ? cand[0] : -1);
                }
            }
    std::printf("topk_f32: %s\n", bad ? "MISMATCH" : "ok");
    return bad ? 1 : 0;
}
