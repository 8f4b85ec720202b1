//! `kestrel quantize` writes what `llama-quantize` writes, byte for byte: the inputs are
//! llama.cpp's random-weight architecture files (seed 1, rebuilt from
//! `fixtures/archs/skeletons.json`: the same tensors as `test-llama-archs -s 1` writes, the
//! metadata keys sorted), and `fixtures/quantize/golden.json` holds the sha256 of
//! `llama-quantize`'s output on those very bytes for each file and mix (llama.cpp b11434, 2
//! threads, no importance matrix; `KESTREL_QUANT_INPUTS=DIR` writes the inputs to remake it).
//! Their rows (256 and 384 wide) take the mixes' fallback types too.

use std::path::{Path, PathBuf};

use kestrel_gguf::quantize::{quantize_file, FileType, QuantizeOptions};
use sha2::{Digest, Sha256};

// Only the file builders of the shared module are used here.
#[allow(dead_code)]
#[path = "llama_archs/files.rs"]
mod files;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `golden.json` and the architecture skeletons the inputs are rebuilt from.
/// Quantizes `input` to `output` with `opts`, returns the output's SHA-256 (hex) and removes it.
fn quantized_sha(input: &Path, output: &Path, opts: &QuantizeOptions) -> String {
    quantize_file(input, output, opts, &mut |_| {}).expect("quantize");
    let sha = format!(
        "{:x}",
        Sha256::digest(std::fs::read(output).expect("output"))
    );
    std::fs::remove_file(output).ok();
    sha
}

fn golden_and_skeletons() -> (
    serde_json::Value,
    std::collections::BTreeMap<String, files::Skeleton>,
) {
    let golden = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("quantize/golden.json")).expect("golden"),
    )
    .expect("json");
    (
        golden,
        files::read_skeletons(&fixtures().join("archs/skeletons.json")),
    )
}

