//! Mixture-of-experts routing on the device (`--features cuda`; skips without a GPU unless
//! `KESTREL_REQUIRE_GPU=1`):
//! - `moe_route` against the CPU plan's rule (kestrel-graph's `moe::route`, transcribed here as
//!   `route_ref`): every gating, router and selection biases, expert groups, normalised and
//!   scaled weights, 8-256 experts, 1-32 chosen. Ids exactly (logits on a coarse grid and whole
//!   selection biases, so exact ties, which go to the lower expert, and few near-ties: a row
//!   whose choice a near-tie decides is not compared, at most 5% of them); weights within 4e-6
//!   of the largest (the device's `expf` is within 2 ulps and its sums are warp trees).
//! - `matmul_experts` (quantized and float experts, a row a token or a row a pair) against each
//!   pair's expert alone through `matmul`, bit for bit; `moe_scale_bias` and `moe_combine`
//!   against their formulas, bit for bit; what they refuse.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{download, random_in, upload};
use kestrel_tensor::cuda::{CudaDevice, RouteGating, RouteSpec};
use kestrel_tensor::{DType, Shape, Tensor};

fn device() -> Option<CudaDevice> {
    cuda_common::device("MoE routing")
}

/// Whether two neighbouring scores of a sorted run (each with its probability) are near but
/// not equal: the device's `expf` (within 2 ulps), warp-tree sums and reciprocal put a
/// probability within about 6e-7 of the host's (relative), and adding a selection bias rounds
/// once more, so scores closer than 4e-6 of their probability plus 4 ulps of their own size
/// may order the other way. Equal scores come from equal inputs, and tie to the lower expert
/// on both.
fn near_tie(sorted: impl Iterator<Item = (f32, f32)> + Clone) -> bool {
    sorted
        .clone()
        .zip(sorted.skip(1))
        .any(|((a, pa), (b, pb))| {
            let tol = 4e-6 * pa.abs().max(pb.abs()) + 4.0 * f32::EPSILON * a.abs().max(b.abs());
            a != b && (a - b).abs() <= tol
        })
}

/// kestrel-graph's `moe::route` for one row (f64 sums, sorted order): the ids, the weights,
/// and whether a near-tie decides the groups, the choice or its order (`near_tie`).
fn route_ref(
    p: &RouteSpec,
    logits: &[f32],
    rb: Option<&[f32]>,
    sb: Option<&[f32]>,
) -> (Vec<i32>, Vec<f32>, bool) {
    let ne = p.n_expert;
    let l: Vec<f32> = (0..ne)
        .map(|e| logits[e] + rb.map_or(0.0, |b| b[e]))
        .collect();
    let pr: Vec<f32> = match p.gating {
        RouteGating::Softmax => {
            let m = l.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let ex: Vec<f32> = l.iter().map(|&v| (v - m).exp()).collect();
            let inv = (1.0 / ex.iter().map(|&v| v as f64).sum::<f64>()) as f32;
            ex.iter().map(|&v| v * inv).collect()
        }
        RouteGating::Sigmoid => l.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect(),
        _ => l.clone(),
    };
    let mut score: Vec<f32> = (0..ne).map(|e| pr[e] + sb.map_or(0.0, |b| b[e])).collect();
    let mut fragile = false;
    if let Some((groups, used)) = p.groups {
        let per = ne / groups;
        // Each group's score (its two best) and their probabilities.
        let mut order: Vec<(usize, f32, f32)> = (0..groups)
            .map(|g| {
                let (mut a, mut b) = (usize::MAX, usize::MAX);
                for e in g * per..(g + 1) * per {
                    if a == usize::MAX || score[e] > score[a] {
                        b = a;
                        a = e;
                    } else if b == usize::MAX || score[e] > score[b] {
                        b = e;
                    }
                }
                (g, score[a] + score[b], pr[a] + pr[b])
            })
            .collect();
        order.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
        fragile |= near_tie(order[..(used + 1).min(groups)].iter().map(|g| (g.1, g.2)));
        for &(g, _, _) in &order[used..] {
            score[g * per..(g + 1) * per].fill(f32::NEG_INFINITY);
        }
    }
    let mut idx: Vec<usize> = (0..ne).collect();
    idx.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
    fragile |= near_tie(
        idx[..(p.n_used + 1).min(ne)]
            .iter()
            .map(|&e| (score[e], pr[e])),
    );
    let ids: Vec<i32> = idx[..p.n_used].iter().map(|&e| e as i32).collect();
    let mut w: Vec<f32> = idx[..p.n_used].iter().map(|&e| pr[e]).collect();
    if p.gating == RouteGating::SoftmaxWeight {
        let m = w.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        w.iter_mut().for_each(|v| *v = (*v - m).exp());
        let inv = (1.0 / w.iter().map(|&v| v as f64).sum::<f64>()) as f32;
        w.iter_mut().for_each(|v| *v *= inv);
    }
    if p.norm_weights {
        let sum = w.iter().sum::<f32>().max(6.103_515_6e-5);
        w.iter_mut().for_each(|v| *v /= sum);
    }
    if p.weights_scale != 0.0 && p.weights_scale != 1.0 {
        w.iter_mut().for_each(|v| *v *= p.weights_scale);
    }
    (ids, w, fragile)
}

