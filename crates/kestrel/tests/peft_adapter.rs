//! A LoRA adapter made by Hugging Face `peft` (0.21.2: rank 8, alpha 16, random `A` and `B` on
//! every attention and feed-forward projection of the `llama-bpe` test checkpoint) and converted
//! by llama.cpp's `convert_lora_to_gguf.py` (`fixtures/peft/adapter.gguf`), applied by kestrel to
//! that checkpoint converted to F32 by `kestrel convert`. The last position's logits must be
//! transformers + peft's own forward (`fixtures/peft/hf_logits.f16`, from `fixtures/peft/make.py`)
//! within NMSE 1e-6 (measured 1.4e-7 against the f16-rounded reference, 9.9e-8 against its
//! f64 original), while the adapter moves them by far more (NMSE 0.12 from the base's).

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

fn last_logits(model: &Path, lora: Vec<(PathBuf, f32)>) -> Vec<f32> {
    let model = GgufModel::open(model).expect("open the converted checkpoint");
    let opts = LogitsOptions {
        threads: 2,
        lora,
        ..Default::default()
    };
    let mut all = logits_of_ids(&model, &IDS, &opts).expect("logits");
    all.pop().expect("a last position")
}

#[test]
fn a_peft_adapter_gives_transformers_peft_logits() {
    let (Some(smollm), Some(gemma)) = (
        test_model(SMOLLM2_135M_Q4_1),
        test_model(GEMMA3_270M_Q4_K_M),
    ) else {
        return;
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/peft");
    let work = std::env::temp_dir().join(format!("kestrel-peft-{}", std::process::id()));
    let case = convert_inputs::cases()
        .into_iter()
        .find(|c| c.name == "llama-bpe")
        .expect("the llama-bpe case");
    let dir = work.join(case.name);
    convert_inputs::write_case(&case, &dir, &smollm, &gemma);
    let base = work.join("base-f32.gguf");
    convert_hf(&dir, &base, &ConvertOptions::new(OutType::F32)).expect("convert to F32");

    let want: Vec<f32> = std::fs::read(fixtures.join("hf_logits.f16"))
        .expect("the reference logits")
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect();
    let got = last_logits(&base, vec![(fixtures.join("adapter.gguf"), 1.0)]);
    let plain = last_logits(&base, Vec::new());
    let _ = std::fs::remove_dir_all(&work);
    assert_eq!(got.len(), want.len());
    let d = nmse(&want, &got);
    let effect = nmse(&plain, &got);
    eprintln!("NMSE {d:.2e} against transformers + peft; the adapter's effect {effect:.3}");
    assert!(d <= 1e-6, "NMSE {d} against transformers + peft");
    assert!(
        effect > 1e-2,
        "the adapter changed the logits by NMSE {effect} only"
    );
}
