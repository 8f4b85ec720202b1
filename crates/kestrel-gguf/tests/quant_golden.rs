//! Golden tests of the scalar quant code against fixtures made by the `gguf` Python package and,
//! for the K-quant quantizers, by ggml's C library (see `tests/fixtures/quant/README.md`):
//! dequantization must match bit for bit, at any alignment, and quantization byte for byte.

use std::path::PathBuf;

use kestrel_gguf::quant::{can_dequantize, dequantize, quantize};
use kestrel_gguf::GgmlType;

/// Types with dequantization fixtures, and their file stems.
const DEQUANT: [(GgmlType, &str); 26] = [
    (GgmlType::F32, "f32"),
    (GgmlType::F16, "f16"),
    (GgmlType::BF16, "bf16"),
    (GgmlType::Q4_0, "q4_0"),
    (GgmlType::Q4_1, "q4_1"),
    (GgmlType::Q5_0, "q5_0"),
    (GgmlType::Q5_1, "q5_1"),
    (GgmlType::Q8_0, "q8_0"),
    (GgmlType::Q2K, "q2_k"),
    (GgmlType::Q3K, "q3_k"),
    (GgmlType::Q4K, "q4_k"),
    (GgmlType::Q5K, "q5_k"),
    (GgmlType::Q6K, "q6_k"),
    (GgmlType::Q8K, "q8_k"),
    (GgmlType::IQ4NL, "iq4_nl"),
    (GgmlType::IQ4XS, "iq4_xs"),
    (GgmlType::MXFP4, "mxfp4"),
    (GgmlType::TQ1_0, "tq1_0"),
    (GgmlType::TQ2_0, "tq2_0"),
    (GgmlType::IQ2XXS, "iq2_xxs"),
    (GgmlType::IQ2XS, "iq2_xs"),
    (GgmlType::IQ2S, "iq2_s"),
    (GgmlType::IQ3XXS, "iq3_xxs"),
    (GgmlType::IQ3S, "iq3_s"),
    (GgmlType::IQ1S, "iq1_s"),
    (GgmlType::IQ1M, "iq1_m"),
];

/// Types with quantization fixtures, and their file stems: the first seven, MXFP4 and the ternary
/// types from gguf-py,
/// the K-quants from ggml's own `quantize_row_*_ref` (gguf-py has no K-quant quantizer).
const QUANT: [(GgmlType, &str); 16] = [
    (GgmlType::Q4_0, "q4_0"),
    (GgmlType::Q4_1, "q4_1"),
    (GgmlType::Q5_0, "q5_0"),
    (GgmlType::Q5_1, "q5_1"),
    (GgmlType::Q8_0, "q8_0"),
    (GgmlType::F16, "f16"),
    (GgmlType::BF16, "bf16"),
    (GgmlType::Q2K, "q2_k"),
    (GgmlType::Q3K, "q3_k"),
    (GgmlType::Q4K, "q4_k"),
    (GgmlType::Q5K, "q5_k"),
    (GgmlType::Q6K, "q6_k"),
    (GgmlType::Q8K, "q8_k"),
    (GgmlType::MXFP4, "mxfp4"),
    (GgmlType::TQ1_0, "tq1_0"),
    (GgmlType::TQ2_0, "tq2_0"),
];

