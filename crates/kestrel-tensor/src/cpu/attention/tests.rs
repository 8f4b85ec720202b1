//! Tests of the single-sequence paths against an f64 reference and their scalar twins.

use half::f16;
use kestrel_gguf::quant::{BlockQ4_0, BlockQ8_0};

use super::kv::*;
use super::params::*;
use super::single::*;
use crate::cpu::testutil::{max_abs_diff, Rng};

/// The AVX2 dot equals the portable one bit for bit (lanes, tail and all), in one call or
/// in 64-value parts as the f16 path makes them.
#[test]
fn dot32_avx2_equals_scalar() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        let mut rng = Rng::new(21);
        for n in [1usize, 8, 31, 32, 33, 64, 100, 256, 257] {
            let q = rng.vec(n, 3.0);
            let k = rng.vec(n, 3.0);
            let mut a = Dot32::new();
            a.add_scalar(&q, &k);
            let mut b = Dot32::new();
            // SAFETY: features checked above.
            unsafe { b.add_avx2(&q, &k) };
            let mut c = Dot32::new();
            for (qc, kc) in q.chunks(64).zip(k.chunks(64)) {
                // SAFETY: as above.
                unsafe { c.add_avx2(qc, kc) };
            }
            let (a, b, c) = (a.finish(), b.finish(), c.finish());
            assert_eq!(a.to_bits(), b.to_bits(), "n {n}");
            assert_eq!(a.to_bits(), c.to_bits(), "n {n} in parts");
        }
    }
}

/// Plain f64 attention: full scores over the visible keys, then softmax.
fn reference(
    q: &[f32],
    positions: &[i32],
    k: &[f32],
    v: &[f32],
    kv_len: usize,
    p: &AttentionParams,
) -> Vec<f64> {
    let hd = p.head_dim;
    let mut out = vec![0f64; q.len()];
    for (t, &pos) in positions.iter().enumerate() {
        for h in 0..p.n_head {
            let kvh = h / (p.n_head / p.n_kv_head);
            let qr = &q[(t * p.n_head + h) * hd..][..hd];
            let vis: Vec<usize> = (0..kv_len)
                .filter(|&j| {
                    (j as i64) <= pos as i64
                        && (p.window == 0 || (pos as i64 - j as i64) < p.window as i64)
                })
                .collect();
            let s: Vec<f64> = vis
                .iter()
                .map(|&j| {
                    let kr = &k[(j * p.n_kv_head + kvh) * hd..][..hd];
                    let mut x = qr
                        .iter()
                        .zip(kr)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>()
                        * p.scale as f64;
                    if p.softcap != 0.0 {
                        let c = p.softcap as f64;
                        x = c * (x / c).tanh();
                    }
                    x
                })
                .collect();
            let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = s.iter().map(|x| (x - max).exp()).sum();
            let o = &mut out[(t * p.n_head + h) * hd..][..hd];
            for (&j, &x) in vis.iter().zip(&s) {
                let w = (x - max).exp() / sum;
                let vr = &v[(j * p.n_kv_head + kvh) * hd..][..hd];
                for d in 0..hd {
                    o[d] += w * vr[d] as f64;
                }
            }
        }
    }
    out
}

fn check(p: AttentionParams, positions: &[i32], kv_len: usize, cap: usize, f16_kv: bool) {
    let mut rng = Rng::new(21 + kv_len as u64);
    let q = rng.vec(positions.len() * p.n_head * p.head_dim, 1.0);
    let mut k = rng.vec(cap * p.n_kv_head * p.head_dim, 1.0);
    let mut v = rng.vec(cap * p.n_kv_head * p.head_dim, 1.0);
    let (kh, vh): (Vec<f16>, Vec<f16>);
    let (ks, vs) = if f16_kv {
        kh = k.iter().map(|&x| f16::from_f32(x)).collect();
        vh = v.iter().map(|&x| f16::from_f32(x)).collect();
        // The reference sees exactly the rounded values.
        k = kh.iter().map(|x| x.to_f32()).collect();
        v = vh.iter().map(|x| x.to_f32()).collect();
        (KvSlice::F16(&kh), KvSlice::F16(&vh))
    } else {
        (KvSlice::F32(&k), KvSlice::F32(&v))
    };
    let mut out = vec![f32::NAN; q.len()];
    attention(&q, positions, ks, vs, kv_len, &p, &mut out).unwrap();
    // Fewer than GGML_FA_TILE_Q rows over f16 KV round as llama.cpp does: the query to f16
    // (given to the reference too) and the output accumulated in f16 (the tolerance).
    let ggml_f16 = f16_kv && positions.len() < GGML_FA_TILE_Q;
    let q_ref: Vec<f32> = if ggml_f16 {
        q.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
    } else {
        q.clone()
    };
    let want = reference(&q_ref, positions, &k, &v, kv_len, &p);
    let err = max_abs_diff(&out, &want);
    let tol = if ggml_f16 { 4e-3 } else { 1e-5 };
    if ggml_f16 {
        eprintln!(
            "f16 accumulator: kv_len={kv_len} window={} err {err:.2e}",
            p.window
        );
    }
    assert!(err < tol, "{p:?} f16={f16_kv} kv_len={kv_len}: err {err}");
}

