//! Downloading from the Hugging Face hub: `GET {endpoint}/{repo}/resolve/{rev}/{file}` into a
//! `.part` file, resumed with `Range` after a cut (up to a few times), checked against the
//! size and the sha256 the hub announces (`X-Linked-Etag` / `ETag` of LFS files), then
//! renamed into place. Split models fetch every shard.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{Hub, ModelRef};
use crate::Error;

/// Tries per file (the first plus resumptions after a cut connection).
const ATTEMPTS: usize = 6;

/// Why a download failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DownloadError {
    /// The hub answered with an error status.
    #[error("{url}: HTTP {status}{hint}")]
    Status {
        /// The URL.
        url: String,
        /// Its status.
        status: u16,
        /// What to do about it.
        hint: &'static str,
    },
    /// The connection failed (after retries).
    #[error("{url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// Reading or writing a local file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file's sha256 or size is not what the hub announced (the partial file is removed).
    #[error("{file}: {what} is {actual}, the hub announced {expected}; the download was removed")]
    Mismatch {
        /// The file.
        file: String,
        /// `sha256` or `size`.
        what: &'static str,
        /// Announced.
        expected: String,
        /// Found.
        actual: String,
    },
    /// No GGUF file of the requested quantization in the repository.
    #[error("{repo} has no GGUF file for {quant:?}; it has: {available}")]
    NoFile {
        /// The repository.
        repo: String,
        /// What was asked.
        quant: String,
        /// Its GGUF files.
        available: String,
    },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> DownloadError + '_ {
    move |source| DownloadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn agent(redirects: u32) -> ureq::Agent {
    ureq::Agent::config_builder()
        .max_redirects(redirects)
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .user_agent(concat!("kestrel/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => " (a gated or private repository: set HF_TOKEN)",
        404 => " (no such repository, revision or file)",
        429 => " (rate limited: retry later)",
        _ => "",
    }
}

fn get(
    hub: &Hub,
    agent: &ureq::Agent,
    url: &str,
    range: Option<u64>,
) -> Result<ureq::http::Response<ureq::Body>, DownloadError> {
    let mut req = agent.get(url);
    if let Some(t) = &hub.token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if let Some(start) = range {
        req = req.header("Range", format!("bytes={start}-"));
    }
    req.call().map_err(|e| DownloadError::Transport {
        url: url.into(),
        message: e.to_string(),
    })
}

/// The file to fetch for `r.quant`: the repository's GGUF file whose name contains it (a split
/// model's first shard).
pub(super) fn pick_file(hub: &Hub, r: &ModelRef) -> Result<String, Error> {
    let url = format!(
        "{}/api/models/{}/revision/{}",
        hub.endpoint, r.repo, r.revision
    );
    let resp = get(hub, &agent(5), &url, None)?;
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(DownloadError::Status {
            url,
            status,
            hint: status_hint(status),
        }
        .into());
    }
    let text = resp
        .into_body()
        .read_to_string()
        .map_err(|e| DownloadError::Transport {
            url: url.clone(),
            message: e.to_string(),
        })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| DownloadError::Transport {
            url: url.clone(),
            message: format!("not the hub's JSON: {e}"),
        })?;
    let files: Vec<String> = v["siblings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["rfilename"].as_str())
                .filter(|f| f.ends_with(".gguf"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let quant = r.quant.clone().unwrap_or_else(|| "Q4_K_M".into());
    let q = quant.to_ascii_lowercase();
    let first_shard =
        |f: &String| kestrel_gguf::parse_split_path(Path::new(f)).is_none_or(|(_, no, _)| no == 1);
    files
        .iter()
        .filter(|f| first_shard(f))
        .find(|f| f.to_ascii_lowercase().contains(&q))
        .or_else(|| {
            if r.quant.is_none() {
                files.iter().find(|f| first_shard(f))
            } else {
                None
            }
        })
        .cloned()
        .ok_or_else(|| {
            DownloadError::NoFile {
                repo: r.repo.clone(),
                quant,
                available: files.join(", "),
            }
            .into()
        })
}

/// Fetch `file` (every shard of a split model) into `dir`; the local path of the first.
pub(super) fn fetch_model(
    hub: &Hub,
    r: &ModelRef,
    file: &str,
    dir: &Path,
) -> Result<PathBuf, Error> {
    let files: Vec<String> = match kestrel_gguf::parse_split_path(Path::new(file)) {
        Some((prefix, _, count)) => (1..=count)
            .map(|i| {
                kestrel_gguf::split_path(&prefix, i, count)
                    .to_string_lossy()
                    .into_owned()
            })
            .collect(),
        None => vec![file.to_string()],
    };
    for f in &files {
        let dest = dir.join(f);
        if dest.is_file() {
            continue;
        }
        fetch_file(hub, r, f, &dest)?;
    }
    Ok(dir.join(&files[0]))
}

/// What the hub says of a file before downloading it.
struct Announced {
    sha256: Option<String>,
    size: Option<u64>,
}

fn announced(hub: &Hub, url: &str) -> Result<Announced, DownloadError> {
    // without following redirects: the hub's own answer carries the LFS sha256 and size
    let a = agent(0);
    let mut req = a.head(url);
    if let Some(t) = &hub.token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let resp = req.call().map_err(|e| DownloadError::Transport {
        url: url.into(),
        message: e.to_string(),
    })?;
    let status = resp.status().as_u16();
    if status >= 400 {
        return Err(DownloadError::Status {
            url: url.into(),
            status,
            hint: status_hint(status),
        });
    }
    let h = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let etag = h("x-linked-etag").or_else(|| h("etag")).map(|e| {
        e.trim_start_matches("W/")
            .trim_matches('"')
            .to_ascii_lowercase()
    });
    let sha256 = etag.filter(|e| e.len() == 64 && e.bytes().all(|b| b.is_ascii_hexdigit()));
    let size = h("x-linked-size")
        .or_else(|| {
            if status == 200 {
                h("content-length")
            } else {
                None
            }
        })
        .and_then(|s| s.parse().ok());
    Ok(Announced { sha256, size })
}

fn fetch_file(hub: &Hub, r: &ModelRef, file: &str, dest: &Path) -> Result<(), Error> {
    let url = format!(
        "{}/{}/resolve/{}/{}",
        hub.endpoint, r.repo, r.revision, file
    );
    let ann = announced(hub, &url)?;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let part = dest.with_extension("gguf.part");
    let bar = progress(hub, file, ann.size);
    let a = agent(10);
    let mut last_err = None;
    for _ in 0..ATTEMPTS {
        let have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if ann.size.is_some_and(|s| have == s) {
            last_err = None;
            break;
        }
        let resp = match get(hub, &a, &url, (have > 0).then_some(have)) {
            Ok(r) => r,
            Err(e) => {
                last_err = Some(e);
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let status = resp.status().as_u16();
        let append = match status {
            206 => true,
            200 => false,
            416 => {
                // the range starts at or past the end: start over
                let _ = std::fs::remove_file(&part);
                continue;
            }
            s => {
                return Err(DownloadError::Status {
                    url,
                    status: s,
                    hint: status_hint(s),
                }
                .into())
            }
        };
        let mut out = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&part)
            .map_err(io(&part))?;
        let start = if append { have } else { 0 };
        if let Some(b) = &bar {
            b.set_position(start);
        }
        match copy(
            resp.into_body().into_reader(),
            &mut out,
            &part,
            bar.as_ref(),
        ) {
            Ok(()) => {
                last_err = None;
                if ann.size.is_none() {
                    break;
                }
            }
            Err(e @ DownloadError::Io { .. }) => return Err(e.into()),
            Err(e) => last_err = Some(e),
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(e) = last_err {
        return Err(e.into());
    }
    verify(&part, file, &ann)?;
    std::fs::rename(&part, dest).map_err(io(dest))?;
    Ok(())
}

fn copy(
    mut body: impl Read,
    out: &mut File,
    path: &Path,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<(), DownloadError> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = body.read(&mut buf).map_err(|e| DownloadError::Transport {
            url: path.display().to_string(),
            message: format!("the connection broke: {e}"),
        })?;
        if n == 0 {
            return Ok(());
        }
        out.write_all(&buf[..n]).map_err(io(path))?;
        if let Some(b) = bar {
            b.inc(n as u64);
        }
    }
}

fn verify(part: &Path, file: &str, ann: &Announced) -> Result<(), DownloadError> {
    let mismatch = |what, expected: String, actual: String| {
        let _ = std::fs::remove_file(part);
        DownloadError::Mismatch {
            file: file.into(),
            what,
            expected,
            actual,
        }
    };
    let len = std::fs::metadata(part).map_err(io(part))?.len();
    if let Some(s) = ann.size {
        if len != s {
            return Err(mismatch("size", s.to_string(), len.to_string()));
        }
    }
    if let Some(want) = &ann.sha256 {
        let mut f = File::open(part).map_err(io(part))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = f.read(&mut buf).map_err(io(part))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if &got != want {
            return Err(mismatch("sha256", want.clone(), got));
        }
    }
    Ok(())
}

fn progress(hub: &Hub, file: &str, size: Option<u64>) -> Option<indicatif::ProgressBar> {
    if !hub.progress {
        return None;
    }
    let bar = match size {
        Some(s) => indicatif::ProgressBar::new(s),
        None => indicatif::ProgressBar::no_length(),
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
    ) {
        bar.set_style(style);
    }
    bar.set_message(file.to_string());
    Some(bar)
}
