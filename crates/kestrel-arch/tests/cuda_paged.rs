//! Paged KV caches on the GPU (`CudaPlan::new_pool`, `new_paged_cache`): sequences whose keys
//! and values are pages of one pool, mapped out of order, give the bits of contiguous caches,
//! alone and in batched steps, through prefill chunks (the tiled kernel and the per-token one),
//! decode steps (plain and replayed graphs) and a prompt prefix whose pages another sequence
//! computed (shared, not copied); f16 and q8_0 pools. Also what it refuses; and one batched
//! step's argmax, top-k and logits at once (`run_batch_picks`).
//! Requires `--features cuda`; skips with a reason without a GPU, fails with
//! `KESTREL_REQUIRE_GPU=1`.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use kestrel_arch::{build_decoder, weight_tensor, DecoderConfig, Logits};
use kestrel_graph::{CudaKvCache, CudaPlan};
use kestrel_tensor::cuda::{AttentionKernel, CudaDevice};
use kestrel_tensor::DType;

mod cuda_common;

fn device() -> Option<Arc<CudaDevice>> {
    cuda_common::device("paged-cache")
}

/// Positions a page holds, and pages each sequence maps (48 positions).
const PAGE: usize = 4;
const SEQ_PAGES: usize = 12;

/// `n` page lists of SEQ_PAGES pages each, drawn out of order from a pool of `pool` pages.
fn page_lists(n: usize, pool: usize) -> Vec<Vec<u32>> {
    let mut ids: Vec<u32> = (0..pool as u32).collect();
    // A fixed shuffle (an LCG), so every run maps alike.
    let mut x = 0x2545_f491_u64;
    for i in (1..ids.len()).rev() {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        ids.swap(i, (x >> 33) as usize % (i + 1));
    }
    ids.chunks(SEQ_PAGES).take(n).map(<[u32]>::to_vec).collect()
}

/// The prompt of sequence `i`: 1 + 7i tokens (up to 29: two prefill chunks of 16).
fn prompt(i: usize) -> Vec<u32> {
    (0..1 + 7 * i as u32).map(|j| (j * 41 + 5) % 90).collect()
}

/// Runs `tokens` in the plan's chunks.
fn prefill(plan: &mut CudaPlan, cache: &mut CudaKvCache, tokens: &[u32]) -> Vec<f32> {
    let mut last = Vec::new();
    for chunk in tokens.chunks(plan.max_tokens()) {
        last = plan.run(cache, chunk).unwrap().to_vec();
    }
    last
}

