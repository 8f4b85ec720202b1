//! Per-family pieces of `write_case`: nested configs (Mistral 3, Qwen3-VL), the bias tensors of
//! StarCoder 2 and Phi 2 layers, and model cards.

use serde_json::{json, Value as Json};

use super::{Case, Named, Rng};

/// A flat test config as Mistral 3's: the text model's keys under `text_config` (a Mistral
/// model), a small Pixtral `vision_config` and the multimodal keys at the top.
pub(super) fn mistral3_config(flat: Json) -> Json {
    let mut text = flat.clone();
    let top = ["architectures", "torch_dtype"];
    for k in top {
        text.as_object_mut().unwrap().remove(k);
    }
    let text_type = flat
        .get("text_model_type")
        .cloned()
        .unwrap_or(json!("mistral"));
    text.as_object_mut().unwrap().remove("text_model_type");
    text["model_type"] = text_type;
    json!({
        "architectures": flat["architectures"],
        "model_type": "mistral3",
        "torch_dtype": flat["torch_dtype"],
        "image_token_index": 10,
        "multimodal_projector_bias": false,
        "projector_hidden_act": "gelu",
        "spatial_merge_size": 2,
        "vision_feature_layer": -1,
        "text_config": text,
        "vision_config": { "model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 16, "image_size": 64,
            "patch_size": 16, "num_channels": 3, "rope_theta": 10000.0 },
    })
}

/// A flat test config as Qwen3-VL's: the text model's keys under `text_config`
/// (`qwen3_vl_text`), a small vision config with one deepstack layer, and the multimodal
/// keys (and the tied-embedding flag) at the top.
pub(super) fn qwen3vl_config(flat: Json) -> Json {
    let mut text = flat.clone();
    for k in ["architectures", "torch_dtype", "tie_word_embeddings"] {
        text.as_object_mut().unwrap().remove(k);
    }
    text["model_type"] = json!("qwen3_vl_text");
    json!({
        "architectures": flat["architectures"],
        "model_type": "qwen3_vl",
        "torch_dtype": flat["torch_dtype"],
        "tie_word_embeddings": flat["tie_word_embeddings"],
        "image_token_id": 100, "video_token_id": 101,
        "vision_start_token_id": 102, "vision_end_token_id": 103,
        "text_config": text,
        "vision_config": { "model_type": "qwen3_vl", "depth": 1, "hidden_size": 32,
            "intermediate_size": 64, "num_heads": 2, "in_channels": 3, "patch_size": 16,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
            "num_position_embeddings": 64, "deepstack_visual_indexes": [0] },
    })
}

/// StarCoder 2's layers: LayerNorms and every projection with biases, a two-matrix GELU MLP
/// (`c_fc`, `c_proj`), and the final norm's bias.
/// Names of a layer whose every projection and norm has a bias (StarCoder 2, Phi-2).
pub(super) struct BiasedNames {
    /// The output norm (`model.norm` or Phi-2's `model.final_layernorm`).
    final_norm: &'static str,
    norms: &'static [&'static str],
    out_proj: &'static str,
    up: &'static str,
    down: &'static str,
}

pub(super) const STARCODER2: BiasedNames = BiasedNames {
    final_norm: "model.norm",
    norms: &["input_layernorm", "post_attention_layernorm"],
    out_proj: "self_attn.o_proj",
    up: "mlp.c_fc",
    down: "mlp.c_proj",
};

/// Phi-2: one norm before its parallel attention and MLP, `dense`/`fc1`/`fc2`, an output bias.
pub(super) const PHI2: BiasedNames = BiasedNames {
    final_norm: "model.final_layernorm",
    norms: &["input_layernorm"],
    out_proj: "self_attn.dense",
    up: "mlp.fc1",
    down: "mlp.fc2",
};

/// The layers (and the output norm's bias; the caller wrote `model.norm.weight`, renamed here)
/// of a family whose projections and norms all have biases.
pub(super) fn biased_layers(
    case: &Case,
    vocab: usize,
    rng: &mut Rng,
    t: &mut Vec<Named>,
    names: &BiasedNames,
) {
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (q, kv) = (case.heads * hd, case.kv_heads * hd);
    for (name, _, _) in t.iter_mut() {
        if name == "model.norm.weight" {
            *name = format!("{}.weight", names.final_norm);
        }
    }
    let mut push = |rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32| {
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| base + rng.uniform(a)).collect()));
    };
    push(rng, format!("{}.bias", names.final_norm), vec![h], 0.0, 0.1);
    if !case.tied && names.final_norm != "model.norm" {
        push(rng, "lm_head.bias".into(), vec![vocab], 0.0, 0.05);
    }
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        for norm in names.norms {
            push(rng, p(&format!("{norm}.weight")), vec![h], 1.0, 0.2);
            push(rng, p(&format!("{norm}.bias")), vec![h], 0.0, 0.1);
        }
        let a = 1.0 / (h as f32).sqrt();
        for (name, rows, cols) in [
            ("self_attn.q_proj", q, h),
            ("self_attn.k_proj", kv, h),
            ("self_attn.v_proj", kv, h),
            (names.out_proj, h, q),
            (names.up, case.ff, h),
            (names.down, h, case.ff),
        ] {
            let a = if cols == h {
                a
            } else {
                1.0 / (cols as f32).sqrt()
            };
            push(rng, p(&format!("{name}.weight")), vec![rows, cols], 0.0, a);
            push(rng, p(&format!("{name}.bias")), vec![rows], 0.0, 0.05);
        }
    }
}

/// A model card (`README.md` with YAML front matter) for some cases: the fields llama.cpp's
/// converter copies into `general.*` (license, languages with Norway's `no`, tags and the
/// pipeline tag, base models as an id, a URL and a mapping, a dataset, names that override the
/// folder's) beside fields it ignores.
pub(super) fn model_card(case: &str) -> Option<&'static str> {
    match case {
        "llama-bpe" => Some(
            "---\nlicense: apache-2.0\nlicense_name: kestrel-test\nlanguage:\n- en\n- no\n- fr\n\
             tags:\n- text-generation\n- 'llama 3'\npipeline_tag: text-generation\nbase_model:\n\
             - meta-llama/Llama-3.2-1B-Instruct\n- https://huggingface.co/HuggingFaceTB/SmolLM2-135M\n\
             - name: Hand Written\n  author: Someone\n  url: https://example.com/model\n\
             datasets: HuggingFaceFW/fineweb-edu\nmodel_creator: Kestrel Tests\n\
             description: A random-weight test checkpoint.\nlibrary_name: transformers\n\
             model-index:\n- name: x\n  results:\n  - task: {type: text-generation}\n\
             \x20   metrics:\n    - {type: acc, value: 0.5}\n---\n# Test model\n\nNot a real model.\n",
        ),
        "qwen3" => Some(
            "---\nname: Qwen Test\nversion: v2.5\norganization: kestrel\nlicense:\n- mit\n- apache-2.0\n\
             license_link: https://example.com/LICENSE\nlanguage: zh\nurl: https://example.com\n\
             dataset:\n- org/data-v1\n- {name: Mixed, version: '2'}\n---\n",
        ),
        _ => None,
    }
}
