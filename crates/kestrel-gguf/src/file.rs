//! `GgufFile`: one GGUF file, memory-mapped (or read into memory), validated on open, with
//! zero-copy tensor views.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{GgufError, Result};
use crate::metadata::Metadata;
use crate::parse::{parse, Header};
use crate::tensor_info::{TensorInfo, TensorView};

/// How to open a file.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Memory-map the file (default). When false, the whole file is read into memory.
    pub mmap: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { mmap: true }
    }
}

/// Where the file's bytes live.
enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// An open, validated GGUF file.
///
/// Opening checks the whole header: every count, string, array and tensor extent is
/// bounds-checked against the file, so later accessors cannot fail on a hostile file.
///
/// ```no_run
/// # fn main() -> Result<(), kestrel_gguf::GgufError> {
/// let f = kestrel_gguf::GgufFile::open("model.gguf")?;
/// println!("{} with {} tensors", f.metadata().architecture()?, f.tensors().len());
/// let embd = f.tensor("token_embd.weight")?;
/// println!("{:?} {} bytes", embd.info.dims(), embd.data.len());
/// # Ok(()) }
/// ```
///
/// Memory-mapping is the usual caveat: if another process truncates or rewrites the file
/// while it is open, reads of the changed bytes may fault.
pub struct GgufFile {
    path: Option<PathBuf>,
    backing: Backing,
    header: Header,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.header.version)
            .field("metadata", &self.header.metadata.len())
            .field("tensors", &self.header.tensors.len())
            .finish()
    }
}

impl AsRef<[u8]> for GgufFile {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

impl GgufFile {
    /// Open and memory-map a file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Open a file with options.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            // A directory, FIFO or device has no length to check the header against.
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let len = meta.len();
        let backing = if opts.mmap && len > 0 {
            // SAFETY: the map is read-only; the type's docs state the caveat about other
            // processes changing the file while it is mapped, as every mmap-based reader has.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            Backing::Mmap(map)
        } else {
            Backing::Owned(std::fs::read(path).map_err(io)?)
        };
        let header = parse(backing.bytes())?;
        Ok(GgufFile {
            path: Some(path.to_path_buf()),
            backing,
            header,
        })
    }

    /// Parse a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let header = parse(&bytes)?;
        Ok(GgufFile {
            path: None,
            backing: Backing::Owned(bytes),
            header,
        })
    }

    /// The path it was opened from (`None` for [`from_bytes`](Self::from_bytes)).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// True when the bytes are memory-mapped.
    pub fn is_mmapped(&self) -> bool {
        matches!(self.backing, Backing::Mmap(_))
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Alignment of tensor data (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Absolute offset where the tensor data section starts.
    pub fn data_offset(&self) -> u64 {
        self.header.data_offset
    }

    /// The key/value metadata.
    pub fn metadata(&self) -> Metadata<'_> {
        Metadata {
            entries: &self.header.metadata,
            index: &self.header.meta_index,
            buf: self.backing.bytes(),
        }
    }

    /// Every tensor, in header order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    /// A tensor's description by name.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.header
            .tensor_index
            .get(name)
            .map(|&i| &self.header.tensors[i])
    }

    /// A tensor and its bytes, or [`GgufError::MissingTensor`].
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| GgufError::MissingTensor { name: name.into() })?;
        Ok(self.view(info))
    }

    /// The bytes of a tensor described by this file's header.
    pub fn view<'a>(&'a self, info: &'a TensorInfo) -> TensorView<'a> {
        let start = info.start as usize;
        let end = start + info.n_bytes as usize;
        // Extents were checked against the file length when it was opened.
        let data = self.backing.bytes().get(start..end).unwrap_or_default();
        TensorView { info, data }
    }

    /// Total bytes of tensor data.
    pub fn tensor_bytes(&self) -> u64 {
        self.header.tensors.iter().map(|t| t.n_bytes).sum()
    }

    /// Total number of tensor elements (parameters).
    pub fn n_params(&self) -> u64 {
        self.header.tensors.iter().map(|t| t.n_elements()).sum()
    }
}
