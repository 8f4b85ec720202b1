//! A checkpoint's model card: the YAML front matter of its `README.md`, read as gguf-py's
//! `Metadata.load_model_card` reads it (the lines between a first line `---` and the next `---`,
//! tabs as two spaces), for the `general.*` keys llama.cpp's converter copies from it (license,
//! tags, languages, base models, datasets, and names that override the folder's).
//!
//! Scalars are kept as their text (YAML 1.2: `no` is a string, as llama.cpp's "Norway" fix
//! makes it); aliases are refused before anything is expanded, nesting is bounded, and a card
//! that is not a mapping is ignored, as gguf-py ignores it.

use std::path::Path;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::ConvertError;

/// Largest README read (the whole file is read, as gguf-py does).
const MAX_README: u64 = 16 << 20;
/// Deepest nesting of sequences and mappings accepted.
const MAX_DEPTH: usize = 64;

/// One YAML value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    /// `null`, `~` or nothing.
    Null,
    /// Any other scalar, as written (quotes removed).
    Text(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, keys as text, in order (a repeated key: the last value counts).
    Map(Vec<(String, Node)>),
}

impl Node {
    /// The value of `key` in a mapping (`None`: not a mapping, or no such key).
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(m) => m.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn text(&self) -> String {
        match self {
            Node::Null => String::new(),
            Node::Text(s) => s.clone(),
            Node::Seq(_) | Node::Map(_) => String::new(),
        }
    }
}

/// The front matter of `dir/README.md` as a mapping; an empty mapping when there is no README,
/// no front matter, or front matter that is not a mapping.
///
/// # Errors
/// A README that is unreadable, too large or not UTF-8, front matter that is not YAML or
/// uses aliases (llama.cpp's converter stops on the first three too).
pub(crate) fn load(dir: &Path) -> Result<Node, ConvertError> {
    let path = dir.join("README.md");
    let bad = |reason: String| ConvertError::Input {
        path: path.clone(),
        reason,
    };
    let Ok(meta) = std::fs::metadata(&path) else {
        return Ok(Node::Map(Vec::new()));
    };
    if !meta.is_file() {
        return Ok(Node::Map(Vec::new()));
    }
    if meta.len() > MAX_README {
        return Err(bad(format!(
            "{} bytes is too large for a model card",
            meta.len()
        )));
    }
    let bytes = std::fs::read(&path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| bad(format!("not UTF-8: {e}")))?;
    let Some(yaml) = front_matter(&text) else {
        return Ok(Node::Map(Vec::new()));
    };
    let node = parse(&yaml).map_err(|e| bad(format!("model card front matter: {e}")))?;
    Ok(match node {
        m @ Node::Map(_) => m,
        _ => Node::Map(Vec::new()),
    })
}

/// gguf-py's front-matter cut: Python's `splitlines()`, a first line `---`, the lines up to the
/// next `---` (or the end), joined with `\n` plus one; then `- no` quoted and tabs as two
/// spaces. `None` without front matter.
fn front_matter(text: &str) -> Option<String> {
    let mut lines = split_lines(text);
    if lines.next()? != "---" {
        return None;
    }
    let mut yaml = String::new();
    for line in lines {
        if line == "---" {
            break;
        }
        yaml.push_str(line);
        yaml.push('\n');
    }
    if yaml.is_empty() {
        // `"\n".join([]) + "\n"` is a blank document: no mapping.
        return None;
    }
    Some(yaml.replace("- no\n", "- \"no\"\n").replace('\t', "  "))
}

/// Python's `str.splitlines()` (no line ends kept).
fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let breaks = |c: char| {
            matches!(
                c,
                '\n' | '\r'
                    | '\u{0b}'
                    | '\u{0c}'
                    | '\u{1c}'
                    | '\u{1d}'
                    | '\u{1e}'
                    | '\u{85}'
                    | '\u{2028}'
                    | '\u{2029}'
            )
        };
        match rest.find(breaks) {
            None => {
                let line = rest;
                rest = "";
                Some(line)
            }
            Some(i) => {
                let line = &rest[..i];
                let after = &rest[i..];
                let skip = if after.starts_with("\r\n") {
                    2
                } else {
                    after.chars().next().map_or(1, char::len_utf8)
                };
                rest = &after[skip..];
                Some(line)
            }
        }
    })
}

/// Builds [`Node`]s from the parser's events.
#[derive(Default)]
struct Builder {
    /// Open sequences and mappings (a mapping's pending key beside it).
    stack: Vec<(Node, Option<String>)>,
    root: Option<Node>,
    error: Option<String>,
}

