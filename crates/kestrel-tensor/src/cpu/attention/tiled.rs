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
//! rows). The loops are plain Rust with `mul_add`; [`attend_rows`] is compiled portable, with
//! AVX2 + FMA and with AVX-512 so LLVM vectorizes the column loops. FMA is exact, so all round
//! alike.

use rayon::prelude::*;

use super::params::{visible_keys, AttentionParams};
use crate::cpu::out_ptr::OutPtr;

/// Keys per tile (`GGML_FA_TILE_KV`).
const KV_TILE: usize = 64;
/// Query rows per task (`GGML_FA_TILE_Q`; any split gives the same results).
const Q_TILE: usize = 64;

thread_local! {
    /// Per-thread scratch: the transposed key tile, scores, weights, accumulators; and a
    /// task's result rows.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
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
    let avx512 = crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx512;
    #[cfg(target_arch = "x86_64")]
    let avx2 = crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx2;
    // Tasks: (head, chunk of Q_TILE rows); each writes its rows' outputs (strided in `out`),
    // through a per-thread result buffer, so a call allocates nothing once the threads' scratch
    // has grown.
    let chunks = n.div_ceil(Q_TILE);
    let out_ptr = OutPtr::new(out);
    (0..p.n_head * chunks).into_par_iter().for_each(|i| {
        let (h, c) = (i / chunks, i % chunks);
        let t0 = c * Q_TILE;
        let t1 = (t0 + Q_TILE).min(n);
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
            let (buf, res) = &mut *cell.borrow_mut();
            if res.len() < Q_TILE * hd {
                res.resize(Q_TILE * hd, 0.0);
            }
            let res = &mut res[..(t1 - t0) * hd];
            #[cfg(target_arch = "x86_64")]
            let done = if avx512 {
                // SAFETY: the active ISA is AVX-512, so the CPU has these features.
                unsafe { attend_rows_avx512(&task, res, buf) };
                true
            } else if avx2 {
                // SAFETY: the active ISA is AVX2, so the CPU has AVX2 and FMA.
                unsafe { attend_rows_avx2(&task, res, buf) };
                true
            } else {
                false
            };
            #[cfg(not(target_arch = "x86_64"))]
            let done = false;
            if !done {
                attend_rows::<Portable>(&task, res, buf);
            }
            for (i, r) in res.chunks_exact(hd).enumerate() {
                // SAFETY: row t0 + i, head h of `out` (len n · n_head · hd, checked by the
                // caller) belongs to this task alone: tasks are distinct (head, row chunk)s.
                unsafe { out_ptr.write_row(((t0 + i) * p.n_head + h) * hd, r) };
            }
        });
    });
}

/// The two dense loops of a tile, for `R` query rows at once: scores (an FMA chain over the
/// head dimension per key, from 0) and the value accumulation (an FMA chain over the tile's keys
/// per output element). Every row keeps its own chains, so any `R` rounds as one row at a time;
/// the implementations round identically (FMA is exact) and differ in speed only.
trait TileOps {
    /// `sc[r][c] = Σ_d fma(kt[d·64 + c], q[r][d])`, in order of `d`, from 0.
    fn scores<const R: usize>(kt: &[f32], q: [&[f32]; R], sc: &mut [[f32; KV_TILE]; R]);
    /// `acc[r][d] = fma(vt[c·hd + d], w[r][c], acc[r][d])` for `c` in order.
    fn accumulate<const R: usize>(vt: &[f32], w: &[[f32; KV_TILE]; R], acc: [&mut [f32]; R]);
}

/// Portable [`TileOps`].
struct Portable;

impl TileOps for Portable {
    #[inline(always)]
    fn scores<const R: usize>(kt: &[f32], q: [&[f32]; R], sc: &mut [[f32; KV_TILE]; R]) {
        for (q, sc) in q.into_iter().zip(sc.iter_mut()) {
            *sc = [0.0; KV_TILE];
            for (d, &qd) in q.iter().enumerate() {
                let krow = &kt[d * KV_TILE..(d + 1) * KV_TILE];
                for (a, &kv) in sc.iter_mut().zip(krow) {
                    *a = kv.mul_add(qd, *a);
                }
            }
        }
    }
    #[inline(always)]
    fn accumulate<const R: usize>(vt: &[f32], w: &[[f32; KV_TILE]; R], acc: [&mut [f32]; R]) {
        for (w, acc) in w.iter().zip(acc) {
            let hd = acc.len();
            for (c, &wc) in w.iter().enumerate() {
                let vr = &vt[c * hd..(c + 1) * hd];
                for (a, &x) in acc.iter_mut().zip(vr) {
                    *a = x.mul_add(wc, *a);
                }
            }
        }
    }
}

