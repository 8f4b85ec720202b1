//! Continuous batching on the real models: batched greedy output equals single-sequence greedy
//! output for every sequence, and a stream of many requests through a small block pool all
//! complete, in bounded time, with every block back in the pool.

use std::sync::Arc;

use kestrel_generate::{
    BatchEvent, BatchOptions, BatchRequest, FinishReason, GenerateParams, Generator,
    GeneratorOptions,
};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;
use kestrel_tokenizer::EncodeOptions;

/// Whether this file runs with every q8_0-family matrix packed (`KESTREL_REPACK=all`): true
/// in `batch_repack_all.rs`, which includes this file.
#[allow(dead_code)]
const REPACK_ALL: bool = false;

fn generator(file: &str, ctx: usize) -> Option<Generator> {
    if crate::REPACK_ALL {
        // Every test of the binary sets the same value before its model is packed.
        std::env::set_var("KESTREL_REPACK", "all");
    }
    let model = Arc::new(GgufModel::open(test_model(file)?).unwrap());
    let opts = GeneratorOptions {
        threads: 2,
        ctx,
        ..GeneratorOptions::default()
    };
    Some(Generator::new(model, opts).unwrap())
}

const TEXTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "def fibonacci(n):",
    "Water boils at",
    "The three primary colors are red, blue and",
    "In 1969, the first humans walked on the moon. The mission was called Apollo 11, and the astronauts were",
    "Q: What is 12 times 12?\nA:",
    "List of fruits: apple, banana,",
];

fn prompts(g: &Generator) -> Vec<Vec<u32>> {
    let tok = g.tokenizer().unwrap();
    TEXTS
        .iter()
        .map(|t| tok.encode(t, EncodeOptions::default()).unwrap())
        .collect()
}

fn batched_greedy_equals_single(file: &str) {
    let Some(mut g) = generator(file, 256) else {
        return;
    };
    let prompts = prompts(&g);
    let n_new = 24;
    let single: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| g.generate_ids(p, n_new, &mut |_| Ok(true)).unwrap().ids)
        .collect();
    let requests: Vec<BatchRequest> = prompts
        .iter()
        .map(|p| BatchRequest {
            prompt: p.clone(),
            params: GenerateParams::greedy(n_new),
        })
        .collect();
    let opts = BatchOptions::default();
    let mut streamed = vec![Vec::new(); 8];
    let out = g
        .batch_generate_stream(requests, &opts, &mut |i, t| {
            streamed[i].push(t.id);
            Ok::<(), kestrel_generate::StreamError>(())
        })
        .unwrap();
    for (i, (want, got)) in single.iter().zip(&out).enumerate() {
        let got = got.as_ref().unwrap();
        assert_eq!(&got.ids, want, "{file}: prompt {i} ({:?})", TEXTS[i]);
        assert_eq!(&streamed[i], want);
        assert!(matches!(
            got.finish,
            FinishReason::Length | FinishReason::EndOfGeneration
        ));
    }
    // Every block is back: free, or kept only by the prefix cache.
    let st = g.scheduler(&opts).unwrap().pool_stats();
    assert_eq!(st.free_blocks + st.cached_blocks, st.total_blocks);
    assert_eq!(st.sequences, 0);
}

#[test]
fn batched_greedy_equals_single_sequence_smollm2() {
    batched_greedy_equals_single(SMOLLM2_135M_Q4_1);
}

#[test]
fn batched_greedy_equals_single_sequence_gemma3() {
    batched_greedy_equals_single(GEMMA3_270M_Q4_K_M);
}

