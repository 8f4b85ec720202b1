//! `Metadata`: typed access to a file's key/value metadata, with errors that name the key.

use std::collections::HashMap;

use crate::error::{GgufError, Result};
use crate::parse::MetaEntry;
use crate::value::{decode_validated, ArrayView, Value};

/// A view of a file's metadata. Cheap to copy; values borrow the file's bytes.
///
/// Integer getters accept any integer type whose value fits (files disagree on whether
/// `context_length` is `uint32` or `uint64`); they refuse floats, strings and values out of range.
#[derive(Clone, Copy)]
pub struct Metadata<'a> {
    pub(crate) entries: &'a [MetaEntry],
    pub(crate) index: &'a HashMap<String, usize>,
    pub(crate) buf: &'a [u8],
}

impl std::fmt::Debug for Metadata<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> Metadata<'a> {
    fn decode(&self, e: &MetaEntry) -> Value<'a> {
        let raw = self.buf.get(e.range.clone()).unwrap_or_default();
        // The parser validated these bytes; a failure here would be a bug, shown as an empty array.
        decode_validated(e.value_type, raw)
            .map(|(v, _)| v)
            .unwrap_or(Value::String(&[]))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the file has no metadata.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every key and value, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, Value<'a>)> + '_ {
        self.entries
            .iter()
            .map(|e| (e.key.as_str(), self.decode(e)))
    }

    /// Every key, in file order.
    pub fn keys(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.entries.iter().map(|e| e.key.as_str())
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        self.index.get(key).map(|&i| self.decode(&self.entries[i]))
    }

    /// True if `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    fn require(&self, key: &str) -> Result<Value<'a>> {
        self.get(key)
            .ok_or_else(|| GgufError::MissingKey { key: key.into() })
    }

    fn wrong(key: &str, expected: &'static str, v: &Value<'_>) -> GgufError {
        GgufError::WrongType {
            key: key.into(),
            expected,
            found: v.type_description(),
        }
    }

    fn int<T: TryFrom<i128>>(&self, key: &str, expected: &'static str) -> Result<T> {
        let v = self.require(key)?;
        v.as_integer()
            .and_then(|i| T::try_from(i).ok())
            .ok_or_else(|| Self::wrong(key, expected, &v))
    }

    /// An integer that fits in `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.int(key, "an integer that fits in u32")
    }

    /// An integer that fits in `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.int(key, "an integer that fits in u64")
    }

    /// An integer that fits in `i64`.
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.int(key, "an integer that fits in i64")
    }

    /// An integer that fits in `usize`.
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        self.int(key, "an integer that fits in usize")
    }

    /// A float (`float32`/`float64`; integers are accepted too).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|f| f as f32)
            .ok_or_else(|| Self::wrong(key, "a number", &v))
    }

    /// A `bool`.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            Value::Bool(b) => Ok(b),
            v => Err(Self::wrong(key, "bool", &v)),
        }
    }

    /// A UTF-8 string.
    pub fn get_str(&self, key: &str) -> Result<&'a str> {
        match self.require(key)? {
            Value::String(b) => std::str::from_utf8(b)
                .map_err(|_| Self::wrong(key, "a UTF-8 string", &Value::String(b))),
            v => Err(Self::wrong(key, "string", &v)),
        }
    }

    /// An array.
    pub fn get_array(&self, key: &str) -> Result<ArrayView<'a>> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(Self::wrong(key, "array", &v)),
        }
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&'a str> {
        self.get_str("general.architecture")
    }

    /// The full key for an architecture-prefixed field: `arch_key("context_length")` is
    /// `"llama.context_length"` in a llama file.
    pub fn arch_key(&self, field: &str) -> Result<String> {
        Ok(format!("{}.{}", self.architecture()?, field))
    }

    /// `{arch}.{field}` as `u32`.
    pub fn arch_u32(&self, field: &str) -> Result<u32> {
        self.get_u32(&self.arch_key(field)?)
    }

    /// `{arch}.{field}` as `f32`.
    pub fn arch_f32(&self, field: &str) -> Result<f32> {
        self.get_f32(&self.arch_key(field)?)
    }

    /// `{arch}.{field}`, if present.
    pub fn arch_get(&self, field: &str) -> Option<Value<'a>> {
        self.get(&self.arch_key(field).ok()?)
    }

    /// An optional key: `Ok(None)` when absent, an error when present with the wrong type.
    pub fn opt<T>(&self, key: &str, f: impl FnOnce(&Self, &str) -> Result<T>) -> Result<Option<T>> {
        if self.contains(key) {
            f(self, key).map(Some)
        } else {
            Ok(None)
        }
    }
}
