//! The file types `llama-quantize` takes (`Q4_K_M`, `IQ4_XS`, ...): each one's id in
//! `general.file_type` (llama.cpp's `llama_ftype`) and the tensor type most tensors get.

use crate::GgmlType;

/// A quantization mix, as llama.cpp's `llama_ftype` (ids as written in `general.file_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(non_camel_case_types, missing_docs)]
pub enum FileType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q2_K_S,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    IQ2_XXS,
    IQ2_XS,
    IQ2_S,
    IQ2_M,
    IQ3_XXS,
    IQ3_XS,
    IQ3_S,
    IQ3_M,
    IQ1_S,
    IQ1_M,
    IQ4_NL,
    IQ4_XS,
    TQ1_0,
    TQ2_0,
    MXFP4_MOE,
}

/// (name as `llama-quantize` spells it, type, `general.file_type` id, default tensor type).
const TABLE: &[(&str, FileType, u32, GgmlType)] = &[
    ("F32", FileType::F32, 0, GgmlType::F32),
    ("F16", FileType::F16, 1, GgmlType::F16),
    ("BF16", FileType::BF16, 32, GgmlType::BF16),
    ("Q4_0", FileType::Q4_0, 2, GgmlType::Q4_0),
    ("Q4_1", FileType::Q4_1, 3, GgmlType::Q4_1),
    ("Q5_0", FileType::Q5_0, 8, GgmlType::Q5_0),
    ("Q5_1", FileType::Q5_1, 9, GgmlType::Q5_1),
    ("Q8_0", FileType::Q8_0, 7, GgmlType::Q8_0),
    ("Q2_K", FileType::Q2_K, 10, GgmlType::Q2K),
    ("Q2_K_S", FileType::Q2_K_S, 21, GgmlType::Q2K),
    ("Q3_K_S", FileType::Q3_K_S, 11, GgmlType::Q3K),
    ("Q3_K_M", FileType::Q3_K_M, 12, GgmlType::Q3K),
    ("Q3_K_L", FileType::Q3_K_L, 13, GgmlType::Q3K),
    ("Q4_K_S", FileType::Q4_K_S, 14, GgmlType::Q4K),
    ("Q4_K_M", FileType::Q4_K_M, 15, GgmlType::Q4K),
    ("Q5_K_S", FileType::Q5_K_S, 16, GgmlType::Q5K),
    ("Q5_K_M", FileType::Q5_K_M, 17, GgmlType::Q5K),
    ("Q6_K", FileType::Q6_K, 18, GgmlType::Q6K),
    ("IQ2_XXS", FileType::IQ2_XXS, 19, GgmlType::IQ2XXS),
    ("IQ2_XS", FileType::IQ2_XS, 20, GgmlType::IQ2XS),
    ("IQ2_S", FileType::IQ2_S, 28, GgmlType::IQ2XS),
    ("IQ2_M", FileType::IQ2_M, 29, GgmlType::IQ2S),
    ("IQ3_XXS", FileType::IQ3_XXS, 23, GgmlType::IQ3XXS),
    ("IQ3_XS", FileType::IQ3_XS, 22, GgmlType::IQ3S),
    ("IQ3_S", FileType::IQ3_S, 26, GgmlType::IQ3S),
    ("IQ3_M", FileType::IQ3_M, 27, GgmlType::IQ3S),
    ("IQ1_S", FileType::IQ1_S, 24, GgmlType::IQ1S),
    ("IQ1_M", FileType::IQ1_M, 31, GgmlType::IQ1M),
    ("IQ4_NL", FileType::IQ4_NL, 25, GgmlType::IQ4NL),
    ("IQ4_XS", FileType::IQ4_XS, 30, GgmlType::IQ4XS),
    ("TQ1_0", FileType::TQ1_0, 36, GgmlType::TQ1_0),
    ("TQ2_0", FileType::TQ2_0, 37, GgmlType::TQ2_0),
    ("MXFP4_MOE", FileType::MXFP4_MOE, 38, GgmlType::MXFP4),
];

fn row(ft: FileType) -> &'static (&'static str, FileType, u32, GgmlType) {
    TABLE.iter().find(|r| r.1 == ft).unwrap_or(&TABLE[0])
}

impl FileType {
    /// Parse a name as `llama-quantize` does (case-insensitive; `Q4_K` and `Q5_K` are
    /// `Q4_K_M` and `Q5_K_M`).
    pub fn parse(name: &str) -> Option<FileType> {
        let up = name.to_ascii_uppercase();
        let up = match up.as_str() {
            "Q4_K" => "Q4_K_M",
            "Q5_K" => "Q5_K_M",
            other => other,
        };
        TABLE.iter().find(|r| r.0 == up).map(|r| r.1)
    }

    /// Every name [`parse`](Self::parse) takes (the aliases aside).
    pub fn names() -> impl Iterator<Item = &'static str> {
        TABLE.iter().map(|r| r.0)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        row(self).0
    }

    /// Its `general.file_type` id.
    pub fn id(self) -> u32 {
        row(self).2
    }

    /// The tensor type most tensors get (llama.cpp's `llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        row(self).3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_with_llama_cpp_ids() {
        for n in FileType::names() {
            let ft = FileType::parse(n).unwrap();
            assert_eq!(ft.name(), n);
        }
        assert_eq!(FileType::parse("q4_k").unwrap(), FileType::Q4_K_M);
        assert_eq!(FileType::Q4_K_M.id(), 15);
        assert_eq!(FileType::IQ2_S.default_type(), GgmlType::IQ2XS);
        assert_eq!(FileType::parse("Q9"), None);
    }
}
