//! Elementwise kernels against the CPU engine's formulas.
//!
//! - The attention temperature (Llama 4, Ministral 3): each token row times
//!   `ln(floor((pos + offset) / floor_scale) + 1) · scale + 1` (division in f32, the rest in
//!   f64): equal within 1 f32 ulp of the factor (CUDA's and the host's double `log` may differ
//!   in their last bit), positions before `floor_scale` exactly 1.
//! - The one-input ops of other architectures (`unary_op`): squared ReLU and clamp exactly (NaN
//!   kept), SiLU, GELU (tanh form) and the sigmoid within 4 f32 ulps of float64 (plus an ulp
//!   of 1 times |x|, what GELU's `1 + tanh` loses for negative x); a row times its own
//!   scalar, a column slice and a product with one value, exactly; the shapes they refuse.
//! - The mixture-of-experts pieces: gpt-oss's clamped SwiGLU (4 ulps), weighted row scatter
//!   and in-order slot sums (exact).
//! - The copy bandwidth `kestrel bench` holds decode against: copies of the size asked, a
//!   finite positive rate, and a refusal below 1 MiB.
//!
//! Without a driver or GPU the tests print why they skipped and pass, unless
//! `KESTREL_REQUIRE_GPU` is set.
#![cfg(feature = "cuda")]

mod cuda_common;

use kestrel_tensor::cuda::{CudaDevice, Unary};
use kestrel_tensor::{DType, Shape, Tensor};

fn factor(pos: i32, floor_scale: u32, scale: f32, offset: f32) -> f32 {
    let steps = ((pos as f32 + offset) / floor_scale as f32).floor();
    ((f64::from(steps) + 1.0).ln() * f64::from(scale) + 1.0) as f32
}

fn device() -> Option<CudaDevice> {
    cuda_common::device("elementwise")
}

#[test]
fn attention_temperature_matches_the_cpu_formula() {
    let Some(dev) = device() else { return };
    let positions: Vec<i32> = vec![0, 1, 7, 8, 9, 63, 64, 1000, 8191, 65_536, 1_000_000];
    let width = 4 * 128 + 3;
    let (floor_scale, scale, offset) = (8u32, 0.1f32, 0.0f32);
    let shape = Shape::matrix(positions.len(), width).unwrap();
    let host: Vec<f32> = (0..shape.elem_count())
        .map(|i| ((i * 7919) % 2003) as f32 / 1001.0 - 1.0)
        .collect();
    let src = dev
        .upload(&Tensor::from_f32(shape, &host).unwrap())
        .unwrap();
    let mut ids = dev.new_ids(positions.len()).unwrap();
    dev.set_ids(&mut ids, &positions).unwrap();
    let mut out = dev.zeros(DType::F32, shape).unwrap();
    dev.attn_temperature_ids_from(&src, &mut out, &ids, width, floor_scale, scale, offset)
        .unwrap();
    let got = dev.download_f32(&out).unwrap();
    for (t, &pos) in positions.iter().enumerate() {
        let f = factor(pos, floor_scale, scale, offset);
        for j in 0..width {
            let (x, g) = (host[t * width + j], got[t * width + j]);
            let want = x * f;
            if pos < floor_scale as i32 {
                assert_eq!(g, x, "pos {pos}: factor 1 exactly");
            }
            let ulp = f32::EPSILON * want.abs().max(f32::MIN_POSITIVE);
            assert!(
                (g - want).abs() <= 2.0 * ulp,
                "pos {pos} col {j}: {g} vs {want}"
            );
        }
    }
    // A zero floor scale is refused.
    assert!(dev
        .attn_temperature_ids_from(&src, &mut out, &ids, width, 0, scale, offset)
        .is_err());
}

/// Values over the ranges the ops see, with the edge cases (zeros, large magnitudes, NaN).
fn inputs() -> Vec<f32> {
    let mut v: Vec<f32> = (0..4000).map(|i| (i as f32 - 2000.0) / 150.0).collect();
    v.extend([
        0.0,
        -0.0,
        1e-8,
        -1e-8,
        30.0,
        -30.0,
        88.0,
        -88.0,
        1e4,
        -1e4,
        f32::NAN,
    ]);
    v
}

