//! `general.*` metadata as llama.cpp's converter derives it: sampling defaults from
//! `generation_config.json`, and the model's name, organization, base name, fine-tune, version
//! and size label from `config.json`'s `_name_or_path` (when it is a model id) or the folder
//! name, with the parameter count for the size label when the name has none; the model
//! card's fields ([`super::model_card`]: license, tags, languages, base models, datasets, and
//! names that take precedence over the id's).

use std::path::Path;

use kestrel_gguf::MetadataValue;

use super::meta::Meta;
use super::model_id::{id_to_title, model_id_components, IdParts, ParamCount};
use super::overrides::{apply as over, Overrides};
use super::{model_card, ConvertError};

/// Writes `general.type`, the sampling defaults and the name fields, in llama.cpp's order.
///
/// # Errors
/// A model card or override that cannot be read.
pub(crate) fn write(
    meta: &mut Meta,
    dir: &Path,
    hparams: &serde_json::Value,
    params: ParamCount,
    ov: &Overrides,
) -> Result<(), ConvertError> {
    meta.str("general.type", "model");
    sampling(meta, dir, ov)?;
    let label = (params.total > 0).then(|| params.label());
    write_names(meta, dir, hparams, params.total as i64, label, ov)
}

/// `general.sampling.*` from `generation_config.json`, then the overrides.
fn sampling(meta: &mut Meta, dir: &Path, ov: &Overrides) -> Result<(), ConvertError> {
    let gen = std::fs::read(dir.join("generation_config.json"))
        .ok()
        .filter(|b| b.len() < 1 << 20)
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    let f = |k: &str| gen.get(k).and_then(|v| v.as_f64());
    let i = |k: &str| gen.get(k).and_then(|v| v.as_i64());
    let mut sequence = gen
        .get("sequence")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    over(&mut sequence, ov.text("general.sampling.sequence")?);
    if let Some(s) = sequence {
        meta.str("general.sampling.sequence", s);
    }
    // (key, generation_config.json's value, integer?)
    let keys: [(&str, Option<f64>, bool); 11] = [
        ("top_k", i("top_k").map(|v| v as f64), true),
        ("top_p", f("top_p"), false),
        ("min_p", f("min_p"), false),
        ("xtc_probability", f("xtc_probability"), false),
        ("xtc_threshold", f("xtc_threshold"), false),
        ("temp", f("temperature"), false),
        (
            "penalty_last_n",
            i("penalty_last_n").map(|v| v as f64),
            true,
        ),
        (
            "penalty_repeat",
            f("penalty_repeat").or_else(|| f("repetition_penalty")),
            false,
        ),
        ("mirostat", i("mirostat").map(|v| v as f64), true),
        ("mirostat_tau", f("mirostat_tau"), false),
        ("mirostat_eta", f("mirostat_eta"), false),
    ];
    for (k, from_gen, int) in keys {
        let key = format!("general.sampling.{k}");
        if int {
            let mut v = from_gen.map(|x| x as i64);
            over(&mut v, ov.int(&key)?);
            if let Some(v) = v {
                meta.set(key, MetadataValue::I32(v as i32));
            }
        } else {
            let mut v = from_gen;
            over(&mut v, ov.float(&key)?);
            if let Some(v) = v {
                meta.f32(key, v as f32);
            }
        }
    }
    Ok(())
}

