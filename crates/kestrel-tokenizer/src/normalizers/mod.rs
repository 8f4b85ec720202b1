//! SentencePiece-style whitespace handling: an optional leading space, then every space
//! written as `▁` (U+2581), as llama.cpp does before its SPM and `▁`-style BPE tokenizers.

use tokenizers::{NormalizedString, Normalizer, Result as TkResult};

/// Escape spaces to `▁`, optionally prefixing one space first.
#[derive(Clone, Copy, Debug)]
pub struct SpaceEscape {
    /// Prefix a space (`tokenizer.ggml.add_space_prefix`). llama.cpp prefixes every text
    /// fragment, since each one starts the input or follows a special token.
    pub add_space_prefix: bool,
}

impl Normalizer for SpaceEscape {
    fn normalize(&self, normalized: &mut NormalizedString) -> TkResult<()> {
        if self.add_space_prefix {
            normalized.prepend(" ");
        }
        if normalized.get().contains(' ') {
            normalized.replace(' ', "\u{2581}")?;
        }
        Ok(())
    }
}

/// The text form of [`SpaceEscape`], for the allocation-light encode path.
pub fn escape_spaces(text: &str, add_space_prefix: bool) -> String {
    let mut s = String::with_capacity(text.len() + 4);
    if add_space_prefix {
        s.push('\u{2581}');
    }
    for c in text.chars() {
        if c == ' ' {
            s.push('\u{2581}');
        } else {
            s.push(c);
        }
    }
    s
}
