//! Attention for 64 or more query rows over f32 keys and values, rounding as llama.cpp's CPU
//! flash attention does there (`ggml_compute_forward_flash_attn_ext_tiled`, ggml since 2026-02):
//! keys in tiles of 64 from position 0; per tile each score is an FMA chain over the head
//! dimension from 0 (`simd_gemm`), times the scale; the running maximum and sum are updated
//! once per tile (`expf` for the rescale); the tile's weights are `ggml_v_expf` (its AVX-512
//! polynomial, emulated here) of `score - max`, summed 16 at a time in `_mm512_reduce_add_ps`'s
//! pairing into an f64 that is added to the f32 sum; the output accumulates `weight · value` as
//! one FMA chain per element over the tile's keys, and is scaled by `1 / sum` at the end.
//!
//! A row's result depends only on its own query, positions and the keys: the same operations
//! run whatever other rows share its call, so the work is split freely (by head and chunks of
//! rows). The loops are plain Rust with `mul_add`; [`attend_rows`] is compiled once portable
//! and once with AVX-512 so LLVM vectorizes the column loops. FMA is exact, so both round alike.

use rayon::prelude::*;

use super::attention::{visible_keys, AttentionParams};

/// Keys per tile (`GGML_FA_TILE_KV`).
const KV_TILE: usize = 64;
/// Query rows per task (`GGML_FA_TILE_Q`; any split gives the same results).
const Q_TILE: usize = 64;

