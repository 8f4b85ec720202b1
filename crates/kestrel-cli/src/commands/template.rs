//! `kestrel template -m MODEL --messages FILE.json`: render the chat prompt.

use std::path::PathBuf;

use clap::Args;
use kestrel_gguf::GgufModel;
use kestrel_tokenizer::chat::RenderOptions;
use kestrel_tokenizer::{ChatMessage, ChatTemplate, Tokenizer, TokenizerOptions};
use serde_json::Value;

use crate::output::print;

#[derive(Args, Debug)]
pub struct TemplateArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// A JSON file: a list of `{"role", "content"}` messages, or an object with `messages`
    /// and optionally `tools` and `add_generation_prompt`.
    #[arg(long)]
    pub messages: PathBuf,
    /// A named template (`tokenizer.chat_template.NAME`) or a built-in: chatml, llama2,
    /// llama3, gemma, mistral, mistral-v1, mistral-v3, phi3.
    #[arg(long)]
    pub template: Option<String>,
    /// Do not end with the assistant's turn header.
    #[arg(long)]
    pub no_generation_prompt: bool,
}

pub fn run(args: &TemplateArgs) -> Result<(), String> {
    let raw = std::fs::read_to_string(&args.messages)
        .map_err(|e| format!("{}: {e}", args.messages.display()))?;
    let doc: Value =
        serde_json::from_str(&raw).map_err(|e| format!("{}: {e}", args.messages.display()))?;
    let (msgs, tools, agp) = match doc {
        Value::Array(_) => (doc, None, None),
        Value::Object(mut m) => (
            m.remove("messages").unwrap_or(Value::Array(Vec::new())),
            m.remove("tools"),
            m.remove("add_generation_prompt").and_then(|v| v.as_bool()),
        ),
        _ => return Err("the messages file must hold a list or an object".into()),
    };
    let messages: Vec<ChatMessage> =
        serde_json::from_value(msgs).map_err(|e| format!("bad messages: {e}"))?;
    let model = GgufModel::open(&args.model).map_err(|e| e.to_string())?;
    let md = model.metadata();
    let tok = Tokenizer::from_metadata(&md, TokenizerOptions::default().allow_unknown_pre(true))
        .map_err(|e| e.to_string())?;
    let tmpl = ChatTemplate::from_metadata(&md, &tok, args.template.as_deref())
        .map_err(|e| e.to_string())?;
    let opts = RenderOptions::default()
        .add_generation_prompt(agp.unwrap_or(!args.no_generation_prompt))
        .tools(tools);
    let out = tmpl.render(&messages, &opts).map_err(|e| e.to_string())?;
    print(&out)
}
