//! The attention kernels on the GPU.
//!
//! - Decode (per token and split over key ranges) and prefill (tiled) against the CPU engine
//!   and float64 (`attention_matches_the_cpu_engine`).
//! - Batched decode over separate caches (`KvTable`): a step's tokens each append to and attend
//!   over their own sequence's f16 caches through the device table, and each gets, bit for bit,
//!   what the same launch gives that token alone over its own cache (`kv_append2_ids`,
//!   `rope_qk_append_ids`, `attention_ids`): the invariant the batched plan relies on. Contexts
//!   long enough for split decode attention (several 256-key ranges), GQA, Gemma's 256-wide
//!   heads with per-head norms, sequences of different capacities; what the table refuses.
//! - gpt-oss's attention sinks (a per-head logit in every softmax's denominator) in each kernel
//!   (per token, split over key ranges, tiled), against float64: within 2e-5 of outputs that are
//!   convex combinations of values of at most 1.
//! - DeepSeek's latent attention (576-wide keys appended alone, values their first 512), f16
//!   and q8_0 caches, against float64.
//!
//! Without a driver or GPU the tests print why they skipped and pass, unless
//! `KESTREL_REQUIRE_GPU` is set.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{cache_values, download, nmse, random, spiky, upload};

use kestrel_tensor::cpu::{AttentionParams, RopeMode, RopeParams};
use kestrel_tensor::cuda::{AttentionKernel, CudaDevice, DeviceTensor, KvTable};
use kestrel_tensor::{DType, Shape, Tensor};

fn device() -> Option<CudaDevice> {
    cuda_common::device("attention")
}

/// A sequence's caches: `capacity` rows, the first `filled` holding random f16 keys/values.
struct Seq {
    k: DeviceTensor,
    v: DeviceTensor,
}

fn seq(dev: &CudaDevice, capacity: usize, filled: usize, row: usize, seed: u64) -> Seq {
    let shape = Shape::matrix(capacity, row).unwrap();
    let mut k = dev.zeros(DType::F16, shape).unwrap();
    let mut v = dev.zeros(DType::F16, shape).unwrap();
    if filled > 0 {
        let all: Vec<i32> = (0..filled as i32).collect();
        let kf = upload(dev, filled, row, &random(filled * row, seed));
        let vf = upload(dev, filled, row, &random(filled * row, seed + 1));
        dev.kv_append(&kf, &all, &mut k).unwrap();
        dev.kv_append(&vf, &all, &mut v).unwrap();
    }
    Seq { k, v }
}

fn table_for(dev: &CudaDevice, seqs: &mut [Seq], layers: usize, layer: usize) -> KvTable {
    let mut table = dev.new_kv_table(layers, 8).unwrap();
    table.begin(seqs.len()).unwrap();
    for (t, s) in seqs.iter_mut().enumerate() {
        dev.set_kv_entry(&mut table, layer, t, &mut s.k, &mut s.v)
            .unwrap();
    }
    dev.upload_kv_table(&mut table).unwrap();
    table
}

