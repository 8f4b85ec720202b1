//! `cargo xtask kernels [--check]`: compiles `kernels/*.cu` to PTX with NVRTC, no nvcc.
//!
//! The CUDA toolchain comes from three pinned wheels of the package index (NVIDIA's own
//! redistributables): `nvidia-cuda-nvrtc-cu12` (libnvrtc, loaded at run time through
//! `libloading`), `nvidia-cuda-runtime-cu12` (headers such as `cuda_fp16.h`) and
//! `nvidia-cuda-nvcc-cu12` (`ptxas`, which validates every PTX for its real target with warnings
//! as errors). They are unpacked once into `<kestrel home>/cuda/<version>/`.
//!
//! Each `kernels/NAME.cu` becomes `crates/kestrel-tensor/src/cuda/ptx/NAME.sm_80.ptx` and
//! `NAME.sm_90.ptx` (compute_80 runs on Ampere and later; compute_90 may use Hopper's
//! instructions). The PTX is committed, so building kestrel needs no CUDA toolkit; `MANIFEST`
//! beside it records the NVRTC version and the sha256 of every source (a `.cu` with all
//! `.cuh` headers) and PTX, and `ptx_table.rs` lists the modules for `include_str!`.
//! `--check` (run by `cargo xtask test`) recomputes the hashes without NVRTC and fails when a
//! kernel source changed but its PTX was not rebuilt, or a PTX file was edited by hand, then runs
//! the host checks: `kernels/host/*_check.cpp` compiled with the system C++ compiler against a
//! host stand-in for the CUDA headers (kernels run on the CPU as emulated CTAs), each against a
//! float64 reference. No GPU or CUDA needed.
//!
//! Both also check that every kernel of the compute_90 PTX waits for the previous kernel
//! (`griddepcontrol.wait`, `pdl_enter` in `kernels/common.cuh`) before it touches device
//! memory: with programmatic dependent launch on (`KESTREL_CUDA_PDL=1`) a kernel without the
//! wait would read its inputs while the kernel that writes them still runs.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fs::{self, File};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::{fetch, models, workspace_root};

/// The pinned toolchain wheels (`name==version`) and what is taken from each.
const WHEELS: &[(&str, &str)] = &[
    ("nvidia-cuda-nvrtc-cu12==12.9.86", "nvidia/cuda_nvrtc/lib/"),
    (
        "nvidia-cuda-runtime-cu12==12.9.79",
        "nvidia/cuda_runtime/include/",
    ),
    (
        "nvidia-cuda-nvcc-cu12==12.9.86",
        "nvidia/cuda_nvcc/bin/ptxas",
    ),
];
const TOOLCHAIN: &str = "12.9.86";

/// Virtual architectures compiled for, and the real target `ptxas` checks each against.
const ARCHS: &[(&str, &str)] = &[("compute_80", "sm_80"), ("compute_90", "sm_90")];

fn kernels_dir() -> PathBuf {
    workspace_root().join("kernels")
}

fn ptx_dir() -> PathBuf {
    workspace_root().join("crates/kestrel-tensor/src/cuda/ptx")
}

/// The kernel sources (`.cu`, sorted) and the shared headers (`.cuh`, sorted).
fn sources() -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let mut cu = Vec::new();
    let mut cuh = Vec::new();
    for entry in fs::read_dir(kernels_dir()).context("reading kernels/")? {
        let path = entry?.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("cu") => cu.push(path),
            Some("cuh") => cuh.push(path),
            _ => {}
        }
    }
    cu.sort();
    cuh.sort();
    if cu.is_empty() {
        bail!("kernels/ has no .cu file");
    }
    Ok((cu, cuh))
}

fn stem(path: &Path) -> Result<String> {
    let s = path
        .file_stem()
        .and_then(|s| s.to_str())
        .context("kernel file name is not UTF-8")?;
    if !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("kernel file name {s:?}: only letters, digits and '_' (it names a Rust item)");
    }
    Ok(s.to_string())
}

