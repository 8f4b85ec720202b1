//! q8_0 KV caches on the device (`--cache-type q8_0 --device cuda`) against the CPU engine's:
//!
//! - keys and values appended on the device (`kv_append2_ids`) are the CPU cache's q8_0 blocks
//!   of the same rows: each value `d·q` equal, bit for bit (the same quantization rule,
//!   ggml's `quantize_row_q8_0`);
//! - attention over those caches, each kernel (decode per token, split over key ranges, per
//!   token for prefill, tiled for prefill), against the CPU engine's attention over the same
//!   blocks: within 5e-5 of outputs that are convex combinations of values of at most 1 (only
//!   the float summation orders differ), for SmolLM2's and Gemma 3's heads, GQA, a sliding
//!   window and a soft cap;
//! - what is refused: heads that are not whole blocks, keys and values of different types, the
//!   one-cache f16 append into a q8_0 cache.
//!
//! Without a driver or GPU the tests print why they skipped and pass, unless
//! `KESTREL_REQUIRE_GPU` is set.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{cache_values, download, random, upload};

use kestrel_gguf::quant::{q8_0, BlockQ8_0};
use kestrel_tensor::cpu::{attention, AttentionParams, KvSlice};
use kestrel_tensor::cuda::{AttentionKernel, CudaDevice};
use kestrel_tensor::{DType, Shape};

fn device() -> Option<CudaDevice> {
    cuda_common::device("q8_0 KV cache")
}

/// The CPU cache's blocks of `rows` (`[capacity][row]`, the first rows written, the rest zero).
fn cpu_blocks(rows: &[f32], capacity: usize, row: usize) -> Vec<BlockQ8_0> {
    let mut b = vec![q8_0::quantize_block(&[0.0; 32]); capacity * row / 32];
    q8_0::quantize_row(rows, &mut b[..rows.len() / 32]).unwrap();
    b
}

#[test]
fn q8_0_caches_are_the_cpu_engines() {
    let Some(dev) = device() else { return };
    let (capacity, filled) = (1100usize, 1000usize);
    for (n_head, n_kv_head, head_dim, window, softcap) in [
        (9, 3, 64, 0, 0.0),
        (4, 1, 256, 0, 0.0),
        (8, 2, 128, 128, 0.0),
        (2, 2, 96, 0, 50.0),
    ] {
        let what = format!("heads {n_head}/{n_kv_head}x{head_dim} window {window} cap {softcap}");
        let row = n_kv_head * head_dim;
        let (kf, vf) = (random(filled * row, 1), random(filled * row, 2));
        let shape = Shape::matrix(capacity, row).unwrap();
        let mut k = dev.zeros(DType::Q8_0, shape).unwrap();
        let mut v = dev.zeros(DType::Q8_0, shape).unwrap();
        let all: Vec<i32> = (0..filled as i32).collect();
        let mut ids = dev.new_ids(filled).unwrap();
        dev.set_ids(&mut ids, &all).unwrap();
        dev.kv_append2_ids(
            (
                &upload(&dev, filled, row, &kf),
                &upload(&dev, filled, row, &vf),
            ),
            &ids,
            (&mut k, &mut v),
        )
        .unwrap();
        let (kb, vb) = (
            cpu_blocks(&kf, capacity, row),
            cpu_blocks(&vf, capacity, row),
        );
        for (got, blocks, name) in [(&k, &kb, "keys"), (&v, &vb, "values")] {
            let mut want = vec![0f32; blocks.len() * 32];
            q8_0::dequantize_blocks(blocks, &mut want).unwrap();
            let want: Vec<u32> = want.iter().map(|x| x.to_bits()).collect();
            assert!(cache_values(&dev, got) == want, "{what}: {name} differ");
        }

        let p = AttentionParams {
            n_head,
            n_kv_head,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap,
            window,
        };
        let prefill: Vec<i32> = (960..1000).collect();
        for (positions, kernel, splits) in [
            (&[999][..], AttentionKernel::Auto, None),
            (&[999, 5, 500][..], AttentionKernel::Auto, Some(0)),
            (&prefill[..], AttentionKernel::PerToken, None),
            (&prefill[..], AttentionKernel::Tiled, None),
        ] {
            dev.set_attention_kernel(kernel);
            dev.set_attention_splits(splits);
            let n = positions.len();
            let w = n_head * head_dim;
            let q = random(n * w, 3 + n as u64);
            let mut out = dev.zeros(DType::F32, Shape::matrix(n, w).unwrap()).unwrap();
            dev.attention(
                &upload(&dev, n, w, &q),
                positions,
                &k,
                &v,
                filled,
                &p,
                &mut out,
            )
            .unwrap();
            let got = download(&dev, &out);
            let mut want = vec![0f32; n * w];
            let used = filled * row / 32;
            attention(
                &q,
                positions,
                KvSlice::Q8_0(&kb[..used]),
                KvSlice::Q8_0(&vb[..used]),
                filled,
                &p,
                &mut want,
            )
            .unwrap();
            let err = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, |a, b| {
                    if b.is_nan() || a.is_nan() {
                        f32::NAN
                    } else {
                        a.max(b)
                    }
                });
            assert!(
                err <= 5e-5,
                "{what}: {n} tokens, {kernel:?}, splits {splits:?}: max error {err}"
            );
        }
        dev.set_attention_kernel(AttentionKernel::Auto);
        dev.set_attention_splits(None);
    }
}

#[test]
fn what_q8_0_caches_refuse() {
    let Some(dev) = device() else { return };
    // Heads of 16 values: not whole blocks.
    let (n_head, head_dim) = (2usize, 16usize);
    let row = n_head * head_dim;
    let shape = Shape::matrix(8, row).unwrap();
    let k = dev.zeros(DType::Q8_0, shape).unwrap();
    let mut v = dev.zeros(DType::Q8_0, shape).unwrap();
    let p = AttentionParams {
        n_head,
        n_kv_head: n_head,
        head_dim,
        scale: 0.25,
        softcap: 0.0,
        window: 0,
    };
    let q = upload(&dev, 1, row, &random(row, 9));
    let mut out = dev
        .zeros(DType::F32, Shape::matrix(1, row).unwrap())
        .unwrap();
    assert!(dev.attention(&q, &[3], &k, &v, 4, &p, &mut out).is_err());
    // Keys q8_0, values f16.
    let p32 = AttentionParams {
        head_dim: 32,
        n_head: 1,
        n_kv_head: 1,
        ..p
    };
    let v16 = dev.zeros(DType::F16, shape).unwrap();
    let q32 = upload(&dev, 1, 32, &random(32, 10));
    let mut o32 = dev
        .zeros(DType::F32, Shape::matrix(1, 32).unwrap())
        .unwrap();
    let k32 = dev.zeros(DType::Q8_0, shape).unwrap();
    assert!(dev
        .attention(&q32, &[3], &k32, &v16, 4, &p32, &mut o32)
        .is_err());
    // The one-cache append writes f16 only.
    let src = upload(&dev, 1, row, &random(row, 11));
    assert!(dev.kv_append(&src, &[0], &mut v).is_err());
}
