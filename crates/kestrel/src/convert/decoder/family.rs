//! What differs between the decoder families: the GGUF architecture, tensor names, the
//! per-tensor changes llama.cpp's converter makes (Llama's Q/K row order, Gemma's `1 + w` norms
//! and trimmed embedding rows, experts stacked into one tensor) and the family's extra metadata.

use serde_json::Value;

/// A decoder family the converter knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// `LlamaForCausalLM`, `MistralForCausalLM` (GGUF `llama`).
    Llama,
    /// `Qwen2ForCausalLM` (GGUF `qwen2`).
    Qwen2,
    /// `Qwen2VLForConditionalGeneration`, `Qwen2_5_VLForConditionalGeneration` (the text model;
    /// GGUF `qwen2vl`: Qwen 2's layers, M-RoPE sections).
    Qwen2Vl,
    /// `Qwen3ForCausalLM` (GGUF `qwen3`).
    Qwen3,
    /// `Gemma3ForCausalLM`, the text half of `Gemma3ForConditionalGeneration` (GGUF `gemma3`).
    Gemma3,
    /// `Gemma2ForCausalLM` (GGUF `gemma2`).
    Gemma2,
    /// `GemmaForCausalLM`, Gemma 1 and CodeGemma (GGUF `gemma`: no post-norms or soft caps).
    Gemma,
    /// `Phi3ForCausalLM` (GGUF `phi3`: fused QKV and gate-up matrices).
    Phi3,
    /// `PhiForCausalLM` (Phi-1.5, Phi-2; GGUF `phi2`: parallel block, biases, partial RoPE).
    Phi2,
    /// `PhiMoEForCausalLM` (Phi-3.5-MoE; GGUF `phimoe`: Phi-3's converter, LayerNorms and
    /// projections with biases, Mixtral's experts).
    PhiMoe,
    /// `Qwen2MoeForCausalLM` (GGUF `qwen2moe`: routed and shared experts).
    Qwen2Moe,
    /// `Qwen3MoeForCausalLM` (GGUF `qwen3moe`).
    Qwen3Moe,
    /// `GptOssForCausalLM` (GGUF `gpt-oss`: MXFP4 or float 3-D experts, attention sinks).
    GptOss,
    /// `SmolLM3ForCausalLM` (GGUF `smollm3`: Llama's converter, NoPE layers implied).
    SmolLm3,
    /// `Olmo2ForCausalLM`, `Olmo3ForCausalLM` (GGUF `olmo2`: post-norms, full-width Q/K norms).
    Olmo2,
    /// `OlmoForCausalLM` (OLMo 1, 1.7; GGUF `olmo`: weightless layer norms, Q/K/V clamp).
    Olmo,
    /// `OlmoeForCausalLM` (GGUF `olmoe`).
    Olmoe,
    /// `GraniteForCausalLM` (GGUF `granite`: Llama's converter plus four scales).
    Granite,
    /// `GraniteSWAForCausalLM` (GGUF `granite_swa`: Granite's converter plus the sliding
    /// window, which layers slide and rotate, attention sinks).
    GraniteSwa,
    /// `GraniteMoeForCausalLM`, `GraniteMoeSharedForCausalLM` (GGUF `granitemoe`: Granite's
    /// rules, fused expert tensors split, a shared expert).
    GraniteMoe,
    /// `Mistral3ForConditionalGeneration` (Mistral Small 3.x, Magistral, Devstral: the text
    /// model) and `Ministral3ForCausalLM` (GGUF `mistral3`: Llama's converter).
    Mistral3,
    /// `Exaone4ForCausalLM` (GGUF `exaone4`: post-norms, Q/K norms, sliding-window pattern).
    Exaone4,
    /// `MiniCPMForCausalLM` (MiniCPM 1/2, MiniCPM4; GGUF `minicpm`: Llama's layers and Q/K
    /// order, embedding / residual / logit scales, LongRoPE factors).
    MiniCpm,
    /// `ExaoneForCausalLM` (EXAONE 3.0 and 3.5; GGUF `exaone`: Llama's layers under GPT-2-style
    /// names, no Q/K reordering, llama3 RoPE factors).
    Exaone,
    /// `Cohere2ForCausalLM` (Command R7B; GGUF `cohere2`: parallel block, logit scale).
    Cohere2,
    /// `CohereForCausalLM` (Command R, Command R+, Aya 23; GGUF `command-r`: parallel block,
    /// logit scale, per-head Q/K layer norms in Command R+).
    CommandR,
    /// `Starcoder2ForCausalLM` (GGUF `starcoder2`: LayerNorm with biases, GELU MLP).
    StarCoder2,
    /// `StableLmForCausalLM` (StableLM 2, StableLM Zephyr; GGUF `stablelm`: LayerNorm with
    /// biases, partial RoPE, optional parallel block and per-head Q/K layer norms).
    StableLm,
    /// `GPT2LMHeadModel` (GGUF `gpt2`: learned positions, fused QKV, Conv1D weights stored
    /// transposed).
    Gpt2,
    /// `GPTBigCodeForCausalLM` (StarCoder 1, SantaCoder; GGUF `starcoder`: GPT-2's layout with
    /// one KV head).
    StarCoder,
    /// `Glm4ForCausalLM` (GLM-4-0414; GGUF `glm4`: fused gate-up matrix, norms after attention
    /// and feed-forward, Q/K/V biases, RoPE over half of each head).
    Glm4,
    /// `DeepseekV2ForCausalLM`, `DeepseekV3ForCausalLM` (GGUF `deepseek2`: multi-head latent
    /// attention with `kv_b_proj` split, leading dense layers, routed and shared experts).
    DeepSeek2,
    /// `ArceeForCausalLM` (AFM; GGUF `arcee`: Llama's converter, an ungated ReLU² feed-forward).
    Arcee,
    /// `NanbeigeForCausalLM` (Nanbeige 4; GGUF `nanbeige`: Llama's converter plus the layer-loop
    /// keys `num_loops` and `skip_loop_final_norm`).
    Nanbeige,
    /// `MaincoderForCausalLM` (Maincoder; GGUF `maincoder`: the generic keys, Q/K norms, the
    /// rotary dimension from `head_dim`).
    MainCoder,
    /// `CodeShellForCausalLM` (CodeShell; GGUF `codeshell`: GPTBigCode's names with grouped
    /// queries and RoPE, its own key list).
    CodeShell,
    /// `BaichuanForCausalLM` (Baichuan 1 and 2; GGUF `baichuan`: Llama's names with the fused
    /// `W_pack` split, `baichuan.rs`).
    Baichuan,
    /// `XverseForCausalLM` (XVERSE; GGUF `xverse`: Llama's names and Q/K order, the layout tag
    /// and rotary dimension, `tokenizer.json`'s tokens as a SentencePiece vocabulary).
    Xverse,
    /// `Jais2ForCausalLM` (Jais 2; GGUF `jais2`: Llama's names with layer norms, attention and
    /// an ungated feed-forward, all with biases; the rotary dimension).
    Jais2,
    /// `DeciLMForCausalLM` (Llama 3.1 Nemotron NAS models; GGUF `deci`: per-layer heads and
    /// feed-forward sizes from `block_configs`, `deci.rs`).
    Deci,
    /// `OrionForCausalLM` (Orion; GGUF `orion`: its own short key list, layer norms with
    /// biases, SentencePiece).
    Orion,
    /// `PanguEmbeddedForCausalLM` (openPangu Embedded; GGUF `pangu-embedded`: the generic keys
    /// plus the vocabulary size and rotary dimension, an output bias, SentencePiece).
    PanguEmbedded,
    /// `SeedOssForCausalLM` (Seed-OSS; GGUF `seed_oss`: Q/K/V biases, the pre-FFN norm named
    /// `post_attention_norm`).
    SeedOss,
    /// `NemotronForCausalLM` (Nemotron 3/4, Minitron; GGUF `nemotron`: layer norms with biases
    /// scaling by `1 + w` (stored shifted), partial RoPE, an ungated ReLU² feed-forward).
    Nemotron,
    /// `Qwen3VLForConditionalGeneration` (the text model; GGUF `qwen3vl`: Qwen 3's layers,
    /// interleaved M-RoPE sections, the vision tower's deepstack layer count).
    Qwen3Vl,
    /// `MambaForCausalLM` (GGUF `mamba`: selective state-space layers, no attention; its own
    /// hyperparameters and names in `mamba.rs`).
    Mamba,
    /// `Mamba2ForCausalLM` (Mamba 2, Mamba-Codestral; GGUF `mamba2`: multi-head state spaces with
    /// a per-group gated norm; `mamba.rs`).
    Mamba2,
    /// `Lfm2ForCausalLM` (LFM2, LFM2.5; GGUF `lfm2`: short-convolution and attention layers).
    Lfm2,
    /// `JambaForCausalLM` (GGUF `jamba`: Mamba and attention layers, experts; `jamba.rs`).
    Jamba,
    /// `HunYuanDenseV1ForCausalLM` (Hunyuan 0.5B-7B; GGUF `hunyuan-dense`: Q/K norms, NTK-alpha
    /// RoPE; `hunyuan.rs`).
    HunyuanDense,
    /// `GraniteMoeHybridForCausalLM` (Granite 4.0-H), `BambaForCausalLM` (GGUF `granitehybrid`:
    /// Mamba 2 and attention layers, Granite MoE's experts; `granite_hybrid.rs`).
    GraniteHybrid,
    /// `FalconH1ForCausalLM` (GGUF `falcon-h1`: attention and Mamba 2 side by side in every
    /// layer, multipliers folded into the weights; `falcon_h1.rs`).
    FalconH1,
    /// `NemotronHForCausalLM` (GGUF `nemotron_h`: one Mamba 2, attention or MLP mixer per
    /// layer; `nemotron_h.rs`).
    NemotronH,
    /// `InternLM2ForCausalLM` (GGUF `internlm2`: fused grouped QKV; `internlm2.rs`).
    InternLm2,
    /// `OpenELMForCausalLM` (GGUF `openelm`: per-layer head and feed-forward sizes; `openelm.rs`).
    OpenElm,
    /// `ChatGLMModel`, `ChatGLMForConditionalGeneration`, `GlmForCausalLM` (ChatGLM3, GLM-4-9B,
    /// GLM-Edge; GGUF `chatglm`: its own keys, `chatglm.rs`).
    ChatGlm,
    /// `QWenLMHeadModel` (Qwen 1; GGUF `qwen`: GPT-2-style names, a fused Q/K/V with biases,
    /// a tiktoken vocabulary).
    Qwen,
}