#[test]
fn attention_through_the_table_is_each_token_alone() {
    let Some(dev) = device() else { return };
    for (n_head, n_kv_head, head_dim, window, softcap) in [
        (9, 3, 64, 0, 0.0),
        (4, 1, 256, 0, 0.0),
        (8, 2, 128, 128, 0.0),
        (8, 8, 64, 0, 50.0),
    ] {
        let row = n_kv_head * head_dim;
        let p = AttentionParams {
            n_head,
            n_kv_head,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap,
            window,
        };
        // Positions: short (one range), long (several ranges merged), the cache's last row.
        let positions: Vec<i32> = vec![1099, 5, 700, 0, 255, 1299, 300, 64];
        let capacities = [1100, 32, 1024, 8, 300, 1300, 301, 2000];
        let mut seqs: Vec<Seq> = positions
            .iter()
            .zip(capacities)
            .enumerate()
            .map(|(i, (&pos, cap))| seq(&dev, cap, pos as usize + 1, row, 100 + i as u64))
            .collect();
        for n in [1, 3, 8] {
            let pos = &positions[..n];
            let q = random(n * n_head * head_dim, 7);
            let qd = upload(&dev, n, n_head * head_dim, &q);
            let mut ids = dev.new_ids(n).unwrap();
            dev.set_ids(&mut ids, pos).unwrap();
            let table = table_for(&dev, &mut seqs[..n], 2, 1);
            let mut out = dev
                .zeros(DType::F32, Shape::matrix(n, n_head * head_dim).unwrap())
                .unwrap();
            // SAFETY: the caches outlive the launch (`seqs` lives to the end of the test).
            unsafe { dev.attention_table(&qd, &ids, (&table, 1), &p, None, &mut out) }.unwrap();
            let got = download(&dev, &out);
            for t in 0..n {
                let w = n_head * head_dim;
                let q1 = upload(&dev, 1, w, &q[t * w..(t + 1) * w]);
                let mut one = dev.new_ids(1).unwrap();
                dev.set_ids(&mut one, &pos[t..t + 1]).unwrap();
                let mut o1 = dev.zeros(DType::F32, Shape::matrix(1, w).unwrap()).unwrap();
                let s = &seqs[t];
                let cap = s.k.shape().n_rows();
                dev.attention_ids(&q1, &one, &s.k, &s.v, cap, &p, &mut o1)
                    .unwrap();
                assert_eq!(
                    got[t * w..(t + 1) * w],
                    download(&dev, &o1)[..],
                    "heads {n_head}/{n_kv_head}x{head_dim}: token {t} of {n}"
                );
            }
        }
        // Refused: a position past its cache (the second's holds 32), positions unlike the
        // table's tokens, a layer the table holds nothing for.
        let table = table_for(&dev, &mut seqs[..3], 2, 1);
        let w = n_head * head_dim;
        for (bad, layer) in [
            (&[1099, 32, 700][..], 1),
            (&[1, 2][..], 1),
            (&[1, 2, 3][..], 0),
        ] {
            let mut ids = dev.new_ids(bad.len()).unwrap();
            dev.set_ids(&mut ids, bad).unwrap();
            let q = upload(&dev, bad.len(), w, &random(bad.len() * w, 8));
            let mut out = dev
                .zeros(DType::F32, Shape::matrix(bad.len(), w).unwrap())
                .unwrap();
            // SAFETY: the caches outlive the call, which refuses before launching.
            let r = unsafe { dev.attention_table(&q, &ids, (&table, layer), &p, None, &mut out) };
            assert!(r.is_err(), "{bad:?} layer {layer}: refused");
        }
    }
}

