//! `kestrel bench -m MODEL [-p 512] [-n 128] [-d 0] [-t N] [-r 5] [--json]`: llama-bench's two
//! tests.
//!
//! - `pp<P>` (prompt processing): `P` tokens (BOS, then pseudo-random ids, as llama-bench
//!   makes them) in prefill steps of `--batch`, from an empty cache; tok/s = P / time.
//! - `tg<N>` (text generation): `N` single-token steps from an empty cache (the first token
//!   BOS), each through the decode plan; tok/s = N / time.
//!
//! - with `-d D` (llama-bench's `--n-depth`), both run after D tokens already in the cache
//!   (prefilled once, not timed; each repetition drops what the last one added): `pp<P> @ d<D>`,
//!   `tg<N> @ d<D>`, decode speed at a long context.
//!
//! - with `--batch B` (B > 1), `tg<N>@b<B>`: B sequences decoded together through the
//!   continuous-batching scheduler (one forward pass per step for all of them, end-of-generation
//!   banned so each makes N tokens); tok/s = B·N / time, the aggregate throughput.
//!
//! Each test runs once to warm up, then `-r` times; the table shows the mean ± standard
//! deviation as llama-bench does, and the median, min and max. `--json` prints an array with
//! one object per test, with llama-bench's field names (`n_prompt`, `n_gen`, `n_threads`,
//! `n_batch`, `avg_ts`, `stddev_ts`, `samples_ts`, `samples_ns`, ...) plus `median_ts`,
//! `min_ts`, `max_ts`.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use kestrel::{LoadOptions, Model};
use serde_json::json;

use crate::output::print;

/// Largest `-p`, `-n`, `-r` accepted (a typo must not run for hours or size a huge cache).
const MAX_TOKENS: usize = 1 << 16;
const MAX_REPS: usize = 1000;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Prompt tokens of the pp test (0: skip it).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens of the tg test (0: skip it).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Tokens already in the context when each test runs (llama-bench's `--n-depth`).
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    pub depth: usize,
    /// Threads (0: all cores).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
    /// Prompt tokens per prefill step.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch: usize,
    /// Concurrent sequences of the batched decode test (1: no batched test).
    #[arg(long = "batch", default_value_t = 1)]
    pub n_seqs: usize,
    /// Measured repetitions of each test (after one warm-up run).
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Where to run: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// LoRA adapters.
    #[command(flatten)]
    pub lora: super::lora_args::LoraArgs,
}

/// One test's samples.
struct TestResult {
    name: String,
    n_prompt: usize,
    n_gen: usize,
    samples_ns: Vec<u64>,
    tokens: usize,
}

impl TestResult {
    fn samples_ts(&self) -> Vec<f64> {
        self.samples_ns
            .iter()
            .map(|&ns| self.tokens as f64 * 1e9 / ns.max(1) as f64)
            .collect()
    }
}

/// Mean and sample standard deviation.
fn mean_std(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (v.len() - 1) as f64;
    (mean, var.sqrt())
}

/// Median, min, max.
fn median_min_max(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (median, s[0], s[n - 1])
}

/// Brings `session` back to holding exactly `prefix` (the depth tokens), outside the timing:
/// what the last repetition added is dropped, and the prefix is prefilled when the session does
/// not hold it (the first time, or a recurrent state that could not go back).
fn to_depth(
    gen: &mut kestrel::generate::Generator,
    session: &mut kestrel::generate::Session,
    prefix: &[u32],
) -> Result<(), String> {
    session.truncate(prefix.len());
    if session.tokens() != prefix {
        gen.prefill_in(session, prefix).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// llama-bench's prompt: BOS, then `std::rand() % n_vocab`-like ids (here a fixed LCG).
fn prompt_ids(n: usize, n_vocab: usize, bos: Option<u32>) -> Vec<u32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            if i == 0 {
                if let Some(b) = bos {
                    return b;
                }
            }
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % n_vocab.max(1) as u64) as u32
        })
        .collect()
}

