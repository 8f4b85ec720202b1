//! Rotary position embedding as ggml computes it (`ggml_rope_ext`): normal mode (adjacent pairs,
//! llama) and neox mode (first/second halves, gemma/qwen), per-token positions, `freq_base`,
//! linear `freq_scale`, partial rotary dims (`n_rot < head_dim`, the rest copied), YaRN
//! (`ext_factor`, `attn_factor`, `beta_fast`/`beta_slow`, `n_ctx_orig`, following ggml's
//! `rope_yarn` and `ggml_rope_yarn_corr_dims`) and per-dim frequency divisors (llama3's
//! `rope_freqs` tensor).
//!
//! Angles are built as ggml builds them, in f32: `theta = pos`, multiplied by
//! `freq_base^(-2/n_rot)` once per pair. That product drifts from the exact `pos * base^(-i/n)`
//! by a few f32 ulps per step (so by ~1e-6 relative, ~1e-4 rad at position 100); kestrel keeps
//! ggml's recipe so that its results round as llama.cpp's do.

use rayon::prelude::*;

use crate::error::{Result, TensorError};

/// Most rotary dims supported.
pub const MAX_ROT: usize = 1024;

/// Which elements form a rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RopeMode {
    /// Adjacent pairs `(x[2i], x[2i+1])` (ggml mode 0; llama, mistral).
    #[default]
    Normal,
    /// Halves `(x[i], x[i + n_rot/2])` (ggml `GGML_ROPE_TYPE_NEOX`; gemma, qwen, phi).
    Neox,
}

/// RoPE settings; the defaults are plain RoPE with base 10000 over the full head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Pairing mode.
    pub mode: RopeMode,
    /// Rotated dims per head (even, `<= head_dim`); 0 means the whole head.
    pub n_rot: usize,
    /// Base of the frequencies (`rope.freq_base`).
    pub freq_base: f32,
    /// Linear position scaling (`1 / rope.scaling.factor` for linear and YaRN scaling).
    pub freq_scale: f32,
    /// YaRN extrapolation mix (0 disables YaRN).
    pub ext_factor: f32,
    /// Magnitude scale of cos/sin (YaRN's mscale; 1 otherwise).
    pub attn_factor: f32,
    /// YaRN high-frequency boundary, in rotations.
    pub beta_fast: f32,
    /// YaRN low-frequency boundary, in rotations.
    pub beta_slow: f32,
    /// Context length the model was trained with (YaRN).
    pub n_ctx_orig: usize,
    /// Multi-axis RoPE sections of a text step (qwen2vl, qwen3vl), when some pairs fall in the
    /// fourth section: those pairs stay unrotated (see [`MropeSections`]).
    pub mrope: Option<MropeSections>,
}

/// M-RoPE's sections (pairs per axis: time, height, width, extra) and their layout, for text
/// tokens: llama.cpp gives a text token the positions `[p, p, p, 0]`, so a pair the rule below
/// assigns to the fourth axis rotates by angle 0 (cos and sin are the magnitude scale and 0)
/// while every other pair rotates at `p`. Pair `i`'s sector is `i % Σ sections`; it is in the
/// fourth axis when
/// - contiguous (qwen2vl): `sector >= s0 + s1 + s2`;
/// - interleaved (qwen3vl's "imrope"): not (`sector % 3 == 1 && sector < 3·s1`), not
///   (`sector % 3 == 2 && sector < 3·s2`) and not (`sector % 3 == 0 && sector < 3·s0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MropeSections {
    /// Pairs of the time, height, width and extra axes.
    pub sections: [u32; 4],
    /// Interleaved (qwen3vl) rather than contiguous (qwen2vl) sections.
    pub interleaved: bool,
}

impl MropeSections {
    /// Whether pair `i` takes the fourth axis's position (0 for text: unrotated).
    pub fn fourth_axis(&self, i: usize) -> bool {
        let [s0, s1, s2, s3] = self.sections.map(|s| s as usize);
        let total = s0 + s1 + s2 + s3;
        if total == 0 {
            return false;
        }
        let sector = i % total;
        if self.interleaved {
            !((sector % 3 == 1 && sector < 3 * s1)
                || (sector % 3 == 2 && sector < 3 * s2)
                || (sector.is_multiple_of(3) && sector < 3 * s0))
        } else {
            sector >= s0 + s1 + s2
        }
    }