#[test]
fn appends_through_the_table_are_each_token_alone() {
    let Some(dev) = device() else { return };
    let p = RopeParams {
        mode: RopeMode::Neox,
        n_rot: 0,
        freq_base: 10_000.0,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig: 4096,
        mrope: None,
    };
    // SmolLM2's heads, and Gemma 3's with per-head Q/K norms and a query scale.
    for (n_head, n_kv, head_dim, normed) in [(9usize, 3usize, 64usize, false), (4, 1, 256, true)] {
        let (q_row, kv_row) = (n_head * head_dim, n_kv * head_dim);
        let positions: Vec<i32> = vec![17, 0, 300, 63, 5];
        let caps = [64, 4, 512, 65, 6];
        let n = positions.len();
        let mut seqs: Vec<Seq> = caps
            .iter()
            .enumerate()
            .map(|(i, &c)| seq(&dev, c, 0, kv_row, 200 + i as u64))
            .collect();
        let mut twins: Vec<Seq> = caps
            .iter()
            .enumerate()
            .map(|(i, &c)| seq(&dev, c, 0, kv_row, 200 + i as u64))
            .collect();
        let (q, k, v) = (
            random(n * q_row, 1),
            random(n * kv_row, 2),
            random(n * kv_row, 3),
        );
        let qd = upload(&dev, n, q_row, &q);
        let (kd, vd) = (upload(&dev, n, kv_row, &k), upload(&dev, n, kv_row, &v));
        let norm_w = upload(&dev, 1, head_dim, &random(head_dim, 4));
        let norms = if normed {
            [Some((Some(&norm_w), 1e-6)), Some((Some(&norm_w), 1e-6))]
        } else {
            [None, None]
        };
        let q_scale = if normed { 0.0625 } else { 1.0 };
        let mut ids = dev.new_ids(n).unwrap();
        dev.set_ids(&mut ids, &positions).unwrap();
        let table = table_for(&dev, &mut seqs, 3, 2);
        let mut q_out = dev
            .zeros(DType::F32, Shape::matrix(n, q_row).unwrap())
            .unwrap();
        // SAFETY: the caches outlive the launches.
        unsafe {
            dev.rope_qk_append_table(
                (&qd, &mut q_out),
                (&kd, &vd),
                &ids,
                (&table, 2),
                (n_head, n_kv, head_dim),
                &p,
                None,
                q_scale,
                norms,
            )
        }
        .unwrap();
        let q_got = download(&dev, &q_out);
        for t in 0..n {
            let q1 = upload(&dev, 1, q_row, &q[t * q_row..(t + 1) * q_row]);
            let k1 = upload(&dev, 1, kv_row, &k[t * kv_row..(t + 1) * kv_row]);
            let v1 = upload(&dev, 1, kv_row, &v[t * kv_row..(t + 1) * kv_row]);
            let mut one = dev.new_ids(1).unwrap();
            dev.set_ids(&mut one, &positions[t..t + 1]).unwrap();
            let mut qo = dev
                .zeros(DType::F32, Shape::matrix(1, q_row).unwrap())
                .unwrap();
            let tw = &mut twins[t];
            dev.rope_qk_append_ids(
                (&q1, &mut qo),
                (&k1, &v1),
                &one,
                (&mut tw.k, &mut tw.v),
                (n_head, n_kv, head_dim),
                &p,
                None,
                q_scale,
                norms,
            )
            .unwrap();
            assert_eq!(
                q_got[t * q_row..(t + 1) * q_row],
                download(&dev, &qo)[..],
                "{n_head}x{head_dim}: token {t}'s queries"
            );
            assert_eq!(
                cache_values(&dev, &seqs[t].k),
                cache_values(&dev, &twins[t].k),
                "{n_head}x{head_dim}: token {t}'s keys"
            );
            assert_eq!(
                cache_values(&dev, &seqs[t].v),
                cache_values(&dev, &twins[t].v),
                "{n_head}x{head_dim}: token {t}'s values"
            );
        }
        // The plain pair append through the table: a second position each.
        let next: Vec<i32> = positions.iter().map(|&p| p + 1).collect();
        let next = {
            let mut v = next;
            v[1] = 3; // its cache holds 4
            v[4] = 4;
            v
        };
        dev.set_ids(&mut ids, &next).unwrap();
        // SAFETY: as above.
        unsafe { dev.kv_append2_table((&kd, &vd), &ids, &table, 2) }.unwrap();
        for t in 0..n {
            let k1 = upload(&dev, 1, kv_row, &k[t * kv_row..(t + 1) * kv_row]);
            let v1 = upload(&dev, 1, kv_row, &v[t * kv_row..(t + 1) * kv_row]);
            let mut one = dev.new_ids(1).unwrap();
            dev.set_ids(&mut one, &next[t..t + 1]).unwrap();
            let tw = &mut twins[t];
            dev.kv_append2_ids((&k1, &v1), &one, (&mut tw.k, &mut tw.v))
                .unwrap();
            assert_eq!(
                cache_values(&dev, &seqs[t].k),
                cache_values(&dev, &twins[t].k),
                "{n_head}x{head_dim}: token {t}'s second keys"
            );
            assert_eq!(
                cache_values(&dev, &seqs[t].v),
                cache_values(&dev, &twins[t].v),
                "{n_head}x{head_dim}: token {t}'s second values"
            );
        }
        // Refused: a position at its cache's capacity.
        let mut past = next.clone();
        past[1] = 4;
        dev.set_ids(&mut ids, &past).unwrap();
        // SAFETY: refused before a launch.
        assert!(unsafe { dev.kv_append2_table((&kd, &vd), &ids, &table, 2) }.is_err());
        // A token's caches of another row length than the layer's others.
        let mut t2 = dev.new_kv_table(3, 8).unwrap();
        t2.begin(2).unwrap();
        let mut odd = seq(&dev, 8, 0, kv_row + 2, 9);
        let s0 = &mut seqs[0];
        dev.set_kv_entry(&mut t2, 0, 0, &mut s0.k, &mut s0.v)
            .unwrap();
        assert!(dev
            .set_kv_entry(&mut t2, 0, 1, &mut odd.k, &mut odd.v)
            .is_err());
        assert!(
            dev.set_kv_entry(&mut t2, 0, 2, &mut odd.k, &mut odd.v)
                .is_err(),
            "a token past the step"
        );
        assert!(t2.begin(9).is_err(), "more tokens than the table holds");
    }
}

