//! `GgufModel`: a model that may be split over several files (`name-00001-of-00003.gguf`, as
//! llama.cpp's gguf-split writes them), opened as one from any of its shard paths.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{GgufError, Result};
use crate::file::{GgufFile, OpenOptions};
use crate::metadata::Metadata;
use crate::tensor_info::{TensorInfo, TensorView};

/// `split.no`: this shard's index, from 0.
pub const KEY_SPLIT_NO: &str = "split.no";
/// `split.count`: how many shards.
pub const KEY_SPLIT_COUNT: &str = "split.count";
/// `split.tensors.count`: tensors over all shards.
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// The most shards a split model may have (gguf-split numbers them with 5 digits).
pub const MAX_SHARDS: usize = 99_999;

/// One logical model: a single file, or every shard of a split model.
///
/// Metadata comes from the first shard; tensors from all of them.
#[derive(Debug)]
pub struct GgufModel {
    shards: Vec<Arc<GgufFile>>,
    /// tensor name → (shard, index in that shard)
    index: HashMap<String, (usize, usize)>,
}

/// Parse `prefix-00002-of-00005.gguf` into (prefix, 2, 5).
pub fn parse_split_path(path: &Path) -> Option<(PathBuf, usize, usize)> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    if no.len() != 5 || count.len() != 5 || prefix.is_empty() {
        return None;
    }
    let no: usize = no.parse().ok()?;
    let count: usize = count.parse().ok()?;
    if no == 0 || no > count {
        return None;
    }
    Some((path.with_file_name(prefix), no, count))
}

/// The path of shard `no` (from 1) of `count`, as gguf-split names it.
pub fn split_path(prefix: &Path, no: usize, count: usize) -> PathBuf {
    let name = format!(
        "{}-{no:05}-of-{count:05}.gguf",
        prefix
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("model")
    );
    prefix.with_file_name(name)
}

impl GgufModel {
    /// Open a model from a plain file or from any shard of a split model.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, OpenOptions::default())
    }

    /// Open with options.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self> {
        let path = path.as_ref();
        let first = GgufFile::open_with(path, opts)?;
        let declared = first
            .metadata()
            .opt(KEY_SPLIT_COUNT, |m, k| m.get_usize(k))?;
        let split_err = |p: &Path, reason: String| GgufError::Split {
            path: p.to_path_buf(),
            reason,
        };
        match (declared, parse_split_path(path)) {
            (None | Some(0) | Some(1), _) => Self::from_shards(vec![first], path),
            (Some(count), None) => Err(split_err(
                path,
                format!("the file says it is one of {count} shards, but its name is not of the form NAME-00001-of-{count:05}.gguf, so the others cannot be found"),
            )),
            (Some(count), Some((prefix, no, name_count))) => {
                if count != name_count {
                    return Err(split_err(
                        path,
                        format!("split.count is {count} but the file name says {name_count}"),
                    ));
                }
                if count > MAX_SHARDS {
                    return Err(split_err(path, format!("{count} shards, at most {MAX_SHARDS}")));
                }
                let mut given = Some((no, first));
                let mut shards = Vec::with_capacity(count);
                for i in 1..=count {
                    let f = match given.take() {
                        Some((n, f)) if n == i => f,
                        other => {
                            given = other;
                            let p = split_path(&prefix, i, count);
                            if !p.exists() {
                                return Err(split_err(&p, format!("shard {i} of {count} is missing")));
                            }
                            GgufFile::open_with(&p, opts)?
                        }
                    };
                    shards.push(f);
                }
                Self::from_shards(shards, path)
            }
        }
    }

    /// Build from already-open shards, in order.
    pub fn from_shards(shards: Vec<GgufFile>, path: &Path) -> Result<Self> {
        let count = shards.len();
        let mut index = HashMap::new();
        let mut expected_tensors = None;
        for (s, f) in shards.iter().enumerate() {
            let p = f.path().unwrap_or(path);
            let err = |reason: String| GgufError::Split {
                path: p.to_path_buf(),
                reason,
            };
            if count > 1 {
                let m = f.metadata();
                let no = m.get_usize(KEY_SPLIT_NO)?;
                let c = m.get_usize(KEY_SPLIT_COUNT)?;
                if no != s || c != count {
                    return Err(err(format!(
                        "split.no = {no}, split.count = {c}; expected shard {s} of {count}"
                    )));
                }
                if s == 0 {
                    expected_tensors = m.opt(KEY_SPLIT_TENSORS_COUNT, |m, k| m.get_usize(k))?;
                }
            }
            for (i, t) in f.tensors().iter().enumerate() {
                if index.insert(t.name().to_string(), (s, i)).is_some() {
                    return Err(err(format!(
                        "tensor {:?} appears in more than one shard",
                        t.name()
                    )));
                }
            }
        }
        if let Some(n) = expected_tensors {
            if n != index.len() {
                return Err(GgufError::Split {
                    path: path.to_path_buf(),
                    reason: format!(
                        "split.tensors.count is {n} but the shards hold {}",
                        index.len()
                    ),
                });
            }
        }
        Ok(GgufModel {
            shards: shards.into_iter().map(Arc::new).collect(),
            index,
        })
    }

    /// The shards, in order (one for an unsplit model). Each is behind an `Arc`, so tensors
    /// that view a shard's bytes can keep it alive without borrowing the model.
    pub fn shards(&self) -> &[Arc<GgufFile>] {
        &self.shards
    }

    /// The shard that holds a tensor, and the tensor's description.
    pub fn tensor_location(&self, name: &str) -> Option<(&Arc<GgufFile>, &TensorInfo)> {
        let &(s, i) = self.index.get(name)?;
        let f = &self.shards[s];
        Some((f, f.tensors().get(i)?))
    }

    /// Metadata (of the first shard).
    pub fn metadata(&self) -> Metadata<'_> {
        self.shards[0].metadata()
    }

    /// Every tensor over all shards, shard by shard in header order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.shards
            .iter()
            .flat_map(|f| f.tensors().iter().map(move |t| f.view(t)))
    }

    /// Number of tensors over all shards.
    pub fn n_tensors(&self) -> usize {
        self.index.len()
    }

    /// A tensor's description by name.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        let &(s, i) = self.index.get(name)?;
        self.shards[s].tensors().get(i)
    }

    /// A tensor and its bytes.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let &(s, i) = self
            .index
            .get(name)
            .ok_or_else(|| GgufError::MissingTensor { name: name.into() })?;
        let f = &self.shards[s];
        Ok(f.view(&f.tensors()[i]))
    }

    /// Total bytes of tensor data.
    pub fn tensor_bytes(&self) -> u64 {
        self.shards.iter().map(|f| f.tensor_bytes()).sum()
    }

    /// Total number of parameters.
    pub fn n_params(&self) -> u64 {
        self.shards.iter().map(|f| f.n_params()).sum()
    }
}
