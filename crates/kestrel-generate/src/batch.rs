//! Continuous batching: many requests share one forward pass per step.
//!
//! A [`Scheduler`] keeps a FIFO queue of requests and a set of running sequences in a
//! [`PagedCache`]. Each [`step`](Scheduler::step):
//! 1. admits queued requests in order while there is a sequence slot and the pool has the blocks
//!    for the request's whole budget (prompt + `max_new_tokens`), so a running sequence can never
//!    run out of KV blocks; a request larger than the whole pool is refused with an error, the
//!    others wait (the head of the queue is never overtaken, so no request starves);
//! 2. builds one batch: a token for every decoding sequence, then prompt chunks (chunked
//!    prefill) from the oldest admitted prompts within the step's token budget;
//! 3. runs it through the batched plan (every weight read once for all rows; attention per
//!    sequence through its block table), then samples each sequence that produced logits with
//!    its own sampler, grammar, stop ids and stop strings ([`Decoding`]).
//!
//! Finished and cancelled sequences free their blocks at once; the next step admits more.
//! With the prefix cache on, a prompt's whole blocks are published once it is prefilled (and a
//! sequence's whole blocks when it ends); a later prompt with the same prefix starts from them.
//!
//! On a GPU the same scheduler runs over one device cache per sequence ([`SeqStore`]): a step's
//! decodes run as batched steps, prompts one sequence at a time in the plan's prefill chunks,
//! so each sequence gets the tokens it gets alone; its prefix cache copies whole prefilled
//! chunks from a sequence that published them (`cuda_seqs.rs`), which keeps those bits.

use std::collections::VecDeque;
use std::sync::OnceLock;
use std::time::Instant;

use kestrel_graph::BatchSeq;
use kestrel_kv::{PoolStats, SeqId};
use kestrel_sampling::TokenTrie;
use kestrel_tokenizer::Tokenizer;

use crate::adapter_use::AdapterUse;
pub(crate) use crate::batch_store::{Pick, SeqStore, StepRunner, NOT_PICKED};
use crate::core::{trie_of, Core};
use crate::metrics::peak_memory_bytes;
use crate::stream::Decoding;
use crate::{Completion, FinishReason, GenerateError, GenerateMetrics, GenerateParams, Token};

/// One request of a batch: prompt ids and how to generate.
#[derive(Clone, Debug, Default)]
pub struct BatchRequest {
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Sampling, budget, stop conditions, grammar, cancellation.
    pub params: GenerateParams,
}

/// How a scheduler batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// Most sequences running at once (one output row each per step).
    pub max_seqs: usize,
    /// Most tokens in one step (decode tokens plus prefill chunks).
    pub max_step_tokens: usize,
    /// Tokens per KV block (a power of two).
    pub block_size: usize,
    /// KV blocks in the pool (0: enough for `max_seqs` full contexts).
    pub kv_blocks: usize,
    /// Reuse the KV blocks of earlier prompts' shared prefixes (a system prompt, earlier
    /// turns) instead of prefilling them again.
    pub prefix_cache: bool,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_seqs: 8,
            max_step_tokens: 512,
            block_size: 16,
            kv_blocks: 0,
            prefix_cache: true,
        }
    }
}

/// Handle of a submitted request (its submission index in this scheduler).
pub type RequestId = usize;

/// What a step produced for one request.
#[derive(Debug)]
pub enum BatchEvent {
    /// A generated token.
    Token(RequestId, Token),
    /// The request ended (completion or error); it holds no KV blocks any more.
    Done(RequestId, Result<Completion, GenerateError>),
}

/// The batched plan and block pool (or the GPU's caches), kept by the generator between
/// schedulers.
pub(crate) struct BatchState {
    pub(crate) opts: BatchOptions,
    pub(crate) runner: StepRunner,
    pub(crate) store: SeqStore,
}

