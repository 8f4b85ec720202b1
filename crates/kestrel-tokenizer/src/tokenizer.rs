//! [`Tokenizer`]: a `tokenizers::TokenizerImpl` assembled from GGUF metadata, with llama.cpp's
//! special-token partitioning and BOS/EOS rules around it.

use std::path::Path;
use std::sync::Arc;

use kestrel_gguf::{GgufModel, Metadata};
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::TokenizerImpl;

use crate::decoders::{build_pieces, clean_spaces, piece, LlamaDecoder};
use crate::error::{Result, TokenizerError};
use crate::models::{bpe::BpeModel, spm::SpmModel, wpm::WpmModel, KestrelModel};
use crate::normalizers::{escape_spaces, SpaceEscape};
use crate::partition::{partition, Fragment, SpecialFinder};
use crate::pre_tokenizers::RegexSplit;
use crate::vocab::{SpecialTokens, TokenAttrs, TokenType, Vocab, VocabKind};

/// The `tokenizers` pipeline type kestrel builds: kestrel's model, normalizer, pre-tokenizer
/// and decoder, no post-processor (BOS/EOS are added around it, as llama.cpp does).
pub type Pipeline =
    TokenizerImpl<KestrelModel, SpaceEscape, RegexSplit, PostProcessorWrapper, LlamaDecoder>;

/// How to build a tokenizer.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct TokenizerOptions {
    /// Use the default pre-tokenizer when `tokenizer.ggml.pre` is unknown, instead of failing.
    pub allow_unknown_pre: bool,
}

impl TokenizerOptions {
    /// Options with `allow_unknown_pre` set as given.
    pub fn allow_unknown_pre(mut self, yes: bool) -> Self {
        self.allow_unknown_pre = yes;
        self
    }
}

/// How to encode one text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EncodeOptions {
    /// Add BOS/EOS (SEP for WordPiece) as the file asks (`add_bos_token`, `add_eos_token`).
    pub add_special: bool,
    /// Turn control-token text in the input (`<|im_start|>`) into those tokens. Off for
    /// untrusted input: the text is then tokenized as ordinary text. User-defined tokens are
    /// matched either way.
    pub parse_special: bool,
}

impl Default for EncodeOptions {
    /// `add_special: true`, `parse_special: false`.
    fn default() -> Self {
        EncodeOptions {
            add_special: true,
            parse_special: false,
        }
    }
}

impl EncodeOptions {
    /// Set `add_special`.
    pub fn add_special(mut self, yes: bool) -> Self {
        self.add_special = yes;
        self
    }
    /// Set `parse_special`.
    pub fn parse_special(mut self, yes: bool) -> Self {
        self.parse_special = yes;
        self
    }
}

/// How to decode ids to text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeOptions {
    /// Render control tokens (`<bos>`, `<|im_end|>`) as their text; otherwise they are dropped.
    pub special: bool,
    /// Drop a leading BOS and a trailing EOS when the file adds them (llama.cpp's
    /// `remove_special`). Dropping the BOS keeps the SentencePiece leading space.
    pub remove_special: bool,
}

impl DecodeOptions {
    /// Set `special`.
    pub fn special(mut self, yes: bool) -> Self {
        self.special = yes;
        self
    }
    /// Set `remove_special`.
    pub fn remove_special(mut self, yes: bool) -> Self {
        self.remove_special = yes;
        self
    }
}

/// A tokenizer read from a GGUF file.
#[derive(Debug)]
pub struct Tokenizer {
    vocab: Arc<Vocab>,
    pieces: Arc<Vec<Vec<u8>>>,
    pipeline: Pipeline,
    finder: SpecialFinder,
}

