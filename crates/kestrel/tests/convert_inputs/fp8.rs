//! FP8 checkpoints as DeepSeek V3 and other "fp8" `quantization_config`s ship them: each linear
//! layer's weight in `float8_e4m3fn`, with an F32 `{name}_scale_inv` holding one scale per
//! `weight_block_size` block (the value is `weight * scale`, the last blocks cut short).

use std::collections::HashSet;

use kestrel::convert::safetensors::f8e4m3_to_f32 as decode;

use super::Named;

/// The nearest e4m3fn byte to `v` (ties to the even code), saturating at ±448.
fn encode(v: f32) -> u8 {
    let sign = if v < 0.0 { 0x80 } else { 0 };
    let a = v.abs().min(448.0);
    let mut best = 0u8;
    for c in 0..=0x7eu8 {
        let (d, db) = ((decode(c) - a).abs(), (decode(best) - a).abs());
        if d < db || (d == db && c % 2 == 0 && best % 2 == 1) {
            best = c;
        }
    }
    best | sign
}

/// Whether `name` is a linear layer's weight (DeepSeek V3 keeps embeddings, the output head,
/// norms and the router in bf16).
fn is_linear(name: &str) -> bool {
    name.ends_with("_proj.weight") && !name.contains("embed")
}

/// Quantizes the linear weights of `t` in `block` = (rows, cols) blocks: their values become
/// the e4m3 bytes (written as `F8_E4M3`), and a `_scale_inv` tensor follows each. Returns the
/// names of the FP8 tensors.
pub fn quantize(t: &mut Vec<Named>, block: (usize, usize)) -> HashSet<String> {
    let mut fp8 = HashSet::new();
    let mut scales = Vec::new();
    for (name, shape, vals) in t.iter_mut() {
        let &[rows, cols] = shape.as_slice() else {
            continue;
        };
        if !is_linear(name) {
            continue;
        }
        let (br, bc) = block;
        let (sr, sc) = (rows.div_ceil(br), cols.div_ceil(bc));
        let mut s = vec![0f32; sr * sc];
        for r in 0..rows {
            for c in 0..cols {
                let k = (r / br) * sc + c / bc;
                s[k] = s[k].max(vals[r * cols + c].abs());
            }
        }
        for x in &mut s {
            *x = if *x > 0.0 { *x / 448.0 } else { 1.0 };
        }
        for r in 0..rows {
            for c in 0..cols {
                let v = &mut vals[r * cols + c];
                *v = f32::from(encode(*v / s[(r / br) * sc + c / bc]));
            }
        }
        fp8.insert(name.clone());
        scales.push((format!("{name}_scale_inv"), vec![sr, sc], s));
    }
    t.extend(scales);
    fp8
}

#[test]
fn e4m3_codes_round_trip() {
    for c in 0..=0x7eu8 {
        assert_eq!(encode(decode(c)), c);
        assert_eq!(encode(-decode(c)), if c == 0 { 0 } else { c | 0x80 });
    }
}
