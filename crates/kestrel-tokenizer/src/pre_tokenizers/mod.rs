//! The BPE pre-tokenizer chosen by `tokenizer.ggml.pre`, with llama.cpp's semantics: a list of
//! regular expressions applied one after the other, each splitting every piece so far into its
//! matches and the text between them (both kept). The GPT-2 and Llama 3 / Qwen 2 patterns run as
//! hand-written scanners (as in llama.cpp); the others through `fancy-regex`, with `\p{..}`
//! classes evaluated on llama.cpp's Unicode 15.1 categories.

mod scan;

use fancy_regex::Regex;
use tokenizers::tokenizer::{
    normalizer::Range, PreTokenizedString, PreTokenizer, Result as TkResult,
};

use crate::error::{Result, TokenizerError};
use crate::unicode::{class, is_whitespace, Class};

/// A pre-tokenizer family (one per distinct rule set in llama.cpp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PreTokenizerKind {
    /// `default` or missing: llama.cpp's default BPE split.
    Default,
    /// `llama3`, `llama-bpe`, `falcon3`, `pixtral`, ...; also `dbrx`, `smaug-bpe`.
    Llama3,
    /// `jais-2`.
    Jais2,
    /// `deepseek-llm`.
    DeepseekLlm,
    /// `deepseek-v3`, `hunyuan-dense`, `joyai-llm`, `hy_v4`.
    Deepseek3Llm,
    /// `deepseek-coder`.
    DeepseekCoder,
    /// `falcon`.
    Falcon,
    /// `starcoder`, `smollm`, `refact`, `command-r`, `codeshell`, `exaone`, `minerva-7b`, `mellum2`.
    Starcoder,
    /// `gpt-2`, `phi-2`, `mpt`, `olmo`, `jais`, `trillion`, `granite-docling`, ...
    Gpt2,
    /// `qwen2`, `deepseek-r1-qwen`, `stablelm2`, `hunyuan`, `megrez`, `solar-open`, ...
    Qwen2,
    /// `qwen35`.
    Qwen35,
    /// `poro-chat`, `bloom`, `gpt3-finnish`.
    Poro,
    /// `chatglm-bpe`, `glm4`, `glm5`.
    ChatGlm4,
    /// `viking`.
    Viking,
    /// `tekken`.
    Tekken,
    /// `chameleon`.
    Chameleon,
    /// `gpt-4o`, `llama4`, `minimax-m2`, ...
    Gpt4o,
    /// `granite-embed-multi-97m`.
    GraniteEmbMulti,
    /// `superbpe`.
    SuperBpe,
    /// `bailingmoe`, `bailingmoe2`, `llada-moe`.
    BailingMoe,
    /// `seed-coder`.
    SeedCoder,
    /// `ufakzeka`.
    Ufakzeka,
    /// `grok-2`.
    Grok2,
    /// `laguna`.
    Laguna,
    /// `exaone-moe`.
    ExaoneMoe,
    /// `gemma4`: SentencePiece-style BPE on raw UTF-8 with `▁` for spaces, split at newlines.
    Gemma4,
    /// `minicpm5`.
    Minicpm5,
    /// `spark2_5`.
    Spark25,
    /// `youtu`.
    Youtu,
}

/// How a `pre` name configures the BPE tokenizer.
#[derive(Clone, Debug)]
pub struct PreSpec {
    /// The rule family.
    pub kind: PreTokenizerKind,
    /// Override of `clean_spaces` (decode-time space clean-up), if the family sets it.
    pub clean_spaces: Option<bool>,
    /// Take a whole pre-token as one token when the vocabulary has it.
    pub ignore_merges: bool,
    /// Force `add_bos` on (before the file's own `add_bos_token` is read).
    pub add_bos: bool,
    /// Spaces are `▁` and tokens are raw UTF-8 (no GPT-2 byte alphabet).
    pub escape_whitespaces: bool,
    /// The family has no BOS token.
    pub no_bos: bool,
}

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const NEWLINES: &str = r"[^\n]+|[\n]+";