struct Running<'g> {
    id: RequestId,
    seq: SeqId,
    /// Prompt then generated ids.
    history: Vec<u32>,
    prompt_len: usize,
    /// Prompt tokens in the cache.
    prefilled: usize,
    dec: Decoding<'g>,
    /// Sampled, not yet run through the model.
    pending: Option<u32>,
    metrics: GenerateMetrics,
    submitted: Instant,
    admitted: Instant,
    first: Option<Instant>,
    /// Its adapter scales by position.
    adapters: AdapterUse,
    /// Its first position not at the prefix cache's scales: it may share the blocks before.
    shared: usize,
}

struct Queued<'g> {
    id: RequestId,
    prompt: Vec<u32>,
    dec: Decoding<'g>,
    submitted: Instant,
    adapters: AdapterUse,
    shared: usize,
}

/// Continuous batching over one generator (see the module docs).
pub struct Scheduler<'g> {
    core: &'g mut Core,
    state: &'g mut BatchState,
    tokenizer: Option<&'g Tokenizer>,
    trie_cell: &'g OnceLock<TokenTrie>,
    queue: VecDeque<Queued<'g>>,
    running: Vec<Running<'g>>,
    next_id: RequestId,
    steps: u64,
    // per-step buffers, reused
    tokens: Vec<u32>,
    segs: Vec<BatchSeq>,
    outputs: Vec<usize>,
    /// Running index of each output row.
    out_owner: Vec<usize>,
    /// What each output needs of its logits (a GPU finds argmaxes and top-k candidates).
    out_pick: Vec<Pick>,
    /// The segments' adapter scales (empty for a model without adapters).
    seg_adapters: Vec<f32>,
    logits: Vec<f32>,
}

impl std::fmt::Debug for Scheduler<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("queued", &self.queue.len())
            .field("running", &self.running.len())
            .field("pool", &self.state.store.stats())
            .finish()
    }
}

