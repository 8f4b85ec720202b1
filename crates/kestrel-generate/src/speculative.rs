//! Speculative decoding: prompt-lookup (n-gram drafting, no draft model) and a draft model.
//!
//! Greedy decoding spends one forward pass per token, each reading all the weights. When the
//! text repeats itself (code, quotes, structured output), the tokens that followed the last
//! occurrence of the current n-gram are a cheap guess at what comes next; a small draft model
//! is another. Each step drafts up to `k` tokens, runs the current token plus the draft through the model in one pass (all
//! rows' logits), keeps the longest prefix of the draft that greedy decoding agrees with plus
//! the model's own next token, and rolls the KV cache back past the first disagreement. The
//! output is exactly greedy decoding's; only the number of forward passes changes.
//!
//! `k` adapts: it grows after a fully accepted draft and shrinks to what was accepted otherwise;
//! when the rolling acceptance rate falls under 0.4 drafting pauses for a few steps (plain
//! decoding), then tries again.
//!
//! With sampling (the `_sampled` variants), each drafted token is kept with probability
//! `min(1, p/q)` (target distribution `p`, draft distribution `q`; a point mass for prompt
//! lookup) and the first rejected one is replaced by a draw from `max(0, p - q)`
//! ([`kestrel_sampling::speculative`]), so the output is distributed as the target's own
//! sampling, not equal to it draw for draw.
//!
//! On a GPU the verification pass is a plan of its own that shares the generator's uploaded
//! weights. Its rows run through the prefill kernels, whose float order differs from a decode
//! step's, so greedy output there agrees with plain greedy decoding except at near-ties.

use std::time::Instant;

use kestrel_arch::Logits;
use kestrel_graph::{CudaPlan, ExecutionPlan};
use kestrel_tensor::{cpu, CpuEngine};

use kestrel_sampling::speculative::accept_or_resample;
use kestrel_sampling::{Sampler, SamplingConfig};

use crate::core::Plans;
use crate::session::SessionKv;
use crate::{GenerateError, GenerateMetrics, Generation, Generator};

/// The plan that runs a token and its draft in one pass (all rows' logits), on the
/// generator's device.
// Made once per generation: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Verify {
    Cpu(ExecutionPlan),
    Cuda(CudaPlan),
}

impl Verify {
    /// Runs `tokens` at position `pos` of `kv` (the session's next one); returns every row's
    /// logits. `checkpoint` first saves a recurrent state (caches without one: nothing to do).
    fn run<'a>(
        &'a mut self,
        engine: &CpuEngine,
        kv: &mut SessionKv,
        tokens: &[u32],
        pos: usize,
        checkpoint: bool,
    ) -> Result<&'a [f32], GenerateError> {
        match (self, kv) {
            (Verify::Cpu(plan), SessionKv::Cpu(kv)) => {
                if checkpoint {
                    // A recurrent state cannot be cut back to the accepted tokens: keep it as
                    // it is before the draft (nothing to do for a transformer's cache).
                    kestrel_kv::KvCache::checkpoint(kv)?;
                }
                Ok(plan.run(engine, kv, tokens, pos)?)
            }
            (Verify::Cuda(plan), SessionKv::Cuda(kv)) => {
                if checkpoint {
                    // As on the CPU: a recurrent state returns here if the draft is cut back.
                    kv.checkpoint()?;
                }
                if kv.len() != pos {
                    return Err(GenerateError::InvalidOption {
                        name: "session",
                        reason: format!("the cache holds {} positions, not {pos}", kv.len()),
                    });
                }
                Ok(plan.run(kv, tokens)?)
            }
            _ => Err(GenerateError::InvalidOption {
                name: "session",
                reason: "the session's cache is on another device than the model".into(),
            }),
        }
    }
}

/// A token distribution: `(id, probability)` pairs.
type Dist = Vec<(u32, f32)>;

/// How the target picks tokens: greedy, or its sampler (with the draft's distributions to
/// verify against).
enum Pick {
    Greedy,
    Sample {
        target: Box<Sampler>,
        p: Dist,
        residual: Dist,
        row: Vec<f32>,
    },
}

