//! The vocabulary read from `tokenizer.ggml.*`: token texts, scores, types and attributes,
//! special token ids and the flags that steer encoding and decoding, with llama.cpp's load-time
//! fix-ups (EOT/EOG detection by text, `unused` control tokens, per-model strip attributes).

use std::collections::{HashMap, HashSet};

use kestrel_gguf::{Metadata, Value, ValueType};

use crate::error::{Result, TokenizerError};
use crate::pre_tokenizers::{PreSpec, PreTokenizerKind};

/// The tokenizer algorithm named by `tokenizer.ggml.model`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VocabKind {
    /// `llama`: SentencePiece-style merges by score, byte fallback, `▁` for spaces.
    Spm,
    /// `gpt2`: byte-level BPE with ranked merges and a regex pre-tokenizer.
    Bpe,
    /// `bert`: WordPiece, greedy longest match.
    Wpm,
}

/// A token's type as stored in `tokenizer.ggml.token_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenType {
    /// 0, or any value kestrel does not know.
    Undefined,
    /// 1: an ordinary piece of text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token (BOS, EOS, chat markers); rendered only on request.
    Control,
    /// 4: a user-defined token, matched in the text before the model runs.
    UserDefined,
    /// 5: reserved, never produced.
    Unused,
    /// 6: a byte-fallback token `<0xNN>`.
    Byte,
}

