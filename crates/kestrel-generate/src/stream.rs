//! Sampled, streamed generation: [`TokenIter`] runs one decode step per `next()` — sample under
//! the optional grammar, check end-of-generation and stop ids, decode the token's text through
//! the incremental detokenizer and the stop-string matcher — and yields a [`Token`].
//! [`TokenStream`] is the callback form; [`Completion`] is what a whole generation returns.

use std::sync::OnceLock;
use std::time::Instant;

use kestrel_sampling::{GrammarMatcher, Sampler, StopMatcher, TokenTrie};
use kestrel_tokenizer::{Decoder, Tokenizer};

use crate::core::{trie_of, Core};
use crate::metrics::peak_memory_bytes;
use crate::{CancelToken, GenerateError, GenerateMetrics, GenerateParams, Session};

/// One generated token.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// The token id.
    pub id: u32,
    /// Text that became final with this token: complete UTF-8, with any text that could still
    /// be the start of a stop string held back until it is resolved. It may be empty (a token
    /// in the middle of a character or of a possible stop string) or hold several tokens' text.
    pub text: String,
    /// True for the end-of-generation or stop token that ended the generation (not rendered).
    pub special: bool,
    /// Its log-probability and the most likely alternatives, when
    /// [`GenerateParams::logprobs`] asked for them.
    pub logprob: Option<TokenLogprob>,
}

/// A token's log-probability under the model: the log-softmax of the raw logits (before
/// temperature, penalties and filters), as OpenAI's `logprobs` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// Log-probability of the chosen token.
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// The log-probability of `id` and the `n` most likely tokens under `logits`.
    ///
    /// ```
    /// use kestrel_generate::TokenLogprob;
    /// let lp = TokenLogprob::of(&[0.0, 1.0, 2.0], 1, 2);
    /// let lse = (1f32 + 1f32.exp() + 2f32.exp()).ln();
    /// assert!((lp.logprob - (1.0 - lse)).abs() < 1e-6);
    /// assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1]);
    /// ```
    pub fn of(logits: &[f32], id: u32, n: usize) -> TokenLogprob {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&x| f64::from((x - max).exp())).sum();
        let lse = max + sum.ln() as f32;
        let mut top: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
        if n > 0 {
            for (i, &x) in logits.iter().enumerate() {
                if top.len() == n && top.last().is_some_and(|t| t.1 >= x) {
                    continue;
                }
                let at = top.partition_point(|t| t.1 >= x);
                top.insert(at, (i as u32, x));
                top.truncate(n);
            }
        }
        for t in &mut top {
            t.1 -= lse;
        }
        let chosen = logits
            .get(id as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY);
        TokenLogprob {
            logprob: chosen - lse,
            top,
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinishReason {
    /// The model produced an end-of-generation token (EOS, EOT, ...).
    EndOfGeneration,
    /// A token of [`SamplingConfig::stop_token_ids`](kestrel_sampling::SamplingConfig).
    StopToken,
    /// The stop string with this index was produced (it is not part of the text).
    StopString(usize),
    /// `max_new_tokens` were generated, or, under a grammar, the budget was about to run out
    /// and the output was closed early (it is complete, but shorter than the model wanted).
    Length,
    /// The grammar was complete and allowed nothing more.
    Grammar,
    /// The [`CancelToken`] was cancelled.
    Cancelled,
}

impl FinishReason {
    /// OpenAI's name for it: `stop`, `length` or `cancelled`.
    pub fn as_openai(&self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            _ => "stop",
        }
    }
}

/// A whole generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// Generated ids (an end-of-generation or stop token that ended it included).
    pub ids: Vec<u32>,
    /// Generated text (stop strings and end-of-generation tokens not included).
    pub text: String,
    /// Why it ended.
    pub finish: FinishReason,
    /// Counts and timings.
    pub metrics: GenerateMetrics,
}

/// Error type a [`TokenStream`] returns to stop generation.
pub type StreamError = Box<dyn std::error::Error + Send + Sync>;

