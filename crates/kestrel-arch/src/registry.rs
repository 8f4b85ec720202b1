//! The architecture registry: `general.architecture` → what that family does differently.

use kestrel_gguf::GgufModel;

use crate::ArchError;

/// A supported decoder family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArchKind {
    /// Llama 1/2/3, Mistral, SmolLM.
    Llama,
    /// Gemma (v1).
    Gemma,
    /// Gemma 2 (soft-caps, sandwich norms, alternating sliding window).
    Gemma2,
    /// Gemma 3 (text).
    Gemma3,
    /// Qwen 2 / 2.5 (QKV biases).
    Qwen2,
    /// Qwen 3 (QK-norm).
    Qwen3,
    /// Phi-2 (parallel block, layer norms, plain GELU FFN).
    Phi2,
    /// Phi-3 / Phi-4 (fused QKV and gate/up).
    Phi3,
    /// StableLM (layer norms, partial RoPE).
    StableLm,
    /// Command-R (parallel block, logit scale).
    CommandR,
    /// Cohere 2 (Command R7B, Command A: parallel block, sliding window, NoPE global layers).
    Cohere2,
    /// OLMo (parameter-free layer norms, QKV clamp).
    Olmo,
    /// OLMo 2 (post-norms, whole-projection QK-norm).
    Olmo2,
    /// Granite 3 (embedding, residual, attention and logit multipliers).
    Granite,
    /// StarCoder 2 (layer norms with biases, plain GELU FFN).
    StarCoder2,
    /// InternLM 2.
    InternLm2,
    /// EXAONE 3.
    Exaone,
    /// EXAONE 4 (post-norms, QK-norm, NoPE global layers in the 32B).
    Exaone4,
    /// SmolLM 3 (NoPE every fourth layer).
    SmolLm3,
    /// Mistral 3 text (Mistral Small 3.1+, Devstral).
    Mistral3,
    /// Arcee AFM (relu² FFN).
    Arcee,
    /// Seed-OSS.
    SeedOss,
    /// Orion (layer norms).
    Orion,
    /// Apple OpenELM (per-layer head and FFN sizes).
    OpenElm,
    /// XVERSE.
    Xverse,
    /// Maincoder (QK-norm after RoPE).
    MainCoder,
    /// Pangu Embedded.
    PanguEmbedded,
    /// Hunyuan dense (QK-norm after RoPE).
    HunyuanDense,
    /// Nanbeige.
    Nanbeige,
    /// Baichuan (7B RoPE; 13B ALiBi is refused).
    Baichuan,
    /// Qwen2-VL, text only.
    Qwen2Vl,
    /// Qwen3-VL, text only.
    Qwen3Vl,
    /// MiniCPM (granite-style multipliers).
    MiniCpm,
    /// GLM-4 (sandwich norms, fused gate/up, partial RoPE).
    Glm4,
    /// Deci / Llama-Nemotron NAS (uniform layers only).
    Deci,
    /// Qwen2-MoE / Qwen1.5-MoE (shared expert).
    Qwen2Moe,
    /// Qwen3-MoE.
    Qwen3Moe,
    /// Granite 3 MoE.
    GraniteMoe,
    /// Granite 4 dense with sliding windows and attention sinks.
    GraniteSwa,
    /// OLMoE.
    Olmoe,
    /// Phi-3.5-MoE.
    PhiMoe,
    /// gpt-oss (attention sinks, clamped SwiGLU experts with biases).
    GptOss,
    /// DeepSeek V2/V3 (multi-head latent attention, grouped sigmoid-gated experts).
    DeepSeek2,
    /// GPT-2 (learned positions).
    Gpt2,
    /// StarCoder (1) (GPT-2's graph).
    StarCoder,
    /// CodeShell.
    CodeShell,
    /// Jais 2 (relu² FFN).
    Jais2,
    /// Nemotron (relu² FFN, partial RoPE).
    Nemotron,
    /// Qwen (1).
    Qwen,
    /// ChatGLM / GLM-4 (chatglm line).
    ChatGlm,
    /// PLaMo.
    Plamo,
    /// Mamba (state-space layers alone).
    Mamba,
    /// Mamba-2 (state-space layers alone).
    Mamba2,
    /// Jamba (Mamba and attention layers, experts).
    Jamba,
    /// Granite 4 hybrid (Mamba-2 and attention layers).
    GraniteHybrid,
    /// Nemotron-H (Mamba-2, attention and FFN-only layers; nemotron_h_moe: mixture-of-experts
    /// FFN layers).
    NemotronH,
    /// Falcon-H1 (attention and Mamba-2 side by side).
    FalconH1,
    /// LFM2 (short convolutions and attention layers).
    Lfm2,
    /// BERT-style encoders (sentence embeddings): see [`crate::EncoderConfig`].
    Bert,
}