#[test]
fn quantize_matches_llama_quantize_byte_for_byte() {
    let (golden, skeletons) = golden_and_skeletons();
    let dir = std::env::temp_dir().join(format!("kestrel-quantize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut checked = 0;
    for (stem, mixes) in golden["files"].as_object().expect("files") {
        let input = dir.join(format!("{stem}.gguf"));
        let bytes = files::build_bytes_as(&skeletons[stem.as_str()], 1, 0.1, |_, _| {
            kestrel_gguf::GgmlType::F32
        });
        std::fs::write(&input, bytes).expect("input");
        // KESTREL_QUANT_INPUTS=DIR writes the inputs there (for llama-quantize to make the
        // golden file from) and checks nothing.
        if let Ok(d) = std::env::var("KESTREL_QUANT_INPUTS") {
            std::fs::copy(&input, Path::new(&d).join(format!("{stem}.gguf"))).expect("copy");
            continue;
        }
        for (mix, sha) in mixes.as_object().expect("mixes") {
            let ft = FileType::parse(mix).expect("mix name");
            let output = dir.join(format!("{stem}-{mix}.gguf"));
            let opts = QuantizeOptions {
                threads: 2,
                ..QuantizeOptions::new(ft)
            };
            let got = quantized_sha(&input, &output, &opts);
            assert_eq!(got, sha.as_str().expect("sha"), "{stem} {mix}");
            checked += 1;
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    if std::env::var("KESTREL_QUANT_INPUTS").is_ok() {
        return;
    }
    assert!(checked >= 80, "{checked} files checked");
}

/// A synthetic importance matrix for every quantizable matrix of `model` (GGUF, as
/// `llama-imatrix` writes it: `<name>.in_sum2` and `<name>.counts`; deterministic values).
fn synthetic_imatrix(model: &[u8]) -> Vec<u8> {
    use kestrel_gguf::{GgufFile, GgufWriter, MetadataValue, ValueType};
    let file = GgufFile::from_bytes(model.to_vec()).expect("model");
    let mut w = GgufWriter::new();
    w.add_metadata("general.type", "imatrix");
    w.add_metadata(
        "imatrix.datasets",
        MetadataValue::Array {
            element_type: ValueType::String,
            items: vec![MetadataValue::String("synthetic.txt".into())],
        },
    );
    w.add_metadata("imatrix.chunk_count", MetadataValue::U32(3));
    w.add_metadata("imatrix.chunk_size", MetadataValue::U32(512));
    let mut seed = 1u64;
    for t in file.tensors() {
        let name = t.name();
        let dims = t.dims();
        if dims.len() < 2 || !name.ends_with("weight") || name.contains("norm") {
            continue;
        }
        if name == "token_embd.weight" {
            continue;
        }
        let (ne0, ne2) = (dims[0], dims.get(2).copied().unwrap_or(1));
        let sums: Vec<f32> = (0..ne0 * ne2)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                1.0 + ((seed >> 40) as f32 / (1u64 << 24) as f32) * 100.0
            })
            .collect();
        w.add_f32_tensor(&format!("{name}.in_sum2"), &[ne0 * ne2], &sums)
            .expect("sums");
        w.add_f32_tensor(&format!("{name}.counts"), &[ne2], &vec![50.0; ne2 as usize])
            .expect("counts");
    }
    w.to_bytes().expect("imatrix")
}

/// Quantizes `input` to each of `mixes` (type name -> sha256 of llama-quantize's output) with
/// `im`, checking each output's hash; the number checked.
fn quantize_mixes(
    stem: &str,
    mixes: &serde_json::Value,
    input: &Path,
    dir: &Path,
    im: &kestrel_gguf::quantize::Imatrix,
) -> usize {
    let mut checked = 0;
    for (mix, sha) in mixes.as_object().expect("mixes") {
        let output = dir.join(format!("{stem}-{mix}.gguf"));
        let opts = QuantizeOptions {
            threads: 2,
            imatrix: Some(im.clone()),
            ..QuantizeOptions::new(FileType::parse(mix).expect("mix"))
        };
        let got = quantized_sha(input, &output, &opts);
        assert_eq!(
            got,
            sha.as_str().expect("sha"),
            "{stem} {mix} with the imatrix {}",
            im.file
        );
        checked += 1;
    }
    checked
}

/// The synthetic importance matrix in llama-imatrix's legacy `.dat` format (values as the
/// format stores them, `(sum / count) · ncall`, with 7 calls; a trailer of 5 chunks and a
/// dataset name).
fn synthetic_imatrix_dat(model: &[u8]) -> Vec<u8> {
    use kestrel_gguf::GgufFile;
    let im = GgufFile::from_bytes(synthetic_imatrix(model)).expect("imatrix");
    let entries: Vec<(String, Vec<f32>)> = im
        .tensors()
        .iter()
        .filter_map(|info| {
            let name = info.name().strip_suffix(".in_sum2")?.to_string();
            let t = im.tensor(info.name()).expect("tensor");
            let v = t
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) / 50.0 * 7.0)
                .collect();
            Some((name, v))
        })
        .collect();
    let mut b = (entries.len() as i32).to_le_bytes().to_vec();
    for (name, v) in &entries {
        b.extend((name.len() as i32).to_le_bytes());
        b.extend(name.as_bytes());
        b.extend(7i32.to_le_bytes());
        b.extend((v.len() as i32).to_le_bytes());
        v.iter().for_each(|x| b.extend(x.to_le_bytes()));
    }
    b.extend(5i32.to_le_bytes());
    b.extend(10i32.to_le_bytes());
    b.extend(b"legacy.txt");
    b
}

