// The fused kernels a CUDA plan's decode step runs, against the launches they replace (both run
// on the CPU through the host stand-in, cuda_fp16.h here), bit for bit:
// - rms_norm_q8_1_f32 = rms_norm_f32, then quantize_q8_1;
// - add_rms_norm_f32 / add_rms_norm_q8_1_f32 = add_f32, then rms_norm_f32 (then quantize_q8_1),
//   the sum written too;
// - norm_add_rms_norm_f32 / _q8_1_f32 = rms_norm_f32 of one input, then add_f32 of the other and
//   it, then rms_norm_f32 (then quantize_q8_1), the normed input and the sum written too;
// - swiglu_q8_1_f32 / geglu_q8_1_f32 = swiglu_f32 / geglu_f32, then quantize_q8_1;
// - scale_from_f32 / softcap_from_f32 / gelu_erf_from_f32 = a copy, then the in-place kernel;
// over row lengths that take the norm's register path and its loop, with and without a weight,
// and 1-3 rows. (The matvecs' residual epilogue is checked by mmvq_check.)
//
// Built and run by `cargo xtask kernels --check`; exits 1 on a mismatch. No GPU, no CUDA.
#include "../elementwise.cu"
#include "../norm.cu"
#include "../quantize.cu"

#include <cstdio>
#include <random>

static std::mt19937 rng(13);

static std::vector<float> random_floats(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = u(rng);
    return v;
}

