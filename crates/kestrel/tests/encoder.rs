//! Sentence embeddings from a real encoder: all-MiniLM-L6-v2, converted from its Hugging Face
//! checkpoint by kestrel's own converter, against sentence-transformers' vectors for 20
//! sentence pairs (`fixtures/minilm/reference.json`, made by `make_reference.py` with
//! sentence-transformers 6.2.0 / transformers 5.23.0 / torch 2.15.0).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use kestrel::convert::{convert_hf, ConvertError, ConvertOptions, OutType};
use kestrel::gguf::models::{test_model, MINILM_L6_V2_SAFETENSORS};
use kestrel::{cosine, EncoderModel, LoadOptions, Model};

struct Reference {
    pairs: Vec<(String, String)>,
    token_ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
    pair_cosine: Vec<f32>,
}

fn reference() -> Reference {
    let text = include_str!("fixtures/minilm/reference.json");
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let pairs = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_string(),
                p[1].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let nums = |x: &serde_json::Value| -> Vec<f32> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_f64().unwrap() as f32)
            .collect()
    };
    Reference {
        pairs,
        token_ids: v["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i.as_u64().unwrap() as u32)
                    .collect()
            })
            .collect(),
        embeddings: v["embeddings"]
            .as_array()
            .unwrap()
            .iter()
            .map(nums)
            .collect(),
        pair_cosine: nums(&v["pair_cosine"]),
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kestrel-encoder-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The checkpoint converted once per outtype (F32, F16), shared by the tests of this binary.
fn converted(outtype: OutType) -> Option<PathBuf> {
    static F32: OnceLock<Option<PathBuf>> = OnceLock::new();
    static F16: OnceLock<Option<PathBuf>> = OnceLock::new();
    let cell = match outtype {
        OutType::F16 => &F16,
        _ => &F32,
    };
    cell.get_or_init(|| {
        let weights = test_model(MINILM_L6_V2_SAFETENSORS)?;
        let dir = weights.parent().unwrap();
        let out = scratch(&format!("{outtype:?}")).join("minilm.gguf");
        let report = convert_hf(dir, &out, &ConvertOptions::new(outtype)).unwrap();
        // 5 embedding tensors + 16 per layer.
        assert_eq!((report.arch.as_str(), report.tensors), ("bert", 5 + 6 * 16));
        Some(out)
    })
    .clone()
}

fn load(outtype: OutType) -> Option<EncoderModel> {
    let p = converted(outtype)?;
    Some(
        EncoderModel::load_file(
            p,
            LoadOptions {
                threads: 2,
                ..Default::default()
            },
        )
        .unwrap(),
    )
}

fn check_against_reference(m: &mut EncoderModel, min_cos: f32) {
    let r = reference();
    assert_eq!(r.pairs.len(), 20);
    let sentences: Vec<&str> = r
        .pairs
        .iter()
        .flat_map(|(a, b)| [a.as_str(), b.as_str()])
        .collect();
    let mut ours = Vec::new();
    let mut worst = f32::MAX;
    for (i, s) in sentences.iter().enumerate() {
        assert_eq!(m.tokenize(s).unwrap(), r.token_ids[i], "token ids of {s:?}");
        let e = m.embed(s).unwrap();
        assert_eq!(e.len(), 384);
        let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        let c = cosine(&e, &r.embeddings[i]);
        worst = worst.min(c);
        assert!(
            c >= min_cos,
            "sentence {i} {s:?}: cosine {c} with sentence-transformers"
        );
        ours.push(e);
    }
    let mut worst_pair = 0f32;
    for (i, want) in r.pair_cosine.iter().enumerate() {
        let got = cosine(&ours[2 * i], &ours[2 * i + 1]);
        worst_pair = worst_pair.max((got - want).abs());
        assert!(
            (got - want).abs() < 2e-3,
            "pair {i}: similarity {got}, sentence-transformers {want}"
        );
    }
    eprintln!(
        "worst per-vector cosine 1 - {:.1e}, worst pair-similarity error {worst_pair:.1e}",
        1.0 - worst
    );
}

#[test]
fn f32_conversion_matches_sentence_transformers() {
    let Some(mut m) = load(OutType::F32) else {
        return;
    };
    check_against_reference(&mut m, 0.9999);
}