/// A legacy `.dat` importance matrix (the format many published imatrix files are in) gives
/// llama-quantize's bytes too (`golden.json`'s `imatrix_dat`: `llama-quantize --imatrix
/// imatrix.dat IN OUT TYPE 2` in the inputs' folder).
#[test]
fn quantize_with_a_legacy_dat_imatrix_matches_llama_quantize() {
    use kestrel_gguf::quantize::Imatrix;
    let (golden, skeletons) = golden_and_skeletons();
    let dir = std::env::temp_dir().join(format!("kestrel-quantize-dat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut checked = 0;
    for (stem, mixes) in golden["imatrix_dat"]
        .as_object()
        .expect("imatrix_dat section")
    {
        let bytes = files::build_bytes_as(&skeletons[stem.as_str()], 1, 0.1, |_, _| {
            kestrel_gguf::GgmlType::F32
        });
        let input = dir.join(format!("{stem}.gguf"));
        std::fs::write(&input, &bytes).expect("input");
        let im_path = dir.join(format!("{stem}.imatrix.dat"));
        std::fs::write(&im_path, synthetic_imatrix_dat(&bytes)).expect("imatrix");
        if let Ok(d) = std::env::var("KESTREL_QUANT_INPUTS") {
            std::fs::copy(&im_path, Path::new(&d).join(format!("{stem}.imatrix.dat")))
                .expect("copy");
            std::fs::copy(&input, Path::new(&d).join(format!("{stem}.gguf"))).expect("copy");
            continue;
        }
        let mut im = Imatrix::load(&im_path).expect("load a .dat imatrix");
        assert_eq!(
            (im.chunks, im.datasets.clone()),
            (5, vec!["legacy.txt".to_string()])
        );
        im.file = "imatrix.dat".into();
        checked += quantize_mixes(stem, mixes, &input, &dir, &im);
    }
    std::fs::remove_dir_all(&dir).ok();
    if std::env::var("KESTREL_QUANT_INPUTS").is_err() {
        assert!(checked >= 3, "{checked} files checked");
    }
}

/// With an importance matrix too (`golden.json`'s `imatrix` section: llama-quantize run with
/// `--imatrix imatrix.gguf` from the inputs' folder, so the file name it records is the same).
#[test]
fn quantize_with_an_imatrix_matches_llama_quantize() {
    use kestrel_gguf::quantize::Imatrix;
    let (golden, skeletons) = golden_and_skeletons();
    let dir = std::env::temp_dir().join(format!("kestrel-quantize-i-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut checked = 0;
    for (stem, mixes) in golden["imatrix"].as_object().expect("imatrix section") {
        let bytes = files::build_bytes_as(&skeletons[stem.as_str()], 1, 0.1, |_, _| {
            kestrel_gguf::GgmlType::F32
        });
        let imatrix = synthetic_imatrix(&bytes);
        let input = dir.join(format!("{stem}.gguf"));
        std::fs::write(&input, &bytes).expect("input");
        let im_path = dir.join(format!("{stem}.imatrix.gguf"));
        std::fs::write(&im_path, imatrix).expect("imatrix");
        if let Ok(d) = std::env::var("KESTREL_QUANT_INPUTS") {
            std::fs::copy(&im_path, Path::new(&d).join(format!("{stem}.imatrix.gguf")))
                .expect("copy");
            continue;
        }
        let mut im = Imatrix::load(&im_path).expect("load imatrix");
        im.file = "imatrix.gguf".into();
        checked += quantize_mixes(stem, mixes, &input, &dir, &im);
    }
    std::fs::remove_dir_all(&dir).ok();
    if std::env::var("KESTREL_QUANT_INPUTS").is_err() {
        assert!(checked >= 34, "{checked} files checked");
    }
}

#[test]
fn quantize_refuses_what_llama_quantize_refuses() {
    let skeletons = files::read_skeletons(&fixtures().join("archs/skeletons.json"));
    let dir = std::env::temp_dir().join(format!("kestrel-quantize-r-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let input = dir.join("in.gguf");
    let bytes = files::build_bytes_as(&skeletons["llama-dense"], 1, 0.1, |name, dims| {
        if dims.len() == 2 && name.ends_with("weight") && dims[0] % 32 == 0 {
            kestrel_gguf::GgmlType::Q8_0
        } else {
            kestrel_gguf::GgmlType::F32
        }
    });
    std::fs::write(&input, bytes).expect("input");
    let out = dir.join("out.gguf");
    let run = |ft: FileType, requant: bool| {
        let opts = QuantizeOptions {
            allow_requantize: requant,
            ..QuantizeOptions::new(ft)
        };
        quantize_file(&input, &out, &opts, &mut |_| {})
    };
    // Quantized input needs --allow-requantize; the IQ2 mixes need an importance matrix.
    let e = run(FileType::Q4_K_M, false).unwrap_err().to_string();
    assert!(e.contains("requantizing"), "{e}");
    assert!(run(FileType::Q4_K_M, true).is_ok());
    let e = run(FileType::IQ2_XS, true).unwrap_err().to_string();
    assert!(e.contains("importance matrix"), "{e}");
    assert!(run(FileType::Q8_0, true).is_ok());
    let missing = quantize_file(
        &dir.join("nope.gguf"),
        &out,
        &QuantizeOptions::new(FileType::Q8_0),
        &mut |_| {},
    );
    assert!(missing.is_err());
    std::fs::remove_dir_all(&dir).ok();
}

/// llama-quantize's per-tensor type options, byte for byte: `--output-tensor-type`,
/// `--token-embedding-type` (tied embeddings follow the output's), `--tensor-type
/// PATTERN=TYPE` (a regular expression searched in the name, overriding the mix but not the
/// row fallback), `--pure`, `--override-kv` metadata, and `--prune-layers` (blocks dropped, the
/// rest renumbered, with and without an importance matrix naming the input's layers)
/// (`golden.json`'s `overrides`, llama.cpp b11434).
#[test]
fn per_tensor_type_options_match_llama_quantize() {
    use kestrel_gguf::quantize::{parse_ggml_type, TensorTypeRule};
    let (golden, skeletons) = golden_and_skeletons();
    let dir = std::env::temp_dir().join(format!("kestrel-quantize-tt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cases = golden["overrides"].as_array().expect("overrides");
    assert!(cases.len() >= 10, "{} cases", cases.len());
    for (i, case) in cases.iter().enumerate() {
        let stem = case["file"].as_str().expect("file");
        let input = dir.join(format!("{stem}.gguf"));
        if !input.exists() {
            let bytes =
                files::build_bytes_as(&skeletons[stem], 1, 0.1, |_, _| kestrel_gguf::GgmlType::F32);
            std::fs::write(&input, bytes).expect("input");
        }
        let mix = case["mix"].as_str().expect("mix");
        let mut opts = QuantizeOptions {
            threads: 2,
            ..QuantizeOptions::new(FileType::parse(mix).expect("mix name"))
        };
        let args: Vec<&str> = case["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("arg"))
            .collect();
        let mut it = args.iter();
        while let Some(&flag) = it.next() {
            match flag {
                "--pure" => opts.pure = true,
                "--output-tensor-type" => {
                    opts.output_tensor_type = parse_ggml_type(it.next().expect("type"))
                }
                "--token-embedding-type" => {
                    opts.token_embedding_type = parse_ggml_type(it.next().expect("type"))
                }
                "--tensor-type" => opts
                    .tensor_types
                    .push(TensorTypeRule::parse(it.next().expect("rule")).expect("rule")),
                "--override-kv" => opts.kv_overrides.push(
                    kestrel_gguf::quantize::KvOverride::parse(it.next().expect("kv")).expect("kv"),
                ),
                "--prune-layers" => {
                    opts.prune_layers = it
                        .next()
                        .expect("layers")
                        .split(',')
                        .map(|l| l.parse().expect("layer"))
                        .collect()
                }
                // The synthetic matrix of the input, recorded under the name given.
                "--imatrix" => {
                    let bytes = std::fs::read(&input).expect("input");
                    let path = dir.join(format!("imatrix-{i}.gguf"));
                    std::fs::write(&path, synthetic_imatrix(&bytes)).expect("imatrix");
                    let mut im = kestrel_gguf::quantize::Imatrix::load(&path).expect("imatrix");
                    im.file = it.next().expect("imatrix name").to_string();
                    opts.imatrix = Some(im);
                }
                other => panic!("unknown flag {other}"),
            }
        }
        let output = dir.join(format!("out-{i}.gguf"));
        let got = quantized_sha(&input, &output, &opts);
        assert_eq!(
            got,
            case["sha256"].as_str().expect("sha"),
            "{stem} {mix} {args:?}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tensor_type_rules_are_parsed_as_llama_quantize_parses_them() {
    use kestrel_gguf::quantize::TensorTypeRule;
    let r = TensorTypeRule::parse("ATTN_Q=Q8_0").expect("rule");
    assert_eq!(r.pattern, "attn_q", "the pattern is lowercased");
    assert_eq!(r.ggml_type, kestrel_gguf::GgmlType::Q8_0);
    assert!(r.matches("blk.3.attn_q.weight") && !r.matches("blk.3.attn_k.weight"));
    for bad in ["attn_q", "=q8_0", "attn_q=", "attn_q=q9_9", "attn_(q=q8_0"] {
        let e = TensorTypeRule::parse(bad).expect_err(bad).to_string();
        assert!(e.contains("--tensor-type"), "{bad}: {e}");
    }
}

/// A split input (any shard opens the set) quantizes to the one file the unsplit input gives,
/// which is llama-quantize's output on the same bytes (`golden.json`; llama-quantize drops the
/// split keys too).
#[test]
fn a_split_input_quantizes_as_the_whole_file() {
    let (golden, skeletons) = golden_and_skeletons();
    let dir = std::env::temp_dir().join(format!("kestrel-quantize-s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    write_split_input(&skeletons, &dir);
    let opts = QuantizeOptions {
        threads: 2,
        ..QuantizeOptions::new(FileType::Q4_K_M)
    };
    let want = golden["files"]["llama-dense"]["Q4_K_M"]
        .as_str()
        .expect("golden");
    for shard in ["in-00001-of-00002.gguf", "in-00002-of-00002.gguf"] {
        let got = quantized_sha(&dir.join(shard), &dir.join("out.gguf"), &opts);
        assert_eq!(got, want, "from {shard}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `llama-dense` (seed 1) cut into two shards by kestrel's writer, as `in-0000N-of-00002.gguf`
/// in `dir`: the first half of the tensors with the metadata, the rest without, each with
/// the split keys (the layout llama-gguf-split writes).
fn write_split_input(skeletons: &std::collections::BTreeMap<String, files::Skeleton>, dir: &Path) {
    use kestrel_gguf::{GgufFile, GgufWriter, MetadataValue};
    let bytes = files::build_bytes_as(&skeletons["llama-dense"], 1, 0.1, |_, _| {
        kestrel_gguf::GgmlType::F32
    });
    let whole = GgufFile::from_bytes(bytes).expect("input");
    let n = whole.tensors().len();
    let shards = [0..n / 2, n / 2..n];
    for (no, range) in shards.iter().enumerate() {
        let mut w = GgufWriter::new();
        if no == 0 {
            for (k, v) in whole.metadata().iter() {
                w.add_metadata(k, v.to_owned_value());
            }
        }
        w.add_metadata("split.no", MetadataValue::U16(no as u16));
        w.add_metadata("split.count", MetadataValue::U16(2));
        w.add_metadata("split.tensors.count", MetadataValue::I32(n as i32));
        for t in &whole.tensors()[range.clone()] {
            let data = whole.tensor(t.name()).expect("tensor").data;
            w.add_tensor(t.name(), t.ggml_type(), t.dims(), data.to_vec())
                .expect("tensor");
        }
        let path = dir.join(format!("in-{:05}-of-00002.gguf", no + 1));
        std::fs::write(path, w.to_bytes().expect("shard")).expect("write");
    }
}

/// `--keep-split`, byte for byte as llama-quantize (b11434, 2 threads) writes it
/// (`golden.json`'s `keep_split`): the two-shard input quantized to two files (tensors by
/// shard and file order, the split keys appended, the second file without the model's
/// metadata), with `--prune-layers 0` too, and an unsplit input to one `-00001-of-00001` file.
/// `KESTREL_QUANT_INPUTS=DIR` leaves the inputs there to remake the hashes.
#[test]
fn keep_split_matches_llama_quantize() {
    let (golden, skeletons) = golden_and_skeletons();
    let dir = std::env::temp_dir().join(format!("kestrel-quantize-ks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    write_split_input(&skeletons, &dir);
    let whole = files::build_bytes_as(&skeletons["llama-dense"], 1, 0.1, |_, _| {
        kestrel_gguf::GgmlType::F32
    });
    std::fs::write(dir.join("whole.gguf"), whole).expect("input");
    if let Some(keep) = std::env::var_os("KESTREL_QUANT_INPUTS") {
        for f in [
            "in-00001-of-00002.gguf",
            "in-00002-of-00002.gguf",
            "whole.gguf",
        ] {
            std::fs::copy(dir.join(f), Path::new(&keep).join(f)).expect("copy input");
        }
    }
    let cases = golden["keep_split"].as_array().expect("keep_split");
    assert!(cases.len() >= 3);
    for case in cases {
        let input = dir.join(case["input"].as_str().expect("input"));
        let prune: Vec<u32> = case["prune_layers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| v.as_u64().expect("layer") as u32)
                    .collect()
            })
            .unwrap_or_default();
        let opts = QuantizeOptions {
            threads: 2,
            keep_split: true,
            prune_layers: prune,
            ..QuantizeOptions::new(FileType::Q4_K_M)
        };
        let report =
            quantize_file(&input, &dir.join("out.gguf"), &opts, &mut |_| {}).expect("quantize");
        let want = case["sha256"].as_object().expect("sha256 by file");
        let names: Vec<String> = report
            .outputs
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        let mut want_names: Vec<&String> = want.keys().collect();
        want_names.sort();
        assert_eq!(names.iter().collect::<Vec<_>>(), want_names, "{case}");
        for p in &report.outputs {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            let got = format!("{:x}", Sha256::digest(std::fs::read(p).expect("output")));
            assert_eq!(got, want[&name].as_str().expect("sha"), "{case}: {name}");
            std::fs::remove_file(p).ok();
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
