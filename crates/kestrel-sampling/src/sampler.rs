//! `Sampler`: turns one row of logits into a token id with the configured pipeline, in
//! llama.cpp's default order (logit bias → penalties → top-k → typical-p → top-p → min-p →
//! temperature → dist; greedy argmax when the temperature is 0). It owns vocabulary-sized
//! scratch buffers, so sampling a token allocates nothing.

use crate::config::SamplingConfig;
use crate::error::SamplingError;
use crate::grammar::matcher::GrammarMatcher;
use crate::grammar::token_trie::{TokenMask, TokenTrie};
use crate::rng::{entropy_seed, fold_seed, Mt19937};
use crate::samplers::penalties::Penalties;
use crate::samplers::typical::TypicalScratch;
use crate::samplers::{
    by_logit_desc, dist, greedy, logit_bias, min_p, temperature, top_k, top_p, typical, Candidate,
    Candidates,
};

/// A seeded sampler for one vocabulary size; see the [crate docs](crate) for an example.
///
/// Same config, same seed and same inputs give the same tokens, on any machine and thread
/// count: sampling is single-threaded and all orderings break ties by token id.
#[derive(Debug)]
pub struct Sampler {
    config: SamplingConfig,
    vocab_size: usize,
    seed: u64,
    rng: Mt19937,
    cands: Candidates,
    counts: Vec<u32>,
    typical: TypicalScratch,
    mask: TokenMask,
    masks_computed: u64,
}

impl Sampler {
    /// Builds a sampler for logits of length `vocab_size`; validates the config and the
    /// logit-bias token ids, and allocates every buffer sampling will need.
    pub fn new(config: &SamplingConfig, vocab_size: usize) -> Result<Self, SamplingError> {
        config.validate()?;
        if let Some(&(id, _)) = config
            .logit_bias
            .iter()
            .find(|(id, _)| *id as usize >= vocab_size)
        {
            return Err(SamplingError::TokenOutOfRange { id, vocab_size });
        }
        let seed = config.seed.unwrap_or_else(entropy_seed);
        let needs_typical = config.typical_p < 1.0;
        let scratch_len = if needs_typical { vocab_size } else { 0 };
        let penalties_on = !Self::penalties_of(config).is_neutral();
        Ok(Self {
            config: config.clone(),
            vocab_size,
            seed,
            rng: Mt19937::new(fold_seed(seed)),
            cands: Candidates {
                data: Vec::with_capacity(vocab_size),
                sorted: false,
            },
            counts: vec![0; if penalties_on { vocab_size } else { 0 }],
            typical: TypicalScratch {
                scores: Vec::with_capacity(scratch_len),
                order: Vec::with_capacity(scratch_len),
                tmp: Vec::with_capacity(scratch_len),
            },
            mask: TokenMask::new(vocab_size),
            masks_computed: 0,
        })
    }

    fn penalties_of(c: &SamplingConfig) -> Penalties {
        Penalties {
            last_n: c.penalty_last_n,
            repeat: c.repeat_penalty,
            frequency: c.frequency_penalty,
            presence: c.presence_penalty,
        }
    }

    /// The config this sampler was built from.
    pub fn config(&self) -> &SamplingConfig {
        &self.config
    }

    /// The vocabulary size the sampler expects.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The seed in use (drawn from the OS when the config had none).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Restarts the RNG from `seed`.
    pub fn reseed(&mut self, seed: u64) {
        self.seed = seed;
        self.rng = Mt19937::new(fold_seed(seed));
    }

    /// Restarts the RNG from the sampler's seed, so the same inputs draw the same tokens again.
    pub fn reset(&mut self) {
        self.rng = Mt19937::new(fold_seed(self.seed));
    }

