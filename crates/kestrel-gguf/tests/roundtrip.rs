//! reader(writer(x)) == x for arbitrary metadata and tensors, and split models opened as one.

use kestrel_gguf::{
    split_path, GgmlType, GgufError, GgufFile, GgufModel, GgufWriter, MetadataValue, ValueType,
};
use proptest::prelude::*;

fn scalar() -> impl Strategy<Value = MetadataValue> {
    prop_oneof![
        any::<u8>().prop_map(MetadataValue::U8),
        any::<i8>().prop_map(MetadataValue::I8),
        any::<u16>().prop_map(MetadataValue::U16),
        any::<i16>().prop_map(MetadataValue::I16),
        any::<u32>().prop_map(MetadataValue::U32),
        any::<i32>().prop_map(MetadataValue::I32),
        any::<u64>().prop_map(MetadataValue::U64),
        any::<i64>().prop_map(MetadataValue::I64),
        prop::num::f32::NORMAL.prop_map(MetadataValue::F32),
        prop::num::f64::NORMAL.prop_map(MetadataValue::F64),
        any::<bool>().prop_map(MetadataValue::Bool),
        ".{0,12}".prop_map(MetadataValue::String),
    ]
}

/// An array whose elements all share one type (arrays of arrays included).
fn value() -> impl Strategy<Value = MetadataValue> {
    scalar().prop_recursive(3, 32, 6, |inner| {
        (inner, 0usize..6).prop_map(|(proto, n)| {
            let element_type = proto.value_type();
            MetadataValue::Array {
                element_type,
                items: vec![proto; n],
            }
        })
    })
}

#[derive(Debug, Clone)]
struct T {
    name: String,
    ty: GgmlType,
    dims: Vec<u64>,
    data: Vec<u8>,
}

