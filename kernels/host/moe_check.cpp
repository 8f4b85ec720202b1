// The device MoE kernels (moe.cu, and mmvq.cuh's indirect matvec) on the CPU through the host
// stand-in:
// - moe_route_f32 against a transcription of kestrel-graph's `moe::route` (f64 sums, sorted
//   order): every gating, with and without router and selection biases, expert groups, weight
//   normalisation and scaling, 4-256 experts, 1-32 chosen, runs of equal scores (the lower
//   expert first). Expert ids exactly; weights within 4 ulps-ish (relative 1e-6 of the
//   largest: the device sums in warp trees).
// - mmvq_<type>_id and matvec_<f32|f16|bf16>_id against the one-row matvec of each pair's expert,
//   bit for bit, with the activation row of the token (k > 0) or of the pair (k == 0).
// - moe_scale_bias_f32 and moe_combine_f32 against their formulas, bit for bit.
// - moe_tiles (every pair once, in order, in tiles of its expert) and the grouped tensor-core
//   matvec `mmvq_wide_<type>_<nt>_id` over its tiles against each pair's one-row matvec, bit
//   for bit, with CTAs past the tiles' count left idle.
//
// Built and run by `cargo xtask kernels --check`; exits 1 on a mismatch.
#include "../matvec_float.cu"
#include "../mmvq.cu"
#include "../mmvq_k.cu"
#include "../mmvq_wide.cu"
#include "../moe.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "random_blocks.h"

struct Route {
    int ne, k, gating, groups, groups_used;
    bool norm, rbias, sbias;
    float wscale;
};