/// The Hugging Face architectures converted, for error messages.
pub(crate) const SUPPORTED: &str = "LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, \
     Qwen2ForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, \
     GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration (text), \
     PhiForCausalLM, Phi3ForCausalLM, PhiMoEForCausalLM, Mistral3ForConditionalGeneration (text), Ministral3ForCausalLM, \
     GptOssForCausalLM, SmolLM3ForCausalLM, OlmoForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM, \
     OlmoeForCausalLM, GraniteForCausalLM, GraniteSWAForCausalLM, GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM, GraniteMoeHybridForCausalLM, BambaForCausalLM, MiniCPMForCausalLM, ExaoneForCausalLM, Exaone4ForCausalLM, CohereForCausalLM, Cohere2ForCausalLM, Glm4ForCausalLM, ArceeForCausalLM, NanbeigeForCausalLM, MaincoderForCausalLM, OrionForCausalLM, PanguEmbeddedForCausalLM, CodeShellForCausalLM, BaichuanForCausalLM, XverseForCausalLM, Jais2ForCausalLM, DeciLMForCausalLM, SeedOssForCausalLM, NemotronForCausalLM, \
     Qwen2VLForConditionalGeneration (text), \
     Qwen2_5_VLForConditionalGeneration (text), Qwen3VLForConditionalGeneration (text), \
     MambaForCausalLM, Mamba2ForCausalLM, Lfm2ForCausalLM, JambaForCausalLM, FalconH1ForCausalLM, NemotronHForCausalLM, InternLM2ForCausalLM, OpenELMForCausalLM, HunYuanDenseV1ForCausalLM, QWenLMHeadModel, \
     ChatGLMModel, ChatGLMForConditionalGeneration, GlmForCausalLM, \
     Starcoder2ForCausalLM, StableLmForCausalLM, GPT2LMHeadModel, GPTBigCodeForCausalLM, \
     DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, \
     BertModel";

