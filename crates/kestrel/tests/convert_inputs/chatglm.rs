//! ChatGLM test checkpoints: ChatGLM3 (`ChatGLMModel`, named `THUDM/chatglm3-6b` so the
//! converter reads it as ChatGLM3) with its config keys and `transformer.*` names (a fused Q/K/V
//! with biases over grouped queries, a fused gate-up matrix, the persisted RoPE frequencies),
//! Gemma 3's SentencePiece model as its `tokenizer.model` and a stand-in for its remote
//! tokenizer code (`fixtures/convert/tokenization_chatglm.py`, for the reference converter);
//! and GLM-4 `-hf` (`GlmForCausalLM`) layers under Llama's names.

use std::path::Path;

use serde_json::json;

use super::{
    make, write_config, write_gemma_tokenizer, write_json, write_weights, Case, Named, Rng,
};

/// Writes the whole ChatGLM3 checkpoint into `dir`; `gemma` is the fetched Gemma 3 model.
pub fn write_chatglm3(case: &Case, dir: &Path, gemma: &Path) {
    write_gemma_tokenizer(gemma, dir);
    std::fs::write(
        dir.join("tokenization_chatglm.py"),
        include_str!("../fixtures/convert/tokenization_chatglm.py"),
    )
    .unwrap();
    let tc = json!({
        "tokenizer_class": "ChatGLMTokenizer", "padding_side": "left", "remove_space": false,
        "auto_map": { "AutoTokenizer": ["tokenization_chatglm.ChatGLMTokenizer", null] },
    });
    write_json(&dir.join("tokenizer_config.json"), &tc);
    let vocab = case.extra["padded_vocab_size"].as_u64().unwrap() as usize;
    let hd = case.hidden / case.heads;
    let cfg = json!({
        "_name_or_path": "THUDM/chatglm3-6b",
        "architectures": [case.arch],
        "model_type": case.model_type,
        "auto_map": { "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration" },
        "hidden_size": case.hidden,
        "ffn_hidden_size": case.ff,
        "kv_channels": hd,
        "num_attention_heads": case.heads,
        "multi_query_attention": true,
        "multi_query_group_num": case.kv_heads,
        "num_layers": case.layers,
        "torch_dtype": "float16",
        "tie_word_embeddings": false,
    });
    write_config(case, dir, cfg);
    let mut rng = Rng::new(0x676c_6d33);
    let h = case.hidden;
    let (q, kv) = (case.heads * hd, case.kv_heads * hd);
    let lin = |rng: &mut Rng, name: String, rows: usize, cols: usize| {
        make(rng, name, vec![rows, cols], 0.0, 1.0 / (cols as f32).sqrt())
    };
    let mut t: Vec<Named> = vec![
        make(
            &mut rng,
            "transformer.embedding.word_embeddings.weight".into(),
            vec![vocab, h],
            0.0,
            0.5,
        ),
        // RotaryEmbedding(kv_channels // 2): a quarter of the head's frequencies, dropped.
        make(
            &mut rng,
            "transformer.rotary_pos_emb.inv_freq".into(),
            vec![hd / 4],
            0.5,
            0.5,
        ),
        make(
            &mut rng,
            "transformer.encoder.final_layernorm.weight".into(),
            vec![h],
            1.0,
            0.2,
        ),
    ];
    t.push(lin(
        &mut rng,
        "transformer.output_layer.weight".into(),
        vocab,
        h,
    ));
    for l in 0..case.layers {
        let p = |s: &str| format!("transformer.encoder.layers.{l}.{s}");
        t.push(make(
            &mut rng,
            p("input_layernorm.weight"),
            vec![h],
            1.0,
            0.2,
        ));
        t.push(lin(
            &mut rng,
            p("self_attention.query_key_value.weight"),
            q + 2 * kv,
            h,
        ));
        t.push(make(
            &mut rng,
            p("self_attention.query_key_value.bias"),
            vec![q + 2 * kv],
            0.0,
            0.1,
        ));
        t.push(lin(&mut rng, p("self_attention.dense.weight"), h, q));
        t.push(make(
            &mut rng,
            p("post_attention_layernorm.weight"),
            vec![h],
            1.0,
            0.2,
        ));
        t.push(lin(&mut rng, p("mlp.dense_h_to_4h.weight"), 2 * case.ff, h));
        t.push(lin(&mut rng, p("mlp.dense_4h_to_h.weight"), h, case.ff));
    }
    write_weights(dir, t, case.dt, case.shards);
}