/// Float64 attention with sinks over f16 caches (`[rows][n_kv_head * head_dim]`), causal.
fn attention_sinks_f64(
    q: &[f32],
    positions: &[i32],
    (k, v): (&[f32], &[f32]),
    p: &AttentionParams,
    sinks: &[f32],
) -> Vec<f64> {
    let (hd, group) = (p.head_dim, p.n_head / p.n_kv_head);
    let row = p.n_kv_head * hd;
    let mut out = vec![0f64; q.len()];
    for (t, &pos) in positions.iter().enumerate() {
        for h in 0..p.n_head {
            let kvh = h / group;
            let qh = &q[(t * p.n_head + h) * hd..][..hd];
            let scores: Vec<f64> = (0..=pos as usize)
                .map(|j| {
                    let kj = &k[j * row + kvh * hd..][..hd];
                    let d: f64 = qh.iter().zip(kj).map(|(&a, &b)| a as f64 * b as f64).sum();
                    d * p.scale as f64
                })
                .collect();
            let m = scores.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let l = e.iter().sum::<f64>() + (sinks[h] as f64 - m).exp();
            let o = &mut out[(t * p.n_head + h) * hd..][..hd];
            for (j, w) in e.iter().enumerate() {
                let vj = &v[j * row + kvh * hd..][..hd];
                for (oi, &x) in o.iter_mut().zip(vj) {
                    *oi += w / l * x as f64;
                }
            }
        }
    }
    out
}

/// Causal attention of `n_head` query heads over `n_kv_head` KV heads of `head_dim`, the usual
/// scale, no soft cap, no window.
fn plain_params(n_head: usize, n_kv_head: usize, head_dim: usize) -> AttentionParams {
    AttentionParams {
        n_head,
        n_kv_head,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        softcap: 0.0,
        window: 0,
    }
}

