//! Whole matmuls against libggml-cpu's MUL_MAT (the `ggml_matmul.bin` fixture, made by
//! `fixtures/gen_ggml_matmul.py` from llama.cpp b11434's CPU backend, 2 threads): for every
//! activation-row count from 1 to 12 the outputs must be bit-identical, whichever path ggml
//! takes at that count (tinyBLAS for Q5_0/Q8_0; for Q6_K vec_dot below 8 rows, its tiled
//! K-quant kernels from 8 on).

use kestrel_tensor::cpu::{self, MatmulScratch};
use kestrel_tensor::DType;

fn u32_at(b: &[u8], o: &mut usize) -> usize {
    let v = u32::from_le_bytes(b[*o..*o + 4].try_into().unwrap());
    *o += 4;
    v as usize
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

struct Case {
    dtype: DType,
    w: Vec<u8>,
    /// `outs[n - 1]`: ggml's output for the first `n` activation rows.
    outs: Vec<Vec<f32>>,
}

fn load() -> (usize, usize, Vec<f32>, Vec<Case>) {
    let b = include_bytes!("fixtures/ggml_matmul.bin");
    assert_eq!(&b[..4], b"KGM1");
    let mut o = 4;
    let (types, k, m, nmax) = (
        u32_at(b, &mut o),
        u32_at(b, &mut o),
        u32_at(b, &mut o),
        u32_at(b, &mut o),
    );
    let x = f32s(&b[o..o + nmax * k * 4]);
    o += nmax * k * 4;
    let mut cases = Vec::new();
    for _ in 0..types {
        let dtype = match u32_at(b, &mut o) {
            6 => DType::Q5_0,
            8 => DType::Q8_0,
            14 => DType::Q6K,
            t => panic!("ggml type {t} not in this test"),
        };
        let len = u32_at(b, &mut o);
        let w = b[o..o + len].to_vec();
        o += len;
        let outs = (1..=nmax)
            .map(|n| {
                let v = f32s(&b[o..o + n * m * 4]);
                o += n * m * 4;
                v
            })
            .collect();
        cases.push(Case { dtype, w, outs });
    }
    assert_eq!(o, b.len());
    (k, m, x, cases)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn matmul_equals_ggml_for_every_row_count() {
    let (k, m, x, cases) = load();
    for c in &cases {
        for (i, want) in c.outs.iter().enumerate() {
            let n = i + 1;
            let mut got = vec![0f32; n * m];
            cpu::matmul(&x[..n * k], n, k, &c.w, c.dtype, m, &mut got).unwrap();
            assert_eq!(bits(&got), bits(want), "{:?}, {n} activation rows", c.dtype);
        }
    }
}

/// In a batched step each sequence's rows come out as in a step of that sequence alone: a
/// Q6_K sequence of 8 rows takes the tiled order, one of 3 rows the vec_dot order, side by side.
#[test]
fn segments_keep_each_sequence_order() {
    let (k, m, x, cases) = load();
    let mut scratch = MatmulScratch::new();
    for c in &cases {
        for segs in [[8usize, 3], [3, 8], [2, 9]] {
            let n = segs[0] + segs[1];
            let mut got = vec![0f32; n * m];
            cpu::matmul_segmented(
                &x[..n * k],
                n,
                k,
                &c.w,
                c.dtype,
                m,
                &mut got,
                &segs,
                &mut scratch,
            )
            .unwrap();
            let mut row = 0;
            for &len in &segs {
                let mut alone = vec![0f32; len * m];
                cpu::matmul(
                    &x[row * k..(row + len) * k],
                    len,
                    k,
                    &c.w,
                    c.dtype,
                    m,
                    &mut alone,
                )
                .unwrap();
                assert_eq!(
                    bits(&got[row * m..(row + len) * m]),
                    bits(&alone),
                    "{:?}, segments {segs:?}",
                    c.dtype
                );
                row += len;
            }
        }
    }
}
