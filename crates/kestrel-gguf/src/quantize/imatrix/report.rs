//! `llama-imatrix --show-statistics`: an importance matrix's statistics per tensor and per
//! layer, as the tables llama-imatrix (b11434) prints them, character for character: its sort
//! (block, then name), its layer sums (an `f32` running total of each tensor's `f64` sum), its
//! aggregation of the layer-to-layer values, C's `printf` numbers (`nan`, `-nan`, `inf`) and
//! its widths counted in bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::stats::{all_stats, h_norm, split_name, stoi, TensorStats};
use super::ImatrixSums;

/// What `--show-statistics` prints.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StatisticsReport {
    /// The tables (llama-imatrix's standard output).
    pub text: String,
    /// What llama-imatrix logs as a warning: some tensors without activation sums (the table
    /// then has the legacy columns).
    pub warning: Option<String>,
    /// Set where llama-imatrix stops after the tensor table and fails: blocks missing from the
    /// sequence, so no layer table.
    pub error: Option<String>,
}

/// C's `%W.Pf` for a `double`.
fn cf(x: f64, width: usize, prec: usize) -> String {
    let s = if x.is_nan() {
        if x.is_sign_negative() { "-nan" } else { "nan" }.to_string()
    } else if x.is_infinite() {
        if x < 0.0 { "-inf" } else { "inf" }.to_string()
    } else {
        format!("{x:.prec$}")
    };
    right(&s, width)
}

/// C's `%Ws`: right-aligned to `width` bytes.
fn right(s: &str, width: usize) -> String {
    format!("{}{s}", " ".repeat(width.saturating_sub(s.len())))
}

/// C's `%-Ws`: left-aligned to `width` bytes.
fn left(s: &str, width: usize) -> String {
    format!("{s}{}", " ".repeat(width.saturating_sub(s.len())))
}

/// A name cut to `w` bytes from the left, `..` marking the cut.
fn label(s: &str, w: usize) -> String {
    if s.len() <= w {
        return s.to_string();
    }
    let from = s.len() - (w - 2);
    match s.get(from..) {
        Some(tail) => format!("..{tail}"),
        None => format!("..{}", String::from_utf8_lossy(&s.as_bytes()[from..])),
    }
}

/// llama-imatrix's block label: `-` outside blocks, `mtpK` for the K-th NextN block.
fn layer_label(blk: i32, nextn_start: i32) -> String {
    if blk < 0 || blk == i32::MAX {
        "-".into()
    } else if blk >= nextn_start {
        format!("mtp{}", blk - nextn_start)
    } else {
        blk.to_string()
    }
}

/// A tensor's block for sorting and for the layer table: its number, else `i32::MAX` for an
/// output tensor and `fallback` for the rest.
fn block_of(name: &str, layer: &str, fallback: i32) -> i32 {
    stoi(layer).unwrap_or(if name.contains("output") {
        i32::MAX
    } else {
        fallback
    })
}

/// The layer-to-layer values of each block: the sums of its tensors' terms, then the same
/// formulas as for one tensor (cosine, L2 distance, Pearson, covariance, RMS gain).
#[derive(Default)]
struct LayerSums {
    dot: f64,
    n1: f64,
    n2: f64,
    l2: f64,
    cov: f64,
    var_c: f64,
    var_p: f64,
    energy_curr: f64,
    energy_prev: f64,
    elements_curr: i64,
    elements_prev: i64,
    features: i64,
    tensors: usize,
}

