//! `Prompter`: turns text and conversations into prompt token ids, the way [`Model`](crate::Model)
//! does, without holding the model. It is cheap to clone and `Send + Sync`, so a server's
//! request handlers can tokenize and render chat templates while the model runs elsewhere.

use std::sync::Arc;

use kestrel_tokenizer::{ChatMessage, ChatTemplate, EncodeOptions, RenderOptions, Tokenizer};
use serde_json::Value as Json;

use crate::Error;

/// A model's tokenizer and chat template.
#[derive(Clone, Debug)]
pub struct Prompter {
    tokenizer: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
}

impl Prompter {
    /// A prompter over `tokenizer` with `template` (none: chat is an error).
    pub fn new(tokenizer: Arc<Tokenizer>, template: Option<ChatTemplate>) -> Prompter {
        Prompter {
            tokenizer,
            template,
        }
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// The chat template, if the model has one.
    pub fn template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// Tokenize a plain prompt: BOS as `add_bos` and the model say; special-token text parsed
    /// as those tokens when `parse_special`.
    pub fn encode(
        &self,
        text: &str,
        add_bos: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, Error> {
        Ok(self.tokenizer.encode(
            text,
            EncodeOptions::default()
                .add_special(add_bos)
                .parse_special(parse_special),
        )?)
    }

    /// Render `messages` with the chat template, ending with the assistant's turn header;
    /// `tools` is the template's `tools` global.
    pub fn render(&self, messages: &[ChatMessage], tools: Option<Json>) -> Result<String, Error> {
        let template = self.template.as_ref().ok_or(Error::InvalidOption {
            name: "messages",
            reason: "the model has no chat template".into(),
        })?;
        Ok(template.render(
            messages,
            &RenderOptions::default()
                .add_generation_prompt(true)
                .tools(tools),
        )?)
    }

    /// Tokenize rendered chat text: special tokens parsed, BOS added only when `add_bos` and
    /// the template did not write one itself.
    pub fn encode_rendered(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, Error> {
        let bos_text = self
            .tokenizer
            .special_tokens()
            .bos
            .and_then(|b| self.tokenizer.token_text(b).ok())
            .map(|t| String::from_utf8_lossy(t).into_owned());
        let has_bos = bos_text.is_some_and(|b| !b.is_empty() && text.starts_with(&b));
        self.encode(text, add_bos && !has_bos, true)
    }

    /// [`render`](Self::render) then [`encode_rendered`](Self::encode_rendered).
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        tools: Option<Json>,
        add_bos: bool,
    ) -> Result<Vec<u32>, Error> {
        let text = self.render(messages, tools)?;
        self.encode_rendered(&text, add_bos)
    }
}
