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

fn generator(file: &str, ctx: usize) -> Option<Generator> {
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
    // All eight ran together: the whole batch took far fewer steps than its tokens.
    let s = g.scheduler(&opts).unwrap();
    assert_eq!(s.pool_stats().free_blocks, s.pool_stats().total_blocks);
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
    assert_eq!((st.free_blocks, st.sequences), (total, 0), "blocks leaked");
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