/// How a family stores its experts, one 2-D tensor per expert and projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ExpertLayout {
    /// Where the layers are (`model.layers.`: then the layer index).
    pub layers: &'static str,
    /// The part of the name before the expert index (layers + `{L}.` + this + `{E}.`).
    pub infix: &'static str,
    /// The projections in the order llama.cpp writes the stacked tensors, each with its
    /// stacked GGUF name (`blk.{L}.` + name + `.weight`).
    pub parts: &'static [(&'static str, &'static str)],
}

const MIXTRAL_EXPERTS: ExpertLayout = ExpertLayout {
    layers: "model.layers.",
    infix: "block_sparse_moe.experts.",
    parts: &[
        ("w1", "ffn_gate_exps"),
        ("w2", "ffn_down_exps"),
        ("w3", "ffn_up_exps"),
    ],
};

const QWEN_EXPERTS: ExpertLayout = ExpertLayout {
    layers: "model.layers.",
    infix: "mlp.experts.",
    parts: &[
        ("down_proj", "ffn_down_exps"),
        ("gate_proj", "ffn_gate_exps"),
        ("up_proj", "ffn_up_exps"),
    ],
};

/// Jamba's: Qwen 2 MoE's order, under `feed_forward.`.
const JAMBA_EXPERTS: ExpertLayout = ExpertLayout {
    layers: "model.layers.",
    infix: "feed_forward.experts.",
    parts: QWEN_EXPERTS.parts,
};

/// Nemotron-H's: ungated experts under `backbone.layers.{L}.mixer.`, down before up.
const NEMOTRON_H_EXPERTS: ExpertLayout = ExpertLayout {
    layers: "backbone.layers.",
    infix: "mixer.experts.",
    parts: &[("down_proj", "ffn_down_exps"), ("up_proj", "ffn_up_exps")],
};

