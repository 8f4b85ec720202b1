//! The per-matrix summaries llama-imatrix (b11434) stores beside its sums: `<name>.stats`, 12
//! f32 values named by the file's `imatrix.stats_schema`. They are computed from the sums alone
//! (per column, the sums divided by the rows counted), each matrix against the same matrix of
//! the nearest earlier block for the layer-to-layer values (gain, distance, cosine, Pearson,
//! covariance), with llama-imatrix's arithmetic (f64 sums in its order, its f32 roundings) so
//! a file kestrel writes from the same sums is the same bytes.

use std::collections::{BTreeMap, HashMap};

use super::entry::ImatrixEntry;

/// The names of the 12 values, in their order (`imatrix.stats_schema`).
pub(crate) const STATS_SCHEMA: [&str; 12] = [
    "sum_sq",
    "mean",
    "elements",
    "std_deviation",
    "skewness",
    "kurtosis",
    "gain",
    "h_norm",
    "l2_dist",
    "cossim",
    "pearson",
    "covariance",
];

/// One matrix's own statistics, then the ones against its predecessor (NaN until set), and
/// the sums behind those that the per-layer statistics add up.
#[derive(Clone, Copy, Default)]
pub(crate) struct TensorStats {
    pub legacy: bool,
    pub sum: f64,
    pub mean: f32,
    pub elements: i64,
    pub std_deviation: f32,
    pub skewness: f32,
    pub kurtosis: f32,
    pub entropy: f32,
    pub gain: f32,
    pub l2_dist: f32,
    pub cossim: f32,
    pub pearson: f32,
    pub covariance: f32,
    pub n_features: i64,
    pub dot_prod: f64,
    pub norm1_sq: f64,
    pub norm2_sq: f64,
    pub l2_dist_sq: f64,
    pub cov_sum: f64,
    pub var_c_sum: f64,
    pub var_p_sum: f64,
    pub sum_prev: f64,
    pub elements_prev: i64,
}

/// Per-column averages (sums over counts; NaN for an expert that saw no rows), or `None`
/// when nothing was counted or the lengths disagree.
fn averages(e: &ImatrixEntry, use_activations: bool) -> Option<Vec<f32>> {
    let n_mat = e.counts.len();
    let src = if use_activations {
        &e.in_sum
    } else {
        &e.in_sum2
    };
    if n_mat == 0 || src.is_empty() || !src.len().is_multiple_of(n_mat) {
        return None;
    }
    let row = src.len() / n_mat;
    let mut out = vec![f32::NAN; src.len()];
    let mut valid = false;
    for (m, &c) in e.counts.iter().enumerate() {
        if c <= 0.0 {
            continue;
        }
        valid = true;
        let scale = 1.0 / c;
        for (d, &s) in out[m * row..(m + 1) * row]
            .iter_mut()
            .zip(&src[m * row..(m + 1) * row])
        {
            *d = s * scale;
        }
    }
    valid.then_some(out)
}

