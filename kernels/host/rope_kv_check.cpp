// The one-launch forms a CUDA plan runs, against the two-step forms they replace (both run on
// the CPU through the host stand-in, cuda_fp16.h here), bit for bit:
// - rope_f32 reading `src` and writing `x` (unrotated dims copied) = a copy, then rope_f32 in
//   place, for normal and NeoX rotation, partial and full, YaRN and frequency factors;
// - kv_append2_f16 (keys and values in one launch, rows of different lengths) = kv_append_f16
//   twice;
// - rope_qk_append_f16 (queries rotated, keys rotated into the f16 cache, values appended, one
//   launch) = rope_f32 of the queries and of the keys from their sources, then kv_append2_f16;
//   with a query scale, the queries = the two-step queries times it (a scale launch after);
//   with per-head norms of queries and/or keys = rms_norm_f32 of the heads first.
// Both appends also through a kv_table: a batched step's tokens each into caches of their own
// (the bits of each alone), and a paged sequence's step (every token's entry its one paged
// cache: the bytes of the contiguous launch, at the rows its pages map).
// Also checks the stand-in's f32-to-f16 rounding on every f16 value and the midpoints between.
//
// Built and run by `cargo xtask kernels --check`; exits 1 on a mismatch. No GPU, no CUDA.
#include "../kv_append.cu"
#include "../norm.cu"
#include "../rope.cu"
#include "kv_pages.h"

#include <cstdio>
#include <random>

static std::mt19937 rng(11);

static std::vector<float> random_floats(size_t n) {
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    std::vector<float> v(n);
    for (auto &x : v) x = u(rng);
    return v;
}

