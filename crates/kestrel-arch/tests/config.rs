//! Configs read from the real test models and from synthetic files of each family.

use kestrel_arch::{
    list_architectures, Activation, ArchError, ArchKind, DecoderConfig, QkNorm, RopeScaling,
};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::{GgmlType, GgufFile, GgufModel, GgufWriter, MetadataValue};

#[test]
fn gemma3_270m() {
    let Some(p) = test_model(GEMMA3_270M_Q4_K_M) else {
        return;
    };
    let c = DecoderConfig::from_model(&GgufModel::open(p).unwrap()).unwrap();
    assert_eq!(c.kind, ArchKind::Gemma3);
    assert_eq!((c.n_layer, c.n_embd, c.n_vocab), (18, 640, 262_144));
    assert_eq!(
        (c.n_head[0], c.n_head_kv[0], c.head_dim_k, c.n_ff[0]),
        (4, 1, 256, 2048)
    );
    assert!(c.rope.neox && c.post_norms && c.tied_output);
    assert_eq!(c.qk_norm, QkNorm::PerHead);
    assert_eq!(c.activation, Activation::GeluTanh);
    assert_eq!(c.rope.freq_base, 1_000_000.0);
    assert_eq!(c.rope.freq_base_swa, Some(10_000.0));
    assert_eq!(c.sliding_window, Some(512));
    let globals: Vec<usize> = (0..18).filter(|&i| !c.swa_layers[i]).collect();
    assert_eq!(globals, [5, 11, 17]);
    assert_eq!(c.embd_scale, Some(640f32.sqrt()));
    assert_eq!(c.attn_scale, 1.0 / 16.0);
    assert_eq!(c.norm_eps, 1e-6);
}

#[test]
fn smollm2_135m() {
    let Some(p) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let c = DecoderConfig::from_model(&GgufModel::open(p).unwrap()).unwrap();
    assert_eq!(c.kind, ArchKind::Llama);
    assert!(!c.rope.neox && c.ffn_scales);
    assert_eq!(c.qk_norm, QkNorm::None);
    assert_eq!((c.n_layer, c.n_embd, c.n_vocab), (30, 576, 49_152));
    assert_eq!(
        (c.n_head[0], c.n_head_kv[0], c.head_dim_k, c.rope.n_rot),
        (9, 3, 64, 64)
    );
    assert_eq!(c.rope.scaling, RopeScaling::None);
    assert!(c.swa_layers.iter().all(|s| !s));
}

fn synthetic(arch: &str, extra: &[(&str, MetadataValue)], tensors: &[&str]) -> GgufModel {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", arch);
    for (k, v) in [
        ("block_count", 2u32),
        ("embedding_length", 64),
        ("feed_forward_length", 128),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
        ("context_length", 256),
        ("vocab_size", 100),
    ] {
        w.add_metadata(&format!("{arch}.{k}"), v);
    }
    for (k, v) in extra {
        w.add_metadata(&format!("{arch}.{k}"), v.clone());
    }
    for t in tensors {
        w.add_tensor(t, GgmlType::F32, &[1], vec![0; 4]).unwrap();
    }
    GgufModel::from_shards(
        vec![GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()],
        std::path::Path::new("synthetic"),
    )
    .unwrap()
}

const LLAMA_TENSORS: &[&str] = &[
    "token_embd.weight",
    "blk.0.attn_q.weight",
    "blk.0.attn_k.weight",
    "blk.0.ffn_down.weight",
];

#[test]
fn qwen2_is_neox_without_ffn_scales() {
    let c = DecoderConfig::from_model(&synthetic("qwen2", &[], LLAMA_TENSORS)).unwrap();
    assert_eq!(c.kind, ArchKind::Qwen2);
    assert!(c.rope.neox && c.tied_output && !c.ffn_scales);
    assert_eq!(c.head_dim_k, 16);
}

#[test]
fn qwen3_has_qk_norm() {
    let c = DecoderConfig::from_model(&synthetic(
        "qwen3",
        &[("attention.key_length", MetadataValue::U32(32))],
        LLAMA_TENSORS,
    ))
    .unwrap();
    assert!(c.rope.neox && c.ffn_scales);
    assert_eq!(c.qk_norm, QkNorm::PerHead);
    assert_eq!((c.head_dim_k, c.head_dim_v, c.rope.n_rot), (32, 32, 32));
}

