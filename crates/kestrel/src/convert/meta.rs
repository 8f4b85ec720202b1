//! The metadata a conversion writes, in the order it was set; setting a key again replaces its
//! value in place (as gguf-py's writer does).

use kestrel_gguf::{MetadataValue, ValueType};

/// Ordered GGUF metadata.
#[derive(Clone, Debug, Default)]
pub(crate) struct Meta {
    entries: Vec<(String, MetadataValue)>,
}

impl Meta {
    pub(crate) fn set(&mut self, key: impl Into<String>, value: MetadataValue) {
        let key = key.into();
        if let Some(e) = self.entries.iter_mut().find(|(k, _)| *k == key) {
            e.1 = value;
        } else {
            self.entries.push((key, value));
        }
    }

    pub(crate) fn u32(&mut self, key: impl Into<String>, v: u32) {
        self.set(key, MetadataValue::U32(v));
    }

    pub(crate) fn f32(&mut self, key: impl Into<String>, v: f32) {
        self.set(key, MetadataValue::F32(v));
    }

    pub(crate) fn bool(&mut self, key: impl Into<String>, v: bool) {
        self.set(key, MetadataValue::Bool(v));
    }

    /// A string; an empty one is not written (gguf-py's `add_string`).
    pub(crate) fn str(&mut self, key: impl Into<String>, v: impl Into<String>) {
        let v = v.into();
        if !v.is_empty() {
            self.set(key, MetadataValue::String(v));
        }
    }

    /// Arrays: an empty one is not written (gguf-py's `add_array`).
    pub(crate) fn strings(&mut self, key: impl Into<String>, v: Vec<String>) {
        if v.is_empty() {
            return;
        }
        self.set(
            key,
            MetadataValue::Array {
                element_type: ValueType::String,
                items: v.into_iter().map(MetadataValue::String).collect(),
            },
        );
    }

    pub(crate) fn i32s(&mut self, key: impl Into<String>, v: &[i32]) {
        if v.is_empty() {
            return;
        }
        self.set(
            key,
            MetadataValue::Array {
                element_type: ValueType::I32,
                items: v.iter().map(|&x| MetadataValue::I32(x)).collect(),
            },
        );
    }

    pub(crate) fn f32s(&mut self, key: impl Into<String>, v: &[f32]) {
        if v.is_empty() {
            return;
        }
        self.set(
            key,
            MetadataValue::Array {
                element_type: ValueType::F32,
                items: v.iter().map(|&x| MetadataValue::F32(x)).collect(),
            },
        );
    }

    pub(crate) fn bools(&mut self, key: impl Into<String>, v: &[bool]) {
        self.set(
            key,
            MetadataValue::Array {
                element_type: ValueType::Bool,
                items: v.iter().map(|&x| MetadataValue::Bool(x)).collect(),
            },
        );
    }

    pub(crate) fn into_entries(self) -> Vec<(String, MetadataValue)> {
        self.entries
    }
}
