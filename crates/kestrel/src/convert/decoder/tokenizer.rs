//! A decoder checkpoint's vocabulary and tokenizer metadata: the reader each family takes
//! (SentencePiece `tokenizer.model`, `tokenizer.json`, a family's own) and the special-token and
//! flag keys llama.cpp's converters add after the vocabulary.

use std::path::Path;

use serde_json::Value;

use super::{bad, chatglm, hunyuan, internlm2, Family};
use crate::convert::meta::Meta;
use crate::convert::vocab::{bpe, llama_hf, special::SpecialVocab, spm, tiktoken, Vocab};
use crate::convert::ConvertError;

/// The vocabulary `family` reads from `dir`; `h` is the config, `vocab_size` its vocabulary
/// size (padded where the family pads it).
pub(super) fn load(
    family: Family,
    dir: &Path,
    h: &Value,
    vocab_size: Option<u64>,
) -> Result<Vocab, ConvertError> {
    let has_spm = dir.join("tokenizer.model").is_file();
    let n_vocab = vocab_size.map(|v| v as usize);
    let model_type = h.get("model_type").and_then(Value::as_str).unwrap_or("");
    let vocab: Vocab =
        match family {
            Family::Llama
            | Family::SmolLm3
            | Family::Mistral3
            | Family::Arcee
            | Family::Nanbeige
            | Family::Qwen2
            | Family::Qwen2Vl
            | Family::Qwen3
            | Family::Qwen3Vl
            | Family::Gemma3
            | Family::Mamba
            | Family::Mamba2
            | Family::Jamba
            | Family::GraniteHybrid
                if has_spm =>
            {
                spm::load(dir, n_vocab, spm::Style::Default)?
            }
            Family::InternLm2 => spm::load(dir, n_vocab, spm::Style::InternLm2)?,
            Family::OpenElm if has_spm => spm::load(dir, n_vocab, spm::Style::Default)?,
            Family::OpenElm => return Err(bad(
                dir,
                "no tokenizer.model: OpenELM uses Llama 2's SentencePiece vocabulary (llama.cpp \
                 falls back to a copy of its own); put Llama 2's tokenizer.model beside it",
            )),
            // Jamba without `tokenizer.model`: llama.cpp's `LlamaHfVocab` reading.
            Family::Jamba => llama_hf::load(dir, model_type)?,
            // MiniCPM: SentencePiece only, as llama.cpp's `_set_vocab_sentencepiece`.
            Family::Gemma
            | Family::Gemma2
            | Family::Nemotron
            | Family::MiniCpm
            | Family::Orion
            | Family::Baichuan
            | Family::PanguEmbedded => spm::load(dir, n_vocab, spm::Style::Default)?,
            Family::Xverse => bpe::load_xverse(dir, n_vocab)?,
            Family::Qwen => tiktoken::load_qwen(dir, n_vocab)?,
            Family::ChatGlm if chatglm::is_chatglm3(h) => chatglm::chatglm3_vocab(dir, n_vocab)?,
            Family::ChatGlm if !dir.join("tokenizer.json").is_file() => {
                return Err(bad(
                    dir,
                    "no tokenizer.json: this ChatGLM's tokenizer is remote code (GLM-4-9B's \
                     first release reads a tiktoken tokenizer.model through it); convert its \
                     -hf release",
                ))
            }
            // DeciModel reads Llama 3's BPE vocabulary at its size, else (DeciLM-7B) `LlamaHfVocab`.
            Family::Deci if vocab_size != Some(128256) => llama_hf::load(dir, model_type)?,
            Family::Phi3 | Family::PhiMoe if !phi3_gpt2_tokenizer(dir)? => {
                spm::load(dir, n_vocab, spm::Style::Phi3)?
            }
            _ => {
                let tj = dir.join("tokenizer.json");
                if !tj.is_file() {
                    return Err(bad(dir, "no tokenizer.model and no tokenizer.json"));
                }
                // LlamaModel: a SentencePiece-style BPE without tokenizer.model is read as
                // `LlamaHfVocab`, any other as GPT-2's BPE.
                if family.is_llama() && llama_hf::is_llama_hf(&crate::convert::read_json(&tj)?) {
                    llama_hf::load(dir, model_type)?
                } else {
                    bpe::load(dir, n_vocab)?
                }
            }
        };
    Ok(vocab)
}

