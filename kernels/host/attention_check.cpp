// The decode attention kernels (attention.cu) on the CPU through the host stand-in, against a
// float64 reference of the same function (f16 keys and values, f32 queries): attention_f16 at 4
// and 16 warps, and attention_f16_split over 1, 7 and 20 key ranges, for SmolLM2's and Gemma 3's
// head shapes, GQA, a sliding window, a soft cap, a query that sees no key (zeros), positions
// inside one range (the CTA writes the output) and over many (the last CTA merges them). Also: every split counter is back at zero after a
// launch (the next launch, or a replayed graph, starts from them), and a token's split result is
// the same bits alone and in a step of three, and a step whose three tokens each read their own
// cache through a kv_table (a batched decode step) gives each token's bits alone, whether the
// caches are contiguous or paged (rows in pages of 16 placed out of order in a pool); with
// attention sinks (gpt-oss), both kernels against float64.
//
// Built and run by `cargo xtask kernels --check`; exits 1 on a mismatch. No GPU, no CUDA.
// The split kernel with 4 warps a CTA and ranges of at least 16 keys (its GPU form: 16 and
// 256), so that a few hundred keys make many ranges and the emulation stays quick.
#define SPLIT_WARPS 4
#define SPLIT_MIN_KEYS 16
#include "../attention.cu"
#include "kv_pages.h"

#include <cstdio>
#include <random>

static std::mt19937 rng(7);

static std::vector<float> random_floats(size_t n, float r) {
    std::uniform_real_distribution<float> u(-r, r);
    std::vector<float> v(n);
    for (auto &x : v) x = u(rng);
    return v;
}

struct Case {
    int n_head, n_kv_head, head_dim, window;
    float softcap;
};

// out[t][h][d] in float64 from the f16 cache, as attention.cu defines it.
static std::vector<double> reference(const Case &c, const std::vector<float> &q, const std::vector<int> &pos,
                                     const std::vector<__half> &k, const std::vector<__half> &v, int kv_len,
                                     float scale, const float *sinks = nullptr) {
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
                    d += (double)q[(t * c.n_head + h) * hd + i] *
                         __half2float(k[((size_t)j * c.n_kv_head + kvh) * hd + i]);
                d *= scale;
                if (c.softcap > 0.0f) d = c.softcap * std::tanh(d / c.softcap);
                s.push_back(d);
                mx = std::max(mx, d);
            }
            double l = 0.0;
            for (auto &x : s) l += (x = std::exp(x - mx));
            if (sinks && hi > lo) l += std::exp((double)sinks[h] - mx);
            for (int j = lo; j < hi; j++)
                for (int i = 0; i < hd; i++)
                    out[(t * c.n_head + h) * hd + i] +=
                        s[j - lo] / l * __half2float(v[((size_t)j * c.n_kv_head + kvh) * hd + i]);
        }
    return out;
}