fn sha256_bytes(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The hash a module's PTX depends on: its `.cu`, then every header, each with its name.
fn source_hash(cu: &Path, headers: &[PathBuf]) -> Result<String> {
    let mut h = Sha256::new();
    for p in std::iter::once(cu).chain(headers.iter().map(PathBuf::as_path)) {
        h.update(
            p.file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or_default(),
        );
        h.update([0]);
        h.update(fs::read(p).with_context(|| format!("reading {}", p.display()))?);
        h.update([0]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The manifest text for the current sources and PTX files.
fn manifest(nvrtc: &str, cu: &[PathBuf], cuh: &[PathBuf]) -> Result<String> {
    let mut s = format!(
        "# Written by `cargo xtask kernels`; checked by `cargo xtask kernels --check`.\n\
         nvrtc {nvrtc}\n"
    );
    for path in cu {
        let name = stem(path)?;
        s.push_str(&format!("source {name} {}\n", source_hash(path, cuh)?));
        for (_, sm) in ARCHS {
            let ptx = ptx_dir().join(format!("{name}.{sm}.ptx"));
            let bytes = fs::read(&ptx).with_context(|| {
                format!("{} is missing: run `cargo xtask kernels`", ptx.display())
            })?;
            s.push_str(&format!("ptx {name}.{sm} {}\n", sha256_bytes(&bytes)));
        }
    }
    Ok(s)
}

/// The Rust table of modules, for `kestrel-tensor`'s CUDA engine.
fn ptx_table(cu: &[PathBuf]) -> Result<String> {
    let mut s = String::from(
        "// Written by `cargo xtask kernels` from kernels/*.cu: do not edit.\n\
         \n\
         use super::PtxModule;\n\
         \n\
         /// Every kernel module: its name and its PTX for compute_80 and compute_90.\n\
         pub(crate) const MODULES: &[PtxModule] = &[\n",
    );
    for path in cu {
        let name = stem(path)?;
        s.push_str(&format!(
            "    PtxModule {{\n        name: \"{name}\",\n        \
             sm80: include_str!(\"ptx/{name}.sm_80.ptx\"),\n        \
             sm90: include_str!(\"ptx/{name}.sm_90.ptx\"),\n    }},\n"
        ));
    }
    s.push_str("];\n");
    Ok(s)
}

/// `cargo xtask kernels [--check]`.
pub fn kernels(check: bool) -> Result<()> {
    let (cu, cuh) = sources()?;
    let manifest_path = ptx_dir().join("MANIFEST");
    if check {
        let recorded = fs::read_to_string(&manifest_path).with_context(|| {
            format!(
                "{} is missing: run `cargo xtask kernels`",
                manifest_path.display()
            )
        })?;
        let nvrtc = recorded
            .lines()
            .find_map(|l| l.strip_prefix("nvrtc "))
            .context("MANIFEST names no nvrtc version")?;
        let now = manifest(nvrtc, &cu, &cuh)?;
        if now != recorded {
            let diff: Vec<&str> = now
                .lines()
                .filter(|l| !recorded.lines().any(|r| r == *l))
                .collect();
            bail!(
                "the PTX is stale: kernels/ or the PTX changed since `cargo xtask kernels` \
                 last ran (lines that differ: {})",
                diff.join("; ")
            );
        }
        let table = fs::read_to_string(
            workspace_root().join("crates/kestrel-tensor/src/cuda/ptx_table.rs"),
        )
        .context("reading ptx_table.rs")?;
        if table != ptx_table(&cu)? {
            bail!(
                "crates/kestrel-tensor/src/cuda/ptx_table.rs is stale: run `cargo xtask kernels`"
            );
        }
        println!("kernels: {} modules, PTX matches its sources", cu.len());
        programmatic_waits_in(&cu)?;
        return host_checks();
    }
    let tools = toolchain()?;
    let nvrtc = Nvrtc::load(&tools.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12"))?;
    let include = tools.join("nvidia/cuda_runtime/include");
    let ptxas = tools.join("nvidia/cuda_nvcc/bin/ptxas");
    fs::create_dir_all(ptx_dir())?;
    // Stale PTX of removed kernels goes.
    for entry in fs::read_dir(ptx_dir())? {
        let p = entry?.path();
        if p.extension().is_some_and(|e| e == "ptx") {
            fs::remove_file(&p)?;
        }
    }
    for path in &cu {
        let name = stem(path)?;
        let src =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for (arch, sm) in ARCHS {
            let opts = [
                format!("--gpu-architecture={arch}"),
                "-std=c++17".into(),
                format!("-I{}", include.display()),
                format!("-I{}", kernels_dir().display()),
            ];
            let ptx = nvrtc
                .compile(&src, &format!("{name}.cu"), &opts)
                .with_context(|| format!("compiling kernels/{name}.cu for {arch}"))?;
            let out = ptx_dir().join(format!("{name}.{sm}.ptx"));
            fs::write(&out, &ptx)?;
            let cubin = std::env::temp_dir().join(format!("kestrel-{name}.{sm}.cubin"));
            let status = Command::new(&ptxas)
                .args(["-arch", sm, "--warning-as-error"])
                .arg(&out)
                .arg("-o")
                .arg(&cubin)
                .status()
                .with_context(|| format!("running {}", ptxas.display()))?;
            let _ = fs::remove_file(&cubin);
            if !status.success() {
                bail!("ptxas rejected {} for {sm} ({status})", out.display());
            }
            println!(
                "kernels: {name}.cu -> {} ({} bytes, ptxas {sm} ok)",
                out.display(),
                ptx.len()
            );
        }
    }
    fs::write(&manifest_path, manifest(&nvrtc.version, &cu, &cuh)?)?;
    fs::write(
        workspace_root().join("crates/kestrel-tensor/src/cuda/ptx_table.rs"),
        ptx_table(&cu)?,
    )?;
    println!(
        "kernels: wrote {} and ptx_table.rs",
        manifest_path.display()
    );
    programmatic_waits_in(&cu)?;
    host_checks()
}

/// [`programmatic_waits`] over every module's compute_90 PTX.
fn programmatic_waits_in(cu: &[PathBuf]) -> Result<()> {
    let mut entries = 0;
    for path in cu {
        let file = ptx_dir().join(format!("{}.sm_90.ptx", stem(path)?));
        let ptx =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        entries += programmatic_waits(&ptx).with_context(|| format!("in {}", file.display()))?;
    }
    println!("kernels: all {entries} compute_90 entry points wait before touching memory");
    Ok(())
}

/// Checks that each `.entry` of `ptx` reaches `griddepcontrol.wait` before any instruction that
/// reads or writes global or generic memory (`ld`/`st`/`atom`/`red`/`cp.async` other than
/// `.param`, `.shared` and `.local` ones), in the order the PTX lists them; an L2 prefetch may
/// come first (the prefetching matvecs ask for weight blocks, which no kernel writes). Returns
/// the number of entries.
fn programmatic_waits(ptx: &str) -> Result<usize> {
    let mut entries = 0;
    for body in ptx.split(".entry ").skip(1) {
        let name = body
            .split(|c: char| c == '(' || c.is_whitespace())
            .next()
            .unwrap_or("");
        entries += 1;
        let Some(open) = body.find('{') else {
            bail!("{name}: no body");
        };
        let mut waited = false;
        for line in body[open..].lines() {
            let mut op = line.trim().trim_start_matches('{').trim();
            if op.starts_with('@') {
                op = op
                    .split_once(char::is_whitespace)
                    .map_or("", |(_, r)| r.trim());
            }
            let op = op
                .split(|c: char| c.is_whitespace() || c == ';')
                .next()
                .unwrap_or("");
            if op == "griddepcontrol.wait" {
                waited = true;
                break;
            }
            let touches = ["ld.", "st.", "atom.", "red.", "cp.async"]
                .iter()
                .any(|p| op.starts_with(p));
            let private = [".param", ".shared", ".local"]
                .iter()
                .any(|s| op.contains(s));
            if touches && !private {
                bail!(
                    "{name}: `{op}` before griddepcontrol.wait (start the kernel with pdl_enter())"
                );
            }
        }
        if !waited {
            bail!("{name}: no griddepcontrol.wait (start the kernel with pdl_enter())");
        }
    }
    Ok(entries)
}

/// The unpacked toolchain folder, downloading the wheels on first use.
fn toolchain() -> Result<PathBuf> {
    let dir = models::kestrel_home()?.join("cuda").join(TOOLCHAIN);
    let done = dir.join(".complete");
    if done.exists() {
        return Ok(dir);
    }
    let wheels = dir.join("wheels");
    fs::create_dir_all(&wheels)?;
    for (req, prefix) in WHEELS {
        let (name, _) = req
            .split_once("==")
            .context("pinned wheel without a version")?;
        let wheel_dir = wheels.join(name);
        if wheel_dir.exists() {
            fs::remove_dir_all(&wheel_dir)?;
        }
        fs::create_dir_all(&wheel_dir)?;
        println!("kernels: pip download {req}");
        let wheel = fetch::pip_download_requirement(req, &wheel_dir)?;
        unpack(&wheel, prefix, &dir)?;
        fs::remove_dir_all(&wheel_dir)?;
    }
    fs::write(&done, b"")?;
    Ok(dir)
}

/// Unpacks the members of `wheel` under `prefix` into `dest` (paths kept).
fn unpack(wheel: &Path, prefix: &str, dest: &Path) -> Result<()> {
    let mut zip = zip::ZipArchive::new(BufReader::new(File::open(wheel)?))
        .with_context(|| format!("{} is not a zip archive", wheel.display()))?;
    let mut n = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i)?;
        let Some(rel) = entry.enclosed_name() else {
            bail!("{} holds a member with an unsafe path", wheel.display());
        };
        if !rel.to_string_lossy().starts_with(prefix) || entry.is_dir() {
            continue;
        }
        let out = dest.join(&rel);
        if let Some(parent) = out.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        fs::write(&out, &bytes)?;
        if rel.to_string_lossy().ends_with("/ptxas") {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&out, fs::Permissions::from_mode(0o755))?;
        }
        n += 1;
    }
    if n == 0 {
        bail!("{} has nothing under {prefix}", wheel.display());
    }
    Ok(())
}

type NvrtcProgram = *mut c_void;

/// The few NVRTC entry points the task needs, loaded from the wheel's libnvrtc.
struct Nvrtc {
    _lib: libloading::Library,
    version: String,
    create: unsafe extern "C" fn(
        *mut NvrtcProgram,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile: unsafe extern "C" fn(NvrtcProgram, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> c_int,
    log: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> c_int,
    ptx_size: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> c_int,
    ptx: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut NvrtcProgram) -> c_int,
}

impl Nvrtc {
    fn load(path: &Path) -> Result<Nvrtc> {
        // SAFETY: libnvrtc's initializers are safe to run; every symbol below is declared with
        // the signature of NVRTC's C API (nvrtc.h) for the pinned version.
        unsafe {
            let lib = libloading::Library::new(path)
                .with_context(|| format!("loading {}", path.display()))?;
            let version: libloading::Symbol<unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int> =
                lib.get(b"nvrtcVersion\0")?;
            let (mut major, mut minor) = (0, 0);
            if version(&mut major, &mut minor) != 0 {
                bail!("nvrtcVersion failed");
            }
            Ok(Nvrtc {
                version: format!("{major}.{minor}"),
                create: *lib.get(b"nvrtcCreateProgram\0")?,
                compile: *lib.get(b"nvrtcCompileProgram\0")?,
                log_size: *lib.get(b"nvrtcGetProgramLogSize\0")?,
                log: *lib.get(b"nvrtcGetProgramLog\0")?,
                ptx_size: *lib.get(b"nvrtcGetPTXSize\0")?,
                ptx: *lib.get(b"nvrtcGetPTX\0")?,
                destroy: *lib.get(b"nvrtcDestroyProgram\0")?,
                _lib: lib,
            })
        }
    }

    /// Compiles one source to PTX; a failure carries NVRTC's log, and so does a warning.
    fn compile(&self, src: &str, name: &str, opts: &[String]) -> Result<String> {
        let src = CString::new(src).context("kernel source holds a NUL byte")?;
        let name = CString::new(name)?;
        let opts: Vec<CString> = opts
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<_, _>>()?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: NvrtcProgram = std::ptr::null_mut();
        // SAFETY: every pointer is a live NUL-terminated string or a buffer of the size NVRTC
        // reported; the program is destroyed on every path after it was created.
        unsafe {
            if (self.create)(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ) != 0
            {
                bail!("nvrtcCreateProgram failed");
            }
            let rc = (self.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
            let mut n = 0usize;
            (self.log_size)(prog, &mut n);
            let mut log = vec![0u8; n.max(1)];
            (self.log)(prog, log.as_mut_ptr().cast());
            let log = CStr::from_bytes_until_nul(&log)
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default();
            let result = if rc != 0 {
                Err(anyhow::anyhow!("NVRTC error {rc}:\n{log}"))
            } else if !log.trim().is_empty() {
                Err(anyhow::anyhow!(
                    "NVRTC warnings (treated as errors):\n{log}"
                ))
            } else {
                let mut n = 0usize;
                (self.ptx_size)(prog, &mut n);
                let mut buf = vec![0u8; n.max(1)];
                (self.ptx)(prog, buf.as_mut_ptr().cast());
                CStr::from_bytes_until_nul(&buf)
                    .map(|c| c.to_string_lossy().into_owned())
                    .map_err(|_| anyhow::anyhow!("NVRTC returned PTX without a terminating NUL"))
            };
            (self.destroy)(&mut prog);
            result
        }
    }
}

/// Compiles and runs each `kernels/host/*_check.cpp` (C++20, `kernels/host` first on the include
/// path so `cuda_fp16.h` is the host stand-in). A missing C++ compiler is an error, not a skip:
/// every machine that links Rust here has one.
fn host_checks() -> Result<()> {
    let host = kernels_dir().join("host");
    let mut checks: Vec<PathBuf> = fs::read_dir(&host)
        .context("reading kernels/host/")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with("_check.cpp")))
        .collect();
    checks.sort();
    let out_dir = workspace_root().join("target/kernel-host-checks");
    fs::create_dir_all(&out_dir)?;
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    for src in &checks {
        let name = stem(src)?;
        let exe = out_dir.join(&name);
        let status = Command::new(&cxx)
            // No contraction: the checks compare kernels bit for bit, and a fused multiply-add
            // the host compiler chose would not be the device's.
            .args(["-std=c++20", "-O1", "-pthread", "-ffp-contract=off", "-I"])
            .arg(&host)
            .arg("-o")
            .arg(&exe)
            .arg(src)
            .status()
            .with_context(|| format!("running {cxx} (set CXX to a C++20 compiler)"))?;
        if !status.success() {
            bail!("kernels: compiling {} failed ({status})", src.display());
        }
        let status = Command::new(&exe)
            .status()
            .with_context(|| format!("running {}", exe.display()))?;
        if !status.success() {
            bail!("kernels: host check {name} failed: a kernel disagrees with its reference");
        }
    }
    println!("kernels: {} host checks passed", checks.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::programmatic_waits;

    const WAITS: &str =
        ".visible .entry k(\n.param .u64 k_param_0\n)\n{\n\tld.param.u64 %rd1, [k_param_0];\n\
        \tprefetch.global.L2 [%rd1];\n\tld.shared.u32 %r1, [%rd2];\n\t// begin inline asm\n\
        \tgriddepcontrol.wait;\n\t// end inline asm\n\tld.global.u32 %r2, [%rd1];\n}\n";

    #[test]
    fn kernels_that_wait_first_pass() {
        assert_eq!(programmatic_waits(WAITS).unwrap(), 1);
        let two = format!("{WAITS}{}", WAITS.replace("entry k(", "entry k2("));
        assert_eq!(programmatic_waits(&two).unwrap(), 2);
    }

    #[test]
    fn a_read_before_the_wait_is_named() {
        let early = WAITS.replace("\tld.shared.u32", "\t@%p1 ld.global.nc.u32");
        let e = programmatic_waits(&early).unwrap_err().to_string();
        assert!(e.contains("k: `ld.global.nc.u32` before"), "{e}");
        let generic = WAITS.replace("\tld.shared.u32 %r1", "\tst.u32 [%rd2], %r1");
        assert!(programmatic_waits(&generic).is_err());
        let late = WAITS.replace("griddepcontrol.wait;", "bar.sync 0;");
        let e = programmatic_waits(&late).unwrap_err().to_string();
        assert!(e.contains("k: `ld.global.u32` before"), "{e}");
        let none = late.replace("\tld.global.u32 %r2, [%rd1];\n", "");
        let e = programmatic_waits(&none).unwrap_err().to_string();
        assert!(e.contains("k: no griddepcontrol.wait"), "{e}");
    }
}
