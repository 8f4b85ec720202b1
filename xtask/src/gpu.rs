//! `cargo xtask gpu-pack`: what the GPU test machine needs, built here (it has CUDA but no
//! Rust): the CUDA test executables and a `kestrel` with `--features cuda`, stripped, in the
//! git-ignored `.gpu/` folder, to be carried there with `xtask/gpu-run.sh`, which runs them
//! and writes a report (docs/gpu.md).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::{cargo_with, run, workspace_root};

/// The CUDA test targets: (package, test target, features).
const TESTS: &[(&str, &str)] = &[
    ("kestrel-tensor", "cuda_kernels"),
    ("kestrel-arch", "cuda_forward"),
    ("kestrel-generate", "cuda_generate"),
];

/// Builds one test target with `--features cuda` and returns its executable.
fn test_executable(package: &str, test: &str) -> Result<PathBuf> {
    let mut cmd = cargo_with(&[
        "test",
        "--release",
        "--no-run",
        "-p",
        package,
        "--features",
        "cuda",
        "--test",
        test,
        "--message-format=json-render-diagnostics",
    ]);
    cmd.stdout(Stdio::piped());
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

fn strip_into(src: &Path, dest: &Path) -> Result<()> {
    fs::copy(src, dest).with_context(|| format!("copying {}", src.display()))?;
    // Debug line tables are most of a release test binary; the transfer is capped at 64 MiB.
    let status = Command::new("strip").arg(dest).status();
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!(
            "gpu-pack: strip failed on {}; kept unstripped",
            dest.display()
        );
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