impl TokenType {
    fn from_i64(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Token attribute bits, as llama.cpp derives them from the token type and fix-ups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TokenAttrs(pub u16);

impl TokenAttrs {
    /// Unknown token.
    pub const UNKNOWN: u16 = 1 << 0;
    /// Unused token.
    pub const UNUSED: u16 = 1 << 1;
    /// Normal token.
    pub const NORMAL: u16 = 1 << 2;
    /// Control token.
    pub const CONTROL: u16 = 1 << 3;
    /// User-defined token.
    pub const USER_DEFINED: u16 = 1 << 4;
    /// Byte token.
    pub const BYTE: u16 = 1 << 5;
    /// Strip whitespace to the left when matched in text.
    pub const LSTRIP: u16 = 1 << 7;
    /// Strip whitespace to the right when matched in text.
    pub const RSTRIP: u16 = 1 << 8;

    /// True if any of `bits` is set.
    pub fn has(self, bits: u16) -> bool {
        self.0 & bits != 0
    }
    fn from_type(t: TokenType) -> TokenAttrs {
        TokenAttrs(match t {
            TokenType::Normal => Self::NORMAL,
            TokenType::Unknown => Self::UNKNOWN,
            TokenType::Control => Self::CONTROL,
            TokenType::UserDefined => Self::USER_DEFINED,
            TokenType::Unused => Self::UNUSED,
            TokenType::Byte => Self::BYTE,
            TokenType::Undefined => 0,
        })
    }
}

/// Special token ids (each `None` when the file has none or it is out of range).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn.
    pub eot: Option<u32>,
    /// End of message (tool call).
    pub eom: Option<u32>,
    /// Unknown.
    pub unk: Option<u32>,
    /// Separator.
    pub sep: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Classifier token.
    pub cls: Option<u32>,
    /// Mask.
    pub mask: Option<u32>,
    /// Fill-in-the-middle prefix / suffix / middle / pad / repo / file separator.
    pub fim_pre: Option<u32>,
    /// See `fim_pre`.
    pub fim_suf: Option<u32>,
    /// See `fim_pre`.
    pub fim_mid: Option<u32>,
    /// See `fim_pre`.
    pub fim_pad: Option<u32>,
    /// See `fim_pre`.
    pub fim_rep: Option<u32>,
    /// See `fim_pre`.
    pub fim_sep: Option<u32>,
}

/// The vocabulary and the flags that steer the tokenizer.
#[derive(Debug)]
pub struct Vocab {
    pub(crate) kind: VocabKind,
    pub(crate) model_name: String,
    pub(crate) pre_name: Option<String>,
    pub(crate) pre: PreSpec,
    pub(crate) tokens: Vec<Vec<u8>>,
    pub(crate) scores: Vec<f32>,
    pub(crate) types: Vec<TokenType>,
    pub(crate) attrs: Vec<TokenAttrs>,
    pub(crate) token_to_id: HashMap<Vec<u8>, u32>,
    pub(crate) special: SpecialTokens,
    pub(crate) eog: HashSet<u32>,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_sep: bool,
    pub(crate) add_space_prefix: bool,
    pub(crate) clean_spaces: bool,
    pub(crate) escape_whitespaces: bool,
    pub(crate) ignore_merges: bool,
    pub(crate) max_token_len: usize,
    pub(crate) lowercase: bool,
    pub(crate) strip_accents: bool,
    /// Control, user-defined and unknown tokens, longest text first: matched before the model.
    pub(crate) special_cache: Vec<u32>,
}

fn bad(key: &str, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::BadMetadata {
        key: key.into(),
        reason: reason.into(),
    }
}

/// Accessor of one special-token slot.
type SlotFn = fn(&mut SpecialTokens) -> &mut Option<u32>;

fn opt_bool(md: &Metadata<'_>, key: &str) -> Result<Option<bool>> {
    Ok(md.opt(key, |m, k| m.get_bool(k))?)
}

fn opt_u32(md: &Metadata<'_>, key: &str) -> Result<Option<u32>> {
    Ok(md.opt(key, |m, k| m.get_u32(k))?)
}

impl Vocab {
    /// Read the vocabulary from GGUF metadata. `allow_unknown_pre` maps an unknown
    /// `tokenizer.ggml.pre` to the default pre-tokenizer instead of failing.
    pub(crate) fn from_metadata(md: &Metadata<'_>, allow_unknown_pre: bool) -> Result<Vocab> {
        let model_name = md.get_str("tokenizer.ggml.model")?.to_string();
        let pre_name = md
            .opt("tokenizer.ggml.pre", |m, k| m.get_str(k))?
            .map(str::to_string);
        let kind = match model_name.as_str() {
            "llama" => VocabKind::Spm,
            "gpt2" => VocabKind::Bpe,
            "bert" => VocabKind::Wpm,
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };

        // defaults by model type, as llama.cpp sets them before reading the file
        let mut special = SpecialTokens::default();
        let (mut add_bos, mut add_eos, mut add_sep) = (false, false, false);
        let mut add_space_prefix = false;
        let mut clean_spaces = false;
        let mut escape_whitespaces = true;
        let mut ignore_merges = false;
        let mut pre = PreSpec::for_kind(PreTokenizerKind::Default);
        match kind {
            VocabKind::Spm => {
                special.bos = Some(1);
                special.eos = Some(2);
                special.unk = Some(0);
                add_space_prefix = true;
                add_bos = true;
            }
            VocabKind::Wpm => {
                special.bos = Some(101);
                special.unk = Some(100);
                special.sep = Some(102);
                special.pad = Some(0);
                special.mask = Some(103);
                add_bos = true;
                add_sep = true;
                clean_spaces = true;
            }
            VocabKind::Bpe => {
                special.bos = Some(11);
                special.eos = Some(11);
                escape_whitespaces = false;
                clean_spaces = true;
                let name = pre_name.as_deref().unwrap_or("default");
                pre = match PreSpec::by_name(name) {
                    Some(p) => p,
                    None if allow_unknown_pre => PreSpec::for_kind(PreTokenizerKind::Default),
                    None => return Err(TokenizerError::UnknownPreTokenizer(name.to_string())),
                };
                if let Some(c) = pre.clean_spaces {
                    clean_spaces = c;
                }
                if pre.ignore_merges {
                    ignore_merges = true;
                }
                if pre.add_bos {
                    add_bos = true;
                }
                if pre.escape_whitespaces {
                    escape_whitespaces = true;
                }
                if pre.no_bos {
                    special.bos = None;
                }
            }
        }
        if let Some(v) = opt_bool(md, "tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = v;
        }

        // tokens, scores, types
        let key = "tokenizer.ggml.tokens";
        let arr = md.get_array(key)?;
        let strings = arr
            .strings()
            .ok_or_else(|| bad(key, "not an array of strings"))?;
        let mut tokens: Vec<Vec<u8>> = Vec::with_capacity(arr.len());
        for (i, s) in strings.enumerate() {
            if s.is_empty() {
                tokens.push(format!("[EMPTY_{i}]").into_bytes());
            } else {
                tokens.push(s.to_vec());
            }
        }
        let n = tokens.len();
        if n == 0 {
            return Err(bad(key, "the vocabulary is empty"));
        }
        let scores = match md.get("tokenizer.ggml.scores") {
            None => vec![0.0; n],
            Some(Value::Array(a)) => {
                let v = match a.element_type() {
                    ValueType::F32 => a.to_f32_vec(),
                    ValueType::I32 => a
                        .to_i64_vec()
                        .map(|v| v.into_iter().map(|x| x as f32).collect()),
                    _ => None,
                }
                .ok_or_else(|| bad("tokenizer.ggml.scores", "not float32 or int32"))?;
                if v.len() < n {
                    return Err(bad(
                        "tokenizer.ggml.scores",
                        format!("{} scores for {n} tokens", v.len()),
                    ));
                }
                v
            }
            Some(_) => return Err(bad("tokenizer.ggml.scores", "not an array")),
        };
        let types: Vec<TokenType> = match md.get("tokenizer.ggml.token_type") {
            None => vec![TokenType::Normal; n],
            Some(Value::Array(a)) => {
                let v = a
                    .to_i64_vec()
                    .ok_or_else(|| bad("tokenizer.ggml.token_type", "not integers"))?;
                if v.len() < n {
                    return Err(bad(
                        "tokenizer.ggml.token_type",
                        format!("{} types for {n} tokens", v.len()),
                    ));
                }
                v.into_iter().take(n).map(TokenType::from_i64).collect()
            }
            Some(_) => return Err(bad("tokenizer.ggml.token_type", "not an array")),
        };
        let attrs: Vec<TokenAttrs> = if md.contains("tokenizer.ggml.token_type") {
            types.iter().map(|&t| TokenAttrs::from_type(t)).collect()
        } else {
            vec![TokenAttrs(TokenAttrs::NORMAL); n]
        };
        let mut token_to_id: HashMap<Vec<u8>, u32> = HashMap::with_capacity(n);
        let mut max_token_len = 0;
        for (i, t) in tokens.iter().enumerate() {
            token_to_id.insert(t.clone(), i as u32);
            max_token_len = max_token_len.max(t.len());
        }

        // special token ids from the file (out-of-range values keep the default)
        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        special.bos = in_range(special.bos);
        special.eos = in_range(special.eos);
        special.unk = in_range(special.unk);
        special.sep = in_range(special.sep);
        special.pad = in_range(special.pad);
        special.mask = in_range(special.mask);
        let keys: [(&str, SlotFn); 18] = [
            ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
            ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
            ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
            ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
            ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
            ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
            ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
            ("tokenizer.ggml.cls_token_id", |s| &mut s.cls),
            ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
            ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
            ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
            ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
            ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
            ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
        ];
        for (k, field) in keys {
            if let Some(id) = opt_u32(md, k)? {
                if (id as usize) < n {
                    *field(&mut special) = Some(id);
                }
            }
        }
        if let Some(v) = opt_bool(md, "tokenizer.ggml.add_bos_token")? {
            add_bos = v;
        }
        if let Some(v) = opt_bool(md, "tokenizer.ggml.add_eos_token")? {
            add_eos = v;
        }
        if let Some(v) = opt_bool(md, "tokenizer.ggml.add_sep_token")? {
            add_sep = v;
        }
        // Absent, a WordPiece vocabulary is uncased (llama.cpp lower-cases BERT input always).
        let lowercase =
            opt_bool(md, "tokenizer.ggml.normalizer.lowercase")?.unwrap_or(kind == VocabKind::Wpm);
        let strip_accents =
            opt_bool(md, "tokenizer.ggml.normalizer.strip_accents")?.unwrap_or(lowercase);

        let mut v = Vocab {
            kind,
            model_name,
            pre_name,
            pre,
            tokens,
            scores,
            types,
            attrs,
            token_to_id,
            special,
            eog: HashSet::new(),
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            clean_spaces,
            escape_whitespaces,
            ignore_merges,
            max_token_len,
            lowercase,
            strip_accents,
            special_cache: Vec::new(),
        };
        v.fix_up_attrs(md)?;
        Ok(v)
    }

