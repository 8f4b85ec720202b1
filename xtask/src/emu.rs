//! `cargo xtask gpu-emu [TEST...] [-- FILTER...]`: the CUDA tests on an emulated device, no GPU
//! needed. Builds kernels/host/emu (every kernel compiled for the host through the stand-in
//! headers, and the driver API and cuBLAS calls cudarc makes, answered on the host) into
//! `target/cuda-emu/` under the names cudarc opens (`libcuda.so`, `libcublas.so`), then runs the
//! CUDA test targets with that folder first on the library path and `KESTREL_REQUIRE_GPU=1`, so
//! a test that would skip without a GPU fails instead.
//!
//! With `KESTREL_EMU_ASAN=1` the library is built with AddressSanitizer (in
//! `target/cuda-emu-asan/`) and the tests run with it preloaded: a kernel that reads or writes
//! past a device allocation is reported, as compute-sanitizer's memcheck does on a GPU.
//!
//! What it checks that the host checks cannot: the launch code (argument order and types, grid
//! shapes, buffer sizes and offsets), the plans, graph capture and replay, the scheduler over a
//! device block pool, against the CPU engine as on a GPU. Not speed, not the GPU's memory model:
//! work runs in submission order, one kernel at a time, its CTAs shared out among one OS thread
//! per core (`KESTREL_SIMT_THREADS=N` to choose; kernels/host/simt.h).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};

use crate::{cargo_with, gpu, run, workspace_root};

/// Whether the emulator is built with AddressSanitizer (`KESTREL_EMU_ASAN=1`).
fn asan() -> bool {
    std::env::var("KESTREL_EMU_ASAN").is_ok_and(|v| v == "1")
}

/// Where the emulator library lands (with the generated kernel table).
pub fn emu_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
        .join(if asan() { "cuda-emu-asan" } else { "cuda-emu" })
}