/// Receives tokens as they are generated; returning an error stops the generation (the error
/// comes back as [`GenerateError::Callback`]). Closures `FnMut(&Token) -> Result<(), E>`
/// implement it.
pub trait TokenStream {
    /// Called once per generated token, in order.
    fn on_token(&mut self, token: &Token) -> Result<(), StreamError>;
}

impl<F, E> TokenStream for F
where
    F: FnMut(&Token) -> Result<(), E>,
    E: Into<StreamError>,
{
    fn on_token(&mut self, token: &Token) -> Result<(), StreamError> {
        self(token).map_err(Into::into)
    }
}

/// A generation in progress: each `next()` runs one decode step and yields its [`Token`].
/// After the last token (or an error) it yields `None`; [`completion`](Self::completion)
/// then gives the ids, text, finish reason and metrics.
///
/// Dropping it early leaves the session holding the prompt and the tokens generated so far.
pub struct TokenIter<'a> {
    core: &'a mut Core,
    session: &'a mut Session,
    dec: Decoding<'a>,
    /// Sampled, not yet run through the model.
    pending: Option<u32>,
    failed: bool,
    metrics: GenerateMetrics,
    start: Instant,
    first: Option<Instant>,
}

/// One sequence's choice of tokens: the sampler under the optional grammar, the token budget,
/// end-of-generation and stop ids, the incremental detokenizer and the stop strings. It turns
/// a step's logits into the next [`Token`] and decides whether the generation ends; the
/// single-sequence iterator and the batch scheduler both drive one per sequence.
pub(crate) struct Decoding<'a> {
    trie: Option<&'a TokenTrie>,
    decoder: Option<Decoder<'a>>,
    sampler: Sampler,
    matcher: Option<GrammarMatcher>,
    stops: StopMatcher,
    stop_ids: Vec<u32>,
    cancel: Option<CancelToken>,
    max_new: usize,
    pub(crate) ids: Vec<u32>,
    pub(crate) text: String,
    pub(crate) finish: Option<FinishReason>,
    /// The grammar's shortest completion and the tokens that can start it (reused buffers).
    closers: (Vec<u8>, Vec<u32>),
    /// The budget forced the grammar closed: an end-of-generation token then means `Length`.
    closed_by_budget: bool,
    /// Alternatives to report with each token's log-probability (`None`: no log-probabilities).
    logprobs: Option<usize>,
    /// The raw logits of the step, kept for log-probabilities (the sampler edits `logits`).
    raw: Vec<f32>,
}

/// Most alternatives reported with a token's log-probability (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Close when the shortest completion (in bytes, each at most one token) plus this margin
/// reaches the tokens left, so one freely sampled token cannot push it out of reach.
const CLOSE_SLACK: usize = 8;

impl std::fmt::Debug for TokenIter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIter")
            .field("ids", &self.dec.ids)
            .field("finish", &self.dec.finish)
            .finish()
    }
}

