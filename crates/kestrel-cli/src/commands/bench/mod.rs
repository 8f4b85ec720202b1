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
//! - on a GPU, with `tg<N>`: decode's share of the device's memory bandwidth, the weight bytes a
//!   token reads (`kestrel::arch::decode_weight_bytes`) times the median tok/s over the
//!   bandwidth of device-to-device copies timed after the tests (bytes read plus written).
//!
//! - on a GPU, with `--matvec [ROWS,...]` (default 1): the decode step's matmuls by weight group,
//!   each timed alone (`matvec.rs`), after the other tests; `-p 0 -n 0 --matvec` for only them.
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

mod matvec;

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
    /// Also time the decode step's matmuls by weight group, each alone, at these activation
    /// row counts (1 to 64, past 8 quantized weights only; `--matvec` alone: 1). GPU only.
    #[arg(long, value_delimiter = ',', num_args = 0..=1, default_missing_value = "1")]
    pub matvec: Vec<usize>,
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
    if let Some(r) = args
        .matvec
        .iter()
        .find(|&&r| r == 0 || r > matvec::MAX_ROWS)
    {
        return Err(format!(
            "--matvec {r}: row counts must be within 1..={}",
            matvec::MAX_ROWS
        ));
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
    if !args.matvec.is_empty() && gen.cuda_device().is_none() {
        return Err(matvec::NOT_ON_GPU.into());
    }
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
    // The single-sequence decode test, whose weight reads are held against the device's copy
    // bandwidth on a GPU.
    let tg = (args.n_gen > 0).then(|| results.len() - 1);
    if args.n_gen > 0 && args.n_seqs > 1 {
        results.push(batched_decode(gen, args, n_vocab)?);
    }
    let timed = if args.matvec.is_empty() {
        Vec::new()
    } else {
        matvec::time_groups(gen, &args.matvec, args.reps)?
    };
    // Without room for the copy (under 1 MiB of device memory free) the results stand without
    // the bandwidth line, and a note says why.
    let copy = match gen.cuda_device() {
        Some(dev) if tg.is_some() || !timed.is_empty() => match dev.copy_bandwidth(COPY_BYTES) {
            Ok(copy) => Some(copy.bytes_per_s),
            Err(e) => {
                eprintln!("warning: no bandwidth share: measuring the copy bandwidth failed: {e}");
                None
            }
        },
        _ => None,
    };
    // The decode test's median tok/s: its weight reads are held against the copy bandwidth,
    // its step against the matmuls alone.
    let tg_median = tg.map(|i| (i, median_min_max(&results[i].samples_ts()).0));
    let roof = match (tg_median, copy) {
        (Some((i, median)), Some(copy)) => {
            let weights = kestrel::arch::decode_weight_bytes(gen.model(), gen.config());
            Some(Roof::new(i, weights, median, copy))
        }
        _ => None,
    };
    let step_s = tg_median.map(|(_, median)| 1.0 / median.max(1e-9));
    let model_name = args
        .model
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    if args.json {
        let arr: Vec<_> = results
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let ts = r.samples_ts();
                let (avg, std) = mean_std(&ts);
                let (median, min, max) = median_min_max(&ts);
                let ns: Vec<f64> = r.samples_ns.iter().map(|&n| n as f64).collect();
                let (avg_ns, std_ns) = mean_std(&ns);
                let mut obj = json!({
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
                });
                if let Some(roof) = roof.as_ref().filter(|f| f.test == i) {
                    obj["weight_bytes_per_token"] = json!(roof.weight_bytes);
                    obj["copy_bytes_per_s"] = json!(roof.copy_bytes_per_s);
                    obj["bandwidth_fraction"] = json!(roof.fraction());
                }
                obj
            })
            .chain(matvec::json(&timed, copy))
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
    if let Some(roof) = &roof {
        out.push_str(&format!("\n{}\n", roof.line(&results[roof.test].name)));
    }
    if !timed.is_empty() {
        out.push_str(&matvec::table(&timed, copy, step_s));
    }
    print(&out)
}

/// Bytes each timed device-to-device copy moves (at most a quarter of the free memory).
const COPY_BYTES: usize = 1 << 30;

/// Decode's weight reads against the device's copy bandwidth.
struct Roof {
    /// Index of the decode test in the results.
    test: usize,
    weight_bytes: u64,
    /// The decode test's median tok/s.
    tokens_per_s: f64,
    copy_bytes_per_s: f64,
}

impl Roof {
    fn new(test: usize, weight_bytes: u64, tokens_per_s: f64, copy_bytes_per_s: f64) -> Roof {
        Roof {
            test,
            weight_bytes,
            tokens_per_s,
            copy_bytes_per_s,
        }
    }

    /// Weight bytes read a second over the copy bandwidth.
    fn fraction(&self) -> f64 {
        self.weight_bytes as f64 * self.tokens_per_s / self.copy_bytes_per_s.max(1.0)
    }

    fn line(&self, test: &str) -> String {
        let read = self.weight_bytes as f64 * self.tokens_per_s;
        format!(
            "{test}: {:.3} GB of weights a token × {:.2} t/s (median) = {:.0} GB/s, {:.1}% of the \
             device's copy bandwidth ({:.0} GB/s read + write, measured after the tests)",
            self.weight_bytes as f64 / 1e9,
            self.tokens_per_s,
            read / 1e9,
            100.0 * self.fraction(),
            self.copy_bytes_per_s / 1e9,
        )
    }
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
    fn decode_is_held_against_the_copy_bandwidth() {
        // 4.4 GB a token at 330 t/s against 4,250 GB/s: 34.2%.
        let roof = Roof::new(1, 4_400_000_000, 330.0, 4.25e12);
        assert!(
            (roof.fraction() - 0.341_647).abs() < 1e-5,
            "{}",
            roof.fraction()
        );
        let line = roof.line("tg128");
        assert!(
            line.contains("4.400 GB") && line.contains("1452 GB/s"),
            "{line}"
        );
        assert!(
            line.contains("34.2%") && line.contains("4250 GB/s"),
            "{line}"
        );
        assert_eq!(
            Roof::new(0, 1, 1.0, 0.0).fraction(),
            1.0,
            "no division by zero"
        );
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
