//! `GgufStreamWriter`: writes a GGUF file whose tensor data arrives one tensor at a time (the
//! quantizer's output), so a model never sits in memory whole. The header (metadata and every
//! tensor's name, type, shape and offset) is written first from the tensors' specs; then each
//! tensor's bytes, in order, each padded to the alignment.

use std::io::Write;

use crate::error::{GgufError, Result};
use crate::tensor_info::MAX_DIMS;
use crate::value::MetadataValue;
use crate::writer::{check_value, put_str, put_value};
use crate::GgmlType;

/// A tensor to be written: name, type and ggml dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// Its name.
    pub name: String,
    /// Its type.
    pub ggml_type: GgmlType,
    /// Its ggml dims (`ne`).
    pub dims: Vec<u64>,
}

impl TensorSpec {
    /// Bytes of its data (`None` for a shape its type cannot hold).
    pub fn n_bytes(&self) -> Option<u64> {
        let row = self
            .ggml_type
            .row_bytes(self.dims.first().copied().unwrap_or(1))?;
        self.dims
            .iter()
            .skip(1)
            .try_fold(row, |a, &d| a.checked_mul(d))
    }
}

/// Writes a GGUF v3 file: [`new`](Self::new) writes the header, [`write`](Self::write) each
/// tensor's bytes in the order of the specs (in as many pieces as wanted),
/// [`finish`](Self::finish) checks that every tensor got exactly its bytes.
///
/// ```
/// use kestrel_gguf::{GgmlType, GgufFile, GgufStreamWriter, MetadataValue, TensorSpec};
/// let md = vec![("general.architecture".to_string(), MetadataValue::String("llama".into()))];
/// let t = TensorSpec { name: "x".into(), ggml_type: GgmlType::F32, dims: vec![3] };
/// let mut w = GgufStreamWriter::new(Vec::new(), 32, &md, &[t]).unwrap();
/// w.write(&1f32.to_le_bytes()).unwrap();
/// w.write(&[0u8; 8]).unwrap();
/// let bytes = w.finish().unwrap();
/// assert_eq!(GgufFile::from_bytes(bytes).unwrap().tensor("x").unwrap().data.len(), 12);
/// ```
pub struct GgufStreamWriter<W: Write> {
    w: W,
    alignment: u64,
    sizes: Vec<u64>,
    /// The tensor being written and the bytes it has so far.
    current: usize,
    written: u64,
}

impl<W: Write> GgufStreamWriter<W> {
    /// Writes the header of a file with `metadata` (in order, as given) and `tensors`, data
    /// aligned to `alignment` bytes (a power of two; `general.alignment` is not added here).
    pub fn new(
        w: W,
        alignment: u64,
        metadata: &[(String, MetadataValue)],
        tensors: &[TensorSpec],
    ) -> Result<Self> {
        Self::with_version(w, 3, alignment, metadata, tensors)
    }

    /// [`new`](Self::new) for GGUF version 2 or 3.
    pub(crate) fn with_version(
        mut w: W,
        version: u32,
        alignment: u64,
        metadata: &[(String, MetadataValue)],
        tensors: &[TensorSpec],
    ) -> Result<Self> {
        let (mut head, sizes) = header(version, alignment, metadata, tensors)?;
        let pad = (head.len() as u64).div_ceil(alignment) * alignment - head.len() as u64;
        head.resize(head.len() + pad as usize, 0);
        w.write_all(&head).map_err(GgufError::Write)?;
        Ok(GgufStreamWriter {
            w,
            alignment,
            sizes,
            current: 0,
            written: 0,
        })
    }

    /// Writes a file of `metadata` and no tensors, ending right after the metadata (no
    /// padding: gguf-py's vocabulary-only files), and returns the sink.
    pub fn metadata_only(mut w: W, metadata: &[(String, MetadataValue)]) -> Result<W> {
        let (head, _) = header(3, crate::DEFAULT_ALIGNMENT, metadata, &[])?;
        w.write_all(&head).map_err(GgufError::Write)?;
        w.flush().map_err(GgufError::Write)?;
        Ok(w)
    }