impl<'a> TokenIter<'a> {
    pub(crate) fn start(
        core: &'a mut Core,
        session: &'a mut Session,
        tokenizer: Option<&'a Tokenizer>,
        trie_cell: &'a OnceLock<TokenTrie>,
        prompt: &[u32],
        params: &GenerateParams,
    ) -> Result<TokenIter<'a>, GenerateError> {
        let start = Instant::now();
        let cfg = &params.sampling;
        core.check_room(prompt.len(), cfg.max_new_tokens)?;
        let trie = match &params.grammar {
            Some(_) => Some(trie_of(trie_cell, tokenizer, core)?),
            None => None,
        };
        let dec = Decoding::new(core.cfg.n_vocab, tokenizer, trie, params)?;
        let mut metrics = GenerateMetrics {
            prompt_tokens: prompt.len(),
            ..Default::default()
        };
        session.use_adapters(core.adapter_use(params.adapters.as_deref(), prompt)?);
        metrics.cached_tokens = core.feed(session, prompt)?;
        metrics.prefill = start.elapsed();
        Ok(TokenIter {
            core,
            session,
            dec,
            pending: None,
            failed: false,
            metrics,
            start,
            first: None,
        })
    }

    /// Ids generated so far.
    pub fn ids(&self) -> &[u32] {
        &self.dec.ids
    }

    /// Text emitted so far.
    pub fn text(&self) -> &str {
        &self.dec.text
    }

    /// Why it ended (`None` while it runs, or after an error).
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.dec.finish
    }

    /// The sampler's seed (drawn from the OS when the config had none).
    pub fn seed(&self) -> u64 {
        self.dec.sampler.seed()
    }

    /// Runs to the end and returns the whole generation.
    pub fn completion(mut self) -> Result<Completion, GenerateError> {
        for t in self.by_ref() {
            t?;
        }
        self.into_completion()
    }

    /// Runs to the end, handing every token to `stream`.
    pub(crate) fn drive(
        mut self,
        stream: &mut dyn TokenStream,
    ) -> Result<Completion, GenerateError> {
        for t in self.by_ref() {
            let t = t?;
            stream
                .on_token(&t)
                .map_err(|e| GenerateError::Callback(e.to_string()))?;
        }
        self.into_completion()
    }

    fn into_completion(mut self) -> Result<Completion, GenerateError> {
        let finish = self.dec.finish.ok_or(GenerateError::InvalidOption {
            name: "generation",
            reason: "it failed before it finished".into(),
        })?;
        self.metrics.peak_memory_bytes = peak_memory_bytes();
        Ok(Completion {
            ids: std::mem::take(&mut self.dec.ids),
            text: std::mem::take(&mut self.dec.text),
            finish,
            metrics: self.metrics.clone(),
        })
    }

    fn end(&mut self, reason: FinishReason) {
        self.dec.finish = Some(reason);
        self.metrics.generated_tokens = self.dec.ids.len();
        if let Some(t) = self.first {
            self.metrics.decode = t.elapsed();
        }
    }

    /// One step: feed the previous token, sample the next, decide whether it ends.
    fn advance(&mut self) -> Result<Option<Token>, GenerateError> {
        if self.dec.cancelled() {
            self.end(FinishReason::Cancelled);
            return Ok(None);
        }
        let pending = self.pending.take();
        let on_gpu = self.core.on_gpu();
        let device_k = if on_gpu {
            self.dec.device_top_k()
        } else {
            None
        };
        let token = match (pending, device_k) {
            // Greedy with nothing reading the logits, on a GPU: the argmax runs there.
            (Some(prev), _) if on_gpu && self.dec.device_greedy() => {
                let id = self.core.step_greedy(self.session, prev)?;
                self.dec.take(id, &self.core.stop_ids)?
            }
            // Top-k sampling with nothing else reading the logits, on a GPU: the candidates
            // are found there and the sampler goes on from them.
            (Some(prev), Some(k)) => {
                let top = self.core.step_top_k(self.session, prev, k)?;
                self.dec.take_top(top.ids, top.logits, top.stop_ids)?
            }
            (pending, _) => {
                if let Some(prev) = pending {
                    self.core.step(self.session, prev)?;
                }
                self.dec.accept(
                    &mut self.core.logits,
                    &self.session.tokens,
                    &self.core.stop_ids,
                )?
            }
        };
        if self.first.is_none() {
            self.first = Some(Instant::now());
            self.metrics.time_to_first_token = self.start.elapsed();
        }
        match self.dec.finish {
            Some(reason) => self.end(reason),
            None => self.pending = Some(token.id),
        }
        Ok(Some(token))
    }
}