impl Family {
    /// The family of a `config.json` `architectures[0]`.
    pub(crate) fn of(hf_arch: &str) -> Option<Family> {
        Some(match hf_arch {
            "LlamaForCausalLM" | "LLaMAForCausalLM" | "MistralForCausalLM" | "LlamaModel" => {
                Family::Llama
            }
            "Qwen2ForCausalLM" | "Qwen2Model" => Family::Qwen2,
            "Qwen3ForCausalLM" | "Qwen3Model" => Family::Qwen3,
            "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" => Family::Gemma3,
            "Gemma2ForCausalLM" => Family::Gemma2,
            "GemmaForCausalLM" => Family::Gemma,
            "Phi3ForCausalLM" => Family::Phi3,
            "PhiForCausalLM" => Family::Phi2,
            "PhiMoEForCausalLM" => Family::PhiMoe,
            "MixtralForCausalLM" => Family::Llama,
            "Qwen2MoeForCausalLM" => Family::Qwen2Moe,
            "Qwen3MoeForCausalLM" => Family::Qwen3Moe,
            "GptOssForCausalLM" => Family::GptOss,
            "SmolLM3ForCausalLM" => Family::SmolLm3,
            "Olmo2ForCausalLM" | "Olmo3ForCausalLM" => Family::Olmo2,
            "OlmoForCausalLM" | "OLMoForCausalLM" => Family::Olmo,
            "OlmoeForCausalLM" => Family::Olmoe,
            "GraniteForCausalLM" => Family::Granite,
            "GraniteSWAForCausalLM" => Family::GraniteSwa,
            "GraniteMoeForCausalLM" | "GraniteMoeSharedForCausalLM" => Family::GraniteMoe,
            "DeepseekV2ForCausalLM" | "DeepseekV3ForCausalLM" => Family::DeepSeek2,
            "Mistral3ForConditionalGeneration" | "Ministral3ForCausalLM" => Family::Mistral3,
            "Exaone4ForCausalLM" => Family::Exaone4,
            "ExaoneForCausalLM" => Family::Exaone,
            "MiniCPMForCausalLM" => Family::MiniCpm,
            "Cohere2ForCausalLM" => Family::Cohere2,
            "CohereForCausalLM" => Family::CommandR,
            "Starcoder2ForCausalLM" => Family::StarCoder2,
            "StableLmForCausalLM" | "StableLMEpochForCausalLM" => Family::StableLm,
            "GPT2LMHeadModel" => Family::Gpt2,
            "GPTBigCodeForCausalLM" => Family::StarCoder,
            "Glm4ForCausalLM" => Family::Glm4,
            "ArceeForCausalLM" => Family::Arcee,
            "NanbeigeForCausalLM" => Family::Nanbeige,
            "MaincoderForCausalLM" => Family::MainCoder,
            "OrionForCausalLM" => Family::Orion,
            "DeciLMForCausalLM" => Family::Deci,
            "OpenELMForCausalLM" => Family::OpenElm,
            "Jais2ForCausalLM" => Family::Jais2,
            "XverseForCausalLM" => Family::Xverse,
            "BaichuanForCausalLM" | "BaiChuanForCausalLM" => Family::Baichuan,
            "CodeShellForCausalLM" => Family::CodeShell,
            "PanguEmbeddedForCausalLM" => Family::PanguEmbedded,
            "SeedOssForCausalLM" => Family::SeedOss,
            "NemotronForCausalLM" => Family::Nemotron,
            "Qwen3VLForConditionalGeneration" => Family::Qwen3Vl,
            "MambaForCausalLM" | "MambaLMHeadModel" => Family::Mamba,
            "Mamba2ForCausalLM" => Family::Mamba2,
            "Lfm2ForCausalLM" | "LFM2ForCausalLM" => Family::Lfm2,
            "JambaForCausalLM" => Family::Jamba,
            "HunYuanDenseV1ForCausalLM" => Family::HunyuanDense,
            "GraniteMoeHybridForCausalLM" | "BambaForCausalLM" => Family::GraniteHybrid,
            "FalconH1ForCausalLM" => Family::FalconH1,
            "NemotronHForCausalLM" => Family::NemotronH,
            "InternLM2ForCausalLM" => Family::InternLm2,
            "QWenLMHeadModel" => Family::Qwen,
            "ChatGLMModel" | "ChatGLMForConditionalGeneration" | "GlmForCausalLM" => {
                Family::ChatGlm
            }
            "Qwen2VLForConditionalGeneration"
            | "Qwen2_5_VLForConditionalGeneration"
            | "Qwen2VLModel" => Family::Qwen2Vl,
            _ => return None,
        })
    }