/// 200 requests of random prompt and output lengths through a pool of 24 blocks of 16 tokens
/// (about 4 of the largest requests fit at once): every request completes within its budget
/// (exactly the budget unless it produced an end-of-generation token), no block leaks, and no
/// request is overtaken by later ones (FIFO admission, so none starves).
#[test]
fn two_hundred_requests_through_a_small_pool() {
    let Some(mut g) = generator(SMOLLM2_135M_Q4_1, 512) else {
        return;
    };
    let opts = BatchOptions {
        max_seqs: 6,
        max_step_tokens: 64,
        block_size: 16,
        kv_blocks: 24,
        prefix_cache: true,
    };
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n) as usize
    };
    let mut s = g.scheduler(&opts).unwrap();
    let total = s.pool_stats().total_blocks;
    let mut budgets = Vec::new();
    for _ in 0..200 {
        let plen = 1 + next(40);
        let prompt: Vec<u32> = (0..plen).map(|_| 100 + next(40_000) as u32).collect();
        let max_new = 1 + next(16);
        budgets.push(max_new);
        s.submit(BatchRequest {
            prompt,
            params: GenerateParams::greedy(max_new),
        })
        .unwrap();
    }
    // A request that can never fit (400 + 28 tokens > 24 blocks of 16) is refused at once.
    let too_big = s.submit(BatchRequest {
        prompt: vec![100; 400],
        params: GenerateParams::greedy(28),
    });
    assert!(
        matches!(too_big, Err(kestrel_generate::GenerateError::Kv(_))),
        "{too_big:?}"
    );
    let mut done = vec![None; 200];
    let mut first_token_step = vec![None; 200];
    let mut steps = 0u64;
    while !s.is_idle() {
        let step = steps;
        s.step(&mut |ev| match ev {
            BatchEvent::Token(id, _) => {
                first_token_step[id].get_or_insert(step);
            }
            BatchEvent::Done(id, r) => done[id] = Some(r.unwrap()),
        })
        .unwrap();
        steps += 1;
        assert!(steps < 5_000, "the scheduler does not finish");
    }
    for (id, c) in done.iter().enumerate() {
        let c = c
            .as_ref()
            .unwrap_or_else(|| panic!("request {id} never finished"));
        assert!(c.ids.len() <= budgets[id] && !c.ids.is_empty());
        if c.finish == FinishReason::Length {
            assert_eq!(c.ids.len(), budgets[id]);
        }
    }
    let st = s.pool_stats();
    assert_eq!(
        (st.free_blocks + st.cached_blocks, st.sequences),
        (total, 0),
        "blocks leaked: {st:?}"
    );
    // FIFO admission: request i gets its first token no later than request i + max_seqs' does,
    // give or take one step of chunked prefill.
    let firsts: Vec<u64> = first_token_step.iter().map(|s| s.unwrap()).collect();
    for i in 0..200 - opts.max_seqs {
        assert!(
            firsts[i] <= firsts[i + opts.max_seqs] + 4,
            "request {i} overtaken: {} vs {}",
            firsts[i],
            firsts[i + opts.max_seqs]
        );
    }
    eprintln!("200 requests in {steps} steps");
}

/// A shared 500-token system prompt: the second request reuses the first one's KV blocks, so
/// its time to first token is a fraction of the first's, and its output is the same as without
/// the prefix cache.
#[test]
fn shared_system_prompt_is_prefilled_once() {
    let Some(mut g) = generator(SMOLLM2_135M_Q4_1, 1024) else {
        return;
    };
    let tok = g.tokenizer().unwrap().clone();
    let enc = |t: &str| tok.encode(t, EncodeOptions::default()).unwrap();
    let mut system =
        enc(&"You are a careful assistant who answers briefly and truthfully. ".repeat(60));
    system.truncate(500);
    let request = |user: &str| {
        let mut prompt = system.clone();
        prompt.extend(enc(user));
        BatchRequest {
            prompt,
            params: GenerateParams::greedy(6),
        }
    };
    let run = |g: &mut Generator, opts: &BatchOptions, req: BatchRequest| {
        let mut out = g.batch_generate(vec![req], opts).unwrap();
        out.pop().unwrap().unwrap()
    };
    let opts = BatchOptions::default();
    let first = run(&mut g, &opts, request(" What is the capital of France?"));
    let second = run(&mut g, &opts, request(" Name a prime number."));
    let (t1, t2) = (
        first.metrics.time_to_first_token,
        second.metrics.time_to_first_token,
    );
    eprintln!(
        "ttft first {t1:?}, second {t2:?} ({:.1}%), cached {} of {}",
        100.0 * t2.as_secs_f64() / t1.as_secs_f64(),
        second.metrics.cached_tokens,
        second.metrics.prompt_tokens
    );
    assert_eq!(first.metrics.cached_tokens, 0);
    assert_eq!(second.metrics.cached_tokens, 496); // 31 whole blocks of 16
    assert!(
        t2.as_secs_f64() <= 0.2 * t1.as_secs_f64(),
        "{t1:?} then {t2:?}"
    );
    let st = g.scheduler(&opts).unwrap().pool_stats();
    assert!(st.prefix.hit_blocks >= 31, "{st:?}");
    // Same tokens as a run without the prefix cache.
    let cold = BatchOptions {
        prefix_cache: false,
        ..BatchOptions::default()
    };
    let again = run(&mut g, &cold, request(" Name a prime number."));
    assert_eq!(again.ids, second.ids);
    assert_eq!(again.metrics.cached_tokens, 0);
}