    /// Whether any of the `n_rot / 2` pairs takes the fourth axis.
    pub fn leaves_unrotated(&self, n_rot: usize) -> bool {
        (0..n_rot / 2).any(|i| self.fourth_axis(i))
    }
}

impl Default for RopeParams {
    fn default() -> Self {
        RopeParams {
            mode: RopeMode::Normal,
            n_rot: 0,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 0,
            mrope: None,
        }
    }
}

/// ggml's `ggml_rope_yarn_corr_dim`: the dim at which a frequency makes `n_rot` rotations over
/// `n_ctx_orig` positions.
fn corr_dim(n_dims: usize, n_ctx_orig: usize, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// ggml's `ggml_rope_yarn_corr_dims`: the first and last dims of YaRN's interpolation ramp.
pub fn rope_yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: usize,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let start = corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base).floor();
    let end = corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base).ceil();
    [start.max(0.0), end.min(n_dims as f32 - 1.0)]
}

/// ggml's `rope_yarn_ramp` (note the integer `i0 / 2`).
fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// Fills `cache[i0], cache[i0 + 1]` with the cos and sin of pair `i0 / 2` at `pos`.
fn fill_cache(p: &RopeParams, n_rot: usize, pos: f32, ff: Option<&[f32]>, cache: &mut [f32]) {
    let theta_scale = p.freq_base.powf(-2.0 / n_rot as f32);
    let corr = rope_yarn_corr_dims(n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow);
    let mut theta = pos;
    for i0 in (0..n_rot).step_by(2) {
        let f = ff.map_or(1.0, |f| f[i0 / 2]);
        // M-RoPE's fourth axis: position 0 for text (ggml's `theta_e`, 0 at every power).
        let fourth = p.mrope.is_some_and(|m| m.fourth_axis(i0 / 2));
        let theta_extrap = if fourth { 0.0 } else { theta } / f;
        let theta_interp = p.freq_scale * theta_extrap;
        let mut th = theta_interp;
        let mut mscale = p.attn_factor;
        if p.ext_factor != 0.0 {
            let mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
            th = theta_interp * (1.0 - mix) + theta_extrap * mix;
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
        }
        cache[i0] = th.cos() * mscale;
        cache[i0 + 1] = th.sin() * mscale;
        theta *= theta_scale;
    }
}

/// Applies RoPE in place to `x`, laid out `[n_tokens][n_head][head_dim]` (f32), token `t` at
/// position `positions[t]`. `freq_factors`, when given, holds `n_rot / 2` divisors of the pair
/// frequencies. Dims `n_rot..head_dim` of each head are left as they are.
///
/// # Errors
/// `LengthMismatch` if `x` is not `positions.len() * n_head * head_dim` or `freq_factors` is too
/// short; `InvalidParam` for an odd `n_rot`, `n_rot > head_dim` or `n_rot > MAX_ROT`.
pub fn rope(
    x: &mut [f32],
    n_head: usize,
    head_dim: usize,
    positions: &[i32],
    p: &RopeParams,
    freq_factors: Option<&[f32]>,
) -> Result<()> {
    rope_with(
        x,
        n_head,
        head_dim,
        positions,
        p,
        freq_factors,
        &mut RopeCache::default(),
    )
}

