//! SentencePiece-style BPE vocabularies shipped as `tokenizer.json` alone (no
//! `tokenizer.model`), as llama.cpp's `_set_vocab_llama_hf` writes them through gguf-py's
//! `LlamaHfVocab`: a `llama` (SentencePiece) vocabulary of the model's pieces by id, every score
//! -1000, `<0xNN>` pieces BYTE, the tokenizer's special tokens CONTROL, then the added tokens
//! past the model's pieces (CONTROL when special, else USER_DEFINED).
//!
//! "Special" is what `transformers` calls special: the tokenizer's bos/eos/unk/sep/pad/cls/mask
//! tokens and `additional_special_tokens`, from `special_tokens_map.json` over
//! `tokenizer_config.json` over the tokenizer class's defaults (Llama's `<s>`, `</s>`,
//! `<unk>`). A `"special": true` flag in `tokenizer.json` alone does not make a token special
//! here, as it does not in llama.cpp's reading.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde_json::Value;

use super::{Vocab, BYTE, CONTROL, NORMAL, USER_DEFINED};
use crate::convert::{read_json, ConvertError};

/// The score `LlamaHfVocab` gives every token.
const SCORE: f32 = -1000.0;

/// Model types whose `AutoTokenizer` is Llama's when `tokenizer_config.json` names no class.
const LLAMA_TOKENIZER_MODELS: &[&str] = &["llama", "mistral", "mixtral", "jamba"];

/// Whether `tokenizer.json` is one llama.cpp reads with `LlamaHfVocab`: a BPE model with byte
/// fallback and a `Sequence` decoder (else it is a GPT-2-style BPE, or not a Llama tokenizer).
pub(crate) fn is_llama_hf(tj: &Value) -> bool {
    let model = tj.get("model");
    model.and_then(|m| m.get("type")).and_then(Value::as_str) == Some("BPE")
        && model
            .and_then(|m| m.get("byte_fallback"))
            .and_then(Value::as_bool)
            == Some(true)
        && tj
            .get("decoder")
            .and_then(|d| d.get("type"))
            .and_then(Value::as_str)
            == Some("Sequence")
}

/// Read `dir/tokenizer.json` as `LlamaHfVocab` does; `model_type` is `config.json`'s (it picks
/// the tokenizer class when `tokenizer_config.json` names none).
pub(crate) fn load(dir: &Path, model_type: &str) -> Result<Vocab, ConvertError> {
    let path = dir.join("tokenizer.json");
    let bad = |reason: String| ConvertError::Input {
        path: path.clone(),
        reason,
    };
    if !path.is_file() {
        return Err(bad("no tokenizer.model and no tokenizer.json".into()));
    }
    let tj = read_json(&path)?;
    if !is_llama_hf(&tj) {
        return Err(bad(
            "not a SentencePiece-style BPE (byte fallback, a Sequence decoder)".into(),
        ));
    }
    let model_vocab = tj["model"]
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("model.vocab is not a map".into()))?;
    // The model's pieces by id: every id below their count must have exactly one.
    let base = model_vocab.len();
    let mut pieces: Vec<Option<&str>> = vec![None; base];
    for (t, id) in model_vocab {
        let id = id
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < base)
            .ok_or_else(|| bad(format!("piece {t:?} has id {id}, outside 0..{base}")))?;
        if pieces[id].replace(t.as_str()).is_some() {
            return Err(bad(format!("two pieces have id {id}")));
        }
    }
    // Added tokens: at a piece's id they must be that piece (else which text the id has
    // depends on a hash map's order in `transformers`); past the pieces they follow in order.
    let mut added: BTreeMap<usize, &str> = BTreeMap::new();
    for a in tj
        .get("added_tokens")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        let content = a.get("content").and_then(Value::as_str);
        let id = a
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok());
        let (Some(content), Some(id)) = (content, id) else {
            return Err(bad(format!("added token {a} has no content or id")));
        };
        if let Some(&p) = pieces.get(id) {
            if p != Some(content) {
                return Err(bad(format!(
                    "added token {content:?} has id {id}, which is the piece {:?}",
                    p.unwrap_or("")
                )));
            }
            continue;
        }
        if let Some(other) = model_vocab.get(content).and_then(Value::as_u64) {
            return Err(bad(format!(
                "added token {content:?} has id {id} but is the piece with id {other}"
            )));
        }
        if added.insert(id, content).is_some() {
            return Err(bad(format!("two added tokens have id {id}")));
        }
    }
    // `LlamaHfVocab` lists the added tokens one after another: ids with a gap would move.
    for (k, &id) in added.keys().enumerate() {
        if id != base + k {
            return Err(bad(format!(
                "added token ids skip {} (the model has {base} pieces)",
                base + k
            )));
        }
    }
    let mut by_text: HashMap<&str, usize> = HashMap::with_capacity(base + added.len());
    for (id, p) in pieces.iter().enumerate() {
        if let Some(p) = p {
            by_text.insert(p, id);
        }
    }
    for (&id, &t) in &added {
        by_text.insert(t, id);
    }
    let specials = special_tokens(dir, model_type)?;
    let mut special_ids = HashSet::new();
    for s in &specials {
        let id = by_text.get(s.as_str()).ok_or_else(|| {
            bad(format!(
                "the special token {s:?} is not in the vocabulary (transformers would add it \
                 as a new token; refusing to guess its id)"
            ))
        })?;
        special_ids.insert(*id);
    }

    let n = base + added.len();
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for (id, p) in pieces.iter().enumerate() {
        let t = p.ok_or_else(|| bad(format!("no piece has id {id}")))?;
        types.push(if is_byte(t) {
            BYTE
        } else if special_ids.contains(&id) {
            CONTROL
        } else {
            NORMAL
        });
        tokens.push(t.to_string());
    }
    for (id, t) in added {
        types.push(if special_ids.contains(&id) {
            CONTROL
        } else {
            USER_DEFINED
        });
        tokens.push(t.to_string());
    }
    Ok(Vocab {
        model: "llama",
        pre: "default".into(),
        scores: Some(vec![SCORE; tokens.len()]),
        tokens,
        types,
        merges: Vec::new(),
    })
}