impl<'a> Decoding<'a> {
    /// The state for one generation; `trie` must be given when `params` has a grammar.
    pub(crate) fn new(
        n_vocab: usize,
        tokenizer: Option<&'a Tokenizer>,
        trie: Option<&'a TokenTrie>,
        params: &GenerateParams,
    ) -> Result<Decoding<'a>, GenerateError> {
        let cfg = &params.sampling;
        let sampler = Sampler::new(cfg, n_vocab)?;
        if !cfg.stop_strings.is_empty() && tokenizer.is_none() {
            return Err(GenerateError::NoTokenizer("stop strings"));
        }
        let matcher = match (&params.grammar, trie) {
            (Some(g), Some(_)) => Some(GrammarMatcher::new(g)),
            (Some(_), None) => return Err(GenerateError::NoTokenizer("grammars")),
            (None, _) => None,
        };
        Ok(Decoding {
            trie,
            decoder: tokenizer.map(|t| t.decoder(false)),
            sampler,
            matcher,
            stops: StopMatcher::new(cfg.stop_strings.iter().cloned()),
            stop_ids: cfg.stop_token_ids.clone(),
            cancel: params.cancel.clone(),
            max_new: cfg.max_new_tokens,
            ids: Vec::with_capacity(cfg.max_new_tokens.min(1 << 16)),
            text: String::new(),
            finish: None,
            closers: (Vec::new(), Vec::new()),
            closed_by_budget: false,
            logprobs: params.logprobs.map(|n| n.min(MAX_TOP_LOGPROBS)),
            raw: if params.logprobs.is_some() {
                Vec::with_capacity(n_vocab)
            } else {
                Vec::new()
            },
        })
    }

    /// True once its cancel token was cancelled.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    /// The most tokens it may still produce.
    pub(crate) fn left(&self) -> usize {
        self.max_new.saturating_sub(self.ids.len())
    }

    /// Choose the token that follows `logits` (edited in place by the sampler) after
    /// `history`; `eog` are the model's end-of-generation ids (sorted). Sets `finish` when the
    /// token ends the generation.
    pub(crate) fn accept(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        eog: &[u32],
    ) -> Result<Token, GenerateError> {
        let left = self.left();
        if self.logprobs.is_some() {
            self.raw.clear();
            self.raw.extend_from_slice(logits);
        }
        let id = match (&mut self.matcher, self.trie) {
            (Some(m), Some(trie)) => {
                let id = match closing_token(m, trie, logits, left, &mut self.closers) {
                    Some(id) => {
                        self.closed_by_budget = true;
                        id
                    }
                    None => self.sampler.sample_constrained(logits, history, m, trie)?,
                };
                m.accept_token(trie, id)?;
                id
            }
            _ => self.sampler.sample(logits, history)?,
        };
        self.take(id, eog)
    }

    /// Whether the next token may be chosen where the logits are (a GPU's argmax): greedy with
    /// nothing reading the logits on the host (no bias, penalties, grammar, log-probabilities).
    pub(crate) fn device_greedy(&self) -> bool {
        self.matcher.is_none() && self.logprobs.is_none() && self.sampler.config().is_plain_greedy()
    }

    /// `Some(k)` when the next token may be drawn from the logits' `k` best candidates found
    /// where the logits are (a GPU's top-k): top-k sampling with nothing else reading the
    /// logits on the host (no bias, penalties, grammar, log-probabilities).
    pub(crate) fn device_top_k(&self) -> Option<usize> {
        if self.matcher.is_some() || self.logprobs.is_some() || !device_top_k_on() {
            return None;
        }
        self.sampler.config().device_top_k()
    }

    /// Draws the next token from the logits' top-k candidates (`ids` and `logits`, best first,
    /// as a GPU finds them when [`Self::device_top_k`]) and takes it: what [`Self::accept`]
    /// draws from the whole row.
    pub(crate) fn take_top(
        &mut self,
        ids: &[u32],
        logits: &[f32],
        eog: &[u32],
    ) -> Result<Token, GenerateError> {
        let id = self.sampler.pick_top(ids, logits)?;
        self.take(id, eog)
    }

    /// Takes `id` as the next token (chosen by [`Self::accept`]'s sampler, by the device's
    /// argmax when [`Self::device_greedy`], or by [`Self::take_top`]): text, stop strings and
    /// ids, end of generation.
    pub(crate) fn take(&mut self, id: u32, eog: &[u32]) -> Result<Token, GenerateError> {
        self.ids.push(id);
        let is_eog = eog.binary_search(&id).is_ok();
        let mut text = String::new();
        let mut finish = if is_eog && self.closed_by_budget {
            Some(FinishReason::Length)
        } else if is_eog {
            Some(FinishReason::EndOfGeneration)
        } else if self.stop_ids.contains(&id) {
            Some(FinishReason::StopToken)
        } else {
            self.push_text(id, &mut text)?
        };
        let special = finish.is_some();
        if finish.is_none() && self.ids.len() >= self.max_new {
            finish = Some(FinishReason::Length);
        }
        if finish.is_none()
            && self
                .matcher
                .as_mut()
                .is_some_and(|m| m.is_complete() && !m.can_continue())
        {
            finish = Some(FinishReason::Grammar);
        }
        match finish {
            Some(FinishReason::StopString(i)) => self.finish = Some(FinishReason::StopString(i)),
            Some(reason) => {
                // flush what the detokenizer and the stop matcher hold
                let tail = self
                    .decoder
                    .as_mut()
                    .map(Decoder::finish)
                    .unwrap_or_default();
                let step = self.stops.push(&tail);
                text.push_str(&step.text);
                self.finish = Some(match step.stop {
                    Some(i) => FinishReason::StopString(i),
                    None => {
                        text.push_str(&self.stops.finish());
                        reason
                    }
                });
            }
            None => {}
        }
        self.text.push_str(&text);
        let logprob = self.logprobs.map(|n| TokenLogprob::of(&self.raw, id, n));
        Ok(Token {
            id,
            text,
            special,
            logprob,
        })
    }

    /// Decode `id` and run the text through the stop strings; `Some` when one matched.
    fn push_text(
        &mut self,
        id: u32,
        text: &mut String,
    ) -> Result<Option<FinishReason>, GenerateError> {
        let Some(decoder) = self.decoder.as_mut() else {
            return Ok(None);
        };
        let Some(piece) = decoder.push(id)? else {
            return Ok(None);
        };
        let step = self.stops.push(&piece);
        *text = step.text;
        Ok(step.stop.map(FinishReason::StopString))
    }
}

