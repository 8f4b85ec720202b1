//! The q8_0-family layouts for [`super::matmul_packed`]: Q4_0x16, Q4_1x16, Q5_0x16, Q5_1x16 and
//! Q8_0x16, each 16 rows interleaved so that one 64-byte load holds four consecutive elements
//! of every row, one row per 32-bit lane.
//!
//! The two 4-bit table types of the same block shape, IQ4_NL and MXFP4 (whose nibbles index a
//! 16-value table instead of counting from an offset), pack the same way: IQ4_NLx16, MXFP4x16.
//!
//! Per group of 16 rows: for each of the `nb` blocks of a row, the quant bytes, then the
//! group's `nb` blocks of scales (16 f16 `d`, then, for the types with a min, 16 f16 `m`;
//! MXFP4: 16 E8M0 exponent bytes).
//! The quant bytes of a block, by type (`v` in 0..8 names elements `4v..4v + 4` of a block):
//! - Q4_0, Q4_1, IQ4_NL, MXFP4: 256 bytes, `for c in 0..4, for r in 0..16: bytes 4c..4c + 4 of
//!   row r's nibbles`: chunk `c` holds elements `4c..` (low nibbles) and `16 + 4c..` (high
//!   nibbles); the file's bytes moved, not converted.
//! - Q5_0, Q5_1: the Q4 nibbles, then 8 little-endian u64 masks, mask `v` bit `4r + j` the
//!   fifth bit of element `4v + j` of row `r` (the file's `qh`, regrouped: same size).
//! - Q8_0: 512 bytes, `for v in 0..8, for r in 0..16: elements 4v..4v + 4 of row r`, each as
//!   `q + 128` (unsigned, as `vpdpbusd` wants it).
//!
//! Every layout is exactly as large as the file's rows.
//!
//! Numerics (all seven): per weight row and q8_0 activation row, over the blocks in order,
//! `acc = fma(f32(Σ q·a), d_w·d_x, acc)` with the block sum exact in integers (`q` the signed
//! quant: `q - 8` for Q4_0, `q - 16` for Q5_0, the table value for IQ4_NL and MXFP4, whose
//! `d_w` is then the E8M0 exponent as ggml's half scale), then for the types with a min `acc = fma(m_w,
//! s_x, acc)` with `s_x = f16(d_x·Σ a)` as ggml's q8_1 activations hold it (its `vec_dot`
//! rounds the min term so, and that rounding moves logits by ~1 through 30 layers: it is
//! kept). For Q4_0, IQ4_NL and MXFP4 that is llama.cpp's repacked GEMM and GEMV
//! (`ggml_gemm_q4_0_8x8_q8_0`, `ggml_gemv_iq4_nl_8x8_q8_0`, `ggml_gemv_mxfp4_8x8_q8_0`);
//! for the others it is the same rule, where ggml's `vec_dot` (which the unpacked path follows
//! bit for bit) converts 8 partial lane sums per block to float instead: the two differ in the
//! last bits. A row's result does not depend on how many activation rows a call has.

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub(crate) mod layout;
pub(crate) use layout::*;

use kestrel_gguf::quant::iq4_nl::KVALUES_IQ4NL;
use kestrel_gguf::quant::mxfp4::{e8m0_to_f32_half, KVALUES_MXFP4};

use super::groups::GROUP_ROWS;
use crate::cpu::q8::{quantize_row_q8_1, BlockQ8_1};
use crate::cpu::scratch::MatmulScratch;
use crate::storage::AlignedBuf;

