//! A LoRA adapter made by Hugging Face `peft` (0.21.2: rank 8, alpha 16, random `A` and `B` on
//! every attention and feed-forward projection of the `llama-bpe` test checkpoint) and converted
//! by llama.cpp's `convert_lora_to_gguf.py` (`fixtures/peft/adapter.gguf`), applied by kestrel to
//! that checkpoint converted to F32 by `kestrel convert`. The last position's logits must be
//! transformers + peft's own forward (`fixtures/peft/hf_logits.f16`, from `fixtures/peft/make.py`)
//! within NMSE 1e-6 (measured 1.4e-7 against the f16-rounded reference, 9.9e-8 against its
//! f64 original), while the adapter moves them by far more (NMSE 0.12 from the base's).
//!
//! An activated LoRA (aLoRA) made the same way with `alora_invocation_tokens`
//! (`fixtures/peft/alora.gguf`, `make_alora.py`) must give peft's logits for ids that hold the
//! invocation twice: the adapter acts from the start of the last occurrence on. Starting it one
//! position earlier (as llama-server does) moves peft's own logits by NMSE 5.9e-4, from the first
//! occurrence by 3.9e-3, not at all (the base model) by 7.7e-2.

#[allow(dead_code)] // the writers this test does not need
mod convert_inputs;

use std::path::{Path, PathBuf};

use kestrel::convert::{convert_hf, ConvertOptions, OutType};
use kestrel::generate::{logits_of_ids, LogitsOptions};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;

/// The ids `make.py` ran.
const IDS: [u32; 16] = [
    2, 651, 6037, 576, 1833, 603, 9, 44, 107, 1234, 5000, 77, 12, 300, 2048, 9999,
];

fn nmse(want: &[f32], got: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&w, &g) in want.iter().zip(got) {
        num += (f64::from(w) - f64::from(g)).powi(2);
        den += f64::from(w).powi(2);
    }
    num / den
}

/// The ids `make_alora.py` ran: its invocation `[5000, 77]` at 3 and at 12.
const ALORA_IDS: [u32; 18] = [
    2, 651, 6037, 5000, 77, 576, 1833, 603, 9, 44, 107, 1234, 5000, 77, 12, 300, 2048, 9999,
];

fn last_logits(model: &Path, ids: &[u32], lora: Vec<(PathBuf, f32)>) -> Vec<f32> {
    let model = GgufModel::open(model).expect("open the converted checkpoint");
    let opts = LogitsOptions {
        threads: 2,
        lora,
        ..Default::default()
    };
    let mut all = logits_of_ids(&model, ids, &opts).expect("logits");
    all.pop().expect("a last position")
}

/// The `llama-bpe` checkpoint converted to F32 under `work` (`None` without the test models).
fn base_f32(work: &Path) -> Option<PathBuf> {
    let (Some(smollm), Some(gemma)) = (
        test_model(SMOLLM2_135M_Q4_1),
        test_model(GEMMA3_270M_Q4_K_M),
    ) else {
        return None;
    };
    let case = convert_inputs::cases()
        .into_iter()
        .find(|c| c.name == "llama-bpe")
        .expect("the llama-bpe case");
    let dir = work.join(case.name);
    convert_inputs::write_case(&case, &dir, &smollm, &gemma);
    let base = work.join("base-f32.gguf");
    convert_hf(&dir, &base, &ConvertOptions::new(OutType::F32)).expect("convert to F32");
    Some(base)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/peft")
        .join(name)
}

fn f16_file(name: &str) -> Vec<f32> {
    std::fs::read(fixture(name))
        .expect("the reference logits")
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect()
}

/// Checks kestrel's logits with `adapter` on `ids` against peft's in `reference`.
fn check(tag: &str, ids: &[u32], adapter: &str, reference: &str) {
    let work = std::env::temp_dir().join(format!("kestrel-peft-{tag}-{}", std::process::id()));
    let Some(base) = base_f32(&work) else {
        return;
    };
    let want = f16_file(reference);
    let got = last_logits(&base, ids, vec![(fixture(adapter), 1.0)]);
    let plain = last_logits(&base, ids, Vec::new());
    let _ = std::fs::remove_dir_all(&work);
    assert_eq!(got.len(), want.len());
    let d = nmse(&want, &got);
    let effect = nmse(&plain, &got);
    eprintln!("{tag}: NMSE {d:.2e} against transformers + peft; the adapter's effect {effect:.3}");
    assert!(d <= 1e-6, "{tag}: NMSE {d} against transformers + peft");
    assert!(
        effect > 1e-2,
        "{tag}: the adapter changed the logits by NMSE {effect} only"
    );
}

#[test]
fn a_peft_adapter_gives_transformers_peft_logits() {
    check("lora", &IDS, "adapter.gguf", "hf_logits.f16");
}

#[test]
fn an_activated_peft_adapter_gives_transformers_peft_logits() {
    check("alora", &ALORA_IDS, "alora.gguf", "alora_logits.f16");
}