    /// `general.architecture`.
    pub(crate) fn arch(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma3 => "gemma3",
            Family::Gemma2 => "gemma2",
            Family::Gemma => "gemma",
            Family::Phi3 => "phi3",
            Family::Phi2 => "phi2",
            Family::PhiMoe => "phimoe",
            Family::Qwen2Moe => "qwen2moe",
            Family::Qwen3Moe => "qwen3moe",
            Family::GptOss => "gpt-oss",
            Family::SmolLm3 => "smollm3",
            Family::Olmo2 => "olmo2",
            Family::Olmo => "olmo",
            Family::Olmoe => "olmoe",
            Family::Granite => "granite",
            Family::GraniteSwa => "granite_swa",
            Family::GraniteMoe => "granitemoe",
            Family::DeepSeek2 => "deepseek2",
            Family::Mistral3 => "mistral3",
            Family::Exaone4 => "exaone4",
            Family::Exaone => "exaone",
            Family::MiniCpm => "minicpm",
            Family::Cohere2 => "cohere2",
            Family::CommandR => "command-r",
            Family::StarCoder2 => "starcoder2",
            Family::StableLm => "stablelm",
            Family::Gpt2 => "gpt2",
            Family::Qwen => "qwen",
            Family::ChatGlm => "chatglm",
            Family::StarCoder => "starcoder",
            Family::Glm4 => "glm4",
            Family::Qwen2Vl => "qwen2vl",
            Family::Arcee => "arcee",
            Family::Nanbeige => "nanbeige",
            Family::MainCoder => "maincoder",
            Family::Orion => "orion",
            Family::Deci => "deci",
            Family::Jais2 => "jais2",
            Family::Xverse => "xverse",
            Family::Baichuan => "baichuan",
            Family::CodeShell => "codeshell",
            Family::PanguEmbedded => "pangu-embedded",
            Family::SeedOss => "seed_oss",
            Family::Nemotron => "nemotron",
            Family::Qwen3Vl => "qwen3vl",
            Family::Mamba => "mamba",
            Family::Mamba2 => "mamba2",
            Family::Lfm2 => "lfm2",
            Family::Jamba => "jamba",
            Family::HunyuanDense => "hunyuan-dense",
            Family::GraniteHybrid => "granitehybrid",
            Family::FalconH1 => "falcon-h1",
            Family::NemotronH => "nemotron_h",
            Family::InternLm2 => "internlm2",
            Family::OpenElm => "openelm",
        }
    }

    /// Where the family keeps per-expert tensors, if it has experts.
    pub(crate) fn experts(self) -> Option<ExpertLayout> {
        match self {
            Family::Llama | Family::PhiMoe => Some(MIXTRAL_EXPERTS),
            Family::Qwen2Moe | Family::Qwen3Moe | Family::Olmoe | Family::DeepSeek2 => {
                Some(QWEN_EXPERTS)
            }
            Family::Jamba => Some(JAMBA_EXPERTS),
            Family::NemotronH => Some(NEMOTRON_H_EXPERTS),
            _ => None,
        }
    }

    /// Whether llama.cpp converts the family with its `LlamaModel` class (Q/K row order,
    /// Llama 3 RoPE factors, Llama's tokenizer rules).
    pub(crate) fn is_llama(self) -> bool {
        matches!(
            self,
            Family::Llama
                | Family::SmolLm3
                | Family::Granite
                | Family::GraniteSwa
                | Family::GraniteMoe
                | Family::Mistral3
                | Family::Arcee
                | Family::Nanbeige
        )
    }

    /// Whether the family is one of Gemma's (`1 + w` norms, a tied output).
    pub(crate) fn is_gemma(self) -> bool {
        matches!(self, Family::Gemma | Family::Gemma2 | Family::Gemma3)
    }

    /// Whether `lm_head.weight` is dropped before conversion (llama.cpp's Gemma 1/2 filter: the
    /// output is tied to the embedding; AutoAWQ checkpoints and adapters may still carry one).
    pub(crate) fn drops_lm_head(self) -> bool {
        matches!(self, Family::Gemma | Family::Gemma2)
    }

    /// Whether Q/K rows are reordered from Hugging Face's rotary layout to GGML's.
    pub(crate) fn undo_permute(self) -> bool {
        // llama.cpp's OlmoModel, MiniCPMModel and the Granite hybrids (Nemotron-H too) permute as
        // LlamaModel does.
        self.is_llama()
            || matches!(
                self,
                Family::Olmo
                    | Family::MiniCpm
                    | Family::GraniteHybrid
                    | Family::NemotronH
                    | Family::Xverse
                    | Family::Deci
            )
    }

    /// Gemma's RMSNorm and Nemotron's LayerNorm1P multiply by `1 + w`; llama.cpp stores `1 + w`.
    pub(crate) fn norm_shift(self, hf_name: &str) -> bool {
        (self.is_gemma() || self == Family::Nemotron) && hf_name.ends_with("norm.weight")
    }
}

/// An expert tensor's (layer, expert, projection index in `layout.parts`), or `None` when
/// `name` is not one.
pub(crate) fn expert_of(layout: &ExpertLayout, name: &str) -> Option<(usize, usize, usize)> {
    let rest = name.strip_prefix(layout.layers)?;
    let (layer, rest) = rest.split_once('.')?;
    let rest = rest.strip_prefix(layout.infix)?;
    let (expert, rest) = rest.split_once('.')?;
    let proj = rest.strip_suffix(".weight")?;
    let part = layout.parts.iter().position(|p| p.0 == proj)?;
    Some((layer.parse().ok()?, expert.parse().ok()?, part))
}

