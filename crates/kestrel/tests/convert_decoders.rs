//! `kestrel convert` on decoder checkpoints writes what llama.cpp's `convert_hf_to_gguf.py`
//! writes. The checkpoints are built here (`convert_inputs`: random weights, real tokenizers
//! rebuilt from the fetched SmolLM2 and Gemma 3 files); `fixtures/convert/golden.json` holds,
//! for each checkpoint and output type, every metadata key with the SHA-256 of its on-disk
//! value and every tensor's name, type, dims and data SHA-256 as llama.cpp b11434's converter
//! wrote them from these very files (`KESTREL_CONVERT_INPUTS=DIR` writes the checkpoints;
//! `fixtures/convert/make_golden.py` converts them with llama.cpp and writes the golden file).

mod convert_inputs;

use std::path::{Path, PathBuf};

use kestrel::convert::{convert_hf, ConvertOptions, OutType, Split};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::{GgufFile, Value};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/convert")
}

fn hex(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

/// A metadata value as the file stores it: type id, then the value's bytes.
fn value_bytes(v: &Value) -> Vec<u8> {
    let mut out = (v.value_type() as u32).to_le_bytes().to_vec();
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::String(s) => {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s);
        }
        Value::Array(a) => {
            out.extend_from_slice(&(a.element_type() as u32).to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            out.extend_from_slice(a.raw_bytes());
        }
    }
    out
}

/// The comparable summary of a GGUF file: (metadata key, value digest) and (tensor name,
/// type, dims, data digest), in file order.
type Summary = (Vec<(String, String)>, Vec<(String, u32, Vec<u64>, String)>);

fn summary(path: &Path) -> Summary {
    let f = GgufFile::open(path).unwrap();
    let meta = f
        .metadata()
        .iter()
        .map(|(k, v)| (k.to_string(), hex(&value_bytes(&v))))
        .collect();
    let tensors = f
        .tensors()
        .iter()
        .map(|t| {
            let view = f.view(t);
            (
                t.name().to_string(),
                t.ggml_type().id(),
                t.dims().to_vec(),
                hex(view.data),
            )
        })
        .collect();
    (meta, tensors)
}

fn tokenizer_sources() -> Option<(PathBuf, PathBuf)> {
    Some((
        test_model(SMOLLM2_135M_Q4_1)?,
        test_model(GEMMA3_270M_Q4_K_M)?,
    ))
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kestrel-convert-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn decoders_convert_as_llama_cpp_converts_them() {
    let Some((smollm, gemma)) = tokenizer_sources() else {
        return;
    };
    let golden: Json =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("golden.json")).unwrap())
            .unwrap();
    let work = temp("golden");
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in convert_inputs::cases() {
        if !convert_inputs::available(&case) {
            continue;
        }
        let dir = match std::env::var("KESTREL_CONVERT_INPUTS") {
            Ok(d) => Path::new(&d).join(case.name),
            Err(_) => work.join(case.name),
        };
        convert_inputs::write_case(&case, &dir, &smollm, &gemma);
        if std::env::var("KESTREL_CONVERT_INPUTS").is_ok() {
            continue;
        }
        let outtypes = golden[case.name]
            .as_object()
            .unwrap_or_else(|| panic!("no golden entry for {}", case.name));
        for (ot, want) in outtypes {
            let out = work.join(format!("{}-{ot}.gguf", case.name));
            let opts = ConvertOptions::new(OutType::parse(ot).unwrap());
            convert_hf(&dir, &out, &opts).unwrap_or_else(|e| panic!("{} {ot}: {e}", case.name));
            compare(&format!("{} {ot}", case.name), &out, want, &mut failures);
            std::fs::remove_file(&out).ok();
            checked += 1;
        }
    }
    std::fs::remove_dir_all(&work).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    if std::env::var("KESTREL_CONVERT_INPUTS").is_err() {
        assert!(checked >= 7, "only {checked} conversions checked");
    }
}