#[test]
fn prefill_and_decode_match_f64_with_gqa_window_and_cap() {
    let base = AttentionParams {
        n_head: 4,
        n_kv_head: 2,
        head_dim: 32,
        scale: 1.0 / (32f32).sqrt(),
        softcap: 0.0,
        window: 0,
    };
    // Prefill: 150 tokens at positions 0..150 (crosses key blocks of 64).
    let prefill: Vec<i32> = (0..150).collect();
    // Decode: one token at the end of a cache preallocated to 300 rows.
    for f16_kv in [false, true] {
        check(base, &prefill, 150, 150, f16_kv);
        check(base, &[199], 200, 300, f16_kv);
        check(
            AttentionParams { window: 17, ..base },
            &prefill,
            150,
            150,
            f16_kv,
        );
        check(
            AttentionParams { window: 70, ..base },
            &[199],
            200,
            300,
            f16_kv,
        );
        check(
            AttentionParams {
                softcap: 0.5,
                scale: 1.0,
                ..base
            },
            &prefill[..40],
            40,
            64,
            f16_kv,
        );
        check(
            AttentionParams {
                n_kv_head: 1,
                head_dim: 80,
                ..base
            },
            &[3, 4, 5],
            6,
            6,
            f16_kv,
        );
        check(
            AttentionParams {
                n_kv_head: 4,
                ..base
            },
            &[10, 11],
            12,
            12,
            f16_kv,
        );
    }
    // A chunk of a longer prompt: queries at 100..110 over 110 cached keys.
    let chunk: Vec<i32> = (100..110).collect();
    check(
        AttentionParams { window: 64, ..base },
        &chunk,
        110,
        128,
        false,
    );
}

#[test]
fn window_boundary_is_llama_cpp_s() {
    // p - j >= w is masked: with w = 3 a query at 10 sees 8, 9, 10.
    assert_eq!(visible_keys(10, 100, 3), (8, 11));
    assert_eq!(visible_keys(10, 100, 0), (0, 11));
    assert_eq!(visible_keys(1, 100, 5), (0, 2));
    assert_eq!(visible_keys(10, 5, 0), (0, 5));
    assert_eq!(visible_keys(-1, 5, 0), (0, 0));
    assert_eq!(visible_keys(20, 5, 3), (5, 5));
}

#[test]
fn no_visible_key_gives_zeros_and_bad_sizes_error() {
    let p = AttentionParams {
        n_head: 2,
        n_kv_head: 1,
        head_dim: 4,
        scale: 1.0,
        softcap: 0.0,
        window: 0,
    };
    let q = vec![1f32; 8];
    let kv = vec![1f32; 4 * 3];
    let mut out = vec![f32::NAN; 8];
    attention(
        &q,
        &[-1],
        KvSlice::F32(&kv),
        KvSlice::F32(&kv),
        3,
        &p,
        &mut out,
    )
    .unwrap();
    assert!(out.iter().all(|&x| x == 0.0));
    assert!(attention(
        &q,
        &[0],
        KvSlice::F32(&kv),
        KvSlice::F32(&kv),
        4,
        &p,
        &mut out
    )
    .is_err());
    assert!(attention(
        &q,
        &[0, 1],
        KvSlice::F32(&kv),
        KvSlice::F32(&kv),
        3,
        &p,
        &mut out
    )
    .is_err());
    let bad = AttentionParams { n_kv_head: 3, ..p };
    assert!(attention(
        &q,
        &[0],
        KvSlice::F32(&kv),
        KvSlice::F32(&kv),
        3,
        &bad,
        &mut out
    )
    .is_err());
}

