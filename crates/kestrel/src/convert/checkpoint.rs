//! A checkpoint's weights: one `model.safetensors`, or the shards a
//! `model.safetensors.index.json` names (or `model-*.safetensors` without an index), each
//! memory-mapped. Tensors come out in llama.cpp's converter order: shard by shard in name order,
//! each shard's tensors in name order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::safetensors::{SafeTensors, StDType, StTensor};
use super::{read_json, ConvertError};

/// The weights of a checkpoint folder.
#[derive(Debug)]
pub struct Checkpoint {
    parts: Vec<SafeTensors>,
    /// (name, shard) in converter order.
    order: Vec<(String, usize)>,
    /// The shard of each name.
    by_name: BTreeMap<String, usize>,
}

impl Checkpoint {
    /// Map every shard of the checkpoint in `dir` and check them against the index, if any.
    ///
    /// # Errors
    /// [`ConvertError::Input`] for a missing or malformed shard or index, a tensor named in the
    /// index but in no shard (or the other way round), or a PyTorch `.bin` checkpoint.
    pub fn open(dir: &Path) -> Result<Checkpoint, ConvertError> {
        let index_path = dir.join("model.safetensors.index.json");
        let mut from_index: Option<BTreeSet<String>> = None;
        let part_names: Vec<String> = if index_path.is_file() {
            let index = read_json(&index_path)?;
            let map = index
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| ConvertError::Input {
                    path: index_path.clone(),
                    reason: "no \"weight_map\" object".into(),
                })?;
            let mut parts = BTreeSet::new();
            for (name, file) in map {
                let file = file.as_str().ok_or_else(|| ConvertError::Input {
                    path: index_path.clone(),
                    reason: format!("weight_map[{name:?}] is not a file name"),
                })?;
                if file.contains('/') || file.contains('\\') || file.starts_with('.') {
                    return Err(ConvertError::Input {
                        path: index_path.clone(),
                        reason: format!(
                            "weight_map[{name:?}] = {file:?} is not a file in the folder"
                        ),
                    });
                }
                parts.insert(file.to_string());
            }
            from_index = Some(map.keys().cloned().collect());
            parts.into_iter().collect()
        } else {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .map_err(|e| ConvertError::Input {
                    path: dir.to_path_buf(),
                    reason: format!("cannot list: {e}"),
                })?
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with("model") && n.ends_with(".safetensors"))
                .collect();
            names.sort();
            names
        };
        if part_names.is_empty() {
            let bin = dir.join("pytorch_model.bin");
            return Err(ConvertError::Input {
                path: dir.to_path_buf(),
                reason: if bin.exists() {
                    "has only PyTorch .bin weights; save them as safetensors first".into()
                } else {
                    "no model.safetensors (or model-*.safetensors shards)".into()
                },
            });
        }
        let mut parts = Vec::with_capacity(part_names.len());
        let mut order = Vec::new();
        let mut seen = BTreeMap::new();
        for (i, p) in part_names.iter().enumerate() {
            let st = SafeTensors::open(&dir.join(p))?;
            for name in st.tensors().keys() {
                if let Some(prev) = seen.insert(name.clone(), i) {
                    return Err(ConvertError::Input {
                        path: dir.join(p),
                        reason: format!("tensor {name:?} is also in {}", part_names[prev]),
                    });
                }
                order.push((name.clone(), i));
            }
            parts.push(st);
        }
        if let Some(expected) = from_index {
            let missing: Vec<&String> =
                expected.iter().filter(|n| !seen.contains_key(*n)).collect();
            let extra: Vec<&String> = seen.keys().filter(|n| !expected.contains(*n)).collect();
            if !missing.is_empty() || !extra.is_empty() {
                return Err(ConvertError::Input {
                    path: index_path,
                    reason: format!(
                        "the index and the shards disagree: missing {missing:?}, not in the index {extra:?}"
                    ),
                });
            }
        }
        Ok(Checkpoint {
            parts,
            order,
            by_name: seen,
        })
    }

    /// One safetensors file (a PEFT adapter's `adapter_model.safetensors`), its tensors in
    /// name order.
    ///
    /// # Errors
    /// [`ConvertError::Input`] for a missing or malformed file.
    pub fn open_file(path: &Path) -> Result<Checkpoint, ConvertError> {
        let st = SafeTensors::open(path)?;
        let order: Vec<(String, usize)> = st.tensors().keys().map(|n| (n.clone(), 0)).collect();
        let by_name = order.iter().cloned().collect();
        Ok(Checkpoint {
            parts: vec![st],
            order,
            by_name,
        })
    }

    /// Tensor names in converter order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(|(n, _)| n.as_str())
    }

    /// A tensor's description and bytes.
    pub fn get(&self, name: &str) -> Option<(&StTensor, &[u8])> {
        self.parts[*self.by_name.get(name)?].raw(name)
    }

    /// A tensor's dtype and shape.
    pub fn info(&self, name: &str) -> Option<(StDType, &[usize])> {
        self.get(name).map(|(t, _)| (t.dtype, t.shape.as_slice()))
    }

    /// Whether a tensor is present.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}