#[test]
fn rope_scaling_from_metadata() {
    let yarn = synthetic(
        "llama",
        &[
            ("rope.scaling.type", "yarn".into()),
            ("rope.scaling.factor", MetadataValue::F32(4.0)),
            (
                "rope.scaling.original_context_length",
                MetadataValue::U32(64),
            ),
        ],
        LLAMA_TENSORS,
    );
    match DecoderConfig::from_model(&yarn).unwrap().rope.scaling {
        RopeScaling::Yarn {
            factor,
            original_context,
            ..
        } => assert_eq!((factor, original_context), (4.0, 64)),
        s => panic!("{s:?}"),
    }
    let lin = synthetic(
        "llama",
        &[
            ("rope.scaling.type", "linear".into()),
            ("rope.scaling.factor", MetadataValue::F32(2.0)),
        ],
        LLAMA_TENSORS,
    );
    assert_eq!(
        DecoderConfig::from_model(&lin).unwrap().rope.scaling,
        RopeScaling::Linear { factor: 2.0 }
    );
    // llama.cpp's converter writes a factor of 0 for "none"; llama.cpp reads it as 1.
    for ty in ["none", "linear"] {
        let zero = synthetic(
            "llama",
            &[
                ("rope.scaling.type", ty.into()),
                ("rope.scaling.factor", MetadataValue::F32(0.0)),
            ],
            LLAMA_TENSORS,
        );
        assert_eq!(
            DecoderConfig::from_model(&zero).unwrap().rope.scaling,
            RopeScaling::None,
            "{ty}"
        );
    }
    let negative = synthetic(
        "llama",
        &[("rope.scaling.factor", MetadataValue::F32(-2.0))],
        LLAMA_TENSORS,
    );
    assert!(DecoderConfig::from_model(&negative).is_err());
    let bad = synthetic(
        "llama",
        &[("rope.scaling.type", "longrope-x".into())],
        LLAMA_TENSORS,
    );
    assert!(DecoderConfig::from_model(&bad)
        .unwrap_err()
        .to_string()
        .contains("longrope-x"));
}

#[test]
fn longrope_attention_factor_scales_the_rotation() {
    // Phi-3 128k files carry LongRoPE's sqrt(1 + ln(s) / ln(n_ctx_orig)) here; llama.cpp
    // multiplies every RoPE's cos/sin by it (`rope_attn_factor`), as transformers does.
    let f = synthetic(
        "llama",
        &[("rope.scaling.attn_factor", MetadataValue::F32(1.19))],
        LLAMA_TENSORS,
    );
    let c = DecoderConfig::from_model(&f).unwrap();
    assert_eq!(c.rope.attn_factor, 1.19);
    assert_eq!(kestrel_arch::rope_params(&c, 0, 4, None).attn_factor, 1.19);
    let plain = synthetic("llama", &[], LLAMA_TENSORS);
    let c = DecoderConfig::from_model(&plain).unwrap();
    assert_eq!(kestrel_arch::rope_params(&c, 0, 4, None).attn_factor, 1.0);
    let bad = synthetic(
        "llama",
        &[("rope.scaling.attn_factor", MetadataValue::F32(-1.0))],
        LLAMA_TENSORS,
    );
    assert!(DecoderConfig::from_model(&bad).is_err());
}

#[test]
fn sliding_window_patterns_read_as_booleans_or_integers() {
    // llama.cpp's converter writes OLMo 3's pattern as booleans (gguf-py infers the type).
    let pattern = |items: Vec<MetadataValue>, ty| {
        synthetic(
            "olmo2",
            &[
                ("attention.sliding_window", MetadataValue::U32(8)),
                (
                    "attention.sliding_window_pattern",
                    MetadataValue::Array {
                        element_type: ty,
                        items,
                    },
                ),
            ],
            LLAMA_TENSORS,
        )
    };
    use kestrel_gguf::ValueType;
    let b = pattern(
        vec![MetadataValue::Bool(true), MetadataValue::Bool(false)],
        ValueType::Bool,
    );
    assert_eq!(
        DecoderConfig::from_model(&b).unwrap().swa_layers,
        [true, false]
    );
    let i = pattern(
        vec![MetadataValue::I32(0), MetadataValue::I32(1)],
        ValueType::I32,
    );
    assert_eq!(
        DecoderConfig::from_model(&i).unwrap().swa_layers,
        [false, true]
    );
    let s = pattern(
        vec![
            MetadataValue::String("x".into()),
            MetadataValue::String("y".into()),
        ],
        ValueType::String,
    );
    let e = DecoderConfig::from_model(&s).unwrap_err().to_string();
    assert!(e.contains("neither booleans nor integers"), "{e}");
}