#[test]
fn f16_conversion_matches_sentence_transformers() {
    let Some(mut m) = load(OutType::F16) else {
        return;
    };
    check_against_reference(&mut m, 0.999);
}

#[test]
fn encoder_reports_itself_and_refuses_what_it_cannot_do() {
    let Some(mut m) = load(OutType::F32) else {
        return;
    };
    let i = m.info();
    assert_eq!(
        (i.architecture.as_str(), i.layers, i.hidden_size, i.heads),
        ("bert", 6, 384, 12)
    );
    assert_eq!((i.vocab_size, i.context_length, i.ctx), (30522, 512, 512));
    assert_eq!((m.dimensions(), m.max_tokens()), (384, 512));
    assert_eq!(m.pooling(), kestrel::generate::Pooling::Mean);
    // Batch = one at a time.
    let b = m.embed_batch(&["one", "two"]).unwrap();
    assert_eq!(b[0], m.embed("one").unwrap());
    // Too long: an error, not a silent cut.
    let long = "word ".repeat(600);
    let e = m.embed(&long).unwrap_err().to_string();
    assert!(e.contains("context") || e.contains("512"), "{e}");
    // Empty input still has [CLS] [SEP].
    assert_eq!(m.embed("").unwrap().len(), 384);
    // A decoder load of an encoder says what to do instead.
    let p = converted(OutType::F32).unwrap();
    let err = Model::load_file(&p, LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("EncoderModel"), "{err}");
    // And an encoder load of a decoder refuses too.
    if let Some(smol) = test_model(kestrel::gguf::models::SMOLLM2_135M_Q4_1) {
        let err = EncoderModel::load_file(smol, LoadOptions::default()).unwrap_err();
        assert!(err.to_string().contains("not an encoder"), "{err}");
    }
}

fn write_checkpoint(dir: &Path, header: &[u8], data: &[u8]) {
    std::fs::write(
        dir.join("config.json"),
        r#"{"model_type":"bert","hidden_size":4,"num_hidden_layers":1,"num_attention_heads":2,
            "intermediate_size":8,"max_position_embeddings":8,"type_vocab_size":2}"#,
    )
    .unwrap();
    std::fs::write(dir.join("vocab.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhi\n").unwrap();
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header);
    f.extend_from_slice(data);
    std::fs::write(dir.join("model.safetensors"), f).unwrap();
}

#[test]
fn malformed_checkpoints_are_typed_errors() {
    let d = scratch("bad");
    let out = d.join("out.gguf");
    let conv = || convert_hf(&d, &out, &ConvertOptions::default());
    // Offsets past the data.
    write_checkpoint(
        &d,
        br#"{"embeddings.LayerNorm.bias":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
        &[0u8; 8],
    );
    let e = conv().unwrap_err();
    assert!(
        matches!(e, ConvertError::Input { .. }) && e.to_string().contains("data_offsets")
            || e.to_string().contains("bytes 0..16"),
        "{e}"
    );
    // Shape that disagrees with the byte range.
    write_checkpoint(
        &d,
        br#"{"embeddings.LayerNorm.bias":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}"#,
        &[0u8; 16],
    );
    assert!(conv().unwrap_err().to_string().contains("[3]"));
    // Header that is not JSON, and a header length past the file.
    write_checkpoint(&d, b"{nope", &[]);
    assert!(conv().unwrap_err().to_string().contains("not JSON"));
    std::fs::write(d.join("model.safetensors"), u64::MAX.to_le_bytes()).unwrap();
    assert!(conv().unwrap_err().to_string().contains("header of"));
    // No BERT tensors at all.
    write_checkpoint(
        &d,
        br#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &[0u8; 4],
    );
    assert!(conv().unwrap_err().to_string().contains("no BERT tensors"));
    // Not a BERT config.
    std::fs::write(d.join("config.json"), r#"{"model_type":"llama"}"#).unwrap();
    assert!(matches!(
        conv().unwrap_err(),
        ConvertError::Unsupported { .. }
    ));
    // No config at all.
    std::fs::remove_file(d.join("config.json")).unwrap();
    assert!(conv().unwrap_err().to_string().contains("config.json"));
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&d);
}
