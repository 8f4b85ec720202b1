//! `POST /v1/embeddings`: pooled, L2-normalized hidden states of each input (a string, a list
//! of strings, token ids, or lists of token ids), as floats or base64 of little-endian f32
//! (the official clients ask for base64 by default).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value as Json_};

use super::{body, State};
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
struct EmbeddingBody {
    model: Option<String>,
    input: Option<Json_>,
    encoding_format: Option<Json_>,
    dimensions: Option<Json_>,
}

pub(crate) async fn handle(
    st: State,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Json_>, ApiError> {
    let b: EmbeddingBody = body(raw)?;
    st.check_model(&b.model)?;
    let base64 = match &b.encoding_format {
        None | Some(Json_::Null) => false,
        Some(Json_::String(s)) if s == "float" => false,
        Some(Json_::String(s)) if s == "base64" => true,
        Some(v) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("encoding_format must be float or base64, got {v}"),
            ))
        }
    };
    match &b.dimensions {
        None | Some(Json_::Null) => {}
        Some(v) if v.as_u64() == Some(st.n_embd as u64) => {}
        Some(v) => {
            return Err(ApiError::invalid(
                "dimensions",
                format!(
                    "this model's embeddings have {} dimensions, not {v}",
                    st.n_embd
                ),
            ))
        }
    }
    let inputs = super::completions::prompts(&st, b.input, "input")?;
    let mut data = Vec::with_capacity(inputs.len());
    let mut tokens = 0;
    for (i, (ids, _)) in inputs.into_iter().enumerate() {
        if ids.len() > st.ctx {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "input {i} has {} tokens; this server's context holds {}",
                    ids.len(),
                    st.ctx
                ),
            )
            .with_code("context_length_exceeded"));
        }
        tokens += ids.len();
        let v = st.engine.embed(ids).await?;
        let embedding = if base64 {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            Json_::String(base64_encode(&bytes))
        } else {
            json!(v)
        };
        data.push(json!({"object": "embedding", "index": i, "embedding": embedding}));
    }
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": st.model_id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}

/// Standard base64 with padding.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(c.get(1).copied().unwrap_or(0)) << 8)
            | u32::from(c.get(2).copied().unwrap_or(0));
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64_encode(i.as_bytes()), o);
        }
    }
}
