//! A checkpoint tensor's values as f32, as llama.cpp's converter reads them: float tensors as
//! stored; FP8 ones (`quantization_config.quant_method = "fp8"`) times the scale of their block
//! from the sibling `{name}_scale_inv` tensor (`weight_block_size` rows x columns per scale, the
//! last blocks cut short; without a block size one scale per tensor or per row), computed in f32
//! as `weight.float() * scale.float()`.

use half::{bf16, f16};

use crate::convert::checkpoint::Checkpoint;
use crate::convert::safetensors::{decode_into, f8e4m3_to_f32, f8e5m2_to_f32, StDType};

/// The scales of an FP8 tensor.
struct Scales<'a> {
    dtype: StDType,
    bytes: &'a [u8],
    /// Rows and columns of the weight per scale.
    block: (usize, usize),
    /// Scales per row of scales.
    cols: usize,
}

/// One tensor's values.
pub(super) struct Values<'a> {
    dtype: StDType,
    bytes: &'a [u8],
    /// Values per row (the last dimension).
    cols: usize,
    scales: Option<Scales<'a>>,
}

/// The name of the scale tensor of FP8 weight `hf`.
pub(super) fn scale_name(hf: &str) -> String {
    format!("{hf}_scale_inv")
}

/// Value `i` of a float or scale tensor.
fn float_at(dtype: StDType, bytes: &[u8], i: usize) -> f32 {
    let le2 = |k: usize| u16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]]);
    match dtype {
        StDType::F32 => f32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ]),
        StDType::F16 => f16::from_bits(le2(i)).to_f32(),
        StDType::BF16 => bf16::from_bits(le2(i)).to_f32(),
        StDType::F8E4M3 => f8e4m3_to_f32(bytes[i]),
        StDType::F8E5M2 => f8e5m2_to_f32(bytes[i]),
        StDType::U8 | StDType::Other => f32::NAN,
    }
}

fn elem_size(dtype: StDType) -> Option<usize> {
    match dtype {
        StDType::F32 => Some(4),
        StDType::F16 | StDType::BF16 => Some(2),
        StDType::F8E4M3 | StDType::F8E5M2 => Some(1),
        StDType::U8 | StDType::Other => None,
    }
}

