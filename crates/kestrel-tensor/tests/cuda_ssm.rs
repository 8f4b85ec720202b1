//! State-space and head-layout kernels against the CPU engine.
//!
//! - `ssm_conv` and `ssm_scan` against `cpu::ssm_conv` and `cpu::ssm_scan` on the same state:
//!   a sequence's 9 tokens in one step and in steps of 4, 1 and 4 (the state carried between
//!   them), Mamba's shape (a head per channel, A per state index, 16 states) and Mamba-2's
//!   (heads of 64 channels, groups, A per head, 128 states); outputs and final states within
//!   1e-5 (relative to values of at least 1): only the float orders differ (the scan's sum over
//!   the state is a warp tree on the GPU). Zeroing a state.
//! - `head_slice` and `head_concat` against their definitions, exactly (copies), including an
//!   input of one head repeated for every head; the shapes they refuse. `head_matmul` (a matrix
//!   a head) against float64.
//!
//! Without a driver or GPU the tests print why they skipped and pass, unless
//! `KESTREL_REQUIRE_GPU` is set.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::random_in as random;

use kestrel_tensor::cpu::{self, SsmScanParams};
use kestrel_tensor::cuda::{CudaDevice, DeviceTensor};
use kestrel_tensor::{Shape, Tensor};

fn device() -> Option<CudaDevice> {
    cuda_common::device("state-space")
}

fn up(dev: &CudaDevice, v: &[f32]) -> DeviceTensor {
    dev.upload(&Tensor::from_f32(Shape::vector(v.len()), v).unwrap())
        .unwrap()
}

fn up_m(dev: &CudaDevice, rows: usize, v: &[f32]) -> DeviceTensor {
    dev.upload(&Tensor::from_f32(Shape::matrix(rows, v.len() / rows).unwrap(), v).unwrap())
        .unwrap()
}

fn close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}[{i}]: {g} against {w}"
        );
    }
}

#[test]
fn ssm_conv_matches_the_cpu() {
    let Some(dev) = device() else { return };
    let (n_t, ch) = (9usize, 300usize);
    for d_conv in [4usize, 1] {
        let hist = d_conv - 1;
        let x = random(n_t * ch, 1, -1.0, 1.0);
        let w = random(ch * d_conv, 2, -1.0, 1.0);
        let b = random(ch, 3, -1.0, 1.0);
        let s0 = random(ch * hist, 4, -1.0, 1.0);
        let mut want_state = s0.clone();
        let mut want = vec![0f32; n_t * ch];
        cpu::ssm_conv(
            &x,
            n_t,
            ch,
            d_conv,
            &w,
            Some(&b),
            &mut want_state,
            &mut want,
        )
        .unwrap();
        for steps in [&[9usize][..], &[4, 1, 4]] {
            let (wd, bd) = (up(&dev, &w), up(&dev, &b));
            let mut state = up(&dev, &s0);
            let mut got = Vec::new();
            let mut t0 = 0;
            for &n in steps {
                let xd = up_m(&dev, n, &x[t0 * ch..(t0 + n) * ch]);
                let mut out = up_m(&dev, n, &vec![f32::NAN; n * ch]);
                dev.ssm_conv(&xd, n, d_conv, (&wd, Some(&bd)), &mut state, &mut out)
                    .unwrap();
                got.extend(dev.download_f32(&out).unwrap());
                t0 += n;
            }
            close(&format!("conv {d_conv} {steps:?}"), &got, &want);
            close(
                "conv state",
                &dev.download_f32(&state).unwrap(),
                &want_state,
            );
        }
    }
}

#[test]
fn ssm_scan_matches_the_cpu() {
    let Some(dev) = device() else { return };
    let n_t = 9usize;
    for p in [
        SsmScanParams {
            d_state: 16,
            n_head: 96,
            head_dim: 1,
            n_group: 1,
            a_per_state: true,
        },
        SsmScanParams {
            d_state: 128,
            n_head: 8,
            head_dim: 64,
            n_group: 2,
            a_per_state: false,
        },
    ] {
        let (ch, nh, bw) = (p.channels(), p.n_head, 2 * p.n_group * p.d_state);
        let x = random(n_t * ch, 5, -1.0, 1.0);
        let dt = random(n_t * nh, 6, -3.0, 2.0);
        let bc = random(n_t * bw, 7, -1.0, 1.0);
        let d = random(nh, 8, -1.0, 1.0);
        let a = random(
            if p.a_per_state { nh * p.d_state } else { nh },
            9,
            -2.0,
            -0.1,
        );
        let s0 = random(p.state_len(), 10, -1.0, 1.0);
        let mut want_state = s0.clone();
        let mut want = vec![0f32; n_t * ch];
        cpu::ssm_scan(&p, &mut want_state, &x, &dt, &a, &bc, &d, n_t, &mut want).unwrap();
        for steps in [&[9usize][..], &[4, 1, 4]] {
            let (ad, dd) = (up(&dev, &a), up(&dev, &d));
            let mut state = up(&dev, &s0);
            let mut got = Vec::new();
            let mut t0 = 0;
            for &n in steps {
                let xd = up_m(&dev, n, &x[t0 * ch..(t0 + n) * ch]);
                let dtd = up_m(&dev, n, &dt[t0 * nh..(t0 + n) * nh]);
                let bcd = up_m(&dev, n, &bc[t0 * bw..(t0 + n) * bw]);
                let mut y = up_m(&dev, n, &vec![f32::NAN; n * ch]);
                dev.ssm_scan(&p, &mut state, (&xd, &dtd, &bcd), (&ad, &dd), n, &mut y)
                    .unwrap();
                got.extend(dev.download_f32(&y).unwrap());
                t0 += n;
            }
            close(&format!("scan {p:?} {steps:?}"), &got, &want);
            close(
                "scan state",
                &dev.download_f32(&state).unwrap(),
                &want_state,
            );
        }
        // A state that starts over.
        let mut state = up(&dev, &s0);
        dev.zero(&mut state).unwrap();
        assert!(dev.download_f32(&state).unwrap().iter().all(|&v| v == 0.0));
        // Refused: a state too large for the kernel.
        let big = SsmScanParams { d_state: 512, ..p };
        let mut s = up(&dev, &vec![0.0; big.state_len()]);
        let mut y = up_m(&dev, 1, &vec![0.0; ch]);
        let one = |v: &[f32]| up_m(&dev, 1, v);
        assert!(dev
            .ssm_scan(
                &big,
                &mut s,
                (
                    &one(&x[..ch]),
                    &one(&dt[..nh]),
                    &one(&vec![0.0; 2 * p.n_group * 512])
                ),
                (&ad_of(&dev, &big), &up(&dev, &d)),
                1,
                &mut y
            )
            .is_err());
    }
}