fn fixture(name: &str) -> Vec<u8> {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "fixtures",
        "quant",
        name,
    ]
    .iter()
    .collect();
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading fixture {}: {e}", path.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Asserts two f32 slices are identical bit for bit, naming the first difference.
fn assert_bits_eq(ty: GgmlType, what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{ty} {what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{ty} {what}: value {i} (block {}) is {:e} ({:#010x}), reference {:e} ({:#010x})",
            i / ty.block_size(),
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

#[test]
fn every_dequantizable_type_has_a_fixture() {
    for ty in GgmlType::all().filter(|&t| can_dequantize(t)) {
        assert!(
            DEQUANT.iter().any(|&(t, _)| t == ty),
            "{ty} has no golden fixture"
        );
    }
}

#[test]
fn dequantize_matches_reference_bit_for_bit() {
    for (ty, stem) in DEQUANT {
        let data = fixture(&format!("{stem}.dq.bin"));
        let want = f32s(&fixture(&format!("{stem}.dq.f32")));
        assert_eq!(
            data.len() / ty.type_size() * ty.block_size(),
            want.len(),
            "{ty}: fixture sizes disagree"
        );
        assert!(
            want.iter().all(|v| v.is_finite()),
            "{ty}: fixture not finite"
        );

        let mut got = vec![f32::NAN; want.len()];
        dequantize(ty, &data, &mut got).unwrap();
        assert_bits_eq(ty, "dequantize", &got, &want);

        // The same bytes at every misalignment.
        for shift in 1..4 {
            let mut shifted = vec![0u8; data.len() + shift];
            shifted[shift..].copy_from_slice(&data);
            let mut got = vec![f32::NAN; want.len()];
            dequantize(ty, &shifted[shift..], &mut got).unwrap();
            assert_bits_eq(ty, &format!("dequantize at offset {shift}"), &got, &want);
        }
    }
}

#[test]
fn quantize_matches_reference_bit_for_bit() {
    for (ty, stem) in QUANT {
        let x = f32s(&fixture(&format!("{stem}.q.f32")));
        let want = fixture(&format!("{stem}.q.bin"));
        assert_eq!(
            x.len() / ty.block_size() * ty.type_size(),
            want.len(),
            "{ty}: fixture sizes disagree"
        );
        let mut got = vec![0u8; want.len()];
        quantize(ty, &x, &mut got).unwrap();
        // And into a misaligned buffer.
        let mut shifted = vec![0u8; want.len() + 1];
        quantize(ty, &x, &mut shifted[1..]).unwrap();
        assert_eq!(got, shifted[1..], "{ty}: misaligned output differs");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            let b = i / ty.type_size();
            let r = b * ty.type_size()..(b + 1) * ty.type_size();
            panic!(
                "{ty}: byte {i} (block {b}) differs\n  got  {:02x?}\n  want {:02x?}",
                &got[r.clone()],
                &want[r]
            );
        }
    }
}

#[test]
fn quantized_fixtures_round_trip_close_to_input() {
    // A sanity check of the fixtures themselves: dequantizing the reference blocks gives values
    // near the input (per-block error bounded by the block's range).
    for (ty, stem) in QUANT.iter().filter(|(t, _)| t.is_quantized()) {
        let x = f32s(&fixture(&format!("{stem}.q.f32")));
        let q = fixture(&format!("{stem}.q.bin"));
        let mut y = vec![0f32; x.len()];
        dequantize(*ty, &q, &mut y).unwrap();
        for (xb, yb) in x
            .chunks_exact(ty.block_size())
            .zip(y.chunks_exact(ty.block_size()))
        {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let tol = match ty {
                GgmlType::Q2K | GgmlType::Q3K => amax / 2.0,
                // MXFP4's largest code is 1.5 * 2^floor(log2(amax)): up to a quarter clipped.
                GgmlType::MXFP4 => amax / 4.0,
                // Ternary: every value becomes -amax, 0 or amax (f16-rounded).
                GgmlType::TQ1_0 | GgmlType::TQ2_0 => amax / 2.0 + amax * 1e-3,
                _ => amax / 6.0,
            };
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= tol + 1e-3, "{ty}: {a} -> {b}");
            }
        }
    }
}

/// Dequantization against ggml itself on many blocks: `KESTREL_QUANT_BULK=DIR` names a folder
/// of `<stem>.dq.bin` / `<stem>.dq.f32` pairs that `tests/fixtures/quant/make_bulk.py` wrote
/// with ggml's own `dequantize_row_*` (through ctypes, from a llama.cpp build; 10,000 random
/// blocks per type). Every type with a pair there must match bit for bit.
#[test]
#[ignore = "needs KESTREL_QUANT_BULK: blocks dequantized by ggml (make_bulk.py)"]
fn dequantize_matches_ggml_on_bulk_blocks() {
    let dir = PathBuf::from(std::env::var_os("KESTREL_QUANT_BULK").expect("KESTREL_QUANT_BULK"));
    let mut checked = 0;
    for (ty, stem) in DEQUANT {
        let (Ok(data), Ok(want)) = (
            std::fs::read(dir.join(format!("{stem}.dq.bin"))),
            std::fs::read(dir.join(format!("{stem}.dq.f32"))),
        ) else {
            continue;
        };
        let want = f32s(&want);
        let mut got = vec![f32::NAN; want.len()];
        dequantize(ty, &data, &mut got).unwrap();
        assert_bits_eq(ty, "bulk dequantize", &got, &want);
        eprintln!("{ty}: {} blocks match ggml", data.len() / ty.type_size());
        checked += 1;
    }
    assert!(checked > 0, "no bulk pair in {}", dir.display());
}
