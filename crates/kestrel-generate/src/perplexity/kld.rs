//! KL divergence of a model's token distributions from a base's, with llama-perplexity's
//! statistics (`--kl-divergence`): perplexities and their ratio, KLD mean and percentiles,
//! Δp (the change in the probability of the right token), same top token.
//!
//! Each row is computed as llama.cpp's `log_softmax(..., kl_divergence_result &)` does, in the
//! same float and double precisions, so figures from kestrel and from llama.cpp over the same
//! logits agree; rows are summed in order, so a result does not depend on the thread count.

use std::fmt;

use super::logprob_file::LogProbRow;

/// What one scored position contributes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RowKld {
    nll: f32,
    nll_base: f32,
    kld: f64,
    p_diff: f32,
    same_top: bool,
}

/// The KL divergence of `logits` (this model) from the base `row`, scoring `target`.
pub(crate) fn row_kld(logits: &[f32], row: &LogProbRow, target: usize) -> RowKld {
    let mut max_logit = logits[0];
    let mut imax = 0;
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > max_logit {
            max_logit = l;
            imax = i;
        }
    }
    let sum_exp: f64 = logits.iter().map(|&l| (l - max_logit).exp() as f64).sum();
    let log_sum_exp = sum_exp.ln() as f32;
    let nll = max_logit + log_sum_exp - logits[target];
    let nll_base = -row.log_prob(target);
    let max_logit = max_logit + log_sum_exp;
    let (scale, min_log_prob) = (row.scale, row.min_log_prob);
    let mut sum = 0f64;
    let mut imax_base = 0;
    let mut p_log_base_max = 0f32;
    for (i, (&q, &l)) in row.q.iter().zip(logits).enumerate() {
        let p_log_base = scale * q as f32 + min_log_prob;
        if i == 0 || p_log_base > p_log_base_max {
            p_log_base_max = p_log_base;
            imax_base = i;
        }
        if p_log_base > -16.0 {
            let p_base = p_log_base.exp();
            sum += (p_base * (p_log_base - l + max_logit)) as f64;
        }
    }
    RowKld {
        nll,
        nll_base,
        kld: sum,
        p_diff: (-nll).exp() - (-nll_base).exp(),
        same_top: imax == imax_base,
    }
}

/// A value and its standard error.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    /// The value.
    pub value: f64,
    /// Its uncertainty (one standard error).
    pub err: f64,
}

/// Percentiles of a distribution (llama.cpp's interpolation between the sorted values).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Smallest.
    pub min: f64,
    /// 0.1%.
    pub p0_1: f64,
    /// 1%.
    pub p1: f64,
    /// 5%.
    pub p5: f64,
    /// 10%.
    pub p10: f64,
    /// 25%.
    pub p25: f64,
    /// Median (the mean of the two middle values for an even count).
    pub median: f64,
    /// 75%.
    pub p75: f64,
    /// 90%.
    pub p90: f64,
    /// 95%.
    pub p95: f64,
    /// 99%.
    pub p99: f64,
    /// 99.9%.
    pub p99_9: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    fn of(values: &mut [f32]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        values.sort_by(f32::total_cmp);
        let n = values.len();
        let at = |fraction: f32| -> f64 {
            let p = fraction * (n - 1) as f32;
            let ip = p as usize;
            let p = p - ip as f32;
            ((1.0 - p) * values[ip] + p * values[(ip + 1).min(n - 1)]) as f64
        };
        let median = if n.is_multiple_of(2) {
            0.5 * (values[n / 2] + values[n / 2 - 1])
        } else {
            values[n / 2]
        };
        Percentiles {
            min: values[0] as f64,
            p0_1: at(0.001),
            p1: at(0.01),
            p5: at(0.05),
            p10: at(0.1),
            p25: at(0.25),
            median: median as f64,
            p75: at(0.75),
            p90: at(0.9),
            p95: at(0.95),
            p99: at(0.99),
            p99_9: at(0.999),
            max: values[n - 1] as f64,
        }
    }
}

