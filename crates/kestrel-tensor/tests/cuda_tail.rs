//! The one-row matvecs whose last CTA runs the row op after them (`kernels/mmvq_tail.cu`:
//! the RMS norm after the output and down projections, the gated activation after gate/up)
//! against the separate launches they replace, bit for bit (`--features cuda`; skips without a
//! GPU unless `KESTREL_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{f32_tensor, spiky as random, WEIGHT_TYPES as ALL};
use kestrel_tensor::cuda::{CudaDevice, DeviceTensor};
use kestrel_tensor::{DType, Shape, Tensor};

fn device() -> Option<CudaDevice> {
    cuda_common::device("matvec tail")
}

fn weight(dtype: DType, rows: usize, k: usize, seed: u64) -> Tensor {
    cuda_common::weight_of(dtype, rows, k, &random(rows * k, seed))
}

/// A one-row matvec with the RMS norm after it in its launch (`matmul_norm_reusing`: llama's
/// norm after the epilogue's residual add, Gemma's sandwich) gives the bits of the separate
/// launches: every buffer it writes, and the Q8_1 row it leaves (a matmul reusing its ticket
/// gives the product of one that quantizes the normed row itself). Rows of 640 (Gemma 3 270M),
/// 576 (SmolLM2: 18 warps of norm threads over the CTA's 4) and 2048; plain, prefetching, and
/// prefetching on one CTA an SM (each CTA several row groups before it counts itself).
#[test]
fn a_norm_in_the_matvec_launch_gives_the_separate_launches_bits() {
    use kestrel_tensor::cuda::{NormAfter, Sandwich};
    let Some(dev) = device() else { return };
    let k = 512;
    let x = dev.upload(&f32_tensor(1, k, 41)).unwrap();
    let zeros = |m: usize| dev.zeros_f32(Shape::matrix(1, m).unwrap()).unwrap();
    let get = |t: &DeviceTensor| dev.download_f32(t).unwrap();
    for (i, dtype) in ALL.into_iter().enumerate() {
        for m in [640, 576, 2048] {
            if !dev.matvec_norm_applies(dtype, 1, m) {
                assert!(!matches!(dtype, DType::Q4_0 | DType::Q4K | DType::Q8_0));
                continue;
            }
            let seed = 100 * i as u64 + m as u64;
            let w = dev.upload(&weight(dtype, m, k, seed)).unwrap();
            let next = dev.upload(&weight(DType::Q8_0, 64, m, seed + 1)).unwrap();
            let res = dev.upload(&f32_tensor(1, m, seed + 2)).unwrap();
            let (w1, w2) = (
                dev.upload(&f32_tensor(1, m, seed + 3)).unwrap(),
                dev.upload(&f32_tensor(1, m, seed + 4)).unwrap(),
            );
            // Separate launches: product (+ residual), then the norm(s), then the next matvec.
            let (mut p, mut out, mut nxt) = (zeros(m), zeros(m), zeros(64));
            dev.matmul_add_reusing(&x, &w, &res, &mut p, None).unwrap();
            dev.rms_norm_fused(&p, None, Some(&w2), 1e-6, &mut out, false)
                .unwrap();
            dev.matmul(&out, &next, &mut nxt).unwrap();
            let plain = [get(&p), get(&out), get(&nxt)];
            let (mut o, mut normed, mut sum) = (zeros(m), zeros(m), zeros(m));
            dev.matmul(&x, &w, &mut o).unwrap();
            dev.norm_add_rms_norm(
                (&o, Some(&w1), 1e-5),
                &mut normed,
                (&res, &mut sum),
                (Some(&w2), 1e-6),
                &mut out,
                false,
            )
            .unwrap();
            dev.matmul(&out, &next, &mut nxt).unwrap();
            let sandwich = [get(&o), get(&normed), get(&sum), get(&out), get(&nxt)];
            for (prefetch, ctas) in [(false, 0), (true, 0), (true, 1)] {
                dev.set_mmvq_prefetch(prefetch);
                dev.set_mmvq_ctas_per_sm(ctas);
                let case = format!("{dtype:?}, {m} rows, prefetch {prefetch}, {ctas} CTAs an SM");
                for quantize in [true, false] {
                    let (mut p2, mut out2, mut nxt2) = (zeros(m), zeros(m), zeros(64));
                    let norm = NormAfter {
                        weight: Some(&w2),
                        eps: 1e-6,
                        out: &mut out2,
                        quantize,
                        sandwich: None,
                    };
                    let t = dev
                        .matmul_norm_reusing(&x, &w, &mut p2, Some(&res), norm, None)
                        .unwrap();
                    assert_eq!(t.is_some(), quantize, "{case}: a ticket when quantizing");
                    let t2 = dev.matmul_reusing(&out2, &next, &mut nxt2, t).unwrap();
                    assert_eq!(t2.is_some() && t2 == t, quantize, "{case}: Q8_1 reused");
                    let got = [get(&p2), get(&out2), get(&nxt2)];
                    assert!(
                        got == plain,
                        "{case}: plain form differs from the separate launches"
                    );
                    let (mut o2, mut normed2, mut sum2) = (zeros(m), zeros(m), zeros(m));
                    let norm = NormAfter {
                        weight: Some(&w2),
                        eps: 1e-6,
                        out: &mut out2,
                        quantize,
                        sandwich: Some(Sandwich {
                            weight: Some(&w1),
                            eps: 1e-5,
                            normed: &mut normed2,
                            residual: &res,
                            sum: &mut sum2,
                        }),
                    };
                    let t = dev
                        .matmul_norm_reusing(&x, &w, &mut o2, None, norm, None)
                        .unwrap();
                    dev.matmul_reusing(&out2, &next, &mut nxt2, t).unwrap();
                    let got = [get(&o2), get(&normed2), get(&sum2), get(&out2), get(&nxt2)];
                    assert!(
                        got == sandwich,
                        "{case}: sandwich differs from the separate launches"
                    );
                }
            }
        }
    }
    dev.set_mmvq_prefetch(false);
    dev.set_mmvq_ctas_per_sm(0);
    // Two activation rows, or a row longer than the shared memory the last CTA keeps it in:
    // refused, saying so.
    assert!(!dev.matvec_norm_applies(DType::Q4_0, 2, 640));
    assert!(!dev.matvec_norm_applies(DType::Q4_0, 1, 4096));
}