thread_local! {
    /// Per-thread scratch: the transposed key tile, scores, weights, accumulators.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `ggml_v_expf` (AVX-512 build) for one value: ARM's optimized-routines polynomial,
/// `scalef(poly(b), n)`, 0 below about -104 and infinity above about 88.4. Branch-free, so
/// loops over it vectorize.
#[inline(always)]
pub(crate) fn v_expf(x: f32) -> f32 {
    let c = |bits: u32| f32::from_bits(bits);
    let r = 12_582_912.0f32; // 0x1.8p23
    let z = x.mul_add(c(0x3FB8_AA3B), r); // log2(e)
    let n = z - r;
    let b = (-n).mul_add(c(0x35BF_BE8E), (-n).mul_add(c(0x3F31_7200), x));
    let u = b * b;
    let j = c(0x3C07_2010)
        .mul_add(b, c(0x3D2B_9F17))
        .mul_add(u, c(0x3E2A_AF33).mul_add(b, c(0x3EFF_FEDB)));
    let j = j.mul_add(u, c(0x3F7F_FFF6).mul_add(b, 1.0));
    // scalef(j, n) = j · 2^n rounded once: for |n| <= 192, j · 2^k1 is exact (k1 in
    // -100..=127 keeps it normal) and the second product, by 2^k2 with k2 in -92..=65, rounds.
    let k = n.clamp(-300.0, 300.0) as i32;
    let k1 = k.clamp(-100, 127);
    let pow2 = |e: i32| f32::from_bits(((e + 127) as u32 & 0xff) << 23);
    let res = (j * pow2(k1)) * pow2(k - k1);
    let big = if n <= 0.0 { 0.0 } else { f32::INFINITY };
    if n.abs() > 192.0 {
        big
    } else {
        res
    }
}

/// `_mm512_reduce_add_ps` of 16 values as GCC pairs them.
#[inline(always)]
fn reduce16(v: &[f32]) -> f32 {
    let t3: [f32; 8] = std::array::from_fn(|i| v[i + 8] + v[i]);
    let t6: [f32; 4] = std::array::from_fn(|i| t3[i + 4] + t3[i]);
    (t6[0] + t6[2]) + (t6[1] + t6[3])
}

/// Attention of `positions.len()` query rows (`q`, f32) over `kv_len` positions of f32 keys and
/// values in position order (`k`/`v`: `kv_len × n_kv_head × head_dim`), as llama.cpp's tiled
/// path: see the module docs. `p.head_dim` must be a multiple of 16 (llama.cpp's condition).
pub(crate) fn run_tiled(
    q: &[f32],
    positions: &[i32],
    k: &[f32],
    v: &[f32],
    kv_len: usize,
    p: &AttentionParams,
    out: &mut [f32],
) {
    let hd = p.head_dim;
    let n = positions.len();
    #[cfg(target_arch = "x86_64")]
    let avx512 = super::dispatch::active_isa() >= super::dispatch::Isa::Avx512;
    // Tasks: (head, chunk of Q_TILE rows); each writes its rows' outputs (strided in `out`).
    let chunks = n.div_ceil(Q_TILE);
    let tasks: Vec<(usize, usize)> = (0..p.n_head)
        .flat_map(|h| (0..chunks).map(move |c| (h, c)))
        .collect();
    let results: Vec<(usize, usize, Vec<f32>)> = tasks
        .into_par_iter()
        .map(|(h, c)| {
            let t0 = c * Q_TILE;
            let t1 = (t0 + Q_TILE).min(n);
            let mut res = vec![0f32; (t1 - t0) * hd];
            let task = Task {
                q,
                positions,
                k,
                v,
                kv_len,
                p,
                h,
                t0,
                t1,
            };
            SCRATCH.with(|cell| {
                let mut buf = cell.borrow_mut();
                #[cfg(target_arch = "x86_64")]
                if avx512 {
                    // SAFETY: the active ISA is AVX-512, so the CPU has these features.
                    unsafe { attend_rows_avx512(&task, &mut res, &mut buf) };
                    return;
                }
                attend_rows::<Portable>(&task, &mut res, &mut buf);
            });
            (h, t0, res)
        })
        .collect();
    for (h, t0, res) in results {
        for (i, r) in res.chunks_exact(hd).enumerate() {
            let o = ((t0 + i) * p.n_head + h) * hd;
            out[o..o + hd].copy_from_slice(r);
        }
    }
}

/// The two dense loops of a tile: scores (an FMA chain over the head dimension per key, from
/// 0) and the value accumulation (an FMA chain over the tile's keys per output element). The
/// implementations round identically (FMA is exact); they differ in speed only.
trait TileOps {
    /// `sc[c] = Σ_d fma(kt[d·64 + c], q[d])`, in order of `d`, from 0.
    fn scores(kt: &[f32], q: &[f32], sc: &mut [f32; KV_TILE]);
    /// `acc[d] = fma(vt[c·hd + d], w[c], acc[d])` for `c` in order.
    fn accumulate(vt: &[f32], w: &[f32; KV_TILE], acc: &mut [f32]);
    /// [`TileOps::scores`] of two rows (the same per-element chains, interleaved for speed).
    #[inline(always)]
    fn scores2(kt: &[f32], q: [&[f32]; 2], sc: [&mut [f32; KV_TILE]; 2]) {
        let [a, b] = sc;
        Self::scores(kt, q[0], a);
        Self::scores(kt, q[1], b);
    }
    /// [`TileOps::accumulate`] of two rows.
    #[inline(always)]
    fn accumulate2(vt: &[f32], w: [&[f32; KV_TILE]; 2], acc: [&mut [f32]; 2]) {
        let [a, b] = acc;
        Self::accumulate(vt, w[0], a);
        Self::accumulate(vt, w[1], b);
    }
}

/// Portable [`TileOps`].
struct Portable;

impl TileOps for Portable {
    #[inline(always)]
    fn scores(kt: &[f32], q: &[f32], sc: &mut [f32; KV_TILE]) {
        *sc = [0.0; KV_TILE];
        for (d, &qd) in q.iter().enumerate() {
            let krow = &kt[d * KV_TILE..(d + 1) * KV_TILE];
            for (a, &kv) in sc.iter_mut().zip(krow) {
                *a = kv.mul_add(qd, *a);
            }
        }
    }
    #[inline(always)]
    fn accumulate(vt: &[f32], w: &[f32; KV_TILE], acc: &mut [f32]) {
        let hd = acc.len();
        for (c, &wc) in w.iter().enumerate() {
            let vr = &vt[c * hd..(c + 1) * hd];
            for (a, &x) in acc.iter_mut().zip(vr) {
                *a = x.mul_add(wc, *a);
            }
        }
    }
}

/// AVX-512 [`TileOps`]: the accumulators in registers (four zmm per row of 64).
#[cfg(target_arch = "x86_64")]
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl TileOps for Avx512 {
    #[inline(always)]
    fn scores(kt: &[f32], q: &[f32], sc: &mut [f32; KV_TILE]) {
        use std::arch::x86_64::*;
        assert!(kt.len() >= q.len() * KV_TILE);
        // SAFETY: only used from `attend_rows_avx512` (AVX-512 detected); the loads stay in
        // `kt` (asserted) and the stores in `sc`.
        unsafe {
            let mut a = [_mm512_setzero_ps(); 4];
            for (d, &qd) in q.iter().enumerate() {
                let qv = _mm512_set1_ps(qd);
                let p = kt.as_ptr().add(d * KV_TILE);
                for (i, ai) in a.iter_mut().enumerate() {
                    *ai = _mm512_fmadd_ps(_mm512_loadu_ps(p.add(16 * i)), qv, *ai);
                }
            }
            for (i, ai) in a.iter().enumerate() {
                _mm512_storeu_ps(sc.as_mut_ptr().add(16 * i), *ai);
            }
        }
    }
    #[inline(always)]
    fn accumulate(vt: &[f32], w: &[f32; KV_TILE], acc: &mut [f32]) {
        use std::arch::x86_64::*;
        let hd = acc.len();
        assert!(hd.is_multiple_of(16) && vt.len() >= KV_TILE * hd);
        // SAFETY: as in `scores`; every load is within `vt` (asserted) and every load/store
        // of `acc` within its `hd` floats (16 at a time, hd a multiple of 16).
        unsafe {
            let mut d0 = 0;
            while d0 < hd {
                let n = ((hd - d0) / 16).min(4);
                let mut a = [_mm512_setzero_ps(); 4];
                for (i, ai) in a.iter_mut().enumerate().take(n) {
                    *ai = _mm512_loadu_ps(acc.as_ptr().add(d0 + 16 * i));
                }
                for (c, &wc) in w.iter().enumerate() {
                    let wv = _mm512_set1_ps(wc);
                    let p = vt.as_ptr().add(c * hd + d0);
                    for (i, ai) in a.iter_mut().enumerate().take(n) {
                        *ai = _mm512_fmadd_ps(_mm512_loadu_ps(p.add(16 * i)), wv, *ai);
                    }
                }
                for (i, ai) in a.iter().enumerate().take(n) {
                    _mm512_storeu_ps(acc.as_mut_ptr().add(d0 + 16 * i), *ai);
                }
                d0 += 16 * n;
            }
        }
    }
    #[inline(always)]
    fn scores2(kt: &[f32], q: [&[f32]; 2], sc: [&mut [f32; KV_TILE]; 2]) {
        use std::arch::x86_64::*;
        let hd = q[0].len();
        assert!(q[1].len() == hd && kt.len() >= hd * KV_TILE);
        // SAFETY: as in `scores`.
        unsafe {
            let mut a = [_mm512_setzero_ps(); 4];
            let mut b = [_mm512_setzero_ps(); 4];
            for (d, (&q0, &q1)) in q[0].iter().zip(q[1]).enumerate() {
                let (qa, qb) = (_mm512_set1_ps(q0), _mm512_set1_ps(q1));
                let p = kt.as_ptr().add(d * KV_TILE);
                for i in 0..4 {
                    let k = _mm512_loadu_ps(p.add(16 * i));
                    a[i] = _mm512_fmadd_ps(k, qa, a[i]);
                    b[i] = _mm512_fmadd_ps(k, qb, b[i]);
                }
            }
            let [sa, sb] = sc;
            for i in 0..4 {
                _mm512_storeu_ps(sa.as_mut_ptr().add(16 * i), a[i]);
                _mm512_storeu_ps(sb.as_mut_ptr().add(16 * i), b[i]);
            }
        }
    }
    #[inline(always)]
    fn accumulate2(vt: &[f32], w: [&[f32; KV_TILE]; 2], acc: [&mut [f32]; 2]) {
        use std::arch::x86_64::*;
        let [xa, xb] = acc;
        let hd = xa.len();
        assert!(xb.len() == hd && hd.is_multiple_of(16) && vt.len() >= KV_TILE * hd);
        // SAFETY: as in `accumulate`, for both rows.
        unsafe {
            let mut d0 = 0;
            while d0 < hd {
                let n = ((hd - d0) / 16).min(4);
                let mut a = [_mm512_setzero_ps(); 4];
                let mut b = [_mm512_setzero_ps(); 4];
                for i in 0..n {
                    a[i] = _mm512_loadu_ps(xa.as_ptr().add(d0 + 16 * i));
                    b[i] = _mm512_loadu_ps(xb.as_ptr().add(d0 + 16 * i));
                }
                for (c, (&w0, &w1)) in w[0].iter().zip(w[1]).enumerate() {
                    let (wa, wb) = (_mm512_set1_ps(w0), _mm512_set1_ps(w1));
                    let p = vt.as_ptr().add(c * hd + d0);
                    for i in 0..n {
                        let v = _mm512_loadu_ps(p.add(16 * i));
                        a[i] = _mm512_fmadd_ps(v, wa, a[i]);
                        b[i] = _mm512_fmadd_ps(v, wb, b[i]);
                    }
                }
                for i in 0..n {
                    _mm512_storeu_ps(xa.as_mut_ptr().add(d0 + 16 * i), a[i]);
                    _mm512_storeu_ps(xb.as_mut_ptr().add(d0 + 16 * i), b[i]);
                }
                d0 += 16 * n;
            }
        }
    }
}

/// One head's query rows `t0..t1`.
struct Task<'a> {
    q: &'a [f32],
    positions: &'a [i32],
    k: &'a [f32],
    v: &'a [f32],
    kv_len: usize,
    p: &'a AttentionParams,
    h: usize,
    t0: usize,
    t1: usize,
}

