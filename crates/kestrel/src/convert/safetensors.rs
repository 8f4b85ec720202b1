//! Reading `.safetensors` files (Hugging Face's weight format): an 8-byte little-endian header
//! length, a JSON header naming each tensor's dtype, shape and byte range, then the data. The
//! file is memory-mapped and every range is checked against it before use.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use memmap2::Mmap;

use super::ConvertError;

/// The largest header accepted (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

/// Element types the converter reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StDType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    BF16,
    /// Unsigned bytes (MXFP4 blocks and scales of gpt-oss checkpoints).
    U8,
    /// 8-bit float, 4 exponent and 3 mantissa bits, no infinities (`float8_e4m3fn`): FP8
    /// checkpoints' weights, read with their `*_scale_inv` block scales.
    F8E4M3,
    /// 8-bit float, 5 exponent and 2 mantissa bits (`float8_e5m2`).
    F8E5M2,
    /// Anything else (integer buffers such as `position_ids`): skipped, never converted.
    Other,
}

impl StDType {
    /// F32, F16 or BF16.
    pub fn is_float(self) -> bool {
        matches!(self, StDType::F32 | StDType::F16 | StDType::BF16)
    }

    /// One of the 8-bit floats.
    pub fn is_fp8(self) -> bool {
        matches!(self, StDType::F8E4M3 | StDType::F8E5M2)
    }

    fn parse(s: &str) -> (StDType, usize) {
        match s {
            "F32" => (StDType::F32, 4),
            "F16" => (StDType::F16, 2),
            "BF16" => (StDType::BF16, 2),
            "F64" | "I64" | "U64" => (StDType::Other, 8),
            "I32" | "U32" => (StDType::Other, 4),
            "I16" | "U16" => (StDType::Other, 2),
            "U8" => (StDType::U8, 1),
            "F8_E4M3" => (StDType::F8E4M3, 1),
            "F8_E5M2" => (StDType::F8E5M2, 1),
            _ => (StDType::Other, 1),
        }
    }
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug)]
pub struct StTensor {
    /// Element type.
    pub dtype: StDType,
    /// Shape, outermost first (PyTorch order).
    pub shape: Vec<usize>,
    range: (usize, usize),
}

/// A memory-mapped safetensors file.
#[derive(Debug)]
pub struct SafeTensors {
    path: PathBuf,
    map: Mmap,
    data_start: usize,
    tensors: BTreeMap<String, StTensor>,
}