#[test]
fn unknown_arch_is_refused_even_with_llama_tensors() {
    // Run as llama, a family that is not llama gives wrong text without an error.
    let e = DecoderConfig::from_model(&synthetic("mysterynet", &[], LLAMA_TENSORS)).unwrap_err();
    assert!(matches!(e, ArchError::Unsupported { .. }), "{e}");
    let e =
        DecoderConfig::from_model(&synthetic("mamba9", &[], &["token_embd.weight"])).unwrap_err();
    assert!(matches!(e, ArchError::Unsupported { .. }));
    let msg = e.to_string();
    for a in list_architectures() {
        assert!(msg.contains(a), "{msg}");
    }
}

#[test]
fn contradictory_metadata_is_an_error() {
    let e = DecoderConfig::from_model(&synthetic(
        "llama",
        &[("attention.head_count_kv", MetadataValue::U32(3))],
        LLAMA_TENSORS,
    ))
    .unwrap_err();
    assert!(e.to_string().contains("KV heads"), "{e}");
    let e = DecoderConfig::from_model(&synthetic(
        "llama",
        &[("block_count", MetadataValue::U32(0))],
        LLAMA_TENSORS,
    ))
    .unwrap_err();
    assert!(e.to_string().contains("block_count"), "{e}");
    let per_layer = MetadataValue::i32_array([4, 4, 4]);
    let e = DecoderConfig::from_model(&synthetic(
        "llama",
        &[("attention.head_count", per_layer)],
        LLAMA_TENSORS,
    ))
    .unwrap_err();
    assert!(e.to_string().contains("3 entries"), "{e}");
}

#[test]
fn real_models_build_graphs() {
    use kestrel_arch::{build_decoder, Logits};
    use kestrel_graph::{plan_memory, Op};
    for (file, layers) in [(GEMMA3_270M_Q4_K_M, 18), (SMOLLM2_135M_Q4_1, 30)] {
        let Some(p) = test_model(file) else { continue };
        let m = GgufModel::open(p).unwrap();
        let c = DecoderConfig::from_model(&m).unwrap();
        for logits in [Logits::Last, Logits::All] {
            let g = build_decoder(&c, &m, logits).unwrap();
            let attn = g
                .nodes()
                .iter()
                .filter(|n| matches!(n.op, Op::Attention(_)))
                .count();
            assert_eq!(attn, layers);
            let out = g.node(g.outputs()[0]).unwrap();
            assert_eq!(out.width, c.n_vocab);
            let decode = plan_memory(&g, 1, 1).unwrap();
            let prefill = plan_memory(&g, 64, 1).unwrap();
            assert!(decode.arena_len < prefill.arena_len);
        }
        // gemma3: sliding window on 15 of 18 layers, global RoPE base on the others.
        let g = build_decoder(&c, &m, Logits::Last).unwrap();
        let windows = g
            .nodes()
            .iter()
            .filter(|n| matches!(&n.op, Op::Attention(a) if a.window.is_some()))
            .count();
        assert_eq!(windows, if c.kind == ArchKind::Gemma3 { 15 } else { 0 });
    }
}

#[test]
fn missing_tensor_is_named() {
    use kestrel_arch::{build_decoder, Logits};
    let m = synthetic("llama", &[], LLAMA_TENSORS);
    let c = DecoderConfig::from_model(&m).unwrap();
    let e = build_decoder(&c, &m, Logits::Last).unwrap_err().to_string();
    assert!(e.contains("blk.0.attn_norm.weight"), "{e}");
}