/// [`attend_rows`] with AVX-512 and FMA, so its loops vectorize and `mul_add` is one
/// instruction (closures would not inherit the features: the body has none).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
fn attend_rows_avx512(t: &Task<'_>, res: &mut [f32], buf: &mut Vec<f32>) {
    attend_rows::<Avx512>(t, res, buf)
}

#[inline(always)]
fn attend_rows<O: TileOps>(t: &Task<'_>, res: &mut [f32], buf: &mut Vec<f32>) {
    let p = t.p;
    let hd = p.head_dim;
    let kvh = t.h / (p.n_head / p.n_kv_head);
    let stride = p.n_kv_head * hd;
    let rows = t.t1 - t.t0;
    // ggml folds the cap into the scale: s = cap · tanh(q·k · (scale / cap)).
    let scale = if p.softcap != 0.0 {
        p.scale / p.softcap
    } else {
        p.scale
    };
    {
        let need = 2 * KV_TILE * hd;
        if buf.len() < need {
            buf.resize(need, 0.0);
        }
        let (kt, vt) = buf.split_at_mut(KV_TILE * hd);
        let vt = &mut vt[..KV_TILE * hd];
        let keys: Vec<(usize, usize)> = (t.t0..t.t1)
            .map(|i| visible_keys(t.positions[i], t.kv_len, p.window))
            .collect();
        let mut m = vec![f32::NEG_INFINITY; rows];
        let mut s = vec![0f32; rows];
        res.fill(0.0);
        let last = keys.iter().map(|kr| kr.1).max().unwrap_or(0);
        let mut ic = 0;
        while ic < last {
            let tile = KV_TILE.min(t.kv_len - ic);
            if keys.iter().all(|&(lo, hi)| hi <= ic || lo >= ic + tile) {
                ic += KV_TILE;
                continue;
            }
            // The key tile transposed (kt[d][c]) and the value tile (vt[c][d]); columns past
            // the cache are zero.
            if tile < KV_TILE {
                kt.fill(0.0);
                vt.fill(0.0);
            }
            for c in 0..tile {
                let off = (ic + c) * stride + kvh * hd;
                for d in 0..hd {
                    kt[d * KV_TILE + c] = t.k[off + d];
                }
                vt[c * hd..(c + 1) * hd].copy_from_slice(&t.v[off..off + hd]);
            }
            // The rows with a visible key in this tile, two at a time.
            let mut active = [0usize; Q_TILE];
            let mut n_active = 0;
            for (r, &(lo, hi)) in keys.iter().enumerate() {
                if hi > ic && lo < ic + tile {
                    active[n_active] = r;
                    n_active += 1;
                }
            }
            let mut scb = [[0f32; KV_TILE]; 2];
            for pair in active[..n_active].chunks(2) {
                let qrow = |r: usize| &t.q[((t.t0 + r) * p.n_head + t.h) * hd..][..hd];
                let [sa, sb] = &mut scb;
                if let [ra, rb] = *pair {
                    O::scores2(kt, [qrow(ra), qrow(rb)], [sa, sb]);
                } else {
                    O::scores(kt, qrow(pair[0]), sa);
                }
                for (slot, &r) in pair.iter().enumerate() {
                    let sc = &mut scb[slot];
                    let (lo, hi) = keys[r];
                    for (c, a) in sc.iter_mut().enumerate() {
                        let mut x = *a * scale;
                        if p.softcap != 0.0 {
                            x = x.tanh() * p.softcap;
                        }
                        let j = ic + c;
                        *a = if c < tile && j >= lo && j < hi {
                            x + 0.0
                        } else {
                            f32::NEG_INFINITY
                        };
                    }
                    let mut tile_max = f32::NEG_INFINITY;
                    for &x in sc.iter() {
                        if x > tile_max {
                            tile_max = x;
                        }
                    }
                    let m_new = m[r].max(tile_max);
                    if m_new > m[r] {
                        let ms = (m[r] - m_new).exp();
                        for a in res[r * hd..(r + 1) * hd].iter_mut() {
                            *a *= ms;
                        }
                        s[r] *= ms;
                    }
                    m[r] = m_new;
                    for a in sc.iter_mut() {
                        *a = v_expf(*a - m_new);
                    }
                    let mut sum = 0f64;
                    for g in sc.chunks_exact(16) {
                        sum += reduce16(g) as f64;
                    }
                    s[r] = (s[r] as f64 + sum) as f32;
                }
                if let [ra, rb] = *pair {
                    let (lo_part, hi_part) = res.split_at_mut(rb * hd);
                    let acc_a = &mut lo_part[ra * hd..(ra + 1) * hd];
                    let acc_b = &mut hi_part[..hd];
                    O::accumulate2(vt, [&scb[0], &scb[1]], [acc_a, acc_b]);
                } else {
                    let r = pair[0];
                    O::accumulate(vt, &scb[0], &mut res[r * hd..(r + 1) * hd]);
                }
            }
            ic += KV_TILE;
        }
        for (r, acc) in res.chunks_exact_mut(hd).enumerate() {
            let inv = if s[r] == 0.0 { 0.0 } else { 1.0 / s[r] };
            for a in acc.iter_mut() {
                *a *= inv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The emulated `ggml_v_expf` is within its documented error (1.45 ulp + 0.5) of `exp`,
    /// flushes as ggml's does, and is exactly 1 at 0.
    #[test]
    fn v_expf_tracks_exp() {
        assert_eq!(v_expf(0.0), 1.0);
        assert_eq!(v_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(v_expf(-200.0), 0.0);
        assert_eq!(v_expf(200.0), f32::INFINITY);
        assert!(v_expf(f32::NAN).is_nan());
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp();
            let ulp = (want as f32).to_bits().abs_diff(v_expf(x).to_bits());
            worst = worst.max(ulp as f64);
            x += 0.0137;
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        // Subnormal results round once (scalef), not twice.
        for x in [-88.5f32, -95.0, -100.0, -103.0] {
            let want = (x as f64).exp() as f32;
            assert!(v_expf(x).to_bits().abs_diff(want.to_bits()) <= 2, "{x}");
        }
    }

    /// The portable and AVX-512 tile loops round identically.
    #[test]
    fn tile_ops_agree() {
        #[cfg(target_arch = "x86_64")]
        if super::super::dispatch::active_isa() >= super::super::dispatch::Isa::Avx512 {
            let mut rng = crate::cpu::testutil::Rng::new(9);
            for hd in [16usize, 64, 80, 256] {
                let kt = rng.vec(KV_TILE * hd, 2.0);
                let q = rng.vec(hd, 2.0);
                let (mut a, mut b) = ([0f32; KV_TILE], [0f32; KV_TILE]);
                Portable::scores(&kt, &q, &mut a);
                Avx512::scores(&kt, &q, &mut b);
                assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits), "scores, hd {hd}");
                let w: [f32; KV_TILE] = std::array::from_fn(|i| (i as f32 * 0.37).sin());
                let acc0 = rng.vec(hd, 1.0);
                let (mut x, mut y) = (acc0.clone(), acc0);
                Portable::accumulate(&kt, &w, &mut x);
                Avx512::accumulate(&kt, &w, &mut y);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&x), bits(&y), "accumulate, hd {hd}");
                // The two-row forms equal the one-row ones.
                let q2 = rng.vec(hd, 2.0);
                let (mut c, mut d) = ([0f32; KV_TILE], [0f32; KV_TILE]);
                Avx512::scores2(&kt, [&q, &q2], [&mut c, &mut d]);
                Portable::scores(&kt, &q2, &mut a);
                assert_eq!(c.map(f32::to_bits), b.map(f32::to_bits), "scores2 row 0");
                assert_eq!(d.map(f32::to_bits), a.map(f32::to_bits), "scores2 row 1");
                let w2: [f32; KV_TILE] = std::array::from_fn(|i| (i as f32 * 0.11).cos());
                let (mut e, mut f) = (rng.vec(hd, 1.0), rng.vec(hd, 1.0));
                let (mut e1, mut f1) = (e.clone(), f.clone());
                Avx512::accumulate2(&kt, [&w, &w2], [&mut e, &mut f]);
                Portable::accumulate(&kt, &w, &mut e1);
                Portable::accumulate(&kt, &w2, &mut f1);
                assert_eq!(bits(&e), bits(&e1), "accumulate2 row 0");
                assert_eq!(bits(&f), bits(&f1), "accumulate2 row 1");
            }
        }
    }
}