fn newest(paths: impl IntoIterator<Item = PathBuf>) -> SystemTime {
    paths
        .into_iter()
        .filter_map(|p| fs::metadata(p).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

/// Builds the emulator library unless it is newer than every source it is built from.
pub fn build_emulator() -> Result<PathBuf> {
    let root = workspace_root();
    let kernels = root.join("kernels");
    let ptx = root.join("crates/kestrel-tensor/src/cuda/ptx");
    let out = emu_dir();
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let lib = out.join("libcuda.so");
    let sources = [
        files_in(&kernels),
        files_in(&kernels.join("host")),
        files_in(&kernels.join("host/emu")),
        files_in(&ptx),
    ]
    .concat();
    let built = fs::metadata(&lib).and_then(|m| m.modified()).ok();
    if built.is_none_or(|t| t < newest(sources)) {
        // The kernel table: every entry of the compute_90 PTX the engine loads.
        let mut inc = String::new();
        let mut modules: Vec<PathBuf> = files_in(&ptx)
            .into_iter()
            .filter(|p| p.to_string_lossy().ends_with(".sm_90.ptx"))
            .collect();
        modules.sort();
        for m in &modules {
            let text = fs::read_to_string(m).with_context(|| format!("reading {}", m.display()))?;
            for name in text
                .split(".entry ")
                .skip(1)
                .filter_map(|s| s.split('(').next())
            {
                inc.push_str(&format!("KERNEL({})\n", name.trim()));
            }
        }
        if inc.is_empty() {
            bail!("gpu-emu: no kernel entries in {}", ptx.display());
        }
        fs::write(out.join("kernels.inc"), inc)?;
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        println!("gpu-emu: building {} (about 20 s)", lib.display());
        let mut cmd = Command::new(&cxx);
        if asan() {
            cmd.args(["-fsanitize=address", "-fno-omit-frame-pointer"]);
        }
        if cfg!(target_arch = "x86_64") {
            // Built and run on this machine: its FMA instead of a libm call for each `fmaf`
            // (the same correctly rounded result); no contraction either way.
            cmd.arg("-march=native");
        }
        let status = cmd
            .args([
                "-std=c++20",
                "-O3",
                "-fPIC",
                "-shared",
                "-fvisibility=hidden",
            ])
            // As the host checks: no contraction the device would not do.
            .args(["-ffp-contract=off", "-pthread", "-I"])
            .arg(kernels.join("host"))
            .arg("-I")
            .arg(&out)
            .arg("-o")
            .arg(&lib)
            .arg(kernels.join("host/emu/kernels.cpp"))
            .arg(kernels.join("host/emu/driver.cpp"))
            .status()
            .with_context(|| format!("running {cxx} (set CXX to a C++20 compiler)"))?;
        if !status.success() {
            bail!("gpu-emu: building the emulator failed ({status})");
        }
    }
    let blas = out.join("libcublas.so");
    if !blas.exists() {
        std::os::unix::fs::symlink("libcuda.so", &blas)
            .with_context(|| format!("linking {}", blas.display()))?;
    }
    Ok(out)
}

/// Sets the environment of a `cargo test` that puts the emulated device in front of any real
/// driver (and, for the AddressSanitizer build, preloads its runtime into the test executables
/// through cargo's runner: the Rust executables are not built with it, and rustc itself, should
/// cargo rebuild anything, must not get it).
pub fn on_emulator(cmd: &mut Command, dir: &Path) -> Result<()> {
    let mut path = dir.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        path.push(":");
        path.push(old);
    }
    cmd.env("LD_LIBRARY_PATH", path)
        .env("KESTREL_REQUIRE_GPU", "1");
    if asan() {
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let out = Command::new(&cxx)
            .arg("-print-file-name=libasan.so")
            .output()
            .with_context(|| format!("asking {cxx} where libasan.so is"))?;
        let lib = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !Path::new(&lib).is_absolute() {
            bail!("gpu-emu: {cxx} knows no libasan.so (KESTREL_EMU_ASAN=1 needs it)");
        }
        if lib.contains(char::is_whitespace) {
            bail!("gpu-emu: {lib} has a space in its path (cargo's runner splits on spaces)");
        }
        let host = Command::new("rustc")
            .arg("-vV")
            .output()
            .context("running rustc -vV")?;
        let host = String::from_utf8_lossy(&host.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
            .context("rustc -vV named no host")?;
        let runner = format!(
            "CARGO_TARGET_{}_RUNNER",
            host.to_uppercase().replace(['-', '.'], "_")
        );
        // Leaks are not device errors (the test harness and cudarc keep some to the end).
        cmd.env(runner, format!("env LD_PRELOAD={lib}"))
            .env("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1");
    }
    Ok(())
}

/// Runs the CUDA test targets named in `tests` (all of them when empty) on the emulator, with
/// `filters` passed to each test executable.
pub fn gpu_emu(tests: &[String], filters: &[String]) -> Result<()> {
    let dir = build_emulator()?;
    let chosen: Vec<&(&str, &str)> = gpu::TESTS
        .iter()
        .filter(|(_, t)| tests.is_empty() || tests.iter().any(|n| n == t))
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = gpu::TESTS.iter().map(|(_, t)| *t).collect();
        bail!("gpu-emu: no CUDA test named {tests:?} (there are {names:?})");
    }
    for (package, test) in chosen {
        println!("==> gpu-emu: {package} {test}");
        let mut cmd = gpu::cuda_test_command(package, test, &["--"]);
        cmd.args(filters);
        on_emulator(&mut cmd, &dir)?;
        run(&mut cmd)?;
    }
    Ok(())
}

/// The tests of the CUDA test targets ([`gpu::TESTS`], every one of them: CI runs them all on the
/// emulator, with the executables its workspace test step built, the same command line but for
/// the targets, so nothing is built again) that CI leaves to `cargo xtask gpu-emu` and the GPU
/// run, the longest:
/// batched decode over every batch file and configuration (~11 minutes emulated), paged against
/// contiguous caches (~5), Gemma 3's q8_0 cache against the CPU's (~2; SmolLM2's runs, and
/// the q8_0 append and attention kernels are checked at Gemma's head size in `cuda_kv_q8`), and
/// Gemma 3's greedy continuation against the CPU's (~1.5; SmolLM2's runs, and Gemma 3's logits
/// on the device are checked against the CPU's in `cuda_forward`).
pub const CI_SKIPPED: &[&str] = &[
    "batched_decode_matches_each_sequence_alone_bit_for_bit",
    "paged_caches_give_the_bits_of_contiguous_caches",
    "gemma3_q8_0_cache_on_the_gpu_agrees_with_the_cpu",
    "gemma3_greedy_on_the_gpu_agrees_with_the_cpu",
];

/// `cargo xtask test`'s step: every CUDA test target ([`gpu::TESTS`]) on the emulated device
/// (the real-model tests read the models fetched into `home`, and fail rather than skip without
/// them).
pub fn ci_emulated(home: &Path) -> Result<()> {
    let dir = build_emulator()?;
    let mut args = vec!["test", "--workspace", "--features", crate::CUDA_FEATURES];
    for (_, t) in gpu::TESTS {
        args.extend(["--test", t]);
    }
    args.push("--");
    for t in CI_SKIPPED {
        args.extend(["--skip", t]);
    }
    let mut cmd = cargo_with(&args);
    cmd.env("KESTREL_REQUIRE_MODELS", "1")
        .env(crate::models::KESTREL_HOME_ENV, home);
    on_emulator(&mut cmd, &dir)?;
    run(&mut cmd)
}