pub fn run(args: &BenchArgs) -> Result<(), String> {
    for (what, v, max) in [
        ("--n-prompt", args.n_prompt, MAX_TOKENS),
        ("--n-gen", args.n_gen, MAX_TOKENS),
        ("--n-depth", args.depth, MAX_TOKENS),
        ("--repetitions", args.reps, MAX_REPS),
    ] {
        if v > max {
            return Err(format!("{what} {v}: at most {max}"));
        }
    }
    if args.reps == 0 {
        return Err("--repetitions must be at least 1".into());
    }
    if args.batch == 0 {
        return Err("--batch-size must be at least 1".into());
    }
    if args.n_seqs == 0 || args.n_seqs > 256 {
        return Err(format!("--batch {}: must be within 1..=256", args.n_seqs));
    }
    let ctx = args.depth + args.n_prompt.max(args.n_gen + 1).max(1);
    let load = LoadOptions {
        threads: args.threads,
        ctx,
        batch: args.batch.min(ctx),
        device: args.device.clone(),
        lora: args.lora.adapters()?,
        ..LoadOptions::default()
    };
    let mut model = Model::load_file(&args.model, load).map_err(|e| e.to_string())?;
    super::model_args::note_device(&model);
    // The backend and the path it took: the CPU's ISA, or the GPU.
    let (backend, isa) = match model.device() {
        kestrel::tensor::Device::Cpu => ("CPU", kestrel_tensor_isa().to_string()),
        d => ("CUDA", d.to_string()),
    };
    let bos = model.tokenizer().special_tokens().bos;
    let n_vocab = model.generator().config().n_vocab;
    let threads = if args.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        args.threads
    };
    let gen = model.generator_mut();
    let mut results = Vec::new();
    let depth = args.depth;
    let at = if depth > 0 {
        format!(" @ d{depth}")
    } else {
        String::new()
    };
    // At a depth, every test continues one session holding the same first `depth` tokens.
    let mut deep = if depth > 0 {
        Some(gen.new_session().map_err(|e| e.to_string())?)
    } else {
        None
    };
    if args.n_prompt > 0 {
        let ids = prompt_ids(depth + args.n_prompt, n_vocab, bos);
        let mut samples = Vec::with_capacity(args.reps);
        for rep in 0..=args.reps {
            if let Some(s) = deep.as_mut() {
                to_depth(gen, s, &ids[..depth])?;
            }
            let t = Instant::now();
            match deep.as_mut() {
                Some(s) => gen.prefill_in(s, &ids).map(|_| ()),
                None => gen.prefill(&ids).map(|_| ()),
            }
            .map_err(|e| e.to_string())?;
            let ns = t.elapsed().as_nanos() as u64;
            if rep > 0 {
                samples.push(ns);
            }
        }
        results.push(TestResult {
            name: format!("pp{}{at}", args.n_prompt),
            n_prompt: args.n_prompt,
            n_gen: 0,
            samples_ns: samples,
            tokens: args.n_prompt,
        });
    }
    if args.n_gen > 0 {
        let ids = prompt_ids(depth + args.n_gen, n_vocab, bos);
        let mut samples = Vec::with_capacity(args.reps);
        for rep in 0..=args.reps {
            if let Some(s) = deep.as_mut() {
                to_depth(gen, s, &ids[..depth])?;
            }
            let t = Instant::now();
            match deep.as_mut() {
                Some(s) => {
                    gen.prefill_in(s, &ids[..=depth])
                        .map_err(|e| e.to_string())?;
                    for &id in &ids[depth + 1..] {
                        gen.step_in(s, id).map_err(|e| e.to_string())?;
                    }
                }
                None => {
                    gen.prefill(&ids[..1]).map_err(|e| e.to_string())?;
                    for &id in &ids[1..] {
                        gen.step(id).map_err(|e| e.to_string())?;
                    }
                }
            }
            let ns = t.elapsed().as_nanos() as u64;
            if rep > 0 {
                samples.push(ns);
            }
        }
        results.push(TestResult {
            name: format!("tg{}{at}", args.n_gen),
            n_prompt: 0,
            n_gen: args.n_gen,
            samples_ns: samples,
            tokens: args.n_gen,
        });
    }
    if args.n_gen > 0 && args.n_seqs > 1 {
        results.push(batched_decode(gen, args, n_vocab)?);
    }
    let model_name = args
        .model
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    if args.json {
        let arr: Vec<_> = results
            .iter()
            .map(|r| {
                let ts = r.samples_ts();
                let (avg, std) = mean_std(&ts);
                let (median, min, max) = median_min_max(&ts);
                let ns: Vec<f64> = r.samples_ns.iter().map(|&n| n as f64).collect();
                let (avg_ns, std_ns) = mean_std(&ns);
                json!({
                    "model": model_name,
                    "model_filename": args.model.display().to_string(),
                    "backend": backend,
                    "isa": isa,
                    "test": r.name,
                    "n_prompt": r.n_prompt,
                    "n_gen": r.n_gen,
                    "n_threads": threads,
                    "n_batch": args.batch,
                    "repetitions": args.reps,
                    "avg_ns": avg_ns as u64,
                    "stddev_ns": std_ns as u64,
                    "avg_ts": avg,
                    "stddev_ts": std,
                    "median_ts": median,
                    "min_ts": min,
                    "max_ts": max,
                    "samples_ns": r.samples_ns,
                    "samples_ts": ts,
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&arr).map_err(|e| e.to_string())?;
        return print(&format!("{text}\n"));
    }
    let mut out = String::from(
        "| model | threads | isa | test | t/s (mean ± sd) | median | min | max |\n\
         | --- | ---: | --- | --- | ---: | ---: | ---: | ---: |\n",
    );
    for r in &results {
        let ts = r.samples_ts();
        let (avg, std) = mean_std(&ts);
        let (median, min, max) = median_min_max(&ts);
        out.push_str(&format!(
            "| {model_name} | {threads} | {isa} | {} | {avg:.2} ± {std:.2} | {median:.2} | {min:.2} | {max:.2} |\n",
            r.name
        ));
    }
    print(&out)
}

/// The batched decode test: `--batch` sequences of one prompt token and `-n` generated tokens
/// each, all through one scheduler.
fn batched_decode(
    gen: &mut kestrel::generate::Generator,
    args: &BenchArgs,
    n_vocab: usize,
) -> Result<TestResult, String> {
    use kestrel::generate::{BatchOptions, BatchRequest, GenerateParams};
    let b = args.n_seqs;
    let ids = prompt_ids(b + 1, n_vocab, None);
    let ban: Vec<(u32, f32)> = gen
        .stop_ids()
        .iter()
        .map(|&id| (id, f32::NEG_INFINITY))
        .collect();
    let opts = BatchOptions {
        max_seqs: b,
        max_step_tokens: b.max(args.batch),
        ..BatchOptions::default()
    };
    let mut samples = Vec::with_capacity(args.reps);
    for rep in 0..=args.reps {
        let requests: Vec<BatchRequest> = (0..b)
            .map(|i| {
                let mut params = GenerateParams::greedy(args.n_gen);
                params.sampling.logit_bias = ban.clone();
                BatchRequest {
                    prompt: vec![ids[i + 1]],
                    params,
                }
            })
            .collect();
        let t = Instant::now();
        let out = gen
            .batch_generate(requests, &opts)
            .map_err(|e| e.to_string())?;
        let ns = t.elapsed().as_nanos() as u64;
        for r in out {
            let c = r.map_err(|e| e.to_string())?;
            if c.ids.len() != args.n_gen {
                return Err(format!(
                    "a batched sequence made {} tokens, not {}",
                    c.ids.len(),
                    args.n_gen
                ));
            }
        }
        if rep > 0 {
            samples.push(ns);
        }
    }
    Ok(TestResult {
        name: format!("tg{}@b{b}", args.n_gen),
        n_prompt: 0,
        n_gen: args.n_gen,
        samples_ns: samples,
        tokens: b * args.n_gen,
    })
}

/// The CPU kernels' instruction set in use.
fn kestrel_tensor_isa() -> &'static str {
    kestrel::cpu_isa()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        let (m, s) = mean_std(&[1.0, 2.0, 3.0, 4.0]);
        assert!((m - 2.5).abs() < 1e-12);
        assert!((s - 1.290_994_448_735_805_6).abs() < 1e-12);
        assert_eq!(median_min_max(&[5.0, 1.0, 3.0]), (3.0, 1.0, 5.0));
        assert_eq!(median_min_max(&[4.0, 1.0, 3.0, 2.0]), (2.5, 1.0, 4.0));
        assert_eq!(mean_std(&[7.0]), (7.0, 0.0));
    }

    #[test]
    fn prompt_starts_with_bos_and_stays_in_vocab() {
        let p = prompt_ids(100, 50, Some(7));
        assert_eq!(p[0], 7);
        assert!(p.iter().all(|&t| t < 50));
        assert_eq!(p, prompt_ids(100, 50, Some(7)));
        assert_ne!(prompt_ids(3, 50, None)[0], 7);
    }
}
