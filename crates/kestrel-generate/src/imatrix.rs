//! Importance matrices as llama-imatrix computes them: the text cut into llama-perplexity's
//! windows (each from an empty cache, BOS first where the model adds one), every weight
//! matmul's inputs watched, and for each matrix the per-column sum of squares (and sum) of its
//! input rows, with the rows counted. Dense matrices count only steps of at least 16 rows and
//! only `blk.*` weights (plus `output.weight`/`token_embd.weight` with `process_output`), as
//! llama-imatrix does; expert matrices count every routed row, per expert. The result is
//! written by [`ImatrixSums::write`] in llama-imatrix's GGUF format for
//! `kestrel quantize --imatrix` or `llama-quantize --imatrix`; a run can continue from files
//! read back (`llama-imatrix --in-file`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kestrel_gguf::quantize::{ImatrixEntry, ImatrixSums};
use kestrel_graph::ActivationHook;

use crate::perplexity::{NllSum, Perplexity};
use crate::{GenerateError, Generator};

/// How to compute an importance matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImatrixOptions {
    /// Tokens per window (llama-imatrix's `-c`, 512).
    pub n_ctx: usize,
    /// Windows to evaluate (all the text holds when `None`).
    pub chunks: Option<usize>,
    /// Also collect the output matrix (`--process-output`).
    pub process_output: bool,
}

impl Default for ImatrixOptions {
    fn default() -> Self {
        ImatrixOptions {
            n_ctx: 512,
            chunks: None,
            process_output: false,
        }
    }
}

/// An importance-matrix run: the sums and the text's perplexity on the way.
#[derive(Clone, Debug, PartialEq)]
pub struct ImatrixRun {
    /// The collected sums (`datasets` left empty for the caller to name the text).
    pub sums: ImatrixSums,
    /// Perplexity of the windows (second halves), as llama-imatrix prints it.
    pub perplexity: Perplexity,
}

/// One matrix's sums of squares, sums and row counts (i64 as llama-imatrix keeps them).
type Sums = (Vec<f32>, Vec<f32>, Vec<i64>);

/// Per matrix, the sums so far.
#[derive(Default)]
struct Stats {
    entries: BTreeMap<String, Sums>,
    /// The first inconsistency seen (a matrix met with two widths, non-finite sums).
    error: Option<String>,
}

/// The hook the plan calls; the stats are shared with the run that reads them afterwards.
struct Collector {
    stats: Arc<Mutex<Stats>>,
    process_output: bool,
    /// Row order of an expert group by routing slot (reused).
    order: Vec<usize>,
}

/// Adds one input row: its squares to `sum2`, itself to `sum` (empty where an imatrix read
/// from a file had no `in_sum`: then no longer collected, as llama-imatrix does).
fn accumulate(sum2: &mut [f32], sum: &mut [f32], x: &[f32]) {
    for (s2, &v) in sum2.iter_mut().zip(x) {
        *s2 += v * v;
    }
    for (s, &v) in sum.iter_mut().zip(x) {
        *s += v;
    }
}

impl ActivationHook for Collector {
    fn dense(&mut self, weight: &str, x: &[f32], rows: usize, width: usize) {
        if rows < 16 {
            return;
        }
        let is_output = weight == "output.weight" || weight == "token_embd.weight";
        if !(weight.starts_with("blk.") || (self.process_output && is_output)) {
            return;
        }
        let Ok(mut st) = self.stats.lock() else {
            return;
        };
        let st = &mut *st;
        let e = st
            .entries
            .entry(weight.to_string())
            .or_insert_with(|| (vec![0.0; width], vec![0.0; width], vec![0]));
        if e.0.len() != width {
            st.error.get_or_insert(format!(
                "{weight}: inputs of width {width} after {}",
                e.0.len()
            ));
            return;
        }
        // One count per dense matrix (a combined file may hold several equal ones).
        if e.2.len() > 1 && e.2.iter().all(|&c| c == e.2[0]) {
            e.2.truncate(1);
        }
        for row in x.chunks_exact(width).take(rows) {
            accumulate(&mut e.0, &mut e.1, row);
        }
        for c in e.2.iter_mut() {
            *c += rows as i64;
        }
        if e.0.iter().any(|v| !v.is_finite()) {
            st.error
                .get_or_insert(format!("{weight}: non-finite values in its inputs"));
        }
    }

