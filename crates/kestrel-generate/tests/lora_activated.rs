//! Activated LoRA (aLoRA): an adapter file with `adapter.alora.invocation_tokens` acts only from
//! the last place its invocation sequence starts in the prompt (PEFT's definition). Before it
//! the model is the base model, so those positions' cache is the base's: a session or the
//! prefix cache computed without the adapter is reused, and a prompt without the invocation
//! runs as the base model does. Batched requests with it, without it and with other adapters
//! each get their tokens alone.

mod lora_common;

use std::path::{Path, PathBuf};

use kestrel_arch::synthetic::SYNTHETIC_VOCAB;
use kestrel_generate::{
    logits_of_ids, BatchOptions, BatchRequest, GenerateParams, Generator, LogitsOptions,
};
use kestrel_gguf::GgmlType;
use lora_common::{activated, base, generator, temp_dir};

const NEW: usize = 6;

/// A request's choice of adapters (`None`: the generator's).
type Choice = Option<Vec<(usize, f32)>>;
/// The invocation sequence of the test's activated adapter.
const INVOKE: [u32; 2] = [7, 9];

const TARGETS: [(&str, usize, usize); 4] = [
    ("blk.0.attn_q.weight", 64, 64),
    ("blk.0.attn_v.weight", 64, 32),
    ("blk.1.ffn_down.weight", 128, 64),
    ("output.weight", 64, SYNTHETIC_VOCAB),
];

/// The same adapter twice: ordinary, and activated by [`INVOKE`].
fn adapters(dir: &Path) -> (PathBuf, PathBuf) {
    let plain = dir.join("plain.gguf");
    let act = dir.join("alora.gguf");
    for (p, inv) in [(&plain, &[][..]), (&act, &INVOKE[..])] {
        activated(
            p,
            "llama",
            Some(8.0),
            4,
            &TARGETS,
            77,
            GgmlType::F32,
            0.4,
            inv,
        );
    }
    (plain, act)
}

/// `n` tokens from `seed` that never hold [`INVOKE`].
fn text(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|j| (j * 37 + seed * 11 + 20) % 250 + 5)
        .map(|t| if t == INVOKE[0] { t + 1 } else { t })
        .collect()
}

fn logits(g: &mut Generator, prompt: &[u32]) -> Vec<f32> {
    g.prefill(prompt).unwrap().to_vec()
}

fn greedy(g: &mut Generator, prompt: &[u32], adapters: Choice) -> Vec<u32> {
    lora_common::greedy(g, prompt, adapters, NEW)
}

