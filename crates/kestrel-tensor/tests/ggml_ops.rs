//! kestrel's CPU ops against ggml's on the same inputs: `tests/fixtures/ggml_ops.bin`, written
//! by `tests/fixtures/gen_ggml_ops.py` through ctypes calls into an installed libggml-cpu (x86,
//! AVX512 build). Every case is bit-identical today: RMS norm, SwiGLU and GeGLU (ggml's
//! vectorized SiLU polynomial and f16 GELU table), RoPE (with ggml's FMA contraction) and flash
//! attention over an f16 cache (f16 query and accumulator).

use half::f16;
use kestrel_tensor::cpu::{self, AttentionParams, KvSlice, RopeMode, RopeParams};

struct Case {
    name: String,
    arrays: Vec<Vec<u8>>,
}

fn cases() -> Vec<Case> {
    let path = std::env::var("KESTREL_GGML_OPS").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ggml_ops.bin").to_string()
    });
    let bytes = std::fs::read(path).unwrap();
    let mut at = 0;
    let mut take = |n: usize| {
        let s = bytes[at..at + n].to_vec();
        at += n;
        s
    };
    let u32_of = |s: Vec<u8>| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize;
    assert_eq!(take(4), b"KGO1");
    let n = u32_of(take(4));
    (0..n)
        .map(|_| {
            let nl = u32_of(take(4));
            let name = String::from_utf8(take(nl)).unwrap();
            let na = u32_of(take(4));
            let arrays = (0..na)
                .map(|_| {
                    let l = u32_of(take(4));
                    take(l)
                })
                .collect();
            Case { name, arrays }
        })
        .collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn f16s(b: &[u8]) -> Vec<f16> {
    b.chunks_exact(2)
        .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
        .collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// (max |a - b|, max |b|, count of differing bits).
fn diff(a: &[f32], b: &[f32]) -> (f32, f32, usize) {
    assert_eq!(a.len(), b.len());
    let mut m = 0f32;
    let mut mb = 0f32;
    let mut n = 0;
    for (x, y) in a.iter().zip(b) {
        m = m.max((x - y).abs());
        mb = mb.max(y.abs());
        n += (x.to_bits() != y.to_bits()) as usize;
    }
    (m, mb, n)
}

#[test]
fn ops_against_ggml_bit_for_bit() {
    let mut checked = 0;
    for c in cases() {
        let a = &c.arrays;
        let mut results: Vec<(&str, Vec<f32>, Vec<f32>)> = Vec::new();
        match c.name.as_str() {
            "rms_norm" => {
                let x = f32s(&a[0]);
                let mut o = vec![0f32; x.len()];
                cpu::rms_norm(&x, 576, None, 1e-5, &mut o).unwrap();
                results.push(("rms_norm", o, f32s(&a[1])));
            }
            "glu" => {
                let (g, u) = (f32s(&a[0]), f32s(&a[1]));
                let mut o = vec![0f32; g.len()];
                cpu::swiglu(&g, &u, &mut o).unwrap();
                results.push(("swiglu", o.clone(), f32s(&a[2])));
                cpu::geglu(&g, &u, &mut o).unwrap();
                results.push(("geglu", o, f32s(&a[3])));
            }
            "gelu_table" => {
                let x = f32s(&a[0]);
                let want: Vec<f32> = f16s(&a[1]).iter().map(|h| h.to_f32()).collect();
                let mut o = x.clone();
                cpu::gelu(&mut o);
                results.push(("gelu (f16 table)", o, want));
            }
            "rope_norm" | "rope_neox" => {
                let mut x = f32s(&a[0]);
                let pos = i32s(&a[1]);
                let (hd, nh, base, mode) = if c.name == "rope_norm" {
                    (64, 3, 100000.0, RopeMode::Normal)
                } else {
                    (256, 1, 1000000.0, RopeMode::Neox)
                };
                let p = RopeParams {
                    mode,
                    n_rot: hd,
                    freq_base: base,
                    freq_scale: 1.0,
                    ext_factor: 0.0,
                    attn_factor: 1.0,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    n_ctx_orig: 8192,
                    mrope: None,
                };
                cpu::rope(&mut x, nh, hd, &pos, &p, None).unwrap();
                results.push((
                    if mode == RopeMode::Normal {
                        "rope"
                    } else {
                        "rope neox"
                    },
                    x,
                    f32s(&a[2]),
                ));
            }
            _ => {
                // flash attention: q, k, v, positions, [hd, nh, nkvh, nq, nkv], [scale], out
                let q = f32s(&a[0]);
                let k = f16s(&a[1]);
                let v = f16s(&a[2]);
                let pos = i32s(&a[3]);
                let dims: Vec<usize> = f32s(&a[4]).iter().map(|&d| d as usize).collect();
                let p = AttentionParams {
                    n_head: dims[1],
                    n_kv_head: dims[2],
                    head_dim: dims[0],
                    scale: f32s(&a[5])[0],
                    softcap: 0.0,
                    window: 0,
                };
                let mut o = vec![0f32; q.len()];
                cpu::attention(
                    &q,
                    &pos,
                    KvSlice::F16(&k),
                    KvSlice::F16(&v),
                    dims[4],
                    &p,
                    &mut o,
                )
                .unwrap();
                results.push(("flash attention", o, f32s(&a[6])));
            }
        }
        for (what, got, want) in results {
            let (m, mb, n) = diff(&got, &want);
            eprintln!(
                "{:10} {what:16} max|kestrel - ggml| = {m:.3e} (max |ggml| {mb:.2}), {n} of {} differ",
                c.name,
                got.len()
            );
            assert_eq!(n, 0, "{} {what}: {n} values differ from ggml's", c.name);
            checked += 1;
        }
    }
    assert_eq!(checked, 11);
}