template <typename T> static bool same(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

static void quantize(const std::vector<float> &x, std::vector<block_q8_1> &q) {
    const int nblocks = (int)x.size() / QK;
    launch((nblocks + 7) / 8, 1, 256, 1, [&] { quantize_q8_1(x.data(), q.data(), nblocks); });
}

static int check_norms() {
    int bad = 0;
    struct Case {
        int k, threads, rows;
        bool weight;
    };
    // 576 on 96 threads and 2048 on 256: values held in registers; 1024 on 64 threads and 320
    // on 32: the loop.
    for (const Case c : {Case{576, 96, 1, true}, Case{640, 96, 2, true}, Case{2048, 256, 1, false},
                         Case{1024, 64, 3, true}, Case{320, 32, 2, false}, Case{32, 32, 1, true}}) {
        const size_t n = (size_t)c.rows * c.k;
        const int nb = (int)n / QK;
        const std::vector<float> x = random_floats(n, -3.0f, 3.0f), r = random_floats(n, -1.0f, 1.0f);
        const std::vector<float> w = random_floats(c.k, 0.5f, 1.5f);
        const float *wp = c.weight ? w.data() : nullptr;
        const float eps = 1e-6f;
        const auto norm = [&](const float *in, float *out) {
            launch(c.rows, 1, c.threads, 1, [&] { rms_norm_f32(in, wp, out, c.k, eps); });
        };
        // Two-step forms.
        std::vector<float> sum1(n), out1(n), out_plain(n);
        std::vector<block_q8_1> q1(nb), q_plain(nb);
        launch(1, 1, 256, 1, [&] { add_f32(x.data(), r.data(), sum1.data(), (long long)n, (long long)n); });
        norm(sum1.data(), out1.data());
        quantize(out1, q1);
        norm(x.data(), out_plain.data());
        quantize(out_plain, q_plain);
        // Fused forms.
        std::vector<float> sum2(n, NAN), out2(n, NAN), sum3(n, NAN), out3(n, NAN), out4(n, NAN);
        std::vector<block_q8_1> q2(nb), q4(nb);
        launch(c.rows, 1, c.threads, 1, [&] {
            add_rms_norm_q8_1_f32(x.data(), r.data(), sum2.data(), wp, out2.data(), q2.data(), c.k, eps);
        });
        launch(c.rows, 1, c.threads, 1,
               [&] { add_rms_norm_f32(x.data(), r.data(), sum3.data(), wp, out3.data(), c.k, eps); });
        launch(c.rows, 1, c.threads, 1, [&] { rms_norm_q8_1_f32(x.data(), wp, out4.data(), q4.data(), c.k, eps); });
        const bool ok = same(sum1, sum2) && same(out1, out2) && same(q1, q2) && same(sum1, sum3) &&
                        same(out1, out3) && same(out_plain, out4) && same(q_plain, q4);
        if (!ok && bad++ < 3) std::printf("fused rms norm differs: k %d threads %d rows %d\n", c.k, c.threads, c.rows);
        // A sandwich norm of `r` (its own weight and eps), added to `x`, then the norm: the
        // two-step form (rms_norm_f32, add_f32 with the residual second, rms_norm_f32).
        const std::vector<float> w1 = random_floats(c.k, 0.5f, 1.5f);
        const float eps1 = 1e-5f;
        std::vector<float> normed1(n), sum5(n), out5(n);
        std::vector<block_q8_1> q5(nb);
        launch(c.rows, 1, c.threads, 1, [&] { rms_norm_f32(r.data(), w1.data(), normed1.data(), c.k, eps1); });
        launch(1, 1, 256, 1,
               [&] { add_f32(normed1.data(), x.data(), sum5.data(), (long long)n, (long long)n); });
        norm(sum5.data(), out5.data());
        quantize(out5, q5);
        std::vector<float> normed6(n, NAN), sum6(n, NAN), out6(n, NAN), normed7(n, NAN), sum7(n, NAN),
            out7(n, NAN);
        std::vector<block_q8_1> q6(nb);
        launch(c.rows, 1, c.threads, 1, [&] {
            norm_add_rms_norm_q8_1_f32(r.data(), w1.data(), normed6.data(), x.data(), sum6.data(), wp, out6.data(),
                                       q6.data(), c.k, eps1, eps);
        });
        launch(c.rows, 1, c.threads, 1, [&] {
            norm_add_rms_norm_f32(r.data(), w1.data(), normed7.data(), x.data(), sum7.data(), wp, out7.data(), c.k,
                                  eps1, eps);
        });
        const bool ok2 = same(normed1, normed6) && same(sum5, sum6) && same(out5, out6) && same(q5, q6) &&
                         same(normed1, normed7) && same(sum5, sum7) && same(out5, out7);
        if (!ok2 && bad++ < 3)
            std::printf("norm + add + norm differs: k %d threads %d rows %d\n", c.k, c.threads, c.rows);
    }
    std::printf("rms_norm with add / Q8_1, norm + add + norm: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

static int check_glu() {
    int bad = 0;
    for (const int n : {32, 1536, 2080}) {
        const std::vector<float> g = random_floats(n, -6.0f, 6.0f), u = random_floats(n, -2.0f, 2.0f);
        const int nb = n / QK;
        for (int gelu_form = 0; gelu_form < 2; gelu_form++) {
            std::vector<float> out1(n), out2(n, NAN);
            std::vector<block_q8_1> q1(nb), q2(nb);
            launch(1, 1, 256, 1, [&] {
                if (gelu_form) geglu_f32(g.data(), u.data(), out1.data(), n);
                else swiglu_f32(g.data(), u.data(), out1.data(), n);
            });
            quantize(out1, q1);
            launch((nb + 7) / 8, 1, 256, 1, [&] {
                if (gelu_form) geglu_q8_1_f32(g.data(), u.data(), out2.data(), q2.data(), nb);
                else swiglu_q8_1_f32(g.data(), u.data(), out2.data(), q2.data(), nb);
            });
            if (!(same(out1, out2) && same(q1, q2)) && bad++ < 3)
                std::printf("%s with Q8_1 differs: n %d\n", gelu_form ? "geglu" : "swiglu", n);
        }
    }
    std::printf("swiglu/geglu with Q8_1: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

static int check_from_src() {
    const long long n = 1000;
    const std::vector<float> src = random_floats(n, -8.0f, 8.0f);
    int bad = 0;
    for (int op = 0; op < 3; op++) {
        std::vector<float> in_place = src, out(n, NAN);
        launch(2, 1, 256, 1, [&] {
            if (op == 0) scale_f32(in_place.data(), n, 0.125f);
            else if (op == 1) softcap_f32(in_place.data(), n, 3.0f);
            else gelu_erf_f32(in_place.data(), n);
        });
        launch(3, 1, 256, 1, [&] {
            if (op == 0) scale_from_f32(src.data(), out.data(), n, 0.125f);
            else if (op == 1) softcap_from_f32(src.data(), out.data(), n, 3.0f);
            else gelu_erf_from_f32(src.data(), out.data(), n);
        });
        if (!same(in_place, out) && bad++ < 3) std::printf("elementwise op %d from src differs\n", op);
    }
    std::printf("scale/softcap/gelu_erf from src: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

int main() { return check_norms() + check_glu() + check_from_src() ? 1 : 0; }
