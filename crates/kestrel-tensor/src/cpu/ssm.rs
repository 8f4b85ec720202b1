//! State-space ops (Mamba, Mamba-2): the causal depthwise convolution over a sequence's tokens
//! and the selective scan, each carrying one sequence's recurrent state from step to step.
//!
//! Both follow ggml's CPU kernels (`ggml_compute_forward_ssm_conv_f32`,
//! `ggml_compute_forward_ssm_scan_f32`) in meaning and in summation order: a convolution output
//! is the sum over the window from its oldest value, a scan output the sum over the state index.
//! Every channel (convolution) and head (scan) is computed by one thread alone, so the results
//! do not depend on the thread count, and a sequence's results do not depend on what else is in
//! its batch (the ops run per sequence).

use rayon::prelude::*;

use super::out_ptr::OutPtr;
use crate::{Result, TensorError};

fn check(op: &'static str, what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected != actual {
        return Err(TensorError::LengthMismatch {
            op,
            what,
            expected,
            actual,
        });
    }
    Ok(())
}

/// A causal depthwise convolution of width `d_conv` over the `n_t` tokens of one sequence.
///
/// `x` is token-major (`n_t × channels`); `weight` holds `d_conv` taps per channel
/// (`channels × d_conv`, ggml dims `[d_conv, channels]`, oldest tap first); `state` holds each
/// channel's previous `d_conv - 1` inputs, oldest first (`channels × (d_conv - 1)`, llama.cpp's
/// conv state). `out[t][c] = Σ_i win_c[t + i] · weight[c][i] (+ bias[c])`, where `win_c` is the
/// channel's state followed by its inputs; `state` is then replaced by the last `d_conv - 1`
/// values of `win_c`.
///
/// # Errors
/// `LengthMismatch` when a buffer does not have the size the dimensions give; `InvalidParam`
/// for `d_conv` 0.
#[allow(clippy::too_many_arguments)]
pub fn ssm_conv(
    x: &[f32],
    n_t: usize,
    channels: usize,
    d_conv: usize,
    weight: &[f32],
    bias: Option<&[f32]>,
    state: &mut [f32],
    out: &mut [f32],
) -> Result<()> {
    const OP: &str = "ssm_conv";
    if d_conv == 0 {
        return Err(TensorError::InvalidParam {
            op: OP,
            why: "a convolution of width 0",
        });
    }
    let hist = d_conv - 1;
    check(OP, "x", n_t * channels, x.len())?;
    check(OP, "out", n_t * channels, out.len())?;
    check(OP, "weight", channels * d_conv, weight.len())?;
    check(OP, "state", channels * hist, state.len())?;
    if let Some(b) = bias {
        check(OP, "bias", channels, b.len())?;
    }
    if n_t == 0 {
        return Ok(());
    }
    // Channel-parallel: each task owns a run of channels (their state and their output column).
    let chunk = channels
        .div_ceil(rayon::current_num_threads().max(1))
        .max(64);
    let o = OutPtr::new(out);
    let work = |ci: usize, st: &mut [f32]| {
        let c0 = ci * chunk;
        let c1 = (c0 + chunk).min(channels);
        let mut win = [0f32; 64];
        for c in c0..c1 {
            let s = &mut st[(c - c0) * hist..(c - c0 + 1) * hist];
            let w = &weight[c * d_conv..(c + 1) * d_conv];
            let b = bias.map_or(0.0, |b| b[c]);
            // The window as a ring: `win[j % d_conv]` for the window's j-th value.
            let at = |j: usize, s: &[f32]| {
                if j < hist {
                    s[j]
                } else {
                    x[(j - hist) * channels + c]
                }
            };
            if d_conv <= win.len() {
                for t in 0..n_t {
                    for (i, slot) in win[..d_conv].iter_mut().enumerate() {
                        *slot = at(t + i, s);
                    }
                    let mut sum = 0.0f32;
                    for i in 0..d_conv {
                        sum += win[i] * w[i];
                    }
                    // SAFETY: element (t, c) is this task's alone (its channels), in bounds.
                    unsafe { o.write(t * channels + c, sum + b) };
                }
            } else {
                for t in 0..n_t {
                    let mut sum = 0.0f32;
                    for (i, &wi) in w.iter().enumerate() {
                        sum += at(t + i, s) * wi;
                    }
                    // SAFETY: as above.
                    unsafe { o.write(t * channels + c, sum + b) };
                }
            }
            // The last `hist` values of the window (state then the n_t inputs).
            for j in 0..hist {
                let src = n_t + j;
                s[j] = if src < hist {
                    s[src]
                } else {
                    x[(src - hist) * channels + c]
                };
            }
        }
    };
    if hist == 0 {
        (0..channels.div_ceil(chunk))
            .into_par_iter()
            .for_each(|ci| work(ci, &mut []));
    } else {
        state
            .par_chunks_mut(chunk * hist)
            .enumerate()
            .for_each(|(ci, st)| work(ci, st));
    }
    Ok(())
}