/// Running sums over scored positions; [`KldAccumulator::stats`] turns them into
/// [`KlDivergence`] at any point (after each window, for a progress line).
#[derive(Clone, Debug, Default)]
pub struct KldAccumulator {
    sum_nll: f64,
    sum_nll2: f64,
    sum_nll_base: f64,
    sum_nll_base2: f64,
    sum_nll_nll_base: f64,
    sum_kld: f64,
    sum_kld2: f64,
    sum_p_diff: f64,
    sum_p_diff2: f64,
    sum_p_diff4: f64,
    n_same_top: usize,
    kld_values: Vec<f32>,
    p_diff_values: Vec<f32>,
    chunks: usize,
}

impl KldAccumulator {
    pub(crate) fn add(&mut self, r: RowKld) {
        self.sum_nll += r.nll as f64;
        self.sum_nll2 += (r.nll * r.nll) as f64;
        self.sum_nll_base += r.nll_base as f64;
        self.sum_nll_base2 += (r.nll_base * r.nll_base) as f64;
        self.sum_nll_nll_base += (r.nll * r.nll_base) as f64;
        self.sum_kld += r.kld;
        self.sum_kld2 += r.kld * r.kld;
        self.sum_p_diff += r.p_diff as f64;
        let p_diff2 = (r.p_diff * r.p_diff) as f64;
        self.sum_p_diff2 += p_diff2;
        self.sum_p_diff4 += p_diff2 * p_diff2;
        self.n_same_top += r.same_top as usize;
        self.kld_values.push(r.kld as f32);
        self.p_diff_values.push(r.p_diff);
    }

    pub(crate) fn end_chunk(&mut self) {
        self.chunks += 1;
    }

    /// Positions scored so far.
    pub fn count(&self) -> usize {
        self.kld_values.len()
    }

    /// The statistics of what was added so far.
    pub fn stats(&self) -> KlDivergence {
        let count = self.count();
        let mean_unc = |sum: f64, sum2: f64| -> Estimate {
            if count < 1 {
                return Estimate::default();
            }
            let f = sum / count as f64;
            let df = sum2 / count as f64 - f * f;
            let err = if df > 0.0 && count > 10 {
                (df / (count - 1) as f64).sqrt()
            } else {
                0.0
            };
            Estimate { value: f, err }
        };
        let log_ppl = mean_unc(self.sum_nll, self.sum_nll2);
        let log_ppl_base = mean_unc(self.sum_nll_base, self.sum_nll_base2);
        let cov = if count < 10 {
            0.0
        } else {
            let n = count as f64;
            (self.sum_nll_nll_base / n - (self.sum_nll / n) * (self.sum_nll_base / n)) / (n - 1.0)
        };
        let ppl = log_ppl.value.exp();
        let ppl_base = log_ppl_base.value.exp();
        let ppl_err = ppl * log_ppl.err;
        let ppl_base_err = ppl_base * log_ppl_base.err;
        let ratio_log = log_ppl.value - log_ppl_base.value;
        let ratio_log_err = (log_ppl.err * log_ppl.err + log_ppl_base.err * log_ppl_base.err
            - 2.0 * cov)
            .max(0.0)
            .sqrt();
        let ppl_cov = ppl * ppl_base * cov;
        let p_diff_mse = mean_unc(self.sum_p_diff2, self.sum_p_diff4);
        let rms = p_diff_mse.value.sqrt();
        let same = if count > 0 {
            self.n_same_top as f64 / count as f64
        } else {
            0.0
        };
        let mut kld_values = self.kld_values.clone();
        let mut p_diff_values = self.p_diff_values.clone();
        KlDivergence {
            chunks: self.chunks,
            count,
            ppl: Estimate {
                value: ppl,
                err: ppl_err,
            },
            ppl_base: Estimate {
                value: ppl_base,
                err: ppl_base_err,
            },
            ln_ppl_correlation: cov / (log_ppl.err * log_ppl_base.err),
            ln_ppl_ratio: Estimate {
                value: ratio_log,
                err: ratio_log_err,
            },
            ppl_ratio: Estimate {
                value: ratio_log.exp(),
                err: ratio_log.exp() * ratio_log_err,
            },
            ppl_diff: Estimate {
                value: ppl - ppl_base,
                err: (ppl_err * ppl_err + ppl_base_err * ppl_base_err - 2.0 * ppl_cov)
                    .max(0.0)
                    .sqrt(),
            },
            kld: mean_unc(self.sum_kld, self.sum_kld2),
            kld_percentiles: Percentiles::of(&mut kld_values),
            p_diff: mean_unc(self.sum_p_diff, self.sum_p_diff2),
            p_diff_percentiles: Percentiles::of(&mut p_diff_values),
            p_diff_rms: Estimate {
                value: rms,
                err: if rms > 0.0 {
                    0.5 / rms * p_diff_mse.err
                } else {
                    0.0
                },
            },
            same_top: Estimate {
                value: same,
                err: if count > 1 {
                    (same * (1.0 - same) / (count - 1) as f64).sqrt()
                } else {
                    0.0
                },
            },
        }
    }
}

