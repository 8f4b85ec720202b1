//! Special tokens, "add BOS/EOS" flags, merges and the chat template, read from
//! `tokenizer.json`, `tokenizer_config.json`, `chat_template.jinja`/`.json` and `config.json`
//! exactly as gguf-py's `SpecialVocab` reads them (its guesses from the tokenizer's
//! post-processor included), so a converted file gets the same `tokenizer.*` keys.

use std::path::Path;

use serde_json::{Map, Value};

use super::super::meta::Meta;
use super::super::{read_json, ConvertError};

/// A chat template: one string, or named templates (`default` is the main one).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ChatTemplate {
    One(String),
    Named(Vec<(String, String)>),
}

/// What gguf-py's `SpecialVocab` collects.
#[derive(Debug, Default)]
pub(crate) struct SpecialVocab {
    pub merges: Vec<String>,
    pub add_special: Vec<(String, bool)>,
    pub ids: Vec<(String, u32)>,
    pub chat_template: Option<ChatTemplate>,
    pub lowercase: Option<bool>,
    pub strip_accents: Option<bool>,
    n_vocab: Option<usize>,
    types: Vec<&'static str>,
}

/// Python truthiness of a JSON value.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
    }
}

fn opt_read(path: &Path) -> Result<Option<Value>, ConvertError> {
    if path.is_file() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

impl SpecialVocab {
    /// Read the folder; `load_merges` for BPE vocabularies, `n_vocab` bounds the ids.
    pub(crate) fn load(
        dir: &Path,
        load_merges: bool,
        n_vocab: Option<usize>,
    ) -> Result<SpecialVocab, ConvertError> {
        let mut sv = SpecialVocab {
            n_vocab,
            types: vec!["bos", "eos", "unk", "sep", "pad", "cls", "mask"],
            ..SpecialVocab::default()
        };
        sv.read_tokenizer_json(dir, load_merges)?;
        sv.read_config_json(dir)?;
        if load_merges && sv.merges.is_empty() {
            sv.read_merges_txt(dir)?;
        }
        Ok(sv)
    }

    fn set_add(&mut self, typ: &str, v: bool, overwrite: bool) {
        if let Some(e) = self.add_special.iter_mut().find(|(t, _)| t == typ) {
            if overwrite {
                e.1 = v;
            }
        } else {
            self.add_special.push((typ.to_string(), v));
        }
    }

    fn set_id(&mut self, typ: &str, tid: Option<&Value>) -> Result<(), ConvertError> {
        let Some(Value::Number(n)) = tid else {
            return Ok(());
        };
        let Some(t) = n.as_i64() else {
            return Ok(());
        };
        if t < 0 {
            return Err(ConvertError::Input {
                path: "config.json".into(),
                reason: format!("invalid value for special token type {typ}: {t}"),
            });
        }
        if self.n_vocab.is_none_or(|n| (t as u64) < n as u64)
            && t <= u32::MAX as i64
            && !self.ids.iter().any(|(k, _)| k == typ)
        {
            self.ids.push((typ.to_string(), t as u32));
        }
        Ok(())
    }

    /// Sets `typ` to `id` unless it is set already or `id` is past the vocabulary (gguf-py's
    /// `_set_special_token`, as a converter calls it after loading).
    pub(crate) fn set_if_absent(&mut self, typ: &str, id: u32) -> Result<(), ConvertError> {
        if !self.types.contains(&typ) {
            if let Some(t) = ["eot", "eom"].into_iter().find(|t| *t == typ) {
                self.types.push(t);
            }
        }
        self.set_id(typ, Some(&Value::from(id)))
    }

    fn parse_normalizer(&mut self, n: &Value) {
        match n.get("type").and_then(|t| t.as_str()) {
            Some("Lowercase") => self.lowercase = Some(true),
            Some("StripAccents") => self.strip_accents = Some(true),
            Some("BertNormalizer") => {
                if let Some(v) = n.get("lowercase") {
                    self.lowercase = v.as_bool();
                }
                if let Some(v) = n.get("strip_accents") {
                    self.strip_accents = v.as_bool();
                }
            }
            Some("Sequence") => {
                if let Some(list) = n.get("normalizers").and_then(|l| l.as_array()) {
                    for m in list {
                        self.parse_normalizer(m);
                    }
                }
            }
            _ => {}
        }
    }

    fn read_merges_txt(&mut self, dir: &Path) -> Result<(), ConvertError> {
        let path = dir.join("merges.txt");
        if !path.is_file() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&path).map_err(|e| ConvertError::Input {
            path: path.clone(),
            reason: format!("cannot read: {e}"),
        })?;
        let mut lines = text.lines().peekable();
        if lines.peek().is_some_and(|l| l.trim().starts_with('#')) {
            lines.next();
        }
        self.merges = lines
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .filter_map(|l| {
                let parts: Vec<&str> = l.split_whitespace().collect();
                (parts.len() == 2).then(|| format!("{} {}", parts[0], parts[1]))
            })
            .collect();
        Ok(())
    }

    fn read_tokenizer_json(&mut self, dir: &Path, load_merges: bool) -> Result<(), ConvertError> {
        let tj_path = dir.join("tokenizer.json");
        let tokenizer = opt_read(&tj_path)?;
        let mut added_tokens: Vec<Value> = Vec::new();
        if let Some(tj) = &tokenizer {
            if load_merges {
                if let Some(merges) = tj
                    .get("model")
                    .and_then(|m| m.get("merges"))
                    .and_then(|m| m.as_array())
                    .filter(|m| !m.is_empty())
                {
                    self.merges = if merges[0].is_string() {
                        merges
                            .iter()
                            .map(|m| m.as_str().unwrap_or_default().to_string())
                            .collect()
                    } else if merges[0]
                        .as_array()
                        .is_some_and(|p| p.len() == 2 && p[0].is_string())
                    {
                        let enc = |s: &str| {
                            s.chars()
                                .map(|c| if c == ' ' { '\u{0120}' } else { c })
                                .collect::<String>()
                        };
                        merges
                            .iter()
                            .map(|p| {
                                let a = p.get(0).and_then(|v| v.as_str()).unwrap_or_default();
                                let b = p.get(1).and_then(|v| v.as_str()).unwrap_or_default();
                                format!("{} {}", enc(a), enc(b))
                            })
                            .collect()
                    } else {
                        return Err(ConvertError::Input {
                            path: tj_path,
                            reason: "unknown tokenizer merges format".into(),
                        });
                    };
                }
            }
            if let Some(n) = tj.get("normalizer").filter(|n| truthy(Some(n))) {
                self.parse_normalizer(n);
            }
            if let Some(a) = tj.get("added_tokens").and_then(|a| a.as_array()) {
                added_tokens = a.clone();
            }
        }
        let mut tc: Option<Map<String, Value>> =
            opt_read(&dir.join("tokenizer_config.json"))?.and_then(|v| v.as_object().cloned());
        let tc_truthy =
            |tc: &Option<Map<String, Value>>| tc.as_ref().is_some_and(|m| !m.is_empty());
        if let Some(tj) = &tokenizer {
            let get = |tc: &Option<Map<String, Value>>, k: &str| {
                tc.as_ref()
                    .and_then(|m| m.get(k))
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            let mut special_bos = get(&tc, "bos_token");
            let mut special_cls = get(&tc, "cls_token");
            let mut special_eos = get(&tc, "eos_token");
            let mut special_sep = get(&tc, "sep_token");
            if !truthy(Some(&special_bos)) && truthy(Some(&special_cls)) && tc_truthy(&tc) {
                special_bos = special_cls.clone();
                tc.as_mut()
                    .map(|m| m.insert("bos_token".into(), special_bos.clone()));
            }
            if !truthy(Some(&special_eos)) && truthy(Some(&special_sep)) && tc_truthy(&tc) {
                special_eos = special_sep.clone();
                tc.as_mut()
                    .map(|m| m.insert("eos_token".into(), special_eos.clone()));
            }
            if let Some(pp) = tj.get("post_processor").filter(|p| truthy(Some(p))) {
                let procs: Vec<Value> = match pp.get("processors").and_then(|p| p.as_array()) {
                    Some(list) => list.clone(),
                    None => vec![pp.clone()],
                };
                for processor in &procs {
                    match processor.get("type").and_then(|t| t.as_str()) {
                        Some("ByteLevel") => {
                            self.set_add("bos", false, false);
                            self.set_add("eos", false, false);
                        }
                        Some("RobertaProcessing") => {
                            self.set_add("bos", true, true);
                            self.set_add("eos", true, true);
                            self.set_add("sep", true, true);
                            if !truthy(Some(&special_cls)) && tc_truthy(&tc) {
                                special_cls = processor
                                    .get("cls")
                                    .and_then(|c| c.get(0))
                                    .cloned()
                                    .unwrap_or(special_bos.clone());
                                tc.as_mut()
                                    .map(|m| m.insert("cls_token".into(), special_cls.clone()));
                            }
                            if !truthy(Some(&special_sep)) && tc_truthy(&tc) {
                                special_sep = processor
                                    .get("sep")
                                    .and_then(|c| c.get(0))
                                    .cloned()
                                    .unwrap_or(special_eos.clone());
                                tc.as_mut()
                                    .map(|m| m.insert("sep_token".into(), special_sep.clone()));
                            }
                        }
                        Some("TemplateProcessing") => {
                            self.template_processing(
                                processor,
                                &mut tc,
                                &mut special_bos,
                                &mut special_cls,
                                &mut special_eos,
                                &special_sep,
                            );
                        }
                        _ => {}
                    }
                }
            }
        }
        let Some(tc) = tc.filter(|m| !m.is_empty()) else {
            return Ok(());
        };
        let mut alt: Option<ChatTemplate> = None;
        let jinja = dir.join("chat_template.jinja");
        let cjson = dir.join("chat_template.json");
        if jinja.is_file() {
            let t = read_text(&jinja)?;
            let mut extra: Vec<std::path::PathBuf> =
                std::fs::read_dir(dir.join("additional_chat_templates"))
                    .map(|rd| {
                        rd.filter_map(|e| e.ok().map(|e| e.path()))
                            .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
                            .collect()
                    })
                    .unwrap_or_default();
            extra.sort();
            if extra.is_empty() {
                alt = Some(ChatTemplate::One(t));
            } else {
                let mut named = vec![("default".to_string(), t)];
                for p in extra {
                    let stem = p
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    named.push((stem, read_text(&p)?));
                }
                alt = Some(ChatTemplate::Named(named));
            }
        } else if cjson.is_file() {
            alt = read_json(&cjson)?
                .get("chat_template")
                .and_then(template_from_json);
        }
        self.chat_template = match tc.get("chat_template") {
            Some(v) => template_from_json(v),
            None => alt,
        };
        let types = self.types.clone();
        for typ in types {
            if let Some(Value::Bool(b)) = tc.get(&format!("add_{typ}_token")) {
                self.set_add(typ, *b, false);
            }
            let content = match tc.get(&format!("{typ}_token")) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Object(o)) => match o.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    _ => continue,
                },
                _ => continue,
            };
            let id = added_tokens
                .iter()
                .find(|a| a.get("content").and_then(|c| c.as_str()) == Some(content.as_str()))
                .and_then(|a| a.get("id"))
                .cloned();
            self.set_id(typ, id.as_ref())?;
        }
        Ok(())
    }

    /// gguf-py's crude reading of a `TemplateProcessing` post-processor.
    fn template_processing(
        &mut self,
        processor: &Value,
        tc: &mut Option<Map<String, Value>>,
        special_bos: &mut Value,
        special_cls: &mut Value,
        special_eos: &mut Value,
        special_sep: &Value,
    ) {
        let empty = Vec::new();
        let single = processor
            .get("single")
            .and_then(|s| s.as_array())
            .unwrap_or(&empty);
        let pair = processor
            .get("pair")
            .and_then(|s| s.as_array())
            .unwrap_or(&empty);
        let special_id = |v: &Value| -> Value {
            v.get("SpecialToken")
                .and_then(|s| s.get("id"))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let tc_truthy = tc.as_ref().is_some_and(|m| !m.is_empty());
        let mut special_first = Value::Null;
        let mut special_last = Value::Null;
        if single.len() > 1 {
            special_first = special_id(&single[0]);
            if truthy(Some(&special_first)) {
                if !tc_truthy {
                    *special_bos = special_first.clone();
                } else if special_first != *special_bos && special_first != *special_cls {
                    if !truthy(Some(special_bos)) {
                        *special_bos = special_first.clone();
                        tc.as_mut()
                            .map(|m| m.insert("bos_token".into(), special_first.clone()));
                    }
                    if !truthy(Some(special_cls)) {
                        *special_cls = special_first.clone();
                        tc.as_mut()
                            .map(|m| m.insert("cls_token".into(), special_first.clone()));
                    }
                }
                let v = special_first == *special_bos || special_first == *special_cls;
                self.set_add("bos", v, true);
            }
            special_last = special_id(&single[single.len() - 1]);
            if truthy(Some(&special_last)) {
                if !tc_truthy {
                    *special_eos = special_last.clone();
                } else if special_last != *special_eos {
                    if !self.types.contains(&"eot") {
                        self.types.push("eot");
                        tc.as_mut()
                            .map(|m| m.insert("eot_token".into(), special_eos.clone()));
                    } else if !self.types.contains(&"eom") {
                        self.types.push("eom");
                        tc.as_mut()
                            .map(|m| m.insert("eom_token".into(), special_eos.clone()));
                    }
                    *special_eos = special_last.clone();
                    tc.as_mut()
                        .map(|m| m.insert("eos_token".into(), special_last.clone()));
                }
                let v = special_last == *special_eos;
                self.set_add("eos", v, true);
            }
        }
        if pair.is_empty() {
            return;
        }
        let first_t = truthy(Some(&special_first));
        let last_t = truthy(Some(&special_last));
        let start = usize::from(first_t && special_id(&pair[0]) == special_first);
        let stop_trim = last_t && special_id(&pair[pair.len() - 1]) == special_last;
        let end = if stop_trim {
            pair.len() - 1
        } else {
            pair.len()
        };
        if start >= end {
            return;
        }
        let mid = &pair[start..end];
        let seq_id = |v: &Value| {
            v.get("Sequence")
                .and_then(|s| s.get("id"))
                .and_then(|i| i.as_str())
                .map(str::to_string)
        };
        let (a, b) = (seq_id(&mid[0]), seq_id(&mid[mid.len() - 1]));
        if a.as_deref() != Some("A") || b.as_deref() != Some("B") || mid.len() < 3 {
            return;
        }
        let inner = &mid[1..mid.len() - 1];
        let mut add_sep = false;
        let e0 = special_id(&inner[0]);
        if truthy(Some(&e0)) && (e0 == *special_sep || e0 == *special_eos) && !last_t {
            add_sep = true;
        }
        if inner.len() == 2 {
            let e1 = special_id(&inner[1]);
            if truthy(Some(&e1)) && (e1 == *special_sep || e1 == *special_eos) {
                add_sep = true;
            }
        }
        self.set_add("sep", add_sep, true);
        if add_sep && !truthy(Some(special_sep)) && tc.as_ref().is_some_and(|m| !m.is_empty()) {
            let eos = special_eos.clone();
            tc.as_mut().map(|m| m.insert("sep_token".into(), eos));
        }
    }

    fn read_config_json(&mut self, dir: &Path) -> Result<(), ConvertError> {
        let Some(config) = opt_read(&dir.join("config.json"))? else {
            return Ok(());
        };
        let types = self.types.clone();
        for typ in types {
            let key = format!("{typ}_token_id");
            let v = match config.get(&key) {
                Some(v) if !v.is_null() => Some(v.clone()),
                _ => config.get("text_config").and_then(|t| t.get(&key)).cloned(),
            };
            self.set_id(typ, v.as_ref())?;
        }
        Ok(())
    }

    /// Write the collected keys (gguf-py's `add_to_gguf`).
    pub(crate) fn write(&self, meta: &mut Meta) {
        if !self.merges.is_empty() {
            meta.strings("tokenizer.ggml.merges", self.merges.clone());
        }
        for (typ, id) in &self.ids {
            let key = match typ.as_str() {
                "bos" => "bos_token_id",
                "eos" => "eos_token_id",
                "unk" => "unknown_token_id",
                "sep" => "seperator_token_id",
                "pad" => "padding_token_id",
                "mask" => "mask_token_id",
                "eot" => "eot_token_id",
                "eom" => "eom_token_id",
                _ => continue,
            };
            meta.u32(format!("tokenizer.ggml.{key}"), *id);
        }
        for (typ, v) in &self.add_special {
            if matches!(typ.as_str(), "bos" | "eos" | "sep") {
                meta.bool(format!("tokenizer.ggml.add_{typ}_token"), *v);
            }
        }
        match &self.chat_template {
            None => {}
            Some(ChatTemplate::One(t)) => meta.str("tokenizer.chat_template", t.clone()),
            Some(ChatTemplate::Named(list)) => {
                let mut default = None;
                let mut names: Vec<String> = Vec::new();
                for (name, t) in list {
                    let name: String = name
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                        .collect();
                    if name.is_empty() {
                        continue;
                    }
                    if name == "default" {
                        default = Some(t.clone());
                    } else {
                        meta.str(format!("tokenizer.chat_template.{name}"), t.clone());
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                }
                if !names.is_empty() {
                    meta.strings("tokenizer.chat_templates", names);
                }
                if let Some(t) = default {
                    meta.str("tokenizer.chat_template", t);
                }
            }
        }
        if let Some(v) = self.lowercase {
            meta.bool("tokenizer.ggml.normalizer.lowercase", v);
        }
        if let Some(v) = self.strip_accents {
            meta.bool("tokenizer.ggml.normalizer.strip_accents", v);
        }
    }
}

fn template_from_json(v: &Value) -> Option<ChatTemplate> {
    match v {
        Value::String(s) => Some(ChatTemplate::One(s.clone())),
        Value::Array(list) => Some(ChatTemplate::Named(
            list.iter()
                .filter_map(|c| {
                    let name = c.get("name").and_then(|n| n.as_str()).unwrap_or("");
                    let t = c.get("template").and_then(|t| t.as_str())?;
                    Some((name.to_string(), t.to_string()))
                })
                .collect(),
        )),
        _ => None,
    }
}

fn read_text(path: &Path) -> Result<String, ConvertError> {
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if len > 16 << 20 {
        return Err(ConvertError::Input {
            path: path.to_path_buf(),
            reason: format!("{len} bytes is too large for a chat template"),
        });
    }
    std::fs::read_to_string(path).map_err(|e| ConvertError::Input {
        path: path.to_path_buf(),
        reason: format!("cannot read: {e}"),
    })
}