    /// Appends `data` to the current tensor's bytes, moving on (after the padding) once it has
    /// them all; a piece may not run past the current tensor.
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        let Some(&size) = self.sizes.get(self.current) else {
            return Err(GgufError::InvalidWrite(
                "more tensor data than the tensors hold".into(),
            ));
        };
        if self.written + data.len() as u64 > size {
            return Err(GgufError::InvalidWrite(format!(
                "tensor {}: {} bytes written, it holds {size}",
                self.current,
                self.written + data.len() as u64
            )));
        }
        self.w.write_all(data).map_err(GgufError::Write)?;
        self.written += data.len() as u64;
        if self.written == size {
            let pad = size.div_ceil(self.alignment) * self.alignment - size;
            self.w
                .write_all(&vec![0u8; pad as usize])
                .map_err(GgufError::Write)?;
            self.current += 1;
            self.written = 0;
            // Tensors of no bytes are complete at once.
            while self.sizes.get(self.current) == Some(&0) {
                self.current += 1;
            }
        }
        Ok(())
    }

    /// Checks that every tensor got its bytes and returns the sink.
    pub fn finish(mut self) -> Result<W> {
        while self.sizes.get(self.current) == Some(&0) {
            self.current += 1;
        }
        if self.current != self.sizes.len() {
            return Err(GgufError::InvalidWrite(format!(
                "{} of {} tensors written",
                self.current,
                self.sizes.len()
            )));
        }
        self.w.flush().map_err(GgufError::Write)?;
        Ok(self.w)
    }
}

/// The header of a file (unpadded): magic, version, counts, metadata, tensor infos; and each
/// tensor's data size.
fn header(
    version: u32,
    alignment: u64,
    metadata: &[(String, MetadataValue)],
    tensors: &[TensorSpec],
) -> Result<(Vec<u8>, Vec<u64>)> {
    let bad = |why: String| GgufError::InvalidWrite(why);

    if alignment == 0 || !alignment.is_power_of_two() || alignment > u32::MAX as u64 {
        return Err(bad(format!("alignment {alignment}")));
    }
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&version.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    let mut keys = std::collections::HashSet::new();
    for (k, v) in metadata {
        if !keys.insert(k) {
            return Err(bad(format!("duplicate key {k:?}")));
        }
        check_value(k, v, 0)?;
        put_str(&mut head, k);
        head.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
        put_value(&mut head, v);
    }
    let mut names = std::collections::HashSet::new();
    let mut sizes = Vec::with_capacity(tensors.len());
    let mut offset = 0u64;
    for t in tensors {
        if !names.insert(&t.name) {
            return Err(bad(format!("duplicate tensor {:?}", t.name)));
        }
        if t.dims.len() > MAX_DIMS {
            return Err(bad(format!("tensor {:?}: {} dims", t.name, t.dims.len())));
        }
        let n = t.n_bytes().ok_or_else(|| {
            bad(format!(
                "tensor {:?}: dims {:?} do not fit {}",
                t.name, t.dims, t.ggml_type
            ))
        })?;
        put_str(&mut head, &t.name);
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&t.ggml_type.id().to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + n).div_ceil(alignment) * alignment;
        sizes.push(n);
    }
    Ok((head, sizes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_only_files_end_after_the_metadata_and_read_back() {
        let md = vec![(
            "general.name".to_string(),
            MetadataValue::String("v".into()),
        )];
        let bytes = GgufStreamWriter::metadata_only(Vec::new(), &md).unwrap();
        // magic, version, counts, then one key: 8-byte length, "general.name", type, string.
        assert_eq!(bytes.len(), 4 + 4 + 8 + 8 + (8 + 12) + 4 + (8 + 1));
        let f = crate::GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(f.tensors().len(), 0);
        assert_eq!(f.metadata().get_str("general.name").unwrap(), "v");
    }
}
