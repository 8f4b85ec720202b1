//! `DType`: the element types kestrel computes with (F32, F16, BF16 and the GGUF quant block
//! types), their block geometry and their mapping to and from [`GgmlType`].

use std::fmt;

use kestrel_gguf::GgmlType;

use crate::error::TensorError;

/// An element type. Quantized types store `block_size()` elements in `block_bytes()` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// ggml Q4_0.
    Q4_0,
    /// ggml Q4_1.
    Q4_1,
    /// ggml Q5_0.
    Q5_0,
    /// ggml Q5_1.
    Q5_1,
    /// ggml Q8_0.
    Q8_0,
    /// ggml Q2_K.
    Q2K,
    /// ggml Q3_K.
    Q3K,
    /// ggml Q4_K.
    Q4K,
    /// ggml Q5_K.
    Q5K,
    /// ggml Q6_K.
    Q6K,
    /// ggml Q8_K (activation-side type; weights never use it, but it dequantizes).
    Q8K,
    /// ggml IQ4_NL.
    IQ4NL,
    /// ggml IQ4_XS.
    IQ4XS,
    /// ggml MXFP4 (OCP microscaling FP4: gpt-oss's experts).
    MXFP4,
    /// ggml TQ1_0 (ternary, 1.69 bits per weight: BitNet b1.58, TriLM).
    TQ1_0,
    /// ggml TQ2_0 (ternary, 2.06 bits per weight).
    TQ2_0,
    /// ggml IQ2_XXS (2.06 bits per weight, grid).
    IQ2XXS,
    /// ggml IQ2_XS (2.31 bits per weight, grid).
    IQ2XS,
    /// ggml IQ2_S (2.56 bits per weight, grid).
    IQ2S,
    /// ggml IQ3_XXS (3.06 bits per weight, grid).
    IQ3XXS,
    /// ggml IQ3_S (3.44 bits per weight, grid).
    IQ3S,
    /// ggml IQ1_S (1.56 bits per weight, grid).
    IQ1S,
    /// ggml IQ1_M (1.75 bits per weight, grid).
    IQ1M,
}

impl DType {
    /// Every dtype, in ggml id order of the matching [`GgmlType`].
    pub const ALL: [DType; 26] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Q8K,
        DType::IQ2XXS,
        DType::IQ2XS,
        DType::IQ3XXS,
        DType::IQ1S,
        DType::IQ4NL,
        DType::IQ3S,
        DType::IQ2S,
        DType::IQ4XS,
        DType::IQ1M,
        DType::BF16,
        DType::TQ1_0,
        DType::TQ2_0,
        DType::MXFP4,
    ];

    /// The GGUF tensor type with the same bytes.
    pub fn ggml_type(self) -> GgmlType {
        match self {
            DType::F32 => GgmlType::F32,
            DType::F16 => GgmlType::F16,
            DType::BF16 => GgmlType::BF16,
            DType::Q4_0 => GgmlType::Q4_0,
            DType::Q4_1 => GgmlType::Q4_1,
            DType::Q5_0 => GgmlType::Q5_0,
            DType::Q5_1 => GgmlType::Q5_1,
            DType::Q8_0 => GgmlType::Q8_0,
            DType::Q2K => GgmlType::Q2K,
            DType::Q3K => GgmlType::Q3K,
            DType::Q4K => GgmlType::Q4K,
            DType::Q5K => GgmlType::Q5K,
            DType::Q6K => GgmlType::Q6K,
            DType::Q8K => GgmlType::Q8K,
            DType::IQ4NL => GgmlType::IQ4NL,
            DType::IQ4XS => GgmlType::IQ4XS,
            DType::MXFP4 => GgmlType::MXFP4,
            DType::TQ1_0 => GgmlType::TQ1_0,
            DType::TQ2_0 => GgmlType::TQ2_0,
            DType::IQ2XXS => GgmlType::IQ2XXS,
            DType::IQ2XS => GgmlType::IQ2XS,
            DType::IQ2S => GgmlType::IQ2S,
            DType::IQ3XXS => GgmlType::IQ3XXS,
            DType::IQ3S => GgmlType::IQ3S,
            DType::IQ1S => GgmlType::IQ1S,
            DType::IQ1M => GgmlType::IQ1M,
        }
    }

    /// Elements per block (1 for F32/F16/BF16).
    pub fn block_size(self) -> usize {
        self.ggml_type().block_size()
    }

    /// Bytes per block (the element size for F32/F16/BF16).
    pub fn block_bytes(self) -> usize {
        self.ggml_type().type_size()
    }

    /// True for the block-quantized types.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// True for F32, F16 and BF16.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes taken by a row of `n` elements, or `None` if `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        let bs = self.block_size();
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.block_bytes())
    }

    /// ggml's name (`"Q4_K"`, `"F16"`, ...).
    pub fn name(self) -> &'static str {
        self.ggml_type().name()
    }
}

impl TryFrom<GgmlType> for DType {
    type Error = TensorError;

    fn try_from(t: GgmlType) -> Result<Self, TensorError> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.ggml_type() == t)
            .ok_or(TensorError::UnsupportedGgmlType(t))
    }
}

impl From<DType> for GgmlType {
    fn from(d: DType) -> GgmlType {
        d.ggml_type()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_ggml_type() {
        for d in DType::ALL {
            assert_eq!(DType::try_from(d.ggml_type()).unwrap(), d);
            assert_eq!(
                d.row_bytes(256),
                d.ggml_type().row_bytes(256).map(|b| b as usize)
            );
        }
        // The integer types hold no weights kestrel computes with.
        assert!(matches!(
            DType::try_from(GgmlType::I8),
            Err(TensorError::UnsupportedGgmlType(GgmlType::I8))
        ));
        assert_eq!(DType::Q4K.block_size(), 256);
        assert_eq!(DType::Q4K.block_bytes(), 144);
        assert_eq!(DType::Q4_0.row_bytes(33), None);
        assert!(DType::BF16.is_float() && !DType::BF16.is_quantized());
    }
}
