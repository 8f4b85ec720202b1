//! Test helpers: a small seeded PRNG and random quantized rows (bytes plus their exact
//! dequantization, which is what the f64 references compute with).

use half::f16;
use kestrel_gguf::quant;

use crate::DType;

/// SplitMix64: deterministic, dependency-free random numbers for tests.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x1234_5678)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub(crate) fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// `n` values uniform in [-scale, scale).
    pub(crate) fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }
}

/// `rows` random rows of `k` elements of `dtype`: (raw bytes, exact dequantized values).
pub(crate) fn quantized_rows(
    rng: &mut Rng,
    dtype: DType,
    rows: usize,
    k: usize,
) -> (Vec<u8>, Vec<f32>) {
    let n = rows * k;
    let nbytes = dtype.row_bytes(k).unwrap() * rows;
    let mut bytes = vec![0u8; nbytes];
    let ty = dtype.ggml_type();
    if quant::can_quantize(ty) {
        let src = rng.vec(n, 1.0);
        quant::quantize(ty, &src, &mut bytes).unwrap();
    } else {
        // IQ4_NL / IQ4_XS / MXFP4 / TQ1_0 / TQ2_0 have no quantizer: random bits with a small
        // scale.
        for b in bytes.iter_mut() {
            *b = rng.next_u64() as u8;
        }
        for blk in bytes.chunks_exact_mut(dtype.block_bytes()) {
            if dtype == DType::MXFP4 {
                // An E8M0 scale of 2^-8 .. 2^-5 (values up to 12 * 2^-6).
                blk[0] = 119 + (rng.next_u64() % 4) as u8;
                continue;
            }
            if dtype == DType::IQ1M {
                // The f16 scale in the top nibbles of the four scale words (bytes 48..56).
                let d = f16::from_f32(0.001 + 0.01 * rng.f32().abs()).to_bits();
                for w in 0..4 {
                    let at = 48 + 2 * w + 1;
                    blk[at] = (blk[at] & 0x0f) | ((((d >> (4 * w)) & 0xf) as u8) << 4);
                }
                continue;
            }
            if matches!(dtype, DType::TQ1_0 | DType::TQ2_0) {
                // The ternary types keep their f16 scale last.
                let d = f16::from_f32(0.001 + 0.01 * rng.f32().abs());
                let at = blk.len() - 2;
                blk[at..].copy_from_slice(&d.to_bits().to_le_bytes());
                continue;
            }
            let d = f16::from_f32(0.001 + 0.01 * rng.f32().abs());
            blk[..2].copy_from_slice(&d.to_bits().to_le_bytes());
        }
    }
    let mut deq = vec![0f32; n];
    quant::dequantize(ty, &bytes, &mut deq).unwrap();
    (bytes, deq)
}

/// One random row of `k` elements of `dtype`.
pub(crate) fn quantized_row(rng: &mut Rng, dtype: DType, k: usize) -> (Vec<u8>, Vec<f32>) {
    quantized_rows(rng, dtype, 1, k)
}

/// Largest `|a - b|` over two slices.
pub(crate) fn max_abs_diff(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - y).abs())
        .fold(0.0, f64::max)
}

/// One case of a `tests/fixtures/ggml_dot.bin`-format file (see `gen_ggml_dot.py` there): a
/// weight type, row length, f32 activations, weight rows, ggml's activation bytes, and ggml's
/// generic and SIMD dots per row.
pub(crate) struct GgmlCase {
    pub dtype: DType,
    pub k: usize,
    pub x: Vec<f32>,
    pub w: Vec<u8>,
    pub act: Vec<u8>,
    pub generic: Vec<f32>,
    pub simd: Vec<f32>,
}

/// Parses a `ggml_dot.bin`-format file (magic `KGD1`).
pub(crate) fn parse_ggml_dot(bytes: &[u8]) -> Vec<GgmlCase> {
    let mut at = 0;
    let mut take = |n: usize| {
        let s = &bytes[at..at + n];
        at += n;
        s
    };
    let u32_at = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let f32s = |s: &[u8]| -> Vec<f32> {
        s.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    assert_eq!(take(4), b"KGD1");
    let n = u32_at(take(4));
    (0..n)
        .map(|_| {
            let ty = u32_at(take(4));
            let k = u32_at(take(4)) as usize;
            let rows = u32_at(take(4)) as usize;
            let x = f32s(take(4 * k));
            let wn = u32_at(take(4)) as usize;
            let w = take(wn).to_vec();
            let an = u32_at(take(4)) as usize;
            let act = take(an).to_vec();
            let generic = f32s(take(4 * rows));
            let simd = f32s(take(4 * rows));
            let gt = kestrel_gguf::GgmlType::from_id(ty).unwrap();
            let dtype = DType::try_from(gt).unwrap();
            GgmlCase {
                dtype,
                k,
                x,
                w,
                act,
                generic,
                simd,
            }
        })
        .collect()
}
