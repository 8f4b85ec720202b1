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

/// One instruction set's f16 flash-attention ops, each wrapped safe by its test once the CPU
/// features were checked (see [`check_f16_ops`]).
pub(crate) struct F16Ops {
    pub(crate) dot: fn(&[f16], &[f16]) -> f32,
    pub(crate) mad: fn(&mut [f16], &[f16], f32),
    pub(crate) scale: fn(&mut [f16], f32),
    pub(crate) to_f16: fn(&[f32], &mut [f16]),
    pub(crate) to_f32_scaled: fn(&[f16], f32, &mut [f32]),
}

/// Each of `ops` equals its scalar twin bit for bit (`cpu::attention`'s: ggml's AVX512
/// `vec_dot_f16` order, `f16(fma(v, s, acc))`, `f16(acc·s)`, `f16(x)`, `f32(h)·s`) at lengths
/// with and without a tail, and the f16 conversion on values that overflow, round to
/// subnormals and tie.
pub(crate) fn check_f16_ops(ops: &F16Ops, seed: u64) {
    let f16s = |rng: &mut Rng, n: usize, scale: f32| -> Vec<f16> {
        rng.vec(n, scale).into_iter().map(f16::from_f32).collect()
    };
    let mut rng = Rng::new(seed);
    for n in [1usize, 7, 8, 15, 16, 63, 64, 65, 128, 200, 256] {
        let a = f16s(&mut rng, n, 4.0);
        let b = f16s(&mut rng, n, 4.0);
        let want = crate::cpu::qdot::dot_f16_ggml_x86(&a, &b);
        assert_eq!((ops.dot)(&a, &b).to_bits(), want.to_bits(), "dot n={n}");

        let s = 0.37f32;
        let mut want = a.clone();
        for (w, x) in want.iter_mut().zip(&b) {
            *w = f16::from_f32(x.to_f32().mul_add(s, w.to_f32()));
        }
        let mut got = a.clone();
        (ops.mad)(&mut got, &b, s);
        assert_eq!(got, want, "mad n={n}");

        let mut want = a.clone();
        want.iter_mut()
            .for_each(|w| *w = f16::from_f32(w.to_f32() * s));
        let mut got = a.clone();
        (ops.scale)(&mut got, s);
        assert_eq!(got, want, "scale n={n}");

        let x = rng.vec(n, 1e3);
        let want: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let mut got = vec![f16::ZERO; n];
        (ops.to_f16)(&x, &mut got);
        assert_eq!(got, want, "to_f16 n={n}");

        let want: Vec<f32> = a.iter().map(|v| v.to_f32() * s).collect();
        let mut got = vec![0f32; n];
        (ops.to_f32_scaled)(&a, s, &mut got);
        assert_eq!(got, want, "to_f32_scaled n={n}");
    }
    let edge = [
        70000.0f32,
        -65520.0,
        65519.0,
        1e-8,
        -3e-6,
        6.1e-5,
        2049.0,
        2051.0,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        5.96e-8,
        2.98e-8,
        1.0 + 1.0 / 2048.0,
        1e-3,
    ];
    let want: Vec<u16> = edge.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
    let mut got = vec![f16::ZERO; edge.len()];
    (ops.to_f16)(&edge, &mut got);
    let got: Vec<u16> = got.iter().map(|h| h.to_bits()).collect();
    assert_eq!(got, want, "to_f16 edge values");
}

/// An activation quantizer under test (q8_0 and q8_1), wrapped safe by its test.
pub(crate) type Quantizers = (
    fn(&[f32], &mut [quant::BlockQ8_0]),
    fn(&[f32], &mut [crate::cpu::q8::BlockQ8_1]),
);

/// `q` gives the scalar twins' bytes (`cpu::q8`, ggml's x86 quantizers) on random rows of many
/// magnitudes, exact ties (`x·id = k + 0.5`), zeros and a lone non-zero.
pub(crate) fn check_quantizers(q: Quantizers) {
    use bytemuck::Zeroable;

    use crate::cpu::q8::{self, BlockQ8_1};
    let mut rng = Rng::new(5);
    let mut rows: Vec<Vec<f32>> = [1e-6f32, 1.0, 3.0, 1e4, 1e30]
        .iter()
        .map(|&s| rng.vec(32 * 9, s))
        .collect();
    rows.push((0..64).map(|i| (i as f32 - 32.0) * 0.5).collect());
    rows.push(vec![0.0; 32]);
    let mut one = vec![0.0; 32];
    one[7] = -3.5;
    rows.push(one);
    for x in rows {
        let nb = x.len() / 32;
        let zero0 = quant::BlockQ8_0::zeroed();
        let (mut a0, mut b0) = (vec![zero0; nb], vec![zero0; nb]);
        let (mut a1, mut b1) = (vec![BlockQ8_1::zeroed(); nb], vec![BlockQ8_1::zeroed(); nb]);
        q8::quantize_row_q8_0_scalar(&x, &mut a0);
        q8::quantize_row_q8_1_scalar(&x, &mut a1);
        (q.0)(&x, &mut b0);
        (q.1)(&x, &mut b1);
        assert_eq!(a0, b0);
        assert_eq!(a1, b1);
    }
}
