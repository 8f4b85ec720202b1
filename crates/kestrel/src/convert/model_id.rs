//! A model id (`org/Name-7B-Instruct-v0.1`) taken apart as gguf-py's `Metadata` does
//! ([`model_id_components`]), titles made from its parts, size labels from parameter counts
//! ([`size_label`], [`ParamCount`]). Read by `general` and the model card.

/// Parts of a model id (`org/Name-7B-Instruct-v0.1`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct IdParts {
    pub full_name: Option<String>,
    pub org: Option<String>,
    pub basename: Option<String>,
    pub finetune: Option<String>,
    pub version: Option<String>,
    pub size_label: Option<String>,
}

fn is_version(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    let rest = l
        .strip_prefix("iter")
        .or_else(|| l.strip_prefix('v'))
        .unwrap_or(&l);
    !rest.is_empty()
        && rest
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `i?q\d(_\w)*|b?fp?(16|32)`, case-insensitive.
fn is_quant_type(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    let q = l.strip_prefix('i').unwrap_or(&l);
    if let Some(rest) = q.strip_prefix('q') {
        let mut chars = rest.chars();
        if chars.next().is_some_and(|c| c.is_ascii_digit()) {
            let tail: String = chars.collect();
            // (_\w)* : every '_' followed by one word char, and nothing else.
            let b = tail.as_bytes();
            let mut i = 0;
            let mut ok = true;
            while i < b.len() {
                if b[i] == b'_'
                    && i + 1 < b.len()
                    && (b[i + 1].is_ascii_alphanumeric() || b[i + 1] == b'_')
                {
                    i += 2;
                } else {
                    ok = false;
                    break;
                }
            }
            if ok {
                return true;
            }
        }
    }
    let f = l.strip_prefix('b').unwrap_or(&l);
    let Some(f) = f.strip_prefix('f') else {
        return false;
    };
    let f = f.strip_prefix('p').unwrap_or(f);
    f == "16" || f == "32"
}

/// `([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl`, case-insensitive.
fn is_size(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    if matches!(
        l.as_str(),
        "small" | "mini" | "medium" | "large" | "xl" | "xxl"
    ) {
        return true;
    }
    let b = l.as_bytes();
    let digits = |i: usize| b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    // Try each optional prefix: none, "a", "\d+x".
    let mut starts = vec![0usize];
    if b.first() == Some(&b'a') {
        starts.push(1);
    }
    let d = digits(0);
    if d > 0 && b.get(d) == Some(&b'x') {
        starts.push(d + 1);
    }
    starts.into_iter().any(|mut i| {
        let d = digits(i);
        if d == 0 {
            return false;
        }
        i += d;
        if matches!(b.get(i), Some(b'.') | Some(b'_')) {
            let d2 = digits(i + 1);
            if d2 > 0 {
                i += 1 + d2;
            }
        }
        if !matches!(b.get(i), Some(b'k' | b'm' | b'b' | b't')) {
            return false;
        }
        i += 1;
        if b.get(i).is_some_and(|c| c.is_ascii_digit()) {
            i += 1;
        }
        i == b.len()
    })
}

/// Python's `str.title()` on one word.
fn title(w: &str) -> String {
    let mut out = String::with_capacity(w.len());
    let mut prev_cased = false;
    for c in w.chars() {
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = c.is_alphabetic();
    }
    out
}

/// llama.cpp's `Metadata.id_to_title`.
pub(crate) fn id_to_title(s: &str) -> String {
    s.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            let is_lower =
                w.chars().any(|c| c.is_lowercase()) && !w.chars().any(|c| c.is_uppercase());
            let version_like = {
                let v = w.strip_prefix('v').filter(|r| {
                    !r.is_empty()
                        && r.split('.')
                            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                });
                v.is_some() || w.chars().next().is_some_and(|c| c.is_ascii_digit())
            };
            if is_lower && !version_like {
                title(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// llama.cpp's `Metadata.get_model_id_components`.
pub(crate) fn model_id_components(model_id: &str, total_params: i64) -> IdParts {
    if model_id.contains(' ') {
        return IdParts {
            full_name: Some(model_id.to_string()),
            ..IdParts::default()
        };
    }
    let (mut org, full) = match model_id.split_once('/') {
        Some((o, n)) => (Some(o.to_string()), n.to_string()),
        None => (None, model_id.to_string()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full
        .split('-')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    #[derive(Default, Clone)]
    struct Tags {
        basename: bool,
        size: bool,
        finetune: bool,
        version: bool,
        ty: bool,
    }
    impl Tags {
        fn empty(&self) -> bool {
            !(self.basename || self.size || self.finetune || self.version || self.ty)
        }
        fn count(&self) -> usize {
            [
                self.basename,
                self.size,
                self.finetune,
                self.version,
                self.ty,
            ]
            .iter()
            .filter(|&&b| b)
            .count()
        }
    }
    let mut tags = vec![Tags::default(); parts.len()];
    for i in 0..parts.len() {
        let part = parts[i].clone();
        if is_version(&part) {
            tags[i].version = true;
        } else if is_quant_type(&part) {
            tags[i].ty = true;
            parts[i] = part.to_uppercase();
        } else if i > 0 && is_size(&part) {
            let mut p = part.replace('_', ".");
            let pb: Vec<char> = p.chars().collect();
            if pb.last().is_some_and(|c| c.is_ascii_digit()) && pb.len() >= 2 {
                // bloom-7b1 → 7.1b
                let n = pb.len();
                let mut s: String = pb[..n - 2].iter().collect();
                s.push('.');
                s.push(pb[n - 1]);
                s.push(pb[n - 2]);
                p = s;
            }
            let pb: Vec<char> = p.chars().collect();
            if pb.len() > 1
                && pb[pb.len() - 2].is_ascii_digit()
                && "kmbt".contains(pb[pb.len() - 1])
            {
                let n = pb.len();
                p = pb[..n - 1].iter().collect::<String>() + &pb[n - 1].to_uppercase().to_string();
            }
            if total_params != 0 {
                let last = p.chars().last().unwrap_or(' ');
                let head: String = p
                    .chars()
                    .take(p.chars().count().saturating_sub(1))
                    .collect();
                if let (Ok(v), Some(pow)) = (head.parse::<f64>(), " KMBT".find(last)) {
                    let label = v * 1000f64.powi(pow as i32);
                    let tp = total_params as f64;
                    let context_like = (total_params < 0
                        && label < (total_params.unsigned_abs() / 8) as f64)
                        || (total_params > 0 && (label - tp).abs() > (7 * total_params / 8) as f64);
                    if context_like {
                        tags[i].finetune = true;
                        p = head + &last.to_lowercase().to_string();
                    }
                }
            }
            if tags[i].empty() {
                tags[i].size = true;
            }
            parts[i] = p;
        } else if i > 0
            && matches!(
                part.to_ascii_lowercase().as_str(),
                "chat" | "instruct" | "vision" | "lora"
            )
        {
            if total_params < 0 && part.eq_ignore_ascii_case("lora") {
                tags[i].ty = true;
            } else {
                tags[i].finetune = true;
            }
        }
    }
    let numeric_size = parts
        .iter()
        .zip(&tags)
        .any(|(n, t)| t.size && n.chars().any(|c| c.is_ascii_digit()));
    if numeric_size {
        for (n, t) in parts.iter().zip(tags.iter_mut()) {
            if t.size && n.chars().all(|c| c.is_alphabetic()) {
                t.size = false;
            }
        }
    }
    let mut at_start = true;
    for (p, t) in parts.iter().zip(tags.iter_mut()) {
        if at_start
            && ((t.empty() && p.chars().next().is_some_and(|c| c.is_alphabetic())) || t.version)
        {
            t.basename = true;
        } else {
            at_start = false;
            if t.empty() {
                t.finetune = true;
            }
        }
    }
    for t in tags.iter_mut().rev() {
        if t.basename && t.count() > 1 {
            t.basename = false;
        } else {
            break;
        }
    }
    let join = |f: &dyn Fn(&Tags) -> bool| {
        let v: Vec<&str> = parts
            .iter()
            .zip(&tags)
            .filter(|(_, t)| f(t))
            .map(|(p, _)| p.as_str())
            .collect();
        (!v.is_empty()).then(|| v.join("-"))
    };
    let mut basename = join(&|t| t.basename);
    let size_label = {
        let mut seen: Vec<&str> = Vec::new();
        for (p, t) in parts.iter().zip(&tags) {
            if t.size && !seen.contains(&p.as_str()) {
                seen.push(p);
            }
        }
        (!seen.is_empty()).then(|| seen.join("-"))
    };
    let finetune = join(&|t| t.finetune);
    let version = join(&|t| t.version && !t.basename);
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    IdParts {
        full_name: Some(full),
        org,
        basename,
        finetune,
        version,
        size_label,
    }
}

/// gguf-py's `model_weight_count_rounded_notation` (min 2 digits).
pub(crate) fn size_label(total_params: u64) -> String {
    let n = total_params as f64;
    let (scaled, suffix) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    let rounded = format!("{}", scaled.round_ties_even() as u64);
    let digits = rounded.trim_start_matches('0').len();
    let fix = 2usize.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

/// A model's parameter counts as gguf-py's `get_total_parameter_count` gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ParamCount {
    /// Every tensor's values.
    pub total: u64,
    /// Values outside the stacked expert tensors.
    pub shared: u64,
    /// Values of one expert of each stacked expert tensor.
    pub expert: u64,
    /// Experts per stacked tensor (0: a dense model).
    pub experts: u64,
}

impl ParamCount {
    /// Counts `(name, ggml dims)` the way gguf-py does: a tensor named `*_exps.*` with three
    /// or more dims holds `dims[2]` experts.
    pub(crate) fn of<'a>(tensors: impl IntoIterator<Item = (&'a str, &'a [u64])>) -> ParamCount {
        let mut c = ParamCount::default();
        let (mut expert_sum, mut n_expert_tensors) = (0u64, 0u64);
        for (name, dims) in tensors {
            let size: u64 = dims.iter().product();
            c.total += size;
            if name.contains("_exps.") && dims.len() >= 3 {
                // gguf-py reads numpy's shape[-2] (bias) or shape[-3]: ggml's dims[1] / dims[2].
                let e = if name.contains(".bias") {
                    dims[1]
                } else {
                    dims[2]
                };
                if let Some(per_expert) = size.checked_div(e) {
                    c.expert += per_expert;
                    expert_sum += e;
                    n_expert_tensors += 1;
                }
            } else {
                c.shared += size;
            }
        }
        c.experts = expert_sum.checked_div(n_expert_tensors).unwrap_or(0);
        c
    }

    /// gguf-py's `size_label`: `{experts}x{per-expert size}` for a mixture of experts.
    pub(crate) fn label(self) -> String {
        if self.experts > 0 {
            format!("{}x{}", self.experts, size_label(self.shared + self.expert))
        } else {
            size_label(self.total)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_split_as_llama_cpp_does() {
        let p = model_id_components("mistralai/Mistral-7B-Instruct-v0.3", 7_000_000_000);
        assert_eq!(p.org.as_deref(), Some("mistralai"));
        assert_eq!(p.basename.as_deref(), Some("Mistral"));
        assert_eq!(p.size_label.as_deref(), Some("7B"));
        assert_eq!(p.finetune.as_deref(), Some("Instruct"));
        assert_eq!(p.version.as_deref(), Some("v0.3"));
        let p = model_id_components("HuggingFaceTB/SmolLM2-135M", 134_515_008);
        assert_eq!(p.basename.as_deref(), Some("SmolLM2"));
        assert_eq!(p.size_label.as_deref(), Some("135M"));
        let p = model_id_components("Llama-3.1-8B-128k", 8_000_000_000);
        assert_eq!(p.size_label.as_deref(), Some("8B"));
        assert_eq!(p.finetune.as_deref(), Some("128k"));
        assert_eq!(id_to_title("smollm2-135m"), "Smollm2 135m");
        assert_eq!(id_to_title("tiny-llama"), "Tiny Llama");
    }

    #[test]
    fn experts_count_once_in_the_size_label() {
        let dims: [(&str, Vec<u64>); 3] = [
            ("token_embd.weight", vec![4096, 32000]),
            ("blk.0.ffn_up_exps.weight", vec![4096, 14336, 8]),
            ("blk.0.ffn_gate_inp.weight", vec![4096, 8]),
        ];
        let c = ParamCount::of(dims.iter().map(|(n, d)| (*n, d.as_slice())));
        assert_eq!(c.experts, 8);
        assert_eq!(c.expert, 4096 * 14336);
        assert_eq!(c.shared, 4096 * 32000 + 4096 * 8);
        assert_eq!(c.total, c.shared + 8 * c.expert);
        assert_eq!(c.label(), "8x190M");
        let dense = ParamCount::of([("output.weight", [64u64, 100].as_slice())]);
        assert_eq!((dense.experts, dense.label()), (0, "6.4K".to_string()));
    }

    #[test]
    fn size_labels_round_as_python() {
        assert_eq!(size_label(134_515_008), "135M");
        assert_eq!(size_label(3_210_000), "3.2M");
        assert_eq!(size_label(8_030_000_000), "8.0B");
        assert_eq!(size_label(400), "0.40K");
    }
}
