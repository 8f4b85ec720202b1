//! A loaded model's LoRA adapters by name: what [`Model::adapters`](crate::Model::adapters)
//! lists, and how a generation's choice of adapters by name
//! ([`GenerateOptions::with_adapter`](crate::GenerateOptions::with_adapter), a server's
//! `"model": "base:adapter"`) becomes the generator's indices.

use std::path::PathBuf;

use kestrel_generate::Generator;

use crate::Error;

/// One LoRA adapter of a loaded model.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterInfo {
    /// Its index (llama-server's adapter `id`).
    pub id: usize,
    /// Its file name without `.gguf`.
    pub name: String,
    /// The file, as it was loaded.
    pub path: PathBuf,
    /// The scale generations that choose no adapters run it at (0: off).
    pub scale: f32,
    /// An activated LoRA's invocation sequence (empty for an ordinary adapter): it acts from
    /// the last place this sequence starts in a prompt, and not at all in a prompt without it.
    pub invocation_tokens: Vec<u32>,
    /// The invocation sequence as text (its tokens' pieces, special tokens written out, as
    /// llama-server lists it; empty for an ordinary adapter).
    pub invocation_string: String,
}

/// The adapters of `generator`, in order.
pub(crate) fn infos(generator: &Generator) -> Vec<AdapterInfo> {
    generator
        .adapters()
        .iter()
        .enumerate()
        .map(|(id, (a, scale))| AdapterInfo {
            id,
            name: name_of(a.path()),
            path: a.path().to_path_buf(),
            scale: *scale,
            invocation_tokens: a.invocation_tokens().to_vec(),
            invocation_string: text_of(generator, a.invocation_tokens()),
        })
        .collect()
}

/// The pieces of `ids` as text (a model without a vocabulary writes none).
fn text_of(generator: &Generator, ids: &[u32]) -> String {
    let Some(tok) = generator.tokenizer() else {
        return String::new();
    };
    let bytes: Vec<u8> = ids
        .iter()
        .filter_map(|&id| tok.token_to_piece(id, true).ok())
        .flatten()
        .copied()
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn name_of(path: &std::path::Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    match file.strip_suffix(".gguf") {
        Some(stem) => stem.to_string(),
        None => file,
    }
}

/// The index of the adapter of `all` that `name` names: its name, its path as loaded, or its
/// index.
///
/// # Errors
/// No adapter by that name, or several.
pub fn find_adapter(all: &[AdapterInfo], name: &str) -> Result<usize, Error> {
    let hits: Vec<usize> = all
        .iter()
        .filter(|a| a.name == name || a.path.to_string_lossy() == name)
        .map(|a| a.id)
        .collect();
    match hits.as_slice() {
        [id] => Ok(*id),
        [] => match name.parse::<usize>() {
            Ok(id) if id < all.len() => Ok(id),
            _ => Err(Error::InvalidOption {
                name: "adapter",
                reason: if all.is_empty() {
                    format!("no LoRA adapter {name:?}: the model was loaded without adapters")
                } else {
                    let names: Vec<&str> = all.iter().map(|a| a.name.as_str()).collect();
                    format!("no LoRA adapter {name:?}; the model has {names:?}")
                },
            }),
        },
        _ => Err(Error::InvalidOption {
            name: "adapter",
            reason: format!(
                "{} adapters are named {name:?}; name one by its path or index",
                hits.len()
            ),
        }),
    }
}

/// `choice` (adapters of `all` by name) by index.
pub(crate) fn resolve(
    all: &[AdapterInfo],
    choice: &[(String, f32)],
) -> Result<Vec<(usize, f32)>, Error> {
    choice
        .iter()
        .map(|(name, scale)| Ok((find_adapter(all, name)?, *scale)))
        .collect()
}