fn tensor() -> impl Strategy<Value = T> {
    let types = prop::sample::select(vec![
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
    ]);
    ("[a-z.]{1,10}", types, prop::collection::vec(1u64..4, 0..4)).prop_flat_map(
        |(name, ty, mut dims)| {
            if dims.is_empty() {
                dims.push(1);
            }
            dims[0] *= ty.block_size() as u64;
            let n = ty.row_bytes(dims[0]).unwrap() * dims[1..].iter().product::<u64>();
            prop::collection::vec(any::<u8>(), n as usize).prop_map(move |data| T {
                name: name.clone(),
                ty,
                dims: dims.clone(),
                data,
            })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn read_of_write_is_identity(
        md in prop::collection::btree_map("[a-z_.]{1,16}", value(), 0..12),
        tensors in prop::collection::vec(tensor(), 0..6),
        align_pow in 0u32..8,
        version in 2u32..4,
    ) {
        let alignment = 1u64 << (align_pow + 2);
        let mut w = GgufWriter::new();
        w.set_version(version).set_alignment(alignment);
        for (k, v) in &md {
            w.add_metadata(k, v.clone());
        }
        let mut names = std::collections::HashSet::new();
        let tensors: Vec<T> = tensors.into_iter().filter(|t| names.insert(t.name.clone())).collect();
        for t in &tensors {
            w.add_tensor(&t.name, t.ty, &t.dims, t.data.clone()).unwrap();
        }
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        prop_assert_eq!(f.version(), version);
        prop_assert_eq!(f.alignment(), alignment);
        let got: Vec<(String, MetadataValue)> = f
            .metadata()
            .iter()
            .filter(|(k, _)| *k != "general.alignment" || md.contains_key("general.alignment"))
            .map(|(k, v)| (k.to_string(), v.to_owned_value()))
            .collect();
        let want: Vec<(String, MetadataValue)> = md.into_iter().collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(f.tensors().len(), tensors.len());
        for t in &tensors {
            let v = f.tensor(&t.name).unwrap();
            prop_assert_eq!(v.info.ggml_type(), t.ty);
            prop_assert_eq!(v.info.dims(), &t.dims[..]);
            prop_assert_eq!(v.data, &t.data[..]);
            prop_assert_eq!(v.info.file_offset() % alignment, 0);
        }
    }
}

#[test]
fn writer_refuses_what_gguf_cannot_hold() {
    let mut w = GgufWriter::new();
    assert!(w
        .add_tensor("a", GgmlType::Q4_0, &[33], vec![0; 18])
        .is_err());
    assert!(w.add_tensor("a", GgmlType::F32, &[2], vec![0; 4]).is_err());
    assert!(w
        .add_tensor("a", GgmlType::F32, &[1, 1, 1, 1, 1], vec![0; 4])
        .is_err());
    w.add_tensor("a", GgmlType::F32, &[1], vec![0; 4]).unwrap();
    assert!(w.add_tensor("a", GgmlType::F32, &[1], vec![0; 4]).is_err());
    w.add_metadata(
        "bad",
        MetadataValue::Array {
            element_type: ValueType::U8,
            items: vec![MetadataValue::U32(1)],
        },
    );
    assert!(matches!(w.to_bytes(), Err(GgufError::InvalidWrite(_))));
}

fn write_split(
    dir: &std::path::Path,
    count: usize,
    tensors_per: usize,
    skip_count_key: bool,
) -> std::path::PathBuf {
    let prefix = dir.join("model");
    for s in 0..count {
        let mut w = GgufWriter::new();
        if s == 0 {
            w.add_metadata("general.architecture", "llama");
        }
        w.add_metadata("split.no", MetadataValue::U16(s as u16));
        if !skip_count_key {
            w.add_metadata("split.count", MetadataValue::U16(count as u16));
        }
        w.add_metadata(
            "split.tensors.count",
            MetadataValue::I32((count * tensors_per) as i32),
        );
        for t in 0..tensors_per {
            w.add_f32_tensor(&format!("t{s}.{t}"), &[2], &[s as f32, t as f32])
                .unwrap();
        }
        w.write_file(split_path(&prefix, s + 1, count)).unwrap();
    }
    split_path(&prefix, 1, count)
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kestrel-gguf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn split_model_opens_from_any_shard() {
    let dir = tempdir("split");
    let first = write_split(&dir, 3, 2, false);
    for no in 1..=3 {
        let p = split_path(&dir.join("model"), no, 3);
        let m = GgufModel::open(&p).unwrap();
        assert_eq!(m.shards().len(), 3);
        assert_eq!(m.n_tensors(), 6);
        assert_eq!(m.metadata().architecture().unwrap(), "llama");
        let t = m.tensor("t2.1").unwrap();
        assert_eq!(t.data, [2f32.to_le_bytes(), 1f32.to_le_bytes()].concat());
    }
    // A missing shard is named.
    std::fs::remove_file(split_path(&dir.join("model"), 2, 3)).unwrap();
    let e = GgufModel::open(&first).unwrap_err().to_string();
    assert!(e.contains("shard 2 of 3 is missing"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn split_model_inconsistencies_are_errors() {
    let dir = tempdir("split-bad");
    write_split(&dir, 2, 1, false);
    // Wrong split.tensors.count.
    let mut w = GgufWriter::new();
    w.add_metadata("split.no", MetadataValue::U16(0))
        .add_metadata("split.count", MetadataValue::U16(2))
        .add_metadata("split.tensors.count", MetadataValue::I32(5));
    w.add_f32_tensor("t0.0", &[1], &[0.0]).unwrap();
    w.write_file(split_path(&dir.join("model"), 1, 2)).unwrap();
    let e = GgufModel::open(split_path(&dir.join("model"), 1, 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("split.tensors.count is 5"), "{e}");
    // A shard file whose name does not follow the pattern.
    let odd = dir.join("odd.gguf");
    std::fs::copy(split_path(&dir.join("model"), 2, 2), &odd).unwrap();
    let e = GgufModel::open(&odd).unwrap_err().to_string();
    assert!(e.contains("one of 2 shards"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plain_file_is_a_one_shard_model() {
    let dir = tempdir("plain");
    let p = dir.join("m.gguf");
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "qwen2");
    w.add_f32_tensor("x", &[1], &[3.0]).unwrap();
    w.write_file(&p).unwrap();
    let m = GgufModel::open(&p).unwrap();
    assert_eq!(m.shards().len(), 1);
    assert!(m.shards()[0].is_mmapped());
    assert!(matches!(
        m.tensor("nope"),
        Err(GgufError::MissingTensor { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