impl SafeTensors {
    /// Map and check `path`.
    ///
    /// # Errors
    /// [`ConvertError::Input`] naming the file and what is wrong with it.
    pub fn open(path: &Path) -> Result<SafeTensors, ConvertError> {
        let bad = |reason: String| ConvertError::Input {
            path: path.to_path_buf(),
            reason,
        };
        let file = File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
        // SAFETY: the map is read-only; a file truncated underneath it is the one hazard, as
        // for every memory-mapped model file.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| bad(format!("cannot map: {e}")))?;
        if map.len() < 8 {
            return Err(bad("shorter than its 8-byte header length".into()));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&map[..8]);
        let n = u64::from_le_bytes(len8);
        if n > MAX_HEADER || n + 8 > map.len() as u64 {
            return Err(bad(format!(
                "header of {n} bytes in a file of {} (limit {MAX_HEADER})",
                map.len()
            )));
        }
        let data_start = 8 + n as usize;
        let header: serde_json::Value = serde_json::from_slice(&map[8..data_start])
            .map_err(|e| bad(format!("header is not JSON: {e}")))?;
        let obj = header
            .as_object()
            .ok_or_else(|| bad("header is not a JSON object".into()))?;
        let data_len = map.len() - data_start;
        let mut tensors = BTreeMap::new();
        for (name, v) in obj {
            if name == "__metadata__" {
                continue;
            }
            let field = |k: &str| {
                v.get(k)
                    .ok_or_else(|| bad(format!("tensor {name:?} has no {k:?}")))
            };
            let dtype_name = field("dtype")?
                .as_str()
                .ok_or_else(|| bad(format!("tensor {name:?}: dtype is not a string")))?;
            let (dtype, size) = StDType::parse(dtype_name);
            let shape = field("shape")?
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| bad(format!("tensor {name:?}: bad shape")))?;
            let offs = field("data_offsets")?
                .as_array()
                .filter(|a| a.len() == 2)
                .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
                .ok_or_else(|| bad(format!("tensor {name:?}: bad data_offsets")))?;
            let (b, e) = offs;
            let want = shape
                .iter()
                .try_fold(size as u64, |acc, &d| acc.checked_mul(d as u64));
            if b > e || e > data_len as u64 || want != Some(e - b) {
                return Err(bad(format!(
                    "tensor {name:?}: bytes {b}..{e} for a {dtype_name} {shape:?} in {data_len} data bytes"
                )));
            }
            tensors.insert(
                name.clone(),
                StTensor {
                    dtype,
                    shape,
                    range: (b as usize, e as usize),
                },
            );
        }
        Ok(SafeTensors {
            path: path.to_path_buf(),
            map,
            data_start,
            tensors,
        })
    }

    /// The tensors by name.
    pub fn tensors(&self) -> &BTreeMap<String, StTensor> {
        &self.tensors
    }

    /// Where it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A tensor's description and its bytes.
    pub fn raw(&self, name: &str) -> Option<(&StTensor, &[u8])> {
        let t = self.tensors.get(name)?;
        Some((
            t,
            &self.map[self.data_start + t.range.0..self.data_start + t.range.1],
        ))
    }

    /// The values of a float tensor as f32.
    ///
    /// # Errors
    /// A tensor that is absent or not a float type.
    pub fn to_f32(&self, name: &str) -> Result<Vec<f32>, ConvertError> {
        let t = self.tensors.get(name).ok_or_else(|| ConvertError::Input {
            path: self.path.clone(),
            reason: format!("tensor {name:?} is missing"),
        })?;
        let bytes = &self.map[self.data_start + t.range.0..self.data_start + t.range.1];
        // FP8 values mean nothing without their scales: not read here.
        let mut out = Vec::new();
        if !t.dtype.is_float() || !decode_into(t.dtype, bytes, &mut out) {
            return Err(ConvertError::Input {
                path: self.path.clone(),
                reason: format!("tensor {name:?} is not a float tensor"),
            });
        }
        Ok(out)
    }
}

/// Appends the values in `bytes` (little-endian elements of `dtype`) to `out` as f32; `false`
/// for a type that is not a float.
pub fn decode_into(dtype: StDType, bytes: &[u8], out: &mut Vec<f32>) -> bool {
    let le2 = |c: &[u8]| u16::from_le_bytes([c[0], c[1]]);
    match dtype {
        StDType::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        StDType::F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_bits(le2(c)).to_f32()),
        ),
        StDType::BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| bf16::from_bits(le2(c)).to_f32()),
        ),
        StDType::F8E4M3 => out.extend(bytes.iter().map(|&b| f8e4m3_to_f32(b))),
        StDType::F8E5M2 => out.extend(bytes.iter().map(|&b| f8e5m2_to_f32(b))),
        StDType::U8 | StDType::Other => return false,
    }
    true
}

/// An `float8_e4m3fn` value as f32 (exact): bias 7, subnormals below 2^-6, 0x7f and 0xff NaN.
pub fn f8e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = (b >> 3) & 0x0f;
    let m = f32::from(b & 0x07);
    if e == 0x0f && b & 0x07 == 0x07 {
        return f32::NAN;
    }
    let mag = if e == 0 {
        m / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f32.powi(i32::from(e) - 7)
    };
    sign * mag
}

/// An `float8_e5m2` value as f32 (exact): the top byte of an IEEE half.
pub fn f8e5m2_to_f32(b: u8) -> f32 {
    f16::from_bits(u16::from(b) << 8).to_f32()
}