impl Pick {
    fn sampled(cfg: &SamplingConfig, n_vocab: usize) -> Result<Pick, GenerateError> {
        Ok(if cfg.is_greedy() {
            Pick::Greedy
        } else {
            Pick::Sample {
                target: Box::new(Sampler::new(cfg, n_vocab)?),
                p: Vec::new(),
                residual: Vec::new(),
                row: vec![0.0; n_vocab],
            }
        })
    }

    /// The token after `logits` (history `h`).
    fn pick(&mut self, logits: &[f32], h: &[u32]) -> Result<u32, GenerateError> {
        Ok(match self {
            Pick::Greedy => cpu::argmax(logits).unwrap_or(0) as u32,
            Pick::Sample { target, row, .. } => {
                row.copy_from_slice(logits);
                target.sample(row, h)?
            }
        })
    }

    /// Verify drafted `x` (draft distribution `q`) against `logits`: `Ok` keeps it, `Err`
    /// gives the token to emit instead.
    fn verify(
        &mut self,
        logits: &[f32],
        h: &[u32],
        x: u32,
        q: Option<&Dist>,
    ) -> Result<Result<(), u32>, GenerateError> {
        match self {
            Pick::Greedy => {
                let best = cpu::argmax(logits).unwrap_or(0) as u32;
                Ok(if best == x { Ok(()) } else { Err(best) })
            }
            Pick::Sample {
                target,
                p,
                residual,
                row,
            } => {
                row.copy_from_slice(logits);
                target.distribution(row, h, p)?;
                let point = [(x, 1.0f32)];
                let q = q.map_or(&point[..], |q| &q[..]);
                Ok(accept_or_resample(p, q, x, target, residual))
            }
        }
    }
}

/// How prompt-lookup drafting runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupOptions {
    /// Longest n-gram matched against the history (shorter ones are tried after it, down to 1).
    pub ngram: usize,
    /// Most tokens drafted per step.
    pub max_draft: usize,
}

impl Default for LookupOptions {
    fn default() -> Self {
        LookupOptions {
            ngram: 3,
            max_draft: 8,
        }
    }
}

/// What speculation achieved.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecStats {
    /// Forward passes run after the prompt.
    pub passes: usize,
    /// Draft tokens proposed.
    pub drafted: usize,
    /// Draft tokens the model agreed with.
    pub accepted: usize,
}

impl SpecStats {
    /// Share of drafted tokens accepted.
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
}

/// The tokens that followed the most recent earlier occurrence of the last `n` tokens of
/// `history` (longest `n` first), at most `k` of them, into `out`.
pub fn lookup_draft(history: &[u32], ngram: usize, k: usize, out: &mut Vec<u32>) {
    out.clear();
    let len = history.len();
    for n in (1..=ngram.min(len.saturating_sub(1))).rev() {
        let tail = &history[len - n..];
        // the most recent match that has at least one token after it
        let found = (0..len - n).rev().find(|&i| &history[i..i + n] == tail);
        if let Some(i) = found {
            let start = i + n;
            let end = (start + k).min(len);
            out.extend_from_slice(&history[start..end]);
            if !out.is_empty() {
                return;
            }
        }
    }
}

/// Proposes up to `k` tokens to follow `history` (prompt, generated tokens and the token about
/// to be verified) into `out`, and, when it samples, each token's draft distribution into the
/// second buffer (left empty: the drafts are point masses, as prompt lookup's).
type Drafter<'d> =
    dyn FnMut(&[u32], usize, &mut Vec<u32>, &mut Vec<Dist>) -> Result<(), GenerateError> + 'd;

impl Generator {
    /// Greedy generation of up to `max_new` tokens with prompt-lookup speculation (see the
    /// module docs): the same ids as [`generate_ids`](Self::generate_ids), in fewer forward
    /// passes when the text repeats. Uses the default session.
    pub fn generate_lookup(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        opts: LookupOptions,
        on_token: &mut dyn FnMut(u32) -> Result<bool, String>,
    ) -> Result<(Generation, SpecStats), GenerateError> {
        let cfg = SamplingConfig {
            max_new_tokens: max_new,
            ..SamplingConfig::greedy()
        };
        self.generate_lookup_sampled(prompt, &cfg, opts, on_token)
    }

