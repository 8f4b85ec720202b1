//! SentencePiece vocabularies from `tokenizer.model` (llama.cpp's
//! `_create_vocab_sentencepiece`): each piece's text, score and type read straight from the
//! model's protobuf (`ModelProto.pieces`: piece = 1, score = 2, type = 3), then the ids
//! `added_tokens.json` and `tokenizer_config.json` override.

use std::path::Path;

use super::{looks_special, Vocab, CONTROL, NORMAL, USER_DEFINED};
use crate::convert::{read_json, ConvertError};

/// SentencePiece piece types (the same numbers as llama.cpp's token types).
pub(crate) const SP_UNKNOWN: i32 = 2;
pub(crate) const SP_CONTROL: i32 = 3;
pub(crate) const SP_UNUSED: i32 = 5;
pub(crate) const SP_BYTE: i32 = 6;

/// One piece of a SentencePiece model.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Piece {
    pub text: String,
    pub score: f32,
    pub kind: i32,
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.i)?;
            self.i += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.i.checked_add(n)?;
        let s = self.b.get(self.i..end)?;
        self.i = end;
        Some(s)
    }

    /// Next (field, wire type, payload) where the payload is the value's bytes for wire types
    /// 1, 2, 5 and the varint (as 8 LE bytes) for 0.
    fn field(&mut self) -> Option<(u64, u8, Vec<u8>)> {
        let key = self.varint()?;
        let wire = (key & 7) as u8;
        let payload = match wire {
            0 => self.varint()?.to_le_bytes().to_vec(),
            1 => self.bytes(8)?.to_vec(),
            2 => {
                let n = usize::try_from(self.varint()?).ok()?;
                self.bytes(n)?.to_vec()
            }
            5 => self.bytes(4)?.to_vec(),
            _ => return None,
        };
        Some((key >> 3, wire, payload))
    }
}

/// The pieces of a serialized `ModelProto`.
pub(crate) fn parse_pieces(model: &[u8]) -> Result<Vec<Piece>, String> {
    let mut r = Reader { b: model, i: 0 };
    let mut pieces = Vec::new();
    while r.i < model.len() {
        let (field, wire, payload) = r
            .field()
            .ok_or_else(|| format!("malformed protobuf at byte {}", r.i))?;
        if field != 1 || wire != 2 {
            continue;
        }
        let mut p = Reader { b: &payload, i: 0 };
        let mut piece = Piece {
            text: String::new(),
            score: 0.0,
            kind: 1,
        };
        while p.i < payload.len() {
            let (f, w, v) = p
                .field()
                .ok_or_else(|| format!("malformed piece {} in the model", pieces.len()))?;
            match (f, w) {
                (1, 2) => {
                    piece.text = String::from_utf8(v)
                        .map_err(|_| format!("piece {} is not UTF-8", pieces.len()))?;
                }
                (2, 5) => piece.score = f32::from_le_bytes([v[0], v[1], v[2], v[3]]),
                (3, 0) => {
                    piece.kind = i32::try_from(u64::from_le_bytes(v.try_into().unwrap_or([0; 8])))
                        .unwrap_or(1)
                }
                _ => {}
            }
        }
        pieces.push(piece);
    }
    if pieces.is_empty() {
        return Err("no pieces: not a SentencePiece model".into());
    }
    Ok(pieces)
}