/// Packs `m` rows of `k` elements of `kind` (`w`: exactly their bytes, `m` a multiple of 16).
pub(crate) fn pack(kind: Kind, w: &[u8], m: usize, k: usize, release: bool) -> Option<AlignedBuf> {
    if !k.is_multiple_of(32) {
        return None;
    }
    let sizes = (kind.raw_bytes(), kind.quant_bytes(), kind.scale_bytes());
    let (m_at, qh_at, qs_at) = kind.fields();
    let db = kind.d_bytes();
    super::groups::pack_groups(w, m, k / 32, sizes, release, |r, blk, quants, scales| {
        scales[r * db..(r + 1) * db].copy_from_slice(&blk[..db]);
        if let Some(at) = m_at {
            scales[32 + r * 2..32 + r * 2 + 2].copy_from_slice(&blk[at..at + 2]);
        }
        if kind == Kind::Q8_0 {
            for (e, &q) in blk[qs_at..qs_at + 32].iter().enumerate() {
                quants[(e / 4) * 64 + r * 4 + e % 4] = q ^ 0x80;
            }
            return;
        }
        for c in 0..4 {
            let at = c * 64 + r * 4;
            quants[at..at + 4].copy_from_slice(&blk[qs_at + 4 * c..qs_at + 4 * c + 4]);
        }
        if let Some(at) = qh_at {
            let qh = u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
            for e in 0..32 {
                if qh >> e & 1 == 1 {
                    let bit = (e / 4) * 64 + 4 * r + e % 4;
                    quants[256 + bit / 8] |= 1 << (bit % 8);
                }
            }
        }
    })
}

/// Writes row `r` (0..16) of block `b` of a packed group (`nb` blocks) back in the file's
/// block layout (`out`: [`Kind::raw_bytes`] bytes): the exact inverse of [`pack`].
pub(crate) fn unpack_block(
    kind: Kind,
    group: &[u8],
    nb: usize,
    b: usize,
    r: usize,
    out: &mut [u8],
) {
    let (qb, sb) = (kind.quant_bytes(), kind.scale_bytes());
    let q = &group[b * qb..(b + 1) * qb];
    let s = &group[nb * qb + b * sb..nb * qb + (b + 1) * sb];
    let (m_at, qh_at, qs_at) = kind.fields();
    let db = kind.d_bytes();
    out[..db].copy_from_slice(&s[db * r..db * (r + 1)]);
    if let Some(at) = m_at {
        out[at..at + 2].copy_from_slice(&s[32 + 2 * r..32 + 2 * r + 2]);
    }
    if kind == Kind::Q8_0 {
        for (e, o) in out[qs_at..qs_at + 32].iter_mut().enumerate() {
            *o = q[(e / 4) * 64 + r * 4 + e % 4] ^ 0x80;
        }
        return;
    }
    for c in 0..4 {
        out[qs_at + 4 * c..qs_at + 4 * c + 4]
            .copy_from_slice(&q[c * 64 + r * 4..c * 64 + r * 4 + 4]);
    }
    if let Some(at) = qh_at {
        let mut qh = 0u32;
        for e in 0..32 {
            let bit = (e / 4) * 64 + 4 * r + e % 4;
            qh |= u32::from((q[256 + bit / 8] >> (bit % 8)) & 1) << e;
        }
        out[at..at + 4].copy_from_slice(&qh.to_le_bytes());
    }
}

/// Converts the `n` activation rows of `x` (`k` values each) to q8_0 in `scratch`, with the
/// per-block terms the kernel for `kind` starts from.
pub(crate) fn prepare<'s>(
    kind: Kind,
    x: &[f32],
    n: usize,
    k: usize,
    scratch: &'s mut MatmulScratch,
) -> ActQ8<'s> {
    let (min, off) = (kind.has_min(), kind.offset());
    let (acts, corr, d) = super::groups::prepare_acts(
        x,
        n,
        k,
        k / 32,
        1,
        scratch,
        quantize_row_q8_1,
        |b: &BlockQ8_1, c, d| {
            c[0] = if min {
                b.s.to_f32().to_bits() as i32
            } else {
                -off * b.qs.iter().map(|&q| i32::from(q)).sum::<i32>()
            };
            *d = b.d.to_f32();
        },
    );
    ActQ8 { acts, corr, d }
}