/// [`rope`] with the angles taken from (or added to) `cache`: the same values, computed once
/// for all the layers of a step.
///
/// # Errors
/// As [`rope`].
pub fn rope_with(
    x: &mut [f32],
    n_head: usize,
    head_dim: usize,
    positions: &[i32],
    p: &RopeParams,
    freq_factors: Option<&[f32]>,
    cache: &mut RopeCache,
) -> Result<()> {
    const OP: &str = "rope";
    let n_rot = if p.n_rot == 0 { head_dim } else { p.n_rot };
    if n_rot % 2 != 0 || n_rot > head_dim || n_rot > MAX_ROT {
        return Err(TensorError::InvalidParam {
            op: OP,
            why: "n_rot must be even, at most head_dim and at most MAX_ROT",
        });
    }
    let tok = n_head.saturating_mul(head_dim);
    let want = positions.len().saturating_mul(tok);
    if x.len() != want {
        return Err(TensorError::LengthMismatch {
            op: OP,
            what: "x",
            expected: want,
            actual: x.len(),
        });
    }
    if let Some(ff) = freq_factors {
        if ff.len() < n_rot / 2 {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "freq_factors",
                expected: n_rot / 2,
                actual: ff.len(),
            });
        }
    }
    if tok == 0 || n_rot == 0 {
        return Ok(());
    }
    let half = n_rot / 2;
    let table = cache.table(p, n_rot, positions, freq_factors);
    let rotate = |(xt, cs): (&mut [f32], &[f32])| {
        for head in xt.chunks_exact_mut(head_dim) {
            for i0 in (0..n_rot).step_by(2) {
                let (c, s) = (cs[i0], cs[i0 + 1]);
                let (a, b) = match p.mode {
                    RopeMode::Normal => (i0, i0 + 1),
                    RopeMode::Neox => (i0 / 2, i0 / 2 + half),
                };
                let (x0, x1) = (head[a], head[b]);
                // ggml's rotate_pairs as GCC builds it (-ffp-contract=fast): one FMA each,
                // `x0*c` and `x0*s` fused. Bit-identical to libggml-cpu (tests/ggml_ops.rs);
                // the plain expressions differ in the last bit for ~15% of values, and one
                // ulp is enough to flip a q8 rounding downstream.
                head[a] = x0.mul_add(c, -(x1 * s));
                head[b] = x0.mul_add(s, x1 * c);
            }
        }
    };
    if x.len() < PAR_MIN_ELEMS {
        x.chunks_mut(tok).zip(table.chunks(n_rot)).for_each(rotate);
    } else {
        x.par_chunks_mut(tok)
            .zip(table.par_chunks(n_rot))
            .for_each(rotate);
    }
    Ok(())
}

/// Values below which [`rope_with`] rotates on the calling thread (a decode step's few
/// tokens: the pool's hand-off costs more than the work).
const PAR_MIN_ELEMS: usize = 1 << 15;

/// Tables kept by a [`RopeCache`]: a model's layers alternate between at most a few settings
/// (Gemma 3: local and global bases).
const CACHE_TABLES: usize = 4;

/// The cos/sin tables of the last few [`rope_with`] calls: every layer of a step rotates its
/// queries and keys at the same positions with the same settings, so the angles (a `cos` and a
/// `sin` per pair and token) are computed once per step rather than twice per layer.
#[derive(Default)]
pub struct RopeCache {
    /// `(settings, rotary dims, frequency divisors' address and length, positions, table of
    /// positions.len() × n_rot: cos, sin per pair)`, one per setting.
    tables: Vec<CachedTable>,
}

type CachedTable = (
    RopeParams,
    usize,
    Option<(usize, usize)>,
    Vec<i32>,
    Vec<f32>,
);

impl std::fmt::Debug for RopeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RopeCache({} tables)", self.tables.len())
    }
}