/// The unknown, BOS and EOS ids SentencePiece's processor reports (`unk_id()`, `bos_id()`,
/// `eos_id()`): the piece the trainer spec names for each (defaults `<unk>`, `<s>`, `</s>`),
/// looked up as `PieceToId` does (an absent piece is the unknown piece), kept only when it has
/// the right type (UNKNOWN for the first, CONTROL for the others).
pub(crate) fn special_ids(model: &[u8], pieces: &[Piece]) -> Result<[Option<usize>; 3], String> {
    let mut names = ["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut r = Reader { b: model, i: 0 };
    while r.i < model.len() {
        let (field, wire, payload) = r
            .field()
            .ok_or_else(|| format!("malformed protobuf at byte {}", r.i))?;
        if field != 2 || wire != 2 {
            continue;
        }
        let mut t = Reader { b: &payload, i: 0 };
        while t.i < payload.len() {
            let (f, w, v) = t.field().ok_or("malformed trainer spec")?;
            if let (45..=47, 2) = (f, w) {
                names[(f - 45) as usize] =
                    String::from_utf8(v).map_err(|_| "a trainer-spec piece is not UTF-8")?;
            }
        }
    }
    let unk = pieces.iter().position(|p| p.kind == SP_UNKNOWN);
    let id = |name: &str, kind: i32| {
        pieces
            .iter()
            .position(|p| p.text == name)
            .or(unk)
            .filter(|&i| pieces[i].kind == kind)
    };
    Ok([
        id(&names[0], SP_UNKNOWN),
        id(&names[1], SP_CONTROL),
        id(&names[2], SP_CONTROL),
    ])
}

/// Which of llama.cpp's SentencePiece readers to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    /// `_create_vocab_sentencepiece`: added tokens that look special become CONTROL, others
    /// have their `▁` written as spaces.
    Default,
    /// `Phi3MiniModel.set_vocab`: added tokens kept as written, CONTROL only when marked
    /// special, and `tokenizer.json`'s `added_tokens` applied too.
    Phi3,
    /// `InternLM2Model.set_vocab`: Phi-3's added-token rules, a `\x00` piece written as `🐉`,
    /// pieces named `[UNUSED...` unused, no padding past the model's pieces, and no
    /// `added_tokens.json` (which llama.cpp appends after the pieces, making a vocabulary longer
    /// than the embedding: refused).
    InternLm2,
}

/// Read `dir/tokenizer.model` (and the added-token files) as llama.cpp does.
pub(crate) fn load(
    dir: &Path,
    vocab_size: Option<usize>,
    style: Style,
) -> Result<Vocab, ConvertError> {
    let path = dir.join("tokenizer.model");
    let bad = |reason: String| ConvertError::Input {
        path: path.clone(),
        reason,
    };
    let len = std::fs::metadata(&path)
        .map_err(|e| bad(format!("cannot read: {e}")))?
        .len();
    if len > 256 << 20 {
        return Err(bad(format!("{len} bytes is too large for a tokenizer")));
    }
    let bytes = std::fs::read(&path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let pieces = parse_pieces(&bytes).map_err(bad)?;
    let n = vocab_size.unwrap_or(pieces.len());
    if n > 16 << 20 {
        return Err(bad(format!("vocab_size {n} is implausibly large")));
    }
    let internlm2 = style == Style::InternLm2;
    if internlm2 && n > pieces.len() {
        return Err(bad(format!(
            "vocab_size {n} is past the model's {} pieces (InternLM2's converter reads each)",
            pieces.len()
        )));
    }
    let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n];
    let mut types = vec![super::UNUSED; n];
    for (id, p) in pieces.iter().enumerate().take(n) {
        tokens[id] = p.text.clone();
        scores[id] = p.score;
        types[id] = match p.kind {
            SP_UNKNOWN => SP_UNKNOWN,
            SP_CONTROL => CONTROL,
            SP_UNUSED => SP_UNUSED,
            SP_BYTE => SP_BYTE,
            _ => NORMAL,
        };
        if internlm2 {
            if p.text == "\0" {
                // Kept from being read as an empty string in C.
                tokens[id] = "\u{1F409}".into();
            }
            if p.text.starts_with("[UNUSED") {
                types[id] = SP_UNUSED;
            }
        }
    }
    let added = dir.join("added_tokens.json");
    if internlm2 && added.is_file() {
        return Err(ConvertError::Input {
            path: added,
            reason: "InternLM2's added_tokens.json is refused: llama.cpp's converter appends its \
                     tokens after the vocab_size pieces, a vocabulary longer than the embedding \
                     (llama.cpp b11434 then refuses its own file: token_embd.weight has the wrong \
                     shape)"
                .into(),
        });
    }
    if added.is_file() {
        let a = read_json(&added)?;
        if let Some(map) = a.as_object() {
            for (key, id) in map {
                let Some(id) = id.as_u64().and_then(|i| usize::try_from(i).ok()) else {
                    continue;
                };
                if id < n {
                    tokens[id] = key.clone();
                    scores[id] = -1000.0;
                    types[id] = USER_DEFINED;
                }
            }
        }
    }
    let tc = dir.join("tokenizer_config.json");
    if tc.is_file() {
        let cfg = read_json(&tc)?;
        if let Some(map) = cfg.get("added_tokens_decoder").and_then(|m| m.as_object()) {
            for (id, data) in map {
                let Ok(id) = id.parse::<usize>() else {
                    return Err(ConvertError::Input {
                        path: tc.clone(),
                        reason: format!("added_tokens_decoder key {id:?} is not an id"),
                    });
                };
                let Some(content) = data.get("content").and_then(|c| c.as_str()) else {
                    continue;
                };
                if id >= n {
                    continue;
                }
                let special = data.get("special").and_then(|s| s.as_bool()) == Some(true);
                let mut token = content.to_string();
                if matches!(style, Style::Phi3 | Style::InternLm2) {
                    types[id] = if special { CONTROL } else { USER_DEFINED };
                } else if special || looks_special(&token) {
                    types[id] = CONTROL;
                } else {
                    token = token.replace('\u{2581}', " ");
                    types[id] = USER_DEFINED;
                }
                scores[id] = -1000.0;
                tokens[id] = token;
            }
        }
    }
    let tj = dir.join("tokenizer.json");
    if matches!(style, Style::Phi3 | Style::InternLm2) && tj.is_file() {
        let t = read_json(&tj)?;
        for data in t
            .get("added_tokens")
            .and_then(|a| a.as_array())
            .into_iter()
            .flatten()
        {
            let (Some(id), Some(content)) = (
                data.get("id").and_then(|i| i.as_u64()),
                data.get("content").and_then(|c| c.as_str()),
            ) else {
                return Err(ConvertError::Input {
                    path: tj.clone(),
                    reason: format!("added token {data} has no id or content"),
                });
            };
            let Some(id) = usize::try_from(id).ok().filter(|&i| i < n) else {
                return Err(ConvertError::Input {
                    path: tj.clone(),
                    reason: format!("added token {content:?} has id {id}, past the {n} tokens"),
                });
            };
            let special = data.get("special").and_then(|s| s.as_bool()) == Some(true);
            tokens[id] = content.to_string();
            scores[id] = -1000.0;
            types[id] = if special { CONTROL } else { USER_DEFINED };
        }
    }
    Ok(Vocab {
        model: "llama",
        pre: "default".into(),
        tokens,
        types,
        scores: Some(scores),
        merges: Vec::new(),
    })
}

