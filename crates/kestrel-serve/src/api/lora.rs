//! LoRA adapters over HTTP, as llama-server serves them: `GET /lora-adapters` lists the
//! adapters the model was loaded with and their scales, `POST /lora-adapters` sets those
//! scales (`[{"id": 0, "scale": 0.5}]`, unlisted adapters off) for requests that choose none,
//! and a request chooses its own with llama-server's `lora` field (the same list) or by naming
//! `"model": "<model>:<adapter>"` (the seed server's form; that adapter at scale 1). In a
//! batch, sequences with different adapters share each base matmul and add their own terms.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value as Json_};

use super::{body, AppState, State};
use crate::error::ApiError;

/// Most entries in a `lora` list.
const MAX_ENTRIES: usize = 256;

pub(crate) async fn list(st: State) -> Json<Json_> {
    let scales = st.scales();
    Json(Json_::Array(
        st.adapters
            .iter()
            .zip(scales)
            .map(|(a, scale)| {
                let mut entry = json!({
                    "id": a.id,
                    "name": a.name,
                    "path": a.path.to_string_lossy(),
                    "scale": scale,
                });
                // As llama-server: an activated LoRA's invocation, the others nothing.
                if !a.invocation_tokens.is_empty() {
                    entry["alora_invocation_string"] = json!(a.invocation_string);
                    entry["alora_invocation_tokens"] = json!(a.invocation_tokens);
                }
                entry
            })
            .collect(),
    ))
}

pub(crate) async fn set(
    st: State,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Json_>, ApiError> {
    let list: Json_ = body(raw)?;
    let mut scales = vec![0.0f32; st.adapters.len()];
    for (id, s) in entries(&st, &list, "the body")? {
        scales[id] = s;
    }
    st.engine.set_adapter_scales(scales.clone()).await?;
    *st.adapter_scales.lock().unwrap_or_else(|p| p.into_inner()) = scales;
    Ok(Json(json!({"success": true})))
}

/// A `lora` list: `[{"id": N, "scale": X}, ...]`, each id an adapter's.
fn entries(st: &AppState, list: &Json_, what: &str) -> Result<Vec<(usize, f32)>, ApiError> {
    let bad = |m: String| ApiError::invalid("lora", m);
    let items = list
        .as_array()
        .ok_or_else(|| bad(format!("{what} must be a list of {{\"id\", \"scale\"}}")))?;
    if items.len() > MAX_ENTRIES {
        return Err(bad(format!("at most {MAX_ENTRIES} adapter entries")));
    }
    let n = st.adapters.len();
    items
        .iter()
        .map(|e| {
            let id = e
                .get("id")
                .and_then(Json_::as_u64)
                .ok_or_else(|| bad(format!("each entry needs an integer \"id\", got {e}")))?;
            let id = usize::try_from(id).ok().filter(|&i| i < n).ok_or_else(|| {
                bad(format!(
                    "no LoRA adapter {id}: the model has {n} (GET /lora-adapters lists them)"
                ))
            })?;
            let scale = match e.get("scale") {
                None | Some(Json_::Null) => 0.0,
                Some(v) => v
                    .as_f64()
                    .filter(|x| x.is_finite() && x.abs() <= 1e6)
                    .ok_or_else(|| bad(format!("adapter {id}: scale must be a number, got {v}")))?
                    as f32,
            };
            Ok((id, scale))
        })
        .collect()
}

/// The adapters a completion request chooses: its `lora` list, and the adapter its `model`
/// names after the server's model id (at scale 1, unless the list sets it); `None` when it
/// chooses none (the server's scales). A `model` that is neither this server's nor one of its
/// adapters is a 404, as [`AppState::check_model`] says.
pub(crate) fn choice(
    st: &AppState,
    model: &Option<String>,
    lora: &Option<Json_>,
) -> Result<Option<Vec<(String, f32)>>, ApiError> {
    let named = match model {
        Some(m) if !st.serves(m) => Some(adapter_of(st, m)?),
        _ => None,
    };
    let mut list = match lora {
        None | Some(Json_::Null) => None,
        Some(l) => Some(entries(st, l, "lora")?),
    };
    if let Some(id) = named {
        let l = list.get_or_insert_with(Vec::new);
        if !l.iter().any(|(i, _)| *i == id) {
            l.push((id, 1.0));
        }
    }
    Ok(list.map(|l| l.into_iter().map(|(id, s)| (id.to_string(), s)).collect()))
}

/// The adapter `model` names as `<model id>:<adapter>` (or `default:<adapter>`).
fn adapter_of(st: &AppState, model: &str) -> Result<usize, ApiError> {
    let rest = model
        .strip_prefix(st.model_id.as_str())
        .or_else(|| model.strip_prefix("default"))
        .and_then(|r| r.strip_prefix(':'));
    let Some(name) = rest else {
        return Err(st.unknown_model(model));
    };
    kestrel::find_adapter(&st.adapters, name).map_err(|e| {
        ApiError::status(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            e.to_string(),
        )
        .with_code("model_not_found")
    })
}
