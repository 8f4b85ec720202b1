//! Hostile input: a corpus of broken files, each of which must give the right typed error (never
//! a panic), plus a proptest that mutates real and synthetic headers at random bytes.

use kestrel_gguf::models::{test_model, SMOLLM2_135M_Q4_1};
use kestrel_gguf::{GgmlType, GgufError, GgufFile, GgufWriter, MetadataValue, ValueType};
use proptest::prelude::*;

/// A raw little-endian byte builder for headers no writer would produce.
#[derive(Default, Clone)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw::default();
        r.0.extend_from_slice(b"GGUF");
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s);
        self
    }
    fn kv_u32(&mut self, k: &str, v: u32) -> &mut Self {
        self.str(k.as_bytes()).u32(ValueType::U32 as u32).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    fn pad_to(&mut self, n: usize) -> &mut Self {
        self.0.resize(n, 0);
        self
    }
    fn parse(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.0.clone())
    }
}

fn err(r: &Raw) -> GgufError {
    match r.parse() {
        Ok(_) => panic!("hostile file was accepted"),
        Err(e) => e,
    }
}

/// A small valid file with metadata of every type and a few tensors.
fn valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama")
        .add_metadata("a.u8", MetadataValue::U8(7))
        .add_metadata("a.i64", MetadataValue::I64(-5))
        .add_metadata("a.f64", MetadataValue::F64(0.25))
        .add_metadata("a.bool", true)
        .add_metadata("a.strs", MetadataValue::string_array(["x", "yy", ""]))
        .add_metadata(
            "a.nested",
            MetadataValue::Array {
                element_type: ValueType::Array,
                items: vec![
                    MetadataValue::i32_array([1, 2]),
                    MetadataValue::i32_array([]),
                ],
            },
        );
    w.add_f32_tensor("t0", &[4, 2], &[1.0; 8]).unwrap();
    w.add_tensor("t1", GgmlType::Q4_0, &[32], vec![0u8; 18])
        .unwrap();
    w.add_tensor("t2", GgmlType::F16, &[3], vec![0u8; 6])
        .unwrap();
    w.to_bytes().unwrap()
}