/// Mean, spread and entropy of one matrix's averages: of the plain sums' averages where the
/// entry has them (`in_sum`), else of the squares' (a `legacy` entry); `sum` and the entropy
/// always over the squares'.
fn vector_stats(e: &ImatrixEntry) -> Option<TensorStats> {
    let legacy = e.in_sum.is_empty();
    let n_mat = e.counts.len();
    let len = if legacy {
        e.in_sum2.len()
    } else {
        e.in_sum.len()
    };
    if n_mat == 0 || len == 0 || !len.is_multiple_of(n_mat) {
        return None;
    }
    if !legacy && e.in_sum2.len() != len {
        return None;
    }
    let row = len / n_mat;
    // (the value the moments are of, the squares' average) per counted column
    let values = |f: &mut dyn FnMut(f64, f64)| {
        for (i, &c) in e.counts.iter().enumerate() {
            if c <= 0.0 {
                continue;
            }
            let inv_c = 1.0 / f64::from(c);
            for j in i * row..(i + 1) * row {
                let v_val = f64::from(e.in_sum2[j]) * inv_c;
                let v = if legacy {
                    v_val
                } else {
                    f64::from(e.in_sum[j]) * inv_c
                };
                if v.is_finite() && v_val.is_finite() {
                    f(v, v_val);
                }
            }
        }
    };
    let (mut sum, mut mean, mut energy, mut n) = (0f64, 0f64, 0f64, 0usize);
    values(&mut |v, v_val| {
        sum += v_val;
        n += 1;
        mean += (v - mean) / n as f64;
        if v_val > 0.0 {
            energy += v_val;
        }
    });
    if n == 0 {
        return None;
    }
    let inv_energy = if energy > 0.0 { 1.0 / energy } else { 0.0 };
    let log2_inv = 1.0 / 2f64.ln();
    let (mut sq, mut cu, mut qd, mut entropy) = (0f64, 0f64, 0f64, 0f64);
    values(&mut |v, v_val| {
        let d = v - mean;
        sq += d * d;
        cu += d * d * d;
        qd += d * d * d * d;
        if inv_energy > 0.0 {
            let p = v_val.max(0.0) * inv_energy;
            if p > 1e-10 {
                entropy -= p * p.ln() * log2_inv;
            }
        }
    });
    let nf = n as f64;
    let variance = if n > 1 { sq / nf } else { 0.0 };
    let std_deviation = (variance.max(0.0) as f32).sqrt();
    let (mut skewness, mut kurtosis) = (0f32, 0f32);
    if std_deviation > 1e-10 {
        let m2 = sq / nf;
        skewness = (cu / nf / (m2 * m2.sqrt())) as f32;
        kurtosis = (qd / nf / (m2 * m2) - 3.0) as f32;
    }
    Some(TensorStats {
        legacy,
        sum,
        mean: mean as f32,
        elements: n as i64,
        std_deviation,
        skewness,
        kurtosis,
        entropy: entropy as f32,
        gain: f32::NAN,
        l2_dist: f32::NAN,
        cossim: f32::NAN,
        pearson: f32::NAN,
        covariance: f32::NAN,
        ..TensorStats::default()
    })
}

/// C's `std::stoi`: leading blanks, a sign, digits; `None` where it would throw.
pub(crate) fn stoi(s: &str) -> Option<i32> {
    let t = s.trim_start();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    let v: i64 = digits[..end].parse().ok()?;
    i32::try_from(if neg { -v } else { v }).ok()
}

/// llama-imatrix's reading of a tensor name: the block number's text ("-" outside blocks) and
/// the name within the block (the whole name where it finds none).
pub(crate) fn split_name(input: &str) -> (String, String) {
    let mut parts: Vec<&str> = input.split('.').collect();
    if input.is_empty() || input.ends_with('.') {
        parts.pop(); // getline yields no empty last item
    }
    let n = parts.len();
    let layer = (0..n)
        .find(|&i| parts[i] == "blk" && i + 1 < n)
        .map_or_else(|| "-".to_string(), |i| parts[i + 1].to_string());
    let mut tensor = String::new();
    if let Some(i) = (1..n).find(|&i| parts[i] == "weight") {
        let mut j = 0;
        while j < n {
            if parts[j] == "blk" {
                j += if n > 4 { 2 } else { 3 };
                continue;
            }
            if j == i {
                break;
            }
            if !tensor.is_empty() {
                tensor.push('.');
            }
            tensor.push_str(parts[j]);
            j += 1;
        }
    }
    if tensor.is_empty() {
        tensor = input.to_string();
    }
    (layer, tensor)
}

