//! The tensor-core matvec (`kernels/mmvq_wide.cu`, 9-64 activation rows) against the matvec of
//! one row, bit for bit (`--features cuda`): in a batched decode step of up to 64 sequences,
//! each sequence's logits must be the ones it gets decoding alone. Every quantized weight type
//! (and the float ones, which keep the float matvec up to 64 rows), real row lengths
//! (SmolLM2's 576, Gemma 3's 640, a llama-8B's 4096 and its FFN's 14336), row counts that
//! leave the last CTA part-empty, with and without the residual add of the matvec's epilogue
//! (quantized weights: the float matvec has none). The kernel's order is checked on the host too
//! (`kernels/host/mmvq_wide_check.cpp`); this is the GPU's tensor cores and its float math.
//!
//! The GPU run repeats it under `KESTREL_CUDA_WIDE_NT=4` and `KESTREL_CUDA_MMVQ_RPC=1|4`
//! (each fixes a launch setting for the process).
#![cfg(feature = "cuda")]

mod cuda_common;

use kestrel_tensor::{quant, DType, Shape, Tensor};

fn weight(dtype: DType, rows: usize, k: usize, seed: u64) -> Tensor {
    let src = cuda_common::random(rows * k, seed);
    if dtype == DType::F32 {
        return Tensor::from_f32(Shape::matrix(rows, k).unwrap(), &src).unwrap();
    }
    let mut bytes = vec![0u8; dtype.row_bytes(k).unwrap() * rows];
    quant::quantize(dtype.ggml_type(), &src, &mut bytes).unwrap();
    Tensor::from_bytes(dtype, Shape::matrix(rows, k).unwrap(), &bytes).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn each_row_of_a_wide_matmul_is_that_row_alone() {
    let Some(dev) = cuda_common::device("wide matvec") else {
        return;
    };
    for (k, m) in [(576, 200), (640, 331), (4096, 1024), (14336, 96)] {
        // Float weights take the float matvec in launches of 8 rows up to 64 (not the GEMM).
        for dtype in cuda_common::WEIGHT_TYPES {
            if k % dtype.block_size() != 0 {
                continue; // K-quant rows are whole 256-value blocks
            }
            let w = dev.upload(&weight(dtype, m, k, (k + m) as u64)).unwrap();
            // Every batch takes the first n of the same 64 rows, so each row's one-row result
            // is computed once (with and without the residual) and checked in every batch.
            const MOST: usize = 64;
            let xs = cuda_common::random(MOST * k, k as u64 + 7);
            let res = cuda_common::random_in(MOST * m, m as u64 + 9, -50.0, 50.0);
            for residual in [false, true] {
                if residual && !dtype.is_quantized() {
                    continue;
                }
                let alone: Vec<Vec<f32>> = (0..MOST)
                    .map(|row| {
                        let x1 = cuda_common::upload(&dev, 1, k, &xs[row * k..(row + 1) * k]);
                        let mut o1 = dev.zeros_f32(Shape::matrix(1, m).unwrap()).unwrap();
                        if residual {
                            let r1 = cuda_common::upload(&dev, 1, m, &res[row * m..(row + 1) * m]);
                            dev.matmul_add_reusing(&x1, &w, &r1, &mut o1, None).unwrap();
                        } else {
                            dev.matmul(&x1, &w, &mut o1).unwrap();
                        }
                        cuda_common::download(&dev, &o1)
                    })
                    .collect();
                for n in [9, 16, 17, 33, 64] {
                    let x = cuda_common::upload(&dev, n, k, &xs[..n * k]);
                    let r = cuda_common::upload(&dev, n, m, &res[..n * m]);
                    let mut out = dev.zeros_f32(Shape::matrix(n, m).unwrap()).unwrap();
                    if residual {
                        dev.matmul_add_reusing(&x, &w, &r, &mut out, None).unwrap();
                    } else {
                        dev.matmul(&x, &w, &mut out).unwrap();
                    }
                    let got = cuda_common::download(&dev, &out);
                    for (row, alone) in alone.iter().enumerate().take(n) {
                        assert_eq!(
                            bits(&got[row * m..(row + 1) * m]),
                            bits(alone),
                            "{dtype} k={k} m={m}: row {row} of {n} (residual {residual}) differs from itself alone"
                        );
                    }
                }
            }
        }
    }
}

/// Eight rows take the `__dp4a` matvec and nine the tensor-core one: the same rows give the
/// same bits either way, so a batch that grows past eight sequences changes no one's logits.
#[test]
fn eight_and_nine_rows_agree() {
    let Some(dev) = cuda_common::device("wide matvec") else {
        return;
    };
    let (k, m) = (4096, 500); // not whole 16-row tiles (memcheck runs this test)
    for dtype in cuda_common::WEIGHT_TYPES
        .into_iter()
        .filter(|t| t.is_quantized())
    {
        let w = dev.upload(&weight(dtype, m, k, 3)).unwrap();
        let xs = cuda_common::random(9 * k, 5);
        let mut o8 = dev.zeros_f32(Shape::matrix(8, m).unwrap()).unwrap();
        let mut o9 = dev.zeros_f32(Shape::matrix(9, m).unwrap()).unwrap();
        dev.matmul(&cuda_common::upload(&dev, 8, k, &xs[..8 * k]), &w, &mut o8)
            .unwrap();
        dev.matmul(&cuda_common::upload(&dev, 9, k, &xs), &w, &mut o9)
            .unwrap();
        let (g8, g9) = (
            cuda_common::download(&dev, &o8),
            cuda_common::download(&dev, &o9),
        );
        assert_eq!(
            bits(&g8),
            bits(&g9[..8 * m]),
            "{dtype}: 8 rows against the first 8 of 9"
        );
    }
}

/// `time_matmuls` (`kestrel bench --matvec`) replays a captured pass of matmuls: the pass runs
/// the same kernels as the matmuls alone (its output is the last weight's product, bit for bit,
/// for one row plain and prefetching, 8 rows and the tensor-core matvec's 9), and counts each
/// weight's bytes once; nothing to time, or rows that take the GEMM, are errors.
#[test]
fn a_timed_pass_of_matmuls_computes_what_the_matmuls_do() {
    let Some(dev) = cuda_common::device("wide matvec") else {
        return;
    };
    let (k, m) = (640, 96);
    let ws: Vec<_> = [DType::Q4_0, DType::Q4_0, DType::Q4_0]
        .iter()
        .enumerate()
        .map(|(i, &t)| dev.upload(&weight(t, m, k, 20 + i as u64)).unwrap())
        .collect();
    let refs: Vec<_> = ws.iter().collect();
    let bytes = 3 * DType::Q4_0.row_bytes(k).unwrap() * m;
    for (n, prefetch) in [(1, false), (1, true), (8, false), (9, false)] {
        dev.set_mmvq_prefetch(prefetch);
        let x = cuda_common::upload(&dev, n, k, &cuda_common::random(n * k, 31));
        let mut want = dev.zeros_f32(Shape::matrix(n, m).unwrap()).unwrap();
        dev.matmul(&x, &ws[2], &mut want).unwrap();
        let mut out = dev.zeros_f32(Shape::matrix(n, m).unwrap()).unwrap();
        let t = dev.time_matmuls(&refs, &x, &mut out, 2).unwrap();
        assert_eq!(
            bits(&cuda_common::download(&dev, &out)),
            bits(&cuda_common::download(&dev, &want)),
            "{n} rows, prefetch {prefetch}"
        );
        assert_eq!((t.matmuls, t.weight_bytes), (3, bytes as u64));
        assert!(t.seconds > 0.0 && t.bytes_per_s() > 0.0, "{t:?}");
    }
    dev.set_mmvq_prefetch(false);
    let x = cuda_common::upload(&dev, 1, k, &cuda_common::random(k, 31));
    let mut out = dev.zeros_f32(Shape::matrix(1, m).unwrap()).unwrap();
    assert!(dev.time_matmuls(&[], &x, &mut out, 1).is_err());
    let x = cuda_common::upload(&dev, 65, k, &cuda_common::random(65 * k, 31));
    let mut out = dev.zeros_f32(Shape::matrix(65, m).unwrap()).unwrap();
    let r = dev.time_matmuls(&refs, &x, &mut out, 1);
    assert!(
        r.is_err(),
        "65 rows take the GEMM, or launches of 8 without cuBLAS: {r:?}"
    );
}
