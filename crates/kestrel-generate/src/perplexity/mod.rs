//! Perplexity and KL divergence as llama-perplexity computes them: non-overlapping windows of
//! `n_ctx` tokens, each from an empty cache with its first token replaced by BOS where the
//! model adds one, scoring the predictions of the second half of each window.
//!
//! - [`Generator::perplexity`]: the perplexity of a text;
//! - [`Generator::kl_divergence_base`]: the same, writing every scored position's
//!   log-probabilities to llama.cpp's file format ([`LogProbWriter`]);
//! - [`Generator::kl_divergence`]: this model's distributions against such a file (written by
//!   kestrel or by `llama-perplexity --kl-divergence-base`), with llama.cpp's statistics
//!   ([`KlDivergence`]).

mod kld;
mod logprob_file;

use std::io::{Read, Write};

use kestrel_arch::Logits;
use kestrel_graph::{ActivationHook, CudaKvCache, CudaPlan, ExecutionPlan};

pub use kld::{Estimate, KlDivergence, KldAccumulator, Percentiles};
pub use logprob_file::{LogProbHeader, LogProbReader, LogProbRow, LogProbWriter};

use crate::core::Plans;
use crate::{GenerateError, Generator};
use logprob_file::scored_rows;

/// Perplexity over a text, computed as llama-perplexity does.
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// exp(mean negative log-likelihood).
    pub ppl: f64,
    /// Its standard error.
    pub err: f64,
    /// Windows evaluated.
    pub chunks: usize,
    /// Tokens scored.
    pub scored: usize,
}

/// Sums of negative log-likelihoods, in the order positions are scored.
#[derive(Default)]
pub(crate) struct NllSum {
    nll: f64,
    nll2: f64,
    count: usize,
}

impl NllSum {
    pub(crate) fn add(&mut self, v: f64) {
        self.nll += v;
        self.nll2 += v * v;
        self.count += 1;
    }

    /// Adds the scored positions of a window (see [`scored`]).
    pub(crate) fn add_window(&mut self, window: &[u32], logits: &[f32], n_vocab: usize) {
        for (j, row) in scored(window, logits, n_vocab) {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
            let s: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
            let logp = row
                .get(window[j + 1] as usize)
                .map(|&x| x as f64 - max - s.ln())
                .unwrap_or(f64::NEG_INFINITY);
            self.add(-logp);
        }
    }

    pub(crate) fn finish(&self, chunks: usize) -> Perplexity {
        let mean = self.nll / self.count as f64;
        let var = self.nll2 / self.count as f64 - mean * mean;
        let ppl = mean.exp();
        let err = if var > 0.0 && self.count > 1 {
            (var / (self.count - 1) as f64).sqrt() * ppl
        } else {
            0.0
        };
        Perplexity {
            ppl,
            err,
            chunks,
            scored: self.count,
        }
    }
}

/// Rows of a window whose KL divergence is computed together (read from the file, then split
/// over the engine's threads): 16 rows of a 262k vocabulary are 8 MiB.
const KLD_ROWS: usize = 16;

impl Generator {
    /// Perplexity of `tokens` as llama-perplexity computes it: non-overlapping windows of
    /// `n_ctx` tokens, each from an empty cache, the first token of each window replaced by
    /// `bos` when given, scoring the predictions of the second half of each window.
    pub fn perplexity(
        &mut self,
        tokens: &[u32],
        n_ctx: usize,
        bos: Option<u32>,
    ) -> Result<Perplexity, GenerateError> {
        let mut sum = NllSum::default();
        let chunks = self.score_windows(
            tokens,
            n_ctx,
            None,
            bos,
            None,
            |_, window, logits, n_vocab| {
                sum.add_window(window, logits, n_vocab);
                Ok(())
            },
        )?;
        Ok(sum.finish(chunks))
    }

