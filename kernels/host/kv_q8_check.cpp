// q8_0 KV caches (kv_rows.cuh) and the tiled prefill kernel, through the host stand-in:
// - kv_append2_q8_0 writes, at each token's position, the bytes of ggml's quantize_row_q8_0
//   (ported below; the CPU engine's q8_0 cache quantizes alike) of its key and value rows, and
//   through a kv_table each token's into caches of its own (the decoys untouched);
// - rope_qk_append_q8_0 = rope_f32 of the queries and keys from their sources, then
//   kv_append2_q8_0, bit for bit (normal and NeoX, partial rotation, frequency factors), with
//   per-head norms = rms_norm_f32 first, and through a kv_table = each token alone;
// - attention_q8_0 (4 and 16 warps), attention_q8_0_split (1 and 7 ranges) and
//   attention_q8_0_tiled against a float64 reference over the dequantized cache, and
//   attention_f16_tiled (its first host check) over an f16 cache; a batched step's tokens
//   through a kv_table = each alone, both q8_0 decode kernels; both tiled kernels over a paged
//   cache (pages of 16 rows out of order in a pool, each token's entry the same) = over the
//   contiguous one, bit for bit; kv_append2_q8_0 into a paged cache = the contiguous bytes;
// - attention_mla_f16 / _q8_0 (DeepSeek's latent attention: 576-wide keys, values their first
//   512) and attention_kv_* (key and value heads of 192 and 128) against float64, and their
//   split forms (1 and 7 key ranges; every counter back at zero).
//
// Built and run by `cargo xtask kernels --check`; exits 1 on a mismatch. No GPU, no CUDA.
#define SPLIT_WARPS 4
#define SPLIT_MIN_KEYS 16
#include "../attention.cu"
#include "../attention_tiled.cu"
#include "../kv_append.cu"
#include "../norm.cu"
#include "../rope.cu"
#include "kv_pages.h"

#include <cstdio>
#include <random>

static std::mt19937 rng(13);

static std::vector<float> random_floats(size_t n, float r) {
    std::uniform_real_distribution<float> u(-r, r);
    std::vector<float> v(n);
    for (auto &x : v) x = u(rng);
    return v;
}

// Largest |got - want| (a NaN sticks).
static double max_err(const std::vector<float> &got, const std::vector<double> &want) {
    double err = 0.0;
    for (size_t i = 0; i < got.size(); i++) {
        const double d = std::fabs(got[i] - want[i]);
        err = std::isnan(d) || std::isnan(err) ? NAN : std::max(err, d);
    }
    return err;
}

// ggml's quantize_row_q8_0 of one block (kestrel-gguf's q8_0::quantize_block).
static block_q8_0 quantize(const float *x) {
    float amax = 0.0f;
    for (int i = 0; i < QK; i++) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q8_0 b;
    b.d = __float2half(d);
    for (int i = 0; i < QK; i++) b.qs[i] = (i8)std::round(x[i] * id);
    return b;
}

static std::vector<block_q8_0> quantize_all(const std::vector<float> &x) {
    std::vector<block_q8_0> out(x.size() / QK);
    for (size_t b = 0; b < out.size(); b++) out[b] = quantize(x.data() + QK * b);
    return out;
}

static std::vector<float> dequantize(const std::vector<block_q8_0> &c) {
    std::vector<float> out(c.size() * QK);
    for (size_t b = 0; b < c.size(); b++)
        for (int i = 0; i < QK; i++) out[QK * b + i] = __half2float(c[b].d) * (float)c[b].qs[i];
    return out;
}

static bool same_bytes(const std::vector<block_q8_0> &a, const std::vector<block_q8_0> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(block_q8_0)) == 0;
}

// A cache of `blocks` blocks, every byte 0xAB (no value a kernel writes).
static std::vector<block_q8_0> poisoned(size_t blocks) {
    std::vector<block_q8_0> c(blocks);
    std::memset(c.data(), 0xAB, c.size() * sizeof(block_q8_0));
    return c;
}