    /// Samples one token id from `logits` (modified in place: bias and penalties are applied to
    /// it). `history` is the token sequence so far (prompt and generated); the penalties look at
    /// its last `penalty_last_n` entries.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> Result<u32, SamplingError> {
        self.prepare(logits, history)?;
        self.pick(logits)
    }

    /// Samples one token allowed by the grammar `matcher` over the vocabulary `trie`; the
    /// matcher is not advanced (call [`GrammarMatcher::accept_token`] with the result).
    ///
    /// With `grammar_first: false` (the default, as llama.cpp) the token is first sampled
    /// without the grammar and kept if the grammar accepts it; otherwise, and always with
    /// `grammar_first: true`, the allowed-token mask is computed, disallowed logits are set to
    /// `-inf` and the token is sampled again.
    ///
    /// ```
    /// use kestrel_sampling::{Grammar, GrammarMatcher, Sampler, SamplingConfig, TokenTrie};
    /// let vocab: Vec<Vec<u8>> = ["yes", "no", "maybe", ""].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let trie = TokenTrie::new(&vocab, &[3]);
    /// let grammar = Grammar::from_gbnf(r#"root ::= "yes" | "no""#).unwrap();
    /// let mut matcher = GrammarMatcher::new(&grammar);
    /// let mut sampler = Sampler::new(&SamplingConfig { seed: Some(1), ..Default::default() }, vocab.len()).unwrap();
    /// let mut out = Vec::new();
    /// loop {
    ///     let mut logits = vec![0.0, 0.0, 5.0, 1.0]; // the model prefers "maybe"
    ///     let tok = sampler.sample_constrained(&mut logits, &out, &mut matcher, &trie).unwrap();
    ///     matcher.accept_token(&trie, tok).unwrap();
    ///     if trie.is_eog(tok) {
    ///         break;
    ///     }
    ///     out.push(tok);
    /// }
    /// assert!(out == [0] || out == [1]);
    /// ```
    pub fn sample_constrained(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        matcher: &mut GrammarMatcher,
        trie: &TokenTrie,
    ) -> Result<u32, SamplingError> {
        if trie.vocab_size() != self.vocab_size {
            return Err(SamplingError::VocabMismatch {
                expected: self.vocab_size,
                got: trie.vocab_size(),
            });
        }
        self.prepare(logits, history)?;
        if !self.config.grammar_first {
            if let Ok(t) = self.pick(logits) {
                if matcher.accepts_token(trie, t) {
                    return Ok(t);
                }
            }
        }
        matcher.fill_mask(trie, &mut self.mask);
        self.masks_computed += 1;
        self.mask.apply_to_logits(logits);
        self.pick(logits)
    }

    /// How many times [`Sampler::sample_constrained`] had to compute the full token mask.
    pub fn masks_computed(&self) -> u64 {
        self.masks_computed
    }

    /// Logit bias and penalties, applied to the full logits row.
    pub(crate) fn prepare(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
    ) -> Result<(), SamplingError> {
        if logits.len() != self.vocab_size {
            return Err(SamplingError::VocabMismatch {
                expected: self.vocab_size,
                got: logits.len(),
            });
        }
        logit_bias::apply(logits, &self.config.logit_bias);
        Self::penalties_of(&self.config).apply(logits, history, &mut self.counts)
    }

    /// The distribution [`sample`](Self::sample) draws from after `logits` (bias, penalties,
    /// filters, temperature), as `(id, probability)` pairs summing to 1 — a single pair for
    /// greedy. `logits` is modified in place as by `sample`. Speculative sampling compares the
    /// target's and the draft's distributions with it.
    ///
    /// ```
    /// use kestrel_sampling::{Sampler, SamplingConfig};
    /// let mut s = Sampler::new(&SamplingConfig { top_k: 2, seed: Some(1), ..Default::default() }, 3).unwrap();
    /// let mut d = Vec::new();
    /// s.distribution(&mut [0.0, 2.0, 1.0], &[], &mut d).unwrap();
    /// assert_eq!(d.len(), 2);
    /// assert!((d.iter().map(|x| x.1).sum::<f32>() - 1.0).abs() < 1e-6);
    /// ```
    pub fn distribution(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        out: &mut Vec<(u32, f32)>,
    ) -> Result<(), SamplingError> {
        self.prepare(logits, history)?;
        out.clear();
        let cfg = &self.config;
        if cfg.is_greedy() {
            let id = greedy::argmax(logits).ok_or(SamplingError::NoCandidates)?;
            out.push((id, 1.0));
            return Ok(());
        }
        self.filter(logits)?;
        let c = &self.cands;
        let max_l = c.data.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        let sum: f64 = c
            .data
            .iter()
            .map(|x| f64::from((x.logit - max_l).exp()))
            .sum();
        out.extend(
            c.data
                .iter()
                .map(|x| (x.id, (f64::from((x.logit - max_l).exp()) / sum) as f32)),
        );
        Ok(())
    }

    /// A uniform draw in `[0, 1)` from the sampler's RNG.
    pub fn uniform(&mut self) -> f64 {
        self.rng.next_f64()
    }

    /// Draw an id from `(id, weight)` pairs (weights non-negative, not all zero) with the
    /// sampler's RNG; `None` when every weight is zero.
    pub fn draw_weighted(&mut self, weights: &[(u32, f32)]) -> Option<u32> {
        let sum: f64 = weights.iter().map(|w| f64::from(w.1.max(0.0))).sum();
        if sum <= 0.0 {
            return None;
        }
        let target = sum * self.rng.next_f64();
        let mut run = 0.0;
        for &(id, w) in weights {
            run += f64::from(w.max(0.0));
            if run >= target {
                return Some(id);
            }
        }
        weights.iter().rev().find(|w| w.1 > 0.0).map(|w| w.0)
    }

    /// The rest of the chain after bias and penalties: greedy, or filters then a draw.
    pub(crate) fn pick(&mut self, logits: &[f32]) -> Result<u32, SamplingError> {
        let cfg = &self.config;
        if cfg.is_greedy() {
            return greedy::argmax(logits).ok_or(SamplingError::NoCandidates);
        }
        self.filter(logits)?;
        let i = dist::draw(&mut self.cands, &mut self.rng);
        Ok(self.cands.data[i].id)
    }

    /// [`pick`](Self::pick) from the top-k candidates of the logits instead of the logits:
    /// `ids` and `logits` (as many) are the row's best `top_k` candidates, best first, in the
    /// sampler's order (NaN and -inf left out; larger logits first in `total_cmp`'s order, ties
    /// by lower id; fewer when the row has fewer), as a GPU finds them on the device. For a
    /// configuration whose [`SamplingConfig::device_top_k`] is `Some`, this draws the token
    /// [`sample`](Self::sample) draws from the whole row, with the same RNG steps.
    ///
    /// ```
    /// use kestrel_sampling::{Sampler, SamplingConfig};
    /// let cfg = SamplingConfig { top_k: 2, seed: Some(3), ..Default::default() };
    /// let mut logits = vec![0.5, 2.0, -1.0, 1.5];
    /// let mut whole = Sampler::new(&cfg, 4).unwrap();
    /// let mut top = Sampler::new(&cfg, 4).unwrap();
    /// for _ in 0..8 {
    ///     let want = whole.sample(&mut logits.clone(), &[]).unwrap();
    ///     assert_eq!(top.pick_top(&[1, 3], &[2.0, 1.5]).unwrap(), want);
    /// }
    /// ```
    ///
    /// # Errors
    /// [`SamplingError::NoCandidates`] when there are none; a length mismatch.
    pub fn pick_top(&mut self, ids: &[u32], logits: &[f32]) -> Result<u32, SamplingError> {
        if ids.len() != logits.len() {
            return Err(SamplingError::CandidateMismatch {
                ids: ids.len(),
                logits: logits.len(),
            });
        }
        if ids.is_empty() {
            return Err(SamplingError::NoCandidates);
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(SamplingError::TokenOutOfRange {
                id,
                vocab_size: self.vocab_size,
            });
        }
        // The candidates top-k would leave: live logits, strictly in its order (so no id twice
        // among equal logits).
        let c = |i: usize| Candidate {
            id: ids[i],
            logit: logits[i],
            p: 0.0,
        };
        if let Some(index) = (0..ids.len()).find(|&i| {
            logits[i].is_nan()
                || logits[i] == f32::NEG_INFINITY
                || (i > 0 && by_logit_desc(&c(i - 1), &c(i)) != std::cmp::Ordering::Less)
        }) {
            return Err(SamplingError::UnorderedCandidates { index });
        }
        let c = &mut self.cands;
        c.data.clear();
        c.data.extend(
            ids.iter()
                .zip(logits)
                .map(|(&id, &logit)| Candidate { id, logit, p: 0.0 }),
        );
        c.sorted = true;
        self.filter_rest();
        let i = dist::draw(&mut self.cands, &mut self.rng);
        Ok(self.cands.data[i].id)
    }

    /// The candidates left after the filters and temperature (in `self.cands`).
    fn filter(&mut self, logits: &[f32]) -> Result<(), SamplingError> {
        let c = &mut self.cands;
        c.fill(logits);
        if c.data.is_empty() {
            return Err(SamplingError::NoCandidates);
        }
        top_k::apply(c, self.config.top_k);
        self.filter_rest();
        Ok(())
    }

    /// The filters after top-k, then temperature.
    fn filter_rest(&mut self) {
        let cfg = &self.config;
        let c = &mut self.cands;
        typical::apply(c, cfg.typical_p, cfg.min_keep, &mut self.typical);
        top_p::apply(c, cfg.top_p, cfg.min_keep);
        min_p::apply(c, cfg.min_p, cfg.min_keep);
        temperature::apply(c, cfg.temperature);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(n: usize, seed: u32) -> Vec<f32> {
        let mut r = Mt19937::new(seed);
        (0..n).map(|_| (r.next_f64() * 8.0 - 4.0) as f32).collect()
    }

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(&SamplingConfig::greedy(), 1000).unwrap();
        for seed in 0..20 {
            let l = logits(1000, seed);
            let want = l
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
                .map(|(i, _)| i as u32)
                .unwrap();
            assert_eq!(s.sample(&mut l.clone(), &[]).unwrap(), want);
        }
    }

    #[test]
    fn seeded_runs_repeat() {
        let cfg = SamplingConfig {
            seed: Some(1234),
            top_k: 50,
            top_p: 0.9,
            min_p: 0.01,
            temperature: 0.8,
            ..Default::default()
        };
        let run = || {
            let mut s = Sampler::new(&cfg, 5000).unwrap();
            (0..200)
                .map(|i| s.sample(&mut logits(5000, i), &[]).unwrap())
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let mut s = Sampler::new(&cfg, 5000).unwrap();
        let first: Vec<u32> = (0..200)
            .map(|i| s.sample(&mut logits(5000, i), &[]).unwrap())
            .collect();
        s.reset();
        let again: Vec<u32> = (0..200)
            .map(|i| s.sample(&mut logits(5000, i), &[]).unwrap())
            .collect();
        assert_eq!(first, again);
        assert!(a.iter().collect::<std::collections::HashSet<_>>().len() > 20);
    }

    #[test]
    fn vocab_mismatch_and_dead_logits_are_errors() {
        let mut s = Sampler::new(&SamplingConfig::default(), 4).unwrap();
        assert!(matches!(
            s.sample(&mut [0.0; 3], &[]),
            Err(SamplingError::VocabMismatch { .. })
        ));
        assert_eq!(
            s.sample(&mut [f32::NEG_INFINITY; 4], &[]),
            Err(SamplingError::NoCandidates)
        );
        let bias = SamplingConfig {
            logit_bias: vec![(9, 1.0)],
            ..Default::default()
        };
        assert!(matches!(
            Sampler::new(&bias, 4),
            Err(SamplingError::TokenOutOfRange { id: 9, .. })
        ));
    }

    #[test]
    fn logit_bias_ban_is_respected() {
        let cfg = SamplingConfig {
            logit_bias: vec![(0, f32::NEG_INFINITY)],
            seed: Some(3),
            ..Default::default()
        };
        let mut s = Sampler::new(&cfg, 3).unwrap();
        for _ in 0..200 {
            assert_ne!(s.sample(&mut [5.0, 0.0, 0.0], &[]).unwrap(), 0);
        }
    }

    /// The candidates a device's top-k returns: the sampler's rule, written out.
    fn top_candidates(logits: &[f32], k: usize) -> (Vec<u32>, Vec<f32>) {
        let mut c: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| {
                let l = logits[i as usize];
                !l.is_nan() && l != f32::NEG_INFINITY
            })
            .collect();
        c.sort_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        c.truncate(k);
        let v = c.iter().map(|&i| logits[i as usize]).collect();
        (c, v)
    }

    #[test]
    fn pick_top_draws_what_sample_draws() {
        let configs = [
            SamplingConfig {
                top_k: 40,
                ..SamplingConfig::default()
            },
            SamplingConfig {
                top_k: 5,
                top_p: 0.8,
                temperature: 0.7,
                ..SamplingConfig::default()
            },
            SamplingConfig {
                top_k: 256,
                min_p: 0.05,
                temperature: 1.3,
                ..SamplingConfig::default()
            },
            SamplingConfig {
                top_k: 20,
                typical_p: 0.9,
                min_keep: 3,
                ..SamplingConfig::default()
            },
            SamplingConfig {
                top_k: 1,
                ..SamplingConfig::default()
            },
        ];
        for (n, cfg) in configs.iter().enumerate() {
            let k = cfg.device_top_k().expect("a device top-k configuration");
            let cfg = SamplingConfig {
                seed: Some(n as u64 + 1),
                ..cfg.clone()
            };
            let mut whole = Sampler::new(&cfg, 300).unwrap();
            let mut top = Sampler::new(&cfg, 300).unwrap();
            for step in 0..40u32 {
                let mut l = logits(300, step * 7 + n as u32);
                // Dead entries, ties across the k-th place, both zeros.
                for i in (0..300).step_by(11) {
                    l[i] = f32::NAN;
                }
                for i in (5..300).step_by(13) {
                    l[i] = f32::NEG_INFINITY;
                }
                for i in (2..300).step_by(17) {
                    l[i] = 3.5;
                }
                l[1] = -0.0;
                l[3] = 0.0;
                let (ids, vals) = top_candidates(&l, k);
                let want = whole.sample(&mut l.clone(), &[]).unwrap();
                assert_eq!(
                    top.pick_top(&ids, &vals).unwrap(),
                    want,
                    "config {n}, step {step}"
                );
            }
        }
        // Not device top-k: greedy, top-k off or past 256, a logit bias, a penalty.
        assert_eq!(SamplingConfig::greedy().device_top_k(), None);
        for cfg in [
            SamplingConfig {
                top_k: 0,
                ..SamplingConfig::default()
            },
            SamplingConfig {
                top_k: 257,
                ..SamplingConfig::default()
            },
            SamplingConfig {
                logit_bias: vec![(3, 1.0)],
                ..SamplingConfig::default()
            },
            SamplingConfig {
                repeat_penalty: 1.1,
                penalty_last_n: 64,
                ..SamplingConfig::default()
            },
        ] {
            assert_eq!(cfg.device_top_k(), None, "{cfg:?}");
        }
        let mut s = Sampler::new(&SamplingConfig::default(), 10).unwrap();
        assert_eq!(s.pick_top(&[], &[]), Err(SamplingError::NoCandidates));
        assert!(s.pick_top(&[1, 2], &[1.0]).is_err());
        assert!(s.pick_top(&[10], &[1.0]).is_err());
        // Out of order: a larger logit second, a tie with the larger id first, NaN, -inf.
        let unordered = |ids: &[u32], l: &[f32]| {
            Sampler::new(&SamplingConfig::default(), 10)
                .unwrap()
                .pick_top(ids, l)
        };
        assert_eq!(
            unordered(&[1, 2], &[1.0, 2.0]),
            Err(SamplingError::UnorderedCandidates { index: 1 })
        );
        assert!(unordered(&[2, 1], &[1.0, 1.0]).is_err());
        assert!(unordered(&[1], &[f32::NAN]).is_err());
        assert!(unordered(&[1, 2], &[1.0, f32::NEG_INFINITY]).is_err());
        assert!(unordered(&[1, 2], &[1.0, 1.0]).is_ok());
    }
}
