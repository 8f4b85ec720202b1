//! `Storage`: where a tensor's bytes live. Either owned by the tensor (activations, scratch; 64-byte
//! aligned so any element type and SIMD load can read it in place) or a byte range of a buffer
//! kept alive by an `Arc` (weights pointing into the mmapped model file, without a borrowed
//! lifetime, so a model can own both the mapping and the tensors that view it).

use std::ops::Range;
use std::sync::Arc;

/// Alignment of owned storage, in bytes.
pub const ALIGN: usize = 64;

/// One 64-byte, 64-aligned chunk of an [`AlignedBuf`].
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk([u8; ALIGN]);

// SAFETY: `Chunk` is a byte array with no padding (size 64 == alignment 64); every bit pattern is
// valid and zero is a valid value.
unsafe impl bytemuck::Zeroable for Chunk {}
// SAFETY: as above; `Copy`, `repr(C)`, no padding, no pointers.
unsafe impl bytemuck::Pod for Chunk {}

/// A zero-initialized byte buffer whose start is 64-byte aligned.
#[derive(Clone, Default)]
pub struct AlignedBuf {
    chunks: Vec<Chunk>,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        AlignedBuf {
            chunks: vec![Chunk([0; ALIGN]); len.div_ceil(ALIGN)],
            len,
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<Chunk, u8>(&self.chunks)[..self.len]
    }

    /// The bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<Chunk, u8>(&mut self.chunks)[..self.len]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// A byte owner that shared storage can point into (a `memmap2::Mmap`, a `Vec<u8>`, ...).
pub type ByteOwner = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// The bytes behind a tensor.
#[derive(Clone)]
pub enum Storage {
    /// Bytes the tensor owns, 64-byte aligned.
    Owned(AlignedBuf),
    /// `owner.as_ref()[range]`, read-only; `owner` keeps the bytes alive.
    Shared {
        /// Keeps the bytes alive (typically the model's memory map).
        owner: ByteOwner,
        /// The tensor's bytes within `owner` (checked in bounds at construction).
        range: Range<usize>,
    },
}

impl Storage {
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Storage::Owned(b) => b.as_bytes(),
            Storage::Shared { owner, range } => {
                let all = (**owner).as_ref();
                // The range was checked at construction; an owner whose `as_ref` shrank later
                // gives an empty slice rather than a panic.
                all.get(range.clone()).unwrap_or(&[])
            }
        }
    }

    /// The bytes, mutably, if owned.
    pub fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Storage::Owned(b) => Some(b.as_bytes_mut()),
            Storage::Shared { .. } => None,
        }
    }

    /// True for shared (borrowed, read-only) storage.
    pub fn is_shared(&self) -> bool {
        matches!(self, Storage::Shared { .. })
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::Owned(b) => write!(f, "Owned({} bytes)", b.len()),
            Storage::Shared { range, .. } => write!(f, "Shared({range:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_is_aligned_and_zeroed() {
        for len in [0, 1, 63, 64, 65, 1000] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_bytes().len(), len);
            assert_eq!(b.as_bytes().as_ptr() as usize % ALIGN, 0);
            assert!(b.as_bytes().iter().all(|&x| x == 0));
        }
    }
}