impl RopeCache {
    /// The table for these settings and positions, computed unless cached.
    fn table(
        &mut self,
        p: &RopeParams,
        n_rot: usize,
        positions: &[i32],
        ff: Option<&[f32]>,
    ) -> &[f32] {
        let ff_key = ff.map(|f| (f.as_ptr() as usize, f.len()));
        let hit = self.tables.iter().position(|(tp, tn, tf, tpos, _)| {
            tp == p && *tn == n_rot && *tf == ff_key && tpos.as_slice() == positions
        });
        let i = match hit {
            Some(i) => i,
            None => {
                // Refill this setting's table (a new step's positions), else a new entry, else
                // the first: in place, so that once each setting has its table a step
                // allocates nothing.
                let same = self
                    .tables
                    .iter()
                    .position(|(tp, tn, tf, ..)| tp == p && *tn == n_rot && *tf == ff_key);
                let i = match same {
                    Some(i) => i,
                    None if self.tables.len() < CACHE_TABLES => {
                        self.tables
                            .push((*p, n_rot, ff_key, Vec::new(), Vec::new()));
                        self.tables.len() - 1
                    }
                    None => 0,
                };
                let (tp, tn, tf, pos, table) = &mut self.tables[i];
                (*tp, *tn, *tf) = (*p, n_rot, ff_key);
                pos.clear();
                pos.extend_from_slice(positions);
                table.clear();
                table.resize(positions.len() * n_rot, 0.0);
                let fill = |(c, &pos): (&mut [f32], &i32)| fill_cache(p, n_rot, pos as f32, ff, c);
                if positions.len() * n_rot < PAR_MIN_ELEMS / 16 {
                    table.chunks_mut(n_rot).zip(positions).for_each(fill);
                } else {
                    table
                        .par_chunks_mut(n_rot)
                        .zip(positions.par_iter())
                        .for_each(fill);
                }
                i
            }
        };
        &self.tables[i].4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{max_abs_diff, Rng};

    /// Straight f64 RoPE from the formulas (exact powers, no iterated product).
    fn reference(
        x: &[f32],
        n_head: usize,
        head_dim: usize,
        positions: &[i32],
        p: &RopeParams,
        ff: Option<&[f32]>,
    ) -> Vec<f64> {
        let n_rot = if p.n_rot == 0 { head_dim } else { p.n_rot };
        let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let base = p.freq_base as f64;
        let corr_dim = |beta: f64| {
            n_rot as f64 * (p.n_ctx_orig as f64 / (beta * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let low = corr_dim(p.beta_fast as f64).floor().max(0.0);
        let high = corr_dim(p.beta_slow as f64).ceil().min(n_rot as f64 - 1.0);
        for (t, &pos) in positions.iter().enumerate() {
            for h in 0..n_head {
                let row = &mut out[(t * n_head + h) * head_dim..][..head_dim];
                for i in 0..n_rot / 2 {
                    let f = ff.map_or(1.0, |f| f[i] as f64);
                    let extrap = pos as f64 * base.powf(-2.0 * i as f64 / n_rot as f64) / f;
                    let interp = p.freq_scale as f64 * extrap;
                    let (mut th, mut ms) = (interp, p.attn_factor as f64);
                    if p.ext_factor != 0.0 {
                        let y = (i as f64 - low) / (high - low).max(0.001);
                        let mix = (1.0 - y.clamp(0.0, 1.0)) * p.ext_factor as f64;
                        th = interp * (1.0 - mix) + extrap * mix;
                        ms *= 1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln();
                    }
                    let (a, b) = match p.mode {
                        RopeMode::Normal => (2 * i, 2 * i + 1),
                        RopeMode::Neox => (i, i + n_rot / 2),
                    };
                    let (x0, x1) = (row[a], row[b]);
                    row[a] = (x0 * th.cos() - x1 * th.sin()) * ms;
                    row[b] = (x0 * th.sin() + x1 * th.cos()) * ms;
                }
            }
        }
        out
    }

    fn check(p: RopeParams, head_dim: usize, with_ff: bool, tol: f64) {
        let mut rng = Rng::new(5);
        let (n_head, positions) = (3, [0i32, 1, 7, 63, 130, 255]);
        let x = rng.vec(positions.len() * n_head * head_dim, 1.0);
        let n_rot = if p.n_rot == 0 { head_dim } else { p.n_rot };
        let ff: Vec<f32> = (0..n_rot / 2).map(|i| 1.0 + (i % 5) as f32).collect();
        let ff = with_ff.then_some(ff.as_slice());
        let mut y = x.clone();
        rope(&mut y, n_head, head_dim, &positions, &p, ff).unwrap();
        let want = reference(&x, n_head, head_dim, &positions, &p, ff);
        let err = max_abs_diff(&y, &want);
        assert!(err < tol, "{p:?} ff={with_ff}: max err {err}");
    }

    // Tolerance: ggml's iterated f32 angle drifts ~1e-6 relative from the exact one; at
    // position 255 that is up to ~5e-4 rad, so values (|x| < 1) differ by up to ~1e-3.
    const TOL: f64 = 2e-3;

    #[test]
    fn normal_and_neox_full_and_partial() {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let p = RopeParams {
                mode,
                ..Default::default()
            };
            check(p, 64, false, TOL);
            check(RopeParams { n_rot: 32, ..p }, 64, false, TOL);
            check(
                RopeParams {
                    freq_base: 1e6,
                    freq_scale: 0.25,
                    ..p
                },
                64,
                false,
                TOL,
            );
            check(RopeParams { n_rot: 48, ..p }, 64, true, TOL);
        }
    }

    #[test]
    fn yarn_matches_reference() {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let p = RopeParams {
                mode,
                freq_base: 10000.0,
                freq_scale: 0.25,
                ext_factor: 1.0,
                attn_factor: 1.0,
                beta_fast: 32.0,
                beta_slow: 1.0,
                n_ctx_orig: 4096,
                n_rot: 0,
                mrope: None,
            };
            check(p, 128, false, TOL);
            check(
                RopeParams {
                    ext_factor: 0.5,
                    attn_factor: 0.9,
                    ..p
                },
                64,
                true,
                TOL,
            );
        }
    }

    #[test]
    fn small_positions_are_tight_and_tail_dims_untouched() {
        let mut rng = Rng::new(6);
        let (n_head, head_dim) = (2, 16);
        let p = RopeParams {
            n_rot: 8,
            mode: RopeMode::Neox,
            ..Default::default()
        };
        let positions = [0, 1, 2, 3];
        let x = rng.vec(4 * n_head * head_dim, 1.0);
        let mut y = x.clone();
        rope(&mut y, n_head, head_dim, &positions, &p, None).unwrap();
        let want = reference(&x, n_head, head_dim, &positions, &p, None);
        assert!(max_abs_diff(&y, &want) < 1e-6);
        for r in 0..4 * n_head {
            assert_eq!(
                &y[r * head_dim + 8..(r + 1) * head_dim],
                &x[r * head_dim + 8..(r + 1) * head_dim]
            );
        }
        // Position 0 is the identity.
        assert_eq!(&y[..n_head * head_dim], &x[..n_head * head_dim]);
    }

    #[test]
    fn a_shared_cache_gives_the_fresh_results() {
        // Calls alternating settings, positions and divisors through one cache (more settings
        // than it keeps) equal fresh `rope` calls bit for bit.
        let mut rng = Rng::new(9);
        let (n_head, head_dim) = (3, 32);
        let ff: Vec<f32> = (0..16).map(|i| 1.0 + i as f32 / 8.0).collect();
        let mut cache = RopeCache::default();
        for round in 0..3 {
            for (k, base) in [10000.0f32, 1e6, 500.0, 20000.0, 10000.0]
                .into_iter()
                .enumerate()
            {
                let p = RopeParams {
                    mode: if k % 2 == 0 {
                        RopeMode::Neox
                    } else {
                        RopeMode::Normal
                    },
                    n_rot: if k == 3 { 16 } else { 0 },
                    freq_base: base,
                    ..RopeParams::default()
                };
                let positions: Vec<i32> = (0..5).map(|t| t * (round + 1) + k as i32).collect();
                let ff = (k == 4).then_some(ff.as_slice());
                // The second call of each pair finds the table (as a step's later layers do).
                for _ in 0..2 {
                    let x = rng.vec(positions.len() * n_head * head_dim, 1.0);
                    let (mut a, mut b) = (x.clone(), x);
                    rope(&mut a, n_head, head_dim, &positions, &p, ff).unwrap();
                    rope_with(&mut b, n_head, head_dim, &positions, &p, ff, &mut cache).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a), bits(&b), "round {round} setting {k}");
                }
            }
        }
        assert!(cache.tables.len() <= CACHE_TABLES);
    }

