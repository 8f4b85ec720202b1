//! `--keep-split`: the files llama-quantize writes for a split input, one per input shard.
//! The plan's tensors are already in shard and file order; here they are grouped by shard,
//! the first file gets the model's metadata and every file `split.no` (u16), `split.count`
//! (u16) and `split.tensors.count` (i32) appended, the later files nothing else (llama.cpp makes
//! them with `gguf_init_empty`, so they also take the default alignment), and the names come
//! from `llama_split_path`: `<output without a trailing .gguf>-%05d-of-%05d.gguf`.

use std::path::{Path, PathBuf};

use super::QuantizeError;
use crate::{MetadataValue, DEFAULT_ALIGNMENT};

/// One output file: its path, metadata and alignment, and the plan's tensors it holds (by
/// index into the plan, in order).
pub(super) struct Part {
    pub path: PathBuf,
    pub metadata: Vec<(String, MetadataValue)>,
    pub alignment: u64,
    pub tensors: Vec<usize>,
}

/// The output files for tensors whose input shards are `shards` (one per planned tensor, in
/// plan order), `metadata` the first file's keys before the split keys.
///
/// # Errors
/// A shard left without tensors between others (pruned layers can empty one; llama-quantize
/// assumes it cannot happen), more than 65,535 shards or 2^31 tensors.
pub(super) fn parts(
    output: &Path,
    shards: &[usize],
    metadata: Vec<(String, MetadataValue)>,
    alignment: u64,
) -> Result<Vec<Part>, QuantizeError> {
    let n_split = shards.iter().max().map_or(1, |&m| m + 1);
    let count = u16::try_from(n_split)
        .map_err(|_| QuantizeError::Refused(format!("{n_split} shards: at most 65535")))?;
    let total = i32::try_from(shards.len())
        .map_err(|_| QuantizeError::Refused("more than 2^31 tensors".into()))?;
    let mut parts: Vec<Part> = (0..n_split)
        .map(|i| Part {
            path: split_path(output, i, n_split),
            metadata: Vec::new(),
            alignment: DEFAULT_ALIGNMENT,
            tensors: Vec::new(),
        })
        .collect();
    for (t, &s) in shards.iter().enumerate() {
        parts[s].tensors.push(t);
    }
    if let Some(i) = parts.iter().position(|p| p.tensors.is_empty()) {
        if !shards.is_empty() {
            return Err(QuantizeError::Refused(format!(
                "--keep-split: input shard {} of {n_split} has no tensors left to write",
                i + 1
            )));
        }
    }
    parts[0].metadata = metadata;
    parts[0].alignment = alignment;
    for (i, p) in parts.iter_mut().enumerate() {
        if n_split > 1 {
            p.metadata
                .push(("split.no".into(), MetadataValue::U16(i as u16)));
            p.metadata
                .push(("split.count".into(), MetadataValue::U16(count)));
            p.metadata
                .push(("split.tensors.count".into(), MetadataValue::I32(total)));
        }
    }
    Ok(parts)
}

/// `llama_split_path(output without ".gguf", i, n)`: `<prefix>-0000{i+1}-of-0000{n}.gguf`.
pub(super) fn split_path(output: &Path, i: usize, n: usize) -> PathBuf {
    let s = output.as_os_str().to_string_lossy();
    let prefix = s.strip_suffix(".gguf").unwrap_or(&s);
    PathBuf::from(format!("{prefix}-{:05}-of-{:05}.gguf", i + 1, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_llama_split_path() {
        let p = split_path(Path::new("/m/out.gguf"), 0, 3);
        assert_eq!(p, PathBuf::from("/m/out-00001-of-00003.gguf"));
        assert_eq!(
            split_path(Path::new("model"), 1, 2),
            PathBuf::from("model-00002-of-00002.gguf")
        );
    }

    #[test]
    fn shards_get_their_tensors_and_split_keys() {
        let md = vec![(
            "general.name".to_string(),
            MetadataValue::String("m".into()),
        )];
        let parts = parts(Path::new("o.gguf"), &[0, 0, 1, 1, 1], md, 64).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].tensors, [0, 1]);
        assert_eq!(parts[1].tensors, [2, 3, 4]);
        assert_eq!(
            (parts[0].alignment, parts[1].alignment),
            (64, DEFAULT_ALIGNMENT)
        );
        let keys = |p: &Part| {
            p.metadata
                .iter()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(&parts[0]),
            [
                "general.name",
                "split.no",
                "split.count",
                "split.tensors.count"
            ]
        );
        assert_eq!(
            keys(&parts[1]),
            ["split.no", "split.count", "split.tensors.count"]
        );
        assert_eq!(parts[1].metadata[0].1, MetadataValue::U16(1));
        assert_eq!(parts[1].metadata[2].1, MetadataValue::I32(5));
        // One shard: no split keys, but the split name all the same.
        let one = super::parts(Path::new("o.gguf"), &[0, 0], Vec::new(), 32).unwrap();
        assert!(one[0].metadata.is_empty());
        assert_eq!(one[0].path, PathBuf::from("o-00001-of-00001.gguf"));
        // A shard emptied between others is refused.
        assert!(super::parts(Path::new("o.gguf"), &[0, 2], Vec::new(), 32).is_err());
    }
}