/// How far a model's token distributions are from a base's over the same tokens, as
/// `llama-perplexity --kl-divergence` reports it. Probabilities (`p_diff`, `same_top`) are
/// fractions, not percentages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KlDivergence {
    /// Windows evaluated.
    pub chunks: usize,
    /// Positions scored.
    pub count: usize,
    /// This model's perplexity.
    pub ppl: Estimate,
    /// The base's perplexity (from the file's log-probabilities).
    pub ppl_base: Estimate,
    /// Correlation of the two log-perplexities.
    pub ln_ppl_correlation: f64,
    /// ln(PPL / PPL base).
    pub ln_ppl_ratio: Estimate,
    /// PPL / PPL base.
    pub ppl_ratio: Estimate,
    /// PPL − PPL base.
    pub ppl_diff: Estimate,
    /// Mean KL divergence, nats.
    pub kld: Estimate,
    /// Its distribution over positions.
    pub kld_percentiles: Percentiles,
    /// Mean of p − p base for the right token.
    pub p_diff: Estimate,
    /// Its distribution over positions.
    pub p_diff_percentiles: Percentiles,
    /// Root mean square of p − p base.
    pub p_diff_rms: Estimate,
    /// Fraction of positions where both pick the same most likely token.
    pub same_top: Estimate,
}