impl<'g> Scheduler<'g> {
    pub(crate) fn new(
        core: &'g mut Core,
        state: &'g mut BatchState,
        tokenizer: Option<&'g Tokenizer>,
        trie_cell: &'g OnceLock<TokenTrie>,
    ) -> Scheduler<'g> {
        let n_vocab = core.cfg.n_vocab;
        let max_tokens = state.runner.max_tokens();
        Scheduler {
            core,
            state,
            tokenizer,
            trie_cell,
            queue: VecDeque::new(),
            running: Vec::new(),
            next_id: 0,
            steps: 0,
            tokens: Vec::with_capacity(max_tokens),
            segs: Vec::with_capacity(max_tokens),
            outputs: Vec::with_capacity(max_tokens),
            out_owner: Vec::with_capacity(max_tokens),
            out_pick: Vec::with_capacity(max_tokens),
            seg_adapters: Vec::new(),
            logits: vec![0.0; n_vocab],
        }
    }

    /// Queue a request; it joins the batch at a later step. Invalid requests (empty prompt,
    /// bad sampling options, a budget past the context or the whole pool) are refused here.
    pub fn submit(&mut self, req: BatchRequest) -> Result<RequestId, GenerateError> {
        let BatchRequest { prompt, params } = req;
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let max_new = params.sampling.max_new_tokens;
        self.core.check_room(prompt.len(), max_new)?;
        self.state.store.check_fits(prompt.len() + max_new)?;
        let trie = match &params.grammar {
            Some(_) => Some(trie_of(self.trie_cell, self.tokenizer, self.core)?),
            None => None,
        };
        let dec = Decoding::new(self.core.cfg.n_vocab, self.tokenizer, trie, &params)?;
        let adapters = self.core.adapter_use(params.adapters.as_deref(), &prompt)?;
        let shared = adapters.first_difference(&self.core.prefix_reference());
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push_back(Queued {
            id,
            prompt,
            dec,
            submitted: Instant::now(),
            adapters,
            shared,
        });
        Ok(id)
    }

    /// True when nothing is queued or running.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.running.is_empty()
    }

    /// Requests waiting for admission.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Sequences running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Steps run so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Sets the generator's adapter scales, for requests submitted from now on that choose
    /// none ([`Generator::set_adapter_scales`](crate::Generator::set_adapter_scales)); queued
    /// and running requests keep the scales they were submitted with. The prefix cache is
    /// emptied (its blocks were computed at the old scales).
    ///
    /// # Errors
    /// As [`Generator::set_adapter_scales`](crate::Generator::set_adapter_scales).
    pub fn set_adapter_scales(&mut self, scales: &[f32]) -> Result<(), GenerateError> {
        if scales == self.core.weights.scales() {
            return Ok(());
        }
        self.core.set_adapter_scales(scales)?;
        self.state.store.clear_prefix_cache();
        // Only positions at the new scales may be published or reused from now on.
        let reference = self.core.prefix_reference();
        for r in &mut self.running {
            r.shared = r.adapters.first_difference(&reference);
        }
        for q in &mut self.queue {
            q.shared = q.adapters.first_difference(&reference);
        }
        Ok(())
    }

    /// Occupancy of the KV block pool.
    pub fn pool_stats(&self) -> PoolStats {
        self.state.store.stats()
    }

    /// Admit, run one batched forward pass, sample; `on_event` receives every token and every
    /// finished request of the step in order. Returns `false` when there was nothing to do.
    pub fn step(&mut self, on_event: &mut dyn FnMut(BatchEvent)) -> Result<bool, GenerateError> {
        self.reap_cancelled(on_event);
        self.admit()?;
        if self.running.is_empty() {
            return Ok(false);
        }
        self.build_batch();
        if self.tokens.is_empty() {
            return Ok(false);
        }
        self.steps += 1;
        let has_outputs = !self.outputs.is_empty();
        if !has_outputs {
            self.outputs.push(0); // a step of prompt chunks only: one row, ignored
            self.out_pick.push(Pick::Logits);
        }
        let result = self.state.runner.run(
            &mut self.state.store,
            self.core,
            &self.tokens,
            &self.segs,
            (&self.outputs, &self.out_pick),
            &self.seg_adapters,
        );
        let out = match result {
            Ok(r) => r,
            Err(e) => {
                // A failed step leaves no sequence in a known state: end them all.
                let msg = e.to_string();
                for r in std::mem::take(&mut self.running) {
                    let _ = self.state.store.free(r.seq);
                    on_event(BatchEvent::Done(
                        r.id,
                        Err(GenerateError::InvalidOption {
                            name: "batch",
                            reason: msg.clone(),
                        }),
                    ));
                }
                return Err(e);
            }
        };
        for s in &self.segs {
            self.state.store.commit(s.seq, s.pos0 + s.len)?;
        }
        // account prefill progress
        let mut i = 0;
        for r in self.running.iter_mut() {
            while i < self.segs.len() && self.segs[i].seq == r.seq {
                if r.pending.take().is_none() {
                    r.prefilled += self.segs[i].len;
                }
                i += 1;
            }
        }
        let n_vocab = self.logits.len();
        let eog = &self.core.stop_ids;
        let mut done = Vec::new();
        if has_outputs {
            for (o, &ri) in self.out_owner.iter().enumerate() {
                let r = &mut self.running[ri];
                let picked = out.picked.get(o).copied().filter(|&id| id != NOT_PICKED);
                let top = out.top(o);
                if picked.is_none() && top.is_none() {
                    let row = out
                        .row(o, n_vocab)
                        .ok_or_else(|| GenerateError::InvalidOption {
                            name: "batch",
                            reason: format!("the step returned no logits for output {o}"),
                        })?;
                    self.logits.copy_from_slice(row);
                }
                let now = Instant::now();
                if r.first.is_none() && self.state.opts.prefix_cache && r.shared > 0 {
                    let len = r.prompt_len.min(r.shared);
                    self.state.store.publish(r.seq, &r.history[..len])?;
                }
                if r.first.is_none() {
                    r.first = Some(now);
                    r.metrics.prefill = now - r.admitted;
                    r.metrics.time_to_first_token = now - r.submitted;
                }
                let taken = match (picked, top) {
                    (Some(id), _) => r.dec.take(id, eog),
                    (None, Some((ids, logits))) => r.dec.take_top(ids, logits, eog),
                    (None, None) => r.dec.accept(&mut self.logits, &r.history, eog),
                };
                match taken {
                    Ok(tok) => {
                        r.history.push(tok.id);
                        let id = tok.id;
                        on_event(BatchEvent::Token(r.id, tok));
                        if r.dec.finish.is_some() {
                            done.push((ri, Ok(())));
                        } else {
                            r.pending = Some(id);
                        }
                    }
                    Err(e) => done.push((ri, Err(e))),
                }
            }
        }
        // remove finished, highest index first so the others keep their places
        done.sort_by_key(|d| std::cmp::Reverse(d.0));
        for (ri, res) in done {
            let r = self.running.remove(ri);
            let id = r.id;
            let out = match res {
                Ok(()) => self.finish(r).map(|(_, c)| c),
                Err(e) => {
                    self.state.store.free(r.seq)?;
                    Err(e)
                }
            };
            on_event(BatchEvent::Done(id, out));
        }
        Ok(true)
    }

    /// Free a finished sequence and make its completion.
    fn finish(&mut self, mut r: Running<'g>) -> Result<(RequestId, Completion), GenerateError> {
        if self.state.opts.prefix_cache && r.shared > 0 {
            let len = self
                .state
                .store
                .seq_len(r.seq)?
                .min(r.history.len())
                .min(r.shared);
            self.state.store.publish(r.seq, &r.history[..len])?;
        }
        self.state.store.free(r.seq)?;
        let finish = r.dec.finish.unwrap_or(FinishReason::Length);
        r.metrics.generated_tokens = r.dec.ids.len();
        if let Some(t) = r.first {
            r.metrics.decode = t.elapsed();
        }
        r.metrics.peak_memory_bytes = peak_memory_bytes();
        Ok((
            r.id,
            Completion {
                ids: std::mem::take(&mut r.dec.ids),
                text: std::mem::take(&mut r.dec.text),
                finish,
                metrics: r.metrics,
            },
        ))
    }

    /// End cancelled requests, queued or running.
    fn reap_cancelled(&mut self, on_event: &mut dyn FnMut(BatchEvent)) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].dec.cancelled() {
                let mut r = self.running.remove(i);
                r.dec.finish = Some(FinishReason::Cancelled);
                let id = r.id;
                on_event(match self.finish(r) {
                    Ok((id, c)) => BatchEvent::Done(id, Ok(c)),
                    Err(e) => BatchEvent::Done(id, Err(e)),
                });
            } else {
                i += 1;
            }
        }
        let mut kept = VecDeque::with_capacity(self.queue.len());
        while let Some(q) = self.queue.pop_front() {
            if q.dec.cancelled() {
                on_event(BatchEvent::Done(
                    q.id,
                    Ok(Completion {
                        ids: Vec::new(),
                        text: String::new(),
                        finish: FinishReason::Cancelled,
                        metrics: GenerateMetrics {
                            prompt_tokens: q.prompt.len(),
                            ..Default::default()
                        },
                    }),
                ));
            } else {
                kept.push_back(q);
            }
        }
        self.queue = kept;
    }

    /// Admit queued requests in order while a slot and their blocks are free (after reusing
    /// what the prefix cache holds of their prompt, and evicting cached blocks if need be).
    fn admit(&mut self) -> Result<(), GenerateError> {
        while self.running.len() < self.state.opts.max_seqs {
            let Some(q) = self.queue.pop_front() else {
                break;
            };
            let needed = q.prompt.len() + q.dec.left();
            // Reuse cached blocks only where the request runs at the cache's scales.
            let reuse = if self.state.opts.prefix_cache {
                q.shared
            } else {
                0
            };
            let admitted = self.state.store.admit(self.core, &q.prompt, needed, reuse);
            let (seq, cached) = match admitted {
                Ok(Some(s)) => s,
                Ok(None) => {
                    // wait: the head of the queue is never overtaken
                    self.queue.push_front(q);
                    break;
                }
                Err(e) => {
                    // The request stays queued (not lost) behind the error.
                    self.queue.push_front(q);
                    return Err(e);
                }
            };
            let prompt_len = q.prompt.len();
            let mut history = q.prompt;
            history.reserve(q.dec.left());
            self.running.push(Running {
                id: q.id,
                seq,
                history,
                prompt_len,
                prefilled: cached,
                dec: q.dec,
                pending: None,
                metrics: GenerateMetrics {
                    prompt_tokens: prompt_len,
                    cached_tokens: cached,
                    ..Default::default()
                },
                submitted: q.submitted,
                admitted: Instant::now(),
                first: None,
                adapters: q.adapters,
                shared: q.shared,
            });
        }
        Ok(())
    }

    /// Fill the step: one token per decoding sequence, then prompt chunks in admission order.
    /// Segments stay in running order (one per sequence at most).
    fn build_batch(&mut self) {
        self.tokens.clear();
        self.segs.clear();
        self.outputs.clear();
        self.out_owner.clear();
        self.out_pick.clear();
        self.seg_adapters.clear();
        let budget = self.state.runner.max_tokens();
        // A GPU store prefills in the chunks a single generation uses (so a sequence's numbers
        // do not depend on its neighbours); the first chunk of a step may exceed the budget.
        let chunk = self.state.runner.prefill_chunk();
        let decoding = self.running.iter().filter(|r| r.pending.is_some()).count();
        let mut prefill_budget = budget.saturating_sub(decoding);
        let mut prefills = 0usize;
        for (ri, r) in self.running.iter().enumerate() {
            let pos0 = r.history.len() - usize::from(r.pending.is_some());
            let (chunk, last): (&[u32], bool) = if let Some(tok) = r.pending.as_ref() {
                (std::slice::from_ref(tok), true)
            } else {
                let rest = r.prompt_len - r.prefilled;
                // A chunk ends where an activated adapter starts to act.
                let upto = r
                    .adapters
                    .next_change(r.prefilled)
                    .map_or(rest, |c| rest.min(c - r.prefilled));
                let n = match chunk {
                    None => upto.min(prefill_budget),
                    Some(c) => {
                        let n = upto.min(c);
                        if n > prefill_budget && prefills > 0 {
                            0
                        } else {
                            n
                        }
                    }
                };
                if n == 0 {
                    continue;
                }
                prefills += 1;
                prefill_budget = prefill_budget.saturating_sub(n);
                (&r.history[r.prefilled..r.prefilled + n], n == rest)
            };
            let pos0 = if r.pending.is_some() {
                pos0
            } else {
                r.prefilled
            };
            self.segs.push(BatchSeq {
                seq: r.seq,
                pos0,
                len: chunk.len(),
            });
            self.tokens.extend_from_slice(chunk);
            r.adapters.extend_at(pos0, &mut self.seg_adapters);
            if last {
                self.outputs.push(self.tokens.len() - 1);
                self.out_owner.push(ri);
                // A decode whose next token needs only the logits' argmax or their top-k
                // candidates: a GPU finds those.
                self.out_pick.push(match r.pending {
                    None => Pick::Logits,
                    Some(_) if r.dec.device_greedy() => Pick::Greedy,
                    Some(_) => r.dec.device_top_k().map_or(Pick::Logits, Pick::TopK),
                });
            }
        }
    }
}
