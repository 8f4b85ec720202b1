//! `Tensor`: a dtype, a shape and the storage holding its bytes (owned and 64-byte aligned, or
//! shared with an `Arc` owner such as the model's memory map). Quantized weights stay in their
//! block format; nothing here expands them to f32 except the explicit [`Tensor::to_f32_vec`].

use std::ops::Range;

use half::f16;

use crate::error::{Result, TensorError};
use crate::storage::{AlignedBuf, ByteOwner, Storage};
use crate::{DType, Shape};

/// A tensor: `shape.n_rows()` rows of `shape.row_len()` elements of `dtype`, rows packed.
#[derive(Clone, Debug)]
pub struct Tensor {
    dtype: DType,
    shape: Shape,
    storage: Storage,
}

/// Bytes a `dtype` tensor of `shape` takes.
fn byte_len(dtype: DType, shape: Shape) -> Result<usize> {
    let row = dtype
        .row_bytes(shape.row_len())
        .ok_or(TensorError::PartialBlock {
            dtype,
            row_len: shape.row_len(),
            block_size: dtype.block_size(),
        })?;
    row.checked_mul(shape.n_rows())
        .ok_or_else(|| TensorError::InvalidShape {
            dims: shape.dims().to_vec(),
            why: "byte size overflows",
        })
}

impl Tensor {
    /// An owned tensor of zero bytes (0.0 for the float types).
    pub fn zeros(dtype: DType, shape: Shape) -> Result<Tensor> {
        let n = byte_len(dtype, shape)?;
        Ok(Tensor {
            dtype,
            shape,
            storage: Storage::Owned(AlignedBuf::zeroed(n)),
        })
    }

    /// An owned F32 tensor holding `data`.
    pub fn from_f32(shape: Shape, data: &[f32]) -> Result<Tensor> {
        if data.len() != shape.elem_count() {
            return Err(TensorError::LengthMismatch {
                op: "Tensor::from_f32",
                what: "data",
                expected: shape.elem_count(),
                actual: data.len(),
            });
        }
        let mut t = Tensor::zeros(DType::F32, shape)?;
        t.as_f32_mut()?.copy_from_slice(data);
        Ok(t)
    }

    /// An owned tensor holding a copy of `bytes` (raw little-endian blocks or elements).
    pub fn from_bytes(dtype: DType, shape: Shape, bytes: &[u8]) -> Result<Tensor> {
        let n = byte_len(dtype, shape)?;
        if bytes.len() != n {
            return Err(TensorError::LengthMismatch {
                op: "Tensor::from_bytes",
                what: "bytes",
                expected: n,
                actual: bytes.len(),
            });
        }
        let mut buf = AlignedBuf::zeroed(n);
        buf.as_bytes_mut().copy_from_slice(bytes);
        Ok(Tensor {
            dtype,
            shape,
            storage: Storage::Owned(buf),
        })
    }

    /// A read-only tensor viewing `owner.as_ref()[offset..offset + size]`, where size is what
    /// `dtype` and `shape` take. Nothing is copied; `owner` (e.g. an `Arc` of the model's memory
    /// map) keeps the bytes alive. The bytes may sit at any alignment (kernels handle it; typed
    /// access such as [`Tensor::as_f32`] then errors with `Misaligned`).
    pub fn from_shared(
        dtype: DType,
        shape: Shape,
        owner: ByteOwner,
        offset: usize,
    ) -> Result<Tensor> {
        let needed = byte_len(dtype, shape)?;
        let owner_len = (*owner).as_ref().len();
        let end = offset.saturating_add(needed);
        if end > owner_len {
            return Err(TensorError::BadRange {
                start: offset,
                end,
                owner_len,
                needed,
            });
        }
        Ok(Tensor {
            dtype,
            shape,
            storage: Storage::Shared {
                owner,
                range: Range { start: offset, end },
            },
        })
    }

    /// This tensor with its bytes behind an `Arc` (read-only from now on), so clones share
    /// them instead of copying (a tensor made once and handed to several plans).
    pub fn into_shared(self) -> Tensor {
        match self.storage {
            Storage::Owned(buf) => {
                let end = buf.len();
                let owner: ByteOwner = std::sync::Arc::new(buf);
                Tensor {
                    dtype: self.dtype,
                    shape: self.shape,
                    storage: Storage::Shared {
                        owner,
                        range: Range { start: 0, end },
                    },
                }
            }
            shared => Tensor {
                storage: shared,
                ..self
            },
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The storage.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.storage.as_bytes().len()
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        // Checked at construction.
        self.dtype.row_bytes(self.shape.row_len()).unwrap_or(0)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.as_bytes()
    }

    /// The raw bytes, mutably; `ReadOnly` for shared storage.
    pub fn as_bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.storage
            .as_bytes_mut()
            .ok_or(TensorError::ReadOnly { op: "as_bytes_mut" })
    }

