//! Model lookup and download against a local HTTP server that mimics the Hugging Face hub's
//! routes (`/{repo}/resolve/{rev}/{file}` with `X-Linked-Etag`/`X-Linked-Size` and `Range`,
//! `/api/models/{repo}/revision/{rev}`): a download cut halfway resumes, a sha256 mismatch is
//! refused and removed, split files come whole, the Hugging Face cache layout and kestrel's
//! folder are found without the network, and offline a missing model is a clear error.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use kestrel::hub::{DownloadError, Hub};
use kestrel::Error;
use sha2::{Digest, Sha256};

/// GET requests seen: (file, Range header).
type RequestLog = Arc<Mutex<Vec<(String, Option<String>)>>>;

struct FakeHub {
    endpoint: String,
    /// GET requests seen, with their Range header.
    log: RequestLog,
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Serve `files` (path in repo → bytes) of repo `org/name`. The first GET of each file in
/// `cut` sends half its bytes and closes; files in `lie` announce a wrong sha256.
fn fake_hub(files: HashMap<String, Vec<u8>>, cut: Vec<String>, lie: Vec<String>) -> FakeHub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let log: RequestLog = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    let cuts: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(cut));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (method, path) = (
                parts.next().unwrap_or("").to_string(),
                parts.next().unwrap_or("").to_string(),
            );
            let mut range = None;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("range") {
                        range = Some(v.trim().to_string());
                    }
                }
            }
            if path.starts_with("/api/models/org/name/revision/main") {
                let sib: Vec<String> = files
                    .keys()
                    .map(|f| format!("{{\"rfilename\":\"{f}\"}}"))
                    .collect();
                let body = format!("{{\"id\":\"org/name\",\"siblings\":[{}]}}", sib.join(","));
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                continue;
            }
            let Some(file) = path.strip_prefix("/org/name/resolve/main/") else {
                let _ = write!(
                    s,
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                continue;
            };
            let Some(data) = files.get(file) else {
                let _ = write!(
                    s,
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                continue;
            };
            let etag = if lie.iter().any(|l| l == file) {
                sha(b"something else")
            } else {
                sha(data)
            };
            let common = format!("X-Linked-Etag: \"{etag}\"\r\nX-Linked-Size: {}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n", data.len());
            if method == "HEAD" {
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\n{common}Content-Length: {}\r\n\r\n",
                    data.len()
                );
                continue;
            }
            log2.lock().unwrap().push((file.to_string(), range.clone()));
            let start: usize = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.trim_end_matches('-').parse().ok())
                .unwrap_or(0);
            let body = &data[start.min(data.len())..];
            let head = if start > 0 {
                format!("HTTP/1.1 206 Partial Content\r\n{common}Content-Range: bytes {start}-{}/{}\r\nContent-Length: {}\r\n\r\n", data.len() - 1, data.len(), body.len())
            } else {
                format!(
                    "HTTP/1.1 200 OK\r\n{common}Content-Length: {}\r\n\r\n",
                    body.len()
                )
            };
            let _ = s.write_all(head.as_bytes());
            let mut c = cuts.lock().unwrap();
            if let Some(i) = c.iter().position(|x| x == file) {
                c.remove(i);
                let _ = s.write_all(&body[..body.len() / 2]);
                let _ = s.flush();
                drop(s);
                continue;
            }
            let _ = s.write_all(body);
        }
    });
    FakeHub { endpoint, log }
}

/// A scratch folder under the system temp dir, removed when the test ends (pass or fail).
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> Scratch {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "kestrel-hub-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

fn hub(endpoint: &str, dir: &std::path::Path) -> Hub {
    Hub {
        models_dir: dir.join("models"),
        hf_cache: Some(dir.join("hf")),
        endpoint: endpoint.into(),
        token: None,
        offline: false,
        progress: false,
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn a_cut_download_resumes_and_is_checked() {
    let data = bytes(300_000, 7);
    let fake = fake_hub(
        HashMap::from([("m.gguf".to_string(), data.clone())]),
        vec!["m.gguf".into()],
        vec![],
    );
    let dir = tmp("resume");
    let h = hub(&fake.endpoint, &dir);
    let p = h.resolve("org/name/m.gguf").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), data);
    assert_eq!(p, dir.join("models").join("org--name").join("m.gguf"));
    let log = fake.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0].1, None);
    assert_eq!(
        log[1].1.as_deref(),
        Some("bytes=150000-"),
        "resumed where the cut left it"
    );
    // cached now: no new request
    assert_eq!(h.resolve("org/name/m.gguf").unwrap(), p);
    assert_eq!(fake.log.lock().unwrap().len(), 2);
}

