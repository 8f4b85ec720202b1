//! f16 keys and values under 64 query rows, rounding exactly as llama.cpp's default CPU flash
//! attention does (`run_f16_ggml`): f16 query and output accumulator, keys one at a time.

use half::f16;
use rayon::prelude::*;

use super::kv::KvRows;
use super::kv::KvSlice;
use super::params::{visible_keys, AttentionParams, GGML_FA_TILE_Q};
use crate::cpu::qdot::dot_f16_ggml_x86;

/// Largest head size of the f16 path (its buffers live on the stack); larger heads take the f32
/// path.
const MAX_F16_HEAD_DIM: usize = 512;

/// True when [`attention_paged`] takes the per-(row, head) f16 path (`run_f16_ggml`) for
/// `n_rows` query rows over `k`/`v`.
pub(super) fn takes_f16_ggml(
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    n_rows: usize,
    p: &AttentionParams,
) -> bool {
    matches!((k, v), (KvSlice::F16(_), KvSlice::F16(_)))
        && (n_rows < GGML_FA_TILE_Q || !p.head_dim.is_multiple_of(16))
        && p.head_dim <= MAX_F16_HEAD_DIM
}

/// f16 keys and values as llama.cpp's CPU flash attention treats them for fewer than
/// [`GGML_FA_TILE_Q`] query rows (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`; its
/// default since FA became "auto"): the query is rounded to f16, `q·k` is `ggml_vec_dot_f16`
/// (emulated bit for bit, [`dot_f16_ggml_x86`]), keys are visited one at a time in order with
/// `M`/`S` updated per key, and the output accumulator is **f16**: `acc = f16(acc * ms)` on a
/// new maximum, `acc = f16(fma(v, vs, acc))` per key, then `acc * (1/S)` in f32. This rounds far
/// more than an f32 accumulator would (each step 2⁻¹¹ relative), and SmolLM2's logits move by up
/// to 0.5 between llama.cpp's FA on and off, so matching llama.cpp means rounding as it does.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_f16_ggml(
    q: &[f32],
    positions: &[i32],
    k: &[f16],
    v: &[f16],
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &mut [f32],
) {
    let hd = p.head_dim;
    let isa = F16Isa::detect();
    out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
        let t = i / p.n_head;
        let h = i % p.n_head;
        let row = F16Row::new(
            &q[i * hd..(i + 1) * hd],
            h,
            k,
            v,
            positions[t],
            kv_len,
            rows,
            p,
        );
        isa.row(&row, o);
    });
}

/// The vector ops [`F16Isa::row`] runs with, chosen once per call.
#[derive(Clone, Copy)]
pub(super) struct F16Isa {
    #[cfg(target_arch = "x86_64")]
    avx512: bool,
    #[cfg(target_arch = "x86_64")]
    avx2: bool,
    #[cfg(target_arch = "x86_64")]
    fma: bool,
    #[cfg(target_arch = "aarch64")]
    neon: bool,
}

impl F16Isa {
    pub(super) fn detect() -> F16Isa {
        F16Isa {
            #[cfg(target_arch = "x86_64")]
            avx512: crate::cpu::x86_64::f16_ops::available()
                && crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx512,
            #[cfg(target_arch = "x86_64")]
            avx2: crate::cpu::x86_64::f16_ops_avx2::available()
                && crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx2,
            #[cfg(target_arch = "x86_64")]
            fma: std::arch::is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "aarch64")]
            neon: crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Neon,
        }
    }

    /// One (token, head): the same roundings whichever ops run it.
    #[inline]
    pub(super) fn row(self, row: &F16Row<'_>, o: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: the CPU has the features (checked in `detect`).
            unsafe { f16_row_avx512(row, o) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: the CPU has the features (checked in `detect`).
            unsafe { f16_row_avx2(row, o) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.fma {
            // SAFETY: the CPU has FMA (checked in `detect`).
            unsafe { f16_row_fma(row, o) };
            return;
        }
        #[cfg(target_arch = "aarch64")]
        if self.neon {
            f16_row::<NeonF16>(row, o);
            return;
        }
        f16_row::<ScalarF16>(row, o);
    }
}

/// One (token, head) of `run_f16_ggml`.
pub(super) struct F16Row<'a> {
    q: &'a [f32],
    k: &'a [f16],
    v: &'a [f16],
    keys: (usize, usize),
    rows: KvRows<'a>,
    kv_stride: usize,
    head_off: usize,
    scale: f32,
    softcap: f32,
}