    /// Prompt-lookup speculation under `sampling` (budget `max_new_tokens`; greedy when its
    /// temperature is 0): drafted tokens are accepted by the rejection rule, so the output is
    /// distributed as plain sampling's. Stop strings and grammars are not applied here.
    pub fn generate_lookup_sampled(
        &mut self,
        prompt: &[u32],
        sampling: &SamplingConfig,
        opts: LookupOptions,
        on_token: &mut dyn FnMut(u32) -> Result<bool, String>,
    ) -> Result<(Generation, SpecStats), GenerateError> {
        if opts.ngram == 0 {
            return Err(GenerateError::InvalidOption {
                name: "lookup",
                reason: "ngram must be at least 1".into(),
            });
        }
        let ngram = opts.ngram;
        let mut drafter = |h: &[u32], k: usize, out: &mut Vec<u32>, _: &mut Vec<Dist>| {
            lookup_draft(h, ngram, k, out);
            Ok(())
        };
        let mut pick = Pick::sampled(sampling, self.core.cfg.n_vocab)?;
        let max_new = sampling.max_new_tokens;
        self.speculate(
            prompt,
            max_new,
            opts.max_draft,
            &mut drafter,
            on_token,
            &mut pick,
        )
    }

    /// Greedy generation with a draft model: `draft` (a smaller or more quantized model with
    /// the same vocabulary) proposes up to `max_draft` tokens greedily, this model verifies them
    /// in one pass. The ids are exactly this model's greedy ids; both models' caches are rolled
    /// back past a rejection (the draft's default session is used and kept in step).
    pub fn generate_speculative(
        &mut self,
        draft: &mut Generator,
        prompt: &[u32],
        max_new: usize,
        max_draft: usize,
        on_token: &mut dyn FnMut(u32) -> Result<bool, String>,
    ) -> Result<(Generation, SpecStats), GenerateError> {
        let cfg = SamplingConfig {
            max_new_tokens: max_new,
            ..SamplingConfig::greedy()
        };
        self.generate_speculative_sampled(draft, prompt, &cfg, max_draft, on_token)
    }

    /// Draft-model speculation under `sampling` (budget `max_new_tokens`; greedy when its
    /// temperature is 0): the draft samples with the same chain (seeded differently), each
    /// drafted token is kept with probability `min(1, p/q)` and the first rejected one is
    /// replaced from `max(0, p - q)`, so the output is distributed as this model's own sampling.
    pub fn generate_speculative_sampled(
        &mut self,
        draft: &mut Generator,
        prompt: &[u32],
        sampling: &SamplingConfig,
        max_draft: usize,
        on_token: &mut dyn FnMut(u32) -> Result<bool, String>,
    ) -> Result<(Generation, SpecStats), GenerateError> {
        let max_new = sampling.max_new_tokens;
        if draft.core.cfg.n_vocab != self.core.cfg.n_vocab {
            return Err(GenerateError::InvalidOption {
                name: "draft",
                reason: format!(
                    "the draft model's vocabulary ({}) differs from the target's ({})",
                    draft.core.cfg.n_vocab, self.core.cfg.n_vocab
                ),
            });
        }
        if prompt.len().saturating_add(max_new) > draft.ctx() {
            return Err(GenerateError::InvalidOption {
                name: "draft",
                reason: format!("the draft model's context {} is too small", draft.ctx()),
            });
        }
        let mut pick = Pick::sampled(sampling, self.core.cfg.n_vocab)?;
        // the draft samples with the same chain, from another seed
        let mut draft_sampler = match &pick {
            Pick::Greedy => None,
            Pick::Sample { target, .. } => {
                let mut s = Sampler::new(sampling, draft.core.cfg.n_vocab)?;
                s.reseed(target.seed() ^ 0x9e37_79b9_7f4a_7c15);
                Some(s)
            }
        };
        draft.session.reset();
        draft
            .session
            .use_adapters(draft.core.adapter_use(None, prompt)?);
        let mut hist = Vec::new();
        let mut drafter = |h: &[u32], k: usize, out: &mut Vec<u32>, dists: &mut Vec<Dist>| {
            out.clear();
            // the draft's cache holds a prefix of `h`; feed the rest (reusing that prefix)
            draft.core.feed(&mut draft.session, h)?;
            hist.clear();
            hist.extend_from_slice(h);
            let mut used = 0;
            loop {
                let t = match draft_sampler.as_mut() {
                    None => cpu::argmax(&draft.core.logits).unwrap_or(0) as u32,
                    Some(s) => {
                        if dists.len() <= used {
                            dists.push(Vec::new());
                        }
                        let q = &mut dists[used];
                        s.distribution(&mut draft.core.logits, &hist, q)?;
                        s.draw_weighted(q).unwrap_or(0)
                    }
                };
                used += 1;
                out.push(t);
                hist.push(t);
                if out.len() >= k || draft.session.kv.seq_len() >= draft.core.ctx {
                    break;
                }
                draft.core.step(&mut draft.session, t)?;
            }
            dists.truncate(if draft_sampler.is_some() { used } else { 0 });
            Ok(())
        };
        self.speculate(
            prompt,
            max_new,
            max_draft,
            &mut drafter,
            on_token,
            &mut pick,
        )
    }