/// (gain, L2 distance, cosine, Pearson, covariance) per block above 0.
fn layer_stats(ts: &[(&str, TensorStats)]) -> BTreeMap<i32, [f32; 5]> {
    let mut agg: BTreeMap<i32, LayerSums> = BTreeMap::new();
    for (name, t) in ts {
        let (layer, _) = split_name(name);
        let blk = stoi(&layer).unwrap_or(-1);
        if blk <= 0 || (t.norm1_sq == 0.0 && t.norm2_sq == 0.0 && t.l2_dist_sq == 0.0) {
            continue;
        }
        let a = agg.entry(blk).or_default();
        a.dot += t.dot_prod;
        a.n1 += t.norm1_sq;
        a.n2 += t.norm2_sq;
        a.l2 += t.l2_dist_sq;
        a.cov += t.cov_sum;
        a.var_c += t.var_c_sum;
        a.var_p += t.var_p_sum;
        a.tensors += 1;
        if t.n_features > 0 {
            a.features += t.n_features;
        }
        if t.elements_prev > 0 {
            a.energy_curr += t.sum;
            a.energy_prev += t.sum_prev;
            a.elements_curr += t.elements;
            a.elements_prev += t.elements_prev;
        }
    }
    let mut out = BTreeMap::new();
    for (blk, a) in agg {
        if a.tensors == 0 {
            continue;
        }
        let cossim = if a.n1 > 0.0 && a.n2 > 0.0 {
            ((a.dot / (a.n1.sqrt() * a.n2.sqrt())) as f32).clamp(-1.0, 1.0)
        } else if a.n1 == 0.0 && a.n2 == 0.0 {
            f32::NAN
        } else {
            0.0
        };
        let gain = if a.elements_curr > 0 && a.elements_prev > 0 && a.energy_prev > 0.0 {
            let rms_c = (a.energy_curr / a.elements_curr as f64).sqrt();
            let rms_p = (a.energy_prev / a.elements_prev as f64).sqrt();
            (rms_c / rms_p) as f32
        } else {
            f32::NAN
        };
        let covariance = if a.features > 0 {
            (a.cov / a.features as f64) as f32
        } else {
            f32::NAN
        };
        let pearson = if a.var_c > 0.0 && a.var_p > 0.0 {
            ((a.cov / (a.var_c.sqrt() * a.var_p.sqrt())) as f32).clamp(-1.0, 1.0)
        } else if a.var_c == 0.0 && a.var_p == 0.0 {
            f32::NAN
        } else {
            0.0
        };
        out.insert(blk, [gain, a.l2.sqrt() as f32, cossim, pearson, covariance]);
    }
    out
}