#[test]
fn an_activated_adapter_acts_from_its_invocation_on() {
    let dir = temp_dir("alora");
    let model = base(&dir, "llama");
    let (plain, act) = adapters(&dir);
    let mut g_base = generator(&model, &[]).unwrap();
    let mut g_plain = generator(&model, &[(plain, 1.0)]).unwrap();
    let mut g = generator(&model, &[(act.clone(), 1.0)]).unwrap();
    assert_eq!(g.adapters()[0].0.invocation_tokens(), INVOKE);

    // No invocation in the prompt: the base model, bit for bit.
    let q = text(9, 1);
    assert_eq!(logits(&mut g, &q), logits(&mut g_base, &q));
    assert_eq!(g.session().adapter_start(0), None);
    // Invoked at the first token: the ordinary adapter everywhere.
    let first: Vec<u32> = INVOKE.iter().copied().chain(text(6, 2)).collect();
    assert_eq!(logits(&mut g, &first), logits(&mut g_plain, &first));

    // Invoked in the middle: neither the base nor the ordinary adapter...
    let p: Vec<u32> = q.iter().chain(&INVOKE).copied().chain(text(4, 3)).collect();
    let fresh = logits(&mut g, &p);
    assert_eq!(g.session().adapter_start(0), Some(q.len()));
    assert_ne!(fresh, logits(&mut g_base, &p));
    assert_ne!(fresh, logits(&mut g_plain, &p));
    // `kestrel logits` (one plan, the step cut at the invocation) gives them too.
    let opts = LogitsOptions {
        threads: 2,
        lora: vec![(act.clone(), 1.0)],
        ..LogitsOptions::default()
    };
    let file = kestrel_gguf::GgufModel::open(&model).unwrap();
    let last = logits_of_ids(&file, &p, &opts).unwrap().pop().unwrap();
    let worst = last
        .iter()
        .zip(&fresh)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "logits_of_ids differs by {worst}");
    // ...but the base model's cache before it: a session that holds `q` computed without the
    // adapter reuses it and gets the same bits.
    let mut s = g.new_session().unwrap();
    g.prefill_in(&mut s, &q).unwrap();
    let reused = g.prefill_in(&mut s, &p).unwrap().to_vec();
    assert_eq!(reused, fresh);
    assert_eq!(s.tokens(), &p[..]);
    // A later turn that invokes it again further on keeps only what precedes the first
    // invocation (the positions after it were computed with the adapter), and matches a
    // fresh run.
    let later: Vec<u32> = p
        .iter()
        .chain(&text(3, 4))
        .chain(&INVOKE)
        .copied()
        .collect();
    let again = g.prefill_in(&mut s, &later).unwrap().to_vec();
    assert_eq!(s.adapter_start(0), Some(later.len() - INVOKE.len()));
    assert_eq!(again, logits(&mut g, &later));

    // Chosen per request: off, or at another scale.
    assert_eq!(
        greedy(&mut g, &p, Some(vec![])),
        greedy(&mut g_base, &p, None)
    );
    assert_ne!(
        greedy(&mut g, &p, Some(vec![(0, 3.0)])),
        greedy(&mut g, &p, Some(vec![(0, 1.0)]))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn batches_with_activated_adapters_match_alone_and_share_the_base_cache() {
    let dir = temp_dir("alora-batch");
    let model = base(&dir, "llama");
    let (plain, act) = adapters(&dir);
    let mut g = generator(&model, &[(act, 1.0), (plain, 0.0)]).unwrap();
    let q = text(7, 5);
    let invoked = |pre: &[u32], post: usize, seed| -> Vec<u32> {
        pre.iter()
            .chain(&INVOKE)
            .copied()
            .chain(text(post, seed))
            .collect()
    };
    let cases: Vec<(Vec<u32>, Choice)> = vec![
        (invoked(&q, 3, 6), None),
        (q.clone(), None),
        (invoked(&q, 3, 6), Some(vec![])),
        (invoked(&text(2, 7), 9, 8), None),
        (invoked(&q, 5, 9), Some(vec![(0, 0.5), (1, 0.5)])),
        (invoked(&[], 6, 10), Some(vec![(1, 1.0)])),
    ];
    let requests = cases
        .iter()
        .map(|(prompt, adapters)| BatchRequest {
            prompt: prompt.clone(),
            params: GenerateParams {
                adapters: adapters.clone(),
                ..GenerateParams::greedy(NEW)
            },
        })
        .collect();
    let opts = BatchOptions {
        max_seqs: 6,
        // Small blocks and steps: prompts are cut into several chunks.
        block_size: 4,
        max_step_tokens: 8,
        ..BatchOptions::default()
    };
    let out = g.batch_generate(requests, &opts).unwrap();
    let mut alone = Vec::new();
    for (i, ((prompt, adapters), got)) in cases.iter().zip(&out).enumerate() {
        let want = greedy(&mut g, prompt, adapters.clone());
        assert_eq!(got.as_ref().unwrap().ids, want, "request {i}");
        alone.push(want);
    }
    // The adapter made a difference where it was invoked, none where it was not.
    assert_ne!(alone[0], alone[2]);

    // The prefix cache: a long prompt without the adapter, then the same prompt invoking it.
    let long = text(30, 11);
    let with = invoked(&long, 4, 12);
    let req = |prompt: &[u32]| BatchRequest {
        prompt: prompt.to_vec(),
        params: GenerateParams::greedy(NEW),
    };
    let first = g.batch_generate(vec![req(&long)], &opts).unwrap();
    assert_eq!(first[0].as_ref().unwrap().metrics.cached_tokens, 0);
    let second = g.batch_generate(vec![req(&with)], &opts).unwrap();
    let second = second[0].as_ref().unwrap();
    // Every whole block before the invocation is reused, nothing after it.
    assert_eq!(second.metrics.cached_tokens, 28);
    assert_eq!(second.ids, greedy(&mut g, &with, None));
    // It published only what precedes its invocation: the same prompt without any adapter
    // reuses those blocks and not the one holding the invocation (computed with the adapter).
    let off = BatchRequest {
        prompt: with.clone(),
        params: GenerateParams {
            adapters: Some(vec![]),
            ..GenerateParams::greedy(NEW)
        },
    };
    let third = g.batch_generate(vec![off], &opts).unwrap();
    assert_eq!(third[0].as_ref().unwrap().metrics.cached_tokens, 28);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn speculation_verifies_at_the_scales_after_the_prompt() {
    let dir = temp_dir("alora-spec");
    let model = base(&dir, "llama");
    let (_, act) = adapters(&dir);
    let mut g = generator(&model, &[(act.clone(), 1.0)]).unwrap();
    // The same model and adapter as the draft: every draft is kept when the target verifies
    // at the scales the draft ran at.
    let mut draft = generator(&model, &[(act, 1.0)]).unwrap();
    let mut g_base = generator(&model, &[]).unwrap();
    let q = text(6, 13);
    let invoked: Vec<u32> = q.iter().chain(&INVOKE).chain(&q).copied().collect();
    for (prompt, want) in [
        (&invoked, greedy(&mut g, &invoked, None)),
        // Not invoked: verified without the adapter, as the base model.
        (&q, greedy(&mut g_base, &q, None)),
    ] {
        let (got, stats) = g
            .generate_speculative(&mut draft, prompt, NEW, 4, &mut |_| Ok(true))
            .unwrap();
        assert_eq!(got.ids, want);
        assert_eq!(stats.accepted, stats.drafted, "{stats:?}");
        assert!(stats.drafted > 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_invocations_are_refused() {
    let dir = temp_dir("alora-bad");
    let model = base(&dir, "llama");
    let p = dir.join("past-vocab.gguf");
    activated(
        &p,
        "llama",
        Some(8.0),
        4,
        &TARGETS,
        77,
        GgmlType::F32,
        0.4,
        &[3, SYNTHETIC_VOCAB as u32],
    );
    let err = generator(&model, &[(p, 1.0)]).unwrap_err();
    assert!(err.contains("invocation sequence holds token 256"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