/// The gate/up matvec with the gated activation in its launch (`matmul_gate_up_glu_reusing`)
/// gives the bits of the multi matvec and the GLU launch: gate, up, the activation and the Q8_1
/// row it leaves (a matmul reusing its ticket against one quantizing the activation itself).
/// SwiGLU and GeGLU, widths of 1536 (SmolLM2), 2048 (Gemma 3 270M) and 96; plain, prefetching,
/// and prefetching on one CTA an SM.
#[test]
fn a_glu_in_the_gate_up_launch_gives_the_separate_launches_bits() {
    use kestrel_tensor::cuda::Glu;
    let Some(dev) = device() else { return };
    let k = 512;
    let x = dev.upload(&f32_tensor(1, k, 51)).unwrap();
    let zeros = |m: usize| dev.zeros_f32(Shape::matrix(1, m).unwrap()).unwrap();
    let get = |t: &DeviceTensor| dev.download_f32(t).unwrap();
    for (i, dtype) in ALL.into_iter().enumerate() {
        for (width, glu) in [(1536, Glu::SwiGlu), (2048, Glu::GeGlu), (96, Glu::GeGlu)] {
            if !dev.matvec_gate_up_glu_applies(dtype, 1, width) {
                assert!(!matches!(dtype, DType::Q4_0 | DType::Q4K | DType::Q8_0));
                continue;
            }
            let seed = 100 * i as u64 + width as u64;
            let (wg, wu) = (
                dev.upload(&weight(dtype, width, k, seed)).unwrap(),
                dev.upload(&weight(dtype, width, k, seed + 1)).unwrap(),
            );
            let down = dev
                .upload(&weight(DType::Q8_0, 64, width, seed + 2))
                .unwrap();
            let (mut g, mut u, mut act, mut y) =
                (zeros(width), zeros(width), zeros(width), zeros(64));
            dev.matmul_multi_reusing(&x, (&wg, &mut g), (&wu, &mut u), None, None)
                .unwrap();
            dev.glu_fused(glu, &g, &u, &mut act, false).unwrap();
            dev.matmul(&act, &down, &mut y).unwrap();
            let want = [get(&g), get(&u), get(&act), get(&y)];
            for (prefetch, ctas) in [(false, 0), (true, 0), (true, 1)] {
                dev.set_mmvq_prefetch(prefetch);
                dev.set_mmvq_ctas_per_sm(ctas);
                let case =
                    format!("{dtype:?} {glu:?} {width}, prefetch {prefetch}, {ctas} CTAs an SM");
                for quantize in [true, false] {
                    let (mut g2, mut u2, mut act2, mut y2) =
                        (zeros(width), zeros(width), zeros(width), zeros(64));
                    let t = dev
                        .matmul_gate_up_glu_reusing(
                            &x,
                            (&wg, &mut g2),
                            (&wu, &mut u2),
                            glu,
                            &mut act2,
                            quantize,
                            None,
                        )
                        .unwrap();
                    assert_eq!(t.is_some(), quantize, "{case}: a ticket when quantizing");
                    let t2 = dev.matmul_reusing(&act2, &down, &mut y2, t).unwrap();
                    assert_eq!(t2.is_some() && t2 == t, quantize, "{case}: Q8_1 reused");
                    let got = [get(&g2), get(&u2), get(&act2), get(&y2)];
                    assert!(got == want, "{case}: differs from the separate launches");
                }
            }
        }
    }
    dev.set_mmvq_prefetch(false);
    dev.set_mmvq_ctas_per_sm(0);
    assert!(!dev.matvec_gate_up_glu_applies(DType::Q4_0, 2, 2048));
    assert!(!dev.matvec_gate_up_glu_applies(DType::Q4_0, 1, 14336));
}
