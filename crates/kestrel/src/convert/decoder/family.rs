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