/// Checks the file at `out` against llama.cpp's summary `want` (every metadata value, every
/// tensor's name, type, dims and bytes), noting differences in `failures`.
fn compare(label: &str, out: &Path, want: &Json, failures: &mut Vec<String>) {
    let (meta, tensors) = summary(out);
    let want_meta: Vec<(String, String)> = want["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().into(), p[1].as_str().unwrap().into()))
        .collect();
    for (k, v) in &want_meta {
        match meta.iter().find(|(mk, _)| mk == k) {
            None => failures.push(format!("{label}: missing key {k}")),
            Some((_, got)) if got != v => failures.push(format!("{label}: {k} differs")),
            _ => {}
        }
    }
    for (k, _) in &meta {
        if !want_meta.iter().any(|(wk, _)| wk == k) {
            failures.push(format!("{label}: extra key {k}"));
        }
    }
    let want_t = want["tensors"].as_array().unwrap();
    if want_t.len() != tensors.len() {
        failures.push(format!(
            "{label}: {} tensors, llama.cpp wrote {}",
            tensors.len(),
            want_t.len()
        ));
    }
    for (w, (name, ty, dims, sha)) in want_t.iter().zip(&tensors) {
        let wdims: Vec<u64> = w[2]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        if w[0].as_str() != Some(name.as_str())
            || w[1].as_u64() != Some(u64::from(*ty))
            || wdims != *dims
        {
            failures.push(format!(
                "{label}: tensor {name} type {ty} {dims:?}, llama.cpp {w}"
            ));
        } else if w[3].as_str() != Some(sha.as_str()) {
            failures.push(format!("{label}: tensor {name} data differs"));
        }
    }
}

#[test]
fn lora_adapters_convert_as_llama_cpp_converts_them() {
    let Some((smollm, gemma)) = tokenizer_sources() else {
        return;
    };
    let golden: Json =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("golden.json")).unwrap())
            .unwrap();
    let inputs = std::env::var("KESTREL_CONVERT_INPUTS").ok();
    let work = temp("lora");
    let cases = convert_inputs::cases();
    let mut failures = Vec::new();
    for a in convert_inputs::lora::adapters() {
        let root = inputs.as_ref().map_or(work.clone(), PathBuf::from);
        let case = cases.iter().find(|c| c.name == a.base).unwrap();
        if !convert_inputs::available(case) {
            continue;
        }
        let base = root.join(a.base);
        convert_inputs::write_case(case, &base, &smollm, &gemma);
        let dir = root.join(a.name);
        convert_inputs::lora::write_adapter(&a, case, &base, &dir);
        if inputs.is_some() {
            continue;
        }
        let outtypes = golden[a.name]
            .as_object()
            .unwrap_or_else(|| panic!("no golden entry for {}", a.name));
        for (ot, want) in outtypes {
            let out = work.join(format!("{}-{ot}.gguf", a.name));
            let opts = ConvertOptions::new(OutType::parse(ot).unwrap());
            let r = kestrel::convert::convert_lora(&dir, &base, &out, &opts)
                .unwrap_or_else(|e| panic!("{} {ot}: {e}", a.name));
            // InternLM2's fused `wqkv` is written as Q, K and V pairs; an embedding adapter
            // is one pair for the model; mergekit's norm vectors are one tensor each.
            let per_layer: usize = a
                .targets
                .iter()
                .map(|t| match *t {
                    // Stacked experts: one pair per projection; Qwen 2 MoE's shared expert
                    // is three plain pairs.
                    "attention.wqkv" | "experts" | "shared_expert" => 3,
                    // OpenELM's gate and up.
                    "ffn.proj_1" => 2,
                    "embed_tokens" | "input_layernorm" | "norm" => 0,
                    _ => 1,
                })
                .sum();
            let embed = usize::from(a.targets.contains(&"embed_tokens"));
            let norms = if a.targets.contains(&"input_layernorm") {
                case.layers
            } else {
                0
            } + usize::from(a.targets.contains(&"norm"));
            assert_eq!(
                r.tensors,
                2 * (case.layers * per_layer + embed) + norms,
                "{}",
                a.name
            );
            compare(&format!("{} {ot}", a.name), &out, want, &mut failures);
            std::fs::remove_file(&out).ok();
        }
    }
    if inputs.is_none() {
        // Refused: `auto` (llama.cpp's converter stops on it), a base kestrel does not convert
        // adapters for, a tensor that is neither A nor B, a PyTorch-only adapter.
        let a = &convert_inputs::lora::adapters()[0];
        let (base, dir) = (work.join(a.base), work.join(a.name));
        let out = work.join("refused.gguf");
        let convert = |outtype| {
            kestrel::convert::convert_lora(&dir, &base, &out, &ConvertOptions::new(outtype))
                .unwrap_err()
                .to_string()
        };
        assert!(convert(OutType::Auto).contains("auto"));
        let cfg = std::fs::read_to_string(base.join("config.json")).unwrap();
        std::fs::write(
            base.join("config.json"),
            cfg.replace("LlamaForCausalLM", "GPT2LMHeadModel"),
        )
        .unwrap();
        assert!(convert(OutType::F32).contains("not converted yet"));
        std::fs::write(base.join("config.json"), &cfg).unwrap();
        let st = dir.join("adapter_model.safetensors");
        let mut bytes = std::fs::read(&st).unwrap();
        let at = bytes
            .windows(13)
            .position(|w| w == b"lora_B.weight")
            .unwrap();
        bytes[at + 5] = b'C';
        std::fs::write(&st, &bytes).unwrap();
        assert!(
            convert(OutType::F32).contains("not a lora_A or lora_B"),
            "{}",
            convert(OutType::F32)
        );
        // An invocation sequence that is not token ids.
        let lcfg_path = dir.join("adapter_config.json");
        let lcfg = std::fs::read_to_string(&lcfg_path).unwrap();
        std::fs::write(
            &lcfg_path,
            lcfg.replacen('{', "{\"alora_invocation_tokens\": [5, -1],", 1),
        )
        .unwrap();
        let err = convert(OutType::F32);
        assert!(err.contains("holds -1, not a token id"), "{err}");
        std::fs::write(&lcfg_path, &lcfg).unwrap();
        std::fs::rename(&st, dir.join("adapter_model.bin")).unwrap();
        assert!(convert(OutType::F32).contains("adapter_model.bin"));
        // Experts' gate and up alone: llama.cpp's script never stacks them, so neither does
        // kestrel.
        let case = cases.iter().find(|c| c.name == "qwen3moe").unwrap();
        if convert_inputs::available(case) {
            let partial = convert_inputs::lora::Adapter {
                name: "lora-experts-partial",
                base: "qwen3moe",
                rank: 2,
                alpha: 4.0,
                targets: &["experts-partial"],
                dt: convert_inputs::Dt::F32,
                head: false,
                invocation: (&[], ""),
            };
            let (base, dir) = (work.join("qwen3moe"), work.join(partial.name));
            convert_inputs::lora::write_adapter(&partial, case, &base, &dir);
            let err = kestrel::convert::convert_lora(
                &dir,
                &base,
                &out,
                &ConvertOptions::new(OutType::F32),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("every expert projection"), "{err}");
        }
    }
    std::fs::remove_dir_all(&work).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Conversions with options, as `fixtures/convert/make_golden.py`'s OPTIONS: name, case,