/// AVX2 [`TileOps`]: as [`Avx512`]'s, in 8-lane registers, 16 columns (scores) or 16 output
/// elements (values) of up to four rows per pass so the accumulators fit in the 16 registers
/// (the portable loops, compiled for AVX2, kept each row's 64 scores in memory: a store and a
/// reload around every multiply-add).
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
impl TileOps for Avx2 {
    #[inline(always)]
    fn scores<const R: usize>(kt: &[f32], q: [&[f32]; R], sc: &mut [[f32; KV_TILE]; R]) {
        use std::arch::x86_64::*;
        let hd = q[0].len();
        assert!(q.iter().all(|q| q.len() == hd) && kt.len() >= hd * KV_TILE);
        // SAFETY: only used from `attend_rows_avx2` (AVX2 and FMA detected); the loads stay in
        // `kt` and in each `q` row (asserted) and the stores in `sc`.
        unsafe {
            for c0 in (0..KV_TILE).step_by(16) {
                let mut a = [[_mm256_setzero_ps(); 2]; R];
                for d in 0..hd {
                    let p = kt.as_ptr().add(d * KV_TILE + c0);
                    let k = [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))];
                    for r in 0..R {
                        let qv = _mm256_set1_ps(*q[r].get_unchecked(d));
                        for i in 0..2 {
                            a[r][i] = _mm256_fmadd_ps(k[i], qv, a[r][i]);
                        }
                    }
                }
                for r in 0..R {
                    for i in 0..2 {
                        _mm256_storeu_ps(sc[r].as_mut_ptr().add(c0 + 8 * i), a[r][i]);
                    }
                }
            }
        }
    }
    #[inline(always)]
    fn accumulate<const R: usize>(vt: &[f32], w: &[[f32; KV_TILE]; R], acc: [&mut [f32]; R]) {
        use std::arch::x86_64::*;
        let hd = acc[0].len();
        assert!(
            hd.is_multiple_of(16) && acc.iter().all(|a| a.len() == hd) && vt.len() >= KV_TILE * hd
        );
        // SAFETY: AVX2 as in `scores`; `vt` and the rows are asserted long enough and every
        // block of 16 ends within `hd` (a multiple of 16).
        unsafe {
            for d0 in (0..hd).step_by(16) {
                let mut a = [[_mm256_setzero_ps(); 2]; R];
                for r in 0..R {
                    for i in 0..2 {
                        a[r][i] = _mm256_loadu_ps(acc[r].as_ptr().add(d0 + 8 * i));
                    }
                }
                for c in 0..KV_TILE {
                    let p = vt.as_ptr().add(c * hd + d0);
                    let v = [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))];
                    for r in 0..R {
                        let wv = _mm256_set1_ps(w[r][c]);
                        for i in 0..2 {
                            a[r][i] = _mm256_fmadd_ps(v[i], wv, a[r][i]);
                        }
                    }
                }
                for r in 0..R {
                    for i in 0..2 {
                        _mm256_storeu_ps(acc[r].as_mut_ptr().add(d0 + 8 * i), a[r][i]);
                    }
                }
            }
        }
    }
}

/// AVX-512 [`TileOps`]: the accumulators in registers (scores: four zmm per row of 64 keys;
/// values: up to four zmm of the head dimension per row at a time), each key or value vector
/// loaded once for all `R` rows.
#[cfg(target_arch = "x86_64")]
struct Avx512;