impl fmt::Display for KlDivergence {
    /// llama-perplexity's closing report.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (k, p) = (&self.kld_percentiles, &self.p_diff_percentiles);
        writeln!(f, "====== Perplexity statistics ======")?;
        writeln!(
            f,
            "Mean PPL(Q)                   : {:10.6} ± {:10.6}",
            self.ppl.value, self.ppl.err
        )?;
        writeln!(
            f,
            "Mean PPL(base)                : {:10.6} ± {:10.6}",
            self.ppl_base.value, self.ppl_base.err
        )?;
        writeln!(
            f,
            "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%",
            100.0 * self.ln_ppl_correlation
        )?;
        writeln!(
            f,
            "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}",
            self.ln_ppl_ratio.value, self.ln_ppl_ratio.err
        )?;
        writeln!(
            f,
            "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
            self.ppl_ratio.value, self.ppl_ratio.err
        )?;
        writeln!(
            f,
            "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}",
            self.ppl_diff.value, self.ppl_diff.err
        )?;
        writeln!(f)?;
        writeln!(f, "====== KL divergence statistics ======")?;
        writeln!(
            f,
            "Mean    KLD: {:10.6} ± {:10.6}",
            self.kld.value, self.kld.err
        )?;
        for (name, v) in [
            ("Maximum KLD", k.max),
            ("99.9%   KLD", k.p99_9),
            ("99.0%   KLD", k.p99),
            ("95.0%   KLD", k.p95),
            ("90.0%   KLD", k.p90),
            ("Median  KLD", k.median),
            ("10.0%   KLD", k.p10),
            (" 5.0%   KLD", k.p5),
            (" 1.0%   KLD", k.p1),
            (" 0.1%   KLD", k.p0_1),
            ("Minimum KLD", k.min),
        ] {
            writeln!(f, "{name}: {v:10.6}")?;
        }
        writeln!(f)?;
        writeln!(f, "====== Token probability statistics ======")?;
        writeln!(
            f,
            "Mean    Δp: {:6.3} ± {:5.3} %",
            100.0 * self.p_diff.value,
            100.0 * self.p_diff.err
        )?;
        for (name, v) in [
            ("Maximum Δp", p.max),
            ("99.9%   Δp", p.p99_9),
            ("99.0%   Δp", p.p99),
            ("95.0%   Δp", p.p95),
            ("90.0%   Δp", p.p90),
            ("75.0%   Δp", p.p75),
            ("Median  Δp", p.median),
            ("25.0%   Δp", p.p25),
            ("10.0%   Δp", p.p10),
            (" 5.0%   Δp", p.p5),
            (" 1.0%   Δp", p.p1),
            (" 0.1%   Δp", p.p0_1),
            ("Minimum Δp", p.min),
        ] {
            writeln!(f, "{name}: {:6.3}%", 100.0 * v)?;
        }
        writeln!(
            f,
            "RMS Δp    : {:6.3} ± {:5.3} %",
            100.0 * self.p_diff_rms.value,
            100.0 * self.p_diff_rms.err
        )?;
        writeln!(
            f,
            "Same top p: {:6.3} ± {:5.3} %",
            100.0 * self.same_top.value,
            100.0 * self.same_top.err
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::logprob_file::{LogProbReader, LogProbWriter};
    use super::*;

    fn row_of(logits: &[f32]) -> LogProbRow {
        let tokens = vec![0u32; 4];
        let mut w = LogProbWriter::new(Vec::new(), 4, logits.len(), &tokens).unwrap();
        w.write_row(logits, 0).unwrap();
        let bytes = w.finish().unwrap();
        let mut r = LogProbReader::new(&bytes[..], bytes.len() as u64).unwrap();
        let mut row = LogProbRow::default();
        r.read_row(&mut row).unwrap();
        row
    }

    #[test]
    fn a_model_against_its_own_base_diverges_by_its_quantization_only() {
        let logits: Vec<f32> = (0..300)
            .map(|i| ((i * 37) % 101) as f32 * 0.13 - 6.0)
            .collect();
        let r = row_kld(&logits, &row_of(&logits), 5);
        assert!(r.kld.abs() < 1e-4, "{}", r.kld);
        assert!(r.same_top);
        assert!(r.p_diff.abs() < 1e-5);
        assert!((r.nll - r.nll_base).abs() < 1e-3);
    }

    #[test]
    fn kld_matches_the_f64_definition() {
        let p: Vec<f32> = (0..64).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
        let q: Vec<f32> = (0..64)
            .map(|i| (i as f32 * 0.7).sin() * 2.0 + 0.1 * (i % 3) as f32)
            .collect();
        let lse = |v: &[f32]| {
            let m = v.iter().fold(f64::MIN, |m, &x| m.max(x as f64));
            m + v.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
        };
        let (lp, lq) = (lse(&p), lse(&q));
        let want: f64 = p
            .iter()
            .zip(&q)
            .map(|(&a, &b)| {
                let (la, lb) = (a as f64 - lp, b as f64 - lq);
                la.exp() * (la - lb)
            })
            .sum();
        let r = row_kld(&q, &row_of(&p), 3);
        assert!(
            (r.kld - want).abs() < 1e-3 * want.max(1e-3),
            "{} vs {want}",
            r.kld
        );
        assert!(r.kld > 0.01);
    }

    #[test]
    fn stats_follow_llama_cpp_formulas() {
        let mut acc = KldAccumulator::default();
        for i in 0..200 {
            acc.add(RowKld {
                nll: 2.0 + (i % 5) as f32 * 0.1,
                nll_base: 2.0 + (i % 5) as f32 * 0.1 - 0.01,
                kld: i as f64 * 1e-4,
                p_diff: if i % 2 == 0 { 0.01 } else { -0.01 },
                same_top: i % 10 != 0,
            });
        }
        acc.end_chunk();
        let s = acc.stats();
        assert_eq!((s.count, s.chunks), (200, 1));
        assert!((s.same_top.value - 0.9).abs() < 1e-12);
        assert!((s.kld.value - 199.0 * 1e-4 / 2.0).abs() < 1e-9);
        assert!((s.kld_percentiles.max - 0.0199).abs() < 1e-6);
        assert!((s.kld_percentiles.median - 0.00995).abs() < 1e-6);
        assert!((s.ln_ppl_ratio.value - 0.01).abs() < 1e-5);
        assert!((s.p_diff_rms.value - 0.01).abs() < 1e-6);
        assert!(s.p_diff.value.abs() < 1e-9);
        let text = s.to_string();
        assert!(text.contains("Mean    KLD:") && text.contains("Same top p: 90.000"));
    }
}
