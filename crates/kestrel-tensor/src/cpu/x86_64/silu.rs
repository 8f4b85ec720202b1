//! AVX-512 gated activations, 16 values per instruction, each tested bit for bit against its
//! lane-by-lane twin in `cpu::elementwise`:
//! - SiLU and SwiGLU: ggml's `ggml_v_silu` / `ggml_v_expf` (AVX512 build), the same operations
//!   as `silu_ggml`;
//! - GeGLU: the f16 GELU table lookup of `gelu_ggml` (a convert to f16 and a 16-lane gather).

use std::arch::x86_64::*;

/// ggml's AVX512 `ggml_v_expf`: `2^n · p(b)`, `n = round(x·log2 e)`, `|n| > 192` gives 0 or ∞.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn v_expf(x: __m512) -> __m512 {
    // A macro, not a closure: closures do not inherit the target features.
    macro_rules! c {
        ($bits:expr) => {
            _mm512_set1_ps(f32::from_bits($bits))
        };
    }
    let r = c!(0x4b40_0000);
    let z = _mm512_fmadd_ps(x, c!(0x3fb8_aa3b), r);
    let n = _mm512_sub_ps(z, r);
    let b = _mm512_fnmadd_ps(n, c!(0x35bf_be8e), _mm512_fnmadd_ps(n, c!(0x3f31_7200), x));
    let d = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
    let u = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(c!(0x3c07_2010), b, c!(0x3d2b_9f17)),
            u,
            _mm512_fmadd_ps(c!(0x3e2a_af33), b, c!(0x3eff_fedb)),
        ),
        u,
        _mm512_fmadd_ps(c!(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
    );
    let res = _mm512_scalef_ps(j, n);
    if d == 0 {
        return res;
    }
    let zero = _mm512_setzero_ps();
    let le0 = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, zero);
    let alt = _mm512_mask_blend_ps(le0, _mm512_set1_ps(f32::INFINITY), zero);
    _mm512_mask_blend_ps(d, res, alt)
}

/// ggml's AVX512 `ggml_v_silu`: `x / (1 + v_expf(0 - x))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn v_silu(x: __m512) -> __m512 {
    let e = v_expf(_mm512_sub_ps(_mm512_setzero_ps(), x));
    _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

/// `x[i] = silu(x[i])` for the whole groups of 16 at the start of `x` (the rest untouched).
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn silu(x: &mut [f32]) {
    for c in x.chunks_exact_mut(16) {
        // SAFETY: 16 f32 in `c`; unaligned load and store.
        unsafe { _mm512_storeu_ps(c.as_mut_ptr(), v_silu(_mm512_loadu_ps(c.as_ptr()))) };
    }
}

/// `out[i] = silu(gate[i]) · up[i]` for the whole groups of 16 at the start of `out` (the rest
/// untouched; `gate` and `up` at least as long as `out`).
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() >= out.len() && up.len() >= out.len(),
        "swiglu: short inputs"
    );
    for (i, o) in out.chunks_exact_mut(16).enumerate() {
        // SAFETY: elements 16i..16i + 16 lie in all three slices (checked above); unaligned
        // loads and store.
        unsafe {
            let g = _mm512_loadu_ps(gate.as_ptr().add(16 * i));
            let u = _mm512_loadu_ps(up.as_ptr().add(16 * i));
            _mm512_storeu_ps(o.as_mut_ptr(), _mm512_mul_ps(v_silu(g), u));
        }
    }
}

/// `out[i] = gelu(gate[i]) · up[i]` as `elementwise::geglu` computes it (0 for `gate <= -10`,
/// `gate · up` for `gate >= 10`, else `f16 table[f16(gate)] · up`) for the whole groups of 16 at
/// the start of `out` (the rest untouched). `table` holds the 65536 f16 entries and one more
/// (each gather reads 4 bytes at an entry).
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn geglu(table: &[u16], gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        table.len() > 1 << 16 && gate.len() >= out.len() && up.len() >= out.len(),
        "geglu: short table or inputs"
    );
    let lo = _mm512_set1_ps(-10.0);
    let hi = _mm512_set1_ps(10.0);
    let low16 = _mm512_set1_epi32(0xFFFF);
    for (i, o) in out.chunks_exact_mut(16).enumerate() {
        // SAFETY: elements 16i..16i + 16 lie in all three slices (checked above); unaligned
        // loads and store; each gather reads entries h, h + 1 of the table (h <= 65535 < len - 1).
        unsafe {
            let g = _mm512_loadu_ps(gate.as_ptr().add(16 * i));
            let u = _mm512_loadu_ps(up.as_ptr().add(16 * i));
            let h = _mm512_cvtepu16_epi32(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(g));
            let e = _mm512_and_si512(_mm512_i32gather_epi32::<2>(h, table.as_ptr().cast()), low16);
            let gelu = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(e));
            let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(g, hi);
            let low = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(g, lo);
            let r = _mm512_mul_ps(_mm512_mask_blend_ps(big, gelu, g), u);
            _mm512_storeu_ps(
                o.as_mut_ptr(),
                _mm512_mask_blend_ps(low, r, _mm512_setzero_ps()),
            );
        }
    }
}