static int check_append() {
    int bad = 0;
    const int positions[] = {5, 0, 9, 2, 7};
    const int n_tok = 5, capacity = 12, k_row = 96, v_row = 64;
    // Rows with a zero block (d = 0) and one of equal magnitudes.
    std::vector<float> k = random_floats(n_tok * k_row, 4.0f), v = random_floats(n_tok * v_row, 4.0f);
    for (int i = 0; i < QK; i++) {
        k[i] = 0.0f;
        v[QK + i] = (i % 2) ? 1.5f : -1.5f;
    }
    std::vector<block_q8_0> want_k = poisoned(capacity * k_row / QK), want_v = poisoned(capacity * v_row / QK);
    for (int t = 0; t < n_tok; t++) {
        for (int b = 0; b < k_row / QK; b++)
            want_k[positions[t] * k_row / QK + b] = quantize(k.data() + t * k_row + QK * b);
        for (int b = 0; b < v_row / QK; b++)
            want_v[positions[t] * v_row / QK + b] = quantize(v.data() + t * v_row + QK * b);
    }
    std::vector<block_q8_0> kc = poisoned(want_k.size()), vc = poisoned(want_v.size());
    launch(n_tok, 2, 256, 1,
           [&] { kv_append2_q8_0(k.data(), v.data(), positions, kc.data(), vc.data(), k_row, v_row, nullptr); });
    if (!same_bytes(kc, want_k) || !same_bytes(vc, want_v)) bad++, std::printf("kv_append2_q8_0 bytes differ\n");
    // Through a kv_table: each token into its own caches.
    std::vector<std::vector<block_q8_0>> ks(n_tok, poisoned(want_k.size())), vs(n_tok, poisoned(want_v.size()));
    HostTable table(n_tok);
    for (int t = 0; t < n_tok; t++) table.set(t, ks[t].data(), vs[t].data());
    std::vector<block_q8_0> kd = poisoned(want_k.size()), vd = poisoned(want_v.size());
    launch(n_tok, 2, 256, 1,
           [&] { kv_append2_q8_0(k.data(), v.data(), positions, kd.data(), vd.data(), k_row, v_row, table.data()); });
    for (int t = 0; t < n_tok; t++) {
        std::vector<block_q8_0> ka = poisoned(want_k.size()), va = poisoned(want_v.size());
        launch(1, 2, 256, 1, [&] {
            kv_append2_q8_0(k.data() + t * k_row, v.data() + t * v_row, positions + t, ka.data(), va.data(), k_row,
                            v_row, nullptr);
        });
        if ((!same_bytes(ka, ks[t]) || !same_bytes(va, vs[t])) && bad++ < 3)
            std::printf("kv_append2_q8_0 through a kv_table: token %d differs from itself alone\n", t);
    }
    if (!same_bytes(kd, poisoned(kd.size())) || !same_bytes(vd, poisoned(vd.size())))
        bad++, std::printf("kv_append2_q8_0 through a kv_table wrote the decoy caches\n");
    // One paged sequence (pages of 2 rows): the contiguous launch's bytes at its rows.
    {
        const size_t rows_k = want_k.size() / (k_row / 32), rows_v = want_v.size() / (v_row / 32);
        PagedCache pk(rows_k, k_row / 32 * sizeof(block_q8_0), 1, 3),
            pv(rows_v, v_row / 32 * sizeof(block_q8_0), 1, 3);
        const std::vector<block_q8_0> blank_k = poisoned(want_k.size()), blank_v = poisoned(want_v.size());
        pk.put(blank_k.data(), rows_k);
        pv.put(blank_v.data(), rows_v);
        HostTable paged(n_tok);
        for (int t = 0; t < n_tok; t++) paged.set(t, pk.data<block_q8_0>(), pv.data<block_q8_0>(), pk.pages.data(), 1);
        launch(n_tok, 2, 256, 1,
               [&] { kv_append2_q8_0(k.data(), v.data(), positions, kd.data(), vd.data(), k_row, v_row, paged.data()); });
        if (!pk.same(kc.data(), rows_k) || !pv.same(vc.data(), rows_v))
            bad++, std::printf("kv_append2_q8_0 into a paged cache differs from the contiguous launch\n");
    }
    std::printf("kv_append2_q8_0: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

static int check_rope_append() {
    int bad = 0;
    const int positions[] = {6, 1, 9};
    const int n_tok = 3, capacity = 11;
    struct Case {
        int n_head, n_kv, head_dim, n_rot, neox, v_row, threads;
        float ext_factor;
        bool ff;
    };
    for (const Case c : {Case{9, 3, 64, 64, 0, 192, 32, 0.0f, false}, Case{4, 1, 256, 256, 1, 256, 128, 0.0f, false},
                         Case{4, 2, 96, 32, 1, 192, 48, 1.0f, true}}) {
        const int q_row = c.n_head * c.head_dim, k_row = c.n_kv * c.head_dim;
        const std::vector<float> q = random_floats(n_tok * q_row, 4.0f), k = random_floats(n_tok * k_row, 4.0f),
                                 v = random_floats(n_tok * c.v_row, 4.0f), qw = random_floats(c.head_dim, 2.0f),
                                 kw = random_floats(c.head_dim, 2.0f);
        std::vector<float> ff = random_floats(c.n_rot / 2, 4.0f);
        for (auto &f : ff) f = 1.0f + std::fabs(f);
        const float *ffp = c.ff ? ff.data() : nullptr;
        const size_t kb = capacity * k_row / QK, vb = capacity * c.v_row / QK;
        for (const int norms : {0, 3}) {
            const int threads = norms ? std::min(1024, (c.head_dim + 31) / 32 * 32) : c.threads;
            // Two steps: norms, rope_f32 of queries and keys, kv_append2_q8_0.
            std::vector<float> qn = q, kn = k;
            if (norms) {
                launch(n_tok * c.n_head, 1, threads, 1,
                       [&] { rms_norm_f32(q.data(), qw.data(), qn.data(), c.head_dim, 1e-6f); });
                launch(n_tok * c.n_kv, 1, threads, 1,
                       [&] { rms_norm_f32(k.data(), kw.data(), kn.data(), c.head_dim, 1e-5f); });
            }
            std::vector<float> q1(q.size(), NAN), k1(k.size(), NAN);
            const auto rope = [&](const float *src, float *x, int n_head) {
                launch(n_tok * n_head, 1, c.n_rot / 2, 1, [&] {
                    rope_f32(src, x, positions, ffp, n_head, c.head_dim, c.n_rot, c.neox, 10000.0f, 0.5f,
                             c.ext_factor, 1.0f, 3.0f, 20.0f);
                });
            };
            rope(qn.data(), q1.data(), c.n_head);
            rope(kn.data(), k1.data(), c.n_kv);
            std::vector<block_q8_0> kc1 = poisoned(kb), vc1 = poisoned(vb);
            launch(n_tok, 2, 256, 1, [&] {
                kv_append2_q8_0(k1.data(), v.data(), positions, kc1.data(), vc1.data(), k_row, c.v_row, nullptr);
            });
            // One launch.
            std::vector<float> q2(q.size(), NAN);
            std::vector<block_q8_0> kc2 = poisoned(kb), vc2 = poisoned(vb);
            launch(n_tok, c.n_head + 2 * c.n_kv, threads, 1, [&] {
                rope_qk_append_q8_0(q.data(), q2.data(), k.data(), v.data(), positions, ffp, kc2.data(), vc2.data(),
                                    c.n_head, c.n_kv, c.head_dim, c.v_row, c.n_rot, c.neox, 10000.0f, 0.5f,
                                    c.ext_factor, 1.0f, 3.0f, 20.0f, 1.0f, qw.data(), kw.data(), norms, 1e-6f, 1e-5f,
                                    nullptr);
            });
            if ((std::memcmp(q1.data(), q2.data(), q1.size() * 4) != 0 || !same_bytes(kc1, kc2) ||
                 !same_bytes(vc1, vc2)) &&
                bad++ < 3)
                std::printf("rope_qk_append_q8_0 differs: heads %d/%d head_dim %d n_rot %d norms %d\n", c.n_head,
                            c.n_kv, c.head_dim, c.n_rot, norms);
            if (norms) continue;
            // Through a kv_table: each token = itself alone.
            std::vector<std::vector<block_q8_0>> ks(n_tok, poisoned(kb)), vs(n_tok, poisoned(vb));
            HostTable table(n_tok);
            for (int t = 0; t < n_tok; t++) table.set(t, ks[t].data(), vs[t].data());
            std::vector<float> q3(q.size(), NAN);
            launch(n_tok, c.n_head + 2 * c.n_kv, threads, 1, [&] {
                rope_qk_append_q8_0(q.data(), q3.data(), k.data(), v.data(), positions, ffp, nullptr, nullptr,
                                    c.n_head, c.n_kv, c.head_dim, c.v_row, c.n_rot, c.neox, 10000.0f, 0.5f,
                                    c.ext_factor, 1.0f, 3.0f, 20.0f, 1.0f, nullptr, nullptr, 0, 0.0f, 0.0f,
                                    table.data());
            });
            for (int t = 0; t < n_tok; t++) {
                std::vector<float> qa((size_t)q_row, NAN);
                std::vector<block_q8_0> ka = poisoned(kb), va = poisoned(vb);
                launch(1, c.n_head + 2 * c.n_kv, threads, 1, [&] {
                    rope_qk_append_q8_0(q.data() + t * q_row, qa.data(), k.data() + t * k_row, v.data() + t * c.v_row,
                                        positions + t, ffp, ka.data(), va.data(), c.n_head, c.n_kv, c.head_dim,
                                        c.v_row, c.n_rot, c.neox, 10000.0f, 0.5f, c.ext_factor, 1.0f, 3.0f, 20.0f,
                                        1.0f, nullptr, nullptr, 0, 0.0f, 0.0f, nullptr);
                });
                if ((std::memcmp(qa.data(), q3.data() + t * q_row, qa.size() * 4) != 0 || !same_bytes(ka, ks[t]) ||
                     !same_bytes(va, vs[t])) &&
                    bad++ < 3)
                    std::printf("rope_qk_append_q8_0 through a kv_table: token %d differs from itself alone\n", t);
            }
        }
    }
    std::printf("rope_qk_append_q8_0: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

struct Case {
    int n_head, n_kv_head, head_dim, window;
    float softcap;
};

// out[t][h][d] in float64 over f32 keys and values (a dequantized cache), as attention.cu
// defines the function.
static std::vector<double> reference(const Case &c, const std::vector<float> &q, const std::vector<int> &pos,
                                     const std::vector<float> &k, const std::vector<float> &v, int kv_len,
                                     float scale) {
    const int hd = c.head_dim, group = c.n_head / c.n_kv_head;
    std::vector<double> out(pos.size() * c.n_head * hd, 0.0);
    for (size_t t = 0; t < pos.size(); t++)
        for (int h = 0; h < c.n_head; h++) {
            int lo, hi;
            visible_keys(pos[t], kv_len, c.window, 1, &lo, &hi);
            const int kvh = h / group;
            std::vector<double> s;
            double mx = -INFINITY;
            for (int j = lo; j < hi; j++) {
                double d = 0.0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[(t * c.n_head + h) * hd + i] * k[((size_t)j * c.n_kv_head + kvh) * hd + i];
                d *= scale;
                if (c.softcap > 0.0f) d = c.softcap * std::tanh(d / c.softcap);
                s.push_back(d);
                mx = std::max(mx, d);
            }
            double l = 0.0;
            for (auto &x : s) l += (x = std::exp(x - mx));
            for (int j = lo; j < hi; j++)
                for (int i = 0; i < hd; i++)
                    out[(t * c.n_head + h) * hd + i] += s[j - lo] / l * v[((size_t)j * c.n_kv_head + kvh) * hd + i];
        }
    return out;
}

static int check_attention() {
    int bad = 0;
    const int capacity = 320, kv_len = 300;
    for (const Case c : {Case{9, 3, 64, 0, 0.0f}, Case{4, 1, 256, 0, 0.0f}, Case{8, 2, 128, 7, 0.0f},
                         Case{2, 2, 96, 0, 50.0f}}) {
        const int hd = c.head_dim, row = c.n_kv_head * hd;
        const std::vector<block_q8_0> k = quantize_all(random_floats((size_t)capacity * row, 2.0f)),
                                      v = quantize_all(random_floats((size_t)capacity * row, 2.0f));
        const std::vector<float> kf = dequantize(k), vf = dequantize(v);
        const float scale = 1.0f / std::sqrt((float)hd);
        const auto compare = [&](const char *what, int variant, const std::vector<float> &got,
                                 const std::vector<double> &want) {
            const double err = max_err(got, want);
            if (!(err <= 2e-5)) {
                bad++;
                std::printf("%s(%d) %d/%d x %d window %d cap %g: max error %g\n", what, variant, c.n_head,
                            c.n_kv_head, hd, c.window, c.softcap, err);
            }
        };
        // Decode: a token late, one seeing nothing, one early.
        const std::vector<int> pos = {299, -1, 40};
        const int n_tok = (int)pos.size(), rows = n_tok * c.n_head;
        const std::vector<float> q = random_floats((size_t)rows * hd, hd == 256 ? 1.0f : 0.5f);
        const std::vector<double> want = reference(c, q, pos, kf, vf, kv_len, scale);
        for (int warps : {4, 16}) {
            std::vector<float> out(q.size(), NAN);
            launch(rows, 1, 32, warps, [&] {
                attention_q8_0(q.data(), pos.data(), k.data(), v.data(), out.data(), c.n_head, c.n_kv_head, hd,
                               kv_len, scale, c.softcap, c.window, 1, nullptr, nullptr, nullptr);
            });
            compare("attention_q8_0 warps", warps, out, want);
        }
        for (int nsplit : {1, 7}) {
            std::vector<float> part((size_t)rows * nsplit * (hd + 2), NAN), out(q.size(), NAN);
            std::vector<unsigned> counters(rows, 0);
            launch(rows, nsplit, 32, SPLIT_WARPS, [&] {
                attention_q8_0_split(q.data(), pos.data(), k.data(), v.data(), out.data(), part.data(),
                                     counters.data(), c.n_head, c.n_kv_head, hd, kv_len, scale, c.softcap, c.window,
                                     1, nullptr, nullptr, nullptr);
            });
            compare("attention_q8_0_split", nsplit, out, want);
            for (unsigned x : counters)
                if (x != 0 && bad++ < 3) std::printf("q8_0 split(%d): a counter left at %u\n", nsplit, x);
        }
        // A batched step through a kv_table: each token's bits = itself alone, both kernels.
        {
            std::vector<std::vector<block_q8_0>> ks(n_tok), vs(n_tok);
            HostTable table(n_tok);
            for (int t = 0; t < n_tok; t++) {
                ks[t] = quantize_all(random_floats((size_t)capacity * row, 2.0f));
                vs[t] = quantize_all(random_floats((size_t)capacity * row, 2.0f));
                table.set(t, ks[t].data(), vs[t].data());
            }
            const int nsplit = 7;
            std::vector<float> part((size_t)rows * nsplit * (hd + 2), 0.0f);
            std::vector<unsigned> counters(rows, 0);
            for (int kernel = 0; kernel < 2; kernel++) {
                const auto run = [&](const float *qq, const int *pp, int nr, const block_q8_0 *kk,
                                     const block_q8_0 *vv, const unsigned long long *tab, float *o) {
                    if (kernel == 0)
                        launch(nr, 1, 32, 4, [&] {
                            attention_q8_0(qq, pp, kk, vv, o, c.n_head, c.n_kv_head, hd, kv_len, scale, c.softcap,
                                           c.window, 1, tab, nullptr, nullptr);
                        });
                    else
                        launch(nr, nsplit, 32, SPLIT_WARPS, [&] {
                            attention_q8_0_split(qq, pp, kk, vv, o, part.data(), counters.data(), c.n_head,
                                                 c.n_kv_head, hd, kv_len, scale, c.softcap, c.window, 1, tab, nullptr, nullptr);
                        });
                };
                std::vector<float> step(q.size(), NAN);
                run(q.data(), pos.data(), rows, k.data(), v.data(), table.data(), step.data());
                for (int t = 0; t < n_tok; t++) {
                    std::vector<float> alone((size_t)c.n_head * hd, NAN);
                    run(q.data() + (size_t)t * c.n_head * hd, pos.data() + t, c.n_head, ks[t].data(), vs[t].data(),
                        nullptr, alone.data());
                    if (std::memcmp(alone.data(), step.data() + (size_t)t * c.n_head * hd, alone.size() * 4) != 0 &&
                        bad++ < 3)
                        std::printf("q8_0 kv_table(kernel %d): token %d differs from itself alone\n", kernel, t);
                }
            }
        }
        // Prefill: 40 tokens at 260..299 (several tiles of 16 rows), the tiled kernels over a
        // q8_0 cache and over the f16 cache of the same values rounded to f16.
        {
            std::vector<int> ppos(40);
            for (int t = 0; t < 40; t++) ppos[t] = 260 + t;
            const int pt = (int)ppos.size(), group = c.n_head / c.n_kv_head;
            const std::vector<float> pq = random_floats((size_t)pt * c.n_head * hd, hd == 256 ? 1.0f : 0.5f);
            const auto tiled = [&](bool q8, const void *kk, const void *vv, std::vector<float> &o,
                                   const unsigned long long *tab = nullptr) {
                launch((pt * group + TILE_ROWS - 1) / TILE_ROWS, c.n_kv_head, 32, ATT_WARPS, [&] {
                    if (q8)
                        attention_q8_0_tiled(pq.data(), ppos.data(), (const block_q8_0 *)kk, (const block_q8_0 *)vv,
                                             o.data(), c.n_head, c.n_kv_head, hd, kv_len, scale, c.softcap, c.window,
                                             1, pt, tab, nullptr);
                    else
                        attention_f16_tiled(pq.data(), ppos.data(), (const __half *)kk, (const __half *)vv, o.data(),
                                            c.n_head, c.n_kv_head, hd, kv_len, scale, c.softcap, c.window, 1, pt, tab,
                                            nullptr);
                });
            };
            // The same launch over a paged copy of the cache (every token's entry the same, a
            // decoy as the given caches): the contiguous launch's bits.
            const auto paged_same = [&](bool q8, const void *kk, const void *vv, size_t row_bytes,
                                        const std::vector<float> &want_bits) {
                PagedCache pk(capacity, row_bytes, 4, 21), pv(capacity, row_bytes, 4, 21);
                pk.put(kk, capacity);
                pv.put(vv, capacity);
                HostTable tab(pt);
                for (int t = 0; t < pt; t++) tab.set(t, pk.pool.data(), pv.pool.data(), pk.pages.data(), 4);
                std::vector<float> o(pq.size(), NAN);
                tiled(q8, nullptr, nullptr, o, tab.data());
                if (std::memcmp(o.data(), want_bits.data(), o.size() * 4) != 0 && bad++ < 3)
                    std::printf("attention_%s_tiled over a paged cache differs from the contiguous cache\n",
                                q8 ? "q8_0" : "f16");
            };
            std::vector<float> out(pq.size(), NAN);
            tiled(true, k.data(), v.data(), out);
            paged_same(true, k.data(), v.data(), row / 32 * sizeof(block_q8_0), out);
            compare("attention_q8_0_tiled", pt, out, reference(c, pq, ppos, kf, vf, kv_len, scale));
            std::vector<__half> kh(kf.size()), vh(vf.size());
            std::vector<float> khf(kf.size()), vhf(vf.size());
            for (size_t i = 0; i < kf.size(); i++) {
                kh[i] = __float2half(kf[i]);
                vh[i] = __float2half(vf[i]);
                khf[i] = __half2float(kh[i]);
                vhf[i] = __half2float(vh[i]);
            }
            std::vector<float> outh(pq.size(), NAN);
            tiled(false, kh.data(), vh.data(), outh);
            paged_same(false, kh.data(), vh.data(), row * sizeof(__half), outh);
            compare("attention_f16_tiled", pt, outh, reference(c, pq, ppos, khf, vhf, kv_len, scale));
        }
    }
    std::printf("attention over q8_0 caches, tiled prefill: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

// DeepSeek's latent attention (attention_mla_*): one cache head of dk values, n_head query heads,
// values the first dv of each key; float64 reference over the cache's values.
static int check_mla() {
    int bad = 0;
    const int n_head = 4, dk = 576, dv = 512, capacity = 64, kv_len = 60;
    const std::vector<int> pos = {59, 10, -1};
    const int n_tok = (int)pos.size();
    const float scale = 1.0f / std::sqrt(192.0f);
    const std::vector<block_q8_0> kq = quantize_all(random_floats((size_t)capacity * dk, 1.0f));
    const std::vector<float> kf = dequantize(kq);
    std::vector<__half> kh(kf.size());
    for (size_t i = 0; i < kf.size(); i++) kh[i] = __float2half(kf[i]);
    const std::vector<float> q = random_floats((size_t)n_tok * n_head * dk, 0.5f);
    for (const bool q8 : {false, true}) {
        std::vector<double> want((size_t)n_tok * n_head * dv, 0.0);
        for (int t = 0; t < n_tok; t++)
            for (int h = 0; h < n_head; h++) {
                int lo, hi;
                visible_keys(pos[t], kv_len, 0, 1, &lo, &hi);
                const auto kv = [&](int j, int i) -> double {
                    return q8 ? kf[(size_t)j * dk + i] : __half2float(kh[(size_t)j * dk + i]);
                };
                std::vector<double> sc;
                double mx = -INFINITY;
                for (int j = lo; j < hi; j++) {
                    double d = 0.0;
                    for (int i = 0; i < dk; i++) d += (double)q[((size_t)t * n_head + h) * dk + i] * kv(j, i);
                    sc.push_back(d * scale);
                    mx = std::max(mx, d * scale);
                }
                double l = 0.0;
                for (auto &x : sc) l += (x = std::exp(x - mx));
                for (int j = lo; j < hi; j++)
                    for (int i = 0; i < dv; i++)
                        want[((size_t)t * n_head + h) * dv + i] += sc[j - lo] / l * kv(j, i);
            }
        for (int warps : {4, 16}) {
            std::vector<float> out((size_t)n_tok * n_head * dv, NAN);
            launch(n_tok * n_head, 1, 32, warps, [&] {
                if (q8)
                    attention_mla_q8_0(q.data(), pos.data(), kq.data(), out.data(), n_head, 1, dk, dv, kv_len, scale,
                                       0.0f, 0, 1);
                else
                    attention_mla_f16(q.data(), pos.data(), kh.data(), out.data(), n_head, 1, dk, dv, kv_len, scale,
                                      0.0f, 0, 1);
            });
            const double err = max_err(out, want);
            if (!(err <= 2e-5) && bad++ < 3) std::printf("attention_mla q8 %d warps %d: max error %g\n", q8, warps, err);
        }
        for (int nsplit : {1, 7}) {
            const int rows = n_tok * n_head;
            std::vector<float> out((size_t)rows * dv, NAN), part((size_t)rows * nsplit * (dv + 2), NAN);
            std::vector<unsigned> counters(rows, 0);
            launch(rows, nsplit, 32, SPLIT_WARPS, [&] {
                if (q8)
                    attention_mla_q8_0_split(q.data(), pos.data(), kq.data(), out.data(), part.data(),
                                             counters.data(), n_head, 1, dk, dv, kv_len, scale, 0.0f, 0, 1);
                else
                    attention_mla_f16_split(q.data(), pos.data(), kh.data(), out.data(), part.data(), counters.data(),
                                            n_head, 1, dk, dv, kv_len, scale, 0.0f, 0, 1);
            });
            const double err = max_err(out, want);
            if (!(err <= 2e-5) && bad++ < 3)
                std::printf("attention_mla_split q8 %d ranges %d: max error %g\n", q8, nsplit, err);
            for (unsigned x : counters)
                if (x != 0 && bad++ < 3) std::printf("attention_mla_split: a counter left at %u\n", x);
        }
    }
    std::printf("attention_mla: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

// Keys and values of different head sizes (attention_kv_*: 192 and 128, GQA 4/2) against float64
// over the caches' values.
static int check_kv_dims() {
    int bad = 0;
    const int n_head = 4, n_kv = 2, dk = 192, dv = 128, capacity = 64, kv_len = 60;
    const std::vector<int> pos = {59, 10, -1};
    const int n_tok = (int)pos.size(), group = n_head / n_kv;
    const float scale = 1.0f / std::sqrt((float)dk);
    const std::vector<block_q8_0> kq = quantize_all(random_floats((size_t)capacity * n_kv * dk, 1.0f)),
                                  vq = quantize_all(random_floats((size_t)capacity * n_kv * dv, 1.0f));
    const std::vector<float> kf = dequantize(kq), vf = dequantize(vq);
    std::vector<__half> kh(kf.size()), vh(vf.size());
    for (size_t i = 0; i < kf.size(); i++) kh[i] = __float2half(kf[i]);
    for (size_t i = 0; i < vf.size(); i++) vh[i] = __float2half(vf[i]);
    const std::vector<float> q = random_floats((size_t)n_tok * n_head * dk, 0.5f);
    for (const bool q8 : {false, true}) {
        const auto kv = [&](bool is_v, size_t i) -> double {
            return q8 ? (is_v ? vf[i] : kf[i]) : __half2float(is_v ? vh[i] : kh[i]);
        };
        std::vector<double> want((size_t)n_tok * n_head * dv, 0.0);
        for (int t = 0; t < n_tok; t++)
            for (int h = 0; h < n_head; h++) {
                int lo, hi;
                visible_keys(pos[t], kv_len, 0, 1, &lo, &hi);
                const int kvh = h / group;
                std::vector<double> sc;
                double mx = -INFINITY;
                for (int j = lo; j < hi; j++) {
                    double d = 0.0;
                    for (int i = 0; i < dk; i++)
                        d += (double)q[((size_t)t * n_head + h) * dk + i] * kv(false, ((size_t)j * n_kv + kvh) * dk + i);
                    sc.push_back(d * scale);
                    mx = std::max(mx, d * scale);
                }
                double l = 0.0;
                for (auto &x : sc) l += (x = std::exp(x - mx));
                for (int j = lo; j < hi; j++)
                    for (int i = 0; i < dv; i++)
                        want[((size_t)t * n_head + h) * dv + i] += sc[j - lo] / l * kv(true, ((size_t)j * n_kv + kvh) * dv + i);
            }
        std::vector<float> out((size_t)n_tok * n_head * dv, NAN);
        launch(n_tok * n_head, 1, 32, 4, [&] {
            if (q8)
                attention_kv_q8_0(q.data(), pos.data(), kq.data(), vq.data(), out.data(), n_head, n_kv, dk, dv, kv_len,
                                  scale, 0.0f, 0, 1, nullptr);
            else
                attention_kv_f16(q.data(), pos.data(), kh.data(), vh.data(), out.data(), n_head, n_kv, dk, dv, kv_len,
                                 scale, 0.0f, 0, 1, nullptr);
        });
        const double err = max_err(out, want);
        if (!(err <= 2e-5) && bad++ < 3) std::printf("attention_kv q8 %d: max error %g\n", q8, err);
        for (int nsplit : {1, 7}) {
            const int rows = n_tok * n_head;
            std::vector<float> o((size_t)rows * dv, NAN), part((size_t)rows * nsplit * (dv + 2), NAN);
            std::vector<unsigned> counters(rows, 0);
            launch(rows, nsplit, 32, SPLIT_WARPS, [&] {
                if (q8)
                    attention_kv_q8_0_split(q.data(), pos.data(), kq.data(), vq.data(), o.data(), part.data(),
                                            counters.data(), n_head, n_kv, dk, dv, kv_len, scale, 0.0f, 0, 1, nullptr);
                else
                    attention_kv_f16_split(q.data(), pos.data(), kh.data(), vh.data(), o.data(), part.data(),
                                           counters.data(), n_head, n_kv, dk, dv, kv_len, scale, 0.0f, 0, 1, nullptr);
            });
            const double e = max_err(o, want);
            if (!(e <= 2e-5) && bad++ < 3) std::printf("attention_kv_split q8 %d ranges %d: max error %g\n", q8, nsplit, e);
            for (unsigned x : counters)
                if (x != 0 && bad++ < 3) std::printf("attention_kv_split: a counter left at %u\n", x);
        }
    }
    std::printf("attention_kv (key and value heads of different sizes): %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

int main() {
    return check_append() + check_rope_append() + check_attention() + check_mla() + check_kv_dims() ? 1 : 0;
}