/// `<0xNN>`: a byte-fallback piece.
fn is_byte(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 6
        && t.starts_with("<0x")
        && t.ends_with('>')
        && b[3..5].iter().all(u8::is_ascii_hexdigit)
}

/// The tokens `transformers` lists in `all_special_tokens` for this tokenizer.
fn special_tokens(dir: &Path, model_type: &str) -> Result<Vec<String>, ConvertError> {
    let cfg_path = dir.join("tokenizer_config.json");
    let map_path = dir.join("special_tokens_map.json");
    let read = |p: &Path| -> Result<serde_json::Map<String, Value>, ConvertError> {
        if !p.is_file() {
            return Ok(Default::default());
        }
        match read_json(p)? {
            Value::Object(m) => Ok(m),
            _ => Err(ConvertError::Input {
                path: p.to_path_buf(),
                reason: "not a JSON object".into(),
            }),
        }
    };
    let cfg = read(&cfg_path)?;
    let map = read(&map_path)?;
    let bad = |reason: String| ConvertError::Input {
        path: cfg_path.clone(),
        reason,
    };
    let class = cfg.get("tokenizer_class").and_then(Value::as_str);
    let llama_defaults = match class {
        Some("LlamaTokenizer" | "LlamaTokenizerFast") => true,
        Some("PreTrainedTokenizerFast") => false,
        None if LLAMA_TOKENIZER_MODELS.contains(&model_type) => true,
        None => {
            return Err(bad(format!(
                "no tokenizer_class, and a {model_type:?} model's tokenizer class is not known \
                 here (its special tokens depend on it)"
            )))
        }
        Some(c) => {
            return Err(bad(format!(
                "tokenizer_class {c:?}: its default special tokens are not known here"
            )))
        }
    };
    for m in [&cfg, &map] {
        if m.get("extra_special_tokens").is_some_and(|v| {
            v.as_object().is_some_and(|o| !o.is_empty())
                || v.as_array().is_some_and(|a| !a.is_empty())
        }) {
            return Err(bad("extra_special_tokens is not supported yet".into()));
        }
    }
    let text = |v: &Value, key: &str| -> Result<Option<String>, ConvertError> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            Value::Object(o) => match o.get("content") {
                Some(Value::String(s)) => Ok(Some(s.clone())),
                _ => Err(bad(format!("{key} has no content"))),
            },
            _ => Err(bad(format!("{key} is neither a string nor a token"))),
        }
    };
    let mut out: Vec<String> = Vec::new();
    for key in [
        "bos_token",
        "eos_token",
        "unk_token",
        "sep_token",
        "pad_token",
        "cls_token",
        "mask_token",
    ] {
        let v = match map.get(key).or_else(|| cfg.get(key)) {
            Some(v) => text(v, key)?,
            None if llama_defaults => match key {
                "bos_token" => Some("<s>".into()),
                "eos_token" => Some("</s>".into()),
                "unk_token" => Some("<unk>".into()),
                _ => None,
            },
            None => None,
        };
        // An empty string is no token (`transformers` skips falsy values).
        if let Some(t) = v.filter(|t| !t.is_empty()) {
            out.push(t);
        }
    }
    match map
        .get("additional_special_tokens")
        .or_else(|| cfg.get("additional_special_tokens"))
    {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for v in a {
                if let Some(t) = text(v, "additional_special_tokens")? {
                    out.push(t);
                }
            }
        }
        Some(_) => return Err(bad("additional_special_tokens is not a list".into())),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_pieces_are_six_characters_of_hex() {
        assert!(is_byte("<0x0A>"));
        assert!(is_byte("<0xfe>"));
        assert!(!is_byte("<0x0G>"));
        assert!(!is_byte("<0x0A0>"));
        assert!(!is_byte("0x0A"));
    }

    #[test]
    fn llama_hf_needs_byte_fallback_and_a_sequence_decoder() {
        let yes: Value = serde_json::json!({
            "model": { "type": "BPE", "byte_fallback": true },
            "decoder": { "type": "Sequence" } });
        assert!(is_llama_hf(&yes));
        let mut no = yes.clone();
        no["model"]["byte_fallback"] = false.into();
        assert!(!is_llama_hf(&no));
        let mut no = yes.clone();
        no["decoder"]["type"] = "ByteLevel".into();
        assert!(!is_llama_hf(&no));
        let mut no = yes;
        no["model"]["type"] = "Unigram".into();
        assert!(!is_llama_hf(&no));
    }
}
