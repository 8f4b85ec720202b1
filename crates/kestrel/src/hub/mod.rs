//! Finding a model by name: an alias or a hub reference (`org/name:QUANT`,
//! `org/name/file.gguf`) is looked for in kestrel's model folder (`$KESTREL_HOME/models`) and
//! in the Hugging Face cache (`models--org--name/snapshots/REV/`), and otherwise downloaded
//! from the hub over HTTPS with resume, size and sha256 checks, split files included.
//! Offline, a missing model is an error saying where it looked and how to fetch it.

mod alias;
mod download;

use std::path::{Path, PathBuf};

pub use alias::{aliases, register_alias, resolve_alias, ModelRef};
pub use download::DownloadError;

use crate::Error;

/// Where models are looked for and fetched from.
#[derive(Clone, Debug)]
pub struct Hub {
    /// kestrel's model folder (`$KESTREL_HOME/models`; downloads go here, one folder per
    /// repository).
    pub models_dir: PathBuf,
    /// The Hugging Face hub cache (`$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`).
    pub hf_cache: Option<PathBuf>,
    /// The hub's base URL (`$HF_ENDPOINT`, default `https://huggingface.co`).
    pub endpoint: String,
    /// A bearer token for gated repositories (`$HF_TOKEN`).
    pub token: Option<String>,
    /// Never download (`$KESTREL_OFFLINE=1` or `$HF_HUB_OFFLINE=1`).
    pub offline: bool,
    /// Show a progress bar while downloading (when stderr is a terminal).
    pub progress: bool,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Hub {
    /// Settings from the environment.
    pub fn from_env() -> Hub {
        let home = env("HOME").map(PathBuf::from);
        let kestrel_home = env("KESTREL_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".cache").join("kestrel")))
            .unwrap_or_else(|| PathBuf::from(".kestrel"));
        let hf_cache = env("HF_HUB_CACHE")
            .map(PathBuf::from)
            .or_else(|| env("HF_HOME").map(|h| PathBuf::from(h).join("hub")))
            .or_else(|| home.map(|h| h.join(".cache").join("huggingface").join("hub")));
        let truthy =
            |n: &str| env(n).is_some_and(|v| matches!(v.as_str(), "1" | "true" | "yes" | "ON"));
        Hub {
            models_dir: kestrel_home.join("models"),
            hf_cache,
            endpoint: env("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into()),
            token: env("HF_TOKEN"),
            offline: truthy("KESTREL_OFFLINE") || truthy("HF_HUB_OFFLINE"),
            progress: true,
        }
    }

    /// The local path of `name` (a file path, an alias or a hub reference), downloading it
    /// when it is not cached. For a split model, the first shard (the others beside it).
    pub fn resolve(&self, name: &str) -> Result<PathBuf, Error> {
        let p = Path::new(name);
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        let r = resolve_alias(name)
            .or_else(|| ModelRef::parse(name))
            .ok_or_else(|| Error::NotFound {
                name: name.into(),
                looked: format!(
                    "no such file, no alias of that name (aliases: {}), and not a hub reference (org/name:QUANT or org/name/file.gguf)",
                    aliases().into_iter().map(|a| a.0).collect::<Vec<_>>().join(", ")
                ),
            })?;
        let mut looked = Vec::new();
        if let Some(file) = &r.file {
            if let Some(found) = self.find_local(&r, file, &mut looked) {
                return Ok(found);
            }
        }
        if self.offline {
            return Err(Error::NotFound {
                name: name.into(),
                looked: format!(
                    "offline (KESTREL_OFFLINE / HF_HUB_OFFLINE), and not in {}; fetch it with `Model::load` online, or put the file there",
                    if looked.is_empty() { "the caches".into() } else { looked.join(", ") }
                ),
            });
        }
        let file = match &r.file {
            Some(f) => f.clone(),
            None => download::pick_file(self, &r)?,
        };
        if r.file.is_none() {
            if let Some(found) = self.find_local(&r, &file, &mut looked) {
                return Ok(found);
            }
        }
        let dir = self.models_dir.join(r.repo.replace('/', "--"));
        download::fetch_model(self, &r, &file, &dir)
    }

    /// Where `file` of `r` may already be: kestrel's folder (per repository, or flat as the
    /// test models are), then the Hugging Face cache.
    fn find_local(&self, r: &ModelRef, file: &str, looked: &mut Vec<String>) -> Option<PathBuf> {
        let base = Path::new(file).file_name()?.to_string_lossy().into_owned();
        let mut candidates = vec![
            self.models_dir.join(r.repo.replace('/', "--")).join(file),
            self.models_dir.join(&base),
        ];
        candidates.extend(r.local_names.iter().map(|n| self.models_dir.join(n)));
        if let Some(hf) = &self.hf_cache {
            let repo_dir = hf.join(format!("models--{}", r.repo.replace('/', "--")));
            let snapshots = repo_dir.join("snapshots");
            // the revision's commit first (refs/<rev>), then any snapshot
            if let Ok(commit) = std::fs::read_to_string(repo_dir.join("refs").join(&r.revision)) {
                candidates.push(snapshots.join(commit.trim()).join(file));
            }
            if let Ok(rd) = std::fs::read_dir(&snapshots) {
                let mut snaps: Vec<PathBuf> = rd.flatten().map(|e| e.path().join(file)).collect();
                snaps.sort();
                candidates.extend(snaps);
            }
            looked.push(snapshots.display().to_string());
        }
        looked.insert(0, self.models_dir.display().to_string());
        candidates
            .into_iter()
            .find(|c| c.is_file() && shards_present(c))
    }
}

/// For a split model's first shard, whether every shard is beside it.
fn shards_present(first: &Path) -> bool {
    match kestrel_gguf::parse_split_path(first) {
        Some((prefix, _, count)) => {
            (1..=count).all(|i| kestrel_gguf::split_path(&prefix, i, count).is_file())
        }
        None => true,
    }
}

/// The GGUF models under `dir` (recursively, following the Hugging Face cache's symlinks),
/// with their metadata; split models once, by their first shard. Files that fail to parse are
/// listed with their error.
pub fn discover(dir: impl AsRef<Path>) -> Vec<Discovered> {
    let mut out = Vec::new();
    walk(dir.as_ref(), 0, &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A model found by [`discover`].
#[derive(Clone, Debug)]
pub struct Discovered {
    /// The file (a split model's first shard).
    pub path: PathBuf,
    /// Its facts, or why it could not be read.
    pub info: Result<crate::ModelInfo, String>,
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<Discovered>) {
    if depth > 8 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, depth + 1, out);
        } else if p
            .extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
        {
            if kestrel_gguf::parse_split_path(&p).is_some_and(|(_, no, _)| no != 1) {
                continue;
            }
            let info = kestrel_gguf::GgufModel::open(&p)
                .map_err(|e| e.to_string())
                .map(|m| crate::ModelInfo::of(&m, 0));
            out.push(Discovered { path: p, info });
        }
    }
}