/// The shape of a selective scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsmScanParams {
    /// State size per channel (`ssm.state_size`).
    pub d_state: usize,
    /// Heads: Mamba's inner channels (one value each), Mamba-2's heads.
    pub n_head: usize,
    /// Channels per head (1 for Mamba).
    pub head_dim: usize,
    /// Groups of B and C shared by consecutive heads (1 for Mamba).
    pub n_group: usize,
    /// A per head and state index (Mamba, `n_head × d_state`); false: one per head (Mamba-2).
    pub a_per_state: bool,
}

impl SsmScanParams {
    /// Channels: `n_head · head_dim`.
    pub fn channels(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Values of one sequence's state: `channels · d_state`.
    pub fn state_len(&self) -> usize {
        self.channels() * self.d_state
    }
}

/// `ln(1 + eˣ)`, as ggml computes it (`x` itself above 20).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// The selective scan of one sequence's `n_t` tokens (ggml's `ggml_ssm_scan`), plus the skip
/// term: for each token, head `h`, channel `i` of it and state index `s`,
/// `Δ = softplus(dt[h])`, `state = state · exp(Δ · A) + B[g][s] · x · Δ` (g: the head's group)
/// and `y = Σ_s state · C[g][s] + x · D[h]`.
///
/// Layouts, all row-major per token: `x` and `y` are `n_t × channels` (head-major), `dt` is
/// `n_t × n_head` (the bias already added), `bc` is `n_t × (2 · n_group · d_state)` (B's groups,
/// then C's), `a` is `n_head × d_state` or `n_head` (see [`SsmScanParams::a_per_state`]), `d`
/// is `n_head`, and `state` is `channels × d_state`, updated in place.
///
/// # Errors
/// `LengthMismatch` when a buffer does not have the size the parameters give; `InvalidParam`
/// when the heads are not a whole number of groups.
#[allow(clippy::too_many_arguments)]
pub fn ssm_scan(
    p: &SsmScanParams,
    state: &mut [f32],
    x: &[f32],
    dt: &[f32],
    a: &[f32],
    bc: &[f32],
    d: &[f32],
    n_t: usize,
    y: &mut [f32],
) -> Result<()> {
    const OP: &str = "ssm_scan";
    let (ds, nh, hd, ng) = (p.d_state, p.n_head, p.head_dim, p.n_group);
    if ng == 0 || nh == 0 || !nh.is_multiple_of(ng) {
        return Err(TensorError::InvalidParam {
            op: OP,
            why: "the heads must be a non-zero whole number of groups",
        });
    }
    if ds == 0 {
        return Err(TensorError::InvalidParam {
            op: OP,
            why: "a state of size 0",
        });
    }
    let ch = p.channels();
    check(OP, "state", p.state_len(), state.len())?;
    check(OP, "x", n_t * ch, x.len())?;
    check(OP, "y", n_t * ch, y.len())?;
    check(OP, "dt", n_t * nh, dt.len())?;
    check(OP, "bc", n_t * 2 * ng * ds, bc.len())?;
    check(OP, "a", if p.a_per_state { nh * ds } else { nh }, a.len())?;
    check(OP, "d", nh, d.len())?;
    if n_t == 0 || hd == 0 {
        return Ok(());
    }
    let heads_per_group = nh / ng;
    let bc_row = 2 * ng * ds;
    // Head-parallel: a task owns a run of heads (their state, their output columns) for all
    // tokens; the work per head is `n_t · head_dim · d_state`.
    let per_task = nh
        .div_ceil(rayon::current_num_threads().max(1) * 4)
        .max(4096 / (hd * ds).max(1))
        .max(1);
    let o = OutPtr::new(y);
    state
        .par_chunks_mut(per_task * hd * ds)
        .enumerate()
        .for_each(|(ti, st)| {
            let h0 = ti * per_task;
            let h1 = (h0 + per_task).min(nh);
            for t in 0..n_t {
                let xr = &x[t * ch..(t + 1) * ch];
                let dtr = &dt[t * nh..(t + 1) * nh];
                let bcr = &bc[t * bc_row..(t + 1) * bc_row];
                for h in h0..h1 {
                    let g = h / heads_per_group;
                    let bv = &bcr[g * ds..(g + 1) * ds];
                    let cv = &bcr[(ng + g) * ds..(ng + g + 1) * ds];
                    let delta = softplus(dtr[h]);
                    for i in 0..hd {
                        let c = h * hd + i;
                        let xv = xr[c];
                        let x_dt = xv * delta;
                        let s = &mut st[(c - h0 * hd) * ds..(c - h0 * hd + 1) * ds];
                        let mut sum = 0.0f32;
                        if p.a_per_state {
                            let av = &a[h * ds..(h + 1) * ds];
                            for k in 0..ds {
                                let v = s[k] * (delta * av[k]).exp() + bv[k] * x_dt;
                                sum += v * cv[k];
                                s[k] = v;
                            }
                        } else {
                            let da = (delta * a[h]).exp();
                            for k in 0..ds {
                                let v = s[k] * da + bv[k] * x_dt;
                                sum += v * cv[k];
                                s[k] = v;
                            }
                        }
                        // SAFETY: element (t, c) belongs to this task's heads, in bounds.
                        unsafe { o.write(t * ch + c, sum + xv * d[h]) };
                    }
                }
            }
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn rand(n: usize, seed: &mut u64) -> Vec<f32> {
        (0..n).map(|_| lcg(seed)).collect()
    }

    /// The convolution in f64 over the concatenated window.
    fn conv_ref(
        x: &[f32],
        n_t: usize,
        ch: usize,
        dc: usize,
        w: &[f32],
        b: &[f32],
        st: &[f32],
    ) -> (Vec<f64>, Vec<f32>) {
        let hist = dc - 1;
        let mut out = vec![0f64; n_t * ch];
        let mut new_state = vec![0f32; ch * hist];
        for c in 0..ch {
            let mut win: Vec<f32> = st[c * hist..(c + 1) * hist].to_vec();
            win.extend((0..n_t).map(|t| x[t * ch + c]));
            for t in 0..n_t {
                out[t * ch + c] = (0..dc)
                    .map(|i| win[t + i] as f64 * w[c * dc + i] as f64)
                    .sum::<f64>()
                    + b[c] as f64;
            }
            new_state[c * hist..(c + 1) * hist].copy_from_slice(&win[win.len() - hist..]);
        }
        (out, new_state)
    }

    #[test]
    fn conv_matches_f64_and_carries_state() {
        let mut seed = 7;
        for (n_t, ch, dc) in [(1, 5, 4), (3, 130, 4), (9, 70, 4), (2, 3, 1), (5, 8, 70)] {
            let x = rand(n_t * ch, &mut seed);
            let w = rand(ch * dc, &mut seed);
            let b = rand(ch, &mut seed);
            let st0 = rand(ch * (dc - 1), &mut seed);
            let (want, want_state) = conv_ref(&x, n_t, ch, dc, &w, &b, &st0);
            let mut st = st0.clone();
            let mut out = vec![0f32; n_t * ch];
            ssm_conv(&x, n_t, ch, dc, &w, Some(&b), &mut st, &mut out).unwrap();
            for (g, w) in out.iter().zip(&want) {
                assert!(
                    (*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{g} vs {w}"
                );
            }
            assert_eq!(st, want_state, "n_t {n_t} ch {ch} dc {dc}");
        }
    }

    #[test]
    fn conv_token_by_token_equals_one_step() {
        let mut seed = 11;
        let (n_t, ch, dc) = (7, 300, 4);
        let x = rand(n_t * ch, &mut seed);
        let w = rand(ch * dc, &mut seed);
        let st0 = rand(ch * (dc - 1), &mut seed);
        let mut st_all = st0.clone();
        let mut all = vec![0f32; n_t * ch];
        ssm_conv(&x, n_t, ch, dc, &w, None, &mut st_all, &mut all).unwrap();
        let mut st = st0;
        for t in 0..n_t {
            let mut o = vec![0f32; ch];
            ssm_conv(
                &x[t * ch..(t + 1) * ch],
                1,
                ch,
                dc,
                &w,
                None,
                &mut st,
                &mut o,
            )
            .unwrap();
            assert_eq!(o, all[t * ch..(t + 1) * ch], "token {t}");
        }
        assert_eq!(st, st_all);
    }

    #[allow(clippy::too_many_arguments)]
    fn scan_ref(
        p: &SsmScanParams,
        st: &mut [f64],
        x: &[f32],
        dt: &[f32],
        a: &[f32],
        bc: &[f32],
        d: &[f32],
        n_t: usize,
    ) -> Vec<f64> {
        let (ds, nh, hd, ng) = (p.d_state, p.n_head, p.head_dim, p.n_group);
        let ch = nh * hd;
        let mut y = vec![0f64; n_t * ch];
        for t in 0..n_t {
            for h in 0..nh {
                let g = h / (nh / ng);
                let dtv = dt[t * nh + h] as f64;
                let delta = if dtv > 20.0 {
                    dtv
                } else {
                    (1.0 + dtv.exp()).ln()
                };
                for i in 0..hd {
                    let c = h * hd + i;
                    let xv = x[t * ch + c] as f64;
                    let mut sum = 0.0;
                    for k in 0..ds {
                        let av = if p.a_per_state { a[h * ds + k] } else { a[h] } as f64;
                        let b = bc[t * 2 * ng * ds + g * ds + k] as f64;
                        let cc = bc[t * 2 * ng * ds + (ng + g) * ds + k] as f64;
                        let s = &mut st[c * ds + k];
                        *s = *s * (delta * av).exp() + b * xv * delta;
                        sum += *s * cc;
                    }
                    y[t * ch + c] = sum + xv * d[h] as f64;
                }
            }
        }
        y
    }

    #[test]
    fn scan_matches_f64_for_both_forms() {
        let mut seed = 3;
        for (a_per_state, nh, hd, ng, ds, n_t) in [
            (true, 40, 1, 1, 16, 5),
            (true, 7, 1, 1, 3, 1),
            (false, 8, 16, 2, 32, 6),
            (false, 4, 8, 4, 5, 2),
            (false, 3, 2, 1, 7, 9),
        ] {
            let p = SsmScanParams {
                d_state: ds,
                n_head: nh,
                head_dim: hd,
                n_group: ng,
                a_per_state,
            };
            let ch = p.channels();
            let x = rand(n_t * ch, &mut seed);
            let dt: Vec<f32> = rand(n_t * nh, &mut seed).iter().map(|v| v * 3.0).collect();
            let a: Vec<f32> = rand(if a_per_state { nh * ds } else { nh }, &mut seed)
                .iter()
                .map(|v| -v.abs() - 0.1)
                .collect();
            let bc = rand(n_t * 2 * ng * ds, &mut seed);
            let d = rand(nh, &mut seed);
            let st0 = rand(p.state_len(), &mut seed);
            let mut st64: Vec<f64> = st0.iter().map(|&v| v as f64).collect();
            let want = scan_ref(&p, &mut st64, &x, &dt, &a, &bc, &d, n_t);
            let mut st = st0;
            let mut y = vec![0f32; n_t * ch];
            ssm_scan(&p, &mut st, &x, &dt, &a, &bc, &d, n_t, &mut y).unwrap();
            for (g, w) in y.iter().zip(&want) {
                assert!(
                    (*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{g} vs {w}"
                );
            }
            for (g, w) in st.iter().zip(&st64) {
                assert!(
                    (*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn scan_is_the_same_for_any_thread_count_and_split() {
        let p = SsmScanParams {
            d_state: 16,
            n_head: 300,
            head_dim: 1,
            n_group: 1,
            a_per_state: true,
        };
        let mut seed = 5;
        let n_t = 6;
        let ch = p.channels();
        let x = rand(n_t * ch, &mut seed);
        let dt = rand(n_t * p.n_head, &mut seed);
        let a: Vec<f32> = rand(p.n_head * p.d_state, &mut seed)
            .iter()
            .map(|v| -v.abs())
            .collect();
        let bc = rand(n_t * 2 * p.d_state, &mut seed);
        let d = rand(p.n_head, &mut seed);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut st = vec![0.5f32; p.state_len()];
                let mut y = vec![0f32; n_t * ch];
                ssm_scan(&p, &mut st, &x, &dt, &a, &bc, &d, n_t, &mut y).unwrap();
                (y, st)
            })
        };
        let one = run(1);
        assert_eq!(one, run(3));
        // Token by token equals one step.
        let mut st = vec![0.5f32; p.state_len()];
        for t in 0..n_t {
            let mut y = vec![0f32; ch];
            ssm_scan(
                &p,
                &mut st,
                &x[t * ch..(t + 1) * ch],
                &dt[t * p.n_head..(t + 1) * p.n_head],
                &a,
                &bc[t * 2 * p.d_state..(t + 1) * 2 * p.d_state],
                &d,
                1,
                &mut y,
            )
            .unwrap();
            assert_eq!(y, one.0[t * ch..(t + 1) * ch], "token {t}");
        }
        assert_eq!(st, one.1);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let p = SsmScanParams {
            d_state: 4,
            n_head: 3,
            head_dim: 1,
            n_group: 2,
            a_per_state: false,
        };
        let mut st = vec![0f32; 12];
        let mut y = vec![0f32; 3];
        let r = ssm_scan(
            &p, &mut st, &[0.0; 3], &[0.0; 3], &[0.0; 3], &[0.0; 16], &[0.0; 3], 1, &mut y,
        );
        assert!(r.is_err());
        let mut out = vec![0f32; 4];
        assert!(ssm_conv(&[0.0; 4], 1, 4, 0, &[], None, &mut [], &mut out).is_err());
        assert!(ssm_conv(
            &[0.0; 4],
            1,
            4,
            4,
            &[0.0; 15],
            None,
            &mut [0.0; 12],
            &mut out
        )
        .is_err());
    }
}