#[test]
fn paged_caches_give_the_bits_of_contiguous_caches() {
    let Some(dev) = device() else { return };
    let (mut paged_archs, mut q8_runs) = (0, 0);
    for (what, bytes) in cuda_common::batch_files() {
        let m = cuda_common::model_of(bytes);
        let cfg = DecoderConfig::from_model(&m).unwrap();
        let g = build_decoder(&cfg, &m, Logits::Last).unwrap();
        let lookup = |n: &str| weight_tensor(&m, n);
        let mut plan = CudaPlan::compile(&g, Arc::clone(&dev), 16, &lookup).unwrap();
        if !plan.can_page() {
            assert!(
                plan.new_pool(8, PAGE).is_err(),
                "{what}: a pool it cannot use"
            );
            continue;
        }
        paged_archs += 1;
        let mut alone = CudaPlan::compile_sharing(&g, &plan, 16, &lookup).unwrap();
        for (graphs, kv, kernel) in [
            (true, DType::F16, AttentionKernel::Auto),
            (false, DType::F16, AttentionKernel::Tiled),
            (true, DType::Q8_0, AttentionKernel::Tiled),
            (true, DType::Q8_0, AttentionKernel::PerToken),
        ] {
            if plan.set_kv_dtype(kv).is_err() {
                continue; // q8_0: a head that is not whole blocks
            }
            alone.set_kv_dtype(kv).unwrap();
            q8_runs += usize::from(kv == DType::Q8_0);
            dev.set_attention_kernel(kernel);
            plan.set_graphs(graphs);
            alone.set_graphs(true);
            let n = 5;
            plan.new_pool((n + 1) * SEQ_PAGES + 3, PAGE).unwrap();
            assert_eq!(plan.pool_pages(), Some(((n + 1) * SEQ_PAGES + 3, PAGE)));
            let lists = page_lists(n + 1, (n + 1) * SEQ_PAGES + 3);
            let mut caches: Vec<CudaKvCache> = (0..n)
                .map(|i| {
                    let mut c = plan.new_paged_cache(SEQ_PAGES * PAGE).unwrap();
                    c.set_pages(&lists[i]).unwrap();
                    assert_eq!(c.capacity(), SEQ_PAGES * PAGE);
                    c
                })
                .collect();
            let mut twins: Vec<_> = (0..n)
                .map(|_| alone.new_cache(SEQ_PAGES * PAGE).unwrap())
                .collect();
            for i in 0..n {
                let p = prompt(i);
                let x = prefill(&mut plan, &mut caches[i], &p);
                let want = prefill(&mut alone, &mut twins[i], &p);
                assert_eq!(x, want, "{what}: {kv} {kernel:?} prompt {i}");
            }
            // Batched steps over changing members, and a lone step (its cache's graph from the
            // third on) after each.
            let steps: [&[usize]; 5] = [&[0, 1, 2, 3, 4], &[3, 1], &[4, 0, 2], &[2], &[1, 3, 0, 4]];
            for (s, seqs) in steps.iter().enumerate() {
                let tokens: Vec<u32> = seqs.iter().map(|&i| (s * 11 + i * 3) as u32 % 90).collect();
                let rows = {
                    let mut picked: Vec<Option<&mut CudaKvCache>> =
                        caches.iter_mut().map(Some).collect();
                    let mut refs: Vec<&mut CudaKvCache> =
                        seqs.iter().map(|&i| picked[i].take().unwrap()).collect();
                    plan.run_batch(&mut refs, &tokens).unwrap().to_vec()
                };
                let width = cfg.n_vocab;
                for (j, &i) in seqs.iter().enumerate() {
                    let want = alone.run(&mut twins[i], &[tokens[j]]).unwrap();
                    assert_eq!(
                        &rows[j * width..(j + 1) * width],
                        want,
                        "{what}: graphs {graphs} {kv} {kernel:?}, step {s}, sequence {i}"
                    );
                }
                let i = seqs[0];
                let one = plan.run(&mut caches[i], &[7]).unwrap().to_vec();
                let want = alone.run(&mut twins[i], &[7]).unwrap();
                assert_eq!(one, want, "{what}: a lone paged step after step {s}");
            }
            assert_eq!(plan.graph_error(), None, "{what}");
            // A prompt sharing sequence 4's first chunk (16 positions: its first four pages,
            // whole prefill chunks of it) starts from them and prefills the rest: the bits of
            // the whole prompt prefilled alone.
            let shared = &lists[4][..16 / PAGE];
            let mut pages = shared.to_vec();
            pages.extend_from_slice(&lists[n][..SEQ_PAGES - shared.len()]);
            let mut c = plan.new_paged_cache(SEQ_PAGES * PAGE).unwrap();
            c.set_pages(&pages).unwrap();
            c.adopt_prefix(16).unwrap();
            let mut p = prompt(4)[..16].to_vec();
            p.extend([9, 8, 7, 6, 5]);
            let x = plan.run(&mut c, &p[16..]).unwrap().to_vec();
            let mut t = alone.new_cache(SEQ_PAGES * PAGE).unwrap();
            assert_eq!(
                x,
                prefill(&mut alone, &mut t, &p),
                "{what}: a shared prefix"
            );
            // Sequence 4 goes on unharmed by the sharer's steps.
            let y = plan.run(&mut caches[4], &[1]).unwrap().to_vec();
            assert_eq!(
                y,
                alone.run(&mut twins[4], &[1]).unwrap(),
                "{what}: the lender"
            );
        }
        dev.set_attention_kernel(AttentionKernel::Auto);
        // Refused: a page outside the pool, more positions than the pages map, fewer pages
        // than the cached positions, copying a paged prefix, stepping below adopted pages, a
        // cache of an earlier pool.
        plan.set_kv_dtype(DType::F16).unwrap();
        plan.new_pool(4, PAGE).unwrap();
        let mut c = plan.new_paged_cache(16).unwrap();
        assert!(c.set_pages(&[4]).is_err(), "{what}: page 4 of 4");
        c.set_pages(&[2]).unwrap();
        assert!(
            plan.run(&mut c, &[1, 2, 3, 4, 5]).is_err(),
            "{what}: past its page"
        );
        plan.run(&mut c, &[1, 2, 3]).unwrap();
        assert!(
            c.set_pages(&[]).is_err(),
            "{what}: unmapping cached positions"
        );
        let mut d = plan.new_paged_cache(16).unwrap();
        d.set_pages(&[0]).unwrap();
        assert!(
            plan.copy_prefix(&c, &mut d, 1).is_err(),
            "{what}: paged copy"
        );
        // A cache that adopted shared pages and was cut below them: refused, not overwriting.
        let mut e = plan.new_paged_cache(16).unwrap();
        e.set_pages(&[2, 3]).unwrap();
        e.adopt_prefix(4).unwrap();
        e.truncate(2);
        assert!(
            plan.run(&mut e, &[1]).is_err(),
            "{what}: writing shared pages"
        );
        plan.new_pool(4, PAGE).unwrap();
        assert!(
            plan.run(&mut c, &[1]).is_err(),
            "{what}: an earlier pool's cache"
        );
        assert!(plan.new_pool(4, 3).is_err(), "{what}: pages of 3");
    }
    assert!(paged_archs > 0, "no architecture took paged caches");
    assert!(q8_runs >= 2, "the real-shaped files took q8_0 pools");
}