#[test]
fn attention_sinks_match_float64_in_every_kernel() {
    let Some(dev) = device() else { return };
    for (n_head, n_kv_head, head_dim) in [(8usize, 2usize, 64usize), (4, 1, 256)] {
        let row = n_kv_head * head_dim;
        let p = plain_params(n_head, n_kv_head, head_dim);
        let len = 700;
        let s = seq(&dev, len + 1, len, row, 77);
        // The caches' values as the kernels read them (f16, widened exactly).
        let widen = |t: &DeviceTensor| -> Vec<f32> {
            cache_values(&dev, t)
                .iter()
                .map(|&b| f32::from_bits(b))
                .collect()
        };
        let (kf, vf) = (widen(&s.k), widen(&s.v));
        // Sinks that matter: around the scores' scale, one far above.
        let mut sinks: Vec<f32> = random(n_head, 5).iter().map(|x| x * 3.0).collect();
        sinks[0] = 12.0;
        let sinks_d = upload(&dev, 1, n_head, &sinks);
        let w = n_head * head_dim;
        // A decode query (per-token kernel, then split over key ranges), and a 24-token prefill
        // chunk ending at 699 (tiled kernel forced, then per-token).
        for (positions, kernels) in [
            (
                vec![699],
                vec![
                    (AttentionKernel::PerToken, Some(0)),
                    (AttentionKernel::PerToken, None),
                ],
            ),
            (
                (676..700).collect::<Vec<i32>>(),
                vec![
                    (AttentionKernel::Tiled, None),
                    (AttentionKernel::PerToken, None),
                ],
            ),
        ] {
            let n = positions.len();
            let q = random(n * w, 6);
            let qd = upload(&dev, n, w, &q);
            let mut ids = dev.new_ids(n).unwrap();
            dev.set_ids(&mut ids, &positions).unwrap();
            let want = attention_sinks_f64(&q, &positions, (&kf, &vf), &p, &sinks);
            for (kernel, splits) in kernels {
                dev.set_attention_kernel(kernel);
                dev.set_attention_splits(splits);
                let mut out = dev.zeros(DType::F32, Shape::matrix(n, w).unwrap()).unwrap();
                dev.attention_ids_sinks(
                    &qd,
                    &ids,
                    (&s.k, &s.v),
                    len + 1,
                    &p,
                    Some(&sinks_d),
                    &mut out,
                )
                .unwrap();
                let got = download(&dev, &out);
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(&g, &w)| (g as f64 - w).abs())
                    .fold(0f64, f64::max);
                assert!(
                    err <= 2e-5,
                    "{n_head}/{n_kv_head}x{head_dim}, {n} tokens, {kernel:?} splits {splits:?}: {err:e}"
                );
            }
            dev.set_attention_kernel(AttentionKernel::Auto);
            dev.set_attention_splits(None);
        }
        // Sinks of another length are refused.
        let short = upload(&dev, 1, n_head - 1, &sinks[..n_head - 1]);
        let mut ids = dev.new_ids(1).unwrap();
        dev.set_ids(&mut ids, &[5]).unwrap();
        let qd = upload(&dev, 1, w, &random(w, 8));
        let mut out = dev.zeros(DType::F32, Shape::matrix(1, w).unwrap()).unwrap();
        assert!(dev
            .attention_ids_sinks(&qd, &ids, (&s.k, &s.v), len + 1, &p, Some(&short), &mut out)
            .is_err());
    }
}