    fn id_of(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text.as_bytes()).copied()
    }

    fn set_control(&mut self, id: u32) {
        self.attrs[id as usize].0 |= TokenAttrs::CONTROL;
    }

    /// llama.cpp's load-time fix-ups, by token text.
    fn fix_up_attrs(&mut self, md: &Metadata<'_>) -> Result<()> {
        type Slot = fn(&mut SpecialTokens) -> &mut Option<u32>;
        let detect: [(Slot, &[&str]); 8] = [
            (
                |s| &mut s.eot,
                &[
                    "<|eot_id|>",
                    "<|im_end|>",
                    "<|end|>",
                    "<end_of_turn>",
                    "<|endoftext|>",
                    "<|end_of_text|>",
                    "<EOT>",
                    "_<EOT>",
                    "[EOT]",
                    "<｜end▁of▁sentence｜>",
                    "<end_of_utterance>",
                ],
            ),
            (|s| &mut s.eom, &["<|eom_id|>"]),
            (
                |s| &mut s.fim_pre,
                &[
                    "<|fim_prefix|>",
                    "<fim-prefix>",
                    "<fim_prefix>",
                    "<｜fim▁begin｜>",
                    "<PRE>",
                    "▁<PRE>",
                    "<|code_prefix|>",
                    "<|prefix|>",
                ],
            ),
            (
                |s| &mut s.fim_suf,
                &[
                    "<|fim_suffix|>",
                    "<fim-suffix>",
                    "<fim_suffix>",
                    "<｜fim▁hole｜>",
                    "<SUF>",
                    "▁<SUF>",
                    "<|code_suffix|>",
                    "<|suffix|>",
                ],
            ),
            (
                |s| &mut s.fim_mid,
                &[
                    "<|fim_middle|>",
                    "<fim-middle>",
                    "<fim_middle>",
                    "<｜fim▁end｜>",
                    "<MID>",
                    "▁<MID>",
                    "<|code_middle|>",
                    "<|middle|>",
                ],
            ),
            (
                |s| &mut s.fim_pad,
                &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
            ),
            (
                |s| &mut s.fim_rep,
                &[
                    "<|fim_repo|>",
                    "<|repo_name|>",
                    "<fim-repo>",
                    "<REPO>",
                    "<reponame>",
                ],
            ),
            (|s| &mut s.fim_sep, &["<|file_sep|>"]),
        ];
        for (slot, names) in detect {
            if slot(&mut self.special).is_some() {
                continue;
            }
            // llama.cpp walks a hash map, so which candidate wins is unspecified there;
            // kestrel takes the first name in list order that the vocabulary has.
            if let Some(id) = names.iter().find_map(|n| self.id_of(n)) {
                *slot(&mut self.special) = Some(id);
                self.set_control(id);
            }
        }
        // control tokens named "unused" are unused
        for a in self.attrs.iter_mut().zip(&self.tokens) {
            if a.0.has(TokenAttrs::CONTROL)
                && !a.0.has(TokenAttrs::UNUSED)
                && a.1.windows(6).any(|w| w == b"unused")
            {
                a.0 .0 |= TokenAttrs::UNUSED;
            }
        }
        // end-of-generation tokens
        let mut eog = HashSet::new();
        for id in [
            self.special.fim_pad,
            self.special.fim_rep,
            self.special.fim_sep,
        ]
        .into_iter()
        .flatten()
        {
            eog.insert(id);
        }
        const EOG_TEXTS: &[&str] = &[
            "<|eot_id|>",
            "<|im_end|>",
            "<|end|>",
            "<|return|>",
            "<|call|>",
            "<|flush|>",
            "<|calls|>",
            "<end_of_turn>",
            "<|endoftext|>",
            "</s>",
            "<|eom_id|>",
            "<EOT>",
            "_<EOT>",
            "[EOT]",
            "[EOS]",
            "<|end_of_text|>",
            "<end_of_utterance>",
            "<eos>",
            "<turn|>",
            "<|tool_response>",
            "<｜end▁of▁sentence｜>",
            "[e~[",
        ];
        for t in EOG_TEXTS {
            if let Some(id) = self.id_of(t) {
                eog.insert(id);
                self.set_control(id);
            }
        }
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = self.id_of(t) {
                self.attrs[id as usize] = TokenAttrs(TokenAttrs::USER_DEFINED);
            }
        }
        for id in [self.special.eos, self.special.eot, self.special.eom]
            .into_iter()
            .flatten()
        {
            eog.insert(id);
        }
        let text_of = |v: &Vocab, id: u32| v.tokens[id as usize].clone();
        let has = |v: &Vocab, eog: &HashSet<u32>, t: &str| {
            eog.iter().any(|&id| text_of(v, id) == t.as_bytes())
        };
        if ((has(self, &eog, "<|return|>") && has(self, &eog, "<|call|>"))
            || (has(self, &eog, "<|calls|>") && has(self, &eog, "<|flush|>")))
            && has(self, &eog, "<|end|>")
        {
            let ids: Vec<u32> = eog
                .iter()
                .copied()
                .filter(|&id| text_of(self, id) == b"<|end|>")
                .collect();
            for id in ids {
                eog.remove(&id);
                self.attrs[id as usize] = TokenAttrs(TokenAttrs::USER_DEFINED);
            }
        }
        if has(self, &eog, "<|tool_response>") || has(self, &eog, "<|plamo:eos|>") {
            let ids: Vec<u32> = eog
                .iter()
                .copied()
                .filter(|&id| text_of(self, id) == b"</s>")
                .collect();
            for id in ids {
                eog.remove(&id);
                self.attrs[id as usize] = TokenAttrs(TokenAttrs::NORMAL);
            }
        }
        self.eog = eog;