impl Builder {
    fn push_value(&mut self, v: Node) {
        match self.stack.last_mut() {
            None => {
                if self.root.is_none() {
                    self.root = Some(v);
                }
            }
            Some((Node::Seq(items), _)) => items.push(v),
            Some((Node::Map(entries), key)) => match key.take() {
                None => *key = Some(v.text()),
                Some(k) => entries.push((k, v)),
            },
            Some(_) => {}
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, _mark: Marker) {
        if self.error.is_some() {
            return;
        }
        match ev {
            Event::Alias(_) => self.error = Some("YAML aliases are not read".into()),
            Event::Scalar(s, style, _, _) => {
                let plain = style == TScalarStyle::Plain;
                let null = plain && matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL");
                self.push_value(if null { Node::Null } else { Node::Text(s) });
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if self.stack.len() >= MAX_DEPTH {
                    self.error = Some(format!("nested deeper than {MAX_DEPTH} levels"));
                    return;
                }
                let node = if matches!(ev, Event::SequenceStart(..)) {
                    Node::Seq(Vec::new())
                } else {
                    Node::Map(Vec::new())
                };
                self.stack.push((node, None));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((node, _)) = self.stack.pop() {
                    self.push_value(node);
                }
            }
            _ => {}
        }
    }
}

/// The first document of `yaml` (`Null` when empty).
fn parse(yaml: &str) -> Result<Node, String> {
    let mut b = Builder::default();
    let mut parser = Parser::new_from_str(yaml);
    parser.load(&mut b, false).map_err(|e| e.to_string())?;
    if let Some(e) = b.error {
        return Err(e);
    }
    Ok(b.root.unwrap_or(Node::Null))
}

/// A base model's or dataset's `general.{base_model,dataset}.{i}.*` values, by key.
pub(crate) type Source = Vec<(String, String)>;

/// What gguf-py's `apply_metadata_heuristic` takes from a model card, before the model id and
/// folder name fill in the names left unset.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Fields {
    pub name: Option<String>,
    pub author: Option<String>,
    pub version: Option<String>,
    pub organization: Option<String>,
    pub description: Option<String>,
    pub finetune: Option<String>,
    pub basename: Option<String>,
    pub size_label: Option<String>,
    pub source_url: Option<String>,
    pub source_doi: Option<String>,
    pub source_uuid: Option<String>,
    pub source_repo_url: Option<String>,
    pub license: Option<String>,
    pub license_name: Option<String>,
    pub license_link: Option<String>,
    pub base_models: Option<Vec<Source>>,
    pub datasets: Option<Vec<Source>>,
    pub tags: Option<Vec<String>>,
    pub languages: Option<Vec<String>>,
}