/// The name after llama.cpp's filters (`None`: a tensor the text model does not use).
pub(crate) fn filter_name(hf: &str) -> Option<String> {
    let skip_prefix = [
        "mlp",
        "vit.",
        "vpm.",
        "siglip2.",
        "conformer.",
        "merger.",
        "resampler.",
        "sound_encoder.",
        "sound_projection.",
        "speech_embeddings.",
    ];
    let skip_inner = [
        "visual.",
        "vision.",
        "audio.",
        "talker.",
        "vision_",
        "audio_",
        "token2wav.",
        "code2wav.",
        "projector.",
        "pre_mm_projector_norm",
        "image_newline",
        "view_seperator",
        "patch_embed",
        "patch_embedding",
        "patch_merger.",
        "patch_merge_mlp.",
        "model.connector.",
    ];
    if skip_prefix.iter().any(|p| hf.starts_with(p)) || skip_inner.iter().any(|p| hf.contains(p)) {
        return None;
    }
    let mut name = hf.replace("e_score_correction_bias", "e_score_correction.bias");
    name = name.replace("language_model.", "");
    name = name.replace("text_model.", "");
    if name.ends_with(".attention.masked_bias")
        || name.ends_with(".attention.bias")
        || name.ends_with(".rotary_emb.inv_freq")
        || name.ends_with(".rotary_pos_emb.inv_freq")
    {
        return None;
    }
    // Bare `*Model` checkpoints (no `model.` prefix), as llama.cpp's Llama and Qwen2 classes.
    if name.starts_with("layers.") || name.starts_with("embed_tokens.") || name.starts_with("norm.")
    {
        name = format!("model.{name}");
    }
    Some(name)
}

