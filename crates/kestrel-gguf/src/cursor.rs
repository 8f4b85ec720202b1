//! A bounds-checked little-endian reader over the file's bytes: every read names what it reads
//! and fails with the offset instead of panicking.

use crate::error::{GgufError, Result};

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    pub(crate) fn bytes(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
                need: n,
                left: self.remaining(),
            });
        }
        let n = n as usize;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let b = self.bytes(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub(crate) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array::<4>(what).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array::<8>(what).map(u64::from_le_bytes)
    }

    /// A count of items each at least `min_size` bytes: refuse counts the rest of the file
    /// cannot hold, so no later allocation or loop is sized by a lie.
    pub(crate) fn count(&mut self, min_size: u64, what: &dyn Fn() -> String) -> Result<u64> {
        let at = self.pos as u64;
        let n = self.u64(what)?;
        let left = self.remaining();
        if n.checked_mul(min_size.max(1)).is_none_or(|b| b > left) && n > 0 {
            return Err(GgufError::CountTooLarge {
                what: what(),
                offset: at,
                count: n,
                left,
            });
        }
        Ok(n)
    }

    /// A GGUF string: u64 length then bytes.
    pub(crate) fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let at = self.pos as u64;
        let n = self.u64(&|| format!("length of {}", what()))?;
        if n > self.remaining() {
            return Err(GgufError::CountTooLarge {
                what: format!("length of {}", what()),
                offset: at,
                count: n,
                left: self.remaining(),
            });
        }
        self.bytes(n, what)
    }

    /// A GGUF string that must be UTF-8 (keys, tensor names).
    pub(crate) fn utf8(&mut self, what: &dyn Fn() -> String) -> Result<&'a str> {
        let at = self.pos as u64;
        let b = self.string(what)?;
        std::str::from_utf8(b).map_err(|_| GgufError::InvalidUtf8 {
            what: what(),
            offset: at,
        })
    }
}