    fn speculate(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        max_draft: usize,
        drafter: &mut Drafter<'_>,
        on_token: &mut dyn FnMut(u32) -> Result<bool, String>,
        pick: &mut Pick,
    ) -> Result<(Generation, SpecStats), GenerateError> {
        let opts = LookupOptions {
            ngram: 1,
            max_draft,
        };
        self.core.check_room(prompt.len(), max_new)?;
        if opts.ngram == 0 || opts.max_draft == 0 || opts.max_draft > 64 {
            return Err(GenerateError::InvalidOption {
                name: "lookup",
                reason: "ngram must be at least 1 and max_draft within 1..=64".into(),
            });
        }
        let mut metrics = GenerateMetrics {
            prompt_tokens: prompt.len(),
            ..Default::default()
        };
        let mut stats = SpecStats::default();
        let mut ids = Vec::with_capacity(max_new);
        if max_new == 0 {
            let g = Generation {
                ids,
                stopped: false,
                metrics,
            };
            return Ok((g, stats));
        }
        let graph = self.core.weights.graph(&self.core.cfg, Logits::All)?;
        let weights = self.core.weights.clone();
        let lookup = |name: &str| weights.get(name);
        let rows = opts.max_draft + 1;
        let mut verify = match &self.core.plans {
            Plans::Cpu { .. } => Verify::Cpu(ExecutionPlan::compile(&graph, rows, &lookup)?),
            Plans::Cuda(plan) => {
                Verify::Cuda(CudaPlan::compile_sharing(&graph, plan, rows, &lookup)?)
            }
        };
        let n_vocab = self.core.cfg.n_vocab;

        let t0 = Instant::now();
        let mut next = pick.pick(self.prefill(prompt)?, prompt)?;
        // Every verified position follows the prompt: the scales after it (an activated LoRA
        // on where the prompt invoked it, off where it did not).
        let mut after = Vec::new();
        self.session.adapters.extend_at(prompt.len(), &mut after);
        match &mut verify {
            Verify::Cpu(plan) if plan.adapter_slots() > 0 => plan.set_adapter_scales(&after)?,
            Verify::Cuda(plan) if plan.adapter_slots() > 0 => plan.set_adapter_scales(&after)?,
            _ => {}
        }
        metrics.prefill = t0.elapsed();
        metrics.time_to_first_token = metrics.prefill;
        let t1 = Instant::now();
        let mut history: Vec<u32> = prompt.to_vec();
        let mut draft = Vec::with_capacity(opts.max_draft);
        let mut dists: Vec<Dist> = Vec::new();
        let mut batch = Vec::with_capacity(opts.max_draft + 1);
        let mut k = opts.max_draft.min(4);
        let mut rate = 1.0f64; // rolling acceptance
        let mut pause = 0usize;
        let mut stopped = false;
        'outer: loop {
            // emit `next`
            ids.push(next);
            history.push(next);
            let go_on = on_token(next).map_err(GenerateError::Callback)?;
            if self.core.is_stop(next) {
                stopped = true;
                break;
            }
            if !go_on || ids.len() >= max_new {
                break;
            }
            let room = max_new - ids.len(); // tokens still allowed after `next`
            if pause > 0 {
                pause -= 1;
                draft.clear();
            } else {
                drafter(&history, k.min(room), &mut draft, &mut dists)?;
            }
            stats.passes += 1;
            if draft.is_empty() {
                next = pick.pick(self.step(next)?, &history)?;
                continue;
            }
            // verify `next` + draft in one pass
            let pos = self.session.kv.seq_len();
            batch.clear();
            batch.push(next);
            batch.extend_from_slice(&draft);
            let engine = &self.core.engine;
            let logits = verify.run(engine, &mut self.session.kv, &batch, pos, true)?;
            let mut j = 0;
            let mut correction = None;
            let base = history.len();
            for (i, row) in logits.chunks_exact(n_vocab).take(draft.len()).enumerate() {
                // the row after `next` and draft[..i]
                match pick.verify(row, &history, draft[i], dists.get(i))? {
                    Ok(()) => {
                        j += 1;
                        history.push(draft[i]);
                    }
                    Err(t) => {
                        correction = Some(t);
                        break;
                    }
                }
            }
            let correction = match correction {
                Some(t) => t,
                // every draft token was kept: the last row gives the one after them
                None => pick.pick(
                    &logits[draft.len() * n_vocab..(draft.len() + 1) * n_vocab],
                    &history,
                )?,
            };
            history.truncate(base);
            stats.drafted += draft.len();
            stats.accepted += j;
            // keep `next` and the accepted draft tokens; the rest is rolled back
            self.session.tokens.push(next);
            self.session.tokens.extend_from_slice(&draft[..j]);
            let keep = pos + 1 + j;
            if self.session.kv.can_truncate(keep) {
                self.session.truncate(keep);
            } else {
                // A recurrent state cannot be cut inside the draft: back to its checkpoint
                // before it, then the kept tokens again. (Cutting at `keep` would empty the
                // sequence, and the kept tokens would run on a zeroed state.)
                self.session.truncate(pos);
                if self.session.kv.seq_len() != pos {
                    return Err(GenerateError::InvalidOption {
                        name: "session",
                        reason: format!(
                            "the recurrent state did not return to its checkpoint at {pos}"
                        ),
                    });
                }
                let engine = &self.core.engine;
                verify.run(engine, &mut self.session.kv, &batch[..1 + j], pos, false)?;
                self.session.tokens.truncate(pos);
                self.session.tokens.extend_from_slice(&batch[..1 + j]);
            }
            let step_rate = j as f64 / draft.len() as f64;
            rate = 0.7 * rate + 0.3 * step_rate;
            k = if j == draft.len() {
                (k + 1).min(opts.max_draft)
            } else {
                (j + 1).max(1)
            };
            if rate < 0.4 {
                pause = 8;
                rate = 0.5;
            }
            for &t in &draft[..j] {
                ids.push(t);
                history.push(t);
                let go_on = on_token(t).map_err(GenerateError::Callback)?;
                if self.core.is_stop(t) {
                    stopped = true;
                    break 'outer;
                }
                if !go_on || ids.len() >= max_new {
                    break 'outer;
                }
            }
            next = correction;
        }
        metrics.decode = t1.elapsed();
        metrics.generated_tokens = ids.len();
        Ok((
            Generation {
                ids,
                stopped,
                metrics,
            },
            stats,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_follow_the_latest_match_of_the_longest_ngram() {
        let mut out = Vec::new();
        // ... 1 2 3 [4 5 6] ... 1 2 3 [7 8] ... 2 3 -> the latest "2 3" is followed by 7 8
        let h = [1, 2, 3, 4, 5, 6, 1, 2, 3, 7, 8, 9, 2, 3];
        lookup_draft(&h, 3, 4, &mut out);
        assert_eq!(out, [7, 8, 9, 2]);
        // "1 2 3" at the end matches the trigram (latest first)
        lookup_draft(&[1, 2, 3, 4, 5, 1, 2, 3], 3, 2, &mut out);
        assert_eq!(out, [4, 5]);
        // no match at all: no draft
        lookup_draft(&[1, 2, 3], 3, 4, &mut out);
        assert!(out.is_empty());
        // a unigram fallback
        lookup_draft(&[5, 6, 9, 5], 3, 1, &mut out);
        assert_eq!(out, [6]);
    }
}
