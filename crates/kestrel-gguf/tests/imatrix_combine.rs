//! `ImatrixSums` against llama-imatrix b11434 (`fixtures/imatrix/make.py`): the sums of two
//! made-up imatrix files read, combined and written as `llama-imatrix --in-file` does it, byte
//! for byte, per-matrix statistics included.

use std::path::{Path, PathBuf};

use kestrel_gguf::quantize::ImatrixSums;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/imatrix")
        .join(name)
}

fn written(sums: &ImatrixSums, tag: &str) -> Vec<u8> {
    let out =
        std::env::temp_dir().join(format!("kestrel-imatrix-{tag}-{}.gguf", std::process::id()));
    sums.write(&out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).ok();
    bytes
}

fn assert_same(got: &[u8], want_file: &str) {
    let want = std::fs::read(fixture(want_file)).unwrap();
    assert_eq!(got.len(), want.len(), "{want_file}: length");
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        panic!("{want_file}: first differing byte at {i} of {}", want.len());
    }
}

#[test]
fn one_file_is_rewritten_as_llama_imatrix_writes_it() {
    let a = ImatrixSums::load(&fixture("a.gguf")).unwrap();
    assert_eq!(a.datasets, vec!["first.txt".to_string()]);
    assert_eq!((a.chunk_count, a.chunk_size), (4, 512));
    // The entry stored without in_sum stays without.
    assert!(a.entries["blk.0.attn_k.weight"].in_sum.is_empty());
    assert_same(&written(&a, "a"), "out_a.gguf");
}

#[test]
fn two_files_combine_as_llama_imatrix_combines_them() {
    let mut sums = ImatrixSums::default();
    sums.combine(ImatrixSums::load(&fixture("a.gguf")).unwrap())
        .unwrap();
    sums.combine(ImatrixSums::load(&fixture("b.gguf")).unwrap())
        .unwrap();
    assert_eq!(sums.datasets, ["first.txt", "second.txt"]);
    // The one-count expert entry was broadcast, then added to.
    assert_eq!(
        sums.entries["blk.0.ffn_up_exps.weight"].counts,
        [556.0, 456.0, 256.0, 756.0]
    );
    // in_sum only in the first file's ffn_down: dropped.
    assert!(sums.entries["blk.0.ffn_down.weight"].in_sum.is_empty());
    assert_same(&written(&sums, "ab"), "out_ab.gguf");

    // Several counts, then one: refused, as llama-imatrix refuses it.
    let mut rev = ImatrixSums::load(&fixture("b.gguf")).unwrap();
    let err = rev
        .combine(ImatrixSums::load(&fixture("a.gguf")).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("ffn_up_exps"), "{err}");
}

#[test]
fn a_model_file_is_not_an_imatrix() {
    let dir = std::env::temp_dir().join(format!("kestrel-imx-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("legacy.dat");
    std::fs::write(&p, [1u8, 0, 0, 0, 3, 0, 0, 0]).unwrap();
    let err = ImatrixSums::load(&p).unwrap_err().to_string();
    assert!(err.contains(".dat"), "{err}");
    let mut w = kestrel_gguf::GgufWriter::new();
    w.add_metadata("general.type", "model");
    w.add_f32_tensor("blk.0.attn_q.weight", &[2], &[1.0, 2.0])
        .unwrap();
    let m = dir.join("model.gguf");
    w.write_file(&m).unwrap();
    let err = ImatrixSums::load(&m).unwrap_err().to_string();
    assert!(err.contains("no imatrix entries"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The legacy `.dat` format (`fixtures/imatrix/c.dat`) combined as llama-imatrix b11434
/// combines it: alone with `-c 64` (its values and call counts scaled by 64, the chunk size
/// `-c`), before a GGUF file (scaled by the default 512) and after one (by its chunk size).
#[test]
fn legacy_dat_files_combine_as_llama_imatrix_combines_them() {
    let combined = |files: &[&str], ctx: u32| {
        let mut sums = ImatrixSums::default();
        for f in files {
            sums.combine_file(&fixture(f), ctx).unwrap();
        }
        sums.finish_combined(ctx);
        sums
    };
    let c = combined(&["c.dat"], 64);
    assert_eq!(c.datasets, ["legacy.txt"]);
    assert_eq!(c.entries["blk.0.attn_q.weight"].counts, [3.0 * 64.0]);
    assert!(c.entries["blk.0.attn_q.weight"].in_sum.is_empty());
    assert_eq!((c.chunk_size, c.chunk_count), (64, 5));
    assert_same(&written(&c, "c"), "out_c.gguf");
    assert_same(
        &written(&combined(&["c.dat", "a.gguf"], 512), "ca"),
        "out_ca.gguf",
    );
    assert_same(
        &written(&combined(&["a.gguf", "c.dat"], 512), "ac"),
        "out_ac.gguf",
    );
    // A truncated legacy file is an error naming the file, not a panic.
    let bytes = std::fs::read(fixture("c.dat")).unwrap();
    let cut = std::env::temp_dir().join(format!("kestrel-imatrix-cut-{}.dat", std::process::id()));
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = ImatrixSums::load(&cut).unwrap_err().to_string();
    std::fs::remove_file(&cut).ok();
    assert!(e.contains("legacy") && e.contains("entry"), "{e}");
}

#[test]
fn statistics_print_as_llama_imatrix_prints_them() {
    // `llama-imatrix --show-statistics --in-file F` (fixtures/imatrix/make.py): the legacy
    // columns where some entry has no in_sum (a, out_ab), the full ones where all have (d).
    for (file, want) in [
        ("a.gguf", "stats_a.txt"),
        ("out_ab.gguf", "stats_out_ab.txt"),
        ("d.gguf", "stats_d.txt"),
    ] {
        let mut sums = ImatrixSums::default();
        sums.combine_file(&fixture(file), 512).unwrap();
        let report = sums.statistics_report(file).unwrap();
        let want = std::fs::read_to_string(fixture(want)).unwrap();
        assert_eq!(report.text, want, "{file}");
        assert_eq!(report.error, None, "{file}");
        assert_eq!(report.warning.is_some(), file != "d.gguf", "{file}");
    }
    // c.dat's blocks 0, 1 and 6: the tensor table, then llama-imatrix stops on the gap.
    let mut sums = ImatrixSums::default();
    sums.combine_file(&fixture("c.dat"), 512).unwrap();
    let report = sums.statistics_report("c.dat").unwrap();
    let want = std::fs::read_to_string(fixture("stats_c.txt")).unwrap();
    assert_eq!(report.text, want);
    assert!(report.error.unwrap().contains("gap"));
    // Nothing counted: no table.
    assert!(ImatrixSums::default().statistics_report("x").is_none());
}