    #[test]
    fn corr_dims_match_ggml_for_llama_defaults() {
        // n_dims 128, n_ctx_orig 4096, base 10000, beta 32/1: ggml gives [20, 46].
        assert_eq!(
            rope_yarn_corr_dims(128, 4096, 10000.0, 32.0, 1.0),
            [20.0, 46.0]
        );
    }

    #[test]
    fn bad_params_are_errors() {
        let mut x = vec![0f32; 2 * 8];
        let p = RopeParams::default();
        assert!(rope(&mut x, 1, 8, &[0, 1], &p, None).is_ok());
        assert!(rope(&mut x, 1, 8, &[0], &p, None).is_err());
        assert!(rope(&mut x, 1, 8, &[0, 1], &RopeParams { n_rot: 3, ..p }, None).is_err());
        assert!(rope(&mut x, 1, 8, &[0, 1], &RopeParams { n_rot: 10, ..p }, None).is_err());
        assert!(rope(&mut x, 1, 8, &[0, 1], &p, Some(&[1.0])).is_err());
    }

    #[test]
    fn mrope_fourth_axis_follows_ggml_sectors() {
        // Real Qwen3-VL: interleaved 24/20/20 over 64 pairs leaves pairs 61 and 62.
        let q3 = MropeSections {
            sections: [24, 20, 20, 0],
            interleaved: true,
        };
        let fourth: Vec<usize> = (0..64).filter(|&i| q3.fourth_axis(i)).collect();
        assert_eq!(fourth, [61, 62]);
        assert!(q3.leaves_unrotated(128) && !q3.leaves_unrotated(120));
        // test-llama-archs' 32/32/32/32 interleaved over 64 pairs: none.
        let all = MropeSections {
            sections: [32; 4],
            interleaved: true,
        };
        assert!(!all.leaves_unrotated(128));
        // Contiguous (Qwen2-VL): the pairs past s0 + s1 + s2 of each sector.
        let q2 = MropeSections {
            sections: [2, 3, 3, 2],
            interleaved: false,
        };
        let fourth: Vec<usize> = (0..20).filter(|&i| q2.fourth_axis(i)).collect();
        assert_eq!(fourth, [8, 9, 18, 19]);
    }