    /// [`perplexity`](Self::perplexity) over the first `chunks` windows (all when `None`),
    /// writing each scored position's log-probabilities to `out` in llama-perplexity's
    /// `--kl-divergence-base` format (the perplexity is computed from the same logits, before
    /// their quantization, as llama.cpp does).
    pub fn kl_divergence_base<W: Write>(
        &mut self,
        tokens: &[u32],
        n_ctx: usize,
        chunks: Option<usize>,
        bos: Option<u32>,
        out: W,
    ) -> Result<(Perplexity, W), GenerateError> {
        let n_chunks = self.check_windows(tokens, n_ctx, chunks)?;
        let n_vocab = self.core.cfg.n_vocab;
        let mut writer = LogProbWriter::new(out, n_ctx, n_vocab, &tokens[..n_chunks * n_ctx])?;
        let mut sum = NllSum::default();
        self.score_windows(
            tokens,
            n_ctx,
            chunks,
            bos,
            None,
            |_, window, logits, n_vocab| {
                for (j, row) in scored(window, logits, n_vocab) {
                    sum.add(writer.write_row(row, window[j + 1])?);
                }
                Ok(())
            },
        )?;
        Ok((sum.finish(n_chunks), writer.finish()?))
    }

    /// KL divergence of this model's token distributions from the base in `base` (a file
    /// written by [`kl_divergence_base`](Self::kl_divergence_base) or by `llama-perplexity
    /// --kl-divergence-base`), over its tokens and windows (the first `chunks` of them when
    /// given). `on_chunk` sees the running statistics after each window.
    ///
    /// # Errors
    /// `LogProbFile` if the file's vocabulary is not this model's or it is cut short;
    /// `InvalidOption` if its window does not fit the context.
    pub fn kl_divergence<R: Read>(
        &mut self,
        base: &mut LogProbReader<R>,
        chunks: Option<usize>,
        bos: Option<u32>,
        mut on_chunk: impl FnMut(&KldAccumulator),
    ) -> Result<KlDivergence, GenerateError> {
        let head = base.header();
        if head.n_vocab != self.core.cfg.n_vocab {
            return Err(GenerateError::LogProbFile(format!(
                "written for a vocabulary of {}, this model has {}",
                head.n_vocab, self.core.cfg.n_vocab
            )));
        }
        let tokens = base.tokens().to_vec();
        let chunks = Some(chunks.unwrap_or(head.n_chunk).min(head.n_chunk));
        let mut acc = KldAccumulator::default();
        let mut rows: Vec<LogProbRow> = (0..KLD_ROWS).map(|_| LogProbRow::default()).collect();
        let mut out = vec![Default::default(); KLD_ROWS];
        self.score_windows(
            &tokens,
            head.n_ctx,
            chunks,
            bos,
            None,
            |engine, window, logits, n_vocab| {
                let first = head.n_ctx / 2;
                let n = scored_rows(head.n_ctx);
                for start in (0..n).step_by(KLD_ROWS) {
                    let len = KLD_ROWS.min(n - start);
                    for row in &mut rows[..len] {
                        base.read_row(row)?;
                    }
                    // Rows are independent; each thread writes its own results, summed in order.
                    engine.pool().scope(|s| {
                        for ((i, row), res) in rows[..len].iter().enumerate().zip(out.iter_mut()) {
                            let j = first + start + i;
                            let l = &logits[j * n_vocab..(j + 1) * n_vocab];
                            let target = window[j + 1] as usize;
                            s.spawn(move |_| *res = kld::row_kld(l, row, target));
                        }
                    });
                    for r in &out[..len] {
                        acc.add(*r);
                    }
                }
                acc.end_chunk();
                on_chunk(&acc);
                Ok(())
            },
        )?;
        Ok(acc.stats())
    }

