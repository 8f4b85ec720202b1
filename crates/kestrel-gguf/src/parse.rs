//! Parsing and validating the GGUF header: magic, version, metadata, tensor infos, data offset.
//!
//! Everything a file claims is checked against the file's length before it sizes a loop or an
//! allocation, so a hostile header fails with a typed error, never a panic or a huge allocation.

use std::collections::HashMap;
use std::ops::Range;

use crate::cursor::Cursor;
use crate::error::{GgufError, Result};
use crate::tensor_info::{TensorInfo, MAX_DIMS};
use crate::value::ValueType;
use crate::GgmlType;

/// The alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// How deep arrays of arrays may nest.
pub const MAX_ARRAY_NESTING: usize = 8;
/// Most entries reserved before they are read.
const PREALLOC_CAP: u64 = 1024;

/// A metadata entry: the key and where its encoded value lies in the file.
#[derive(Clone, Debug)]
pub(crate) struct MetaEntry {
    pub(crate) key: String,
    pub(crate) value_type: ValueType,
    /// Bytes of the value, after its type tag.
    pub(crate) range: Range<usize>,
}

/// The parsed, validated header.
#[derive(Clone, Debug)]
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) metadata: Vec<MetaEntry>,
    pub(crate) meta_index: HashMap<String, usize>,
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) tensor_index: HashMap<String, usize>,
    pub(crate) alignment: u64,
    pub(crate) data_offset: u64,
}