#[test]
fn a_wrong_sha256_is_refused_and_removed() {
    let fake = fake_hub(
        HashMap::from([("bad.gguf".to_string(), bytes(5000, 1))]),
        vec![],
        vec!["bad.gguf".into()],
    );
    let dir = tmp("sha");
    let e = hub(&fake.endpoint, &dir)
        .resolve("org/name/bad.gguf")
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Download(DownloadError::Mismatch { what: "sha256", .. })
        ),
        "{e}"
    );
    let folder = dir.join("models").join("org--name");
    let left: Vec<_> = std::fs::read_dir(&folder)
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing left behind: {left:?}");
}

#[test]
fn split_files_come_whole_and_quant_picks_the_file() {
    let a = bytes(4000, 2);
    let b = bytes(3000, 3);
    let files = HashMap::from([
        ("big-Q4_K_M-00001-of-00002.gguf".to_string(), a.clone()),
        ("big-Q4_K_M-00002-of-00002.gguf".to_string(), b.clone()),
        ("big-Q8_0.gguf".to_string(), bytes(100, 4)),
    ]);
    let fake = fake_hub(files, vec!["big-Q4_K_M-00002-of-00002.gguf".into()], vec![]);
    let dir = tmp("split");
    let h = hub(&fake.endpoint, &dir);
    let p = h.resolve("org/name:q4_k_m").unwrap();
    assert!(
        p.ends_with("big-Q4_K_M-00001-of-00002.gguf"),
        "{}",
        p.display()
    );
    assert_eq!(std::fs::read(&p).unwrap(), a);
    assert_eq!(
        std::fs::read(p.with_file_name("big-Q4_K_M-00002-of-00002.gguf")).unwrap(),
        b
    );
    let p8 = h.resolve("org/name:Q8_0").unwrap();
    assert!(p8.ends_with("big-Q8_0.gguf"));
    let e = h.resolve("org/name:IQ2_XXS").unwrap_err();
    assert!(
        e.to_string().contains("big-Q8_0.gguf"),
        "lists what there is: {e}"
    );
    let e = h.resolve("org/name/missing.gguf").unwrap_err();
    assert!(e.to_string().contains("404"), "{e}");
}

#[test]
fn caches_are_found_without_the_network_and_offline_says_where_it_looked() {
    let dir = tmp("cache");
    // nothing listens here: any request would fail
    let h = hub("http://127.0.0.1:9", &dir);
    let snap = dir
        .join("hf")
        .join("models--org--name")
        .join("snapshots")
        .join("abc123");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(snap.join("m.gguf"), b"hf cache copy").unwrap();
    std::fs::create_dir_all(dir.join("hf").join("models--org--name").join("refs")).unwrap();
    std::fs::write(
        dir.join("hf")
            .join("models--org--name")
            .join("refs")
            .join("main"),
        "abc123",
    )
    .unwrap();
    assert_eq!(h.resolve("org/name/m.gguf").unwrap(), snap.join("m.gguf"));
    // kestrel's own folder comes first
    let own = dir.join("models").join("org--name");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("m.gguf"), b"kestrel copy").unwrap();
    assert_eq!(h.resolve("org/name/m.gguf").unwrap(), own.join("m.gguf"));
    // offline and missing
    let off = Hub {
        offline: true,
        ..h.clone()
    };
    let e = off.resolve("org/name/other.gguf").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::NotFound { .. }), "{msg}");
    assert!(
        msg.contains("offline") && msg.contains(&dir.join("models").display().to_string()),
        "{msg}"
    );
    // not a name at all
    let e = off.resolve("not a model").unwrap_err();
    assert!(
        e.to_string().contains("gemma-3-270m"),
        "lists the aliases: {e}"
    );
}

#[test]
fn an_alias_finds_the_test_model_already_fetched() {
    let Some(path) = kestrel::gguf::models::test_model(kestrel::gguf::models::SMOLLM2_135M_Q4_1)
    else {
        return;
    };
    let h = Hub {
        models_dir: path.parent().unwrap().to_path_buf(),
        hf_cache: None,
        endpoint: "http://127.0.0.1:9".into(),
        token: None,
        offline: true,
        progress: false,
    };
    assert_eq!(h.resolve("smollm2-135m").unwrap(), path);
    let model = kestrel::Model::load_with(
        "smollm2-135m",
        kestrel::LoadOptions {
            threads: 2,
            ctx: 256,
            ..Default::default()
        },
        &h,
    )
    .unwrap();
    assert_eq!(model.info().architecture, "llama");
}

#[test]
fn discover_lists_models_under_a_folder() {
    let Some(path) = kestrel::gguf::models::test_model(kestrel::gguf::models::SMOLLM2_135M_Q4_1)
    else {
        return;
    };
    let found = kestrel::discover(path.parent().unwrap());
    let me = found
        .iter()
        .find(|d| d.path == path)
        .expect("found SmolLM2");
    let info = me.info.as_ref().unwrap();
    assert_eq!(
        (info.architecture.as_str(), info.layers, info.hidden_size),
        ("llama", 30, 576)
    );
    assert_eq!(info.vocab_size, 49152);
}
