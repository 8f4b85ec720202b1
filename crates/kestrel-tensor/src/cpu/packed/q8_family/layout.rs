//! The q8_0-family layouts' kinds and sizes, and the activation side a kernel reads.
use kestrel_gguf::quant::iq4_nl::KVALUES_IQ4NL;
use kestrel_gguf::quant::mxfp4::KVALUES_MXFP4;

use crate::cpu::packed::groups::GROUP_ROWS;
use crate::cpu::q8_block::BlockQ8_1;
use crate::DType;

/// A q8_0-family weight type as packed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    IQ4NL,
    MXFP4,
}

impl Kind {
    /// The kind of `dtype`, if it is one of the q8_0 family.
    pub(crate) fn of(dtype: DType) -> Option<Kind> {
        Some(match dtype {
            DType::Q4_0 => Kind::Q4_0,
            DType::Q4_1 => Kind::Q4_1,
            DType::Q5_0 => Kind::Q5_0,
            DType::Q5_1 => Kind::Q5_1,
            DType::Q8_0 => Kind::Q8_0,
            DType::IQ4NL => Kind::IQ4NL,
            DType::MXFP4 => Kind::MXFP4,
            _ => return None,
        })
    }

    /// The dtype.
    pub(crate) const fn dtype(self) -> DType {
        match self {
            Kind::Q4_0 => DType::Q4_0,
            Kind::Q4_1 => DType::Q4_1,
            Kind::Q5_0 => DType::Q5_0,
            Kind::Q5_1 => DType::Q5_1,
            Kind::Q8_0 => DType::Q8_0,
            Kind::IQ4NL => DType::IQ4NL,
            Kind::MXFP4 => DType::MXFP4,
        }
    }

    /// Bytes of one block in the file.
    pub(crate) const fn raw_bytes(self) -> usize {
        match self {
            Kind::Q4_0 => 18,
            Kind::Q4_1 => 20,
            Kind::Q5_0 => 22,
            Kind::Q5_1 => 24,
            Kind::Q8_0 => 34,
            Kind::IQ4NL => 18,
            Kind::MXFP4 => 17,
        }
    }

    /// Whether the block has a min `m` (value `d·q + m`).
    pub(crate) const fn has_min(self) -> bool {
        matches!(self, Kind::Q4_1 | Kind::Q5_1)
    }

    /// What makes a stored quant unsigned (subtracted to get the signed value; 0 for the table
    /// types, whose values come from their table).
    pub(crate) const fn offset(self) -> i32 {
        match self {
            Kind::Q4_0 => 8,
            Kind::Q5_0 => 16,
            Kind::Q8_0 => 128,
            Kind::Q4_1 | Kind::Q5_1 | Kind::IQ4NL | Kind::MXFP4 => 0,
        }
    }

    /// The 16 values the nibbles of a table type index (IQ4_NL's, and MXFP4's E2M1 values
    /// doubled, as ggml's kernels take them against the half scale).
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub(crate) const fn table(self) -> Option<&'static [i8; 16]> {
        match self {
            Kind::IQ4NL => Some(&KVALUES_IQ4NL),
            Kind::MXFP4 => Some(&KVALUES_MXFP4),
            _ => None,
        }
    }

    /// Quant bytes of one block of a group.
    pub(crate) const fn quant_bytes(self) -> usize {
        match self {
            Kind::Q4_0 | Kind::Q4_1 | Kind::IQ4NL | Kind::MXFP4 => GROUP_ROWS * 16,
            Kind::Q5_0 | Kind::Q5_1 => GROUP_ROWS * 16 + 64,
            Kind::Q8_0 => GROUP_ROWS * 32,
        }
    }

    /// Scale bytes of one block of a group.
    pub(crate) const fn scale_bytes(self) -> usize {
        if self.has_min() {
            GROUP_ROWS * 4
        } else if matches!(self, Kind::MXFP4) {
            GROUP_ROWS
        } else {
            GROUP_ROWS * 2
        }
    }

    /// Bytes of a block's scale in the file (the f16 `d`, or MXFP4's exponent byte).
    pub(crate) const fn d_bytes(self) -> usize {
        if matches!(self, Kind::MXFP4) {
            1
        } else {
            2
        }
    }

    /// Where the file block's `d`, `m` (if any), `qh` (Q5) and quants start.
    pub(crate) const fn fields(self) -> (Option<usize>, Option<usize>, usize) {
        match self {
            Kind::Q4_0 | Kind::Q8_0 | Kind::IQ4NL => (None, None, 2),
            Kind::MXFP4 => (None, None, 1),
            Kind::Q4_1 => (Some(2), None, 4),
            Kind::Q5_0 => (None, Some(2), 6),
            Kind::Q5_1 => (Some(2), Some(4), 8),
        }
    }
}

/// The activation side of a call: q8_1 rows (q8_0's quants and `d`, with `s = f16(d · Σ a)`,
/// as ggml quantizes the activations of the types with a min) and, per block, an integer term
/// and `d` as f32. The integer is `-off · Σ a` for the types without a min, and the bits of
/// `s` as f32 for the others (see [`ActQ8::s`]).
#[derive(Clone, Copy)]
pub(crate) struct ActQ8<'a> {
    pub(crate) acts: &'a [BlockQ8_1],
    pub(crate) corr: &'a [i32],
    pub(crate) d: &'a [f32],
}

impl ActQ8<'_> {
    /// `s` of block `i` as f32 (for the types with a min).
    #[inline(always)]
    pub(crate) fn s(&self, i: usize) -> f32 {
        f32::from_bits(self.corr[i] as u32)
    }

    /// Rows `t0..t1` of `nb` blocks each.
    pub(crate) fn rows(&self, t0: usize, t1: usize, nb: usize) -> ActQ8<'_> {
        ActQ8 {
            acts: &self.acts[t0 * nb..t1 * nb],
            corr: &self.corr[t0 * nb..t1 * nb],
            d: &self.d[t0 * nb..t1 * nb],
        }
    }
}
