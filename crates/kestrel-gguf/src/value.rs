//! Metadata values: the GGUF value types, borrowed views into the file, and owned values for writing.

use std::fmt;

/// The type tag of a GGUF metadata value (GGUF spec `gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// `uint8`
    U8 = 0,
    /// `int8`
    I8 = 1,
    /// `uint16`
    U16 = 2,
    /// `int16`
    I16 = 3,
    /// `uint32`
    U32 = 4,
    /// `int32`
    I32 = 5,
    /// `float32`
    F32 = 6,
    /// `bool` (one byte)
    Bool = 7,
    /// length-prefixed UTF-8 string
    String = 8,
    /// typed array
    Array = 9,
    /// `uint64`
    U64 = 10,
    /// `int64`
    I64 = 11,
    /// `float64`
    F64 = 12,
}

impl ValueType {
    /// The type for a spec id, or `None` for an unknown id.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The size in bytes of a scalar of this type; `None` for strings and arrays.
    pub fn scalar_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The fewest bytes a value of this type can take in a file (used to bound counts).
    pub(crate) fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            other => other.scalar_size().unwrap_or(1) as u64,
        }
    }

    /// The spec's name (`uint32`, `string`, ...).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            U32 => "uint32",
            I32 => "int32",
            F32 => "float32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "uint64",
            I64 => "int64",
            F64 => "float64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A metadata value borrowed from the file's bytes. Strings are raw bytes (GGUF says UTF-8,
/// but vocabularies exist that are not); arrays are decoded lazily.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// `uint8`
    U8(u8),
    /// `int8`
    I8(i8),
    /// `uint16`
    U16(u16),
    /// `int16`
    I16(i16),
    /// `uint32`
    U32(u32),
    /// `int32`
    I32(i32),
    /// `float32`
    F32(f32),
    /// `bool`
    Bool(bool),
    /// A string's bytes.
    String(&'a [u8]),
    /// A typed array.
    Array(ArrayView<'a>),
    /// `uint64`
    U64(u64),
    /// `int64`
    I64(i64),
    /// `float64`
    F64(f64),
}

impl<'a> Value<'a> {
    /// The value's type tag.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A short description of the type, e.g. `uint32` or `array[string; 262144]`.
    pub fn type_description(&self) -> String {
        match self {
            Value::Array(a) => format!("array[{}; {}]", a.element_type(), a.len()),
            v => v.value_type().name().to_string(),
        }
    }

    /// Any integer value as `i128` (so every GGUF integer fits); `None` for other types.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// A float or integer value as `f64`; `None` for other types.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_integer().map(|i| i as f64),
        }
    }

    /// A string value as UTF-8, `None` if not a string or not UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Value::String(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<ArrayView<'a>> {
        match *self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Copy into an owned [`MetadataValue`].
    pub fn to_owned_value(&self) -> MetadataValue {
        match *self {
            Value::U8(v) => MetadataValue::U8(v),
            Value::I8(v) => MetadataValue::I8(v),
            Value::U16(v) => MetadataValue::U16(v),
            Value::I16(v) => MetadataValue::I16(v),
            Value::U32(v) => MetadataValue::U32(v),
            Value::I32(v) => MetadataValue::I32(v),
            Value::F32(v) => MetadataValue::F32(v),
            Value::Bool(v) => MetadataValue::Bool(v),
            Value::String(b) => MetadataValue::String(String::from_utf8_lossy(b).into_owned()),
            Value::Array(a) => MetadataValue::Array {
                element_type: a.element_type(),
                items: a.iter().map(|v| v.to_owned_value()).collect(),
            },
            Value::U64(v) => MetadataValue::U64(v),
            Value::I64(v) => MetadataValue::I64(v),
            Value::F64(v) => MetadataValue::F64(v),
        }
    }
}

/// A lazily decoded array inside the file. Its bytes were bounds-checked when the file was
/// opened, so iteration cannot fail.
#[derive(Clone, Copy, PartialEq)]
pub struct ArrayView<'a> {
    pub(crate) element_type: ValueType,
    pub(crate) len: u64,
    /// The encoded elements (without the array's type and count header).
    pub(crate) bytes: &'a [u8],
}

