//! RoPE on the GPU against the CPU engine (`--features cuda`): normal and NeoX modes, YaRN,
//! frequency factors, over positions up to 4,095, within NMSE 1e-5 (ggml-cpu builds the angles
//! by repeated products, the GPU by `powf` as ggml-cuda: ~1e-3 rad apart at the far
//! positions); and the plan's one-launch forms (RoPE from a source buffer, the key/value pair
//! append, with per-head norms) against their two-step forms, bit for bit.
//!
//! Without a driver or GPU the tests print why they skipped and pass, unless
//! `KESTREL_REQUIRE_GPU` is set.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{f32_tensor, nmse, spiky as random};
use kestrel_tensor::cuda::CudaDevice;
use kestrel_tensor::{DType, Shape, Tensor};

fn device() -> Option<CudaDevice> {
    cuda_common::device("rope")
}

#[test]
fn rope_matches_the_cpu_engine() {
    use kestrel_tensor::cpu::{rope, RopeMode, RopeParams};
    let Some(dev) = device() else { return };
    let positions: Vec<i32> = vec![0, 1, 7, 100, 1023, 4095];
    for (n_head, head_dim, mode, yarn, ff) in [
        (9, 64, RopeMode::Normal, false, false),
        (4, 256, RopeMode::Neox, false, false),
        (8, 128, RopeMode::Normal, true, true),
    ] {
        let p = RopeParams {
            mode,
            n_rot: head_dim,
            freq_base: if yarn { 500_000.0 } else { 10_000.0 },
            freq_scale: if yarn { 0.25 } else { 1.0 },
            ext_factor: if yarn { 1.0 } else { 0.0 },
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 8192,
            mrope: None,
        };
        let factors: Vec<f32> = (0..head_dim / 2).map(|i| 1.0 + (i % 5) as f32).collect();
        let host = random(positions.len() * n_head * head_dim, 31);
        let mut want = host.clone();
        rope(
            &mut want,
            n_head,
            head_dim,
            &positions,
            &p,
            ff.then_some(&factors[..]),
        )
        .unwrap();
        let shape = Shape::matrix(positions.len() * n_head, head_dim).unwrap();
        let mut x = dev
            .upload(&Tensor::from_f32(shape, &host).unwrap())
            .unwrap();
        let dff = dev
            .upload(&Tensor::from_f32(Shape::vector(factors.len()), &factors).unwrap())
            .unwrap();
        dev.rope(&mut x, &positions, n_head, head_dim, &p, ff.then_some(&dff))
            .unwrap();
        // Angles up to 4095 rad: ggml-cpu builds them by repeated products, the GPU by powf
        // (as ggml-cuda); they differ by ~1e-3 rad at the far positions.
        let e = nmse(&dev.download_f32(&x).unwrap(), &want);
        assert!(
            e <= 1e-5,
            "rope {mode:?} head {head_dim} yarn {yarn}: {e:e}"
        );
    }
}