/// A named hostile file and the check its error must pass.
type Case = (&'static str, Raw, fn(&GgufError) -> bool);

#[test]
fn corpus_of_broken_headers() {
    use GgufError as E;
    let cases: Vec<Case> = vec![
        ("empty file", Raw::default(), |e| {
            matches!(e, E::Truncated { offset: 0, .. })
        }),
        ("3 bytes", Raw(b"GGU".to_vec()), |e| {
            matches!(e, E::Truncated { .. })
        }),
        (
            "bad magic",
            Raw({
                let mut v = b"GGML".to_vec();
                v.extend([3, 0, 0, 0]);
                v
            }),
            |e| matches!(e, E::BadMagic { .. }),
        ),
        ("version 1", Raw::header(1, 0, 0), |e| {
            matches!(e, E::UnsupportedVersion { version: 1, .. })
        }),
        ("version 4", Raw::header(4, 0, 0), |e| {
            matches!(e, E::UnsupportedVersion { version: 4, .. })
        }),
        ("big endian", Raw::header(3u32.swap_bytes(), 0, 0), |e| {
            matches!(e, E::BigEndian { .. })
        }),
        (
            "no counts",
            Raw({
                let mut v = b"GGUF".to_vec();
                v.extend(3u32.to_le_bytes());
                v
            }),
            |e| matches!(e, E::Truncated { offset: 8, .. }),
        ),
        ("huge tensor count", Raw::header(3, u64::MAX, 0), |e| {
            matches!(e, E::CountTooLarge { offset: 8, .. })
        }),
        ("huge kv count", Raw::header(3, 0, 1 << 60), |e| {
            matches!(e, E::CountTooLarge { offset: 16, .. })
        }),
        ("kv count beyond file", Raw::header(3, 0, 2), |e| {
            matches!(e, E::CountTooLarge { .. })
        }),
        (
            "key length huge",
            {
                let mut r = Raw::header(3, 0, 1);
                r.u64(u64::MAX).pad_to(64);
                r
            },
            |e| matches!(e, E::CountTooLarge { offset: 24, .. }),
        ),
        (
            "key not utf8",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(&[0xff, 0xfe]).u32(4).u32(1);
                r
            },
            |e| matches!(e, E::InvalidUtf8 { offset: 24, .. }),
        ),
        (
            "unknown value type",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(b"k").u32(13).u32(0);
                r
            },
            |e| {
                matches!(
                    e,
                    E::UnknownValueType {
                        type_id: 13,
                        offset: 33,
                        ..
                    }
                )
            },
        ),
        (
            "string value longer than file",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(b"k").u32(8).u64(1 << 40);
                r
            },
            |e| matches!(e, E::CountTooLarge { .. }),
        ),
        (
            "scalar value truncated",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(b"k").u32(10).u32(0);
                r
            },
            |e| matches!(e, E::Truncated { .. }),
        ),
        (
            "array count beyond file",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(b"k").u32(9).u32(10).u64(1 << 61);
                r
            },
            |e| matches!(e, E::CountTooLarge { .. }),
        ),
        (
            "array count overflows bytes",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(b"k").u32(9).u32(12).u64(u64::MAX / 4);
                r
            },
            |e| matches!(e, E::CountTooLarge { .. }),
        ),
        (
            "array element type unknown",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(b"k").u32(9).u32(99).u64(1).pad_to(80);
                r
            },
            |e| matches!(e, E::UnknownValueType { type_id: 99, .. }),
        ),
        (
            "arrays nested too deep",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(b"k");
                r.u32(9);
                for _ in 0..20 {
                    r.u32(9).u64(1);
                }
                r.u32(0).u64(0);
                r
            },
            |e| matches!(e, E::NestingTooDeep { .. }),
        ),
        (
            "duplicate key",
            {
                let mut r = Raw::header(3, 0, 2);
                r.kv_u32("k", 1).kv_u32("k", 2);
                r
            },
            |e| matches!(e, E::DuplicateKey { .. }),
        ),
        (
            "alignment zero",
            {
                let mut r = Raw::header(3, 0, 1);
                r.kv_u32("general.alignment", 0);
                r
            },
            |e| matches!(e, E::BadAlignment(0)),
        ),
        (
            "alignment not power of two",
            {
                let mut r = Raw::header(3, 0, 1);
                r.kv_u32("general.alignment", 48);
                r
            },
            |e| matches!(e, E::BadAlignment(48)),
        ),
        (
            "alignment is a string",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str(b"general.alignment").u32(8).str(b"32");
                r
            },
            |e| matches!(e, E::WrongType { .. }),
        ),
        (
            "tensor name not utf8",
            {
                let mut r = Raw::header(3, 1, 0);
                r.str(&[0xc3]).u32(1).u64(32).u32(0).u64(0).pad_to(256);
                r
            },
            |e| matches!(e, E::InvalidUtf8 { .. }),
        ),
        (
            "five dims",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[1, 1, 1, 1, 1], 0, 0).pad_to(256);
                r
            },
            |e| matches!(e, E::BadShape { .. }),
        ),
        (
            "dims product overflows",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[1 << 40, 1 << 40], 0, 0).pad_to(256);
                r
            },
            |e| matches!(e, E::BadShape { .. }),
        ),
        (
            "dim above i64",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[u64::MAX], 0, 0).pad_to(256);
                r
            },
            |e| matches!(e, E::BadShape { .. }),
        ),
        (
            "byte size overflows",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[1 << 31, 1 << 31], 0, 0).pad_to(256);
                r
            },
            |e| matches!(e, E::BadShape { .. } | E::TensorOutOfBounds { .. }),
        ),
        (
            "row not whole blocks",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[33], 2, 0).pad_to(256);
                r
            },
            |e| matches!(e, E::BadShape { .. }),
        ),
        (
            "unknown tensor type",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[32], 4, 0).pad_to(256);
                r
            },
            |e| matches!(e, E::UnknownTensorType { type_id: 4, .. }),
        ),
        (
            "misaligned offset",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[4], 0, 4).pad_to(256);
                r
            },
            |e| matches!(e, E::MisalignedTensor { offset: 4, .. }),
        ),
        (
            "data out of bounds",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[64], 0, 0).pad_to(100);
                r
            },
            |e| matches!(e, E::TensorOutOfBounds { .. }),
        ),
        (
            "offset overflows",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[4], 0, u64::MAX - 31).pad_to(256);
                r
            },
            |e| matches!(e, E::TensorOutOfBounds { .. }),
        ),
        (
            "data past end by one byte",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("t", &[8], 0, 0);
                let n = r.0.len().div_ceil(32) * 32 + 31;
                r.pad_to(n);
                r
            },
            |e| matches!(e, E::TensorOutOfBounds { .. }),
        ),
        (
            "overlapping tensors",
            {
                let mut r = Raw::header(3, 2, 0);
                r.tensor("a", &[16], 0, 0)
                    .tensor("b", &[16], 0, 32)
                    .pad_to(512);
                r
            },
            |e| matches!(e, E::TensorOverlap { .. }),
        ),
        (
            "duplicate tensor names",
            {
                let mut r = Raw::header(3, 2, 0);
                r.tensor("a", &[8], 0, 0)
                    .tensor("a", &[8], 0, 32)
                    .pad_to(512);
                r
            },
            |e| matches!(e, E::DuplicateTensor { .. }),
        ),
        (
            "tensor info truncated",
            {
                let mut r = Raw::header(3, 1, 0);
                r.str(b"t").u32(2).u64(4).pad_to(48);
                r
            },
            |e| matches!(e, E::Truncated { .. } | E::CountTooLarge { .. }),
        ),
    ];
    for (name, raw, ok) in &cases {
        let e = err(raw);
        assert!(ok(&e), "{name}: unexpected error {e:?}");
        // Every message says where: an offset, a key or a tensor.
        let msg = e.to_string();
        assert!(!msg.is_empty(), "{name}");
    }
    assert!(cases.len() >= 30);
}