/// Values on a grid of 1/64 in [-8, 8): distinct logits differ by far more than rounding.
fn grid(n: usize, seed: u64, levels: u32) -> Vec<f32> {
    random_in(n, seed, 0.0, 1.0)
        .into_iter()
        .map(|v| ((v * levels as f32) as i32 - levels as i32 / 2) as f32 / 64.0)
        .collect()
}

#[test]
fn device_routing_chooses_as_the_cpu_rule() {
    let Some(dev) = device() else { return };
    let rows = 5;
    let (mut runs, mut seed) = (0, 1u64);
    let (mut rows_seen, mut skipped) = (0usize, 0usize);
    for ne in [8usize, 60, 128, 256] {
        for k in [1usize, 2, 8, 13, 32] {
            for gating in [
                RouteGating::Softmax,
                RouteGating::Sigmoid,
                RouteGating::SoftmaxWeight,
            ] {
                for variant in 0..4 {
                    if k > ne {
                        continue;
                    }
                    seed += 1;
                    let groups = (variant == 2 && ne == 256).then_some((8, 4));
                    let p = RouteSpec {
                        n_expert: ne,
                        n_used: k,
                        gating,
                        groups,
                        norm_weights: variant % 2 == 1,
                        weights_scale: if variant == 3 { 2.5 } else { 1.0 },
                    };
                    // Row 1 of few distinct values: equal scores across the k-th place.
                    let mut logits = grid(rows * ne, seed, 1024);
                    for (e, v) in grid(ne, seed + 7, 4).into_iter().enumerate() {
                        logits[ne + e] = v;
                    }
                    let rb = (variant == 1).then(|| grid(ne, seed + 11, 64));
                    // Whole numbers: a probability (in (0, 1)) plus a bias never nears another
                    // with another bias.
                    let sb = (variant >= 2).then(|| {
                        grid(ne, seed + 13, 256)
                            .into_iter()
                            .map(|v| (v * 2.0).round())
                            .collect::<Vec<_>>()
                    });
                    let d_logits = upload(&dev, rows, ne, &logits);
                    let d_rb = rb.as_ref().map(|v| upload(&dev, 1, ne, v));
                    let d_sb = sb.as_ref().map(|v| upload(&dev, 1, ne, v));
                    let mut routes = dev.new_routes(rows * k).unwrap();
                    dev.moe_route(&d_logits, &p, (d_rb.as_ref(), d_sb.as_ref()), &mut routes)
                        .unwrap();
                    assert_eq!((routes.rows(), routes.n_used()), (rows, k));
                    let (ids, w) = dev.routes_to_host(&routes).unwrap();
                    for r in 0..rows {
                        let (want_ids, want_w, fragile) = route_ref(
                            &p,
                            &logits[r * ne..(r + 1) * ne],
                            rb.as_deref(),
                            sb.as_deref(),
                        );
                        rows_seen += 1;
                        if fragile {
                            skipped += 1;
                            continue;
                        }
                        let what = format!("{p:?} variant {variant} row {r}");
                        assert_eq!(&ids[r * k..(r + 1) * k], &want_ids[..], "{what}");
                        let big = want_w.iter().fold(0f32, |m, v| m.max(v.abs()));
                        for (g, w) in w[r * k..(r + 1) * k].iter().zip(&want_w) {
                            assert!((g - w).abs() <= 4e-6 * big, "{what}: {g} against {w}");
                        }
                    }
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 150, "{runs} routings");
    eprintln!("{skipped} of {rows_seen} rows decided by a near-tie: not compared");
    assert!(
        skipped * 20 <= rows_seen,
        "{skipped} of {rows_seen} rows near a tie"
    );
    // Refused: more chosen than there are, more pairs than the routes hold, logits of another
    // width, more experts than the kernel holds.
    let logits = upload(&dev, 2, 8, &grid(16, 3, 64));
    let mut routes = dev.new_routes(3).unwrap();
    let spec = |n_expert, n_used| RouteSpec {
        n_expert,
        n_used,
        gating: RouteGating::Softmax,
        groups: None,
        norm_weights: false,
        weights_scale: 1.0,
    };
    assert!(dev
        .moe_route(&logits, &spec(8, 9), (None, None), &mut routes)
        .is_err());
    assert!(dev
        .moe_route(&logits, &spec(8, 2), (None, None), &mut routes)
        .is_err());
    assert!(dev
        .moe_route(&logits, &spec(4, 1), (None, None), &mut routes)
        .is_err());
    let wide = upload(&dev, 1, 520, &grid(520, 4, 64));
    assert!(dev
        .moe_route(&wide, &spec(520, 1), (None, None), &mut routes)
        .is_err());
}

/// A weight of `dtype`, `m` rows of `k` (random values quantized).
fn weight(dtype: DType, m: usize, k: usize, seed: u64) -> Tensor {
    cuda_common::weight_of(dtype, m, k, &random_in(m * k, seed, -1.0, 1.0))
}

/// Routes `tokens` tokens of 5 experts, 2 each (token t: experts (t + 1) % 5, then (t + 3) % 5),
/// then checks every pair's projection by its expert (a row a token, and a row a pair) against
/// that expert's matmul of the row alone, bit for bit, for quantized and float experts; returns
/// the routing, its ids and weights.
fn route_and_check_pairs(
    dev: &CudaDevice,
    tokens: usize,
) -> (kestrel_tensor::cuda::DeviceRoutes, Vec<i32>, Vec<f32>) {
    let (ne, k, m, width) = (5usize, 2usize, 40usize, 256usize);
    let mut logits = vec![0f32; tokens * ne];
    let mut want_ids = Vec::new();
    for t in 0..tokens {
        let (a, b) = ((t + 1) % ne, (t + 3) % ne);
        logits[t * ne + a] = 4.0;
        logits[t * ne + b] = 3.0;
        want_ids.extend([a as i32, b as i32]);
    }
    let spec = RouteSpec {
        n_expert: ne,
        n_used: k,
        gating: RouteGating::Softmax,
        groups: None,
        norm_weights: true,
        weights_scale: 1.0,
    };
    let mut routes = dev.new_routes(tokens * k).unwrap();
    dev.moe_route(
        &upload(dev, tokens, ne, &logits),
        &spec,
        (None, None),
        &mut routes,
    )
    .unwrap();
    let (ids, wts) = dev.routes_to_host(&routes).unwrap();
    assert_eq!(ids, want_ids);
    let x = random_in(tokens * width, 5, -2.0, 2.0);
    let dx = upload(dev, tokens, width, &x);
    let pairs = tokens * k;
    let px = random_in(pairs * width, 6, -2.0, 2.0);
    let dpx = upload(dev, pairs, width, &px);
    for dtype in [
        DType::Q4K,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q6K,
        DType::F32,
        DType::F16,
    ] {
        let host: Vec<Tensor> = (0..ne)
            .map(|e| weight(dtype, m, width, 40 + e as u64))
            .collect();
        let experts = host.iter().map(|t| dev.upload(t).unwrap()).collect();
        let table = dev.expert_table(experts).unwrap();
        for (per_token, input, rows) in [(true, &dx, tokens), (false, &dpx, pairs)] {
            let mut out = dev.zeros_f32(Shape::matrix(pairs, m).unwrap()).unwrap();
            dev.matmul_experts(input, (&table, &routes), per_token, &mut out, None)
                .unwrap();
            let got = download(dev, &out);
            let xs = download(dev, input);
            for p in 0..pairs {
                let row = if per_token { p / k } else { p };
                assert!(row < rows);
                let one = upload(dev, 1, width, &xs[row * width..(row + 1) * width]);
                let mut alone = dev.zeros_f32(Shape::matrix(1, m).unwrap()).unwrap();
                let e = table.expert(ids[p] as usize).unwrap();
                dev.matmul(&one, e, &mut alone).unwrap();
                let want = download(dev, &alone);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got[p * m..(p + 1) * m]),
                    bits(&want),
                    "{dtype:?} per_token {per_token} pair {p}"
                );
            }
        }
    }
    (routes, ids, wts)
}

#[test]
fn each_pair_gets_its_experts_bits() {
    let Some(dev) = device() else { return };
    let (ne, tokens, k, m, width) = (5usize, 3usize, 2usize, 40usize, 256usize);
    // 3 tokens take the per-pair matvec; 60 (from 8) the pairs grouped by expert into tiles
    // for the tensor-core matvec (24 pairs an expert: two tiles of 16, or one of 32 under
    // KESTREL_CUDA_WIDE_NT=4): the same bits.
    let (grouped, ..) = route_and_check_pairs(&dev, 60);
    assert!(grouped.grouped(), "60 tokens are grouped by expert");
    let (routes, ids, wts) = route_and_check_pairs(&dev, tokens);
    assert!(!routes.grouped(), "3 tokens take the per-pair matvec");
    let pairs = tokens * k;
    // Scales and biases by each pair's expert, then the weighted slot sum.
    let base = random_in(pairs * m, 9, -3.0, 3.0);
    let scales = random_in(ne, 10, 0.5, 2.0);
    let bias = random_in(ne * m, 11, -1.0, 1.0);
    let (ds, db) = (upload(&dev, 1, ne, &scales), upload(&dev, 1, ne * m, &bias));
    let mut out = upload(&dev, pairs, m, &base);
    dev.moe_scale_bias(&mut out, &routes, ne, (Some(&ds), Some(&db)))
        .unwrap();
    let got = download(&dev, &out);
    for (i, g) in got.iter().enumerate() {
        let e = ids[i / m] as usize;
        let want = base[i] * scales[e] + bias[e * m + i % m];
        assert_eq!(g.to_bits(), want.to_bits(), "scale and bias [{i}]");
    }
    let mut sum = dev.zeros_f32(Shape::matrix(tokens, m).unwrap()).unwrap();
    dev.moe_combine(&out, &routes, &mut sum).unwrap();
    let s = download(&dev, &sum);
    for t in 0..tokens {
        for j in 0..m {
            let want =
                got[(t * k) * m + j] * wts[t * k] + got[(t * k + 1) * m + j] * wts[t * k + 1];
            assert_eq!(s[t * m + j].to_bits(), want.to_bits(), "combine [{t}][{j}]");
        }
    }
    // Refused: experts of two types, inputs of the wrong rows, a bias of the wrong length.
    let mixed = vec![
        dev.upload(&weight(DType::Q8_0, m, width, 1)).unwrap(),
        dev.upload(&weight(DType::Q4_0, m, width, 2)).unwrap(),
    ];
    assert!(dev.expert_table(mixed).is_err());
    assert!(dev.expert_table(Vec::new()).is_err());
    let table = dev
        .expert_table(vec![dev.upload(&weight(DType::Q8_0, m, width, 3)).unwrap()])
        .unwrap();
    let mut o = dev.zeros_f32(Shape::matrix(pairs, m).unwrap()).unwrap();
    // A row a pair where the projection takes a row a token.
    let dpx = upload(&dev, pairs, width, &random_in(pairs * width, 6, -2.0, 2.0));
    assert!(dev
        .matmul_experts(&dpx, (&table, &routes), true, &mut o, None)
        .is_err());
    assert!(dev
        .moe_scale_bias(&mut o, &routes, ne, (None, Some(&ds)))
        .is_err());
}