/// The first NextN (multi-token prediction) block: the top `n_layer_nextn` blocks where the
/// file says, else the first block holding a `nextn.` tensor (`i32::MAX`: none).
fn nextn_start(stats: &BTreeMap<&str, TensorStats>, n_layer_nextn: u32) -> i32 {
    let (mut max_blk, mut first) = (-1i32, i32::MAX);
    for name in stats.keys() {
        let (layer, tensor) = split_name(name);
        let Some(blk) = stoi(&layer) else { continue };
        max_blk = max_blk.max(blk);
        if tensor.starts_with("nextn.") {
            first = first.min(blk);
        }
    }
    if n_layer_nextn > 0 && max_blk >= 0 {
        return (i64::from(max_blk) + 1 - i64::from(n_layer_nextn)).max(0) as i32;
    }
    first
}

/// Sets `ts`'s layer-to-layer values against `prev` (the same matrix one block down).
fn against_previous(
    ts: &mut TensorStats,
    cur: &ImatrixEntry,
    prev_ts: &TensorStats,
    prev: &ImatrixEntry,
) {
    let use_act = !ts.legacy && !prev_ts.legacy;
    let (Some(c), Some(p)) = (averages(cur, use_act), averages(prev, use_act)) else {
        return;
    };
    if c.len() != p.len() {
        return;
    }
    let pairs = || {
        c.iter()
            .zip(&p)
            .map(|(&c, &p)| (f64::from(c), f64::from(p)))
            .filter(|(c, p)| c.is_finite() && p.is_finite())
    };
    let (mut sum_c, mut sum_p, mut n) = (0f64, 0f64, 0usize);
    for (cv, pv) in pairs() {
        sum_c += cv;
        sum_p += pv;
        n += 1;
    }
    if n == 0 {
        return;
    }
    let (mean_c, mean_p) = (sum_c / n as f64, sum_p / n as f64);
    let (mut dot, mut n1, mut n2, mut l2) = (0f64, 0f64, 0f64, 0f64);
    let (mut cov, mut var_c, mut var_p) = (0f64, 0f64, 0f64);
    for (cv, pv) in pairs() {
        dot += cv * pv;
        n1 += cv * cv;
        n2 += pv * pv;
        let d = cv - pv;
        l2 += d * d;
        let (dc, dp) = (cv - mean_c, pv - mean_p);
        cov += dc * dp;
        var_c += dc * dc;
        var_p += dp * dp;
    }
    ts.n_features = n as i64;
    (ts.dot_prod, ts.norm1_sq, ts.norm2_sq) = (dot, n1, n2);
    (ts.cov_sum, ts.var_c_sum, ts.var_p_sum) = (cov, var_c, var_p);
    ts.l2_dist_sq = l2;
    ts.l2_dist = l2.sqrt() as f32;
    if n > 1 {
        ts.covariance = (cov / n as f64) as f32;
    }
    ts.cossim = if n1 > 0.0 && n2 > 0.0 {
        ((dot / (n1.sqrt() * n2.sqrt())) as f32).clamp(-1.0, 1.0)
    } else if n1 == 0.0 && n2 == 0.0 {
        f32::NAN
    } else {
        0.0
    };
    ts.pearson = if var_c > 0.0 && var_p > 0.0 {
        ((cov / (var_c.sqrt() * var_p.sqrt())) as f32).clamp(-1.0, 1.0)
    } else if var_c == 0.0 && var_p == 0.0 {
        f32::NAN
    } else {
        0.0
    };
    let tiny = f64::from(1e-10f32);
    ts.gain = if prev_ts.sum > tiny {
        ts.sum_prev = prev_ts.sum;
        ts.elements_prev = prev_ts.elements;
        ((ts.sum / ts.elements as f64).sqrt() / (prev_ts.sum / prev_ts.elements as f64).sqrt())
            as f32
    } else if ts.sum <= tiny {
        1.0
    } else {
        f32::NAN
    };
}