    fn expert(
        &mut self,
        weight: &str,
        n_expert: usize,
        expert: usize,
        x: &[f32],
        width: usize,
        slots: &[usize],
    ) {
        let Ok(mut st) = self.stats.lock() else {
            return;
        };
        let st = &mut *st;
        let e = st.entries.entry(weight.to_string()).or_insert_with(|| {
            (
                vec![0.0; width * n_expert],
                vec![0.0; width * n_expert],
                vec![0; n_expert],
            )
        });
        if e.2.len() == 1 && n_expert > 1 {
            e.2 = vec![e.2[0]; n_expert]; // one count from an older file: per expert
        }
        if e.0.len() != width * n_expert || e.2.len() != n_expert || expert >= n_expert {
            st.error.get_or_insert(format!(
                "{weight}: expert inputs of width {width} × {n_expert} after {}",
                e.0.len()
            ));
            return;
        }
        // llama-imatrix walks routing slot by slot, then token by token.
        self.order.clear();
        self.order.extend(0..slots.len());
        self.order.sort_by_key(|&i| slots[i]);
        let s2 = &mut e.0[expert * width..(expert + 1) * width];
        let s =
            e.1.get_mut(expert * width..(expert + 1) * width)
                .unwrap_or_default();
        for &i in &self.order {
            if let Some(row) = x.get(i * width..(i + 1) * width) {
                accumulate(s2, s, row);
                e.2[expert] += 1;
            }
        }
        if s2.iter().any(|v| !v.is_finite()) {
            st.error
                .get_or_insert(format!("{weight}: non-finite values in its inputs"));
        }
    }
}

impl Generator {
    /// An importance matrix of `tokens` (the text tokenized with BOS where the model adds
    /// one), as llama-imatrix computes it; `bos` replaces each window's first token. Needs at
    /// least two windows of tokens, as llama-imatrix does. CPU only.
    ///
    /// # Errors
    /// Too little text, a CUDA generator, an inconsistent or non-finite matrix.
    pub fn imatrix(
        &mut self,
        tokens: &[u32],
        opts: &ImatrixOptions,
        bos: Option<u32>,
        on_chunk: impl FnMut(usize, &Perplexity),
    ) -> Result<ImatrixRun, GenerateError> {
        self.imatrix_onto(ImatrixSums::default(), tokens, opts, bos, on_chunk)
    }