impl<'a> F16Row<'a> {
    /// Query head `h` (its `head_dim` values `q`) at position `pos` over `kv_len` keys.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn new(
        q: &'a [f32],
        h: usize,
        k: &'a [f16],
        v: &'a [f16],
        pos: i32,
        kv_len: usize,
        rows: KvRows<'a>,
        p: &AttentionParams,
    ) -> F16Row<'a> {
        let hd = p.head_dim;
        let group = p.n_head / p.n_kv_head;
        F16Row {
            q,
            k,
            v,
            keys: visible_keys(pos, kv_len, p.window),
            rows,
            kv_stride: p.n_kv_head * hd,
            head_off: (h / group) * hd,
            // ggml folds the cap into the scale: s = cap * tanh(q·k * (scale / cap)).
            scale: if p.softcap != 0.0 {
                p.scale / p.softcap
            } else {
                p.scale
            },
            softcap: p.softcap,
        }
    }
}

/// The vector ops of [`f16_row`]; the implementations round identically.
trait F16Ops {
    /// `ggml_vec_dot_f16`.
    fn dot(a: &[f16], b: &[f16]) -> f32;
    /// `acc = f16(fma(v, s, acc))`.
    fn mad(acc: &mut [f16], v: &[f16], s: f32);
    /// `acc = f16(acc · s)`.
    fn scale(acc: &mut [f16], s: f32);
    /// `dst = f16(src)`.
    fn to_f16(src: &[f32], dst: &mut [f16]);
    /// `dst = f32(src) · s`.
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]);
}

/// Portable [`F16Ops`].
struct ScalarF16;

impl F16Ops for ScalarF16 {
    #[inline(always)]
    fn dot(a: &[f16], b: &[f16]) -> f32 {
        dot_f16_ggml_x86(a, b)
    }
    #[inline(always)]
    fn mad(acc: &mut [f16], v: &[f16], s: f32) {
        // ggml_vec_mad_f16: _mm512_fmadd_ps(v, vs, acc), stored back as f16.
        for (a, x) in acc.iter_mut().zip(v) {
            *a = f16::from_f32(x.to_f32().mul_add(s, a.to_f32()));
        }
    }
    #[inline(always)]
    fn scale(acc: &mut [f16], s: f32) {
        for a in acc.iter_mut() {
            *a = f16::from_f32(a.to_f32() * s);
        }
    }
    #[inline(always)]
    fn to_f16(src: &[f32], dst: &mut [f16]) {
        for (a, &x) in dst.iter_mut().zip(src) {
            *a = f16::from_f32(x);
        }
    }
    #[inline(always)]
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
        for (y, a) in dst.iter_mut().zip(src) {
            *y = a.to_f32() * s;
        }
    }
}

/// NEON [`F16Ops`] (aarch64's baseline; chosen unless `KESTREL_ISA=scalar`).
#[cfg(target_arch = "aarch64")]
struct NeonF16;

#[cfg(target_arch = "aarch64")]
impl F16Ops for NeonF16 {
    #[inline(always)]
    fn dot(a: &[f16], b: &[f16]) -> f32 {
        // SAFETY: NEON is part of the aarch64 base architecture.
        unsafe { crate::cpu::aarch64::f16_ops::dot_f16(a, b) }
    }
    #[inline(always)]
    fn mad(acc: &mut [f16], v: &[f16], s: f32) {
        // SAFETY: as above.
        unsafe { crate::cpu::aarch64::f16_ops::mad_f16(acc, v, s) }
    }
    #[inline(always)]
    fn scale(acc: &mut [f16], s: f32) {
        // SAFETY: as above.
        unsafe { crate::cpu::aarch64::f16_ops::scale_f16(acc, s) }
    }
    #[inline(always)]
    fn to_f16(src: &[f32], dst: &mut [f16]) {
        // SAFETY: as above.
        unsafe { crate::cpu::aarch64::f16_ops::to_f16(src, dst) }
    }
    #[inline(always)]
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
        // SAFETY: as above.
        unsafe { crate::cpu::aarch64::f16_ops::to_f32_scaled(src, s, dst) }
    }
}

/// AVX-512 [`F16Ops`] (only used once the features were detected).
#[cfg(target_arch = "x86_64")]
struct Avx512F16;

