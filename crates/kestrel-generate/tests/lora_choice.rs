//! LoRA adapters chosen per request: one generator loaded with three adapters runs a batch of
//! eight sequences that use different adapters (and none) at different scales, and each gets
//! the tokens it gets alone from a generator loaded with just its adapters; single generations
//! choose theirs the same way; changing the generator's scales at run time (llama-server's
//! `POST /lora-adapters`) takes effect without reusing caches computed at the old ones; bad
//! choices are refused.

mod lora_common;

use std::path::{Path, PathBuf};

use kestrel_arch::synthetic::SYNTHETIC_VOCAB;
use kestrel_generate::{BatchOptions, BatchRequest, GenerateError, GenerateParams, Generator};
use kestrel_gguf::GgmlType;
use lora_common::{adapter, base, generator, temp_dir};

const NEW: usize = 8;

/// An adapter's alpha, rank, targets (`(weight, in, out)`) and `lora_b` type.
type Spec = (
    Option<f32>,
    usize,
    &'static [(&'static str, usize, usize)],
    GgmlType,
);

/// Three adapters of different ranks, alphas, `lora_b` types and targets.
fn adapters(dir: &Path) -> Vec<PathBuf> {
    let specs: [Spec; 3] = [
        (
            Some(8.0),
            4,
            &[
                ("blk.0.attn_q.weight", 64, 64),
                ("blk.1.ffn_down.weight", 128, 64),
                ("output.weight", 64, SYNTHETIC_VOCAB),
            ],
            GgmlType::F32,
        ),
        (
            None,
            2,
            &[
                ("blk.0.attn_v.weight", 64, 32),
                ("blk.1.attn_output.weight", 64, 64),
                ("token_embd.weight", 64, SYNTHETIC_VOCAB),
            ],
            GgmlType::F16,
        ),
        (
            Some(16.0),
            8,
            &[
                ("blk.0.attn_q.weight", 64, 64),
                ("blk.0.ffn_up.weight", 64, 128),
                ("blk.1.attn_k.weight", 64, 32),
            ],
            GgmlType::F32,
        ),
    ];
    specs
        .iter()
        .enumerate()
        .map(|(i, &(alpha, rank, targets, b_type))| {
            let p = dir.join(format!("a{i}.gguf"));
            adapter(
                &p,
                "llama",
                alpha,
                rank,
                targets,
                40 + i as u64,
                b_type,
                0.3,
            );
            p
        })
        .collect()
}

fn prompt(i: usize) -> Vec<u32> {
    (0..3 + 2 * i as u32)
        .map(|j| (j * 37 + i as u32 * 11 + 5) % 256)
        .collect()
}

/// Greedy tokens of `prompt` generated alone.
fn alone(g: &mut Generator, prompt: &[u32], adapters: Option<Vec<(usize, f32)>>) -> Vec<u32> {
    lora_common::greedy(g, prompt, adapters, NEW)
}