/// Causal attention in float64 over keys `[pos][n_kv_head * dk]` and values
/// `[pos][n_kv_head * dv]` as f32 (the caches' own values): `[token][n_head][dv]`.
fn attention_dims_f64(
    q: &[f32],
    positions: &[i32],
    (k, v): (&[f32], &[f32]),
    (n_head, n_kv_head, dk, dv): (usize, usize, usize, usize),
    scale: f32,
) -> Vec<f64> {
    let group = n_head / n_kv_head;
    let mut out = vec![0f64; positions.len() * n_head * dv];
    for (t, &pos) in positions.iter().enumerate() {
        for h in 0..n_head {
            let (qh, kvh) = (&q[(t * n_head + h) * dk..][..dk], h / group);
            let s: Vec<f64> = (0..=pos as usize)
                .map(|j| {
                    let kj = &k[(j * n_kv_head + kvh) * dk..][..dk];
                    qh.iter()
                        .zip(kj)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        * scale as f64
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let l: f64 = w.iter().sum();
            for (j, wj) in w.iter().enumerate() {
                let vj = &v[(j * n_kv_head + kvh) * dv..][..dv];
                for (i, &x) in vj.iter().enumerate() {
                    out[(t * n_head + h) * dv + i] += wj / l * x as f64;
                }
            }
        }
    }
    out
}

/// DeepSeek's latent attention (`attention_latent_ids`, key heads of 576 values, each key's
/// first 512 its value, 4 query heads over one cache head) and its decompressed form (keys of
/// 192 and values of 128 in their own caches, GQA 4/2: `attention_ids_sinks`), f16 and q8_0
/// caches written by `kv_append_ids`: decode steps on one CTA a (token, head) and split over
/// key ranges (590 keys: three ranges), and a prefill step: within 2e-5 of float64 over the
/// caches' own values (outputs convex combinations of values of at most 1).
#[test]
fn latent_and_differing_head_attention_match_float64() {
    let Some(dev) = device() else { return };
    let (cap, filled) = (600usize, 590usize);
    let all: Vec<i32> = (0..filled as i32).collect();
    let mut ids = dev.new_ids(filled).unwrap();
    dev.set_ids(&mut ids, &all).unwrap();
    // (n_head, n_kv_head, key head, value head, latent)
    for (n_head, n_kv, dk, dv, latent) in [
        (4usize, 1usize, 576usize, 512usize, true),
        (4, 2, 192, 128, false),
    ] {
        let p = AttentionParams {
            n_head,
            n_kv_head: n_kv,
            head_dim: dk,
            scale: 1.0 / 192f32.sqrt(),
            softcap: 0.0,
            window: 0,
        };
        for dtype in [DType::F16, DType::Q8_0] {
            let mut k = dev
                .zeros(dtype, Shape::matrix(cap, n_kv * dk).unwrap())
                .unwrap();
            let mut v = dev
                .zeros(dtype, Shape::matrix(cap, n_kv * dv).unwrap())
                .unwrap();
            let src = upload(&dev, filled, n_kv * dk, &random(filled * n_kv * dk, 21));
            dev.kv_append_ids(&src, &ids, &mut k).unwrap();
            let vsrc = upload(&dev, filled, n_kv * dv, &random(filled * n_kv * dv, 23));
            dev.kv_append_ids(&vsrc, &ids, &mut v).unwrap();
            let values = |t: &DeviceTensor| -> Vec<f32> {
                cache_values(&dev, t)
                    .iter()
                    .map(|&b| f32::from_bits(b))
                    .collect()
            };
            let kvals = values(&k);
            // Latent: each key's first dv values; else the value cache's.
            let vvals: Vec<f32> = if latent {
                kvals.chunks(dk).flat_map(|r| r[..dv].to_vec()).collect()
            } else {
                values(&v)
            };
            for positions in [vec![589i32], vec![100], (560..590).collect::<Vec<i32>>()] {
                let n = positions.len();
                let q = random(n * n_head * dk, 22 + n as u64);
                let qd = upload(&dev, n, n_head * dk, &q);
                let mut pid = dev.new_ids(n).unwrap();
                dev.set_ids(&mut pid, &positions).unwrap();
                let want = attention_dims_f64(
                    &q,
                    &positions,
                    (&kvals, &vvals),
                    (n_head, n_kv, dk, dv),
                    p.scale,
                );
                for splits in [Some(0), None, Some(7)] {
                    dev.set_attention_splits(splits);
                    let mut out = dev
                        .zeros(DType::F32, Shape::matrix(n, n_head * dv).unwrap())
                        .unwrap();
                    if latent {
                        dev.attention_latent_ids(&qd, &pid, &k, cap, &p, dv, &mut out)
                            .unwrap();
                    } else {
                        dev.attention_ids_sinks(&qd, &pid, (&k, &v), cap, &p, None, &mut out)
                            .unwrap();
                    }
                    let got = download(&dev, &out);
                    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g as f64 - w).abs() <= 2e-5,
                            "latent {latent} {dtype:?} {n} tokens, splits {splits:?}: value {i}: {g} against {w}"
                        );
                    }
                }
            }
            dev.set_attention_splits(None);
        }
    }
}