impl fmt::Debug for ArrayView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArrayView[{}; {}]", self.element_type, self.len)
    }
}

impl<'a> ArrayView<'a> {
    /// The type of every element.
    pub fn element_type(&self) -> ValueType {
        self.element_type
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw encoded bytes of the elements. For scalar element types this is `len` packed
    /// little-endian values, ready for zero-copy use.
    pub fn raw_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Iterate the elements in order.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            element_type: self.element_type,
            remaining: self.len,
            bytes: self.bytes,
        }
    }

    /// Iterate a string array's elements as raw bytes; `None` if the elements are not strings.
    pub fn strings(&self) -> Option<impl Iterator<Item = &'a [u8]> + 'a> {
        (self.element_type == ValueType::String).then(|| {
            self.iter().map(|v| match v {
                Value::String(s) => s,
                _ => &[][..],
            })
        })
    }

    /// Element `i` (linear time for strings and nested arrays, constant for scalars).
    pub fn get(&self, i: usize) -> Option<Value<'a>> {
        if i as u64 >= self.len {
            return None;
        }
        match self.element_type.scalar_size() {
            Some(sz) => {
                let b = self.bytes.get(i * sz..(i + 1) * sz)?;
                Some(decode_scalar(self.element_type, b))
            }
            None => self.iter().nth(i),
        }
    }

    /// The elements as `f32`, if they are `float32` (copies; use [`raw_bytes`](Self::raw_bytes) for zero-copy).
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        (self.element_type == ValueType::F32).then(|| {
            self.bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }

    /// Integer elements of any integer type as `i64` (u64 values above `i64::MAX` are `None`).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        self.iter()
            .map(|v| v.as_integer().and_then(|i| i64::try_from(i).ok()))
            .collect()
    }
}

/// Iterator over an [`ArrayView`].
#[derive(Clone)]
pub struct ArrayIter<'a> {
    element_type: ValueType,
    remaining: u64,
    bytes: &'a [u8],
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.remaining == 0 {
            return None;
        }
        let (v, used) = decode_validated(self.element_type, self.bytes)?;
        self.bytes = self.bytes.get(used..)?;
        self.remaining -= 1;
        Some(v)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

impl ExactSizeIterator for ArrayIter<'_> {}

fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// Decode a scalar from exactly `scalar_size` bytes.
pub(crate) fn decode_scalar(t: ValueType, b: &[u8]) -> Value<'_> {
    match t {
        ValueType::U8 => Value::U8(b[0]),
        ValueType::I8 => Value::I8(b[0] as i8),
        ValueType::Bool => Value::Bool(b[0] != 0),
        ValueType::U16 => Value::U16(u16::from_le_bytes(le(b))),
        ValueType::I16 => Value::I16(i16::from_le_bytes(le(b))),
        ValueType::U32 => Value::U32(u32::from_le_bytes(le(b))),
        ValueType::I32 => Value::I32(i32::from_le_bytes(le(b))),
        ValueType::F32 => Value::F32(f32::from_le_bytes(le(b))),
        ValueType::U64 => Value::U64(u64::from_le_bytes(le(b))),
        ValueType::I64 => Value::I64(i64::from_le_bytes(le(b))),
        ValueType::F64 => Value::F64(f64::from_le_bytes(le(b))),
        ValueType::String | ValueType::Array => Value::U8(0),
    }
}

/// Decode one value from bytes that the parser already validated; returns the value and the
/// bytes it took. `None` only if the bytes are not what validation promised.
pub(crate) fn decode_validated(t: ValueType, b: &[u8]) -> Option<(Value<'_>, usize)> {
    match t {
        ValueType::String => {
            let n = usize::try_from(u64::from_le_bytes(le(b.get(..8)?))).ok()?;
            let s = b.get(8..8usize.checked_add(n)?)?;
            Some((Value::String(s), 8 + n))
        }
        ValueType::Array => {
            let et = ValueType::from_id(u32::from_le_bytes(le(b.get(..4)?)))?;
            let len = u64::from_le_bytes(le(b.get(4..12)?));
            let mut used = 12usize;
            let start = used;
            match et.scalar_size() {
                Some(sz) => used = used.checked_add(usize::try_from(len).ok()?.checked_mul(sz)?)?,
                None => {
                    let mut it = ArrayIter {
                        element_type: et,
                        remaining: len,
                        bytes: b.get(used..)?,
                    };
                    let before = it.bytes.len();
                    for _ in 0..len {
                        it.next()?;
                    }
                    used += before - it.bytes.len();
                }
            }
            let view = ArrayView {
                element_type: et,
                len,
                bytes: b.get(start..used)?,
            };
            Some((Value::Array(view), used))
        }
        _ => {
            let sz = t.scalar_size()?;
            Some((decode_scalar(t, b.get(..sz)?), sz))
        }
    }
}

