//! EXAONE 3 / 3.5 test checkpoints (`ExaoneForCausalLM`, remote code on the Hub): Llama's layers
//! under GPT-2-style names (`transformer.wte`, `transformer.h.{L}.ln_1`,
//! `attn.attention.{q,k,v,out}_proj`, `ln_2`, `mlp.c_fc_0` gate, `mlp.c_fc_1` up, `mlp.c_proj`
//! down, `transformer.ln_f`) and config keys (`num_layers`, `activation_function`,
//! `layer_norm_epsilon`).

use serde_json::{json, Value as Json};

use super::Named;

/// `cfg` (written with the common names) as ExaoneConfig saves it.
pub fn config(mut cfg: Json) -> Json {
    let o = cfg.as_object_mut().unwrap();
    let layers = o.remove("num_hidden_layers").unwrap();
    o.insert("num_layers".into(), layers);
    o.remove("hidden_act");
    o.insert("activation_function".into(), json!("silu"));
    cfg
}

/// The Llama-named tensors of `t` under EXAONE's names.
pub fn rename(t: &mut [Named]) {
    for (name, _, _) in t.iter_mut() {
        let new = match name.as_str() {
            "model.embed_tokens.weight" => "transformer.wte.weight".to_string(),
            "model.norm.weight" => "transformer.ln_f.weight".to_string(),
            n => match n.strip_prefix("model.layers.") {
                Some(rest) => {
                    let (layer, module) = rest.split_once('.').unwrap();
                    let module = match module {
                        "input_layernorm.weight" => "ln_1.weight",
                        "post_attention_layernorm.weight" => "ln_2.weight",
                        "self_attn.q_proj.weight" => "attn.attention.q_proj.weight",
                        "self_attn.k_proj.weight" => "attn.attention.k_proj.weight",
                        "self_attn.v_proj.weight" => "attn.attention.v_proj.weight",
                        "self_attn.o_proj.weight" => "attn.attention.out_proj.weight",
                        "mlp.gate_proj.weight" => "mlp.c_fc_0.weight",
                        "mlp.up_proj.weight" => "mlp.c_fc_1.weight",
                        "mlp.down_proj.weight" => "mlp.c_proj.weight",
                        other => panic!("no EXAONE name for {other}"),
                    };
                    format!("transformer.h.{layer}.{module}")
                }
                None => continue,
            },
        };
        *name = new;
    }
}
