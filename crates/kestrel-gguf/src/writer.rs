//! `GgufWriter`: writes GGUF v3 (or v2) files: metadata, tensor infos, aligned tensor data.
//! Used by tests to build synthetic models and hostile files, and by the quantize tool.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use crate::error::{GgufError, Result};
use crate::parse::DEFAULT_ALIGNMENT;
use crate::tensor_info::MAX_DIMS;
use crate::value::MetadataValue;
use crate::{GgmlType, GgufStreamWriter, TensorSpec};

struct PendingTensor {
    name: String,
    ggml_type: GgmlType,
    dims: Vec<u64>,
    data: Vec<u8>,
}

/// Builds a GGUF file in memory and writes it out.
///
/// ```
/// use kestrel_gguf::{GgufFile, GgufWriter, GgmlType};
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", "llama");
/// w.add_tensor("x", GgmlType::F32, &[2], 1.5f32.to_le_bytes().repeat(2)).unwrap();
/// let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
/// assert_eq!(f.metadata().architecture().unwrap(), "llama");
/// assert_eq!(f.tensor("x").unwrap().data.len(), 8);
/// ```
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// A writer for a GGUF v3 file with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Write version 2 or 3.
    pub fn set_version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Align tensor data to `alignment` bytes (a power of two); written as `general.alignment`
    /// when not the default.
    pub fn set_alignment(&mut self, alignment: u64) -> &mut Self {
        self.alignment = alignment;
        self
    }

    /// Add (or replace) a metadata key.
    pub fn add_metadata(&mut self, key: &str, value: impl Into<MetadataValue>) -> &mut Self {
        let value = value.into();
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(e) => e.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
        self
    }

    /// Add a tensor whose `data` holds exactly its bytes in `ggml_type`.
    pub fn add_tensor(
        &mut self,
        name: &str,
        ggml_type: GgmlType,
        dims: &[u64],
        data: impl Into<Vec<u8>>,
    ) -> Result<&mut Self> {
        let data = data.into();
        let bad = |reason: String| GgufError::InvalidWrite(format!("tensor {name:?}: {reason}"));
        if dims.len() > MAX_DIMS {
            return Err(bad(format!(
                "{} dimensions, at most {MAX_DIMS}",
                dims.len()
            )));
        }
        let row = ggml_type
            .row_bytes(dims.first().copied().unwrap_or(1))
            .ok_or_else(|| {
                bad(format!(
                    "row length is not a whole number of {ggml_type} blocks"
                ))
            })?;
        let n_bytes = dims
            .iter()
            .skip(1)
            .try_fold(row, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad("byte size overflows".into()))?;
        if n_bytes != data.len() as u64 {
            return Err(bad(format!(
                "{} data bytes, the shape needs {n_bytes}",
                data.len()
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(bad("duplicate name".into()));
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            ggml_type,
            dims: dims.to_vec(),
            data,
        });
        Ok(self)
    }

    /// Add an f32 tensor from values.
    pub fn add_f32_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        values: &[f32],
    ) -> Result<&mut Self> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, GgmlType::F32, dims, bytes)
    }

    fn check(&self) -> Result<()> {
        if !matches!(self.version, 2 | 3) {
            return Err(GgufError::InvalidWrite(format!(
                "version {} (2 or 3)",
                self.version
            )));
        }
        if self.alignment == 0
            || !self.alignment.is_power_of_two()
            || self.alignment > u32::MAX as u64
        {
            return Err(GgufError::InvalidWrite(format!(
                "alignment {}",
                self.alignment
            )));
        }
        let mut keys = HashSet::new();
        for (k, v) in &self.metadata {
            if !keys.insert(k) {
                return Err(GgufError::InvalidWrite(format!("duplicate key {k:?}")));
            }
            check_value(k, v, 0)?;
        }
        Ok(())
    }

    fn full_metadata(&self) -> Vec<(String, MetadataValue)> {
        let mut md = self.metadata.clone();
        if self.alignment != DEFAULT_ALIGNMENT && !md.iter().any(|(k, _)| k == "general.alignment")
        {
            md.push((
                "general.alignment".into(),
                MetadataValue::U32(self.alignment as u32),
            ));
        }
        md
    }

    /// Write the file to `w`.
    pub fn write_to(&self, w: &mut impl Write) -> Result<()> {
        self.check()?;
        let md = self.full_metadata();
        let specs: Vec<TensorSpec> = self
            .tensors
            .iter()
            .map(|t| TensorSpec {
                name: t.name.clone(),
                ggml_type: t.ggml_type,
                dims: t.dims.clone(),
            })
            .collect();
        let mut s = GgufStreamWriter::with_version(w, self.version, self.alignment, &md, &specs)?;
        for t in &self.tensors {
            s.write(&t.data)?;
        }
        s.finish()?;
        Ok(())
    }

    /// The file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }

    /// Write the file to `path` (through a temporary file renamed into place).
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let tmp = path.with_extension("gguf.tmp");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io)?);
        self.write_to(&mut f)?;
        f.flush().map_err(io)?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io)
    }
}

pub(crate) fn check_value(key: &str, v: &MetadataValue, depth: usize) -> Result<()> {
    if let MetadataValue::Array {
        element_type,
        items,
    } = v
    {
        if depth + 1 > crate::parse::MAX_ARRAY_NESTING {
            return Err(GgufError::InvalidWrite(format!(
                "{key:?}: arrays nested too deep"
            )));
        }
        for it in items {
            if it.value_type() != *element_type {
                return Err(GgufError::InvalidWrite(format!(
                    "{key:?}: array of {element_type} holds a {}",
                    it.value_type()
                )));
            }
            check_value(key, it, depth + 1)?;
        }
    }
    Ok(())
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn put_value(out: &mut Vec<u8>, v: &MetadataValue) {
    match v {
        MetadataValue::U8(x) => out.push(*x),
        MetadataValue::I8(x) => out.push(*x as u8),
        MetadataValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::Bool(x) => out.push(u8::from(*x)),
        MetadataValue::String(s) => put_str(out, s),
        MetadataValue::Array {
            element_type,
            items,
        } => {
            out.extend_from_slice(&(*element_type as u32).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                put_value(out, it);
            }
        }
        MetadataValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}