#[test]
fn unary_ops_match_their_formulas() {
    let Some(dev) = device() else { return };
    let host = inputs();
    let shape = Shape::matrix(1, host.len()).unwrap();
    let src = dev
        .upload(&Tensor::from_f32(shape, &host).unwrap())
        .unwrap();
    let mut out = dev.zeros(DType::F32, shape).unwrap();
    type Reference = fn(f64) -> f64;
    let close: [(Unary, Reference); 3] = [
        (Unary::Silu, |x| x / (1.0 + (-x).exp())),
        (Unary::Gelu, |x| {
            0.5 * x
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * x * (1.0 + 0.044715 * x * x)).tanh())
        }),
        (Unary::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
    ];
    for (op, f) in close {
        dev.unary_op(op, &src, &mut out).unwrap();
        let got = dev.download_f32(&out).unwrap();
        for (&x, &g) in host.iter().zip(&got) {
            if x.is_nan() {
                assert!(g.is_nan(), "{op:?}: NaN in, NaN out");
                continue;
            }
            let want = f(f64::from(x));
            let err = (f64::from(g) - want).abs();
            // GELU's `1 + tanh` loses bits for negative x: an ulp of 1, times |x| / 2.
            let eps = f64::from(f32::EPSILON);
            assert!(
                err <= 4.0 * eps * want.abs() + eps * f64::from(x).abs() + 1e-30,
                "{op:?}({x}) = {g}, want {want}"
            );
        }
    }
    for op in [Unary::ReluSqr, Unary::Clamp(7.5)] {
        dev.unary_op(op, &src, &mut out).unwrap();
        let got = dev.download_f32(&out).unwrap();
        for (&x, &g) in host.iter().zip(&got) {
            let want = match op {
                Unary::ReluSqr => {
                    let r = x.max(0.0);
                    r * r
                }
                _ => x.clamp(-7.5, 7.5),
            };
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{op:?}({x}) = {g}, want {want}"
            );
        }
    }
    // Shapes must agree.
    let mut short = dev
        .zeros(DType::F32, Shape::matrix(1, 10).unwrap())
        .unwrap();
    assert!(dev.unary_op(Unary::Silu, &src, &mut short).is_err());
}

#[test]
fn row_scalars_slices_and_one_value_products_are_exact() {
    let Some(dev) = device() else { return };
    let (rows, width) = (5, 96);
    let host: Vec<f32> = (0..rows * width)
        .map(|i| (i as f32 * 0.37).sin() * 3.0)
        .collect();
    let up = |r: usize, w: usize, v: &[f32]| {
        dev.upload(&Tensor::from_f32(Shape::matrix(r, w).unwrap(), v).unwrap())
            .unwrap()
    };
    let a = up(rows, width, &host);
    let scalars: Vec<f32> = (0..rows).map(|r| 0.25 + r as f32 * 1.5).collect();
    let s = up(rows, 1, &scalars);
    let mut out = dev
        .zeros(DType::F32, Shape::matrix(rows, width).unwrap())
        .unwrap();
    dev.mul_row_scalar(&a, &s, &mut out).unwrap();
    let got = dev.download_f32(&out).unwrap();
    for (i, (&g, &x)) in got.iter().zip(&host).enumerate() {
        assert_eq!(
            g.to_bits(),
            (x * scalars[i / width]).to_bits(),
            "row scalar {i}"
        );
    }
    // One value for the whole tensor (a per-tensor scale).
    let one = up(1, 1, &[-0.75]);
    dev.mul(&a, &one, &mut out).unwrap();
    let got = dev.download_f32(&out).unwrap();
    for (&g, &x) in got.iter().zip(&host) {
        assert_eq!(g.to_bits(), (x * -0.75).to_bits());
    }
    // Columns 40..72 of each row.
    let mut part = dev
        .zeros(DType::F32, Shape::matrix(rows, 32).unwrap())
        .unwrap();
    dev.slice_cols(&a, 40, &mut part).unwrap();
    let got = dev.download_f32(&part).unwrap();
    for r in 0..rows {
        assert_eq!(
            got[r * 32..(r + 1) * 32],
            host[r * width + 40..r * width + 72]
        );
    }
    // Refused: a slice past the row, other row counts, scalars not one a row.
    assert!(dev.slice_cols(&a, 70, &mut part).is_err());
    let mut fewer = dev
        .zeros(DType::F32, Shape::matrix(rows - 1, 32).unwrap())
        .unwrap();
    assert!(dev.slice_cols(&a, 0, &mut fewer).is_err());
    let two = up(1, 2, &[1.0, 2.0]);
    assert!(dev.mul_row_scalar(&a, &two, &mut out).is_err());
}