// kestrel-graph's `route` for one row, as written there.
static void route_ref(const Route &p, const float *logits, const std::vector<float> &rb, const std::vector<float> &sb,
                      int *ids, float *w) {
    std::vector<float> l(logits, logits + p.ne), pr(p.ne), score(p.ne);
    if (p.rbias)
        for (int e = 0; e < p.ne; e++) l[e] += rb[e];
    if (p.gating == 0) {
        float m = -INFINITY;
        for (float v : l) m = std::max(m, v);
        double sum = 0;
        for (int e = 0; e < p.ne; e++) sum += (double)(pr[e] = std::exp(l[e] - m));
        const float inv = (float)(1.0 / sum);
        for (auto &v : pr) v *= inv;
    } else if (p.gating == 1) {
        for (int e = 0; e < p.ne; e++) pr[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
        pr = l;
    }
    for (int e = 0; e < p.ne; e++) score[e] = pr[e] + (p.sbias ? sb[e] : 0.0f);
    if (p.groups) {
        const int per = p.ne / p.groups;
        std::vector<std::pair<int, float>> order;
        for (int g = 0; g < p.groups; g++) {
            float a = -INFINITY, b = -INFINITY;
            for (int j = 0; j < per; j++) {
                const float v = score[g * per + j];
                if (v > a) b = a, a = v;
                else if (v > b) b = v;
            }
            order.push_back({g, a + b});
        }
        std::stable_sort(order.begin(), order.end(), [](auto x, auto y) { return x.second > y.second; });
        for (size_t i = p.groups_used; i < order.size(); i++)
            for (int j = 0; j < per; j++) score[order[i].first * per + j] = -INFINITY;
    }
    std::vector<int> ord(p.ne);
    std::iota(ord.begin(), ord.end(), 0);
    std::stable_sort(ord.begin(), ord.end(), [&](int a, int b) { return score[a] > score[b]; });
    for (int s = 0; s < p.k; s++) ids[s] = ord[s], w[s] = pr[ord[s]];
    if (p.gating == 2) {
        float m = -INFINITY;
        for (int s = 0; s < p.k; s++) m = std::max(m, w[s]);
        double sum = 0;
        for (int s = 0; s < p.k; s++) sum += (double)(w[s] = std::exp(w[s] - m));
        const float inv = (float)(1.0 / sum);
        for (int s = 0; s < p.k; s++) w[s] *= inv;
    }
    if (p.norm) {
        float sum = 0;
        for (int s = 0; s < p.k; s++) sum += w[s];
        sum = std::max(sum, 6.103515625e-5f);
        for (int s = 0; s < p.k; s++) w[s] /= sum;
    }
    if (p.wscale != 0.0f && p.wscale != 1.0f)
        for (int s = 0; s < p.k; s++) w[s] *= p.wscale;
}

static int check_route() {
    int bad = 0, runs = 0;
    const int nes[] = {4, 32, 60, 128, 256};
    for (int ne : nes)
        for (int k : {1, 2, 4, 8, 13, 32})
            for (int gating = 0; gating < 3; gating++)
                for (int variant = 0; variant < 4; variant++) {
                    if (k > ne) continue;
                    Route p{ne, k, gating, 0, 0, (variant & 1) != 0, variant == 1, variant >= 2, 1.0f};
                    if (variant == 3) p.wscale = 2.5f;
                    // Expert groups where they divide: 8 groups of ne/8, 3 kept (DeepSeek V3's 8 and 4).
                    if (variant == 2 && ne % 8 == 0 && ne >= 32) p.groups = 8, p.groups_used = 3 + (k > 4);
                    const int rows = 3;
                    std::vector<float> logits(rows * ne), rb(ne), sb(ne);
                    for (int r = 0; r < rows; r++)
                        for (int e = 0; e < ne; e++) {
                            // Row 1: few distinct values, so equal scores cross the k-th place.
                            const int spread = r == 1 ? 4 : 2001;
                            logits[r * ne + e] = (float)((int)(rng() % spread) - spread / 2) / 128.0f;
                        }
                    for (auto &v : rb) v = (float)((int)(rng() % 201) - 100) / 256.0f;
                    for (auto &v : sb) v = (float)((int)(rng() % 201) - 100) / 64.0f;
                    std::vector<int> ids(rows * k, -1);
                    std::vector<float> w(rows * k, NAN);
                    launch(rows, 1, WARP, 1, [&] {
                        moe_route_f32(logits.data(), p.rbias ? rb.data() : nullptr, p.sbias ? sb.data() : nullptr,
                                      ids.data(), w.data(), ne, k, gating, p.groups, p.groups_used, p.norm, p.wscale);
                    });
                    runs++;
                    for (int r = 0; r < rows; r++) {
                        int want_ids[32];
                        float want_w[32];
                        route_ref(p, &logits[r * ne], rb, sb, want_ids, want_w);
                        float big = 0;
                        for (int s = 0; s < k; s++) big = std::max(big, std::fabs(want_w[s]));
                        for (int s = 0; s < k; s++) {
                            const bool id_ok = ids[r * k + s] == want_ids[s];
                            const bool w_ok = std::fabs(w[r * k + s] - want_w[s]) <= 1e-6f * big + 1e-30f;
                            if ((!id_ok || !w_ok) && bad++ < 8)
                                std::printf("route ne=%d k=%d gating=%d variant=%d groups=%d row %d slot %d: "
                                            "expert %d weight %.9g, want %d %.9g\n",
                                            ne, k, gating, variant, p.groups, r, s, ids[r * k + s], w[r * k + s],
                                            want_ids[s], want_w[s]);
                        }
                    }
                }
    std::printf("moe_route (%d launches): %s\n", runs, bad ? "MISMATCH" : "ok");
    return bad;
}

typedef void (*One)(const void *, const block_q8_1 *, float *, const float *, int, int, int);
typedef void (*Id)(const unsigned long long *, const int *, int, const block_q8_1 *, float *, int, int, int, int);

// `ne` experts of `m` rows of `nb` random blocks, the table of their addresses, and `n` random
// Q8_1 activation blocks.
template <typename B> struct Experts {
    std::vector<std::vector<B>> w;
    std::vector<unsigned long long> table;
    std::vector<block_q8_1> a;
    Experts(int ne, int m, int nb, int n) : w(ne), table(ne), a(n) {
        for (int e = 0; e < ne; e++) {
            w[e] = random_blocks<B>((size_t)m * nb);
            table[e] = (unsigned long long)(uintptr_t)w[e].data();
        }
        for (auto &b : a) {
            fill(b);
            b.d = random_half(5, 12);
            b.s = random_half(5, 12);
        }
    }
};

// Every pair's output row against its expert's one-row matvec of its activation row.
template <typename B> static int check_id(const char *name, int block_len, One one, Id id) {
    int bad = 0;
    for (int trial = 0; trial < 4; trial++) {
        const int ne = 2 + (int)(rng() % 5), m = 1 + (int)(rng() % 9);
        const int nb = 1 + (int)(rng() % (block_len == 32 ? 24 : 4)), nb32 = nb * block_len / 32;
        const int tokens = 1 + (int)(rng() % 3), k = (trial % 2) ? 1 + (int)(rng() % 3) : 0;
        const int pairs = k ? tokens * k : tokens + 2, arows = k ? tokens : pairs;
        const int rpc = 1 << (rng() % 3);
        const Experts<B> x(ne, m, nb, arows * nb32);
        const auto &[w, table, a] = x;
        std::vector<int> ids(pairs);
        for (auto &v : ids) v = (int)(rng() % ne);
        std::vector<float> got(pairs * m, NAN), want(pairs * m, NAN);
        launch((m + rpc - 1) / rpc, pairs, WARP, MMVQ_WARPS,
               [&] { id(table.data(), ids.data(), ne, a.data(), got.data(), nb, m, rpc, k); });
        for (int pr = 0; pr < pairs; pr++) {
            const int row = k ? pr / k : pr;
            launch((m + rpc - 1) / rpc, 1, WARP, MMVQ_WARPS, [&] {
                one(w[ids[pr]].data(), &a[row * nb32], &want[pr * m], nullptr, nb, m, rpc);
            });
        }
        if (std::memcmp(got.data(), want.data(), got.size() * 4) != 0 && bad++ < 3)
            std::printf("mmvq %s id: ne=%d m=%d nb=%d tokens=%d k=%d rpc=%d differs from the one-row matvec\n", name,
                        ne, m, nb, tokens, k, rpc);
    }
    std::printf("mmvq %s id: %s\n", name, bad ? "MISMATCH" : "ok");
    return bad;
}

// The float indirect matvec against the float one-row matvec, bit for bit.
template <typename T>
static int check_float_id(const char *name, void (*one)(const T *, const float *, float *, int, int, int),
                          void (*id)(const unsigned long long *, const int *, int, const float *, float *, int, int, int),
                          T (*conv)(float)) {
    int bad = 0;
    for (int trial = 0; trial < 4; trial++) {
        const int ne = 2 + (int)(rng() % 4), m = 1 + (int)(rng() % 9), k = 1 + (int)(rng() % 100);
        const int tokens = 1 + (int)(rng() % 3), per = (trial % 2) ? 1 + (int)(rng() % 3) : 0;
        const int pairs = per ? tokens * per : tokens + 1, arows = per ? tokens : pairs;
        std::vector<std::vector<T>> w(ne);
        std::vector<unsigned long long> table(ne);
        for (int e = 0; e < ne; e++) {
            for (int i = 0; i < m * k; i++) w[e].push_back(conv((float)((int)(rng() % 2001) - 1000) / 77.0f));
            table[e] = (unsigned long long)(uintptr_t)w[e].data();
        }
        std::vector<float> x(arows * k);
        for (auto &v : x) v = (float)((int)(rng() % 2001) - 1000) / 91.0f;
        std::vector<int> ids(pairs);
        for (auto &v : ids) v = (int)(rng() % ne);
        std::vector<float> got(pairs * m, NAN), want(pairs * m, NAN);
        launch((m + ROWS_PER_CTA - 1) / ROWS_PER_CTA, pairs, WARP, ROWS_PER_CTA,
               [&] { id(table.data(), ids.data(), ne, x.data(), got.data(), k, m, per); });
        for (int pr = 0; pr < pairs; pr++) {
            const int row = per ? pr / per : pr;
            launch((m + ROWS_PER_CTA - 1) / ROWS_PER_CTA, 1, WARP, ROWS_PER_CTA,
                   [&] { one(w[ids[pr]].data(), &x[row * k], &want[pr * m], k, m, 1); });
        }
        if (std::memcmp(got.data(), want.data(), got.size() * 4) != 0 && bad++ < 3)
            std::printf("matvec %s id: ne=%d m=%d k=%d per=%d differs from the one-row matvec\n", name, ne, m, k, per);
    }
    std::printf("matvec %s id: %s\n", name, bad ? "MISMATCH" : "ok");
    return bad;
}

typedef void (*WideId)(const unsigned long long *, const int *, const int *, const int *, int, const block_q8_1 *,
                       float *, int, int, int, int);

// The pairs' tiles (moe_tiles) for tiles of `tn`: every pair once, in pair order within its
// expert's tiles, -1 only after an expert's last pair; and their count within the bound.
static int check_tiles(const std::vector<int> &ids, int ne, int tn, const std::vector<int> &tile_expert,
                       const std::vector<int> &tile_rows, int n_tiles, int tiles_max) {
    const int pairs = (int)ids.size();
    if (n_tiles > tiles_max) return 1;
    std::vector<int> seen(pairs, 0);
    int prev_e = -1, prev_p = -1;
    for (int t = 0; t < n_tiles; t++) {
        const int e = tile_expert[t];
        if (e < prev_e || e < 0 || e >= ne) return 1;
        if (e != prev_e) prev_p = -1;
        prev_e = e;
        bool ended = false;
        for (int c = 0; c < tn; c++) {
            const int p = tile_rows[t * tn + c];
            if (p < 0) {
                ended = true;
                continue;
            }
            if (ended || p >= pairs || ids[p] != e || p <= prev_p) return 1;
            seen[p]++;
            prev_p = p;
        }
        if (tile_rows[t * tn] < 0) return 1;  // no empty tile
    }
    for (int s : seen)
        if (s != 1) return 1;
    return 0;
}

template <typename B> static int check_grouped(const char *name, int block_len, One one, WideId id2, WideId id4) {
    int bad = 0;
    for (int trial = 0; trial < 4; trial++) {
        const int ne = 3 + (int)(rng() % 6), m = 1 + (int)(rng() % 24);
        const int nb = 1 + (int)(rng() % (block_len == 32 ? 12 : 3)), nb32 = nb * block_len / 32;
        const int tokens = 5 + (int)(rng() % 30), per = (trial % 2) ? 1 + (int)(rng() % 3) : 0;
        const int pairs = per ? tokens * per : tokens + 3, arows = per ? tokens : pairs;
        const int rpc = 1 << (rng() % 3);
        const Experts<B> x(ne, m, nb, arows * nb32);
        const auto &[w, table, a] = x;
        // Skewed: expert 0 takes about half the pairs, so its tiles fill; others few.
        std::vector<int> ids(pairs);
        for (auto &v : ids) v = rng() % 2 ? 0 : (int)(rng() % ne);
        std::vector<float> want(pairs * m, NAN);
        for (int pr = 0; pr < pairs; pr++) {
            const int row = per ? pr / per : pr;
            launch((m + rpc - 1) / rpc, 1, WARP, MMVQ_WARPS,
                   [&] { one(w[ids[pr]].data(), &a[row * nb32], &want[pr * m], nullptr, nb, m, rpc); });
        }
        for (int nt : {2, 4}) {
            const int tn = 8 * nt, tiles_max = (pairs + tn - 1) / tn + std::min(ne, pairs);
            std::vector<int> tile_expert(tiles_max, -7), tile_rows(tiles_max * tn, -7), n_tiles(1, -7);
            launch(1, 1, 64, 1, [&] {
                moe_tiles(ids.data(), pairs, ne, tn, tile_expert.data(), tile_rows.data(), n_tiles.data());
            });
            if (check_tiles(ids, ne, tn, tile_expert, tile_rows, n_tiles[0], tiles_max) && bad++ < 3)
                std::printf("moe_tiles: ne=%d pairs=%d tn=%d: the tiles are wrong\n", ne, pairs, tn);
            std::vector<float> got(pairs * m, NAN);
            launch((m + WIDE_ROWS - 1) / WIDE_ROWS, tiles_max, WARP, MMVQ_WARPS / rpc, [&] {
                (nt == 2 ? id2 : id4)(table.data(), tile_expert.data(), tile_rows.data(), n_tiles.data(), ne,
                                      a.data(), got.data(), nb, m, per, rpc);
            });
            if (std::memcmp(got.data(), want.data(), got.size() * 4) != 0 && bad++ < 3)
                std::printf("mmvq_wide %s %d id: ne=%d m=%d nb=%d pairs=%d per=%d rpc=%d differs from the one-row "
                            "matvec\n",
                            name, nt, ne, m, nb, pairs, per, rpc);
        }
    }
    std::printf("moe_tiles + mmvq_wide %s id: %s\n", name, bad ? "MISMATCH" : "ok");
    return bad;
}

static float as_f32(float v) { return v; }
static __half as_f16(float v) { return __float2half(v); }
static __nv_bfloat16 as_bf16(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}

static int check_scale_combine() {
    int bad = 0;
    const int ne = 5, m = 37, rows = 3, k = 4, pairs = rows * k;
    std::vector<int> ids(pairs);
    for (auto &v : ids) v = (int)(rng() % ne);
    std::vector<float> out(pairs * m), scales(ne), bias(ne * m), w(pairs);
    for (auto &v : out) v = (float)((int)(rng() % 20001) - 10000) / 999.0f;
    for (auto &v : scales) v = (float)(1 + rng() % 100) / 37.0f;
    for (auto &v : bias) v = (float)((int)(rng() % 2001) - 1000) / 333.0f;
    for (auto &v : w) v = (float)(1 + rng() % 1000) / 997.0f;
    for (int form = 0; form < 3; form++) {
        std::vector<float> got = out;
        const float *sc = form != 1 ? scales.data() : nullptr, *bi = form != 0 ? bias.data() : nullptr;
        launch(2, 1, 64, 1, [&] { moe_scale_bias_f32(got.data(), ids.data(), ne, sc, bi, pairs, m); });
        for (int i = 0; i < pairs * m; i++) {
            float v = out[i];
            const int e = ids[i / m];
            if (sc) v = v * sc[e];
            if (bi) v = v + bi[e * m + i % m];
            if (std::memcmp(&v, &got[i], 4) != 0 && bad++ < 3)
                std::printf("moe_scale_bias form %d: [%d] = %.9g, want %.9g\n", form, i, got[i], v);
        }
    }
    std::vector<float> comb(rows * m, NAN);
    launch(3, 1, 32, 1, [&] { moe_combine_f32(out.data(), w.data(), comb.data(), rows, k, m); });
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < m; j++) {
            float s = out[(r * k) * m + j] * w[r * k];
            for (int slot = 1; slot < k; slot++) s += out[(r * k + slot) * m + j] * w[r * k + slot];
            if (std::memcmp(&s, &comb[r * m + j], 4) != 0 && bad++ < 3)
                std::printf("moe_combine: [%d][%d] = %.9g, want %.9g\n", r, j, comb[r * m + j], s);
        }
    std::printf("moe_scale_bias, moe_combine: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

int main() {
    int bad = check_route() + check_scale_combine();
    bad += check_float_id<float>("f32", matvec_f32, matvec_f32_id, as_f32) +
           check_float_id<__half>("f16", matvec_f16, matvec_f16_id, as_f16) +
           check_float_id<__nv_bfloat16>("bf16", matvec_bf16, matvec_bf16_id, as_bf16);
    bad += check_id<block_q4_0>("q4_0", 32, (One)mmvq_q4_0_1, mmvq_q4_0_id) +
           check_id<block_q4_1>("q4_1", 32, (One)mmvq_q4_1_1, mmvq_q4_1_id) +
           check_id<block_q5_0>("q5_0", 32, (One)mmvq_q5_0_1, mmvq_q5_0_id) +
           check_id<block_q5_1>("q5_1", 32, (One)mmvq_q5_1_1, mmvq_q5_1_id) +
           check_id<block_q8_0>("q8_0", 32, (One)mmvq_q8_0_1, mmvq_q8_0_id) +
           check_id<block_q4_K>("q4_K", 256, (One)mmvq_q4_K_1, mmvq_q4_K_id) +
           check_id<block_q5_K>("q5_K", 256, (One)mmvq_q5_K_1, mmvq_q5_K_id) +
           check_id<block_q6_K>("q6_K", 256, (One)mmvq_q6_K_1, mmvq_q6_K_id);
    bad += check_grouped<block_q4_0>("q4_0", 32, (One)mmvq_q4_0_1, mmvq_wide_q4_0_2_id, mmvq_wide_q4_0_4_id) +
           check_grouped<block_q8_0>("q8_0", 32, (One)mmvq_q8_0_1, mmvq_wide_q8_0_2_id, mmvq_wide_q8_0_4_id) +
           check_grouped<block_q4_K>("q4_K", 256, (One)mmvq_q4_K_1, mmvq_wide_q4_K_2_id, mmvq_wide_q4_K_4_id) +
           check_grouped<block_q6_K>("q6_K", 256, (One)mmvq_q6_K_1, mmvq_wide_q6_K_2_id, mmvq_wide_q6_K_4_id);
    return bad ? 1 : 0;
}
