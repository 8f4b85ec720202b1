//! Unit tests of the quant module: layouts against `GgmlType`, length errors, the unaligned
//! path, quantization quality (llama.cpp's test-quantize-fns data and random data) and property
//! tests that nothing panics.

use bytemuck::Zeroable;
use proptest::prelude::*;

use super::*;

const ALL_DEQUANT: [GgmlType; 17] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Q8K,
    GgmlType::IQ4NL,
    GgmlType::IQ4XS,
    GgmlType::MXFP4,
];

const ALL_QUANT: [GgmlType; 15] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Q8K,
    GgmlType::MXFP4,
];

fn layout<B: QuantBlock>() -> (GgmlType, usize, usize) {
    (B::TYPE, B::BLOCK_SIZE, std::mem::size_of::<B>())
}

#[test]
fn block_layouts_match_ggml_type_table() {
    let layouts = [
        layout::<BlockQ4_0>(),
        layout::<BlockQ4_1>(),
        layout::<BlockQ5_0>(),
        layout::<BlockQ5_1>(),
        layout::<BlockQ8_0>(),
        layout::<BlockQ2K>(),
        layout::<BlockQ3K>(),
        layout::<BlockQ4K>(),
        layout::<BlockQ5K>(),
        layout::<BlockQ6K>(),
        layout::<BlockQ8K>(),
        layout::<BlockIQ4NL>(),
        layout::<BlockIQ4XS>(),
        layout::<BlockMXFP4>(),
    ];
    for (ty, block_size, size) in layouts {
        assert_eq!(block_size, ty.block_size(), "{ty} block size");
        assert_eq!(size, ty.type_size(), "{ty} block bytes");
    }
}

#[test]
fn support_tables_match_dispatch() {
    for ty in GgmlType::all() {
        let d = dequantize(ty, &[], &mut []);
        assert_eq!(d.is_ok(), can_dequantize(ty), "{ty} dequantize: {d:?}");
        let q = quantize(ty, &[], &mut []);
        assert_eq!(q.is_ok(), can_quantize(ty), "{ty} quantize: {q:?}");
        if !can_dequantize(ty) {
            assert_eq!(
                d,
                Err(QuantError::Unsupported {
                    ty,
                    op: QuantOp::Dequantize
                })
            );
        }
    }
    for ty in ALL_DEQUANT {
        assert!(can_dequantize(ty), "{ty}");
    }
    for ty in ALL_QUANT {
        assert!(can_quantize(ty), "{ty}");
    }
}

#[test]
fn bad_lengths_are_errors_not_panics() {
    for ty in ALL_DEQUANT {
        let bs = ty.block_size();
        let ts = ty.type_size();
        if bs > 1 {
            let mut out = vec![0f32; bs + 1];
            let err = dequantize(ty, &vec![0u8; ts], &mut out).unwrap_err();
            assert!(
                matches!(err, QuantError::PartialBlock { values, .. } if values == bs + 1),
                "{ty}: {err}"
            );
            assert!(err.to_string().contains(ty.name()), "{err}");
        }
        let mut out = vec![0f32; 2 * bs];
        for len in [0, ts, 2 * ts - 1, 2 * ts + 1, 3 * ts] {
            let err = dequantize(ty, &vec![0u8; len], &mut out).unwrap_err();
            assert!(
                matches!(err, QuantError::ByteLength { expected, actual, .. }
                    if expected == 2 * ts && actual == len),
                "{ty}: {err}"
            );
        }
        assert!(out.iter().all(|&v| v == 0.0));
    }
    for ty in ALL_QUANT {
        let bs = ty.block_size();
        let ts = ty.type_size();
        let src = vec![1f32; 2 * bs];
        let mut out = vec![0u8; 2 * ts + 1];
        let err = quantize(ty, &src, &mut out).unwrap_err();
        assert!(matches!(err, QuantError::ByteLength { .. }), "{ty}: {err}");
        if bs > 1 {
            let err = quantize(ty, &src[..bs + 3], &mut out[..2 * ts]).unwrap_err();
            assert!(
                matches!(err, QuantError::PartialBlock { .. }),
                "{ty}: {err}"
            );
        }
    }
    // Typed slices.
    let blocks = [BlockQ4_0::zeroed(); 2];
    let err = q4_0::dequantize_blocks(&blocks, &mut [0f32; 32]).unwrap_err();
    assert!(matches!(
        err,
        QuantError::BlockCount {
            blocks: 2,
            block_values: 64,
            values: 32,
            ..
        }
    ));
    let err = q6_k::quantize_row(&[0f32; 256], &mut []).unwrap_err();
    assert!(matches!(err, QuantError::BlockCount { .. }), "{err}");
    let err = float::dequantize_f16(&[half::f16::ONE; 3], &mut [0f32; 2]).unwrap_err();
    assert!(matches!(err, QuantError::BlockCount { .. }), "{err}");
}

/// A small deterministic generator (splitmix64) so the tests need no extra crates.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let mut q = vec![0u8; x.len() / ty.block_size() * ty.type_size()];
    quantize(ty, x, &mut q).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize(ty, &q, &mut y).unwrap();
    y
}