impl<'a> Values<'a> {
    /// Opens `hf`; an FP8 tensor needs its scale tensor, laid out for `block` (`None`: one
    /// scale for the tensor or one per row).
    pub(super) fn open(
        ck: &'a Checkpoint,
        hf: &str,
        block: Option<(usize, usize)>,
    ) -> Result<Values<'a>, String> {
        let (t, bytes) = ck.get(hf).ok_or_else(|| format!("{hf} vanished"))?;
        let size = elem_size(t.dtype).ok_or("not a float tensor")?;
        let n: usize = t.shape.iter().product();
        if bytes.len() != n * size {
            return Err(format!("{} bytes for {n} values", bytes.len()));
        }
        let cols = t.shape.last().copied().unwrap_or(1).max(1);
        let rows = n / cols;
        let scales = if t.dtype.is_fp8() {
            let sname = scale_name(hf);
            let (st, sbytes) = ck
                .get(&sname)
                .ok_or_else(|| format!("an FP8 tensor without its scales {sname:?}"))?;
            if t.shape.len() != 2 || !st.dtype.is_float() {
                return Err(format!(
                    "FP8 tensor of {} dims with {:?} scales: only 2-D weights with float scales \
                     are read",
                    t.shape.len(),
                    st.dtype
                ));
            }
            let sn: usize = st.shape.iter().product();
            let (block, scols) = match block {
                Some((br, bc)) if br > 0 && bc > 0 => {
                    let want = (rows.div_ceil(br), cols.div_ceil(bc));
                    if st.shape != [want.0, want.1] {
                        return Err(format!(
                            "scales {:?} do not cover a {rows}x{cols} weight in {br}x{bc} blocks \
                             ({}x{} expected)",
                            st.shape, want.0, want.1
                        ));
                    }
                    ((br, bc), want.1)
                }
                Some(b) => return Err(format!("weight_block_size {b:?} has a zero")),
                None if sn == 1 => ((rows, cols), 1),
                None if sn == rows => ((1, cols), 1),
                None => {
                    return Err(format!(
                        "{sn} scales for a {rows}x{cols} weight and no weight_block_size"
                    ))
                }
            };
            let ssize = elem_size(st.dtype).unwrap_or(4);
            if sbytes.len() != sn * ssize {
                return Err(format!("scales: {} bytes for {sn} values", sbytes.len()));
            }
            Some(Scales {
                dtype: st.dtype,
                bytes: sbytes,
                block,
                cols: scols,
            })
        } else {
            None
        };
        Ok(Values {
            dtype: t.dtype,
            bytes,
            cols,
            scales,
        })
    }

    /// Values per row.
    pub(super) fn cols(&self) -> usize {
        self.cols
    }

    /// Value `i` (flat, row-major).
    pub(super) fn get(&self, i: usize) -> f32 {
        let v = float_at(self.dtype, self.bytes, i);
        match &self.scales {
            None => v,
            Some(s) => {
                let (r, c) = (i / self.cols, i % self.cols);
                let k = (r / s.block.0) * s.cols + c / s.block.1;
                v * float_at(s.dtype, s.bytes, k)
            }
        }
    }

    /// Row `r` into `out`, with `map` applied (see [`ValueMap`]).
    pub(super) fn row(&self, r: usize, map: ValueMap, out: &mut Vec<f32>) -> Result<(), String> {
        let size = elem_size(self.dtype).ok_or("not a float tensor")?;
        let start = r * self.cols;
        let src = self
            .bytes
            .get(start * size..(start + self.cols) * size)
            .ok_or_else(|| format!("row {r} is outside the tensor"))?;
        out.clear();
        // One dtype match per row: this is the converter's inner loop.
        decode_into(self.dtype, src, out);
        if let Some(s) = &self.scales {
            let srow = (r / s.block.0) * s.cols;
            for (c, v) in out.iter_mut().enumerate() {
                *v *= float_at(s.dtype, s.bytes, srow + c / s.block.1);
            }
        }
        if let ValueMap::RowScales {
            first,
            ends,
            scales,
        } = map
        {
            // The row's factor: the first range whose end lies past it.
            let i = ends.iter().position(|&e| r < e).unwrap_or(ends.len());
            let f = scales.get(i).copied().unwrap_or(1.0);
            out.iter_mut()
                .for_each(|v| *v = self.mapped(*v, ValueMap::Scale(first, f)));
        } else if map != ValueMap::Keep {
            out.iter_mut().for_each(|v| *v = self.mapped(*v, map));
        }
        Ok(())
    }

    /// `v` (a value of this tensor) with `map` applied. llama.cpp's converter widens BF16 to
    /// F32 first, then computes in the tensor's type: F16 results are rounded to f16 as torch's
    /// half arithmetic does.
    pub(super) fn mapped(&self, v: f32, map: ValueMap) -> f32 {
        let own = |v: f32| {
            if self.dtype == StDType::F16 {
                f16::from_f32(v).to_f32()
            } else {
                v
            }
        };
        match map {
            ValueMap::Keep | ValueMap::RowScales { .. } => v,
            ValueMap::PlusOne => own(v + 1.0),
            ValueMap::NegExp => -own(f64::from(v).exp() as f32),
            // Two multiplications, each rounded as torch rounds a tensor times a scalar.
            ValueMap::Scale(a, b) => own(own(v * a) * b),
        }
    }
}

/// A change llama.cpp's converter makes to a tensor's values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ValueMap {
    /// The values as stored.
    Keep,
    /// `1 + w` (Gemma's and Nemotron's norms).
    PlusOne,
    /// `-exp(w)` (Mamba's `A` from `A_log`; exp correctly rounded in f32, where torch's may be
    /// one unit in the last place off).
    NegExp,
    /// `(w · a) · b`, each product rounded to the tensor's type (Falcon-H1's multipliers).
    Scale(f32, f32),
    /// `(w · first) · scales[i]` for the rows of range `i` (`ends`: where ranges 0-3 end, range
    /// 4 to the last row): Falcon-H1's `in_proj`, whose z, x, B, C and dt rows each have their
    /// own multiplier. Only for whole-row reads.
    RowScales {
        first: f32,
        ends: [usize; 4],
        scales: [f32; 5],
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_values_decode_exactly() {
        // e4m3fn: 0x38 = 1.0, 0x3c = 1.5, 0x7e = 448 (largest), 0x01 = 2^-9, 0xc0 = -2.
        for (b, v) in [
            (0x38u8, 1.0f32),
            (0x3c, 1.5),
            (0x7e, 448.0),
            (0x01, 2f32.powi(-9)),
            (0xc0, -2.0),
            (0x00, 0.0),
        ] {
            assert_eq!(f8e4m3_to_f32(b), v, "{b:#x}");
        }
        assert!(f8e4m3_to_f32(0x7f).is_nan() && f8e4m3_to_f32(0xff).is_nan());
        // e5m2: 0x3c = 1.0, 0x7b = 57344, 0x7c = inf.
        assert_eq!(f8e5m2_to_f32(0x3c), 1.0);
        assert_eq!(f8e5m2_to_f32(0x7b), 57344.0);
        assert!(f8e5m2_to_f32(0x7c).is_infinite());
    }
}