/// output type, options.
fn with_options() -> Vec<(&'static str, &'static str, &'static str, ConvertOptions)> {
    let o = |ot: &str| ConvertOptions::new(OutType::parse(ot).unwrap());
    vec![
        (
            "split-size",
            "llama-bpe",
            "f16",
            o("f16").with_split(Split::new(0, 20_000)),
        ),
        (
            "split-tensors",
            "llama-bpe",
            "q8_0",
            o("q8_0").with_split(Split::new(7, 0).metadata_only_first(true)),
        ),
        (
            "split-none",
            "qwen3",
            "f16",
            o("f16").with_split(Split::new(1000, 0)),
        ),
        (
            "vocab-only",
            "llama-bpe",
            "f16",
            o("f16").with_vocab_only(true),
        ),
        (
            "overrides",
            "qwen3",
            "q8_0",
            o("q8_0")
                .with_metadata(Some(fixtures().join("metadata_override.json")))
                .with_model_name(Some("CLI Name".into())),
        ),
        (
            "fp8-as-q8",
            "deepseek-v3-fp8",
            "bf16",
            o("bf16").with_fp8_as_q8(true),
        ),
        (
            "fuse-qkv-llama",
            "llama-bpe",
            "f16",
            o("f16").with_fuse_qkv(true),
        ),
        (
            "fuse-qkv-qwen2",
            "qwen2",
            "q8_0",
            o("q8_0").with_fuse_qkv(true),
        ),
        (
            "fuse-qkv-qwen3",
            "qwen3",
            "bf16",
            o("bf16").with_fuse_qkv(true),
        ),
    ]
}