/// True root-mean-square error.
fn rmse(a: &[f32], b: &[f32]) -> f64 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    (sum / a.len() as f64).sqrt()
}

/// llama.cpp test-quantize-fns' `array_rmse`: `sqrt(sum of squares) / n` (not a true RMSE).
fn ggml_test_error(a: &[f32], b: &[f32]) -> f32 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x as f64 - y as f64;
            d * d
        })
        .sum();
    (sum as f32).sqrt() / a.len() as f32
}

/// llama.cpp test-quantize-fns' `generate_data`: `0.1 + 2*cos(i + offset)`.
fn synthetic(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1 + (2.0f32 * (i as f32 + offset).cos()) as f64) as f32)
        .collect()
}

#[test]
fn synthetic_data_error_within_test_quantize_fns_limits() {
    // Limits of llama.cpp's tests/test-quantize-fns.cpp (MAX_QUANTIZATION_TOTAL_ERROR*).
    let x = synthetic(0.0, 32 * 128);
    for ty in ALL_QUANT {
        let limit = match ty {
            GgmlType::Q2K => 0.0075,
            GgmlType::Q3K => 0.0040,
            _ => 0.002,
        };
        let y = round_trip(ty, &x);
        let err = ggml_test_error(&x, &y);
        println!(
            "{ty:>5}: test-quantize-fns error {err:.6} (limit {limit}), rmse {:.6}",
            rmse(&x, &y)
        );
        assert!(err < limit, "{ty}: {err} >= {limit}");
    }
}

#[test]
fn k_quants_are_close_to_legacy_quants_on_random_data() {
    let mut rng = Rng(0x5eed_1234);
    // Gaussian weights with a few outliers and varying scale per block, like real tensors.
    let mut x = Vec::with_capacity(256 * 64);
    for b in 0..64 {
        let scale = 0.02 * (1.0 + (b % 7) as f32);
        for _ in 0..256 {
            let mut v = rng.normal() * scale;
            if rng.uniform() < 0.01 {
                v *= 6.0;
            }
            x.push(v);
        }
    }
    let err = |ty| rmse(&x, &round_trip(ty, &x));
    let e: Vec<(GgmlType, f64)> = ALL_QUANT.iter().map(|&t| (t, err(t))).collect();
    for (ty, v) in &e {
        println!("{ty:>5}: rmse {v:.3e} on random data");
    }
    let get = |t: GgmlType| e.iter().find(|p| p.0 == t).map(|p| p.1).unwrap();
    // Same bits per weight class: the K-quant should not be worse than its legacy cousin by more
    // than a small factor (in practice they are better).
    assert!(get(GgmlType::Q4K) < 1.1 * get(GgmlType::Q4_0));
    assert!(get(GgmlType::Q4K) < 1.2 * get(GgmlType::Q4_1));
    assert!(get(GgmlType::Q5K) < 1.1 * get(GgmlType::Q5_0));
    assert!(get(GgmlType::Q5K) < 1.2 * get(GgmlType::Q5_1));
    assert!(get(GgmlType::Q6K) < 0.7 * get(GgmlType::Q5_1));
    // Q8_K has one scale per 256 values (it is an activation format), Q8_0 one per 32.
    assert!(get(GgmlType::Q8K) < 2.5 * get(GgmlType::Q8_0));
    assert!(get(GgmlType::Q3K) < 2.5 * get(GgmlType::Q4_0));
    assert!(get(GgmlType::Q2K) < 2.5 * get(GgmlType::Q3K));
    // More bits, less error.
    let order = [
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q8K,
    ];
    for w in order.windows(2) {
        assert!(get(w[1]) < get(w[0]), "{} vs {}", w[1], w[0]);
    }
}

#[test]
fn zero_input_quantizes_to_zero() {
    for ty in ALL_QUANT {
        let x = vec![0f32; 2 * ty.block_size().max(256)];
        let y = round_trip(ty, &x);
        assert!(y.iter().all(|&v| v == 0.0), "{ty}");
    }
}

#[test]
fn q8_k_sums_match_quants() {
    let mut rng = Rng(7);
    let x: Vec<f32> = (0..512).map(|_| rng.normal()).collect();
    let mut blocks = [BlockQ8K::zeroed(); 2];
    q8_k::quantize_row(&x, &mut blocks).unwrap();
    for b in &blocks {
        for (g, s) in b.qs.chunks_exact(16).zip(&b.bsums) {
            assert_eq!(g.iter().map(|&q| q as i16).sum::<i16>(), *s);
        }
        assert!(b.qs.iter().any(|&q| q == -127 || q == 127));
    }
}

#[test]
fn bf16_conversion_matches_ggml() {
    assert_eq!(float::f32_to_bf16(1.0).to_bits(), 0x3f80);
    // Ties round to even.
    assert_eq!(
        float::f32_to_bf16(f32::from_bits(0x3f80_8000)).to_bits(),
        0x3f80
    );
    assert_eq!(
        float::f32_to_bf16(f32::from_bits(0x3f81_8000)).to_bits(),
        0x3f82
    );
    // NaN stays NaN and becomes quiet.
    assert_eq!(
        float::f32_to_bf16(f32::from_bits(0x7f80_0001)).to_bits(),
        0x7fc0
    );
    assert_eq!(float::f32_to_bf16(f32::MAX).to_bits(), 0x7f80);
    assert_eq!(float::bf16_to_f32(half::bf16::from_bits(0xc040)), -3.0);
}