int main() {
    int bad = 0;
    const int capacity = 320, kv_len = 300;
    for (const Case c : {Case{9, 3, 64, 0, 0.0f}, Case{4, 1, 256, 0, 0.0f}, Case{8, 2, 128, 7, 0.0f},
                         Case{2, 2, 80, 0, 50.0f}}) {
        const int hd = c.head_dim, row = c.n_kv_head * hd;
        std::vector<__half> k(capacity * row), v(capacity * row);
        for (auto &x : k) x = __float2half(random_floats(1, 2.0f)[0]);
        for (auto &x : v) x = __float2half(random_floats(1, 2.0f)[0]);
        const std::vector<int> pos = {299, -1, 40};
        const int n_tok = (int)pos.size(), rows = n_tok * c.n_head;
        // Gemma's head scaled up, so the softmax is sharp.
        const std::vector<float> q = random_floats((size_t)rows * hd, hd == 256 ? 1.0f : 0.5f);
        const float scale = 1.0f / std::sqrt((float)hd);
        const std::vector<double> want = reference(c, q, pos, k, v, kv_len, scale);
        const auto compare = [&](const char *what, int variant, const std::vector<float> &got) {
            double err = 0.0;
            for (size_t i = 0; i < got.size(); i++) {
                const double d = std::fabs(got[i] - want[i]);
                err = std::isnan(d) || std::isnan(err) ? NAN : std::max(err, d);  // a NaN sticks
            }
            // Outputs are convex combinations of values of at most 2: f32 sums of ~300 terms.
            if (!(err <= 2e-5)) {
                bad++;
                std::printf("%s(%d) %d/%d x %d window %d cap %g: max error %g\n", what, variant, c.n_head,
                            c.n_kv_head, hd, c.window, c.softcap, err);
            }
        };
        for (int warps : {4, hd == 256 ? 16 : 4}) {
            if (warps == 4 && hd == 256) continue;
            std::vector<float> out(q.size(), NAN);
            launch(rows, 1, 32, warps, [&] {
                attention_f16(q.data(), pos.data(), k.data(), v.data(), out.data(), c.n_head, c.n_kv_head, hd,
                              kv_len, scale, c.softcap, c.window, 1, nullptr, nullptr, nullptr);
            });
            compare("attention_f16 warps", warps, out);
        }
        // Attention sinks (gpt-oss): a per-head logit in each softmax's denominator; both
        // kernels, one key range and several, against the float64 reference with the sinks.
        {
            std::vector<float> sinks = random_floats(c.n_head, 3.0f);
            for (auto &x : sinks) x += 1.0f;
            const std::vector<double> want_s = reference(c, q, pos, k, v, kv_len, scale, sinks.data());
            const auto compare_s = [&](const char *what, int variant, const std::vector<float> &got) {
                double err = 0.0;
                for (size_t i = 0; i < got.size(); i++) {
                    const double d = std::fabs(got[i] - want_s[i]);
                    err = std::isnan(d) || std::isnan(err) ? NAN : std::max(err, d);  // a NaN sticks
                }
                if (!(err <= 2e-5)) {
                    bad++;
                    std::printf("%s(%d) with sinks %d/%d x %d: max error %g\n", what, variant, c.n_head,
                                c.n_kv_head, hd, err);
                }
            };
            const int warps = hd == 256 ? 16 : 4;
            std::vector<float> out(q.size(), NAN);
            launch(rows, 1, 32, warps, [&] {
                attention_f16(q.data(), pos.data(), k.data(), v.data(), out.data(), c.n_head, c.n_kv_head, hd,
                              kv_len, scale, c.softcap, c.window, 1, nullptr, sinks.data(), nullptr);
            });
            compare_s("attention_f16", warps, out);
            for (int nsplit : {1, 7}) {
                std::vector<float> part((size_t)rows * nsplit * (hd + 2), NAN), o(q.size(), NAN);
                std::vector<unsigned> counters(rows, 0);
                launch(rows, nsplit, 32, SPLIT_WARPS, [&] {
                    attention_f16_split(q.data(), pos.data(), k.data(), v.data(), o.data(), part.data(),
                                        counters.data(), c.n_head, c.n_kv_head, hd, kv_len, scale, c.softcap,
                                        c.window, 1, nullptr, sinks.data(), nullptr);
                });
                compare_s("attention_f16_split", nsplit, o);
            }
        }
        // A batched decode step over separate caches (kv_table): each token's bits equal that
        // token run alone over its own cache, for both kernels; the caches contiguous, then
        // paged.
        for (int paged = 0; paged < 2; paged++) {
            std::vector<std::vector<__half>> ks(n_tok), vs(n_tok);
            std::vector<PagedCache> pk, pv;
            HostTable table(n_tok);
            for (int t = 0; t < n_tok; t++) {
                ks[t].resize(k.size());
                vs[t].resize(v.size());
                for (auto &x : ks[t]) x = __float2half(random_floats(1, 2.0f)[0]);
                for (auto &x : vs[t]) x = __float2half(random_floats(1, 2.0f)[0]);
                pk.emplace_back(capacity, row * 2, 4, 11 + t);
                pv.emplace_back(capacity, row * 2, 4, 11 + t);  // the keys' page table
            }
            for (int t = 0; t < n_tok; t++) {
                if (!paged) {
                    table.set(t, ks[t].data(), vs[t].data());
                    continue;
                }
                pk[t].put(ks[t].data(), capacity);
                pv[t].put(vs[t].data(), capacity);
                table.set(t, pk[t].data<__half>(), pv[t].data<__half>(), pk[t].pages.data(), 4);
            }
            const int warps = hd == 256 ? 16 : 4, nsplit = 7;
            std::vector<float> part((size_t)rows * nsplit * (hd + 2), 0.0f);
            std::vector<unsigned> counters(rows, 0);
            for (int kernel = 0; kernel < 2; kernel++) {
                const auto run = [&](const float *qq, const int *pp, int nr, const __half *kk, const __half *vv,
                                     const unsigned long long *tab, float *o) {
                    if (kernel == 0)
                        launch(nr, 1, 32, warps, [&] {
                            attention_f16(qq, pp, kk, vv, o, c.n_head, c.n_kv_head, hd, kv_len, scale, c.softcap,
                                          c.window, 1, tab, nullptr, nullptr);
                        });
                    else
                        launch(nr, nsplit, 32, SPLIT_WARPS, [&] {
                            attention_f16_split(qq, pp, kk, vv, o, part.data(), counters.data(), c.n_head,
                                                c.n_kv_head, hd, kv_len, scale, c.softcap, c.window, 1, tab,
                                                nullptr, nullptr);
                        });
                };
                std::vector<float> step(q.size(), NAN);
                // The step's own k and v are decoys: the table must win.
                run(q.data(), pos.data(), rows, k.data(), v.data(), table.data(), step.data());
                for (int t = 0; t < n_tok; t++) {
                    std::vector<float> alone((size_t)c.n_head * hd, NAN);
                    run(q.data() + (size_t)t * c.n_head * hd, pos.data() + t, c.n_head, ks[t].data(),
                        vs[t].data(), nullptr, alone.data());
                    if (std::memcmp(alone.data(), step.data() + (size_t)t * c.n_head * hd, alone.size() * 4) !=
                            0 &&
                        bad++ < 3)
                        std::printf("kv_table(kernel %d, paged %d): token %d differs from itself alone\n", kernel,
                                    paged, t);
                }
            }
            for (unsigned x : counters)
                if (x != 0 && bad++ < 3) std::printf("kv_table split: a counter left at %u\n", x);
        }
        for (int nsplit : {1, hd == 256 ? 20 : 7}) {
            std::vector<float> part((size_t)rows * nsplit * (hd + 2), NAN), out(q.size(), NAN);
            std::vector<unsigned> counters(rows, 0);
            const auto run = [&](const float *qq, const int *pp, int nr, float *o) {
                launch(nr, nsplit, 32, SPLIT_WARPS, [&] {
                    attention_f16_split(qq, pp, k.data(), v.data(), o, part.data(), counters.data(), c.n_head,
                                        c.n_kv_head, hd, kv_len, scale, c.softcap, c.window, 1, nullptr,
                                        nullptr, nullptr);
                });
            };
            run(q.data(), pos.data(), rows, out.data());
            compare("attention_f16_split ranges", nsplit, out);
            for (unsigned x : counters)
                if (x != 0 && bad++ < 3) std::printf("split(%d): a counter left at %u\n", nsplit, x);
            if (nsplit == 1) continue;
            // The first token alone: the same bits as in the step.
            std::vector<float> alone((size_t)c.n_head * hd, NAN);
            run(q.data(), pos.data(), c.n_head, alone.data());
            if (std::memcmp(alone.data(), out.data(), alone.size() * 4) != 0 && bad++ < 3)
                std::printf("split(%d): a token alone differs from the same token in a step\n", nsplit);
        }
    }
    std::printf("attention: %s\n", bad ? "MISMATCH" : "ok");
    return bad ? 1 : 0;
}