#[test]
fn conversions_with_options_are_the_files_llama_cpp_writes() {
    let Some((smollm, gemma)) = tokenizer_sources() else {
        return;
    };
    if std::env::var("KESTREL_CONVERT_INPUTS").is_ok() {
        return; // the cases are written by the test above
    }
    let golden: Json =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("golden.json")).unwrap())
            .unwrap();
    let work = temp("options");
    let cases = convert_inputs::cases();
    let mut failures = Vec::new();
    for (name, case, ot, opts) in with_options() {
        let case = cases.iter().find(|c| c.name == case).unwrap();
        let dir = work.join(case.name);
        if !dir.exists() {
            convert_inputs::write_case(case, &dir, &smollm, &gemma);
        }
        let out = work.join(format!("{name}.gguf"));
        let r = convert_hf(&dir, &out, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = golden[name][ot]
            .as_array()
            .unwrap_or_else(|| panic!("no golden entry for {name}"));
        assert_eq!(r.files.len(), want.len(), "{name}: {:?}", r.files);
        let n = want.len();
        for (i, (file, want)) in r.files.iter().zip(want).enumerate() {
            if n > 1 {
                let expect = format!("{name}-{:05}-of-{n:05}.gguf", i + 1);
                assert_eq!(file.file_name().unwrap().to_str(), Some(expect.as_str()));
            }
            compare(&format!("{name} file {i}"), file, want, &mut failures);
            // The same bytes in between too: key order, padding.
            let size = file.metadata().unwrap().len();
            if want["size"].as_u64() != Some(size) {
                failures.push(format!(
                    "{name} file {i}: {size} bytes, llama.cpp {}",
                    want["size"]
                ));
            }
        }
        let on_disk: u64 = r.files.iter().map(|f| f.metadata().unwrap().len()).sum();
        assert_eq!(r.bytes, on_disk, "{name}");
        // The loader reads the files back as one model, from any of them.
        let m = kestrel_gguf::GgufModel::open(r.files.last().unwrap()).unwrap();
        assert_eq!(m.tensors().count(), r.tensors, "{name}");
    }
    // Refused: a split vocabulary, an override of the wrong type.
    let (dir, out) = (work.join("llama-bpe"), work.join("refused.gguf"));
    let f16 = || ConvertOptions::new(OutType::F16);
    let e = convert_hf(
        &dir,
        &out,
        &f16().with_vocab_only(true).with_split(Split::new(1, 0)),
    );
    assert!(e.unwrap_err().to_string().contains("not split"));
    let bad = work.join("bad.json");
    std::fs::write(&bad, r#"{"general.tags": "one"}"#).unwrap();
    let e = convert_hf(&dir, &out, &f16().with_metadata(Some(bad)));
    assert!(e.unwrap_err().to_string().contains("general.tags"));
    assert!(!out.exists());
    std::fs::remove_dir_all(&work).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A multilingual text with digits, emoji, code and the tokenizers' special tokens.
const TEXT: &str = "Hello world! Ça va? 你好，世界。 Привет, мир! 1234567 🦙✨ \
    <|im_start|>user\nfn main() { println!(\"hi\"); }<|im_end|>\n\t  spaced   out  ";

/// tiktoken's ids for [`TEXT`] with Qwen 1's vocabulary (`Encoding.encode(TEXT,
/// allowed_special="all")`, as its tokenizer code calls it), which has no `tokenizer.json`.
const QWEN_TIKTOKEN_IDS: &[u32] = &[
    9707, 1879, 0, 131098, 11164, 30, 220, 108386, 3837, 99489, 1773, 79484, 26991, 8178, 11,
    137144, 0, 220, 16, 17, 18, 19, 20, 21, 22, 11162, 99, 247, 144232, 220, 151644, 872, 198,
    8822, 1887, 368, 314, 13751, 17223, 6023, 5038, 335, 151645, 198, 3677, 63828, 256, 700, 256,
];

#[test]
fn converted_tokenizers_give_the_source_tokenizers_ids() {
    let Some((smollm, gemma)) = tokenizer_sources() else {
        return;
    };
    let work = temp("tok");
    let cases = convert_inputs::cases();
    for case in cases
        .iter()
        .filter(|c| matches!(c.name, "qwen3" | "gemma3" | "qwen"))
        .filter(|c| convert_inputs::available(c))
    {
        let dir = work.join(case.name);
        convert_inputs::write_case(case, &dir, &smollm, &gemma);
        let out = work.join(format!("{}.gguf", case.name));
        convert_hf(&dir, &out, &ConvertOptions::new(OutType::F16)).unwrap();
        let conv = GgufFile::open(&out).unwrap();
        let tok = kestrel_tokenizer::Tokenizer::from_metadata(
            &conv.metadata(),
            kestrel_tokenizer::TokenizerOptions::default(),
        )
        .unwrap();
        let mut enc = kestrel_tokenizer::EncodeOptions::default();
        enc.add_special = false;
        enc.parse_special = true;
        let got = tok.encode(TEXT, enc).unwrap();
        let want: Vec<u32> = if case.name == "qwen" {
            QWEN_TIKTOKEN_IDS.to_vec()
        } else if case.spm {
            let src = GgufFile::open(&gemma).unwrap();
            let t = kestrel_tokenizer::Tokenizer::from_metadata(
                &src.metadata(),
                kestrel_tokenizer::TokenizerOptions::default(),
            )
            .unwrap();
            t.encode(TEXT, enc).unwrap()
        } else {
            let hf = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
            hf.encode(TEXT, false).unwrap().get_ids().to_vec()
        };
        assert_eq!(got, want, "{}", case.name);
        assert!(got.len() > 20);
    }
    std::fs::remove_dir_all(&work).ok();
}

// What conversion refuses: unknown architectures, broken checkpoints, mismatched experts.
#[path = "convert_decoders/refusals.rs"]
mod refusals;