#[test]
fn unaligned_bytes_give_the_same_values() {
    let mut rng = Rng(99);
    for ty in ALL_DEQUANT {
        let n = 4 * ty.block_size().max(8);
        let len = n / ty.block_size() * ty.type_size();
        let mut data = rng.bytes(len + 1);
        // Keep the f16/f32 scales finite so results can be compared with ==.
        sanitize_scales(ty, &mut data[1..]);
        let aligned: Vec<u8> = data[1..].to_vec();
        let mut a = vec![0f32; n];
        let mut b = vec![0f32; n];
        dequantize(ty, &aligned, &mut a).unwrap();
        dequantize(ty, &data[1..], &mut b).unwrap();
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{ty}"
        );

        if can_quantize(ty) {
            let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            let mut qa = vec![0u8; len];
            let mut qb = vec![0u8; len + 1];
            quantize(ty, &x, &mut qa).unwrap();
            quantize(ty, &x, &mut qb[1..]).unwrap();
            assert_eq!(qa, qb[1..], "{ty}");
        }
    }
}

/// Overwrites the f16 / f32 scale fields of random blocks with finite values.
fn sanitize_scales(ty: GgmlType, data: &mut [u8]) {
    let ts = ty.type_size();
    let f16_at: &[usize] = match ty {
        GgmlType::Q4_0 | GgmlType::Q8_0 | GgmlType::IQ4NL | GgmlType::IQ4XS | GgmlType::Q5_0 => {
            &[0]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        GgmlType::Q6K => &[208],
        GgmlType::F16 => &[0],
        _ => &[],
    };
    for block in data.chunks_exact_mut(ts) {
        for &o in f16_at {
            // Clear the top exponent bit: magnitude below 2.
            block[o + 1] &= 0xbf;
        }
        if ty == GgmlType::MXFP4 {
            // An E8M0 exponent that keeps 12 * 2^(e - 128) finite.
            block[0] = block[0].min(250);
        }
        if matches!(ty, GgmlType::Q8K | GgmlType::F32) {
            block[3] &= 0xbf;
        }
        if ty == GgmlType::BF16 {
            block[1] &= 0xbf;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn dequantize_never_panics_on_arbitrary_bytes(
        ty_index in 0usize..ALL_DEQUANT.len(),
        blocks in 0usize..4,
        seed in any::<u64>(),
        offset in 0usize..4,
    ) {
        let ty = ALL_DEQUANT[ty_index];
        let len = blocks * ty.type_size();
        let data = Rng(seed).bytes(len + offset);
        let mut out = vec![0f32; blocks * ty.block_size()];
        prop_assert!(dequantize(ty, &data[offset..], &mut out).is_ok());
    }

    #[test]
    fn quantize_round_trip_is_finite(
        ty_index in 0usize..ALL_QUANT.len(),
        seed in any::<u64>(),
        scale_exp in -30i32..13,
        sparsity in 0.0f64..1.0,
    ) {
        let ty = ALL_QUANT[ty_index];
        let mut rng = Rng(seed);
        let scale = 2f32.powi(scale_exp);
        let n = 2 * ty.block_size().max(256);
        let x: Vec<f32> = (0..n)
            .map(|_| if rng.uniform() < sparsity { 0.0 } else { rng.normal() * scale })
            .collect();
        let y = round_trip(ty, &x);
        for (i, (&a, &b)) in x.iter().zip(&y).enumerate() {
            prop_assert!(b.is_finite(), "{} value {}: {} -> {}", ty, i, a, b);
        }
    }

    #[test]
    fn quantize_handles_extreme_values(
        ty_index in 0usize..ALL_QUANT.len(),
        values in proptest::collection::vec(
            prop_oneof![
                Just(0.0f32), Just(-0.0f32), Just(1e-30f32), Just(-1e-30f32),
                Just(6e4f32), Just(-6e4f32), Just(f32::MIN_POSITIVE), -1e4f32..1e4f32,
            ],
            256..=256,
        ),
    ) {
        let ty = ALL_QUANT[ty_index];
        let y = round_trip(ty, &values);
        for (&a, &b) in values.iter().zip(&y) {
            prop_assert!(b.is_finite(), "{}: {} -> {}", ty, a, b);
        }
    }

    #[test]
    fn quantize_non_finite_input_does_not_panic(
        ty_index in 0usize..ALL_QUANT.len(),
        values in proptest::collection::vec(
            prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(f32::NEG_INFINITY),
                        Just(f32::MAX), Just(f32::MIN), any::<f32>()],
            256..=256,
        ),
    ) {
        let ty = ALL_QUANT[ty_index];
        let _ = round_trip(ty, &values);
    }
}