/// The mixture-of-experts pieces: gpt-oss's clamped SwiGLU against its formula (as the CPU
/// computes it, within 4 ulps), rows scattered weighted into their slots and a token's slots
/// summed in order, exactly; the writes they refuse.
#[test]
fn moe_pieces_match_the_cpu() {
    let Some(dev) = device() else { return };
    let up = |r: usize, w: usize, v: &[f32]| {
        dev.upload(&Tensor::from_f32(Shape::matrix(r, w).unwrap(), v).unwrap())
            .unwrap()
    };
    let n = 4000;
    let g: Vec<f32> = (0..n).map(|i| (i as f32 - 2000.0) / 180.0).collect();
    let u: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 4000) as f32 / 200.0 - 10.0)
        .collect();
    let (gd, ud) = (up(1, n, &g), up(1, n, &u));
    let mut out = dev.zeros(DType::F32, Shape::matrix(1, n).unwrap()).unwrap();
    dev.swiglu_oai(&gd, &ud, &mut out).unwrap();
    let got = dev.download_f32(&out).unwrap();
    for i in 0..n {
        let x = g[i].min(7.0);
        let y = u[i].clamp(-7.0, 7.0);
        let want = x / (1.0 + (1.702 * -x).exp()) * (y + 1.0);
        assert!(
            (got[i] - want).abs() <= 4.0 * f32::EPSILON * want.abs().max(1e-6),
            "swiglu_oai({}, {}) = {}, want {want}",
            g[i],
            u[i],
            got[i]
        );
    }
    // Three tokens, two slots each: an expert's rows 0 and 1 go to slots 5 and 0, weighted.
    let (rows, k, width) = (3, 2, 8);
    let src: Vec<f32> = (0..2 * width).map(|i| i as f32 * 0.5 - 3.0).collect();
    let s = up(2, width, &src);
    let mut ids = dev.new_ids(2).unwrap();
    dev.set_ids(&mut ids, &[5, 0]).unwrap();
    let mut w = dev.zeros(DType::F32, Shape::matrix(2, 1).unwrap()).unwrap();
    dev.write_f32(&mut w, &[0.25, -1.5]).unwrap();
    let mut outs = up(rows * k, width, &vec![1.0; rows * k * width]);
    dev.scatter_rows_scaled(&s, &ids, &w, &mut outs).unwrap();
    let o = dev.download_f32(&outs).unwrap();
    for j in 0..width {
        assert_eq!(o[5 * width + j].to_bits(), (src[j] * 0.25).to_bits());
        assert_eq!(o[j].to_bits(), (src[width + j] * -1.5).to_bits());
        assert_eq!(o[width + j], 1.0, "untouched slot");
    }
    let mut sum = dev
        .zeros(DType::F32, Shape::matrix(rows, width).unwrap())
        .unwrap();
    dev.sum_slots(&outs, k, &mut sum).unwrap();
    let got = dev.download_f32(&sum).unwrap();
    for r in 0..rows {
        for j in 0..width {
            let want = o[(r * k) * width + j] + o[(r * k + 1) * width + j];
            assert_eq!(got[r * width + j].to_bits(), want.to_bits());
        }
    }
    // Refused: a row outside the destination, more values than a buffer holds.
    dev.set_ids(&mut ids, &[6, 0]).unwrap();
    assert!(dev.scatter_rows_scaled(&s, &ids, &w, &mut outs).is_err());
    assert!(dev.write_f32(&mut w, &[1.0, 2.0, 3.0]).is_err());
    assert!(dev.sum_slots(&outs, 3, &mut sum).is_err());
}

#[test]
fn copy_bandwidth_times_copies_of_the_size_asked() {
    let Some(dev) = device() else { return };
    let bw = dev.copy_bandwidth(4 << 20).unwrap();
    assert_eq!(bw.bytes, 4 << 20);
    assert!(bw.bytes_per_s.is_finite() && bw.bytes_per_s > 0.0, "{bw:?}");
    let e = dev.copy_bandwidth(1000).unwrap_err().to_string();
    assert!(e.contains("1 MiB"), "{e}");
}