/// The tokenizer keys, in llama.cpp's order: the vocabulary, its special tokens, then what
/// each family adds.
pub(super) fn write_meta(
    meta: &mut Meta,
    family: Family,
    dir: &Path,
    cfg_path: &Path,
    h: &Value,
    vocab: &Vocab,
    vocab_size: Option<u64>,
) -> Result<(), ConvertError> {
    let has_spm = dir.join("tokenizer.model").is_file();
    if family.is_llama() {
        if let Some(b) = read_opt_json(&dir.join("tokenizer_config.json"))?
            .and_then(|c| c.get("add_prefix_space").and_then(|v| v.as_bool()))
        {
            meta.bool("tokenizer.ggml.add_space_prefix", b);
        }
    }
    vocab.write(meta);
    if family == Family::InternLm2 {
        meta.bool(
            "tokenizer.ggml.add_space_prefix",
            spm::add_dummy_prefix(dir)?,
        );
    }
    let is_bpe = vocab.model == "gpt2";
    let mut sv = SpecialVocab::load(dir, is_bpe, (!is_bpe).then_some(vocab.tokens.len()))?;
    if !vocab.merges.is_empty() {
        sv.merges = vocab.merges.clone();
    }
    if family == Family::Qwen {
        // `_set_vocab_qwen`: end of text as BOS and EOS unless the config names any special
        // token, and as the unknown token unless it names that.
        let end = tiktoken::QWEN_SPECIAL_START;
        if sv.ids.is_empty() {
            sv.set_if_absent("bos", end)?;
            sv.set_if_absent("eos", end)?;
        }
        sv.set_if_absent("unk", end)?;
    }
    if family == Family::InternLm2 {
        // The chat models end a turn with `<|im_end|>`: InternLM2Model makes it the EOS.
        if let Some(id) = internlm2::chat_eos(dir)? {
            match sv.ids.iter_mut().find(|(t, _)| t == "eos") {
                Some(e) => e.1 = id,
                None => sv.ids.push(("eos".into(), id)),
            }
        }
    }
    if family == Family::Glm4 {
        glm4_specials(dir, &mut sv, true)?;
    }
    if family == Family::ChatGlm && !chatglm::is_chatglm3(h) {
        glm4_specials(dir, &mut sv, false)?;
    }
    if family == Family::Nemotron {
        // NemotronModel.set_vocab adds padding 0 and unknown 1 after the tokenizer's own
        // (a tokenizer that names either makes llama.cpp stop on the repeated key; kestrel
        // keeps the tokenizer's).
        sv.set_if_absent("pad", 0)?;
        sv.set_if_absent("unk", 1)?;
    }
    sv.write(meta);
    if family == Family::Jamba && !has_spm {
        // JambaModel.set_vocab after `LlamaHfVocab`.
        meta.bool("tokenizer.ggml.add_space_prefix", false);
    }
    if family == Family::PanguEmbedded {
        // PanguEmbeddedModel.set_vocab: tokenizer_config.json's add_prefix_space, where set.
        if let Some(b) = read_opt_json(&dir.join("tokenizer_config.json"))?
            .and_then(|c| c.get("add_prefix_space").and_then(|v| v.as_bool()))
        {
            meta.bool("tokenizer.ggml.add_space_prefix", b);
        }
    }
    if family == Family::HunyuanDense {
        hunyuan::specials(meta, h, dir, cfg_path)?;
    }
    if family == Family::Gemma {
        // GemmaModel.set_vocab's second SpecialVocab: of its CodeGemma FIM ids (67-70) the
        // writer has a key for none but the end of turn, 107. (It would take an `eot_token`
        // named in tokenizer_config.json first; no Gemma 1 release names one.)
        meta.u32("tokenizer.ggml.eot_token_id", 107);
    }
    if (family == Family::Gemma3 && has_spm) || matches!(family, Family::Gemma | Family::Gemma2) {
        meta.bool("tokenizer.ggml.add_space_prefix", false);
    }
    if family.is_llama() && vocab_size == Some(49152) {
        // llama.cpp's rule for Granite-sized (and SmolLM) vocabularies.
        meta.bool("tokenizer.ggml.add_bos_token", false);
    }
    Ok(())
}

/// GLM-4's special tokens, as its converter sets them after loading (each only if not set
/// yet): end of text as EOS, unknown and (`with_bos`: GLM-4-0414, not ChatGLM) BOS,
/// `<|user|>` as end of turn. Both must be added tokens of `tokenizer.json` (llama.cpp stops
/// with a `KeyError` otherwise).
fn glm4_specials(dir: &Path, sv: &mut SpecialVocab, with_bos: bool) -> Result<(), ConvertError> {
    let tj = dir.join("tokenizer.json");
    let v = crate::convert::read_json(&tj)?;
    let added = |content: &str| -> Result<u32, ConvertError> {
        v.get("added_tokens")
            .and_then(|a| a.as_array())
            .and_then(|a| {
                a.iter()
                    .rev()
                    .filter(|t| t.get("content").and_then(|c| c.as_str()) == Some(content))
                    .find_map(|t| t.get("id").and_then(|i| i.as_u64()))
            })
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| bad(&tj, format!("GLM-4 needs {content} among the added tokens")))
    };
    let (end, user) = (added("<|endoftext|>")?, added("<|user|>")?);
    for (typ, id) in [("eos", end), ("eot", user), ("unk", end), ("bos", end)] {
        if typ != "bos" || with_bos {
            sv.set_if_absent(typ, id)?;
        }
    }
    Ok(())
}

/// Phi-4 ships a GPT-2 tokenizer under the Phi-3 architecture (`tokenizer_class`).
fn phi3_gpt2_tokenizer(dir: &Path) -> Result<bool, ConvertError> {
    Ok(read_opt_json(&dir.join("tokenizer_config.json"))?
        .and_then(|c| {
            c.get("tokenizer_class")
                .and_then(|v| v.as_str())
                .map(String::from)
        })
        .is_some_and(|c| c == "GPT2Tokenizer"))
}

fn read_opt_json(p: &Path) -> Result<Option<Value>, ConvertError> {
    if p.is_file() {
        crate::convert::read_json(p).map(Some)
    } else {
        Ok(None)
    }
}