impl ImatrixSums {
    /// The statistics `llama-imatrix --show-statistics --in-file FILE` prints for these sums
    /// (`file` is the name shown); `None` where no tensor has counted values (llama-imatrix
    /// then fails without a table).
    pub fn statistics_report(&self, file: &str) -> Option<StatisticsReport> {
        let (all, nextn) = all_stats(&self.entries, self.n_layer_nextn);
        if all.is_empty() {
            return None;
        }
        let n_legacy = all.values().filter(|t| t.legacy).count();
        let warning = (n_legacy > 0 && n_legacy < all.len()).then(|| {
            format!(
                "{n_legacy} of {} tensors have no activation data, using the legacy layout",
                all.len()
            )
        });
        let legacy = n_legacy > 0;
        let mut ts: Vec<(&str, TensorStats)> = all.into_iter().collect();
        let key = |name: &str| {
            let (layer, short) = split_name(name);
            (block_of(name, &layer, i32::MAX - 1), short)
        };
        ts.sort_by_cached_key(|(name, _)| key(name));

        let (w_lay, w_nam, sep) = (6, 40, " | ");
        let mut o = String::new();
        let _ = writeln!(
            o,
            "\nComputing tensor statistics for {file} ({} tensors)",
            ts.len()
        );
        let head = [
            right("Layer", w_lay),
            sep.into(),
            left("Tensor", w_nam),
            sep.into(),
            right("Mean", 10),
            right("StdDev", 10),
            right("Skew", 12),
            right("Kurt", 12),
            right("H Norm", 9),
            sep.into(),
            right("\u{2211} E[A\u{b2}]", 17),
            right("Gain", 8),
            sep.into(),
        ]
        .concat();
        // The legacy layout (some tensor without activation sums) has no L2 distance column.
        let l2_head = |w| {
            if legacy {
                String::new()
            } else {
                right("L2 Dist", w)
            }
        };
        let _ = writeln!(
            o,
            "\n{head}{}{}{}",
            l2_head(12),
            right("PCC", 10),
            right("Cov", 10)
        );
        let _ = writeln!(o, "{}", "-".repeat(if legacy { 153 } else { 165 }));
        let l2_col = |x: f32, w| {
            if legacy {
                String::new()
            } else {
                cf(f64::from(x), w, 4)
            }
        };
        // Per block: the f32 running sum of the tensors' sums, and their element count.
        let mut per_layer: BTreeMap<i32, (f32, i64)> = BTreeMap::new();
        for (name, t) in &ts {
            let (layer, _) = split_name(name);
            let blk = block_of(name, &layer, -1);
            let f = |x: f32, w, p| cf(f64::from(x), w, p);
            let _ = write!(
                o,
                "{}{sep}{}{sep}{}{}{}{}{}%{sep}{}{}{sep}",
                right(&layer_label(blk, nextn), w_lay),
                left(&label(name, w_nam), w_nam),
                f(t.mean, 10, 4),
                f(t.std_deviation, 10, 4),
                f(t.skewness, 12, 4),
                f(t.kurtosis, 12, 4),
                f(h_norm(t), 8, 2),
                cf(t.sum, 14, 4),
                f(t.gain, 8, 2),
            );
            let _ = writeln!(
                o,
                "{}{}{}",
                l2_col(t.l2_dist, 12),
                f(t.pearson, 10, 4),
                f(t.covariance, 10, 4)
            );
            let l = per_layer.entry(blk).or_insert((0.0, 0));
            l.0 = (f64::from(l.0) + t.sum) as f32;
            l.1 += t.elements;
        }

        let layers = layer_stats(&ts);
        let counted = |&(&l, &(_, n)): &(&i32, &(f32, i64))| (0..9999).contains(&l) && n > 0;
        let n_layers = per_layer.iter().filter(counted).count();
        let trunk: Vec<i32> = per_layer
            .iter()
            .filter(counted)
            .map(|(&l, _)| l)
            .filter(|&l| l < nextn)
            .collect();
        if let (Some(&min), Some(&max)) = (trunk.iter().min(), trunk.iter().max()) {
            let expected = (max - min + 1) as usize;
            if trunk.len() != expected {
                return Some(StatisticsReport {
                    text: o,
                    warning,
                    error: Some(format!(
                        "layer sequence gap detected (found {} layers in range {min}-{max}, \
                         expected {expected}); layer statistics will not be shown",
                        trunk.len()
                    )),
                });
            }
        }
        let _ = writeln!(
            o,
            "\nComputing layer statistics for {file} ({n_layers} layers)\n"
        );
        let head = [
            right("Layer", w_lay),
            sep.into(),
            right("\u{2211} E[A\u{b2}]", 17),
            right("Gain", 8),
            sep.into(),
        ]
        .concat();
        let _ = writeln!(
            o,
            "{head}{}{}{}{}",
            l2_head(12),
            right("CosSim", 9),
            right("PCC", 9),
            right("Cov", 12)
        );
        let _ = writeln!(o, "{}", "-".repeat(if legacy { 64 } else { 76 }));
        for (&layer, &(sum, n)) in &per_layer {
            if layer < 0 || n == 0 {
                continue;
            }
            let [gain, l2, cos, pcc, cov] = if layer == 0 || layer == i32::MAX {
                [f32::NAN; 5]
            } else {
                layers.get(&layer).copied().unwrap_or([f32::NAN; 5])
            };
            let f = |x: f32, w, p| cf(f64::from(x), w, p);
            let _ = write!(
                o,
                "{}{sep}{}{}{sep}",
                right(&layer_label(layer, nextn), w_lay),
                f(sum, 14, 4),
                f(gain, 8, 2)
            );
            let _ = writeln!(
                o,
                "{}{}{}{}",
                l2_col(l2, 12),
                f(cos, 9, 4),
                f(pcc, 9, 4),
                f(cov, 12, 4)
            );
        }
        o.push('\n');
        Some(StatisticsReport {
            text: o,
            warning,
            error: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_c_prints_them() {
        assert_eq!(cf(1.5, 8, 2), "    1.50");
        assert_eq!(cf(-0.0, 8, 2), "   -0.00");
        assert_eq!(cf(f64::NAN, 8, 2), "     nan");
        assert_eq!(cf(-f64::NAN, 8, 2), "    -nan");
        assert_eq!(cf(f64::INFINITY, 6, 1), "   inf");
        assert_eq!(cf(123456.789, 4, 1), "123456.8");
        // widths count bytes: the sum sign and the square take five of them
        assert_eq!(right("\u{2211} E[A\u{b2}]", 17).len(), 17);
        assert_eq!(
            label("blk.10.ffn_down_exps.weight", 40),
            "blk.10.ffn_down_exps.weight"
        );
        assert_eq!(label("abcdefgh", 6), "..efgh");
        assert_eq!(layer_label(3, 5), "3");
        assert_eq!(layer_label(6, 5), "mtp1");
        assert_eq!(layer_label(-1, 5), "-");
    }
}