/// The plan's one-launch forms: RoPE from a source buffer (a partial rotation, so the copied
/// tail counts) equals the copy + in-place RoPE, and the key/value pair append equals two
/// appends, bit for bit.
#[test]
fn fused_rope_and_pair_append_equal_their_two_step_forms() {
    use kestrel_tensor::cpu::{RopeMode, RopeParams};
    let Some(dev) = device() else { return };
    let positions: Vec<i32> = vec![3, 4, 5, 90];
    let mut ids = dev.new_ids(positions.len()).unwrap();
    dev.set_ids(&mut ids, &positions).unwrap();
    let (n_head, head_dim) = (4, 128);
    let p = RopeParams {
        mode: RopeMode::Neox,
        n_rot: 64,
        freq_base: 10_000.0,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig: 4096,
        mrope: None,
    };
    let shape = Shape::matrix(positions.len() * n_head, head_dim).unwrap();
    let host = random(shape.elem_count(), 9);
    let src = dev
        .upload(&Tensor::from_f32(shape, &host).unwrap())
        .unwrap();
    let mut in_place = dev
        .upload(&Tensor::from_f32(shape, &host).unwrap())
        .unwrap();
    dev.rope(&mut in_place, &positions, n_head, head_dim, &p, None)
        .unwrap();
    let mut out = dev.zeros(DType::F32, shape).unwrap();
    dev.rope_ids_from(&src, &mut out, &ids, n_head, head_dim, &p, None)
        .unwrap();
    assert_eq!(
        dev.download_f32(&out).unwrap(),
        dev.download_f32(&in_place).unwrap()
    );

    // F16 caches are not downloadable: attention over each pair shows they hold the same.
    let (n_kv_head, capacity) = (2, 128);
    let row = n_kv_head * head_dim;
    let kv_shape = Shape::matrix(positions.len(), row).unwrap();
    let k = dev
        .upload(&Tensor::from_f32(kv_shape, &random(kv_shape.elem_count(), 10)).unwrap())
        .unwrap();
    let v = dev
        .upload(&Tensor::from_f32(kv_shape, &random(kv_shape.elem_count(), 11)).unwrap())
        .unwrap();
    let cache = || {
        dev.zeros(DType::F16, Shape::matrix(capacity, row).unwrap())
            .unwrap()
    };
    let (mut k1, mut v1, mut k2, mut v2) = (cache(), cache(), cache(), cache());
    dev.kv_append(&k, &positions, &mut k1).unwrap();
    dev.kv_append(&v, &positions, &mut v1).unwrap();
    dev.kv_append2_ids((&k, &v), &ids, (&mut k2, &mut v2))
        .unwrap();
    let ap = kestrel_tensor::cpu::AttentionParams {
        n_head,
        n_kv_head,
        head_dim,
        scale: 0.1,
        softcap: 0.0,
        window: 0,
    };
    let attend = |kc: &_, vc: &_| {
        let mut o = dev.zeros_f32(shape).unwrap();
        dev.attention(&out, &positions, kc, vc, capacity, &ap, &mut o)
            .unwrap();
        dev.download_f32(&o).unwrap()
    };
    assert_eq!(attend(&k1, &v1), attend(&k2, &v2));

    // Queries and keys rotated and keys and values appended in one launch: the rotated
    // queries as rope_ids_from's, the caches as rotating the keys and appending both.
    let mut k_rot = dev.zeros(DType::F32, kv_shape).unwrap();
    dev.rope_ids_from(&k, &mut k_rot, &ids, n_kv_head, head_dim, &p, None)
        .unwrap();
    let (mut k3, mut v3, mut k4, mut v4) = (cache(), cache(), cache(), cache());
    dev.kv_append2_ids((&k_rot, &v), &ids, (&mut k3, &mut v3))
        .unwrap();
    let mut q_out = dev.zeros(DType::F32, shape).unwrap();
    dev.rope_qk_append_ids(
        (&src, &mut q_out),
        (&k, &v),
        &ids,
        (&mut k4, &mut v4),
        (n_head, n_kv_head, head_dim),
        &p,
        None,
        1.0,
        [None, None],
    )
    .unwrap();
    assert_eq!(
        dev.download_f32(&q_out).unwrap(),
        dev.download_f32(&out).unwrap(),
        "fused RoPE: queries"
    );
    assert_eq!(attend(&k3, &v3), attend(&k4, &v4), "fused RoPE: caches");
    // With the queries scaled (Gemma): the rotated queries, then scale_from.
    let mut scaled = dev.zeros(DType::F32, shape).unwrap();
    dev.scale_from(&out, &mut scaled, 0.0625).unwrap();
    let (mut k5, mut v5) = (cache(), cache());
    dev.rope_qk_append_ids(
        (&src, &mut q_out),
        (&k, &v),
        &ids,
        (&mut k5, &mut v5),
        (n_head, n_kv_head, head_dim),
        &p,
        None,
        0.0625,
        [None, None],
    )
    .unwrap();
    assert_eq!(
        dev.download_f32(&q_out).unwrap(),
        dev.download_f32(&scaled).unwrap(),
        "fused RoPE with a query scale: queries"
    );
    assert_eq!(
        attend(&k3, &v3),
        attend(&k5, &v5),
        "fused RoPE with a query scale: caches"
    );
    // With per-head RMS norms of queries and keys (Gemma 3): the norms as their own launches
    // over head-long rows, then the launch without them.
    let qw = dev.upload(&f32_tensor(1, head_dim, 61)).unwrap();
    let kw = dev.upload(&f32_tensor(1, head_dim, 62)).unwrap();
    let k_heads_shape = Shape::matrix(positions.len() * n_kv_head, head_dim).unwrap();
    let k_heads = dev
        .upload(&Tensor::from_f32(k_heads_shape, &random(kv_shape.elem_count(), 10)).unwrap())
        .unwrap();
    let mut qn = dev.zeros(DType::F32, shape).unwrap();
    dev.rms_norm(&src, Some(&qw), 1e-6, &mut qn).unwrap();
    let mut kn = dev.zeros(DType::F32, k_heads_shape).unwrap();
    dev.rms_norm(&k_heads, Some(&kw), 1e-5, &mut kn).unwrap();
    kn.set_shape(kv_shape).unwrap();
    let (mut k6, mut v6, mut k7, mut v7) = (cache(), cache(), cache(), cache());
    let (mut q6, mut q7) = (
        dev.zeros(DType::F32, shape).unwrap(),
        dev.zeros(DType::F32, shape).unwrap(),
    );
    dev.rope_qk_append_ids(
        (&qn, &mut q6),
        (&kn, &v),
        &ids,
        (&mut k6, &mut v6),
        (n_head, n_kv_head, head_dim),
        &p,
        None,
        0.0625,
        [None, None],
    )
    .unwrap();
    dev.rope_qk_append_ids(
        (&src, &mut q7),
        (&k, &v),
        &ids,
        (&mut k7, &mut v7),
        (n_head, n_kv_head, head_dim),
        &p,
        None,
        0.0625,
        [Some((Some(&qw), 1e-6)), Some((Some(&kw), 1e-5))],
    )
    .unwrap();
    assert_eq!(
        dev.download_f32(&q6).unwrap(),
        dev.download_f32(&q7).unwrap(),
        "fused RoPE with head norms: queries"
    );
    assert_eq!(
        attend(&k6, &v6),
        attend(&k7, &v7),
        "fused RoPE with head norms: caches"
    );
    // A position past the cache is refused before anything is written.
    dev.set_ids(&mut ids, &[0, 1, 2, capacity as i32]).unwrap();
    assert!(dev
        .kv_append2_ids((&k, &v), &ids, (&mut k2, &mut v2))
        .is_err());
    assert!(dev
        .rope_qk_append_ids(
            (&src, &mut q_out),
            (&k, &v),
            &ids,
            (&mut k4, &mut v4),
            (n_head, n_kv_head, head_dim),
            &p,
            None,
            1.0,
            [None, None],
        )
        .is_err());
}