#[cfg(target_arch = "x86_64")]
impl F16Ops for Avx512F16 {
    #[inline(always)]
    fn dot(a: &[f16], b: &[f16]) -> f32 {
        // SAFETY: Avx512F16 is only used behind `f16_ops::available()`.
        unsafe { crate::cpu::x86_64::f16_ops::dot_f16(a, b) }
    }
    #[inline(always)]
    fn mad(acc: &mut [f16], v: &[f16], s: f32) {
        // SAFETY: as above.
        unsafe { crate::cpu::x86_64::f16_ops::mad_f16(acc, v, s) }
    }
    #[inline(always)]
    fn scale(acc: &mut [f16], s: f32) {
        // SAFETY: as above.
        unsafe { crate::cpu::x86_64::f16_ops::scale_f16(acc, s) }
    }
    #[inline(always)]
    fn to_f16(src: &[f32], dst: &mut [f16]) {
        // SAFETY: as above.
        unsafe { crate::cpu::x86_64::f16_ops::to_f16(src, dst) }
    }
    #[inline(always)]
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
        // SAFETY: as above.
        unsafe { crate::cpu::x86_64::f16_ops::to_f32_scaled(src, s, dst) }
    }
}

/// AVX2 + F16C [`F16Ops`] (only used once the features were detected).
#[cfg(target_arch = "x86_64")]
struct Avx2F16;

#[cfg(target_arch = "x86_64")]
impl F16Ops for Avx2F16 {
    #[inline(always)]
    fn dot(a: &[f16], b: &[f16]) -> f32 {
        // SAFETY: Avx2F16 is only used behind `f16_ops_avx2::available()`.
        unsafe { crate::cpu::x86_64::f16_ops_avx2::dot_f16(a, b) }
    }
    #[inline(always)]
    fn mad(acc: &mut [f16], v: &[f16], s: f32) {
        // SAFETY: as above.
        unsafe { crate::cpu::x86_64::f16_ops_avx2::mad_f16(acc, v, s) }
    }
    #[inline(always)]
    fn scale(acc: &mut [f16], s: f32) {
        // SAFETY: as above.
        unsafe { crate::cpu::x86_64::f16_ops_avx2::scale_f16(acc, s) }
    }
    #[inline(always)]
    fn to_f16(src: &[f32], dst: &mut [f16]) {
        // SAFETY: as above.
        unsafe { crate::cpu::x86_64::f16_ops_avx2::to_f16(src, dst) }
    }
    #[inline(always)]
    fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
        // SAFETY: as above.
        unsafe { crate::cpu::x86_64::f16_ops_avx2::to_f32_scaled(src, s, dst) }
    }
}

/// [`f16_row`] with the AVX2 vector ops.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_row_avx2(r: &F16Row<'_>, o: &mut [f32]) {
    f16_row::<Avx2F16>(r, o)
}

/// [`f16_row`] compiled with FMA, so `mul_add` is one instruction rather than a libm call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn f16_row_fma(r: &F16Row<'_>, o: &mut [f32]) {
    f16_row::<ScalarF16>(r, o)
}

/// [`f16_row`] with the AVX-512 vector ops.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
fn f16_row_avx512(r: &F16Row<'_>, o: &mut [f32]) {
    f16_row::<Avx512F16>(r, o)
}

#[inline(always)]
fn f16_row<O: F16Ops>(r: &F16Row<'_>, o: &mut [f32]) {
    let hd = r.q.len();
    let mut qbuf = [f16::ZERO; MAX_F16_HEAD_DIM];
    let q16 = &mut qbuf[..hd];
    O::to_f16(r.q, q16);
    let mut abuf = [f16::ZERO; MAX_F16_HEAD_DIM];
    let acc = &mut abuf[..hd];
    let mut s_sum = 0f32;
    let mut m = f32::NEG_INFINITY;
    for j in r.keys.0..r.keys.1 {
        let off = r.rows.row(j) * r.kv_stride + r.head_off;
        let mut s = O::dot(&r.k[off..off + hd], q16) * r.scale;
        if r.softcap != 0.0 {
            s = r.softcap * s.tanh();
        }
        let mut ms = 1f32;
        let mut vs = 1f32;
        if s > m {
            let m_old = m;
            m = s;
            ms = (m_old - m).exp();
            // ggml_vec_scale_f16
            O::scale(acc, ms);
        } else {
            vs = (s - m).exp();
        }
        O::mad(acc, &r.v[off..off + hd], vs);
        // `S = S*ms + vs`, contracted to one FMA by the GCC build of ops.cpp (bit-identical to
        // libggml-cpu only this way; tests/ggml_ops.rs).
        s_sum = s_sum.mul_add(ms, vs);
    }
    let inv = if s_sum == 0.0 { 0.0 } else { 1.0 / s_sum };
    O::to_f32_scaled(acc, inv, o);
}