/// An owned metadata value, for writing files and comparing.
#[derive(Clone, Debug, PartialEq)]
pub enum MetadataValue {
    /// `uint8`
    U8(u8),
    /// `int8`
    I8(i8),
    /// `uint16`
    U16(u16),
    /// `int16`
    I16(i16),
    /// `uint32`
    U32(u32),
    /// `int32`
    I32(i32),
    /// `float32`
    F32(f32),
    /// `bool`
    Bool(bool),
    /// string
    String(String),
    /// array of values that all have `element_type`
    Array {
        /// The type of every element (needed for empty arrays).
        element_type: ValueType,
        /// The elements.
        items: Vec<MetadataValue>,
    },
    /// `uint64`
    U64(u64),
    /// `int64`
    I64(i64),
    /// `float64`
    F64(f64),
}

impl MetadataValue {
    /// The value's type tag.
    pub fn value_type(&self) -> ValueType {
        match self {
            MetadataValue::U8(_) => ValueType::U8,
            MetadataValue::I8(_) => ValueType::I8,
            MetadataValue::U16(_) => ValueType::U16,
            MetadataValue::I16(_) => ValueType::I16,
            MetadataValue::U32(_) => ValueType::U32,
            MetadataValue::I32(_) => ValueType::I32,
            MetadataValue::F32(_) => ValueType::F32,
            MetadataValue::Bool(_) => ValueType::Bool,
            MetadataValue::String(_) => ValueType::String,
            MetadataValue::Array { .. } => ValueType::Array,
            MetadataValue::U64(_) => ValueType::U64,
            MetadataValue::I64(_) => ValueType::I64,
            MetadataValue::F64(_) => ValueType::F64,
        }
    }

    /// A string array.
    pub fn string_array<S: Into<String>>(items: impl IntoIterator<Item = S>) -> MetadataValue {
        MetadataValue::Array {
            element_type: ValueType::String,
            items: items
                .into_iter()
                .map(|s| MetadataValue::String(s.into()))
                .collect(),
        }
    }

    /// A float32 array.
    pub fn f32_array(items: impl IntoIterator<Item = f32>) -> MetadataValue {
        MetadataValue::Array {
            element_type: ValueType::F32,
            items: items.into_iter().map(MetadataValue::F32).collect(),
        }
    }

    /// A uint32 array (llama.cpp's `adapter.alora.invocation_tokens`, for one).
    pub fn u32_array(items: impl IntoIterator<Item = u32>) -> MetadataValue {
        MetadataValue::Array {
            element_type: ValueType::U32,
            items: items.into_iter().map(MetadataValue::U32).collect(),
        }
    }

    /// An int32 array.
    pub fn i32_array(items: impl IntoIterator<Item = i32>) -> MetadataValue {
        MetadataValue::Array {
            element_type: ValueType::I32,
            items: items.into_iter().map(MetadataValue::I32).collect(),
        }
    }
}

impl From<&str> for MetadataValue {
    fn from(s: &str) -> Self {
        MetadataValue::String(s.to_string())
    }
}

/// `From<T> for MetadataValue` for each scalar type and its variant.
macro_rules! from_scalar {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for MetadataValue {
            fn from(v: $t) -> Self {
                MetadataValue::$v(v)
            }
        })*
    };
}

from_scalar!(String => String, u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32,
    i32 => I32, u64 => U64, i64 => I64, f32 => F32, f64 => F64, bool => Bool);