/// `CudaPlan::run_batch_picks` (the scheduler's one step for decodes that pick differently):
/// its logits are `run_batch`'s, its argmax the logits' (`cpu::argmax`), its top-k the
/// sampler's rule over them (NaN and -inf out, larger first in `total_cmp`'s order, ties to the
/// lower id), a smaller k the first ones; over paged and contiguous caches in one step.
#[test]
fn one_batched_step_gives_every_pick() {
    let Some(dev) = device() else { return };
    let (_, bytes) = cuda_common::real_shaped().swap_remove(0); // SmolLM2-shaped
    let m = cuda_common::model_of(bytes);
    let cfg = DecoderConfig::from_model(&m).unwrap();
    let g = build_decoder(&cfg, &m, Logits::Last).unwrap();
    let lookup = |n: &str| weight_tensor(&m, n);
    let mut plan = CudaPlan::compile(&g, Arc::clone(&dev), 16, &lookup).unwrap();
    let mut twin = CudaPlan::compile_sharing(&g, &plan, 16, &lookup).unwrap();
    let n = 6;
    plan.new_pool(n * SEQ_PAGES, PAGE).unwrap();
    let lists = page_lists(n, n * SEQ_PAGES);
    // Even sequences paged, odd ones contiguous.
    let mut caches: Vec<CudaKvCache> = (0..n)
        .map(|i| {
            if i % 2 == 1 {
                return plan.new_cache(SEQ_PAGES * PAGE).unwrap();
            }
            let mut c = plan.new_paged_cache(SEQ_PAGES * PAGE).unwrap();
            c.set_pages(&lists[i]).unwrap();
            c
        })
        .collect();
    let mut twins: Vec<_> = (0..n)
        .map(|_| twin.new_cache(SEQ_PAGES * PAGE).unwrap())
        .collect();
    for i in 0..n {
        prefill(&mut plan, &mut caches[i], &prompt(i));
        prefill(&mut twin, &mut twins[i], &prompt(i));
    }
    let width = cfg.n_vocab;
    for step in 0..3u32 {
        let tokens: Vec<u32> = (0..n as u32).map(|i| (step * 17 + i * 5) % 90).collect();
        let want = {
            let mut refs: Vec<&mut CudaKvCache> = twins.iter_mut().collect();
            twin.run_batch(&mut refs, &tokens).unwrap().to_vec()
        };
        let mut refs: Vec<&mut CudaKvCache> = caches.iter_mut().collect();
        // All rows' logits, none, the first two.
        let logits = [n, 0, 2][step as usize];
        let picks = kestrel_graph::Picks {
            argmax: true,
            top_k: Some(40),
            logits,
        };
        let out = plan.run_batch_picks(&mut refs, &tokens, picks).unwrap();
        assert_eq!(out.logits, &want[..logits * width], "step {step}: logits");
        let top = out.top.unwrap();
        for i in 0..n {
            let row = &want[i * width..(i + 1) * width];
            assert_eq!(
                out.argmax[i] as usize,
                kestrel_tensor::cpu::argmax(row).unwrap(),
                "step {step}, row {i}: argmax"
            );
            let mut order: Vec<u32> = (0..width as u32)
                .filter(|&j| !row[j as usize].is_nan() && row[j as usize] != f32::NEG_INFINITY)
                .collect();
            order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
            order.truncate(40);
            let (ids, vals) = top.row(i);
            assert_eq!(ids, &order[..], "step {step}, row {i}: top-40 ids");
            let wv: Vec<f32> = order.iter().map(|&j| row[j as usize]).collect();
            assert_eq!(vals, &wv[..], "step {step}, row {i}: top-40 logits");
        }
    }
    // Refused: k out of range, more logits rows than the step's.
    let mut refs: Vec<&mut CudaKvCache> = caches.iter_mut().collect();
    let bad = kestrel_graph::Picks {
        top_k: Some(0),
        ..Default::default()
    };
    assert!(plan.run_batch_picks(&mut refs, &[1; 6], bad).is_err());
    let bad = kestrel_graph::Picks {
        logits: 7,
        ..Default::default()
    };
    assert!(plan.run_batch_picks(&mut refs, &[1; 6], bad).is_err());
}