/// The model's `normalizer_spec.add_dummy_prefix` (SentencePiece's default: true).
pub(crate) fn add_dummy_prefix(dir: &Path) -> Result<bool, ConvertError> {
    let path = dir.join("tokenizer.model");
    let bytes = std::fs::read(&path).map_err(|e| ConvertError::Input {
        path: path.clone(),
        reason: format!("cannot read: {e}"),
    })?;
    let mut r = Reader { b: &bytes, i: 0 };
    let mut prefix = true;
    while r.i < bytes.len() {
        let Some((field, wire, payload)) = r.field() else {
            return Err(ConvertError::Input {
                path,
                reason: format!("malformed protobuf at byte {}", r.i),
            });
        };
        if (field, wire) != (3, 2) {
            continue;
        }
        let mut n = Reader { b: &payload, i: 0 };
        while let Some((f, w, v)) = n.field() {
            if (f, w) == (3, 0) {
                prefix = u64::from_le_bytes(v.try_into().unwrap_or([1, 0, 0, 0, 0, 0, 0, 0])) != 0;
            }
        }
    }
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(text: &str, score: f32, kind: i32) -> Vec<u8> {
        let mut p = vec![0x0a, text.len() as u8];
        p.extend_from_slice(text.as_bytes());
        p.push(0x15);
        p.extend_from_slice(&score.to_le_bytes());
        p.extend_from_slice(&[0x18, kind as u8]);
        let mut out = vec![0x0a, p.len() as u8];
        out.extend(p);
        out
    }

    #[test]
    fn pieces_are_read_and_garbage_refused() {
        let mut m = piece("<unk>", 0.0, 2);
        m.extend(piece("\u{2581}a", -1.5, 1));
        // An unrelated field (trainer_spec = 2) is skipped.
        m.extend_from_slice(&[0x12, 0x02, 0x08, 0x01]);
        let p = parse_pieces(&m).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].text, "\u{2581}a");
        assert_eq!(p[1].score, -1.5);
        assert_eq!(p[0].kind, 2);
        assert!(parse_pieces(&[0x0a, 0x7f, 0x01]).is_err());
        assert!(parse_pieces(&[]).is_err());
    }
}