/// A paged cache (blocks of 4 rows, in a shuffled order, with unused blocks between) gives
/// bit-identical outputs to the same positions stored contiguously, on every kernel path:
/// f32, f16 decode (llama.cpp rounding), f16 long prefill (widened), windowed.
#[test]
fn paged_reads_equal_contiguous_bit_for_bit() {
    let mut rng = Rng::new(11);
    let (n_head, n_kv_head, hd, bs) = (4, 2, 32, 4);
    let stride = n_kv_head * hd;
    for (n_q, kv_len, window) in [(1, 37, 0), (3, 21, 0), (70, 70, 0), (5, 29, 8)] {
        let p = AttentionParams {
            n_head,
            n_kv_head,
            head_dim: hd,
            scale: 0.2,
            softcap: 0.0,
            window,
        };
        let kc: Vec<f32> = (0..kv_len * stride).map(|_| rng.f32()).collect();
        let vc: Vec<f32> = (0..kv_len * stride).map(|_| rng.f32()).collect();
        let n_blocks = kv_len.div_ceil(bs);
        // Block b of the sequence lives in physical block 2 * (n_blocks - 1 - b) + 1.
        let table: Vec<u32> = (0..n_blocks)
            .map(|b| (2 * (n_blocks - 1 - b) + 1) as u32)
            .collect();
        let phys_rows = 2 * n_blocks * bs;
        let mut kp = vec![9.0f32; phys_rows * stride];
        let mut vp = vec![9.0f32; phys_rows * stride];
        let rows = KvRows::paged(&table, bs).unwrap();
        for j in 0..kv_len {
            let (src, dst) = (j * stride, rows.row(j) * stride);
            kp[dst..dst + stride].copy_from_slice(&kc[src..src + stride]);
            vp[dst..dst + stride].copy_from_slice(&vc[src..src + stride]);
        }
        let q: Vec<f32> = (0..n_q * n_head * hd).map(|_| rng.f32()).collect();
        let positions: Vec<i32> = (kv_len - n_q..kv_len).map(|x| x as i32).collect();
        let h = |x: &[f32]| x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>();
        let (kch, vch, kph, vph) = (h(&kc), h(&vc), h(&kp), h(&vp));
        for f16_cache in [false, true] {
            let (a, b, c, d) = if f16_cache {
                (
                    KvSlice::F16(&kch),
                    KvSlice::F16(&vch),
                    KvSlice::F16(&kph),
                    KvSlice::F16(&vph),
                )
            } else {
                (
                    KvSlice::F32(&kc),
                    KvSlice::F32(&vc),
                    KvSlice::F32(&kp),
                    KvSlice::F32(&vp),
                )
            };
            let mut want = vec![0f32; q.len()];
            let mut got = vec![1f32; q.len()];
            attention(&q, &positions, a, b, kv_len, &p, &mut want).unwrap();
            attention_paged(&q, &positions, c, d, kv_len, rows, &p, &mut got).unwrap();
            assert_eq!(want, got, "n_q {n_q} kv_len {kv_len} f16 {f16_cache}");
        }
        // A table that does not cover kv_len, or names a block outside the cache, is refused.
        let short = KvRows::paged(&table[..n_blocks - 1], bs).unwrap();
        let mut out = vec![0f32; q.len()];
        let (k, v) = (KvSlice::F32(&kp), KvSlice::F32(&vp));
        assert!(attention_paged(&q, &positions, k, v, kv_len, short, &p, &mut out).is_err());
        let far = vec![1000u32; n_blocks];
        let far = KvRows::paged(&far, bs).unwrap();
        assert!(attention_paged(&q, &positions, k, v, kv_len, far, &p, &mut out).is_err());
    }
    assert!(KvRows::paged(&[0], 3).is_err());
}