        // tokens matched in the text before the model, longest first
        let mut cache: Vec<u32> = (0..self.tokens.len() as u32)
            .filter(|&id| {
                self.attrs[id as usize]
                    .has(TokenAttrs::CONTROL | TokenAttrs::USER_DEFINED | TokenAttrs::UNKNOWN)
            })
            .collect();
        cache.sort_by(|&a, &b| {
            self.tokens[b as usize]
                .len()
                .cmp(&self.tokens[a as usize].len())
                .then(a.cmp(&b))
        });

        // per-model strip attributes
        let general_name = md
            .opt("general.name", |m, k| m.get_str(k))?
            .unwrap_or("")
            .to_lowercase();
        let arch = md
            .opt("general.architecture", |m, k| m.get_str(k))?
            .unwrap_or("");
        let pre = self.pre_name.clone().unwrap_or_default();
        let contains_any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
        if contains_any(
            &pre,
            &["jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert"],
        ) || contains_any(arch, &["nomic-bert-moe", "jina-bert-v3"])
        {
            if let Some(id) = self.id_of("<mask>") {
                self.attrs[id as usize].0 |= TokenAttrs::LSTRIP;
            }
        } else if contains_any(&general_name, &["phi-3", "phi3"]) {
            for &id in &cache {
                self.attrs[id as usize].0 |= TokenAttrs::RSTRIP;
            }
            if let Some(id) = self.id_of("</s>") {
                self.attrs[id as usize].0 |= TokenAttrs::RSTRIP;
            }
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                if let Some(id) = self.id_of(t) {
                    self.attrs[id as usize].0 &= !TokenAttrs::RSTRIP;
                }
            }
        } else if general_name.contains("modern-bert") {
            if let Some(id) = self.id_of("[MASK]") {
                self.attrs[id as usize].0 |= TokenAttrs::LSTRIP;
            }
        }
        self.special_cache = cache;
        Ok(())
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True for an empty vocabulary (never: loading rejects it).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Look a token text up.
    pub(crate) fn lookup(&self, text: &[u8]) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }
}