#[test]
fn valid_file_parses_and_every_truncation_fails_cleanly() {
    let bytes = valid_file();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.tensors().len(), 3);
    for n in 0..bytes.len() {
        // Any prefix of the file is either an error or (only when all tensor bytes are
        // present) a valid file; never a panic.
        if let Ok(f) = GgufFile::from_bytes(bytes[..n].to_vec()) {
            let end = f
                .tensors()
                .iter()
                .map(|t| t.file_offset() + t.n_bytes())
                .max()
                .unwrap_or(0);
            assert!(end <= n as u64);
        }
    }
}

#[test]
fn error_messages_name_the_place() {
    let mut r = Raw::header(3, 0, 1);
    r.str(b"my.key").u32(13).u32(0);
    let msg = err(&r).to_string();
    assert!(
        msg.contains("my.key") && msg.contains("offset 38") && msg.contains("13"),
        "{msg}"
    );
    let mut r = Raw::header(3, 1, 0);
    r.tensor("blk.0.w", &[4], 0, 4).pad_to(256);
    let msg = err(&r).to_string();
    assert!(
        msg.contains("blk.0.w") && msg.contains("alignment"),
        "{msg}"
    );
}

fn mutate(base: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut v = base.to_vec();
    for &(pos, byte) in edits {
        let i = pos % v.len();
        v[i] = byte;
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_synthetic_file_never_panics(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let bytes = mutate(&valid_file(), &edits);
        if let Ok(f) = GgufFile::from_bytes(bytes) {
            // Whatever was accepted is safe to walk.
            for (_, v) in f.metadata().iter() {
                let _ = v.to_owned_value();
            }
            for t in f.tensors() {
                prop_assert_eq!(f.tensor(t.name()).unwrap().data.len() as u64, t.n_bytes());
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = b"GGUF\x03\0\0\0".to_vec();
        bytes.extend(tail);
        let _ = GgufFile::from_bytes(bytes);
    }
}

/// Mutate the real SmolLM2 header (all its metadata, 272 tensor infos) at random bytes.
#[test]
fn mutated_real_header_never_panics() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let f = GgufFile::open(&path).unwrap();
    // The header plus the first tensors' data: enough for most tensors to stay in bounds.
    let len = (f.data_offset() as usize + (1 << 20)).min(f.bytes().len());
    let base = f.bytes()[..len].to_vec();
    drop(f);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 128,
        ..ProptestConfig::default()
    });
    // Bias edits toward the header, where the structure is.
    let header = (0usize..1_800_000, any::<u8>());
    runner
        .run(&prop::collection::vec(header, 1..6), |edits| {
            let _ = GgufFile::from_bytes(mutate(&base, &edits));
            Ok(())
        })
        .unwrap();
}