/// Near the end of the budget, the token that closes the grammar soonest: when the shortest
/// completion (plus [`CLOSE_SLACK`]) no longer fits in the `left` tokens, the most likely
/// token whose bytes start that completion, or an end-of-generation token once the grammar
/// is complete. `None` leaves the choice to the sampler: budget to spare, no completion, or
/// no token spells its start. The completion's length is asked after every token (it is a
/// sum along the matcher's stack), so however deep the output nests, closing starts in time.
fn closing_token(
    m: &mut GrammarMatcher,
    trie: &TokenTrie,
    logits: &[f32],
    left: usize,
    buf: &mut (Vec<u8>, Vec<u32>),
) -> Option<u32> {
    let need = m.completion_len()?;
    if need + CLOSE_SLACK < left {
        return None;
    }
    let (completion, buf) = (&mut buf.0, &mut buf.1);
    if !m.shortest_completion_into(need, completion) {
        return None;
    }
    if completion.is_empty() {
        return trie.eog_tokens().first().copied();
    }
    buf.clear();
    trie.prefix_tokens(completion, buf);
    // with bytes to spare the model picks among the tokens that spell the completion; when
    // even one byte per token would not fit, the longest of them (buf is shortest first)
    if completion.len() >= left {
        return buf
            .iter()
            .rev()
            .copied()
            .find(|&t| m.accepts_token(trie, t));
    }
    buf.iter()
        .copied()
        .filter(|&t| m.accepts_token(trie, t))
        .max_by(|&a, &b| {
            let la = logits.get(a as usize).copied().unwrap_or(f32::NEG_INFINITY);
            let lb = logits.get(b as usize).copied().unwrap_or(f32::NEG_INFINITY);
            la.total_cmp(&lb)
        })
}

impl Iterator for TokenIter<'_> {
    type Item = Result<Token, GenerateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.dec.finish.is_some() || self.failed {
            return None;
        }
        match self.advance() {
            Ok(t) => t.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Whether top-k samplers' candidates may be found on a GPU (`KESTREL_CUDA_TOPK=0`: the logits
/// come back and the host samples, for comparison; the same tokens).
fn device_top_k_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KESTREL_CUDA_TOPK").map_or(true, |v| v != "0"))
}