    /// Row `i`'s bytes, if in range.
    pub fn row(&self, i: usize) -> Option<&[u8]> {
        let rb = self.row_bytes();
        let start = i.checked_mul(rb)?;
        self.as_bytes().get(start..start.checked_add(rb)?)
    }

    /// Same bytes, another shape with the same element count.
    pub fn reshape(self, shape: Shape) -> Result<Tensor> {
        if shape.elem_count() != self.shape.elem_count()
            || self.dtype.row_bytes(shape.row_len()).is_none()
        {
            return Err(TensorError::ShapeMismatch {
                op: "reshape",
                what: "new shape",
                expected: self.shape,
                actual: shape,
            });
        }
        Ok(Tensor { shape, ..self })
    }

    fn check_dtype(&self, op: &'static str, want: DType) -> Result<()> {
        if self.dtype != want {
            return Err(TensorError::UnsupportedDType {
                op,
                dtype: self.dtype,
            });
        }
        Ok(())
    }

    /// The elements of an F32 tensor.
    pub fn as_f32(&self) -> Result<&[f32]> {
        self.check_dtype("as_f32", DType::F32)?;
        bytemuck::try_cast_slice(self.as_bytes()).map_err(|_| TensorError::Misaligned {
            op: "as_f32",
            dtype: self.dtype,
        })
    }

    /// The elements of an owned F32 tensor, mutably.
    pub fn as_f32_mut(&mut self) -> Result<&mut [f32]> {
        self.check_dtype("as_f32_mut", DType::F32)?;
        let dtype = self.dtype;
        let bytes = self
            .storage
            .as_bytes_mut()
            .ok_or(TensorError::ReadOnly { op: "as_f32_mut" })?;
        bytemuck::try_cast_slice_mut(bytes).map_err(|_| TensorError::Misaligned {
            op: "as_f32_mut",
            dtype,
        })
    }

    /// The elements of an F16 tensor.
    pub fn as_f16(&self) -> Result<&[f16]> {
        self.check_dtype("as_f16", DType::F16)?;
        bytemuck::try_cast_slice(self.as_bytes()).map_err(|_| TensorError::Misaligned {
            op: "as_f16",
            dtype: self.dtype,
        })
    }

    /// The elements of an owned F16 tensor, mutably.
    pub fn as_f16_mut(&mut self) -> Result<&mut [f16]> {
        self.check_dtype("as_f16_mut", DType::F16)?;
        let dtype = self.dtype;
        let bytes = self
            .storage
            .as_bytes_mut()
            .ok_or(TensorError::ReadOnly { op: "as_f16_mut" })?;
        bytemuck::try_cast_slice_mut(bytes).map_err(|_| TensorError::Misaligned {
            op: "as_f16_mut",
            dtype,
        })
    }

    /// All elements dequantized to a new `Vec<f32>` (tests, debugging, small tensors; never
    /// used for weights on the inference path).
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.shape.elem_count()];
        kestrel_gguf::quant::dequantize(self.dtype.ggml_type(), self.as_bytes(), &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn shared_storage_borrows_without_copying() {
        let bytes: Vec<u8> = (0..200u8).collect();
        let owner: ByteOwner = Arc::new(bytes);
        let base = (*owner).as_ref().as_ptr() as usize;
        // One Q4_0 row of 64 values = 36 bytes at offset 10.
        let t = Tensor::from_shared(DType::Q4_0, Shape::vector(64), owner.clone(), 10).unwrap();
        assert_eq!(t.nbytes(), 36);
        assert_eq!(t.as_bytes().as_ptr() as usize, base + 10);
        assert!(t.storage().is_shared());
        let mut t2 = t.clone();
        assert!(matches!(
            t2.as_bytes_mut(),
            Err(TensorError::ReadOnly { .. })
        ));
        // Out of bounds and partial blocks are refused.
        assert!(matches!(
            Tensor::from_shared(DType::Q4_0, Shape::vector(64), owner.clone(), 190),
            Err(TensorError::BadRange { .. })
        ));
        assert!(matches!(
            Tensor::from_shared(DType::Q4_0, Shape::vector(33), owner.clone(), 0),
            Err(TensorError::PartialBlock { .. })
        ));
        assert!(Tensor::from_shared(DType::F32, Shape::vector(4), owner, usize::MAX).is_err());
    }

    #[test]
    fn owned_f32_round_trips() {
        let s = Shape::matrix(2, 3).unwrap();
        let t = Tensor::from_f32(s, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(t.as_bytes().as_ptr() as usize % 64, 0);
        assert_eq!(t.as_f32().unwrap()[4], 5.0);
        assert_eq!(t.row(1).unwrap().len(), 12);
        assert!(t.row(2).is_none());
        assert_eq!(t.to_f32_vec().unwrap()[5], 6.0);
        assert!(t.as_f16().is_err());
        let t = t.reshape(Shape::vector(6)).unwrap();
        assert_eq!(t.shape().dims(), &[6]);
        assert!(Tensor::from_f32(s, &[1.0]).is_err());
    }
}
