//! The reader against the real test models: the same tensors, types, shapes and metadata keys as
//! the reference reader (gguf-dump of the `gguf` Python package, recorded in fixtures/gguf-dump).

use std::path::Path;

use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::{GgufFile, GgufModel, OpenOptions, Value};
use serde_json::Value as Json;

fn fixture(file: &str) -> Json {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf-dump")
        .join(file.replace(".gguf", ".json"));
    serde_json::from_str(&std::fs::read_to_string(p).expect("fixture")).expect("fixture json")
}

fn type_tag(v: &Value<'_>) -> String {
    match v {
        Value::Array(a) => format!(
            "ARRAY[{};{}]",
            a.element_type().name().to_uppercase(),
            a.len()
        ),
        v => v.value_type().name().to_uppercase(),
    }
}

fn check_against_reference(file: &str) {
    let Some(path) = test_model(file) else { return };
    let want = fixture(file);
    for mmap in [true, false] {
        let f = GgufFile::open_with(&path, OpenOptions { mmap }).expect("open");
        assert_eq!(f.is_mmapped(), mmap);
        assert_eq!(f.version() as u64, want["gguf_version"].as_u64().unwrap());
        let tensors = want["tensors"].as_array().unwrap();
        assert_eq!(f.tensors().len(), tensors.len());
        assert_eq!(
            f.tensors().len() as u64,
            want["tensor_count"].as_u64().unwrap()
        );
        for (t, w) in f.tensors().iter().zip(tensors) {
            assert_eq!(t.name(), w[0].as_str().unwrap());
            assert_eq!(t.ggml_type().name(), w[1].as_str().unwrap(), "{}", t.name());
            let shape: Vec<u64> = w[2]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(t.dims(), &shape[..], "{}", t.name());
            // The data view is exactly the tensor's bytes, aligned as the file says.
            let v = f.tensor(t.name()).unwrap();
            assert_eq!(v.data.len() as u64, t.n_bytes());
            assert_eq!(t.file_offset() % f.alignment(), 0);
        }
        let md = f.metadata();
        let keys = want["metadata"].as_array().unwrap();
        assert_eq!(md.len(), keys.len());
        assert_eq!(md.len() as u64, want["kv_count"].as_u64().unwrap());
        for ((k, v), w) in md.iter().zip(keys) {
            assert_eq!(k, w[0].as_str().unwrap());
            assert_eq!(type_tag(&v), w[1].as_str().unwrap(), "{k}");
        }
    }
}

#[test]
fn gemma3_matches_gguf_dump() {
    check_against_reference(GEMMA3_270M_Q4_K_M);
}

#[test]
fn smollm2_matches_gguf_dump() {
    check_against_reference(SMOLLM2_135M_Q4_1);
}

#[test]
fn gemma3_typed_metadata() {
    let Some(path) = test_model(GEMMA3_270M_Q4_K_M) else {
        return;
    };
    let m = GgufModel::open(&path).unwrap();
    let md = m.metadata();
    assert_eq!(md.architecture().unwrap(), "gemma3");
    assert_eq!(md.arch_u32("block_count").unwrap(), 18);
    assert_eq!(md.get_u32("gemma3.embedding_length").unwrap(), 640);
    assert_eq!(md.arch_f32("rope.freq_base").unwrap(), 1_000_000.0);
    assert!(md.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    let tokens = md.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 262_144);
    let first: Vec<&[u8]> = tokens.strings().unwrap().take(3).collect();
    assert_eq!(first, [&b"<pad>"[..], b"<eos>", b"<bos>"]);
    assert_eq!(tokens.get(2).and_then(|v| v.as_str()), Some("<bos>"));
    let scores = md.get_array("tokenizer.ggml.scores").unwrap();
    assert_eq!(scores.to_f32_vec().unwrap().len(), 262_144);
    // Errors name the key.
    let e = md.get_u32("gemma3.no_such_key").unwrap_err().to_string();
    assert!(e.contains("gemma3.no_such_key"), "{e}");
    let e = md.get_u32("general.name").unwrap_err().to_string();
    assert!(e.contains("general.name") && e.contains("string"), "{e}");
    assert_eq!(m.n_tensors(), 236);
    assert_eq!(m.n_params(), 268_098_176);
}

#[test]
fn smollm2_tokenizer_metadata() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let f = GgufFile::open(&path).unwrap();
    let md = f.metadata();
    assert_eq!(md.architecture().unwrap(), "llama");
    assert_eq!(md.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(md.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(md.get_array("tokenizer.ggml.merges").unwrap().len(), 48_900);
    assert!(md
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("im_start"));
    assert_eq!(md.arch_u32("attention.head_count_kv").unwrap(), 3);
}