impl Tokenizer {
    /// Open a GGUF file and build its tokenizer.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        Self::from_file_with(path, TokenizerOptions::default())
    }

    /// [`from_file`](Self::from_file) with options.
    pub fn from_file_with(path: impl AsRef<Path>, opts: TokenizerOptions) -> Result<Tokenizer> {
        let model = GgufModel::open(path)?;
        Self::from_metadata(&model.metadata(), opts)
    }

    /// Build from already-open metadata.
    pub fn from_metadata(md: &Metadata<'_>, opts: TokenizerOptions) -> Result<Tokenizer> {
        let vocab = Arc::new(Vocab::from_metadata(md, opts.allow_unknown_pre)?);
        let model = match vocab.kind {
            VocabKind::Spm => KestrelModel::Spm(Box::new(SpmModel::new(vocab.clone()))),
            VocabKind::Wpm => KestrelModel::Wpm(WpmModel::new(vocab.clone())),
            VocabKind::Bpe => {
                let key = "tokenizer.ggml.merges";
                let arr = md.get_array(key)?;
                let merges = arr.strings().ok_or_else(|| TokenizerError::BadMetadata {
                    key: key.into(),
                    reason: "not an array of strings".into(),
                })?;
                KestrelModel::Bpe(Box::new(BpeModel::new(vocab.clone(), merges)))
            }
        };
        let pieces = Arc::new(build_pieces(&vocab));
        let mut pipeline: Pipeline = TokenizerImpl::new(model);
        match vocab.kind {
            VocabKind::Spm => {
                pipeline.with_normalizer(Some(SpaceEscape {
                    add_space_prefix: vocab.add_space_prefix,
                }));
            }
            VocabKind::Bpe => {
                if vocab.escape_whitespaces {
                    pipeline.with_normalizer(Some(SpaceEscape {
                        add_space_prefix: false,
                    }));
                }
                pipeline.with_pre_tokenizer(Some(RegexSplit::new(&vocab.pre)?));
            }
            VocabKind::Wpm => {}
        }
        pipeline.with_decoder(Some(LlamaDecoder {
            vocab: vocab.clone(),
            pieces: pieces.clone(),
        }));
        let finder = SpecialFinder::new(&vocab);
        Ok(Tokenizer {
            vocab,
            pieces,
            pipeline,
            finder,
        })
    }

    /// The underlying `tokenizers` pipeline (normalizer, pre-tokenizer, model, decoder), for
    /// callers that want `tokenizers::Encoding`s with offsets. It tokenizes one raw text
    /// fragment: it does not match special tokens or add BOS/EOS; [`encode`](Self::encode) does.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Encode `text` to token ids.
    pub fn encode(&self, text: &str, opts: EncodeOptions) -> Result<Vec<u32>> {
        let v = &*self.vocab;
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        let frags = partition(v, &self.finder, text, opts.parse_special);
        let bos = |out: &mut Vec<u32>| -> Result<()> {
            let id = v
                .special
                .bos
                .ok_or_else(|| TokenizerError::MissingToken("BOS".into()))?;
            out.push(id);
            Ok(())
        };
        match v.kind {
            VocabKind::Spm | VocabKind::Bpe => {
                if opts.add_special && v.add_bos {
                    bos(&mut out)?;
                }
            }
            VocabKind::Wpm => {
                if opts.add_special {
                    bos(&mut out)?;
                }
            }
        }
        self.encode_fragments(text, &frags, &mut out)?;
        if opts.add_special {
            match v.kind {
                VocabKind::Spm | VocabKind::Bpe => {
                    if v.add_eos {
                        out.push(
                            v.special
                                .eos
                                .ok_or_else(|| TokenizerError::MissingToken("EOS".into()))?,
                        );
                    }
                }
                VocabKind::Wpm => out.push(
                    v.special
                        .sep
                        .ok_or_else(|| TokenizerError::MissingToken("SEP".into()))?,
                ),
            }
        }
        Ok(out)
    }

    fn encode_fragments(&self, text: &str, frags: &[Fragment], out: &mut Vec<u32>) -> Result<()> {
        let v = &*self.vocab;
        let model = self.pipeline.get_model();
        for f in frags {
            match *f {
                Fragment::Token(id, ..) => out.push(id),
                Fragment::Text(a, b) => {
                    let raw = &text[a..b];
                    match v.kind {
                        VocabKind::Spm => {
                            let s = escape_spaces(raw, v.add_space_prefix);
                            model.tokenize_ids(&s, out)?;
                        }
                        VocabKind::Wpm => model.tokenize_ids(raw, out)?,
                        VocabKind::Bpe => {
                            let esc;
                            let s = if v.escape_whitespaces {
                                esc = escape_spaces(raw, false);
                                esc.as_str()
                            } else {
                                raw
                            };
                            let split = self.pipeline.get_pre_tokenizer().ok_or_else(|| {
                                TokenizerError::Pipeline(
                                    "BPE pipeline without pre-tokenizer".into(),
                                )
                            })?;
                            for (wa, wb) in split.split_ranges(s)? {
                                model.tokenize_ids(&s[wa..wb], out)?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Encode through the `tokenizers` pipeline, returning ids and their byte spans in `text`
    /// (special tokens found in the text span their text; BOS/EOS have an empty span).
    /// Slower than [`encode`](Self::encode); gives the same ids.
    pub fn encode_with_offsets(
        &self,
        text: &str,
        opts: EncodeOptions,
    ) -> Result<Vec<(u32, (usize, usize))>> {
        let v = &*self.vocab;
        let ids = self.encode(text, opts)?;
        let frags = partition(v, &self.finder, text, opts.parse_special);
        let mut out = Vec::with_capacity(ids.len());
        let lead_bos = match v.kind {
            VocabKind::Wpm => opts.add_special,
            _ => opts.add_special && v.add_bos,
        };
        if lead_bos {
            out.push((ids[0], (0, 0)));
        }
        for f in &frags {
            match *f {
                Fragment::Token(id, a, b) => out.push((id, (a, b))),
                Fragment::Text(a, b) => {
                    let enc = self
                        .pipeline
                        .encode_fast(&text[a..b], false)
                        .map_err(|e| TokenizerError::Pipeline(e.to_string()))?;
                    let len = b - a;
                    for (&id, &(x, y)) in enc.get_ids().iter().zip(enc.get_offsets()) {
                        out.push((id, (a + x.min(len), a + y.min(len))));
                    }
                }
            }
        }
        for &id in &ids[out.len().min(ids.len())..] {
            out.push((id, (text.len(), text.len())));
        }
        Ok(out)
    }

    fn check(&self, id: u32) -> Result<()> {
        if (id as usize) < self.vocab.len() {
            Ok(())
        } else {
            Err(TokenizerError::TokenOutOfRange {
                id,
                n_vocab: self.vocab.len(),
            })
        }
    }

    /// Decode ids to bytes (llama.cpp's `llama_detokenize`).
    pub fn decode_bytes(&self, ids: &[u32], opts: DecodeOptions) -> Result<Vec<u8>> {
        for &id in ids {
            self.check(id)?;
        }
        let v = &*self.vocab;
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if opts.remove_special && v.add_bos {
            if let (Some(&first), Some(bos)) = (ids.first(), v.special.bos) {
                if first == bos {
                    remove_space = false;
                    ids = &ids[1..];
                }
            }
        }
        if opts.remove_special && v.add_eos {
            if let (Some(&last), Some(eos)) = (ids.last(), v.special.eos) {
                if last == eos {
                    ids = &ids[..ids.len() - 1];
                }
            }
        }
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(piece(v, &self.pieces, id, opts.special, remove_space));
            remove_space = false;
        }
        if v.clean_spaces {
            clean_spaces(&mut out);
        }
        Ok(out)
    }

    /// Decode ids to text; invalid UTF-8 (a character cut by the sequence's end) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], opts: DecodeOptions) -> Result<String> {
        let b = self.decode_bytes(ids, opts)?;
        Ok(match String::from_utf8(b) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// A streaming decoder: feed ids one by one, get text as soon as it is complete UTF-8.
    pub fn decoder(&self, special: bool) -> Decoder<'_> {
        Decoder {
            tok: self,
            special,
            first: true,
            pending: Vec::new(),
        }
    }

    /// The piece of one token as bytes (control tokens rendered when `special`).
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<&[u8]> {
        self.check(id)?;
        Ok(piece(&self.vocab, &self.pieces, id, special, false))
    }

    /// The stored text of a token (`▁Hello`, `Ġworld`, `<0x0A>`).
    pub fn token_text(&self, id: u32) -> Result<&[u8]> {
        self.check(id)?;
        Ok(&self.vocab.tokens[id as usize])
    }

    /// The id of a token text, if the vocabulary has it.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.lookup(text.as_bytes())
    }

    /// The file's type for a token.
    pub fn token_type(&self, id: u32) -> Result<TokenType> {
        self.check(id)?;
        Ok(self.vocab.types[id as usize])
    }

    /// The attributes llama.cpp derives for a token.
    pub fn token_attrs(&self, id: u32) -> Result<TokenAttrs> {
        self.check(id)?;
        Ok(self.vocab.attrs[id as usize])
    }

    /// The score of a token (SentencePiece log probability; 0 when the file has none).
    pub fn token_score(&self, id: u32) -> Result<f32> {
        self.check(id)?;
        Ok(self.vocab.scores[id as usize])
    }

    /// Special token ids.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.vocab.special
    }

    /// True if generation should stop at `id` (EOS, EOT, EOM and the end markers llama.cpp
    /// recognizes by text).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// End-of-generation ids, sorted.
    pub fn eog_ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.vocab.eog.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// Whether the file asks for a BOS token.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether the file asks for an EOS token.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether the file asks for a SEP token (`tokenizer.ggml.add_sep_token`).
    pub fn add_sep(&self) -> bool {
        self.vocab.add_sep
    }

    /// Whether a space is prefixed to the text (SentencePiece).
    pub fn add_space_prefix(&self) -> bool {
        self.vocab.add_space_prefix
    }

    /// The tokenizer algorithm.
    pub fn kind(&self) -> VocabKind {
        self.vocab.kind
    }

    /// `tokenizer.ggml.model`.
    pub fn model_name(&self) -> &str {
        &self.vocab.model_name
    }

    /// `tokenizer.ggml.pre`, if present.
    pub fn pre_name(&self) -> Option<&str> {
        self.vocab.pre_name.as_deref()
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }
}

/// Incremental detokenization for streaming. Text comes out only as complete UTF-8: a
/// character split over byte-fallback tokens is held until its last byte arrives, and with
/// `clean_spaces` text near a space or apostrophe is held until the clean-up can no longer
/// change it. The concatenation of everything [`push`](Self::push) and
/// [`finish`](Self::finish) return equals [`Tokenizer::decode`] of the same ids.
#[derive(Clone, Debug)]
pub struct Decoder<'t> {
    tok: &'t Tokenizer,
    special: bool,
    first: bool,
    pending: Vec<u8>,
}

/// Length of `b` without an incomplete UTF-8 sequence at its end (which more bytes could
/// complete).
fn complete_len(b: &[u8]) -> usize {
    let n = b.len();
    for back in 1..=3.min(n) {
        let c = b[n - back];
        if c & 0xC0 == 0x80 {
            continue; // continuation byte: look further back
        }
        let need = if c >= 0xF0 {
            4
        } else if c >= 0xE0 {
            3
        } else if c >= 0xC0 {
            2
        } else {
            1
        };
        return if need > back && (0xC0..=0xF4).contains(&c) {
            n - back
        } else {
            n
        };
    }
    n
}

impl Decoder<'_> {
    /// Add one token; returns the text that became final, if any.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.tok.check(id)?;
        let v = &*self.tok.vocab;
        let lstrip = self.first && v.add_space_prefix;
        self.first = false;
        self.pending
            .extend_from_slice(piece(v, &self.tok.pieces, id, self.special, lstrip));
        let mut cut = complete_len(&self.pending);
        if v.clean_spaces {
            // a cut is safe when the 4 bytes before it hold no space or apostrophe
            loop {
                let w = &self.pending[cut.saturating_sub(4)..cut];
                match w.iter().rposition(|&c| c == b' ' || c == b'\'') {
                    None => break,
                    Some(p) => cut = cut.saturating_sub(4) + p,
                }
                while cut > 0 && self.pending[cut] & 0xC0 == 0x80 {
                    cut -= 1;
                }
                if cut == 0 {
                    break;
                }
            }
        }
        if cut == 0 {
            return Ok(None);
        }
        let mut head: Vec<u8> = self.pending.drain(..cut).collect();
        if v.clean_spaces {
            clean_spaces(&mut head);
        }
        Ok(Some(String::from_utf8_lossy(&head).into_owned()))
    }

    /// Flush what is held (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let mut rest = std::mem::take(&mut self.pending);
        if self.tok.vocab.clean_spaces {
            clean_spaces(&mut rest);
        }
        String::from_utf8_lossy(&rest).into_owned()
    }
}