pub(crate) fn parse(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor::new(buf);
    let magic = c.bytes(4, &|| "magic".into())?;
    if magic != b"GGUF" {
        return Err(GgufError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = c.u32(&|| "version".into())?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(GgufError::UnsupportedVersion {
                version,
                hint: "; GGUF v1 used 32-bit counts: convert the file with a current llama.cpp",
            })
        }
        v if v & 0xffff == 0 && matches!(v.swap_bytes(), 1..=3) => {
            return Err(GgufError::BigEndian { raw: v })
        }
        _ => return Err(GgufError::UnsupportedVersion { version, hint: "" }),
    }
    // Smallest tensor info: name length (8) + n_dims (4) + type (4) + offset (8).
    let n_tensors = c.count(24, &|| "tensor count".into())?;
    // Smallest key/value: key length (8) + type (4) + a one-byte value.
    let n_kv = c.count(13, &|| "metadata count".into())?;

    // Counts are bounded by the file size already; cap the up-front reservation anyway so a
    // small hostile file cannot make a large one.
    let mut metadata = Vec::with_capacity(n_kv.min(PREALLOC_CAP) as usize);
    let mut meta_index = HashMap::with_capacity(n_kv.min(PREALLOC_CAP) as usize);
    for i in 0..n_kv {
        let at = c.pos() as u64;
        let key = c.utf8(&|| format!("metadata key #{i}"))?.to_string();
        let type_at = c.pos() as u64;
        let type_id = c.u32(&|| format!("type of metadata key {key:?}"))?;
        let value_type =
            ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
                type_id,
                offset: type_at,
                key: key.clone(),
            })?;
        let start = c.pos();
        skip_value(&mut c, value_type, &key, 0)?;
        let range = start..c.pos();
        if meta_index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key, offset: at });
        }
        meta_index.insert(key.clone(), metadata.len());
        metadata.push(MetaEntry {
            key,
            value_type,
            range,
        });
    }

    let alignment = match meta_index.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(&i) => {
            let e = &metadata[i];
            let raw = &buf[e.range.clone()];
            let v = match crate::value::decode_validated(e.value_type, raw).map(|(v, _)| v) {
                Some(v) => v,
                None => return Err(GgufError::BadAlignment(0)),
            };
            let a = v.as_integer().ok_or_else(|| GgufError::WrongType {
                key: "general.alignment".into(),
                expected: "an unsigned integer",
                found: v.type_description(),
            })?;
            if a <= 0 || a > u32::MAX as i128 || (a as u64).count_ones() != 1 {
                return Err(GgufError::BadAlignment(a.clamp(0, u64::MAX as i128) as u64));
            }
            a as u64
        }
    };

    let mut tensors = Vec::with_capacity(n_tensors.min(PREALLOC_CAP) as usize);
    let mut tensor_index = HashMap::with_capacity(n_tensors.min(PREALLOC_CAP) as usize);
    for i in 0..n_tensors {
        let at = c.pos() as u64;
        let name = c.utf8(&|| format!("name of tensor #{i}"))?.to_string();
        let nd_at = c.pos() as u64;
        let n_dims = c.u32(&|| format!("dimension count of tensor {name:?}"))? as usize;
        if n_dims > MAX_DIMS {
            return Err(GgufError::BadShape {
                name,
                reason: format!(
                    "{n_dims} dimensions at offset {nd_at}, at most {MAX_DIMS} allowed"
                ),
            });
        }
        let mut dims = [1u64; MAX_DIMS];
        for (d, dim) in dims.iter_mut().enumerate().take(n_dims) {
            *dim = c.u64(&|| format!("dimension {d} of tensor {name:?}"))?;
            if *dim > i64::MAX as u64 {
                return Err(GgufError::BadShape {
                    name,
                    reason: format!("dimension {d} is {}, larger than ggml allows", *dim),
                });
            }
        }
        let ty_at = c.pos() as u64;
        let type_id = c.u32(&|| format!("type of tensor {name:?}"))?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            name: name.clone(),
            type_id,
            offset: ty_at,
        })?;
        let offset = c.u64(&|| format!("data offset of tensor {name:?}"))?;

        dims[..n_dims]
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| GgufError::BadShape {
                name: name.clone(),
                reason: format!(
                    "shape {:?} has more elements than ggml allows",
                    &dims[..n_dims]
                ),
            })?;
        let row = ggml_type
            .row_bytes(dims[0])
            .ok_or_else(|| GgufError::BadShape {
                name: name.clone(),
                reason: format!(
                    "row of {} elements is not a whole number of {} blocks ({} elements each)",
                    dims[0],
                    ggml_type,
                    ggml_type.block_size()
                ),
            })?;
        let n_bytes = dims[1..]
            .iter()
            .try_fold(row, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| GgufError::BadShape {
                name: name.clone(),
                reason: format!("shape {:?} overflows its byte size", &dims[..n_dims]),
            })?;
        if offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                name,
                offset,
                alignment,
            });
        }
        if tensor_index.contains_key(&name) {
            return Err(GgufError::DuplicateTensor { name, offset: at });
        }
        tensor_index.insert(name.clone(), tensors.len());
        tensors.push(TensorInfo {
            name,
            n_dims,
            dims,
            ggml_type,
            offset,
            start: 0,
            n_bytes,
        });
    }

    let header_end = c.pos() as u64;
    let file_len = buf.len() as u64;
    let data_offset = header_end.div_ceil(alignment) * alignment;

    for t in tensors.iter_mut() {
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= file_len => t.start = s,
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    name: t.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    data_start: data_offset,
                    file_len,
                })
            }
        }
    }
    // No two tensors may share bytes.
    let mut order: Vec<usize> = (0..tensors.len())
        .filter(|&i| tensors[i].n_bytes > 0)
        .collect();
    order.sort_by_key(|&i| tensors[i].start);
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        if b.start < a.start + a.n_bytes {
            return Err(GgufError::TensorOverlap {
                first: a.name.clone(),
                second: b.name.clone(),
                offset: b.start,
            });
        }
    }

    Ok(Header {
        version,
        metadata,
        meta_index,
        tensors,
        tensor_index,
        alignment,
        data_offset,
    })
}

/// Walk over one value, checking every length against the file.
fn skip_value(c: &mut Cursor<'_>, t: ValueType, key: &str, depth: usize) -> Result<()> {
    match t {
        ValueType::String => {
            c.string(&|| format!("string value of {key:?}"))?;
        }
        ValueType::Array => {
            if depth >= MAX_ARRAY_NESTING {
                return Err(GgufError::NestingTooDeep {
                    key: key.into(),
                    offset: c.pos() as u64,
                    max: MAX_ARRAY_NESTING,
                });
            }
            let type_at = c.pos() as u64;
            let type_id = c.u32(&|| format!("element type of array {key:?}"))?;
            let et = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
                type_id,
                offset: type_at,
                key: key.into(),
            })?;
            let n = c.count(et.min_size(), &|| format!("length of array {key:?}"))?;
            match et.scalar_size() {
                Some(sz) => {
                    c.bytes(n * sz as u64, &|| format!("elements of array {key:?}"))?;
                }
                None => {
                    for _ in 0..n {
                        skip_value(c, et, key, depth + 1)?;
                    }
                }
            }
        }
        scalar => {
            let sz = scalar.scalar_size().unwrap_or(1) as u64;
            c.bytes(sz, &|| format!("{} value of {key:?}", scalar.name()))?;
        }
    }
    Ok(())
}