impl PreSpec {
    /// The plain settings of a family.
    pub fn for_kind(kind: PreTokenizerKind) -> PreSpec {
        PreSpec {
            kind,
            clean_spaces: None,
            ignore_merges: false,
            add_bos: false,
            escape_whitespaces: false,
            no_bos: false,
        }
    }

    /// Resolve a `tokenizer.ggml.pre` name as llama.cpp does; `None` if unknown or unsupported.
    pub fn by_name(name: &str) -> Option<PreSpec> {
        use PreTokenizerKind as K;
        let (kind, clean, ignore, bos) = match name {
            "default" => (K::Default, None, false, false),
            "minicpm5" => (K::Minicpm5, None, true, false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => (K::Llama3, None, true, true),
            "deepseek-llm" => (K::DeepseekLlm, Some(false), false, false),
            "deepseek-coder" => (K::DeepseekCoder, Some(false), false, false),
            "deepseek-v3" => (K::Deepseek3Llm, Some(false), false, false),
            "spark2_5" => (K::Spark25, Some(false), false, false),
            "youtu" => (K::Youtu, Some(false), true, false),
            "falcon" => (K::Falcon, None, false, false),
            "mpt" => (K::Gpt2, None, false, false),
            "starcoder" => (K::Starcoder, None, false, false),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en"
            | "jina-v2-code" | "roberta-bpe" | "exaone4" => (K::Gpt2, None, false, false),
            "jais-2" => (K::Jais2, None, false, false),
            "gemma4" | "granite-embed-multi-311m" => {
                let mut p = PreSpec::for_kind(K::Gemma4);
                p.escape_whitespaces = true;
                return Some(p);
            }
            "refact" => (K::Starcoder, None, false, false),
            "command-r" => (K::Starcoder, Some(false), false, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => {
                (K::Qwen2, Some(false), false, false)
            }
            "qwen35" => (K::Qwen35, Some(false), false, false),
            "stablelm2" | "megrez" => (K::Qwen2, None, false, false),
            "olmo" => (K::Gpt2, None, false, false),
            "dbrx" | "smaug-bpe" => (K::Llama3, None, false, false),
            "poro-chat" => (K::Poro, Some(false), false, false),
            "chatglm-bpe" => {
                let mut p = PreSpec::for_kind(K::ChatGlm4);
                p.no_bos = true;
                return Some(p);
            }
            "glm4" | "glm5" => {
                let mut p = PreSpec::for_kind(K::ChatGlm4);
                p.no_bos = true;
                p.ignore_merges = true;
                return Some(p);
            }
            "viking" => (K::Viking, Some(false), false, false),
            "jais" => (K::Gpt2, None, false, false),
            "tekken" => (K::Tekken, Some(false), true, true),
            "smollm" => (K::Starcoder, Some(false), false, false),
            "codeshell" | "exaone" | "minerva-7b" | "mellum2" => (K::Starcoder, None, false, false),
            "bloom" | "gpt3-finnish" => (K::Poro, None, false, false),
            "exaone-moe" => (K::ExaoneMoe, None, false, false),
            "chameleon" => (K::Chameleon, Some(false), false, true),
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
                (K::Gpt4o, Some(false), false, false)
            }
            "granite-embed-multi-97m" => (K::GraniteEmbMulti, Some(false), true, false),
            "superbpe" => (K::SuperBpe, Some(false), false, false),
            "trillion" | "granite-docling" => (K::Gpt2, Some(false), false, false),
            "bailingmoe" | "bailingmoe2" | "llada-moe" => {
                (K::BailingMoe, Some(false), false, false)
            }
            "seed-coder" => (K::SeedCoder, Some(false), false, false),
            "hunyuan" | "solar-open" => (K::Qwen2, Some(false), false, false),
            "hunyuan-dense" | "hy_v4" | "joyai-llm" => (K::Deepseek3Llm, Some(false), false, false),
            "ufakzeka" => (K::Ufakzeka, Some(false), false, false),
            "grok-2" => (K::Grok2, Some(false), false, false),
            "laguna" => (K::Laguna, Some(false), false, false),
            _ => return None,
        };
        Some(PreSpec {
            kind,
            clean_spaces: clean,
            ignore_merges: ignore,
            add_bos: bos,
            escape_whitespaces: false,
            no_bos: false,
        })
    }

    /// The regular expressions of the family, in the order they are applied.
    pub fn patterns(&self) -> Vec<&'static str> {
        use PreTokenizerKind as K;
        const LETTERS_DS: &str = "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+";
        const DS3_MAIN: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
        const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        match self.kind {
            K::Llama3 | K::ChatGlm4 => vec![LLAMA3],
            K::Jais2 => vec![
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
            ],
            K::DeepseekLlm => vec![
                "[\r\n]",
                LETTERS_DS,
                "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
                r"\s+$",
                "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
                r"\p{N}+",
            ],
            K::Deepseek3Llm => vec![r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", DS3_MAIN],
            K::Spark25 => vec![
                r"\p{N}{1,3}",
                "[一-龥぀-ゟ゠-ヿ]+",
                r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"##,
                r"\p{N}",
            ],
            K::Youtu => vec![
                "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            K::DeepseekCoder => vec![
                "[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
                r"\p{N}",
            ],
            K::Falcon => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
            K::Starcoder => vec![r"\p{N}", GPT2],
            K::Gpt2 => vec![GPT2],
            K::Qwen2 => vec![QWEN2],
            K::Qwen35 => vec![
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            K::Poro => vec![r" ?[^(\s|.,!?…。，、।۔،)]+"],
            K::Viking => vec![r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"],
            K::Tekken => vec![
                r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            K::Chameleon => vec![
                "<sentinel:[0-9]+>",
                "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                "([\\t\\n]|    |  )",
                r"\p{N}",
                r"[\p{P}!-/:-@\[-`{-~]",
                GPT2,
            ],
            K::Gpt4o => vec![GPT4O],
            K::GraniteEmbMulti => vec![
                r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            K::SuperBpe => vec![r"\p{N}+", r"(?=(\d{3})+(?!\d))"],
            K::BailingMoe => vec![
                r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
            ],
            K::SeedCoder => vec![
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            K::Ufakzeka => vec![
                r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            K::Grok2 => vec![QWEN2],
            K::Laguna => vec![NEWLINES, QWEN2],
            K::ExaoneMoe => vec![
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
            ],
            K::Gemma4 => vec![NEWLINES],
            K::Minicpm5 => vec![
                r"\p{N}{1,3}",
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            K::Default => vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        }
    }
}

/// One split stage.
#[derive(Debug)]
enum Stage {
    /// The GPT-2 pattern, scanned by hand.
    Gpt2,
    /// The Llama 3 pattern (`max_digits` 3) or the Qwen 2 pattern (1), scanned by hand.
    Llama3 { max_digits: usize },
    /// `[^\n]+|[\n]+`.
    Newlines,
    /// A general pattern; `collapsed` when it uses `\p{..}` classes.
    Regex { re: Regex, collapsed: bool },
}

/// llama.cpp's regex-list pre-tokenizer, as a `tokenizers` [`PreTokenizer`].
#[derive(Debug)]
pub struct RegexSplit {
    stages: Vec<Stage>,
}

const UCATS: [(&str, char, &str); 10] = [
    (r"\p{N}", '\u{D1}', "0-9"),
    (r"\p{L}", '\u{D2}', "A-Za-z"),
    (r"\p{P}", '\u{D3}', r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
    (r"\p{M}", '\u{D4}', ""),
    (r"\p{S}", '\u{D5}', r"\$\+<=>\^`\|~"),
    (r"\p{Lu}", '\u{D2}', "A-Za-z"),
    (r"\p{Ll}", '\u{D2}', "A-Za-z"),
    (r"\p{Lt}", '\u{D2}', "A-Za-z"),
    (r"\p{Lm}", '\u{D2}', "A-Za-z"),
    (r"\p{Lo}", '\u{D2}', "A-Za-z"),
];

/// Rewrite `\p{..}` into classes over the collapsed alphabet (as llama.cpp does for std::regex).
fn collapse_pattern(p: &str) -> String {
    let mut out = String::with_capacity(p.len() * 2);
    let b = p.as_bytes();
    let mut inside = false;
    let mut i = 0;
    while i < p.len() {
        let c = b[i];
        if c == b'[' && (i == 0 || b[i - 1] != b'\\') {
            out.push('[');
            inside = true;
            i += 1;
            continue;
        }
        if inside && c == b']' && b[i - 1] != b'\\' {
            out.push(']');
            inside = false;
            i += 1;
            continue;
        }
        if let Some((pat, rep, ascii)) = UCATS.iter().find(|u| p[i..].starts_with(u.0)) {
            if !inside {
                out.push('[');
            }
            out.push_str(&format!("\\x{{{:X}}}", *rep as u32));
            out.push_str(ascii);
            if !inside {
                out.push(']');
            }
            i += pat.len();
            continue;
        }
        // std::regex's \d and \w are ASCII-only
        if p[i..].starts_with(r"\d") {
            out.push_str(if inside { "0-9" } else { "[0-9]" });
            i += 2;
            continue;
        }
        let ch = p[i..].chars().next().unwrap_or('\0');
        out.push(ch);
        i += ch.len_utf8().max(1);
    }
    out
}

/// The collapsed stand-in of a code point (ASCII stays as it is).
fn collapse_char(c: char) -> char {
    if (c as u32) < 128 {
        return c;
    }
    if is_whitespace(c) {
        return '\u{0B}';
    }
    let k = class(c).bits();
    match k {
        Class::NUMBER => '\u{D1}',
        Class::LETTER => '\u{D2}',
        Class::PUNCTUATION => '\u{D3}',
        Class::MARK => '\u{D4}',
        Class::SYMBOL => '\u{D5}',
        _ => '\u{D0}',
    }
}

impl RegexSplit {
    /// Build the stages of a pre-tokenizer spec.
    pub fn new(spec: &PreSpec) -> Result<RegexSplit> {
        let mut stages = Vec::new();
        for p in spec.patterns() {
            let stage = if p == GPT2 {
                Stage::Gpt2
            } else if p == LLAMA3 {
                Stage::Llama3 { max_digits: 3 }
            } else if p == QWEN2 {
                Stage::Llama3 { max_digits: 1 }
            } else if p == NEWLINES {
                Stage::Newlines
            } else {
                let collapsed = UCATS.iter().any(|u| p.contains(u.0));
                let src = if collapsed {
                    collapse_pattern(p)
                } else {
                    p.replace(r"\d", "[0-9]")
                };
                let re = Regex::new(&src).map_err(|e| TokenizerError::Regex {
                    pattern: p.to_string(),
                    reason: e.to_string(),
                })?;
                Stage::Regex { re, collapsed }
            };
            stages.push(stage);
        }
        Ok(RegexSplit { stages })
    }

    /// Split `text` into pre-tokens; returns byte ranges into `text`.
    pub fn split_ranges(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        // work in code point indices, as llama.cpp does
        let chars: Vec<char> = text.chars().collect();
        let mut pieces: Vec<(usize, usize)> = if chars.is_empty() {
            Vec::new()
        } else {
            vec![(0, chars.len())]
        };
        for stage in &self.stages {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for &(s, e) in &pieces {
                let seg = &chars[s..e];
                let mut push = |a: usize, b: usize| {
                    if b > a {
                        next.push((s + a, s + b));
                    }
                };
                match stage {
                    Stage::Gpt2 => scan::gpt2(seg, &mut push),
                    Stage::Llama3 { max_digits } => scan::llama3(seg, *max_digits, &mut push),
                    Stage::Newlines => scan::newlines(seg, &mut push),
                    Stage::Regex { re, collapsed } => {
                        regex_split(re, *collapsed, seg, &mut push)?;
                    }
                }
            }
            pieces = next;
        }
        // code point ranges to byte ranges
        let mut byte_at = Vec::with_capacity(chars.len() + 1);
        let mut off = 0;
        for c in &chars {
            byte_at.push(off);
            off += c.len_utf8();
        }
        byte_at.push(off);
        Ok(pieces
            .into_iter()
            .map(|(a, b)| (byte_at[a], byte_at[b]))
            .collect())
    }
}

fn regex_split(
    re: &Regex,
    collapsed: bool,
    seg: &[char],
    push: &mut impl FnMut(usize, usize),
) -> Result<()> {
    let s: String = if collapsed {
        seg.iter().map(|&c| collapse_char(c)).collect()
    } else {
        seg.iter()
            .map(|&c| {
                if (c as u32) > 0x7f && is_whitespace(c) {
                    '\u{0B}'
                } else {
                    c
                }
            })
            .collect()
    };
    // byte offset in `s` -> char index
    let mut idx = vec![0usize; s.len() + 1];
    let mut n = 0;
    for (b, c) in s.char_indices() {
        idx[b] = n;
        n += 1;
        let _ = c;
    }
    idx[s.len()] = n;
    let mut last = 0;
    for m in re.find_iter(&s) {
        let m = m.map_err(|e| TokenizerError::Regex {
            pattern: re.as_str().to_string(),
            reason: e.to_string(),
        })?;
        let (a, b) = (idx[m.start()], idx[m.end()]);
        if a > last {
            push(last, a);
        }
        push(a, b);
        last = b;
    }
    if last < n {
        push(last, n);
    }
    Ok(())
}

impl PreTokenizer for RegexSplit {
    fn pre_tokenize(&self, pretokenized: &mut PreTokenizedString) -> TkResult<()> {
        pretokenized.split(|_, normalized| {
            let ranges = self
                .split_ranges(normalized.get())
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(ranges
                .into_iter()
                .filter_map(|(a, b)| normalized.slice(Range::Normalized(a..b)))
                .collect::<Vec<_>>())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: &str, text: &str) -> Vec<String> {
        let spec =
            PreSpec::by_name(pre).unwrap_or_else(|| PreSpec::for_kind(PreTokenizerKind::Default));
        let r = RegexSplit::new(&spec).expect("builds");
        r.split_ranges(text)
            .expect("splits")
            .into_iter()
            .map(|(a, b)| text[a..b].to_string())
            .collect()
    }

    #[test]
    fn gpt2_family() {
        assert_eq!(
            split("gpt-2", "Hello world's  end"),
            ["Hello", " world", "'s", " ", " end"]
        );
        assert_eq!(split("smollm", "abc 123"), ["abc", " ", "1", "2", "3"]);
        assert_eq!(split("gpt-2", "a   \n"), ["a", "   \n"]);
    }

    #[test]
    fn llama3_family() {
        assert_eq!(
            split("llama-bpe", "I'M 12345 ok!!\n\nx"),
            ["I", "'M", " ", "123", "45", " ok", "!!\n\n", "x"]
        );
        assert_eq!(split("qwen2", "ab12"), ["ab", "1", "2"]);
    }

    #[test]
    fn every_pattern_compiles() {
        for name in [
            "default",
            "llama3",
            "jais-2",
            "deepseek-llm",
            "deepseek-v3",
            "deepseek-coder",
            "falcon",
            "starcoder",
            "gpt-2",
            "qwen2",
            "qwen35",
            "poro-chat",
            "chatglm-bpe",
            "viking",
            "tekken",
            "chameleon",
            "gpt-4o",
            "granite-embed-multi-97m",
            "superbpe",
            "bailingmoe",
            "seed-coder",
            "ufakzeka",
            "grok-2",
            "laguna",
            "exaone-moe",
            "gemma4",
            "minicpm5",
            "spark2_5",
            "youtu",
        ] {
            let spec = PreSpec::by_name(name).expect(name);
            let r = RegexSplit::new(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
            let text = "Hello, World! 123 4567 ÀÉ 中文 naïve\n\n  x's";
            let parts = r.split_ranges(text).expect("splits");
            let joined: String = parts.iter().map(|&(a, b)| &text[a..b]).collect();
            assert_eq!(joined, text, "{name}");
        }
    }
}