/// q8_0 and q4_0 caches are read block by block, and give what attention over their
/// dequantized values gives (to f32 rounding), through a paged table too.
#[test]
fn quantized_caches_match_their_dequantized_values() {
    use kestrel_gguf::quant::{q4_0, q8_0};
    let mut rng = Rng::new(5);
    let (n_head, n_kv_head, hd, kv_len, n_q) = (4, 2, 64, 19, 3);
    let stride = n_kv_head * hd;
    let p = AttentionParams {
        n_head,
        n_kv_head,
        head_dim: hd,
        scale: 0.125,
        softcap: 0.0,
        window: 0,
    };
    let kc: Vec<f32> = (0..kv_len * stride).map(|_| rng.f32()).collect();
    let vc: Vec<f32> = (0..kv_len * stride).map(|_| rng.f32()).collect();
    let q: Vec<f32> = (0..n_q * n_head * hd).map(|_| rng.f32()).collect();
    let positions: Vec<i32> = (kv_len - n_q..kv_len).map(|x| x as i32).collect();
    let table: Vec<u32> = (0..kv_len.div_ceil(4) as u32).rev().collect();
    for rows in [KvRows::CONTIGUOUS, KvRows::paged(&table, 4).unwrap()] {
        let phys = |x: &[f32]| {
            let n = table.len() * 4;
            let mut out = vec![0f32; n.max(kv_len) * stride];
            for j in 0..kv_len {
                let r = rows.row(j);
                out[r * stride..(r + 1) * stride].copy_from_slice(&x[j * stride..(j + 1) * stride]);
            }
            out
        };
        let (kp, vp) = (phys(&kc), phys(&vc));
        let mut k8 = vec![
            BlockQ8_0 {
                d: f16::ZERO,
                qs: [0; 32]
            };
            kp.len() / 32
        ];
        let mut v8 = k8.clone();
        q8_0::quantize_row(&kp, &mut k8).unwrap();
        q8_0::quantize_row(&vp, &mut v8).unwrap();
        let mut k4 = vec![
            BlockQ4_0 {
                d: f16::ZERO,
                qs: [0; 16]
            };
            kp.len() / 32
        ];
        let mut v4 = k4.clone();
        q4_0::quantize_row(&kp, &mut k4).unwrap();
        q4_0::quantize_row(&vp, &mut v4).unwrap();
        let deq8 = |b: &[BlockQ8_0]| {
            let mut o = vec![0f32; b.len() * 32];
            q8_0::dequantize_blocks(b, &mut o).unwrap();
            o
        };
        let deq4 = |b: &[BlockQ4_0]| {
            let mut o = vec![0f32; b.len() * 32];
            q4_0::dequantize_blocks(b, &mut o).unwrap();
            o
        };
        for (k, v, dk, dv) in [
            (KvSlice::Q8_0(&k8), KvSlice::Q8_0(&v8), deq8(&k8), deq8(&v8)),
            (KvSlice::Q4_0(&k4), KvSlice::Q4_0(&v4), deq4(&k4), deq4(&v4)),
        ] {
            let mut want = vec![0f32; q.len()];
            let mut got = vec![0f32; q.len()];
            let (dk, dv) = (KvSlice::F32(&dk), KvSlice::F32(&dv));
            let wide = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
            attention_paged(&q, &positions, dk, dv, kv_len, rows, &p, &mut want).unwrap();
            attention_paged(&q, &positions, k, v, kv_len, rows, &p, &mut got).unwrap();
            assert!(
                max_abs_diff(&got, &wide(&want)) < 1e-5,
                "{}",
                max_abs_diff(&got, &wide(&want))
            );
        }
    }
    // Mixed or misaligned quantized caches are refused.
    let k8 = vec![
        BlockQ8_0 {
            d: f16::ONE,
            qs: [1; 32]
        };
        8
    ];
    let k4 = vec![
        BlockQ4_0 {
            d: f16::ONE,
            qs: [0x88; 16]
        };
        8
    ];
    let mut out = vec![0f32; n_head * hd];
    let one = &q[..n_head * hd];
    assert!(attention(
        one,
        &[0],
        KvSlice::Q8_0(&k8),
        KvSlice::Q4_0(&k4),
        1,
        &p,
        &mut out
    )
    .is_err());
}
