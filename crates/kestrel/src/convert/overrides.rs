//! `--metadata FILE` and `--model-name NAME`, as `convert_hf_to_gguf.py` applies them (gguf-py's
//! `Metadata.load`): a JSON object whose `general.*` keys replace what the model card, the
//! model id, the folder name and `generation_config.json` gave (a `null` removes the value;
//! `general.base_models` and `general.datasets` are lists of objects, `general.tags` and
//! `general.languages` lists of text), then the name given on the command line. Values of the
//! wrong type are refused with the key (gguf-py would stop while writing them).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::model_card::Source;
use super::{read_json, ConvertError};

/// The overrides of one conversion.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    map: Map<String, Value>,
    path: PathBuf,
    /// `--model-name`: `general.name`, over everything else.
    pub model_name: Option<String>,
}

/// A key's override: `None` not overridden, `Some(None)` removed, `Some(Some(v))` replaced.
pub(crate) type Over<T> = Option<Option<T>>;

/// Applies an override to a value.
pub(crate) fn apply<T>(slot: &mut Option<T>, over: Over<T>) {
    if let Some(v) = over {
        *slot = v;
    }
}

impl Overrides {
    /// The override file at `path` (if any) and the model name.
    ///
    /// # Errors
    /// A file that cannot be read, is not JSON or not an object.
    pub(crate) fn load(
        path: Option<&Path>,
        model_name: Option<&str>,
    ) -> Result<Overrides, ConvertError> {
        let mut o = Overrides {
            model_name: model_name.map(str::to_string),
            ..Overrides::default()
        };
        if let Some(p) = path {
            o.path = p.to_path_buf();
            match read_json(p)? {
                Value::Object(m) => o.map = m,
                _ => return Err(o.bad("not a JSON object".into())),
            }
        }
        Ok(o)
    }

    fn bad(&self, reason: String) -> ConvertError {
        ConvertError::Input {
            path: self.path.clone(),
            reason,
        }
    }

    fn get(&self, key: &str) -> Over<&Value> {
        self.map.get(key).map(|v| (!v.is_null()).then_some(v))
    }

    /// A text key.
    pub(crate) fn text(&self, key: &str) -> Result<Over<String>, ConvertError> {
        match self.get(key) {
            Some(Some(Value::String(s))) => Ok(Some(Some(s.clone()))),
            Some(Some(v)) => Err(self.bad(format!("{key}: {v} is not text"))),
            Some(None) => Ok(Some(None)),
            None => Ok(None),
        }
    }

    /// An integer key (`general.sampling.top_k`, ...).
    pub(crate) fn int(&self, key: &str) -> Result<Over<i64>, ConvertError> {
        match self.get(key) {
            Some(Some(v)) => match v.as_i64().filter(|n| i32::try_from(*n).is_ok()) {
                Some(n) => Ok(Some(Some(n))),
                None => Err(self.bad(format!("{key}: {v} is not a 32-bit integer"))),
            },
            Some(None) => Ok(Some(None)),
            None => Ok(None),
        }
    }

    /// A number key (`general.sampling.temp`, ...).
    pub(crate) fn float(&self, key: &str) -> Result<Over<f64>, ConvertError> {
        match self.get(key) {
            Some(Some(v)) => match v.as_f64() {
                Some(n) => Ok(Some(Some(n))),
                None => Err(self.bad(format!("{key}: {v} is not a number"))),
            },
            Some(None) => Ok(Some(None)),
            None => Ok(None),
        }
    }

    /// A list of text (`general.tags`, `general.languages`).
    pub(crate) fn strings(&self, key: &str) -> Result<Over<Vec<String>>, ConvertError> {
        match self.get(key) {
            Some(Some(Value::Array(a))) => a
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(self.bad(format!("{key}: {v} is not text"))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|v| Some(Some(v))),
            Some(Some(v)) => Err(self.bad(format!("{key}: {v} is not a list"))),
            Some(None) => Ok(Some(None)),
            None => Ok(None),
        }
    }

    /// A list of objects of text (`general.base_models`, `general.datasets`).
    pub(crate) fn sources(&self, key: &str) -> Result<Over<Vec<Source>>, ConvertError> {
        let list = match self.get(key) {
            Some(Some(Value::Array(a))) => a,
            Some(Some(v)) => return Err(self.bad(format!("{key}: {v} is not a list"))),
            Some(None) => return Ok(Some(None)),
            None => return Ok(None),
        };
        let mut out = Vec::with_capacity(list.len());
        for item in list {
            let Value::Object(m) = item else {
                return Err(self.bad(format!("{key}: {item} is not an object")));
            };
            let mut e = Source::new();
            for (k, v) in m {
                match v {
                    Value::Null => {}
                    Value::String(s) => e.push((k.clone(), s.clone())),
                    _ => return Err(self.bad(format!("{key}: {k} = {v} is not text"))),
                }
            }
            out.push(e);
        }
        Ok(Some(Some(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(v: Value) -> Overrides {
        let Value::Object(map) = v else { panic!() };
        Overrides {
            map,
            ..Overrides::default()
        }
    }

    #[test]
    fn keys_are_typed_and_null_removes() {
        let o = with(serde_json::json!({
            "general.name": "N", "general.author": null, "general.version": 2,
            "general.sampling.top_k": 40, "general.sampling.temp": 1,
            "general.tags": ["a", "b"], "general.languages": "en",
            "general.base_models": [{"name": "B", "url": null}], "general.datasets": ["x"],
        }));
        assert_eq!(o.text("general.name").unwrap(), Some(Some("N".into())));
        assert_eq!(o.text("general.author").unwrap(), Some(None));
        assert_eq!(o.text("general.organization").unwrap(), None);
        assert!(o.text("general.version").is_err());
        assert_eq!(o.int("general.sampling.top_k").unwrap(), Some(Some(40)));
        assert!(o.int("general.sampling.temp").is_ok());
        assert_eq!(o.float("general.sampling.temp").unwrap(), Some(Some(1.0)));
        assert_eq!(
            o.strings("general.tags").unwrap(),
            Some(Some(vec!["a".into(), "b".into()]))
        );
        assert!(o.strings("general.languages").is_err());
        assert_eq!(
            o.sources("general.base_models").unwrap(),
            Some(Some(vec![vec![("name".into(), "B".into())]]))
        );
        assert!(o.sources("general.datasets").is_err());
        let mut slot = Some(1);
        apply(&mut slot, Some(None));
        assert_eq!(slot, None);
    }
}
