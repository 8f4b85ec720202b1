//! Helpers of the LoRA tests: a synthetic base model and random adapters written by kestrel's
//! GGUF writer, and a generator over them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kestrel_arch::synthetic::synthetic_model;
use kestrel_arch::LoraAdapter;
use kestrel_generate::{GenerateParams, Generator, GeneratorOptions};
use kestrel_gguf::{GgmlType, GgufModel, GgufWriter};

/// A fresh folder under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kestrel-lora-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn base(dir: &Path, arch: &str) -> PathBuf {
    let p = dir.join(format!("{arch}.gguf"));
    synthetic_model(arch, 5).unwrap().write_file(&p).unwrap();
    p
}

/// An adapter of rank `rank` for `targets` (`(weight, in, out)`; the token embedding's `in` is
/// its width and `out` the vocabulary), values uniform in `±amplitude` from `seed`, `lora_b` in
/// `b_type`.
#[allow(clippy::too_many_arguments)]
pub fn adapter(
    path: &Path,
    arch: &str,
    alpha: Option<f32>,
    rank: usize,
    targets: &[(&str, usize, usize)],
    seed: u64,
    b_type: GgmlType,
    amplitude: f32,
) {
    activated(
        path,
        arch,
        alpha,
        rank,
        targets,
        seed,
        b_type,
        amplitude,
        &[],
    );
}

/// [`adapter`] with an activated LoRA's invocation sequence (`adapter.alora.invocation_tokens`;
/// none written when empty).
#[allow(clippy::too_many_arguments)]
pub fn activated(
    path: &Path,
    arch: &str,
    alpha: Option<f32>,
    rank: usize,
    targets: &[(&str, usize, usize)],
    seed: u64,
    b_type: GgmlType,
    amplitude: f32,
    invocation: &[u32],
) {
    let pairs: Vec<Pair> = targets
        .iter()
        .map(|&(name, k, m)| {
            let (k, m, r) = (k as u64, m as u64, rank as u64);
            let (a_dims, b_dims) = if name == "token_embd.weight" {
                (vec![r, m], vec![r, k])
            } else {
                (vec![k, r], vec![r, m])
            };
            (name.to_string(), a_dims, b_dims)
        })
        .collect();
    write_pairs(
        path, arch, alpha, &pairs, seed, b_type, amplitude, invocation,
    );
}

/// One adapted weight: its name and the ggml dims of `lora_a` and `lora_b`.
pub type Pair = (String, Vec<u64>, Vec<u64>);

/// Writes an adapter of `pairs`, values uniform in `±amplitude` from `seed` (each pair's `A`,
/// then its `B`, in order), `lora_b` in `b_type` (F16 or F32), activated by `invocation` when
/// it is not empty.
#[allow(clippy::too_many_arguments)]
pub fn write_pairs(
    path: &Path,
    arch: &str,
    alpha: Option<f32>,
    pairs: &[Pair],
    seed: u64,
    b_type: GgmlType,
    amplitude: f32,
    invocation: &[u32],
) {
    let mut s = seed;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amplitude
    };
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", arch);
    w.add_metadata("general.type", "adapter");
    w.add_metadata("adapter.type", "lora");
    if let Some(a) = alpha {
        w.add_metadata("adapter.lora.alpha", a);
    }
    if !invocation.is_empty() {
        w.add_metadata(
            "adapter.alora.invocation_tokens",
            kestrel_gguf::MetadataValue::u32_array(invocation.iter().copied()),
        );
    }
    for (name, a_dims, b_dims) in pairs {
        let n = |d: &[u64]| d.iter().product::<u64>();
        let a: Vec<f32> = (0..n(a_dims)).map(|_| next()).collect();
        let b: Vec<f32> = (0..n(b_dims)).map(|_| next()).collect();
        w.add_f32_tensor(&format!("{name}.lora_a"), a_dims, &a)
            .unwrap();
        let b_name = format!("{name}.lora_b");
        if b_type == GgmlType::F16 {
            let bytes: Vec<u8> = b
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_bits().to_le_bytes())
                .collect();
            w.add_tensor(&b_name, GgmlType::F16, b_dims, bytes).unwrap();
        } else {
            w.add_f32_tensor(&b_name, b_dims, &b).unwrap();
        }
    }
    w.write_file(path).unwrap();
}

/// The model with `adapters`, or the error (as text) that refused them.
pub fn generator(model: &Path, adapters: &[(PathBuf, f32)]) -> Result<Generator, String> {
    let model = Arc::new(GgufModel::open(model).unwrap());
    let adapters = adapters
        .iter()
        .map(|(p, s)| {
            Ok((
                Arc::new(LoraAdapter::open(p).map_err(|e| e.to_string())?),
                *s,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let opts = GeneratorOptions {
        threads: 2,
        ctx: 64,
        batch: 8,
        adapters,
        ..GeneratorOptions::default()
    };
    Generator::new(model, opts).map_err(|e| e.to_string())
}

/// The `n` greedy tokens `g` generates after `prompt` with the request's choice of `adapters`
/// (`None`: the generator's).
pub fn greedy(
    g: &mut Generator,
    prompt: &[u32],
    adapters: Option<Vec<(usize, f32)>>,
    n: usize,
) -> Vec<u32> {
    let params = GenerateParams {
        adapters,
        ..GenerateParams::greedy(n)
    };
    g.iter(prompt, &params)
        .unwrap()
        .map(|t| t.unwrap().id)
        .collect()
}

/// Decodes standard base64.
pub fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | (u32::from(val(c)) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}
