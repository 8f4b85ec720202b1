//! `Buf`: one layer's keys or values, f32 or f16, preallocated and written in place.

use half::f16;

use crate::{KvDType, KvSlice};

/// Token-major storage of one layer's keys (or values).
pub(crate) enum Buf {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Buf {
    pub(crate) fn zeroed(
        dtype: KvDType,
        n: usize,
    ) -> Result<Buf, std::collections::TryReserveError> {
        Ok(match dtype {
            KvDType::F32 => {
                let mut v = Vec::new();
                v.try_reserve_exact(n)?;
                v.resize(n, 0.0);
                Buf::F32(v)
            }
            KvDType::F16 => {
                let mut v = Vec::new();
                v.try_reserve_exact(n)?;
                v.resize(n, f16::ZERO);
                Buf::F16(v)
            }
        })
    }

    pub(crate) fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Buf::F32(b) => b[at..at + src.len()].copy_from_slice(src),
            Buf::F16(b) => {
                for (d, s) in b[at..at + src.len()].iter_mut().zip(src) {
                    *d = f16::from_f32(*s);
                }
            }
        }
    }

    pub(crate) fn slice(&self, n: usize) -> KvSlice<'_> {
        match self {
            Buf::F32(b) => KvSlice::F32(&b[..n]),
            Buf::F16(b) => KvSlice::F16(&b[..n]),
        }
    }
}
