//! Split output, as `convert_hf_to_gguf.py --split-max-tensors N --split-max-size SIZE
//! [--no-tensor-first-split]` writes it (gguf-py's `GGUFWriter`): tensors go to the current
//! shard until it holds `N` tensors or the next one would take it past `SIZE` bytes of tensor
//! data (padding not counted; a shard always gets at least one tensor); the first file holds
//! the metadata, every file `split.no` (u16), `split.count` (u16) and `split.tensors.count`
//! (i32) after it, and the names are `{stem}-{i:05}-of-{n:05}.gguf`. A plan that fits one
//! shard is written as one plain file, without split keys.

use std::path::{Path, PathBuf};

use kestrel_gguf::MetadataValue;

/// Limits for splitting a converted model into several files. The default splits nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Split {
    /// At most this many tensors per file (0: no limit).
    pub max_tensors: usize,
    /// At most this many bytes of tensor data per file (0: no limit); a single larger tensor
    /// gets a file of its own.
    pub max_bytes: u64,
    /// The first file holds only the metadata (`--no-tensor-first-split`).
    pub metadata_only_first: bool,
}

impl Split {
    /// Limits of `max_tensors` tensors and `max_bytes` bytes per file (0: none).
    pub fn new(max_tensors: usize, max_bytes: u64) -> Split {
        Split {
            max_tensors,
            max_bytes,
            metadata_only_first: false,
        }
    }

    /// With the first file holding only the metadata.
    pub fn metadata_only_first(mut self, on: bool) -> Split {
        self.metadata_only_first = on;
        self
    }

    /// Whether any limit is set.
    pub fn is_set(&self) -> bool {
        self.max_tensors != 0 || self.max_bytes != 0 || self.metadata_only_first
    }

    /// `--split-max-size`'s value: bytes, or a count followed by `K`, `M` or `G` (powers of
    /// 1000, as llama.cpp's converter reads it). `None` for anything else.
    pub fn parse_size(s: &str) -> Option<u64> {
        let (digits, unit) = match s.as_bytes().last()? {
            b'K' => (&s[..s.len() - 1], 1_000),
            b'M' => (&s[..s.len() - 1], 1_000_000),
            b'G' => (&s[..s.len() - 1], 1_000_000_000),
            _ => (s, 1),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse::<u64>().ok()?.checked_mul(unit)
    }

    /// The plan's tensors (their data sizes, in order) grouped into files: indices per file.
    pub(crate) fn shards(&self, sizes: &[u64]) -> Vec<Vec<usize>> {
        let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
        if self.metadata_only_first {
            shards.push(Vec::new());
        }
        let mut bytes = 0u64;
        for (i, &n) in sizes.iter().enumerate() {
            let last = shards.len() - 1;
            let full = !shards[last].is_empty()
                && ((self.max_tensors != 0 && shards[last].len() >= self.max_tensors)
                    || (self.max_bytes != 0 && bytes.saturating_add(n) > self.max_bytes));
            if full {
                shards.push(Vec::new());
                bytes = 0;
            }
            if let Some(s) = shards.last_mut() {
                s.push(i);
            }
            bytes = bytes.saturating_add(n);
        }
        shards
    }
}

/// The file names for `count` shards of `out`: `out` itself for one, else gguf-py's
/// `{stem}-{i:05}-of-{count:05}.gguf` beside it (the stem drops only the last extension).
pub(crate) fn shard_paths(out: &Path, count: usize) -> Vec<PathBuf> {
    if count <= 1 {
        return vec![out.to_path_buf()];
    }
    let stem = out
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    (0..count)
        .map(|i| out.with_file_name(format!("{stem}-{:05}-of-{count:05}.gguf", i + 1)))
        .collect()
}

/// The split keys of shard `no` of `count`, `tensors` in all (nothing for a single file).
pub(crate) fn split_keys(no: usize, count: usize, tensors: usize) -> Vec<(String, MetadataValue)> {
    if count <= 1 {
        return Vec::new();
    }
    vec![
        ("split.no".into(), MetadataValue::U16(no as u16)),
        ("split.count".into(), MetadataValue::U16(count as u16)),
        (
            "split.tensors.count".into(),
            MetadataValue::I32(tensors as i32),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_llama_cpp_reads_them() {
        assert_eq!(Split::parse_size("0"), Some(0));
        assert_eq!(Split::parse_size("1500"), Some(1500));
        assert_eq!(Split::parse_size("20K"), Some(20_000));
        assert_eq!(Split::parse_size("5M"), Some(5_000_000));
        assert_eq!(Split::parse_size("2G"), Some(2_000_000_000));
        for bad in ["", "G", "1.5G", "-1", "2g", "2GB", "99999999999999999999G"] {
            assert_eq!(Split::parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn tensors_fill_shards_as_gguf_py_fills_them() {
        let sizes = [10, 10, 10, 25, 5, 5];
        // No limits: one shard.
        assert_eq!(Split::default().shards(&sizes), [vec![0, 1, 2, 3, 4, 5]]);
        // Two tensors per shard.
        assert_eq!(
            Split::new(2, 0).shards(&sizes),
            [vec![0, 1], vec![2, 3], vec![4, 5]]
        );
        // 20 bytes per shard: the 25-byte tensor gets one of its own.
        assert_eq!(
            Split::new(0, 20).shards(&sizes),
            [vec![0, 1], vec![2], vec![3], vec![4, 5]]
        );
        // Both limits, and a metadata-only first shard.
        assert_eq!(
            Split::new(1, 100)
                .metadata_only_first(true)
                .shards(&sizes[..2]),
            [vec![], vec![0], vec![1]]
        );
        assert_eq!(
            Split::default()
                .metadata_only_first(true)
                .shards(&sizes[..2]),
            [vec![], vec![0, 1]]
        );
    }

    #[test]
    fn shard_names_and_keys() {
        let p = shard_paths(Path::new("/m/out.f16.gguf"), 3);
        assert_eq!(p[0], PathBuf::from("/m/out.f16-00001-of-00003.gguf"));
        assert_eq!(p[2], PathBuf::from("/m/out.f16-00003-of-00003.gguf"));
        assert_eq!(
            shard_paths(Path::new("o.gguf"), 1),
            [PathBuf::from("o.gguf")]
        );
        assert!(split_keys(0, 1, 9).is_empty());
        let k = split_keys(1, 3, 9);
        assert_eq!(k[0], ("split.no".into(), MetadataValue::U16(1)));
        assert_eq!(k[2], ("split.tensors.count".into(), MetadataValue::I32(9)));
    }
}