// Register arrays (rows × vectors) are indexed in parallel, as in the kernel's description.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
impl Avx512 {
    /// [`TileOps::accumulate`] of the `16·N` output elements from `d0`.
    ///
    /// # Safety
    /// AVX-512F and FMA are available; `vt` holds `KV_TILE · hd` floats and every `acc[r]` `hd`,
    /// with `d0 + 16·N <= hd`.
    #[inline(always)]
    unsafe fn accumulate_block<const R: usize, const N: usize>(
        vt: &[f32],
        w: &[[f32; KV_TILE]; R],
        acc: &mut [&mut [f32]; R],
        hd: usize,
        d0: usize,
    ) {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract bounds every access.
        unsafe {
            let mut a = [[_mm512_setzero_ps(); N]; R];
            for r in 0..R {
                for i in 0..N {
                    a[r][i] = _mm512_loadu_ps(acc[r].as_ptr().add(d0 + 16 * i));
                }
            }
            for c in 0..KV_TILE {
                let p = vt.as_ptr().add(c * hd + d0);
                let mut v = [_mm512_setzero_ps(); N];
                for i in 0..N {
                    v[i] = _mm512_loadu_ps(p.add(16 * i));
                }
                for r in 0..R {
                    let wv = _mm512_set1_ps(w[r][c]);
                    for i in 0..N {
                        a[r][i] = _mm512_fmadd_ps(v[i], wv, a[r][i]);
                    }
                }
            }
            for r in 0..R {
                for i in 0..N {
                    _mm512_storeu_ps(acc[r].as_mut_ptr().add(d0 + 16 * i), a[r][i]);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
impl TileOps for Avx512 {
    #[inline(always)]
    fn scores<const R: usize>(kt: &[f32], q: [&[f32]; R], sc: &mut [[f32; KV_TILE]; R]) {
        use std::arch::x86_64::*;
        let hd = q[0].len();
        assert!(q.iter().all(|q| q.len() == hd) && kt.len() >= hd * KV_TILE);
        // SAFETY: only used from `attend_rows_avx512` (AVX-512 detected); the loads stay in
        // `kt` and in each `q` row (asserted) and the stores in `sc`.
        unsafe {
            let mut a = [[_mm512_setzero_ps(); 4]; R];
            for d in 0..hd {
                let p = kt.as_ptr().add(d * KV_TILE);
                let mut k = [_mm512_setzero_ps(); 4];
                for i in 0..4 {
                    k[i] = _mm512_loadu_ps(p.add(16 * i));
                }
                for r in 0..R {
                    let qv = _mm512_set1_ps(*q[r].get_unchecked(d));
                    for i in 0..4 {
                        a[r][i] = _mm512_fmadd_ps(k[i], qv, a[r][i]);
                    }
                }
            }
            for r in 0..R {
                for i in 0..4 {
                    _mm512_storeu_ps(sc[r].as_mut_ptr().add(16 * i), a[r][i]);
                }
            }
        }
    }
    #[inline(always)]
    fn accumulate<const R: usize>(vt: &[f32], w: &[[f32; KV_TILE]; R], acc: [&mut [f32]; R]) {
        let mut acc = acc;
        let hd = acc[0].len();
        assert!(
            hd.is_multiple_of(16) && acc.iter().all(|a| a.len() == hd) && vt.len() >= KV_TILE * hd
        );
        let mut d0 = 0;
        // SAFETY: AVX-512 as in `scores`; `vt` and the rows are asserted long enough and every
        // block ends within `hd` (a multiple of 16).
        unsafe {
            while d0 + 64 <= hd {
                Self::accumulate_block::<R, 4>(vt, w, &mut acc, hd, d0);
                d0 += 64;
            }
            match (hd - d0) / 16 {
                3 => Self::accumulate_block::<R, 3>(vt, w, &mut acc, hd, d0),
                2 => Self::accumulate_block::<R, 2>(vt, w, &mut acc, hd, d0),
                1 => Self::accumulate_block::<R, 1>(vt, w, &mut acc, hd, d0),
                _ => {}
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

/// [`attend_rows`] with AVX2 and FMA: the [`Avx2`] tile loops for head sizes that are a
/// multiple of 16, else the portable loops compiled for AVX2 (8 lanes wide, `mul_add` one
/// instruction); FMA is exact, so the results are the portable build's.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_rows_avx2(t: &Task<'_>, res: &mut [f32], buf: &mut Vec<f32>) {
    if t.p.head_dim.is_multiple_of(16) {
        attend_rows::<Avx2>(t, res, buf)
    } else {
        attend_rows::<Portable>(t, res, buf)
    }
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
        // A task has at most Q_TILE rows: its per-row state lives on the stack.
        let mut keys = [(0usize, 0usize); Q_TILE];
        let keys = &mut keys[..rows];
        for (kr, &pos) in keys.iter_mut().zip(&t.positions[t.t0..t.t1]) {
            *kr = visible_keys(pos, t.kv_len, p.window);
        }
        let keys = &*keys;
        let mut m = [f32::NEG_INFINITY; Q_TILE];
        let m = &mut m[..rows];
        let mut s = [0f32; Q_TILE];
        let s = &mut s[..rows];
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
            // The rows with a visible key in this tile, four at a time.
            let mut active = [0usize; Q_TILE];
            let mut n_active = 0;
            for (r, &(lo, hi)) in keys.iter().enumerate() {
                if hi > ic && lo < ic + tile {
                    active[n_active] = r;
                    n_active += 1;
                }
            }
            let tile_at = TileAt {
                t,
                kt,
                vt,
                keys,
                ic,
                tile,
                scale,
            };
            for group in active[..n_active].chunks(4) {
                let (m, s, res) = (&mut m[..], &mut s[..], &mut res[..]);
                match *group {
                    [a, b, c, d] => tile_rows::<O, 4>(&tile_at, [a, b, c, d], m, s, res),
                    [a, b, c] => tile_rows::<O, 3>(&tile_at, [a, b, c], m, s, res),
                    [a, b] => tile_rows::<O, 2>(&tile_at, [a, b], m, s, res),
                    [a] => tile_rows::<O, 1>(&tile_at, [a], m, s, res),
                    _ => {}
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

/// One key tile of one head, ready for [`tile_rows`].
struct TileAt<'a> {
    t: &'a Task<'a>,
    /// The key tile transposed (`kt[d][c]`) and the value tile (`vt[c][d]`).
    kt: &'a [f32],
    vt: &'a [f32],
    /// Each row's visible keys.
    keys: &'a [(usize, usize)],
    /// First key of the tile, and how many of its 64 columns are in the cache.
    ic: usize,
    tile: usize,
    scale: f32,
}

/// One key tile for `R` of a task's rows (increasing, local indices): scores, the online
/// softmax update of each row's maximum `m` and sum `s`, and the value accumulation into `res`.
#[inline(always)]
fn tile_rows<O: TileOps, const R: usize>(
    at: &TileAt<'_>,
    rows: [usize; R],
    m: &mut [f32],
    s: &mut [f32],
    res: &mut [f32],
) {
    let t = at.t;
    let p = t.p;
    let hd = p.head_dim;
    let q: [&[f32]; R] =
        std::array::from_fn(|j| &t.q[((t.t0 + rows[j]) * p.n_head + t.h) * hd..][..hd]);
    let mut sc = [[0f32; KV_TILE]; R];
    O::scores(at.kt, q, &mut sc);
    let Ok(mut acc) = res.get_disjoint_mut(rows.map(|r| r * hd..(r + 1) * hd)) else {
        return; // rows are distinct and in range: never taken
    };
    for ((sc, &r), acc) in sc.iter_mut().zip(&rows).zip(acc.iter_mut()) {
        let (lo, hi) = at.keys[r];
        for (c, a) in sc.iter_mut().enumerate() {
            let mut x = *a * at.scale;
            if p.softcap != 0.0 {
                x = x.tanh() * p.softcap;
            }
            let j = at.ic + c;
            *a = if c < at.tile && j >= lo && j < hi {
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
            for a in acc.iter_mut() {
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
    O::accumulate(at.vt, &sc, acc);
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

    /// The AVX2 tile loops round as the portable ones, for any number of rows per pass.
    #[test]
    fn avx2_tile_ops_agree() {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx2 {
            let mut rng = crate::cpu::testutil::Rng::new(5);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for hd in [16usize, 48, 64, 80, 256] {
                let kt = rng.vec(KV_TILE * hd, 2.0);
                let qs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(hd, 2.0)).collect();
                let w: [[f32; KV_TILE]; 4] = std::array::from_fn(|r| {
                    std::array::from_fn(|i| (i as f32 * 0.41 + r as f32).cos())
                });
                let accs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(hd, 1.0)).collect();
                let mut want_sc = [[0f32; KV_TILE]; 4];
                let mut want_acc = accs.clone();
                for r in 0..4 {
                    let mut one = [[0f32; KV_TILE]; 1];
                    Portable::scores(&kt, [&qs[r]], &mut one);
                    want_sc[r] = one[0];
                    Portable::accumulate(&kt, &[w[r]], [&mut want_acc[r]]);
                }
                let mut sc = [[0f32; KV_TILE]; 4];
                let mut sc3 = [[0f32; KV_TILE]; 3];
                let mut got = accs.clone();
                let mut got1 = accs.clone();
                // SAFETY: AVX2 and FMA are available (the active ISA is at least AVX2).
                unsafe { avx2_ops(&kt, &qs, &w, &mut sc, &mut sc3, &mut got, &mut got1) };
                for r in 0..4 {
                    assert_eq!(
                        sc[r].map(f32::to_bits),
                        want_sc[r].map(f32::to_bits),
                        "hd {hd}"
                    );
                    if r < 3 {
                        assert_eq!(sc3[r].map(f32::to_bits), want_sc[r].map(f32::to_bits));
                    }
                    assert_eq!(bits(&got[r]), bits(&want_acc[r]), "accumulate, hd {hd}");
                }
                assert_eq!(bits(&got1[0]), bits(&want_acc[0]), "accumulate 1, hd {hd}");
            }
        }
    }

    /// The AVX2 ops with their target features (as `attend_rows_avx2` runs them).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    fn avx2_ops(
        kt: &[f32],
        qs: &[Vec<f32>],
        w: &[[f32; KV_TILE]; 4],
        sc: &mut [[f32; KV_TILE]; 4],
        sc3: &mut [[f32; KV_TILE]; 3],
        got: &mut [Vec<f32>],
        got1: &mut [Vec<f32>],
    ) {
        Avx2::scores(kt, [&qs[0], &qs[1], &qs[2], &qs[3]], sc);
        Avx2::scores(kt, [&qs[0], &qs[1], &qs[2]], sc3);
        let [a, b, c, d] = got else { unreachable!() };
        Avx2::accumulate(kt, w, [a, b, c, d]);
        Avx2::accumulate(kt, &[w[0]], [&mut got1[0]]);
    }

    /// The portable and AVX-512 tile loops round identically, and any number of rows per
    /// pass equals one row at a time.
    #[test]
    fn tile_ops_agree() {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx512 {
            let mut rng = crate::cpu::testutil::Rng::new(9);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for hd in [16usize, 48, 64, 80, 256] {
                let kt = rng.vec(KV_TILE * hd, 2.0);
                let qs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(hd, 2.0)).collect();
                let w: [[f32; KV_TILE]; 4] = std::array::from_fn(|r| {
                    std::array::from_fn(|i| (i as f32 * 0.37 + r as f32).sin())
                });
                let accs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(hd, 1.0)).collect();
                // one row, portable: the reference
                let mut want_sc = [[0f32; KV_TILE]; 4];
                let mut want_acc = accs.clone();
                for r in 0..4 {
                    let mut one = [[0f32; KV_TILE]; 1];
                    Portable::scores(&kt, [&qs[r]], &mut one);
                    want_sc[r] = one[0];
                    Portable::accumulate(&kt, &[w[r]], [&mut want_acc[r]]);
                }
                let mut sc = [[0f32; KV_TILE]; 4];
                Avx512::scores(&kt, [&qs[0], &qs[1], &qs[2], &qs[3]], &mut sc);
                let mut sc3 = [[0f32; KV_TILE]; 3];
                Avx512::scores(&kt, [&qs[0], &qs[1], &qs[2]], &mut sc3);
                let mut p4 = [[0f32; KV_TILE]; 4];
                Portable::scores(&kt, [&qs[0], &qs[1], &qs[2], &qs[3]], &mut p4);
                for r in 0..4 {
                    assert_eq!(
                        sc[r].map(f32::to_bits),
                        want_sc[r].map(f32::to_bits),
                        "hd {hd}"
                    );
                    assert_eq!(
                        p4[r].map(f32::to_bits),
                        want_sc[r].map(f32::to_bits),
                        "hd {hd}"
                    );
                    if r < 3 {
                        assert_eq!(sc3[r].map(f32::to_bits), want_sc[r].map(f32::to_bits));
                    }
                }
                let mut got = accs.clone();
                let [a, b, c, d] = &mut got[..] else {
                    unreachable!()
                };
                Avx512::accumulate(&kt, &w, [a, b, c, d]);
                let mut got2 = accs.clone();
                let [a, b, ..] = &mut got2[..] else {
                    unreachable!()
                };
                Avx512::accumulate(&kt, &[w[0], w[1]], [a, b]);
                for r in 0..4 {
                    assert_eq!(bits(&got[r]), bits(&want_acc[r]), "accumulate, hd {hd}");
                    if r < 2 {
                        assert_eq!(bits(&got2[r]), bits(&want_acc[r]), "accumulate 2, hd {hd}");
                    }
                }
            }
        }
    }
}