#[test]
fn a_batch_with_three_adapters_and_none_gives_each_sequence_its_tokens_alone() {
    let dir = temp_dir("choice");
    let model = base(&dir, "llama");
    let files = adapters(&dir);
    let loaded: Vec<(PathBuf, f32)> = files.iter().map(|p| (p.clone(), 1.0)).collect();
    let mut g = generator(&model, &loaded).unwrap();
    // Each request's adapters (by index) and scales; `None`: the generator's (all three at 1).
    let choices: [Option<Vec<(usize, f32)>>; 8] = [
        Some(vec![]),
        Some(vec![(0, 1.0)]),
        Some(vec![(1, 0.5)]),
        Some(vec![(2, 2.0)]),
        Some(vec![(0, 1.0), (2, 0.7)]),
        None,
        Some(vec![(1, -1.0)]),
        Some(vec![(0, 1.0)]),
    ];
    let requests: Vec<BatchRequest> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| BatchRequest {
            prompt: prompt(i),
            params: GenerateParams {
                adapters: c.clone(),
                ..GenerateParams::greedy(NEW)
            },
        })
        .collect();
    let batch = BatchOptions {
        max_seqs: 8,
        ..BatchOptions::default()
    };
    let out = g.batch_generate(requests, &batch).unwrap();
    let mut distinct = std::collections::HashSet::new();
    for (i, (choice, got)) in choices.iter().zip(&out).enumerate() {
        let got = got.as_ref().unwrap().ids.clone();
        // A generator loaded with only this request's adapters, at its scales.
        let own: Vec<(PathBuf, f32)> = match choice {
            None => loaded.clone(),
            Some(c) => c.iter().map(|&(k, s)| (files[k].clone(), s)).collect(),
        };
        let want = alone(&mut generator(&model, &own).unwrap(), &prompt(i), None);
        assert_eq!(
            got, want,
            "request {i} ({choice:?}): batched differs from alone"
        );
        // The same choice made per request on the three-adapter generator, alone.
        let same = alone(&mut g, &prompt(i), choice.clone());
        assert_eq!(
            same, want,
            "request {i} ({choice:?}): per-request choice alone"
        );
        distinct.insert(alone(&mut g, &prompt(0), choice.clone()));
    }
    // The adapters change what is generated (a test that could not fail otherwise).
    assert!(
        distinct.len() >= 4,
        "only {} distinct outputs",
        distinct.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scales_change_at_run_time_and_bad_choices_are_refused() {
    let dir = temp_dir("scales");
    let model = base(&dir, "llama");
    let files = adapters(&dir);
    let mut g = generator(&model, &[(files[0].clone(), 1.0), (files[2].clone(), 0.0)]).unwrap();
    let plain = alone(&mut generator(&model, &[]).unwrap(), &prompt(3), None);
    let first = alone(
        &mut generator(&model, &[(files[0].clone(), 1.0)]).unwrap(),
        &prompt(3),
        None,
    );
    assert_ne!(plain, first);
    // The default session holds the prompt at scales (1, 0); a request without adapters on the
    // same prompt must not reuse that cache.
    assert_eq!(alone(&mut g, &prompt(3), None), first);
    assert_eq!(alone(&mut g, &prompt(3), Some(vec![])), plain);
    assert_eq!(alone(&mut g, &prompt(3), None), first);
    // Set at run time: the second adapter alone at 0.6.
    g.set_adapter_scales(&[0.0, 0.6]).unwrap();
    assert_eq!(g.adapters()[1].1, 0.6);
    let second = alone(
        &mut generator(&model, &[(files[2].clone(), 0.6)]).unwrap(),
        &prompt(3),
        None,
    );
    assert_eq!(alone(&mut g, &prompt(3), None), second);
    // The batch (its prefix cache was filled at the old scales) follows too.
    let req = |adapters| BatchRequest {
        prompt: prompt(3),
        params: GenerateParams {
            adapters,
            ..GenerateParams::greedy(NEW)
        },
    };
    g.set_adapter_scales(&[1.0, 0.0]).unwrap();
    let out = g
        .batch_generate(vec![req(None), req(Some(vec![]))], &BatchOptions::default())
        .unwrap();
    assert_eq!(out[0].as_ref().unwrap().ids, first);
    assert_eq!(out[1].as_ref().unwrap().ids, plain);
    g.set_adapter_scales(&[0.0, 0.6]).unwrap();
    let out = g
        .batch_generate(vec![req(None)], &BatchOptions::default())
        .unwrap();
    assert_eq!(out[0].as_ref().unwrap().ids, second);

    // Refusals, each naming what is wrong.
    let refused = |g: &mut Generator, c: Vec<(usize, f32)>| {
        let params = GenerateParams {
            adapters: Some(c),
            ..GenerateParams::greedy(2)
        };
        match g.iter(&prompt(1), &params) {
            Err(GenerateError::InvalidOption { name, reason }) => format!("{name}: {reason}"),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("accepted"),
        }
    };
    assert!(refused(&mut g, vec![(2, 1.0)]).contains("adapter 2 asked for"));
    assert!(refused(&mut g, vec![(0, f32::NAN)]).contains("not a finite number"));
    assert!(g.set_adapter_scales(&[1.0]).is_err());
    assert!(g.set_adapter_scales(&[1.0, f32::INFINITY]).is_err());
    let mut plain_g = generator(&model, &[]).unwrap();
    assert!(refused(&mut plain_g, vec![(0, 1.0)]).contains("the model has 0"));
    // No adapters chosen on a model without any is the model itself.
    assert_eq!(alone(&mut plain_g, &prompt(3), Some(vec![])), plain);
    let _ = std::fs::remove_dir_all(&dir);
}