    /// The number of windows a run over `tokens` evaluates, or why it cannot run.
    fn check_windows(
        &self,
        tokens: &[u32],
        n_ctx: usize,
        chunks: Option<usize>,
    ) -> Result<usize, GenerateError> {
        if n_ctx < 4 || n_ctx > self.core.ctx {
            return Err(GenerateError::InvalidOption {
                name: "ctx",
                reason: format!(
                    "perplexity window {n_ctx} must be within 4..={}",
                    self.core.ctx
                ),
            });
        }
        let n_chunks = (tokens.len() / n_ctx).min(chunks.unwrap_or(usize::MAX));
        if n_chunks == 0 {
            return Err(GenerateError::InvalidOption {
                name: "text",
                reason: format!(
                    "{} tokens make no window of {n_ctx}{}",
                    tokens.len(),
                    if chunks == Some(0) {
                        " (0 chunks asked for)"
                    } else {
                        ""
                    }
                ),
            });
        }
        Ok(n_chunks)
    }

    /// Runs each window through an all-positions plan and hands `each` the engine, the
    /// window's tokens (as in the text: not BOS-replaced) and its `n_ctx × n_vocab` logits.
    /// `hook` sees every weight matmul's inputs (CPU only). Returns the number of windows.
    pub(crate) fn score_windows(
        &mut self,
        tokens: &[u32],
        n_ctx: usize,
        chunks: Option<usize>,
        bos: Option<u32>,
        hook: Option<Box<dyn ActivationHook>>,
        mut each: impl FnMut(
            &kestrel_tensor::CpuEngine,
            &[u32],
            &[f32],
            usize,
        ) -> Result<(), GenerateError>,
    ) -> Result<usize, GenerateError> {
        let n_chunks = self.check_windows(tokens, n_ctx, chunks)?;
        let core = &mut self.core;
        let kv = &mut self.session;
        let graph = core.weights.graph(&core.cfg, Logits::All)?;
        let weights = core.weights.clone();
        let lookup = |name: &str| weights.get(name);
        // On a GPU the windows run through their own all-positions plan and cache on the
        // generator's device (sharing the weights the generator uploaded).
        let mut plan = match &core.plans {
            Plans::Cpu { .. } => {
                let mut p = ExecutionPlan::compile(&graph, n_ctx, &lookup)?;
                p.set_activation_hook(hook);
                WindowPlan::Cpu(p)
            }
            Plans::Cuda(_) if hook.is_some() => {
                return Err(GenerateError::InvalidOption {
                    name: "device",
                    reason: "importance matrices are collected on the CPU only".into(),
                })
            }
            Plans::Cuda(gen_plan) => {
                let p = CudaPlan::compile_sharing(&graph, gen_plan, n_ctx, &lookup)?;
                let cache = p.new_cache(n_ctx)?;
                WindowPlan::Cuda(p, cache)
            }
        };
        let n_vocab = core.cfg.n_vocab;
        let mut window = vec![0u32; n_ctx];
        for c in 0..n_chunks {
            let original = &tokens[c * n_ctx..(c + 1) * n_ctx];
            window.copy_from_slice(original);
            if let Some(b) = bos {
                window[0] = b;
            }
            kv.reset();
            let logits = match &mut plan {
                WindowPlan::Cpu(p) => {
                    p.run(&core.engine, kv.kv.cpu_mut("perplexity")?, &window, 0)?
                }
                WindowPlan::Cuda(p, cache) => {
                    cache.reset();
                    p.run(cache, &window)?
                }
            };
            each(&core.engine, original, logits, n_vocab)?;
        }
        kv.reset();
        Ok(n_chunks)
    }
}

/// The scored positions of a window: `(j, logits of position j)` for `j` in
/// `n_ctx/2 .. n_ctx - 1` (position `j` predicts token `j + 1`).
fn scored<'a>(
    window: &'a [u32],
    logits: &'a [f32],
    n_vocab: usize,
) -> impl Iterator<Item = (usize, &'a [f32])> + 'a {
    let n_ctx = window.len();
    (n_ctx / 2..n_ctx - 1).map(move |j| (j, &logits[j * n_vocab..(j + 1) * n_vocab]))
}

/// The plan that scores perplexity windows, on the generator's device.
// One per perplexity run: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum WindowPlan {
    Cpu(ExecutionPlan),
    Cuda(CudaPlan, CudaKvCache),
}