/// (GGUF name, kind)
const REGISTRY: &[(&str, ArchKind)] = &[
    ("llama", ArchKind::Llama),
    ("mistral", ArchKind::Llama),
    ("gemma", ArchKind::Gemma),
    ("gemma2", ArchKind::Gemma2),
    ("gemma3", ArchKind::Gemma3),
    ("qwen2", ArchKind::Qwen2),
    ("qwen3", ArchKind::Qwen3),
    ("phi2", ArchKind::Phi2),
    ("phi3", ArchKind::Phi3),
    ("stablelm", ArchKind::StableLm),
    ("command-r", ArchKind::CommandR),
    ("cohere2", ArchKind::Cohere2),
    ("olmo", ArchKind::Olmo),
    ("olmo2", ArchKind::Olmo2),
    ("granite", ArchKind::Granite),
    ("starcoder2", ArchKind::StarCoder2),
    ("internlm2", ArchKind::InternLm2),
    ("exaone", ArchKind::Exaone),
    ("exaone4", ArchKind::Exaone4),
    ("smollm3", ArchKind::SmolLm3),
    ("mistral3", ArchKind::Mistral3),
    ("arcee", ArchKind::Arcee),
    ("seed_oss", ArchKind::SeedOss),
    ("orion", ArchKind::Orion),
    ("openelm", ArchKind::OpenElm),
    ("xverse", ArchKind::Xverse),
    ("maincoder", ArchKind::MainCoder),
    ("pangu-embedded", ArchKind::PanguEmbedded),
    ("hunyuan-dense", ArchKind::HunyuanDense),
    ("nanbeige", ArchKind::Nanbeige),
    ("baichuan", ArchKind::Baichuan),
    ("qwen2vl", ArchKind::Qwen2Vl),
    ("qwen3vl", ArchKind::Qwen3Vl),
    ("minicpm", ArchKind::MiniCpm),
    ("glm4", ArchKind::Glm4),
    ("deci", ArchKind::Deci),
    ("qwen2moe", ArchKind::Qwen2Moe),
    ("qwen3moe", ArchKind::Qwen3Moe),
    ("granitemoe", ArchKind::GraniteMoe),
    ("granite_swa", ArchKind::GraniteSwa),
    ("olmoe", ArchKind::Olmoe),
    ("phimoe", ArchKind::PhiMoe),
    ("gpt-oss", ArchKind::GptOss),
    ("deepseek2", ArchKind::DeepSeek2),
    ("gpt2", ArchKind::Gpt2),
    ("starcoder", ArchKind::StarCoder),
    ("codeshell", ArchKind::CodeShell),
    ("jais2", ArchKind::Jais2),
    ("nemotron", ArchKind::Nemotron),
    ("qwen", ArchKind::Qwen),
    ("chatglm", ArchKind::ChatGlm),
    ("plamo", ArchKind::Plamo),
    ("mamba", ArchKind::Mamba),
    ("mamba2", ArchKind::Mamba2),
    ("jamba", ArchKind::Jamba),
    ("granitehybrid", ArchKind::GraniteHybrid),
    ("nemotron_h", ArchKind::NemotronH),
    ("nemotron_h_moe", ArchKind::NemotronH),
    ("falcon-h1", ArchKind::FalconH1),
    ("lfm2", ArchKind::Lfm2),
    ("bert", ArchKind::Bert),
];

/// The `general.architecture` names kestrel runs natively.
pub fn list_architectures() -> Vec<&'static str> {
    REGISTRY.iter().map(|r| r.0).collect()
}

impl ArchKind {
    /// True for encoder-only families, which run through [`crate::build_encoder`].
    pub fn is_encoder(self) -> bool {
        matches!(self, ArchKind::Bert)
    }

    /// Whether every layer is a state-space layer (no attention at all).
    pub fn is_recurrent_only(self) -> bool {
        matches!(self, ArchKind::Mamba | ArchKind::Mamba2)
    }

    /// The family for `general.architecture`, if registered.
    pub fn from_name(name: &str) -> Option<ArchKind> {
        REGISTRY.iter().find(|r| r.0 == name).map(|r| r.1)
    }

    /// The family of a model, by `general.architecture`; an error listing what is supported
    /// when kestrel does not run it (never a guess from tensor names: a family run as another
    /// gives wrong text without an error).
    pub fn detect(model: &GgufModel) -> Result<ArchKind, ArchError> {
        let arch = model.metadata().architecture()?;
        ArchKind::from_name(arch).ok_or_else(|| ArchError::Unsupported {
            arch: arch.to_string(),
            supported: list_architectures().join(", "),
        })
    }
}