fn ad_of(dev: &CudaDevice, p: &SsmScanParams) -> DeviceTensor {
    up(
        dev,
        &vec![
            -1.0;
            if p.a_per_state {
                p.n_head * p.d_state
            } else {
                p.n_head
            }
        ],
    )
}

#[test]
fn head_slices_and_concats_are_copies() {
    let Some(dev) = device() else { return };
    let (rows, n_head, head_in) = (3usize, 4usize, 10usize);
    let x = random(rows * n_head * head_in, 11, -1.0, 1.0);
    let (offset, w) = (6usize, 3usize);
    let xd = up_m(&dev, rows, &x);
    let mut out = up_m(&dev, rows, &vec![0.0; rows * n_head * w]);
    dev.head_slice(&xd, (n_head, head_in, offset), &mut out)
        .unwrap();
    let got = dev.download_f32(&out).unwrap();
    for r in 0..rows {
        for h in 0..n_head {
            for j in 0..w {
                assert_eq!(
                    got[(r * n_head + h) * w + j],
                    x[r * n_head * head_in + h * head_in + offset + j]
                );
            }
        }
    }
    // A part past the head: refused.
    assert!(dev.head_slice(&xd, (n_head, head_in, 8), &mut out).is_err());

    // Concat: `a` of n_head heads of 5, `b` of one head of 2 (repeated).
    let (wa, wb) = (5usize, 2usize);
    let a = random(rows * n_head * wa, 12, -1.0, 1.0);
    let b = random(rows * wb, 13, -1.0, 1.0);
    let mut cat = up_m(&dev, rows, &vec![0.0; rows * n_head * (wa + wb)]);
    dev.head_concat(
        (&up_m(&dev, rows, &a), &up_m(&dev, rows, &b)),
        n_head,
        [n_head, 1],
        &mut cat,
    )
    .unwrap();
    let got = dev.download_f32(&cat).unwrap();
    for r in 0..rows {
        for h in 0..n_head {
            let o = &got[(r * n_head + h) * (wa + wb)..][..wa + wb];
            assert_eq!(o[..wa], a[(r * n_head + h) * wa..][..wa]);
            assert_eq!(o[wa..], b[r * wb..][..wb]);
        }
    }
    // Heads that are neither n_head nor 1: refused.
    assert!(dev
        .head_concat(
            (&up_m(&dev, rows, &a), &up_m(&dev, rows, &b)),
            n_head,
            [n_head, 2],
            &mut cat
        )
        .is_err());
}

/// `head_matmul` (DeepSeek's absorbed per-head matrices) against float64: 3 rows of 4 heads,
/// matrices of 6 × 40, within 1e-5 of values of at most ~40.
#[test]
fn head_matmul_matches_float64() {
    let Some(dev) = device() else { return };
    let (rows, n_head, k, m) = (3usize, 4usize, 40usize, 6usize);
    let w = random(n_head * m * k, 31, -1.0, 1.0);
    let x = random(rows * n_head * k, 32, -1.0, 1.0);
    let mut out = up_m(&dev, rows, &vec![0.0; rows * n_head * m]);
    dev.head_matmul(&up_m(&dev, rows, &x), &up(&dev, &w), n_head, &mut out)
        .unwrap();
    let got = dev.download_f32(&out).unwrap();
    for r in 0..rows {
        for h in 0..n_head {
            for i in 0..m {
                let want: f64 = (0..k)
                    .map(|j| w[(h * m + i) * k + j] as f64 * x[(r * n_head + h) * k + j] as f64)
                    .sum();
                let g = got[(r * n_head + h) * m + i] as f64;
                assert!(
                    (g - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "{r} {h} {i}"
                );
            }
        }
    }
    // A weight of another size: refused.
    assert!(dev
        .head_matmul(&up_m(&dev, rows, &x), &up(&dev, &w[1..]), n_head, &mut out)
        .is_err());
}