/// One group against 1 to [`super::MAX_ACTS`] activation rows: `out[t · 16 + r]`; the
/// AVX-512 kernel when the CPU runs it (the types with an offset or a min), the AVX2 kernel for
/// Q4_0, IQ4_NL and MXFP4 on AVX2 CPUs (and the table types on AVX-512 ones), on aarch64 the
/// `smmla` or `sdot` kernel (every type), else the scalar twin.
pub(crate) fn group_tile(kind: Kind, group: &[u8], nb: usize, act: ActQ8<'_>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::isa::{active_isa, Isa};
        let isa = active_isa();
        if isa >= Isa::Avx512 && kind.table().is_none() {
            // SAFETY: the active ISA is AVX-512, so the CPU has the kernel's features.
            unsafe { avx512::group_tile(kind, group, nb, act, out) };
            return;
        }
        if isa >= Isa::Avx2 && avx2::handles(kind) {
            // SAFETY: the active ISA is at least AVX2, and the kernel handles `kind`.
            unsafe { avx2::group_tile(kind, group, nb, act, out) };
            return;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use crate::cpu::isa::{active_isa, Isa};
        let isa = active_isa();
        if isa >= Isa::I8mm {
            // SAFETY: the active ISA is i8mm, so the CPU has its features.
            unsafe { aarch64::group_tile_i8mm(kind, group, nb, act, out) };
            return;
        }
        if isa >= Isa::Dotprod {
            // SAFETY: the active ISA has the dot-product extension.
            unsafe { aarch64::group_tile_dotprod(kind, group, nb, act, out) };
            return;
        }
    }
    tile_scalar(kind, group, nb, act, out)
}

/// The unsigned quant of element `e` of row `r` in a packed block's quant bytes `q` (the
/// table value for the table types).
fn unsigned(kind: Kind, q: &[u8], r: usize, e: usize) -> i32 {
    let at = (e % 16 / 4) * 64 + r * 4 + e % 4;
    let nibble = if e < 16 { q[at] & 0x0F } else { q[at] >> 4 };
    match kind {
        Kind::Q8_0 => i32::from(q[(e / 4) * 64 + r * 4 + e % 4]),
        Kind::Q4_0 | Kind::Q4_1 => i32::from(nibble),
        Kind::IQ4NL => i32::from(KVALUES_IQ4NL[nibble as usize]),
        Kind::MXFP4 => i32::from(KVALUES_MXFP4[nibble as usize]),
        Kind::Q5_0 | Kind::Q5_1 => {
            let bit = (e / 4) * 64 + 4 * r + e % 4;
            i32::from(nibble | ((q[256 + bit / 8] >> (bit % 8)) & 1) << 4)
        }
    }
}

/// The f16 at `s[i]` (little-endian) as f32.
fn f16_at(s: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([s[2 * i], s[2 * i + 1]]).to_f32()
}

/// Row `r`'s weight scale in a block's scale bytes `s`.
fn d_at(kind: Kind, s: &[u8], r: usize) -> f32 {
    if kind == Kind::MXFP4 {
        e8m0_to_f32_half(s[r])
    } else {
        f16_at(s, r)
    }
}

