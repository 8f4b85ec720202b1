//! `Buf`: one layer's keys or values, f32 or f16, preallocated and written in place.

use half::f16;
use kestrel_gguf::quant::{q4_0, q8_0, BlockQ4_0, BlockQ8_0};

use crate::{KvDType, KvError, KvLayout, KvSlice};

/// Token-major storage of one layer's keys (or values).
pub(crate) enum Buf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// Quantized on write, 32 values a block (rows are whole blocks: head sizes are multiples
    /// of 32, checked by the layout).
    Q8_0(Vec<BlockQ8_0>),
    Q4_0(Vec<BlockQ4_0>),
}

impl Buf {
    /// Every layer's keys (`nk` values) and values (`nv` values), zeroed.
    /// Each layer's keys and values for `tokens` tokens (sizes checked by the caller).
    pub(crate) fn layers(
        layout: &KvLayout,
        tokens: usize,
    ) -> Result<(Vec<Buf>, Vec<Buf>), std::collections::TryReserveError> {
        let mut k = Vec::with_capacity(layout.n_layers);
        let mut v = Vec::with_capacity(layout.n_layers);
        for il in 0..layout.n_layers {
            k.push(Buf::zeroed(layout.dtype, tokens * layout.k_per_token(il))?);
            v.push(Buf::zeroed(layout.dtype, tokens * layout.v_per_token(il))?);
        }
        Ok((k, v))
    }

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
            KvDType::Q8_0 => {
                let mut v = Vec::new();
                v.try_reserve_exact(n / 32)?;
                v.resize(
                    n / 32,
                    BlockQ8_0 {
                        d: f16::ZERO,
                        qs: [0; 32],
                    },
                );
                Buf::Q8_0(v)
            }
            KvDType::Q4_0 => {
                let mut v = Vec::new();
                v.try_reserve_exact(n / 32)?;
                v.resize(
                    n / 32,
                    BlockQ4_0 {
                        d: f16::ZERO,
                        qs: [0x88; 16],
                    },
                );
                Buf::Q4_0(v)
            }
        })
    }

    /// Store `src` at value offset `at` (for quantized buffers both are multiples of 32).
    pub(crate) fn write(&mut self, at: usize, src: &[f32]) -> Result<(), KvError> {
        let quant = |e: kestrel_gguf::quant::QuantError| KvError::Pool(e.to_string());
        match self {
            Buf::F32(b) => b[at..at + src.len()].copy_from_slice(src),
            Buf::F16(b) => {
                for (d, s) in b[at..at + src.len()].iter_mut().zip(src) {
                    *d = f16::from_f32(*s);
                }
            }
            Buf::Q8_0(b) => {
                q8_0::quantize_row(src, &mut b[at / 32..(at + src.len()) / 32]).map_err(quant)?
            }
            Buf::Q4_0(b) => {
                q4_0::quantize_row(src, &mut b[at / 32..(at + src.len()) / 32]).map_err(quant)?
            }
        }
        Ok(())
    }

    pub(crate) fn slice(&self, n: usize) -> KvSlice<'_> {
        match self {
            Buf::F32(b) => KvSlice::F32(&b[..n]),
            Buf::F16(b) => KvSlice::F16(&b[..n]),
            Buf::Q8_0(b) => KvSlice::Q8_0(&b[..n / 32]),
            Buf::Q4_0(b) => KvSlice::Q4_0(&b[..n / 32]),
        }
    }
}