/// A scalar field's value: text as is, `null` none; a list or mapping is refused (gguf-py
/// would try to write it as a string and stop).
fn scalar(card: &Node, key: &str) -> Result<Option<String>, String> {
    match card.get(key) {
        None | Some(Node::Null) => Ok(None),
        Some(Node::Text(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{key}` is a list or mapping, not text")),
    }
}

/// `pattern` `https?://huggingface.co/([^/]+/[^/]+)$` (any character for the dot): the id.
fn hf_url_id(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let host = rest.get(..14)?;
    let mut chars = host.chars();
    let ok = host.starts_with("huggingface") && host.ends_with("co") && chars.nth(11).is_some();
    let id = rest.get(14..)?.strip_prefix('/')?;
    let (a, b) = id.split_once('/')?;
    (ok && !a.is_empty() && !b.is_empty() && !b.contains('/')).then_some(id)
}

/// One base model or dataset named by a string: an id (`org/name`) or a URL.
fn source_from_id(s: &str, total_params: i64) -> Source {
    let mut e = Source::new();
    let put = |e: &mut Source, id: &str, with_repo: bool| {
        let p = super::model_id::model_id_components(id, total_params);
        if let Some(n) = &p.full_name {
            e.push(("name".into(), super::model_id::id_to_title(n)));
        }
        if let Some(o) = &p.org {
            e.push(("organization".into(), super::model_id::id_to_title(o)));
        }
        if let Some(v) = p.version {
            e.push(("version".into(), v));
        }
        if let (true, Some(o), Some(n)) = (with_repo, &p.org, &p.full_name) {
            e.push(("repo_url".into(), format!("https://huggingface.co/{o}/{n}")));
        }
    };
    if ["http://", "https://", "ssh://"]
        .iter()
        .any(|p| s.starts_with(p))
    {
        e.push(("repo_url".into(), s.to_string()));
        if s.contains("huggingface.co") {
            if let Some(id) = hf_url_id(s) {
                put(&mut e, id, false);
            }
        }
    } else {
        put(&mut e, s, true);
    }
    e
}

/// `base_model`/`datasets`-style lists: the first of `keys` present; `None` if none is.
fn sources(card: &Node, keys: [&str; 3], total_params: i64) -> Result<Option<Vec<Source>>, String> {
    let Some(v) = keys.iter().find_map(|k| card.get(k)) else {
        return Ok(None);
    };
    let items: Vec<&Node> = match v {
        Node::Text(_) => vec![v],
        Node::Seq(items) => items.iter().collect(),
        Node::Null | Node::Map(_) => Vec::new(),
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        out.push(match item {
            Node::Text(s) => source_from_id(s, total_params),
            Node::Map(m) => {
                let mut e = Source::new();
                for (k, val) in m {
                    match val {
                        Node::Null => {}
                        Node::Text(t) => {
                            e.retain(|(ek, _)| ek != k);
                            e.push((k.clone(), t.clone()));
                        }
                        _ => return Err(format!("`{}` entry `{k}` is not text", keys[0])),
                    }
                }
                e
            }
            // gguf-py logs "not in a known format" and keeps an empty entry.
            Node::Null | Node::Seq(_) => Source::new(),
        });
    }
    Ok(Some(out))
}

/// `tags`-style lists: text appended, a list's text items appended; `None` if `key` is absent
/// or null (and nothing was set before).
fn append(card: &Node, key: &str, to: &mut Option<Vec<String>>) {
    let Some(v) = card.get(key) else { return };
    match v {
        Node::Null => {}
        Node::Text(s) => to.get_or_insert_with(Vec::new).push(s.clone()),
        Node::Seq(items) => {
            let list = to.get_or_insert_with(Vec::new);
            list.extend(items.iter().filter_map(|i| match i {
                Node::Text(s) => Some(s.clone()),
                _ => None,
            }));
        }
        Node::Map(_) => {
            to.get_or_insert_with(Vec::new);
        }
    }
}

impl Fields {
    /// The card's fields, in gguf-py's order of precedence (llama.cpp's own keys, their
    /// `model_` forms, then TheBloke's `model_creator`/`model_type`).
    ///
    /// # Errors
    /// A field gguf-py would stop on (a list where text is expected).
    pub(crate) fn read(card: &Node, total_params: i64) -> Result<Fields, String> {
        let mut f = Fields::default();
        let set = |slot: &mut Option<String>, key: &str| -> Result<(), String> {
            if slot.is_none() && card.get(key).is_some() {
                *slot = scalar(card, key)?;
            }
            Ok(())
        };
        for prefix in ["", "model_"] {
            let k = |s: &str| format!("{prefix}{s}");
            set(&mut f.name, &k("name"))?;
            set(&mut f.author, &k("author"))?;
            set(&mut f.version, &k("version"))?;
            set(&mut f.organization, &k("organization"))?;
            set(&mut f.description, &k("description"))?;
            set(&mut f.finetune, &k("finetune"))?;
            set(&mut f.basename, &k("basename"))?;
            set(&mut f.size_label, &k("size_label"))?;
            set(&mut f.source_url, &k("url"))?;
            set(&mut f.source_doi, &k("doi"))?;
            set(&mut f.source_uuid, &k("uuid"))?;
            set(&mut f.source_repo_url, &k("repo_url"))?;
        }
        set(&mut f.name, "model_name")?;
        set(&mut f.author, "model_creator")?;
        set(&mut f.basename, "model_type")?;
        f.base_models = sources(
            card,
            ["base_model", "base_models", "base_model_sources"],
            total_params,
        )?;
        f.datasets = sources(
            card,
            ["datasets", "dataset", "dataset_sources"],
            total_params,
        )?;
        f.license = match card.get("license") {
            Some(Node::Seq(items)) => Some(
                items
                    .iter()
                    .map(|i| match i {
                        Node::Text(s) => Ok(s.as_str()),
                        _ => Err("`license` lists something other than text".to_string()),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join(","),
            ),
            _ => scalar(card, "license")?,
        };
        f.license_name = scalar(card, "license_name")?;
        f.license_link = scalar(card, "license_link")?;
        append(card, "tags", &mut f.tags);
        append(card, "pipeline_tag", &mut f.tags);
        append(card, "languages", &mut f.languages);
        append(card, "language", &mut f.languages);
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Node {
        Node::Text(s.into())
    }

    #[test]
    fn front_matter_is_cut_as_gguf_py_cuts_it() {
        assert_eq!(
            front_matter("---\nlicense: mit\r\n---\n# Title\n").as_deref(),
            Some("license: mit\n")
        );
        assert_eq!(front_matter("# no card\n---\n"), None);
        assert_eq!(front_matter("---\n---\n"), None);
        assert_eq!(
            front_matter("---\nlanguage:\n- no\n\t- en\n").as_deref(),
            Some("language:\n- \"no\"\n  - en\n")
        );
    }

    #[test]
    fn values_keep_their_text() {
        let n = parse(
            "license: apache-2.0\nversion: 1.10\ntags:\n- a\n- 'b c'\nbase_model: [x/y, {name: z}]\n\
             empty:\nlanguage: [no, en]\nlicense: mit\n",
        )
        .unwrap();
        assert_eq!(n.get("license"), Some(&text("mit")));
        assert_eq!(n.get("version"), Some(&text("1.10")));
        assert_eq!(
            n.get("tags"),
            Some(&Node::Seq(vec![text("a"), text("b c")]))
        );
        assert_eq!(
            n.get("base_model"),
            Some(&Node::Seq(vec![
                text("x/y"),
                Node::Map(vec![("name".into(), text("z"))])
            ]))
        );
        assert_eq!(n.get("empty"), Some(&Node::Null));
        assert_eq!(
            n.get("language"),
            Some(&Node::Seq(vec![text("no"), text("en")]))
        );
    }

    #[test]
    fn aliases_depth_and_bad_yaml_are_refused() {
        assert!(parse("a: &x [1]\nb: *x\n").unwrap_err().contains("alias"));
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(parse(&deep).is_err());
        assert!(parse("a: [1\n").is_err());
    }

    #[test]
    fn fields_follow_gguf_py_precedence() {
        let card = parse(
            "model_name: B\nname: A\nmodel_creator: C\nmodel_type: llama\nbase_model: ~\n\
             datasets: {a: 1}\ntags: x\npipeline_tag: y\nlanguage: [en, ~]\n",
        )
        .unwrap();
        let f = Fields::read(&card, 0).unwrap();
        assert_eq!(f.name.as_deref(), Some("A"));
        assert_eq!(f.author.as_deref(), Some("C"));
        assert_eq!(f.basename.as_deref(), Some("llama"));
        // A null base model list: count 0; a mapping where a list is expected: no entries.
        assert_eq!(f.base_models, Some(vec![]));
        assert_eq!(f.datasets, Some(vec![]));
        assert_eq!(f.tags, Some(vec!["x".to_string(), "y".to_string()]));
        assert_eq!(f.languages, Some(vec!["en".to_string()]));
        let bad = parse("name: [a, b]\n").unwrap();
        assert!(Fields::read(&bad, 0).unwrap_err().contains("name"));
        assert_eq!(hf_url_id("https://huggingface.co/org/m"), Some("org/m"));
        assert_eq!(hf_url_id("https://huggingface.co/org/m/tree/main"), None);
        assert_eq!(hf_url_id("https://example.com/org/m"), None);
        let e = source_from_id("ssh://git@example.com/m", 0);
        assert_eq!(
            e,
            [(
                "repo_url".to_string(),
                "ssh://git@example.com/m".to_string()
            )]
        );
    }

    proptest::proptest! {
        /// Whatever a README holds, reading its card returns (a value or an error), never
        /// panics; YAML-looking text exercises the parser's deeper paths.
        #[test]
        fn any_readme_reads_without_panicking(
            s in "(---\n)?([-:\\[\\]{},&*!|>'\"#%@` \t\n\r\u{85}\u{2028}a-z0-9~.]|é|💡){0,200}"
        ) {
            if let Some(y) = front_matter(&s) {
                if let Ok(n) = parse(&y) {
                    let _ = Fields::read(&n, 1);
                }
            }
            let _ = parse(&s);
        }
    }

    #[test]
    fn python_line_breaks() {
        let v: Vec<&str> = split_lines("a\r\nb\rc\u{2028}d\n").collect();
        assert_eq!(v, ["a", "b", "c", "d"]);
        assert_eq!(split_lines("").count(), 0);
    }
}