/// Every entry with counted values, its own statistics and those against the same matrix of
/// the nearest earlier block, by name; and the first NextN block (`i32::MAX`: none).
pub(crate) fn all_stats(
    entries: &BTreeMap<String, ImatrixEntry>,
    n_layer_nextn: u32,
) -> (BTreeMap<&str, TensorStats>, i32) {
    let own: BTreeMap<&str, TensorStats> = entries
        .iter()
        .filter_map(|(name, e)| vector_stats(e).map(|s| (name.as_str(), s)))
        .collect();
    let nextn = nextn_start(&own, n_layer_nextn);
    let mut out = BTreeMap::new();
    for (name, e) in entries {
        let Some(base) = own.get(name.as_str()) else {
            continue;
        };
        let mut ts = *base;
        let (layer, _) = split_name(name);
        if let Some(blk) = stoi(&layer).filter(|&b| b > 0 && b != nextn) {
            let first = if blk > nextn { nextn } else { 0 };
            let tag = format!("blk.{layer}");
            if let Some(pos) = name.find(&tag) {
                let prev = (first..blk).rev().find_map(|p| {
                    let pname = format!("{}blk.{p}{}", &name[..pos], &name[pos + tag.len()..]);
                    own.get(pname.as_str())
                        .and_then(|ps| entries.get(&pname).map(|pe| (ps, pe)))
                });
                if let Some((prev_ts, prev)) = prev {
                    against_previous(&mut ts, e, prev_ts, prev);
                }
            }
        }
        out.insert(name.as_str(), ts);
    }
    (out, nextn)
}

/// A matrix's entropy as a percentage of the most its element count allows (NaN for one).
pub(crate) fn h_norm(ts: &TensorStats) -> f32 {
    if ts.elements > 1 {
        100.0 * (ts.entropy / (ts.elements as f32).log2())
    } else {
        f32::NAN
    }
}

/// The `.stats` values of every entry, in [`STATS_SCHEMA`]'s order (all zero for an entry
/// whose sums hold no counted value, as llama-imatrix writes it).
pub(crate) fn tensor_stats(
    entries: &BTreeMap<String, ImatrixEntry>,
    n_layer_nextn: u32,
) -> HashMap<&str, [f32; 12]> {
    let (all, _) = all_stats(entries, n_layer_nextn);
    let mut out = HashMap::new();
    for name in entries.keys() {
        let Some(ts) = all.get(name.as_str()) else {
            out.insert(name.as_str(), [0.0; 12]);
            continue;
        };
        out.insert(
            name.as_str(),
            [
                ts.sum as f32,
                ts.mean,
                ts.elements as f32,
                ts.std_deviation,
                ts.skewness,
                ts.kurtosis,
                ts.gain,
                h_norm(ts),
                ts.l2_dist,
                ts.cossim,
                ts.pearson,
                ts.covariance,
            ],
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_as_llama_imatrix_splits_them() {
        assert_eq!(split_name("blk.12.attn_q.weight").0, "12");
        // four parts: the block skip jumps over the name, which stays whole
        assert_eq!(split_name("blk.12.attn_q.weight").1, "blk.12.attn_q.weight");
        assert_eq!(split_name("blk.4.nextn.eh_proj.weight").1, "nextn.eh_proj");
        assert_eq!(split_name("output.weight"), ("-".into(), "output".into()));
        assert_eq!(stoi("12"), Some(12));
        assert_eq!(stoi("-"), None);
        assert_eq!(stoi("7x"), Some(7));
        assert_eq!(stoi("99999999999"), None);
    }

    #[test]
    fn constant_columns_have_no_spread_and_full_entropy() {
        let e = ImatrixEntry {
            in_sum2: vec![6.0; 4],
            in_sum: vec![2.0; 4],
            counts: vec![2.0],
        };
        let s = vector_stats(&e).unwrap();
        assert_eq!((s.sum, s.mean, s.elements), (12.0, 1.0, 4));
        assert_eq!((s.std_deviation, s.skewness, s.kurtosis), (0.0, 0.0, 0.0));
        assert_eq!(s.entropy, 2.0); // four equal shares: two bits
        let none = ImatrixEntry {
            counts: vec![0.0],
            ..e
        };
        assert!(vector_stats(&none).is_none());
    }
}