/// EXAONE 3's GPT-2-style names (gguf-py's tensor map: `transformer.h.{L}.attn.attention.*`,
/// `mlp.c_fc_0` gate, `c_fc_1` up, `c_proj` down).
fn exaone_name(name: &str) -> Option<String> {
    match name {
        "transformer.wte.weight" => return Some("token_embd.weight".into()),
        "transformer.ln_f.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let (layer, module, kind) = crate::convert::layer_tensor(name, "transformer.h.")?;
    let short = match module {
        "ln_1" => "attn_norm",
        "attn.attention.q_proj" => "attn_q",
        "attn.attention.k_proj" => "attn_k",
        "attn.attention.v_proj" => "attn_v",
        "attn.attention.out_proj" => "attn_output",
        "ln_2" => "ffn_norm",
        "mlp.c_fc_0" => "ffn_gate",
        "mlp.c_fc_1" => "ffn_up",
        "mlp.c_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// A Granite hybrid tensor's GGUF name: Mamba 2's for the `mamba.*` mixers (`dt_bias` already
/// read as the `dt_proj` bias), Granite MoE's for the rest.
fn granite_hybrid_name(name: &str) -> Option<String> {
    let mamba = super::mamba::layer_of(name, "model.layers.").and_then(|(layer, tail)| {
        let short = super::mamba::ssm_short(tail.strip_prefix("mamba.")?)?;
        Some(format!("blk.{layer}.{short}"))
    });
    mamba.or_else(|| gguf_name(Family::GraniteMoe, name))
}

/// The GGUF name of a (filtered) Hugging Face tensor name, or `None` if the family has no
/// such tensor.
pub(crate) fn gguf_name(family: Family, name: &str) -> Option<String> {
    if matches!(family, Family::Gpt2 | Family::StarCoder | Family::CodeShell) {
        return gpt2_name(name);
    }
    if family == Family::Qwen {
        return qwen_name(name);
    }
    if family == Family::ChatGlm && name.starts_with("transformer.") {
        return super::chatglm::gguf_name(name);
    }
    if matches!(family, Family::Mamba | Family::Mamba2) {
        return super::mamba::gguf_name(name);
    }
    if family == Family::Lfm2 {
        return super::lfm2::gguf_name(name);
    }
    if family == Family::Jamba {
        return super::jamba::gguf_name(name);
    }
    if family == Family::GraniteHybrid {
        return granite_hybrid_name(name);
    }
    if family == Family::FalconH1 {
        return super::falcon_h1::gguf_name(name);
    }
    if family == Family::NemotronH {
        return super::nemotron_h::gguf_name(name);
    }
    if family == Family::InternLm2 {
        return super::internlm2::gguf_name(name);
    }
    if family == Family::OpenElm {
        return super::openelm::gguf_name(name);
    }
    if family == Family::Exaone {
        return exaone_name(name);
    }
    match name {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "model.norm.bias"
            if matches!(
                family,
                Family::StarCoder2
                    | Family::StableLm
                    | Family::PhiMoe
                    | Family::Nemotron
                    | Family::Orion
                    | Family::Jais2
            ) =>
        {
            return Some("output_norm.bias".into())
        }
        "lm_head.weight" => return Some("output.weight".into()),
        "lm_head.bias" if matches!(family, Family::Phi2 | Family::PhiMoe) => {
            return Some("output.bias".into())
        }
        "model.final_layernorm.weight" if family == Family::Phi2 => {
            return Some("output_norm.weight".into())
        }
        "model.final_layernorm.bias" if family == Family::Phi2 => {
            return Some("output_norm.bias".into())
        }
        _ => {}
    }
    let (layer, module, kind) = crate::convert::layer_tensor(name, "model.layers.")?;
    // Gemma 2 and 3: norms before and after attention and feed-forward (Gemma 1 has Llama's).
    let gemma = matches!(family, Family::Gemma2 | Family::Gemma3);
    let qk_norm = matches!(
        family,
        Family::Qwen3
            | Family::Qwen3Vl
            | Family::Gemma3
            | Family::Qwen3Moe
            | Family::Olmo2
            | Family::Olmoe
            | Family::Exaone4
            | Family::CommandR
            | Family::MainCoder
    );
    // Norms after attention and feed-forward (OLMo 2, EXAONE 4), no pre-norms.
    let olmo2 = matches!(family, Family::Olmo2 | Family::Exaone4);
    let phi3 = family == Family::Phi3;
    let glm4 = family == Family::Glm4;
    let moe = matches!(
        family,
        Family::Llama | Family::Qwen2Moe | Family::Qwen3Moe | Family::Olmoe | Family::DeepSeek2
    );
    let mla = family == Family::DeepSeek2;
    let oss = family == Family::GptOss;
    let short = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.linear_attn" if family == Family::Deci => "attn_output",
        "self_attn.query_layernorm" if family == Family::HunyuanDense => "attn_q_norm",
        "self_attn.key_layernorm" if family == Family::HunyuanDense => "attn_k_norm",
        "self_attn.q_norm" if qk_norm => "attn_q_norm",
        "self_attn.k_norm" if qk_norm => "attn_k_norm",
        "post_attention_layernorm" if gemma || oss || olmo2 || family == Family::SeedOss => {
            "post_attention_norm"
        }
        "post_self_attn_layernorm" if glm4 => "post_attention_norm",
        "post_mlp_layernorm" if glm4 => "post_ffw_norm",
        "self_attn.sinks" if oss || family == Family::GraniteSwa => "attn_sinks",
        "mlp.router" if oss => "ffn_gate_inp",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" if gemma => "ffn_norm",
        "post_feedforward_layernorm" if gemma || olmo2 => "post_ffw_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "self_attn.qkv_proj" if phi3 => "attn_qkv",
        "mlp.gate_up_proj" if phi3 || glm4 || family == Family::ChatGlm => "ffn_up",
        "block_sparse_moe.gate" if matches!(family, Family::Llama | Family::PhiMoe) => {
            "ffn_gate_inp"
        }
        "mlp.gate" if moe => "ffn_gate_inp",
        "mlp.shared_expert.gate_proj" if family == Family::Qwen2Moe => "ffn_gate_shexp",
        "mlp.shared_expert.up_proj" if family == Family::Qwen2Moe => "ffn_up_shexp",
        "mlp.shared_expert.down_proj" if family == Family::Qwen2Moe => "ffn_down_shexp",
        "mlp.shared_expert_gate" if family == Family::Qwen2Moe => "ffn_gate_inp_shexp",
        "self_attn.dense" if family == Family::Phi2 => "attn_output",
        // (Its fused expert tensors are split by `granite_moe.rs`.)
        "block_sparse_moe.router.layer" if family == Family::GraniteMoe => "ffn_gate_inp",
        "shared_mlp.output_linear" if family == Family::GraniteMoe => "ffn_down_shexp",
        // Stacked from per-head norms by `head_norms.rs`.
        "self_attn.q_layernorm" if family == Family::StableLm => "attn_q_norm",
        "self_attn.k_layernorm" if family == Family::StableLm => "attn_k_norm",
        "mlp.fc1" if family == Family::Phi2 => "ffn_up",
        "mlp.fc2" if family == Family::Phi2 => "ffn_down",
        "mlp.c_fc" if family == Family::StarCoder2 => "ffn_up",
        "mlp.c_proj" if family == Family::StarCoder2 => "ffn_down",
        "self_attn.q_a_proj" if mla => "attn_q_a",
        "self_attn.q_a_layernorm" if mla => "attn_q_a_norm",
        "self_attn.q_b_proj" if mla => "attn_q_b",
        "self_attn.kv_a_proj_with_mqa" if mla => "attn_kv_a_mqa",
        "self_attn.kv_a_layernorm" if mla => "attn_kv_a_norm",
        "self_attn.k_b_proj" if mla => "attn_k_b",
        "self_attn.v_b_proj" if mla => "attn_v_b",
        "mlp.gate.e_score_correction" if mla => "exp_probs_b",
        "mlp.shared_experts.gate_proj" if mla => "ffn_gate_shexp",
        "mlp.shared_experts.up_proj" if mla => "ffn_up_shexp",
        "mlp.shared_experts.down_proj" if mla => "ffn_down_shexp",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// GPT-2's and StarCoder 1's tensor names (`transformer.h.{L}.*`).
fn gpt2_name(name: &str) -> Option<String> {
    let whole = match name {
        "transformer.wte.weight" => Some("token_embd.weight"),
        "transformer.wpe.weight" => Some("position_embd.weight"),
        "transformer.ln_f.weight" => Some("output_norm.weight"),
        "transformer.ln_f.bias" => Some("output_norm.bias"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(n) = whole {
        return Some(n.into());
    }
    let (layer, module, kind) = crate::convert::layer_tensor(name, "transformer.h.")?;
    let short = match module {
        "ln_1" => "attn_norm",
        "attn.c_attn" => "attn_qkv",
        "attn.c_proj" => "attn_output",
        "ln_2" => "ffn_norm",
        "mlp.c_fc" => "ffn_up",
        "mlp.c_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// Qwen 1's tensor names: GPT-2's, with `mlp.w1` the up and `mlp.w2` the gate projection.
fn qwen_name(name: &str) -> Option<String> {
    if let Some((layer, module, kind)) = crate::convert::layer_tensor(name, "transformer.h.") {
        let short = match module {
            "mlp.w1" => "ffn_up",
            "mlp.w2" => "ffn_gate",
            "mlp.c_proj" => "ffn_down",
            "mlp.c_fc" => return None,
            _ => return gpt2_name(name),
        };
        return Some(format!("blk.{layer}.{short}.{kind}"));
    }
    match name {
        "transformer.wpe.weight" | "transformer.ln_f.bias" => None,
        _ => gpt2_name(name),
    }
}

/// Whether `name` is one of GPT-2's `Conv1D` weights, stored `[in, out]` (llama.cpp writes
/// them transposed, as every other matrix).
pub(crate) fn is_conv1d(family: Family, name: &str) -> bool {
    family == Family::Gpt2
        && name.starts_with("transformer.h.")
        && [".c_attn.weight", ".c_proj.weight", ".c_fc.weight"]
            .iter()
            .any(|s| name.ends_with(s))
}

/// A config value by the first of `keys` present (llama.cpp's `find_hparam`).
pub(crate) fn find<'a>(h: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| h.get(*k))
}

/// llama.cpp's `rope_parameters`: `rope_parameters` or `rope_scaling`, with the top-level
/// theta values folded in.
pub(crate) fn rope_parameters(h: &Value) -> serde_json::Map<String, Value> {
    let mut rp = h
        .get("rope_parameters")
        .or_else(|| h.get("rope_scaling"))
        .and_then(|v| v.as_object())
        .cloned()
        .unwrap_or_default();
    let theta = find(
        h,
        &[
            "global_rope_theta",
            "rope_global_theta",
            "rope_theta_global",
            "rope_theta",
            "rotary_emb_base",
        ],
    )
    .filter(|v| !v.is_null())
    .cloned();
    let local = find(
        h,
        &[
            "local_rope_theta",
            "rope_local_theta",
            "rope_theta_local",
            "swa_rope_theta",
            "rope_local_base_freq",
        ],
    )
    .filter(|v| !v.is_null())
    .cloned();
    let partial = find(h, &["partial_rotary_factor", "rope_pct", "rope_percent"])
        .filter(|v| !v.is_null())
        .cloned();
    let orig = h
        .get("original_max_position_embeddings")
        .filter(|v| !v.is_null())
        .cloned();
    if !rp.contains_key("full_attention") && !rp.contains_key("sliding_attention") {
        if let Some(l) = local {
            rp.insert(
                "sliding_attention".into(),
                serde_json::json!({ "rope_theta": l }),
            );
        }
        if let Some(t) = theta {
            rp.entry("rope_theta").or_insert(t);
        }
        if !rp.contains_key("rope_type") {
            if let Some(t) = rp.get("type").filter(|t| !t.is_null()).cloned() {
                rp.insert("rope_type".into(), t);
            }
        }
        if let Some(p) = partial {
            rp.entry("partial_rotary_factor").or_insert(p);
        }
        if let Some(o) = orig {
            rp.entry("original_max_position_embeddings").or_insert(o);
        }
    }
    rp
}

/// Llama 3's per-frequency RoPE factors (`rope_freqs.weight`), computed in f32 as llama.cpp's
/// converter computes them with torch.
pub(crate) fn llama3_rope_factors(rp: &serde_json::Map<String, Value>, dim: usize) -> Vec<f32> {
    let f = |k: &str, d: f64| rp.get(k).and_then(|v| v.as_f64()).unwrap_or(d);
    let base = f("rope_theta", 10000.0) as f32;
    let factor = f("factor", 8.0);
    let low = f("low_freq_factor", 1.0);
    let high = f("high_freq_factor", 4.0);
    let old_ctx = f("original_max_position_embeddings", 8192.0);
    let low_wavelen = old_ctx / low;
    let high_wavelen = old_ctx / high;
    (0..dim)
        .step_by(2)
        .map(|i| {
            let e = i as f32 / dim as f32;
            let freq = 1.0f32 / base.powf(e);
            // python-scalar / tensor is reciprocal(tensor) * scalar in torch.
            let wavelen = (1.0f32 / freq) * (2.0 * std::f64::consts::PI) as f32;
            if (wavelen as f64) < high_wavelen {
                1.0
            } else if (wavelen as f64) > low_wavelen {
                factor as f32
            } else {
                let smooth =
                    ((1.0f32 / wavelen) * old_ctx as f32 - low as f32) / (high - low) as f32;
                let d = (1.0f32 - smooth) / factor as f32 + smooth;
                1.0f32 / d
            }
        })
        .collect()
}