/// `general.name` and the other authorship keys, in gguf-py's order: the model card's fields
/// first, then names from `_name_or_path` (a model id) and the folder's name; `tp` is gguf-py's
/// parameter count (negative for an adapter), `label` the size label to use when nothing else
/// gives one.
///
/// The overrides `ov` replace what these give, `--model-name` last.
///
/// # Errors
/// A model card that cannot be read (see [`super::model_card::load`]), an override of the
/// wrong type.
pub(crate) fn write_names(
    meta: &mut Meta,
    dir: &Path,
    hparams: &serde_json::Value,
    tp: i64,
    label: Option<String>,
    ov: &Overrides,
) -> Result<(), ConvertError> {
    let card = model_card::load(dir)?;
    let mut card = model_card::Fields::read(&card, tp).map_err(|reason| ConvertError::Input {
        path: dir.join("README.md"),
        reason: format!("model card: {reason}"),
    })?;
    let mut name = card.name.clone();
    let mut org = card.organization.clone();
    let mut basename = card.basename.clone();
    let mut finetune = card.finetune.clone();
    let mut version = card.version.clone();
    let mut size = card.size_label.clone();
    let mut apply_id = |p: IdParts| {
        if name.is_none() {
            name = p.full_name.as_deref().map(id_to_title);
        }
        if org.is_none() {
            org = p.org.as_deref().map(id_to_title);
        }
        basename = basename.take().or(p.basename);
        finetune = finetune.take().or(p.finetune);
        version = version.take().or(p.version);
        size = size.take().or(p.size_label);
    };
    if let Some(id) = hparams.get("_name_or_path").and_then(|v| v.as_str()) {
        if id.matches('/').count() <= 1 {
            apply_id(model_id_components(id, tp));
        }
    }
    let dir_name = std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    apply_id(model_id_components(&dir_name, tp));
    let g = |k: &str| format!("general.{k}");
    over(&mut name, ov.text(&g("name"))?);
    over(&mut card.author, ov.text(&g("author"))?);
    over(&mut version, ov.text(&g("version"))?);
    over(&mut org, ov.text(&g("organization"))?);
    over(&mut finetune, ov.text(&g("finetune"))?);
    over(&mut basename, ov.text(&g("basename"))?);
    over(&mut card.description, ov.text(&g("description"))?);
    let mut quantized_by = None;
    over(&mut quantized_by, ov.text(&g("quantized_by"))?);
    over(&mut size, ov.text(&g("size_label"))?);
    over(&mut card.license_name, ov.text(&g("license.name"))?);
    over(&mut card.license_link, ov.text(&g("license.link"))?);
    let mut own = [None, None, None, None];
    for (slot, k) in own.iter_mut().zip(["url", "doi", "uuid", "repo_url"]) {
        over(slot, ov.text(&g(k))?);
    }
    over(&mut card.source_url, ov.text(&g("source.url"))?);
    over(&mut card.source_doi, ov.text(&g("source.doi"))?);
    over(&mut card.source_uuid, ov.text(&g("source.uuid"))?);
    over(&mut card.source_repo_url, ov.text(&g("source.repo_url"))?);
    over(&mut card.base_models, ov.sources(&g("base_models"))?);
    over(&mut card.datasets, ov.sources(&g("datasets"))?);
    over(&mut card.tags, ov.strings(&g("tags"))?);
    over(&mut card.languages, ov.strings(&g("languages"))?);
    if let Some(n) = &ov.model_name {
        name = Some(n.clone());
    }
    let name = name.unwrap_or(dir_name);
    let opt = |meta: &mut Meta, key: &str, v: &Option<String>| {
        if let Some(v) = v {
            meta.str(key, v.as_str());
        }
    };
    meta.str("general.name", name);
    opt(meta, "general.author", &card.author);
    opt(meta, "general.version", &version);
    opt(meta, "general.organization", &org);
    opt(meta, "general.finetune", &finetune);
    opt(meta, "general.basename", &basename);
    opt(meta, "general.description", &card.description);
    opt(meta, "general.quantized_by", &quantized_by);
    opt(meta, "general.size_label", &size.or(label));
    opt(meta, "general.license", &card.license);
    opt(meta, "general.license.name", &card.license_name);
    opt(meta, "general.license.link", &card.license_link);
    for (v, k) in own.iter().zip(["url", "doi", "uuid", "repo_url"]) {
        opt(meta, &g(k), v);
    }
    opt(meta, "general.source.url", &card.source_url);
    opt(meta, "general.source.doi", &card.source_doi);
    opt(meta, "general.source.uuid", &card.source_uuid);
    opt(meta, "general.source.repo_url", &card.source_repo_url);
    for (what, list) in [
        ("base_model", &card.base_models),
        ("dataset", &card.datasets),
    ] {
        let Some(list) = list else { continue };
        meta.u32(format!("general.{what}.count"), list.len() as u32);
        for (i, entry) in list.iter().enumerate() {
            for key in [
                "name",
                "author",
                "version",
                "organization",
                "description",
                "url",
                "doi",
                "uuid",
                "repo_url",
            ] {
                if let Some((_, v)) = entry.iter().find(|(k, _)| k == key) {
                    meta.str(format!("general.{what}.{i}.{key}"), v.as_str());
                }
            }
        }
    }
    if let Some(tags) = card.tags {
        meta.strings("general.tags", tags);
    }
    if let Some(langs) = card.languages {
        meta.strings("general.languages", langs);
    }
    Ok(())
}