static int check_half_rounding() {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7C00u; h++) {  // every finite positive f16
        const __half x{(uint16_t)h};
        if (__float2half(__half2float(x)).x != h && bad++ < 3) std::printf("f16 %04x does not round-trip\n", h);
        if (h + 1 < 0x7C00u) {  // the midpoint to the next one rounds to the even of the two
            const float mid = 0.5f * (__half2float(x) + __half2float(__half{(uint16_t)(h + 1)}));
            const uint32_t want = (h & 1) ? h + 1 : h;
            if (__float2half(mid).x != want && bad++ < 3) std::printf("midpoint after %04x rounds wrong\n", h);
        }
    }
    std::printf("f16 rounding: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

static int check_rope() {
    int bad = 0;
    const int positions[] = {0, 3, 17, 4095};
    const int n_tok = 4;
    struct Case {
        int n_head, head_dim, n_rot, neox;
        float ext_factor;
        bool ff;
    };
    for (const Case c : {Case{3, 64, 64, 0, 0.0f, false}, Case{2, 128, 64, 1, 0.0f, false},
                         Case{2, 96, 32, 0, 1.0f, true}, Case{1, 256, 256, 1, 1.0f, true}}) {
        const size_t n = (size_t)n_tok * c.n_head * c.head_dim;
        const std::vector<float> src = random_floats(n);
        std::vector<float> ff = random_floats(c.n_rot / 2);
        for (auto &f : ff) f = 1.0f + std::fabs(f);
        std::vector<float> in_place = src, out(n, NAN);
        const float *ffp = c.ff ? ff.data() : nullptr;
        const auto run = [&](const float *s, float *x) {
            launch(n_tok * c.n_head, 1, c.n_rot / 2, 1, [&] {
                rope_f32(s, x, positions, ffp, c.n_head, c.head_dim, c.n_rot, c.neox, 10000.0f, 0.5f,
                         c.ext_factor, 1.0f, 3.0f, 20.0f);
            });
        };
        run(nullptr, in_place.data());
        run(src.data(), out.data());
        if (std::memcmp(in_place.data(), out.data(), n * 4) != 0 && bad++ < 3)
            std::printf("rope from src differs: head_dim %d n_rot %d neox %d\n", c.head_dim, c.n_rot, c.neox);
    }
    std::printf("rope_f32 from src: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

static int check_kv_append() {
    const int positions[] = {5, 0, 9, 2, 7};
    const int n_tok = 5, capacity = 12, k_row = 96, v_row = 40;
    const std::vector<float> k = random_floats(n_tok * k_row), v = random_floats(n_tok * v_row);
    const __half nan_half{0x7E00};
    std::vector<__half> k1(capacity * k_row, nan_half), v1(capacity * v_row, nan_half);
    std::vector<__half> k2 = k1, v2 = v1;
    launch(n_tok, 1, 256, 1, [&] { kv_append_f16(k.data(), positions, k1.data(), k_row); });
    launch(n_tok, 1, 256, 1, [&] { kv_append_f16(v.data(), positions, v1.data(), v_row); });
    launch(n_tok, 2, 256, 1, [&] { kv_append2_f16(k.data(), v.data(), positions, k2.data(), v2.data(), k_row, v_row, nullptr); });
    const bool same = std::memcmp(k1.data(), k2.data(), k1.size() * 2) == 0 &&
                      std::memcmp(v1.data(), v2.data(), v1.size() * 2) == 0;
    std::printf("kv_append2_f16: %s\n", same ? "ok" : "MISMATCH");
    // Through a kv_table (a batched decode step): token t writes into caches of its own, the
    // bits of writing it alone.
    bool table_same = true;
    {
        std::vector<std::vector<__half>> ks(n_tok, std::vector<__half>(capacity * k_row, nan_half)),
            vs(n_tok, std::vector<__half>(capacity * v_row, nan_half));
        HostTable table(n_tok);
        for (int t = 0; t < n_tok; t++) table.set(t, ks[t].data(), vs[t].data());
        std::vector<__half> kd(capacity * k_row, nan_half), vd(capacity * v_row, nan_half);
        launch(n_tok, 2, 256, 1,
               [&] { kv_append2_f16(k.data(), v.data(), positions, kd.data(), vd.data(), k_row, v_row, table.data()); });
        for (int t = 0; t < n_tok; t++) {
            std::vector<__half> ka(capacity * k_row, nan_half), va(capacity * v_row, nan_half);
            launch(1, 2, 256, 1, [&] {
                kv_append2_f16(k.data() + t * k_row, v.data() + t * v_row, positions + t, ka.data(), va.data(),
                               k_row, v_row, nullptr);
            });
            table_same = table_same && std::memcmp(ka.data(), ks[t].data(), ka.size() * 2) == 0 &&
                         std::memcmp(va.data(), vs[t].data(), va.size() * 2) == 0;
        }
        // The decoy caches stay untouched.
        for (auto x : kd) table_same = table_same && x.x == nan_half.x;
        // One paged sequence (pages of 4 rows): the contiguous launch's bytes at its rows.
        PagedCache pk(capacity, k_row * 2, 2, 5), pv(capacity, v_row * 2, 2, 5);
        std::vector<__half> blank_k(capacity * k_row, nan_half), blank_v(capacity * v_row, nan_half);
        pk.put(blank_k.data(), capacity);
        pv.put(blank_v.data(), capacity);
        HostTable paged(n_tok);
        for (int t = 0; t < n_tok; t++) paged.set(t, pk.data<__half>(), pv.data<__half>(), pk.pages.data(), 2);
        launch(n_tok, 2, 256, 1,
               [&] { kv_append2_f16(k.data(), v.data(), positions, kd.data(), vd.data(), k_row, v_row, paged.data()); });
        table_same = table_same && pk.same(k2.data(), capacity) && pv.same(v2.data(), capacity);
    }
    std::printf("kv_append2_f16 through a kv_table: %s\n", table_same ? "ok" : "MISMATCH");
    return same && table_same ? 0 : 1;
}

static int check_rope_qk_append() {
    int bad = 0;
    const int positions[] = {6, 1, 9};
    const int n_tok = 3, capacity = 11;
    struct Case {
        int n_head, n_kv, head_dim, n_rot, neox, v_row, threads;
        float ext_factor;
        bool ff;
    };
    for (const Case c : {Case{9, 3, 64, 64, 0, 192, 32, 0.0f, false}, Case{4, 1, 256, 256, 1, 256, 128, 0.0f, false},
                         Case{4, 2, 96, 32, 1, 192, 32, 1.0f, true}, Case{2, 2, 16, 16, 0, 32, 32, 0.0f, true}}) {
        const int q_row = c.n_head * c.head_dim, k_row = c.n_kv * c.head_dim;
        const std::vector<float> q = random_floats(n_tok * q_row), k = random_floats(n_tok * k_row),
                                 v = random_floats(n_tok * c.v_row);
        std::vector<float> ff = random_floats(c.n_rot / 2);
        for (auto &f : ff) f = 1.0f + std::fabs(f);
        const float *ffp = c.ff ? ff.data() : nullptr;
        const __half nan_half{0x7E00};
        // Two-step forms: rope q and k from their sources, then append the rotated keys and values.
        std::vector<float> q1(q.size(), NAN), k1(k.size(), NAN);
        std::vector<__half> kc1(capacity * k_row, nan_half), vc1(capacity * c.v_row, nan_half);
        const auto rope = [&](const float *src, float *x, int n_head) {
            launch(n_tok * n_head, 1, c.n_rot / 2, 1, [&] {
                rope_f32(src, x, positions, ffp, n_head, c.head_dim, c.n_rot, c.neox, 10000.0f, 0.5f,
                         c.ext_factor, 1.0f, 3.0f, 20.0f);
            });
        };
        rope(q.data(), q1.data(), c.n_head);
        rope(k.data(), k1.data(), c.n_kv);
        launch(n_tok, 2, 256, 1, [&] {
            kv_append2_f16(k1.data(), v.data(), positions, kc1.data(), vc1.data(), k_row, c.v_row, nullptr);
        });
        // One launch, the queries also scaled (Gemma: a Scale node between RoPE and attention)
        // against the two-step queries times the scale (scale_from_f32's `src[i] * s`).
        for (const float q_scale : {1.0f, 0.0625f, 0.3f}) {
            std::vector<float> q2(q.size(), NAN), q1s(q1.size());
            for (size_t i = 0; i < q1.size(); i++) q1s[i] = q1[i] * q_scale;
            std::vector<__half> kc2(capacity * k_row, nan_half), vc2(capacity * c.v_row, nan_half);
            launch(n_tok, c.n_head + 2 * c.n_kv, c.threads, 1, [&] {
                rope_qk_append_f16(q.data(), q2.data(), k.data(), v.data(), positions, ffp, kc2.data(),
                                   vc2.data(), c.n_head, c.n_kv, c.head_dim, c.v_row, c.n_rot, c.neox, 10000.0f,
                                   0.5f, c.ext_factor, 1.0f, 3.0f, 20.0f, q_scale, nullptr, nullptr, 0, 0.0f,
                                   0.0f, nullptr);
            });
            const bool same = std::memcmp(q1s.data(), q2.data(), q1.size() * 4) == 0 &&
                              std::memcmp(kc1.data(), kc2.data(), kc1.size() * 2) == 0 &&
                              std::memcmp(vc1.data(), vc2.data(), vc1.size() * 2) == 0;
            if (!same && bad++ < 3)
                std::printf("rope_qk_append differs: heads %d/%d head_dim %d n_rot %d q scale %g\n", c.n_head,
                            c.n_kv, c.head_dim, c.n_rot, q_scale);
        }
        // Through a kv_table (a batched decode step): each token's keys and values land in its
        // own caches, the bits of the token run alone.
        {
            std::vector<std::vector<__half>> ks(n_tok, std::vector<__half>(capacity * k_row, nan_half)),
                vs(n_tok, std::vector<__half>(capacity * c.v_row, nan_half));
            HostTable table(n_tok);
            for (int t = 0; t < n_tok; t++) table.set(t, ks[t].data(), vs[t].data());
            std::vector<float> q2(q.size(), NAN);
            std::vector<__half> kd(capacity * k_row, nan_half), vd(capacity * c.v_row, nan_half);
            launch(n_tok, c.n_head + 2 * c.n_kv, c.threads, 1, [&] {
                rope_qk_append_f16(q.data(), q2.data(), k.data(), v.data(), positions, ffp, kd.data(), vd.data(),
                                   c.n_head, c.n_kv, c.head_dim, c.v_row, c.n_rot, c.neox, 10000.0f, 0.5f,
                                   c.ext_factor, 1.0f, 3.0f, 20.0f, 1.0f, nullptr, nullptr, 0, 0.0f, 0.0f,
                                   table.data());
            });
            for (int t = 0; t < n_tok; t++) {
                std::vector<float> qa((size_t)q_row, NAN);
                std::vector<__half> ka(capacity * k_row, nan_half), va(capacity * c.v_row, nan_half);
                launch(1, c.n_head + 2 * c.n_kv, c.threads, 1, [&] {
                    rope_qk_append_f16(q.data() + t * q_row, qa.data(), k.data() + t * k_row,
                                       v.data() + t * c.v_row, positions + t, ffp, ka.data(), va.data(), c.n_head,
                                       c.n_kv, c.head_dim, c.v_row, c.n_rot, c.neox, 10000.0f, 0.5f, c.ext_factor,
                                       1.0f, 3.0f, 20.0f, 1.0f, nullptr, nullptr, 0, 0.0f, 0.0f, nullptr);
                });
                const bool same = std::memcmp(qa.data(), q2.data() + t * q_row, qa.size() * 4) == 0 &&
                                  std::memcmp(ka.data(), ks[t].data(), ka.size() * 2) == 0 &&
                                  std::memcmp(va.data(), vs[t].data(), va.size() * 2) == 0;
                if (!same && bad++ < 3)
                    std::printf("rope_qk_append through a kv_table: token %d differs from itself alone\n", t);
            }
            for (auto x : kd)
                if (x.x != nan_half.x) {
                    if (bad++ < 3) std::printf("rope_qk_append through a kv_table wrote the decoy cache\n");
                    break;
                }
            // One paged sequence (pages of 4 rows): the contiguous launch's bytes at its rows.
            PagedCache pk(capacity, k_row * 2, 2, 9), pv(capacity, c.v_row * 2, 2, 9);
            std::vector<__half> blank_k(capacity * k_row, nan_half), blank_v(capacity * c.v_row, nan_half);
            pk.put(blank_k.data(), capacity);
            pv.put(blank_v.data(), capacity);
            HostTable paged(n_tok);
            for (int t = 0; t < n_tok; t++) paged.set(t, pk.data<__half>(), pv.data<__half>(), pk.pages.data(), 2);
            std::vector<float> q3(q.size(), NAN);
            launch(n_tok, c.n_head + 2 * c.n_kv, c.threads, 1, [&] {
                rope_qk_append_f16(q.data(), q3.data(), k.data(), v.data(), positions, ffp, kd.data(), vd.data(),
                                   c.n_head, c.n_kv, c.head_dim, c.v_row, c.n_rot, c.neox, 10000.0f, 0.5f,
                                   c.ext_factor, 1.0f, 3.0f, 20.0f, 1.0f, nullptr, nullptr, 0, 0.0f, 0.0f,
                                   paged.data());
            });
            if ((std::memcmp(q3.data(), q1.data(), q1.size() * 4) != 0 || !pk.same(kc1.data(), capacity) ||
                 !pv.same(vc1.data(), capacity)) &&
                bad++ < 3)
                std::printf("rope_qk_append into a paged cache differs from the contiguous launch\n");
        }
    }
    std::printf("rope_qk_append_f16: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

// rope_qk_append_f16 with per-head RMS norms (Gemma 3, Qwen 3) = rms_norm_f32 over head-long
// rows of the queries and keys, then the unnormed launch; queries only, keys only, both.
static int check_rope_qk_norm_append() {
    int bad = 0;
    const int positions[] = {7, 0, 30};
    const int n_tok = 3, capacity = 32;
    struct Case {
        int n_head, n_kv, head_dim, n_rot, neox;
    };
    for (const Case c : {Case{4, 1, 256, 256, 1}, Case{8, 2, 128, 128, 1}, Case{4, 2, 80, 32, 0}, Case{2, 2, 16, 16, 0}}) {
        const int q_row = c.n_head * c.head_dim, k_row = c.n_kv * c.head_dim, v_row = k_row;
        const int threads = std::min(1024, (c.head_dim + 31) / 32 * 32);  // rms_threads(head_dim)
        const std::vector<float> q = random_floats(n_tok * q_row), k = random_floats(n_tok * k_row),
                                 v = random_floats(n_tok * v_row), qw = random_floats(c.head_dim),
                                 kw = random_floats(c.head_dim);
        const float q_eps = 1e-6f, k_eps = 1e-5f;
        const __half nan_half{0x7E00};
        for (const int norms : {1, 2, 3}) {
            // Two steps: the norms as their own launches, then the unnormed one-launch RoPE.
            std::vector<float> qn = q, kn = k;
            if (norms & 1)
                launch(n_tok * c.n_head, 1, threads, 1,
                       [&] { rms_norm_f32(q.data(), qw.data(), qn.data(), c.head_dim, q_eps); });
            if (norms & 2)
                launch(n_tok * c.n_kv, 1, threads, 1,
                       [&] { rms_norm_f32(k.data(), kw.data(), kn.data(), c.head_dim, k_eps); });
            std::vector<float> q1(q.size(), NAN), q2(q.size(), NAN);
            std::vector<__half> kc1(capacity * k_row, nan_half), vc1(capacity * v_row, nan_half),
                kc2(capacity * k_row, nan_half), vc2(capacity * v_row, nan_half);
            launch(n_tok, c.n_head + 2 * c.n_kv, std::max(32, c.n_rot / 2), 1, [&] {
                rope_qk_append_f16(qn.data(), q1.data(), kn.data(), v.data(), positions, nullptr, kc1.data(),
                                   vc1.data(), c.n_head, c.n_kv, c.head_dim, v_row, c.n_rot, c.neox, 10000.0f, 1.0f,
                                   0.0f, 1.0f, 0.0f, 0.0f, 0.25f, nullptr, nullptr, 0, 0.0f, 0.0f, nullptr);
            });
            launch(n_tok, c.n_head + 2 * c.n_kv, threads, 1, [&] {
                rope_qk_append_f16(q.data(), q2.data(), k.data(), v.data(), positions, nullptr, kc2.data(),
                                   vc2.data(), c.n_head, c.n_kv, c.head_dim, v_row, c.n_rot, c.neox, 10000.0f, 1.0f,
                                   0.0f, 1.0f, 0.0f, 0.0f, 0.25f, qw.data(), kw.data(), norms, q_eps, k_eps, nullptr);
            });
            const bool same = std::memcmp(q1.data(), q2.data(), q1.size() * 4) == 0 &&
                              std::memcmp(kc1.data(), kc2.data(), kc1.size() * 2) == 0 &&
                              std::memcmp(vc1.data(), vc2.data(), vc1.size() * 2) == 0;
            if (!same && bad++ < 3)
                std::printf("rope_qk_append with norms %d differs: heads %d/%d head_dim %d\n", norms, c.n_head, c.n_kv,
                            c.head_dim);
        }
    }
    std::printf("rope_qk_append_f16 with per-head norms: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

int main() {
    return check_half_rounding() + check_rope() + check_kv_append() + check_rope_qk_append() +
                   check_rope_qk_norm_append()
               ? 1
               : 0;
}