/// Causal attention in float64 over f16 keys and values (`[capacity][n_kv_head * head_dim]`):
/// the function every attention kernel computes (window, soft cap, GQA; no visible key: zeros).
fn attention_f64(
    q: &[f32],
    positions: &[i32],
    (k, v): (&[half::f16], &[half::f16]),
    kv_len: usize,
    p: &kestrel_tensor::cpu::AttentionParams,
) -> Vec<f32> {
    let (hd, group) = (p.head_dim, p.n_head / p.n_kv_head);
    let row = p.n_kv_head * hd;
    let mut out = vec![0f32; q.len()];
    for (t, &pos) in positions.iter().enumerate() {
        if pos < 0 {
            continue;
        }
        let hi = (pos as usize + 1).min(kv_len);
        let lo = if p.window > 0 {
            (pos as usize + 1).saturating_sub(p.window).min(hi)
        } else {
            0
        };
        for h in 0..p.n_head {
            let qh = &q[(t * p.n_head + h) * hd..][..hd];
            let kv = (h / group) * hd;
            let scores: Vec<f64> = (lo..hi)
                .map(|j| {
                    let d: f64 = (0..hd)
                        .map(|i| qh[i] as f64 * k[j * row + kv + i].to_f64())
                        .sum();
                    let s = d * p.scale as f64;
                    if p.softcap > 0.0 {
                        p.softcap as f64 * (s / p.softcap as f64).tanh()
                    } else {
                        s
                    }
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let l: f64 = w.iter().sum();
            for i in 0..hd {
                let o: f64 = (lo..hi)
                    .zip(&w)
                    .map(|(j, wj)| wj * v[j * row + kv + i].to_f64())
                    .sum();
                out[(t * p.n_head + h) * hd + i] = (o / l) as f32;
            }
        }
    }
    out
}

#[test]
fn attention_matches_the_cpu_engine() {
    use half::f16;
    use kestrel_tensor::cpu::{attention, AttentionParams, KvSlice};
    let Some(dev) = device() else { return };
    // Long enough for split decode attention to merge several 256-key ranges.
    let kv_len = 1100;
    let capacity = 1200;
    // SmolLM2 (9 heads over 3, 64), Gemma 3 (4 over 1, 256), a window, a soft cap.
    for (n_head, n_kv_head, head_dim, window, softcap) in [
        (9, 3, 64, 0, 0.0),
        (4, 1, 256, 0, 0.0),
        (8, 2, 128, 128, 0.0),
        (8, 8, 64, 0, 50.0),
    ] {
        let row = n_kv_head * head_dim;
        let kf = spiky(capacity * row, 41);
        let vf = spiky(capacity * row, 42);
        let k16: Vec<f16> = kf.iter().map(|&v| f16::from_f32(v)).collect();
        let v16: Vec<f16> = vf.iter().map(|&v| f16::from_f32(v)).collect();
        let p = AttentionParams {
            n_head,
            n_kv_head,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap,
            window,
        };
        // One decode query, short steps (one or several key ranges each), and prefill chunks
        // that take the tiled kernel (from 8 tokens: the first 40 positions, then 50 ending at
        // 1099), all inside the cached 1100.
        for positions in [
            vec![1099],
            vec![100, 101, 1099],
            vec![299, 700],
            (0..40).collect(),
            (1050..1100).collect(),
        ] {
            let q = spiky(positions.len() * n_head * head_dim, 43);
            let mut want = vec![0f32; q.len()];
            attention(
                &q,
                &positions,
                KvSlice::F16(&k16),
                KvSlice::F16(&v16),
                kv_len,
                &p,
                &mut want,
            )
            .unwrap();
            let want64 = attention_f64(&q, &positions, (&k16, &v16), kv_len, &p);
            let mut kc = dev
                .zeros(DType::F16, Shape::matrix(capacity, row).unwrap())
                .unwrap();
            let mut vc = dev
                .zeros(DType::F16, Shape::matrix(capacity, row).unwrap())
                .unwrap();
            let all: Vec<i32> = (0..capacity as i32).collect();
            let src =
                |v: &[f32]| Tensor::from_f32(Shape::matrix(capacity, row).unwrap(), v).unwrap();
            dev.kv_append(&dev.upload(&src(&kf)).unwrap(), &all, &mut kc)
                .unwrap();
            dev.kv_append(&dev.upload(&src(&vf)).unwrap(), &all, &mut vc)
                .unwrap();
            let qshape = Shape::matrix(positions.len() * n_head, head_dim).unwrap();
            let dq = dev.upload(&Tensor::from_f32(qshape, &q).unwrap()).unwrap();
            // Both kernels (the tiled one serves 8 tokens or more); steps of up to 8 tokens
            // also with the keys split among CTAs: off, the device's choice, 5 and 64 ranges
            // (most of them empty at short positions).
            let few = positions.len() <= 8;
            for kernel in [AttentionKernel::PerToken, AttentionKernel::Tiled] {
                for splits in [Some(0), None, Some(5), Some(64)] {
                    if !few && splits.is_some() {
                        continue;
                    }
                    dev.set_attention_kernel(kernel);
                    dev.set_attention_splits(splits);
                    let mut out = dev.zeros_f32(qshape).unwrap();
                    dev.attention(&dq, &positions, &kc, &vc, kv_len, &p, &mut out)
                        .unwrap();
                    // The GPU computes in f32 from the f16 cache: against float64 of the same
                    // function, tightly. The CPU rounds the query and its accumulator to f16
                    // on this path, as llama.cpp does (~1e-3 relative, growing with the keys:
                    // NMSE 1.45e-5 at 1,100 on an H200, session 43), so it is a looser check.
                    let got = dev.download_f32(&out).unwrap();
                    let e = nmse(&got, &want64);
                    let e_cpu = nmse(&got, &want);
                    assert!(
                        e <= 1e-8 && e_cpu <= 1e-4,
                        "attention ({kernel:?}, splits {splits:?}) {n_head}/{n_kv_head}x{head_dim} window {window} cap {softcap} at {positions:?}: {e:e} (f64), {e_cpu:e} (CPU)"
                    );
                    // A step's first token alone gives the bits it gets in the step.
                    if few && positions.len() > 1 {
                        let one = Shape::matrix(n_head, head_dim).unwrap();
                        let dq1 = dev
                            .upload(&Tensor::from_f32(one, &q[..n_head * head_dim]).unwrap())
                            .unwrap();
                        let mut o1 = dev.zeros_f32(one).unwrap();
                        dev.attention(&dq1, &positions[..1], &kc, &vc, kv_len, &p, &mut o1)
                            .unwrap();
                        let alone = dev.download_f32(&o1).unwrap();
                        assert!(
                            alone
                                .iter()
                                .zip(&got)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "attention (splits {splits:?}): a token alone differs from the same token in a step"
                        );
                    }
                }
            }
            dev.set_attention_kernel(AttentionKernel::Auto);
            dev.set_attention_splits(None);
        }
    }
}

/// `attention_ids_q8` also leaves its output as Q8_1 for the next matvec: handed its ticket,
/// the matvec takes that data (returns the same ticket) and gives the bits of plain attention
/// followed by a matvec that quantizes for itself. The per-token kernel and the split one
/// (forced and chosen), 1 and 3 query tokens, heads of 64 and 256, f16 caches.
#[test]
fn attention_leaves_the_q8_1_the_next_matvec_takes() {
    let Some(dev) = device() else { return };
    for (n_head, n_kv_head, head_dim) in [(8usize, 2usize, 64usize), (4, 1, 256)] {
        let row = n_kv_head * head_dim;
        let p = plain_params(n_head, n_kv_head, head_dim);
        let len = 700;
        let s = seq(&dev, len + 3, len + 3, row, 91);
        let w = n_head * head_dim;
        let weight = cuda_common::weight_of(DType::Q4_0, 96, w, &random(96 * w, 92));
        let weight = dev.upload(&weight).unwrap();
        for positions in [vec![699], vec![698, 699, 700]] {
            let n = positions.len();
            let qd = upload(&dev, n, w, &random(n * w, 93));
            let mut ids = dev.new_ids(n).unwrap();
            dev.set_ids(&mut ids, &positions).unwrap();
            for splits in [Some(0), None, Some(4)] {
                dev.set_attention_splits(splits);
                let zeros = |c: usize| dev.zeros(DType::F32, Shape::matrix(n, c).unwrap()).unwrap();
                let (mut plain, mut fused) = (zeros(w), zeros(w));
                let (mut m_plain, mut m_fused) = (zeros(96), zeros(96));
                dev.attention_ids_sinks(&qd, &ids, (&s.k, &s.v), len + 3, &p, None, &mut plain)
                    .unwrap();
                dev.matmul_reusing(&plain, &weight, &mut m_plain, None)
                    .unwrap();
                let ticket = dev
                    .attention_ids_q8(&qd, &ids, (&s.k, &s.v), len + 3, &p, None, &mut fused, true)
                    .unwrap();
                assert!(ticket.is_some(), "heads of {head_dim}: a ticket");
                let used = dev
                    .matmul_reusing(&fused, &weight, &mut m_fused, ticket)
                    .unwrap();
                let what = format!("{n_head}x{head_dim}, {n} tokens, splits {splits:?}");
                assert_eq!(used, ticket, "{what}: the matvec took the attention's Q8_1");
                assert_eq!(download(&dev, &plain), download(&dev, &fused), "{what}");
                assert_eq!(download(&dev, &m_plain), download(&dev, &m_fused), "{what}");
            }
            dev.set_attention_splits(None);
        }
    }
}
