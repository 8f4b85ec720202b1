// The state-space kernels (ssm.cu) on the CPU through the host stand-in, against a float64
// reference written from the CPU engine's definitions (`cpu::ssm_conv`, `cpu::ssm_scan`): a
// sequence's 9 tokens in one step, and in steps of 4, 1 and 4 carrying the state between them
// (the same outputs and final state). Convolutions of width 4 (Mamba) and 1 (no history), with
// and without bias; scans of Mamba's shape (a head per channel, A per state index, 16 states)
// and Mamba-2's (heads of 8 channels, 2 groups, A per head, 128 states; 40 states: a partial
// lane set).
//
// Built and run by `cargo xtask kernels --check`; exits 1 on a mismatch. No GPU, no CUDA.
#include "../ssm.cu"

#include <cstdio>
#include <random>

static std::mt19937 rng(17);

static std::vector<float> random_floats(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = u(rng);
    return v;
}

static double max_err(const std::vector<float> &a, const std::vector<double> &b) {
    double e = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = std::fabs(a[i] - b[i]) / std::max(1.0, std::fabs(b[i]));
        e = std::isnan(d) || std::isnan(e) ? NAN : std::max(e, d);
    }
    return e;
}

static int check_conv() {
    int bad = 0;
    const int n_t = 9, channels = 300;
    for (const int d_conv : {4, 1}) {
        for (const bool with_bias : {true, false}) {
            const int hist = d_conv - 1;
            const auto x = random_floats((size_t)n_t * channels, -1, 1), w = random_floats((size_t)channels * d_conv, -1, 1),
                       b = random_floats(channels, -1, 1), s0 = random_floats((size_t)channels * hist, -1, 1);
            // Reference: the window (state, then inputs) per channel.
            std::vector<double> want((size_t)n_t * channels);
            std::vector<double> want_state((size_t)channels * hist);
            for (int c = 0; c < channels; c++) {
                std::vector<double> win;
                for (int j = 0; j < hist; j++) win.push_back(s0[(size_t)c * hist + j]);
                for (int t = 0; t < n_t; t++) win.push_back(x[(size_t)t * channels + c]);
                for (int t = 0; t < n_t; t++) {
                    double sum = 0.0;
                    for (int i = 0; i < d_conv; i++) sum += win[t + i] * w[(size_t)c * d_conv + i];
                    want[(size_t)t * channels + c] = sum + (with_bias ? b[c] : 0.0);
                }
                for (int j = 0; j < hist; j++) want_state[(size_t)c * hist + j] = win[n_t + j];
            }
            for (const auto &steps : {std::vector<int>{9}, std::vector<int>{4, 1, 4}}) {
                std::vector<float> state = s0, out((size_t)n_t * channels, NAN);
                int t0 = 0;
                for (int n : steps) {
                    launch((channels + 255) / 256, 1, 256, 1, [&] {
                        ssm_conv_f32(x.data() + (size_t)t0 * channels, w.data(), with_bias ? b.data() : nullptr,
                                     state.data(), out.data() + (size_t)t0 * channels, n, channels, d_conv);
                    });
                    t0 += n;
                }
                const double e = max_err(out, want), es = max_err(state, want_state);
                if (!(e <= 1e-6 && es == 0.0) && bad++ < 3)
                    std::printf("ssm_conv d_conv %d bias %d steps %zu: error %g, state %g\n", d_conv, with_bias,
                                steps.size(), e, es);
            }
        }
    }
    std::printf("ssm_conv_f32: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

static int check_scan() {
    int bad = 0;
    const int n_t = 9;
    struct Case {
        int d_state, n_head, head_dim, n_group;
        bool a_per_state;
    };
    for (const Case p : {Case{16, 96, 1, 1, true}, Case{128, 6, 8, 2, false}, Case{40, 4, 8, 1, false}}) {
        const int ch = p.n_head * p.head_dim, bc_row = 2 * p.n_group * p.d_state;
        const auto x = random_floats((size_t)n_t * ch, -1, 1), dt = random_floats((size_t)n_t * p.n_head, -3, 2),
                   bc = random_floats((size_t)n_t * bc_row, -1, 1), d = random_floats(p.n_head, -1, 1),
                   s0 = random_floats((size_t)ch * p.d_state, -1, 1);
        // A is negative (a decay).
        const auto a = random_floats(p.a_per_state ? (size_t)p.n_head * p.d_state : (size_t)p.n_head, -2, -0.1f);
        std::vector<double> want((size_t)n_t * ch), st(s0.begin(), s0.end());
        const int hpg = p.n_head / p.n_group;
        for (int t = 0; t < n_t; t++)
            for (int c = 0; c < ch; c++) {
                const int h = c / p.head_dim, g = h / hpg;
                const double v = dt[(size_t)t * p.n_head + h];
                const double delta = v > 20.0 ? v : std::log1p(std::exp(v));
                const double xv = x[(size_t)t * ch + c];
                double sum = 0.0;
                for (int k = 0; k < p.d_state; k++) {
                    const double av = p.a_per_state ? a[(size_t)h * p.d_state + k] : a[h];
                    double &s = st[(size_t)c * p.d_state + k];
                    s = s * std::exp(delta * av) + bc[(size_t)t * bc_row + (size_t)g * p.d_state + k] * xv * delta;
                    sum += s * bc[(size_t)t * bc_row + (size_t)(p.n_group + g) * p.d_state + k];
                }
                want[(size_t)t * ch + c] = sum + xv * d[h];
            }
        for (const auto &steps : {std::vector<int>{9}, std::vector<int>{4, 1, 4}}) {
            std::vector<float> state = s0, y((size_t)n_t * ch, NAN);
            int t0 = 0;
            for (int n : steps) {
                launch((ch + 3) / 4, 1, 32, 4, [&] {
                    ssm_scan_f32(state.data(), x.data() + (size_t)t0 * ch, dt.data() + (size_t)t0 * p.n_head, a.data(),
                                 bc.data() + (size_t)t0 * bc_row, d.data(), y.data() + (size_t)t0 * ch, n, p.d_state,
                                 p.n_head, p.head_dim, p.n_group, p.a_per_state ? 1 : 0);
                });
                t0 += n;
            }
            const double e = max_err(y, want), es = max_err(state, st);
            if (!(e <= 2e-5 && es <= 2e-5) && bad++ < 3)
                std::printf("ssm_scan d_state %d heads %d x %d groups %d steps %zu: error %g, state %g\n", p.d_state,
                            p.n_head, p.head_dim, p.n_group, steps.size(), e, es);
        }
    }
    std::printf("ssm_scan_f32: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}

int main() { return check_conv() + check_scan() ? 1 : 0; }