/// The scalar twin of the AVX-512 kernel.
pub(crate) fn tile_scalar(kind: Kind, group: &[u8], nb: usize, act: ActQ8<'_>, out: &mut [f32]) {
    let (qb, sb) = (kind.quant_bytes(), kind.scale_bytes());
    let (quants, scales) = group.split_at(nb * qb);
    let n_act = act.acts.len() / nb;
    for t in 0..n_act {
        for r in 0..GROUP_ROWS {
            let mut acc = 0f32;
            for b in 0..nb {
                let i = t * nb + b;
                let a = &act.acts[i].qs;
                let q = &quants[b * qb..(b + 1) * qb];
                let mut sum = if kind.has_min() { 0 } else { act.corr[i] };
                for (e, &a) in a.iter().enumerate() {
                    sum += unsigned(kind, q, r, e) * i32::from(a);
                }
                let s = &scales[b * sb..(b + 1) * sb];
                acc = (sum as f32).mul_add(d_at(kind, s, r) * act.d[i], acc);
                if kind.has_min() {
                    acc = f16_at(s, 16 + r).mul_add(act.s(i), acc);
                }
            }
            out[t * GROUP_ROWS + r] = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::DType;
    use bytemuck::Zeroable;

    use super::*;
    use crate::cpu::packed::{matmul_packed, PackedWeight};
    use crate::cpu::testutil::{quantized_rows, Rng};

    const ALL: [(Kind, DType); 7] = [
        (Kind::Q4_0, DType::Q4_0),
        (Kind::Q4_1, DType::Q4_1),
        (Kind::Q5_0, DType::Q5_0),
        (Kind::Q5_1, DType::Q5_1),
        (Kind::Q8_0, DType::Q8_0),
        (Kind::IQ4NL, DType::IQ4NL),
        (Kind::MXFP4, DType::MXFP4),
    ];

    /// A file block's `d`, `m` and 32 signed values (`d·v + m` dequantizes it).
    fn decode(kind: Kind, blk: &[u8]) -> (f32, f32, [i32; 32]) {
        let (m_at, qh_at, qs_at) = kind.fields();
        let d = d_at(kind, blk, 0);
        let m = m_at.map_or(0.0, |at| f16_at(&blk[at..], 0));
        let qh = qh_at.map_or(0, |at| {
            u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]])
        });
        let mut v = [0i32; 32];
        for (e, v) in v.iter_mut().enumerate() {
            *v = if kind == Kind::Q8_0 {
                i32::from(blk[qs_at + e] as i8)
            } else if let Some(table) = kind.table() {
                let byte = blk[qs_at + e % 16];
                i32::from(table[usize::from(if e < 16 { byte & 0x0F } else { byte >> 4 })])
            } else {
                let byte = blk[qs_at + e % 16];
                let nib = if e < 16 { byte & 0x0F } else { byte >> 4 };
                let fifth = if qh_at.is_some() {
                    (qh >> e & 1) << 4
                } else {
                    0
                };
                (u32::from(nib) | fifth) as i32 - kind.offset()
            };
        }
        (d, m, v)
    }

    /// Rows of `kind` dotted with q8_0 activations in the packed numerics, from the file bytes.
    fn reference(kind: Kind, w: &[u8], m: usize, k: usize, x: &[f32], n: usize) -> Vec<f32> {
        let nb = k / 32;
        let bs = kind.raw_bytes();
        let mut out = vec![0f32; n * m];
        for t in 0..n {
            let mut a = vec![BlockQ8_1::zeroed(); nb];
            quantize_row_q8_1(&x[t * k..(t + 1) * k], &mut a);
            for r in 0..m {
                let mut acc = 0f32;
                for (b, ab) in a.iter().enumerate() {
                    let (dw, mw, v) = decode(kind, &w[(r * nb + b) * bs..][..bs]);
                    let sum: i32 = v.iter().zip(&ab.qs).map(|(&v, &a)| v * i32::from(a)).sum();
                    let dx = ab.d.to_f32();
                    acc = (sum as f32).mul_add(dw * dx, acc);
                    if kind.has_min() {
                        acc = mw.mul_add(ab.s.to_f32(), acc);
                    }
                }
                out[t * m + r] = acc;
            }
        }
        out
    }

    fn case(kind: Kind, dtype: DType, seed: u64, m: usize, k: usize, n: usize) {
        let mut rng = Rng::new(seed);
        let (w, _) = quantized_rows(&mut rng, dtype, m, k);
        let x = rng.vec(n * k, 1.0);
        let want = reference(kind, &w, m, k, &x, n);
        let p = PackedWeight::pack_any(&w, dtype, m, k, false).expect("packs");
        assert_eq!(p.nbytes(), w.len(), "{kind:?}");
        let mut got = vec![0f32; n * m];
        matmul_packed(&x, n, &p, &mut got, &[n], &mut MatmulScratch::new()).unwrap();
        assert_eq!(got, want, "{kind:?} m {m} k {k} n {n}");
        // The scalar twin, group by group, gives the same bits.
        let nb = k / 32;
        let mut s = MatmulScratch::new();
        let act = prepare(kind, &x, n, k, &mut s);
        let gb = nb * (kind.quant_bytes() + kind.scale_bytes());
        for g in 0..m / GROUP_ROWS {
            let mut o = vec![0f32; n * GROUP_ROWS];
            tile_scalar(
                kind,
                &p.buf.as_bytes()[g * gb..(g + 1) * gb],
                nb,
                act,
                &mut o,
            );
            for t in 0..n {
                assert_eq!(
                    &o[t * GROUP_ROWS..(t + 1) * GROUP_ROWS],
                    &want[t * m + g * GROUP_ROWS..t * m + (g + 1) * GROUP_ROWS],
                    "{kind:?} scalar twin"
                );
            }
        }
    }

    #[test]
    fn packed_q8_family_equals_its_reference_for_any_row_count() {
        for (kind, dtype) in ALL {
            for (seed, (m, k, n)) in [
                (16, 32, 1),
                (32, 64, 3),
                (48, 576, 8),
                (64, 320, 9),
                (16, 2048, 17),
            ]
            .into_iter()
            .enumerate()
            {
                case(kind, dtype, seed as u64 + 1, m, k, n);
            }
        }
    }

    #[test]
    fn packed_matmul_is_the_f64_product_of_the_dequantized_rows() {
        // Against the file's dequantized weights times the q8_0-rounded activations, in f64:
        // only the f32 accumulation differs.
        let (m, k, n) = (32, 576, 5);
        for (kind, dtype) in ALL {
            let mut rng = Rng::new(21);
            let (w, deq) = quantized_rows(&mut rng, dtype, m, k);
            let x = rng.vec(n * k, 1.0);
            let p = PackedWeight::pack_any(&w, dtype, m, k, false).unwrap();
            let mut got = vec![0f32; n * m];
            matmul_packed(&x, n, &p, &mut got, &[n], &mut MatmulScratch::new()).unwrap();
            for t in 0..n {
                let mut a = vec![BlockQ8_1::zeroed(); k / 32];
                quantize_row_q8_1(&x[t * k..(t + 1) * k], &mut a);
                let xq: Vec<f64> = (0..k)
                    .map(|j| f64::from(a[j / 32].qs[j % 32]) * f64::from(a[j / 32].d.to_f32()))
                    .collect();
                for r in 0..m {
                    let terms = (0..k).map(|j| f64::from(deq[r * k + j]) * xq[j]);
                    let mut want: f64 = terms.clone().sum();
                    let scale: f64 = terms.map(f64::abs).sum();
                    if kind.has_min() {
                        // ggml's min term: m times the f16-rounded `s`, not the exact sum.
                        let exact: f64 = (0..k)
                            .filter(|j| j % 32 == 0)
                            .map(|j| {
                                let (_, m, _) =
                                    decode(kind, &w[(r * k + j) / 32 * kind.raw_bytes()..]);
                                f64::from(m) * (0..32).map(|e| xq[j + e]).sum::<f64>()
                            })
                            .sum();
                        let rounded: f64 = a
                            .iter()
                            .enumerate()
                            .map(|(b, ab)| {
                                let (_, m, _) =
                                    decode(kind, &w[(r * k / 32 + b) * kind.raw_bytes()..]);
                                f64::from(m) * f64::from(ab.s.to_f32())
                            })
                            .sum();
                        want += rounded - exact;
                    }
                    let g = f64::from(got[t * m + r]);
                    assert!((g - want).abs() <= 1e-5 * scale, "{kind:?} {g} vs {want}");
                }
            }
        }
    }

    #[test]
    fn packed_values_dequantize_as_the_file() {
        // The packed quants and scales give back each row's values: `d·(u - off) + m`.
        let (m, k) = (32, 96);
        for (kind, dtype) in ALL {
            let mut rng = Rng::new(11);
            let (w, _) = quantized_rows(&mut rng, dtype, m, k);
            let p = PackedWeight::pack_any(&w, dtype, m, k, false).unwrap();
            let nb = k / 32;
            let (qb, sb) = (kind.quant_bytes(), kind.scale_bytes());
            let gb = nb * (qb + sb);
            for r in 0..m {
                let group = &p.buf.as_bytes()[(r / 16) * gb..(r / 16 + 1) * gb];
                for b in 0..nb {
                    let (d, mn, v) = decode(kind, &w[(r * nb + b) * kind.raw_bytes()..]);
                    let q = &group[b * qb..(b + 1) * qb];
                    let s = &group[nb * qb + b * sb..nb * qb + (b + 1) * sb];
                    assert_eq!(d_at(kind, s, r % 16), d);
                    if kind.has_min() {
                        assert_eq!(f16_at(s, 16 + r % 16), mn);
                    }
                    for (e, &v) in v.iter().enumerate() {
                        assert_eq!(unsigned(kind, q, r % 16, e) - kind.offset(), v, "{kind:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn unpacking_gives_back_the_file_bytes() {
        let (m, k) = (32, 96);
        for (kind, dtype) in ALL {
            let mut rng = Rng::new(12);
            let (w, _) = quantized_rows(&mut rng, dtype, m, k);
            let p = PackedWeight::pack_any(&w, dtype, m, k, false).unwrap();
            let nb = k / 32;
            let bs = kind.raw_bytes();
            let gb = nb * (kind.quant_bytes() + kind.scale_bytes());
            let mut blk = vec![0u8; bs];
            for r in 0..m {
                let group = &p.buf.as_bytes()[(r / 16) * gb..(r / 16 + 1) * gb];
                for b in 0..nb {
                    unpack_block(kind, group, nb, b, r % 16, &mut blk);
                    assert_eq!(
                        blk,
                        &w[(r * nb + b) * bs..(r * nb + b + 1) * bs],
                        "{kind:?}"
                    );
                }
            }
            // And a whole row through `PackedWeight::get_rows` dequantizes as the file's.
            let ids = [5u32, 31, 0, 5];
            let mut want = vec![0f32; ids.len() * k];
            crate::cpu::get_rows(&w, dtype, m, k, &ids, &mut want).unwrap();
            let mut got = vec![f32::NAN; ids.len() * k];
            p.get_rows(&ids, &mut got).unwrap();
            assert_eq!(got, want, "{kind:?}");
            assert!(p.get_rows(&[32], &mut got[..k]).is_err());
            assert!(p.get_rows(&[1], &mut got[..k - 1]).is_err());
        }
    }

    #[test]
    fn a_row_does_not_depend_on_the_other_rows_of_the_call() {
        let (m, k) = (32, 256);
        for (kind, dtype) in ALL {
            let mut rng = Rng::new(7);
            let (w, _) = quantized_rows(&mut rng, dtype, m, k);
            let x = rng.vec(11 * k, 1.0);
            let p = PackedWeight::pack_any(&w, dtype, m, k, false).unwrap();
            let mut all = vec![0f32; 11 * m];
            matmul_packed(&x, 11, &p, &mut all, &[11], &mut MatmulScratch::new()).unwrap();
            for t in 0..11 {
                let mut one = vec![0f32; m];
                let xr = &x[t * k..(t + 1) * k];
                matmul_packed(xr, 1, &p, &mut one, &[1], &mut MatmulScratch::new()).unwrap();
                assert_eq!(one, all[t * m..(t + 1) * m], "{kind:?}");
            }
        }
    }
}