    /// [`imatrix`](Self::imatrix) continuing from `prior` (files read with
    /// [`ImatrixSums::load`] and [`combine`](ImatrixSums::combine)d), as `llama-imatrix
    /// --in-file` does: the new rows are added onto its sums, its datasets, chunk size (where
    /// set) and NextN count are kept, and the chunk count follows the counts.
    ///
    /// # Errors
    /// As [`imatrix`](Self::imatrix); a matrix whose width differs from `prior`'s.
    pub fn imatrix_onto(
        &mut self,
        prior: ImatrixSums,
        tokens: &[u32],
        opts: &ImatrixOptions,
        bos: Option<u32>,
        mut on_chunk: impl FnMut(usize, &Perplexity),
    ) -> Result<ImatrixRun, GenerateError> {
        let n_ctx = opts.n_ctx;
        if tokens.len() < n_ctx.saturating_mul(2) {
            return Err(GenerateError::InvalidOption {
                name: "text",
                reason: format!(
                    "{} tokens; an importance matrix needs at least {} (two windows of {n_ctx})",
                    tokens.len(),
                    2 * n_ctx
                ),
            });
        }
        let entries = prior
            .entries
            .into_iter()
            .map(|(name, e)| {
                let counts = e.counts.iter().map(|&c| c as i64).collect();
                (name, (e.in_sum2, e.in_sum, counts))
            })
            .collect();
        let stats = Arc::new(Mutex::new(Stats {
            entries,
            error: None,
        }));
        let hook = Collector {
            stats: stats.clone(),
            process_output: opts.process_output,
            order: Vec::new(),
        };
        let mut sum = NllSum::default();
        let mut done = 0;
        let chunks = self.score_windows(
            tokens,
            n_ctx,
            opts.chunks,
            bos,
            Some(Box::new(hook)),
            |_, window, logits, n_vocab| {
                sum.add_window(window, logits, n_vocab);
                done += 1;
                on_chunk(done, &sum.finish(done));
                Ok(())
            },
        )?;
        let st = std::mem::take(
            &mut *stats
                .lock()
                .map_err(|_| GenerateError::Callback("imatrix stats poisoned".into()))?,
        );
        if let Some(e) = st.error {
            return Err(GenerateError::InvalidOption {
                name: "model",
                reason: format!("importance matrix: {e}"),
            });
        }
        let entries = st
            .entries
            .into_iter()
            .map(|(name, (in_sum2, in_sum, counts))| {
                let counts = counts.into_iter().map(|c| c as f32).collect();
                (
                    name,
                    ImatrixEntry {
                        in_sum2,
                        in_sum,
                        counts,
                    },
                )
            })
            .collect();
        let mut sums = ImatrixSums {
            datasets: prior.datasets,
            chunk_count: 0,
            chunk_size: if prior.chunk_size > 0 {
                prior.chunk_size
            } else {
                n_ctx as u32
            },
            n_layer_nextn: prior.n_layer_nextn,
            entries,
        };
        sums.count_chunks();
        Ok(ImatrixRun {
            sums,
            perplexity: sum.finish(chunks),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collector(process_output: bool) -> (Collector, Arc<Mutex<Stats>>) {
        let stats = Arc::new(Mutex::new(Stats::default()));
        let c = Collector {
            stats: stats.clone(),
            process_output,
            order: Vec::new(),
        };
        (c, stats)
    }

    #[test]
    fn dense_inputs_are_summed_as_llama_imatrix_sums_them() {
        let (mut c, stats) = collector(false);
        let x: Vec<f32> = (0..16 * 3).map(|i| i as f32 * 0.5).collect();
        c.dense("blk.0.attn_q.weight", &x, 16, 3);
        c.dense("blk.0.attn_q.weight", &x[..15 * 3], 15, 3); // fewer than 16 rows: skipped
        c.dense("output.weight", &x, 16, 3); // not without process_output
        c.dense("token_types.weight", &x, 16, 3); // not a block weight
        let st = stats.lock().unwrap();
        assert_eq!(st.entries.len(), 1);
        let (s2, s, n) = &st.entries["blk.0.attn_q.weight"];
        assert_eq!(n, &vec![16]);
        let col0: Vec<f32> = x.chunks(3).map(|r| r[0]).collect();
        assert_eq!(s[0], col0.iter().sum::<f32>());
        assert_eq!(s2[0], col0.iter().fold(0.0, |a, v| a + v * v));
        drop(st);
        let (mut c, stats) = collector(true);
        c.dense("output.weight", &x, 16, 3);
        assert!(stats.lock().unwrap().entries.contains_key("output.weight"));
    }

    #[test]
    fn sums_read_from_a_file_are_continued_as_llama_imatrix_continues_them() {
        let (mut c, stats) = collector(false);
        {
            let mut st = stats.lock().unwrap();
            // No in_sum in the file: only the squares go on being summed.
            st.entries.insert(
                "blk.0.attn_q.weight".into(),
                (vec![1.0; 2], vec![], vec![5, 5]),
            );
            // One count for all experts (an older file): spread over the experts first.
            st.entries.insert(
                "blk.0.ffn_up_exps.weight".into(),
                (vec![0.0; 4], vec![0.0; 4], vec![7]),
            );
        }
        c.dense("blk.0.attn_q.weight", &[2.0; 32], 16, 2);
        c.expert("blk.0.ffn_up_exps.weight", 2, 1, &[1.0, 1.0], 2, &[0]);
        let st = stats.lock().unwrap();
        assert!(st.error.is_none(), "{:?}", st.error);
        let (s2, s, n) = &st.entries["blk.0.attn_q.weight"];
        assert_eq!(
            (s2.as_slice(), s.len(), n.as_slice()),
            (&[65.0, 65.0][..], 0, &[21][..])
        );
        assert_eq!(st.entries["blk.0.ffn_up_exps.weight"].2, vec![7, 8]);
    }

    #[test]
    fn expert_rows_count_per_expert_in_slot_order() {
        let (mut c, stats) = collector(false);
        // Expert 1 of 2 saw three rows, chosen by slots 1, 0, 0.
        let x = [1.0f32, 2.0, 1e8, 1.0, -1e8, 3.0];
        c.expert("blk.0.ffn_up_exps.weight", 2, 1, &x, 2, &[1, 0, 0]);
        c.dense("blk.0.ffn_up_exps.weight", &[0.0; 2 * 16], 16, 2); // width mismatch
        let st = stats.lock().unwrap();
        let (s2, s, n) = &st.entries["blk.0.ffn_up_exps.weight"];
        assert_eq!(n, &vec![0, 3]);
        assert_eq!(&s2[..2], &[0.0, 0.0]);
        // Slot order (rows 1, 2, then 0): 1e8 - 1e8 + 1 = 1; token order would lose the 1.
        assert_eq!(s[2], 1.0);
        assert_eq!(s[3], 2.0 + 1.0 + 3.0);
        assert!(st.error.is_some());
    }
}
