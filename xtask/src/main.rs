//! kestrel's developer tasks, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! - `fetch-models [MODEL...] [--heavy] [--force]`: download the test models into the cache
//! - `test`: fetch the models, check the PTX, then fmt, clippy (also with the CUDA engine) and
//!   the workspace tests (what CI runs)
//! - `demo`: the main job on the default model
//! - `models-path [MODEL]`: print the model cache folder (or one model's path)
//! - `kernels [--check]`: compile `kernels/*.cu` to the committed PTX with NVRTC (or check it
//!   is fresh)
//! - `gpu-pack`: build the CUDA tests and a CUDA `kestrel` into `.gpu/` for the GPU machine
//! - `gpu-emu [TEST...] [-- FILTER...]`: the CUDA tests on an emulated device (no GPU): the
//!   kernels built for the host behind a stand-in driver and cuBLAS
//! - `archs`: llama.cpp's random-weight file of every architecture, kestrel's logits on each
//!   against llama.cpp's, and the table in docs/architectures.md
//! - `bench [MODEL...]`: kestrel bench on the test models, interleaved with llama-bench when
//!   `LLAMA_BENCH` names one, and the ratio per test

mod archs;
mod bench;
mod emu;
mod fetch;
mod gpu;
mod kernels;
mod models;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "kestrel's developer tasks",
    version
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Download the test models into $KESTREL_HOME/models (default ~/.cache/kestrel/models).
    ///
    /// Models already there with the right size and sha256 are skipped.
    FetchModels {
        /// Only these models (short name or file name); default: every light model.
        models: Vec<String>,
        /// Also fetch the heavy models (the 7B qwen2, which is not fully published).
        #[arg(long)]
        heavy: bool,
        /// Download again even when the cached file verifies.
        #[arg(long)]
        force: bool,
    },
    /// Fetch the models, then `cargo fmt --check`, clippy with -D warnings, and the
    /// workspace tests with KESTREL_REQUIRE_MODELS=1. This is what CI runs.
    Test,
    /// The main job on the default model (fetches it first when it is not cached).
    Demo,
    /// `kestrel bench` (pp/tg) on the test models; with LLAMA_BENCH=/path/to/llama-bench, also
    /// llama-bench with the same settings, interleaved, and the ratio per test.
    Bench {
        /// Models (short names); default: every light model.
        models: Vec<String>,
        /// Threads.
        #[arg(short, long, default_value_t = 2)]
        threads: usize,
        /// Prompt tokens of the pp test (0: skip).
        #[arg(short = 'p', long, default_value_t = 512)]
        n_prompt: usize,
        /// Generated tokens of the tg test (0: skip).
        #[arg(short = 'n', long, default_value_t = 128)]
        n_gen: usize,
        /// Interleaved rounds (the median is over them).
        #[arg(short, long, default_value_t = 5)]
        rounds: usize,
        /// Sequences of the batched decode test (kestrel `--batch`, llama-batched-bench
        /// `-npl`); 0 or 1: none.
        #[arg(short, long, default_value_t = 8)]
        batch: usize,
    },
    /// Compile kernels/*.cu to PTX for compute_80 and compute_90 with NVRTC from NVIDIA's
    /// wheels (no nvcc), validated by ptxas, into crates/kestrel-tensor/src/cuda/ptx/.
    Kernels {
        /// Only check that the committed PTX matches the sources (no CUDA needed).
        #[arg(long)]
        check: bool,
    },
    /// Build the CUDA test executables and a `--features cuda` kestrel, stripped, into .gpu/
    /// for the GPU test machine (run there with `bash xtask/gpu-run.sh`; docs/gpu.md).
    GpuPack,
    /// Run the CUDA tests on an emulated device (no GPU needed): every kernel built for the
    /// host and a stand-in CUDA driver and cuBLAS (kernels/host/emu), in target/cuda-emu/.
    GpuEmu {
        /// CUDA test targets (e.g. cuda_kernels); default: all of them.
        tests: Vec<String>,
        /// Test name filters for the test executables.
        #[arg(last = true)]
        filters: Vec<String>,
    },
    /// Write llama.cpp's random-weight file of every architecture (`test-llama-archs`, found
    /// with LLAMA_ARCHS, next to LLAMA_BENCH, or in ~/llama-ref) for each set of the golden
    /// logits, compare kestrel's logits with llama.cpp's on each, write the table to
    /// docs/architectures.md and the skeletons CI rebuilds the matching files from.
    Archs,
    /// Print the model cache folder, or the path of one model in it.
    ModelsPath {
        /// A model's short name or file name.
        model: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::FetchModels {
            models,
            heavy,
            force,
        } => fetch::fetch_models(&models, fetch::Options { heavy, force }),
        Task::Test => test(),
        Task::Demo => demo(),
        Task::ModelsPath { model } => models_path(model.as_deref()),
        Task::Kernels { check } => kernels::kernels(check),
        Task::GpuPack => gpu::gpu_pack(),
        Task::GpuEmu { tests, filters } => emu::gpu_emu(&tests, &filters),
        Task::Archs => archs::archs(&workspace_root()),
        Task::Bench {
            models,
            threads,
            n_prompt,
            n_gen,
            rounds,
            batch,
        } => run(&mut cargo_with(&[
            "build",
            "--release",
            "-p",
            "kestrel-cli",
        ]))
        .and_then(|()| {
            bench::bench(
                &std::env::var_os("CARGO_TARGET_DIR")
                    .map_or_else(|| workspace_root().join("target"), PathBuf::from)
                    .join("release/kestrel"),
                &bench::Options {
                    models,
                    threads,
                    n_prompt,
                    n_gen,
                    rounds: rounds.max(1),
                    batch,
                },
            )
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (xtask lives one level below it).
fn workspace_root() -> PathBuf {
    let xtask_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask_dir.parent().unwrap_or(xtask_dir).to_path_buf()
}

/// The cargo that runs us (set by `cargo run`), else the one on PATH.
fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root());
    cmd
}

fn describe(cmd: &Command) -> String {
    let mut s = String::from("cargo");
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// Runs a command, inheriting stdio; an error names the command and its exit status.
fn run(cmd: &mut Command) -> Result<()> {
    let what = describe(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("cannot start `{what}`"))?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    Ok(())
}

fn cargo_with(args: &[&str]) -> Command {
    let mut cmd = cargo();
    cmd.args(args);
    cmd
}

/// Runs one step of `cargo xtask test`, framed by lines that say which and how it went.
fn step(n: usize, total: usize, name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    println!("==> xtask test [{n}/{total}] {name}");
    let start = std::time::Instant::now();
    if let Err(e) = f() {
        eprintln!("==> xtask test: FAILED at step {n}/{total}: {name}");
        return Err(e.context(format!("xtask test: step {n}/{total} ({name}) failed")));
    }
    println!(
        "==> xtask test [{n}/{total}] ok ({:.1}s): {name}",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The features that build the CUDA engine into every crate that has one.
pub const CUDA_FEATURES: &str =
    "kestrel-tensor/cuda,kestrel-arch/cuda,kestrel-generate/cuda,kestrel-cli/cuda";

fn test() -> Result<()> {
    let home = models::kestrel_home()?;
    let venv = home.join("venv");
    // With the CUDA engine built in: its kernel and forward tests skip here without a GPU,
    // saying why (the emulated-device step below runs them), `--device cuda` meets a machine
    // without a driver, and one build serves both steps. The engine without the feature (the
    // stub that says so) is tested by the aarch64 step's kestrel-tensor unit tests.
    let mut tests = cargo_with(&["test", "--workspace", "--features", CUDA_FEATURES]);
    // Tests that need a real model, or the openai Python client, fail rather than skip when
    // it is missing.
    tests
        .env("KESTREL_REQUIRE_MODELS", "1")
        .env("KESTREL_REQUIRE_OPENAI", "1")
        .env("KESTREL_REQUIRE_BROWSER", "1")
        .env("KESTREL_PYTHON", venv.join("bin").join("python"))
        .env(models::KESTREL_HOME_ENV, &home);

    let mut commands = vec![
        cargo_with(&["fmt", "--all", "--check"]),
        cargo_with(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
        // The CUDA engine builds and lints without CUDA (cudarc loads the driver at run time).
        cargo_with(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            CUDA_FEATURES,
            "--",
            "-D",
            "warnings",
        ]),
    ];
    let total = commands.len() + 8;
    step(1, total, "fetch-models", || {
        fetch::fetch_models(&[], fetch::Options::default())
    })?;
    step(2, total, "python openai client", || openai_venv(&venv))?;
    step(3, total, "chromium for the chat page test", chromium)?;
    step(
        4,
        total,
        "kernels --check (the committed PTX matches kernels/)",
        || kernels::kernels(true),
    )?;
    commands.push(tests);
    for (i, mut cmd) in commands.into_iter().enumerate() {
        step(i + 5, total, &describe(&cmd), || run(&mut cmd))?;
    }
    step(
        total - 2,
        total,
        "CUDA tests on the emulated device (kernels built for the host, no GPU)",
        || emu::ci_emulated(&home),
    )?;
    step(
        total - 1,
        total,
        "aarch64 under qemu: NEON/dotprod/i8mm kernels vs scalar twins, golden logits",
        || aarch64_qemu(&home),
    )?;
    step(
        total,
        total,
        "python bindings: fmt, clippy, pip install, pytest",
        || python_bindings(&venv, &home),
    )?;
    println!("==> xtask test: all {total} steps passed");
    Ok(())
}

/// A virtual environment with the official `openai` client, for the server's client tests
/// (made once; the package comes from the package index).
fn openai_venv(venv: &Path) -> Result<()> {
    let python = venv.join("bin").join("python");
    let has = |p: &Path| {
        Command::new(p)
            .args(["-c", "import openai"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if has(&python) {
        return Ok(());
    }
    let host = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    run(Command::new(host).arg("-m").arg("venv").arg(venv))?;
    run(Command::new(&python).args(["-m", "pip", "install", "--quiet", "--no-input", "openai"]))?;
    if !has(&python) {
        bail!("{} still cannot import openai", python.display());
    }
    Ok(())
}

/// The Python bindings (`bindings/python`, a workspace of its own): fmt and clippy, built and
/// installed into the test venv with maturin, then their pytest suite on the real models.
fn python_bindings(venv: &Path, home: &Path) -> Result<()> {
    let dir = workspace_root().join("bindings").join("python");
    let manifest = dir.join("Cargo.toml");
    let manifest = manifest.to_string_lossy();
    run(&mut cargo_with(&[
        "fmt",
        "--manifest-path",
        &manifest,
        "--check",
    ]))?;
    run(&mut cargo_with(&[
        "clippy",
        "--manifest-path",
        &manifest,
        "--release",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    let bin = venv.join("bin");
    let python = bin.join("python");
    // the build backend runs the venv's `maturin` by name
    let mut path = std::ffi::OsString::from(&bin);
    if let Some(p) = std::env::var_os("PATH") {
        path.push(":");
        path.push(p);
    }
    let pip = |args: &[&str]| {
        let mut c = Command::new(&python);
        c.args(["-m", "pip", "install", "--quiet", "--no-input"])
            .args(args)
            .env("PATH", &path);
        c
    };
    run(&mut pip(&["maturin>=1.5,<2", "pytest"]))?;
    // maturin is in the venv already: no isolated build environment to download each time
    run(pip(&["--no-build-isolation", "--force-reinstall", "--no-deps"]).arg(&dir))?;
    run(Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(dir.join("tests"))
        .env(models::KESTREL_HOME_ENV, home))
}

/// The aarch64 kernels, cross-compiled and run under `qemu-aarch64` (the target, Debian's
/// cross linker and qemu-user installed when missing): clippy on kestrel-tensor for the target,
/// its unit tests at every
/// level qemu's default CPU has (scalar, NEON, dotprod, i8mm), again on a Neoverse N1 (dotprod
/// without i8mm: the packed layouts' `sdot` kernel is then the active one) and on a Cortex-A53
/// (no dotprod: the detection's last branch), then the golden logits of both real models against
/// llama.cpp's x86 figures on one prompt each (`golden_one`; KL divergence at most `MAX_KLD`).
/// These unit tests are also where the CUDA stub (kestrel-tensor without its `cuda` feature)
/// is tested: the workspace's tests build the engine in.
fn aarch64_qemu(home: &Path) -> Result<()> {
    const TARGET: &str = "aarch64-unknown-linux-gnu";
    let have_target = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == TARGET)
        });
    if !have_target && run(Command::new("rustup").args(["target", "add", TARGET])).is_err() {
        // The one place this step depends on the Rust distribution server rather than the
        // package registries: say so loudly instead of failing every other check.
        eprintln!(
            "==> xtask test: SKIPPED the aarch64 step: `rustup target add {TARGET}` failed (no \
             route to the Rust distribution server?); the NEON kernels were not tested"
        );
        return Ok(());
    }
    apt_install(
        &["/usr/bin/aarch64-linux-gnu-gcc", "/usr/bin/qemu-aarch64"],
        &[
            "gcc-aarch64-linux-gnu",
            "libc6-dev-arm64-cross",
            "qemu-user",
        ],
    )?;
    let test = |args: &[&str]| {
        let mut c = cargo_with(&["test", "--release", "--target", TARGET]);
        c.args(args)
            .env("KESTREL_REQUIRE_MODELS", "1")
            .env(models::KESTREL_HOME_ENV, home);
        c
    };
    run(&mut cargo_with(&[
        "clippy",
        "--target",
        TARGET,
        "-p",
        "kestrel-tensor",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(&mut test(&["-p", "kestrel-tensor", "--lib"]))?;
    run(test(&["-p", "kestrel-tensor", "--lib", "cpu::"]).env("QEMU_CPU", "neoverse-n1"))?;
    run(test(&["-p", "kestrel-tensor", "--lib", "cpu::"]).env("QEMU_CPU", "cortex-a53"))?;
    run(&mut test(&[
        "-p",
        "kestrel-generate",
        "--test",
        "golden",
        "--",
        "golden_one",
    ]))
}

/// Debian's Chromium and chromedriver, for the chat page's browser test (installed with apt
/// when missing; the test fails rather than skips under `cargo xtask test`).
fn chromium() -> Result<()> {
    apt_install(
        &["/usr/bin/chromium", "/usr/bin/chromedriver"],
        &["chromium", "chromium-driver"],
    )
}

/// Debian's `packages`, installed with apt-get unless every file of `files` is there already.
fn apt_install(files: &[&str], packages: &[&str]) -> Result<()> {
    let have = || files.iter().all(|p| Path::new(p).is_file());
    if have() {
        return Ok(());
    }
    let install = || {
        let mut c = Command::new("apt-get");
        c.args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    // The package lists may be stale on a fresh machine: refresh them when the first try fails.
    if run(&mut install()).is_err() {
        run(Command::new("apt-get").args(["update", "-q"]))?;
        run(&mut install())?;
    }
    if !have() {
        bail!(
            "apt-get installed {}, but one of {} is missing",
            packages.join(", "),
            files.join(", ")
        );
    }
    Ok(())
}

fn demo() -> Result<()> {
    let model = models::find(models::DEFAULT_MODEL)?;
    let dir = models::models_dir()?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the model cache {}", dir.display()))?;
    println!("==> demo: making sure {} is in the cache", model.name);
    let path = fetch::fetch_one(model, &dir, fetch::Options::default())?;
    // The model's summary first, then the main job: generation.
    let mut inspect = cargo();
    inspect
        .args([
            "run",
            "--release",
            "-p",
            "kestrel-cli",
            "--",
            "inspect",
            "--no-tensors",
        ])
        .arg(&path);
    println!("==> demo: {}", describe(&inspect));
    run(&mut inspect)?;
    let mut generate = cargo();
    generate
        .args(["run", "--release", "-p", "kestrel-cli", "--", "run", "-m"])
        .arg(&path)
        .args(["-p", "The capital of France is", "-n", "48", "--temp", "0"]);
    println!("==> demo: {}", describe(&generate));
    run(&mut generate)
}

fn models_path(model: Option<&str>) -> Result<()> {
    let dir = models::models_dir()?;
    match model {
        None => println!("{}", dir.display()),
        Some(name) => println!("{}", models::find(name)?.path_in(&dir).display()),
    }
    Ok(())
}