    #[test]
    fn mrope_fourth_axis_pairs_stay_unrotated_and_the_rest_rotate_as_plain_rope() {
        let mut rng = Rng::new(7);
        let (n_head, head_dim) = (2, 32);
        let positions = [0, 3, 17, 250];
        let x = rng.vec(positions.len() * n_head * head_dim, 2.0);
        for ext in [0.0, 1.0] {
            let plain = RopeParams {
                mode: RopeMode::Neox,
                ext_factor: ext,
                freq_scale: if ext == 0.0 { 1.0 } else { 0.25 },
                n_ctx_orig: 64,
                ..RopeParams::default()
            };
            let m = MropeSections {
                sections: [2, 3, 3, 0],
                interleaved: true,
            };
            // 16 pairs in sectors of 8: pair 6 and 14 (sector 6) fall through to the fourth.
            let fourth: Vec<usize> = (0..16).filter(|&i| m.fourth_axis(i)).collect();
            assert_eq!(fourth, [6, 14]);
            let p = RopeParams {
                mrope: Some(m),
                ..plain
            };
            let mut want = x.clone();
            rope(&mut want, n_head, head_dim, &positions, &plain, None).unwrap();
            let mut got = x.clone();
            rope(&mut got, n_head, head_dim, &positions, &p, None).unwrap();
            // Position 0 rotates nothing on either form; the fourth axis's pairs get cos =
            // mscale, sin = 0 at every position.
            let mscale = if ext == 0.0 {
                1.0f32
            } else {
                1.0 + 0.1 * 4f32.ln()
            };
            for (t, _) in positions.iter().enumerate() {
                for h in 0..n_head {
                    let o = (t * n_head + h) * head_dim;
                    for i in 0..16 {
                        for d in [i, i + 16] {
                            let (g, w) = (got[o + d], want[o + d]);
                            if fourth.contains(&i) {
                                assert_eq!(
                                    g.to_bits(),
                                    (x[o + d] * mscale).to_bits(),
                                    "t {t} d {d}"
                                );
                            } else {
                                assert_eq!(g.to_bits(), w.to_bits(), "t {t} d {d}");
                            }
                        }
                    }
                }
            }
        }
    }
}
