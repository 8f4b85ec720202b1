//! The request fields chat and text completions share (sampling, budget, stops, penalties,
//! logit bias, seed, `n`), parsed leniently (unknown fields ignored) and validated strictly:
//! a known field with a bad value is a 400 naming the field.

use kestrel::GenerateOptions;
use serde::Deserialize;
use serde_json::Value as Json;

use crate::error::ApiError;

/// Most choices per request (`n`).
pub const MAX_N: usize = 16;
/// Most stop strings per request, and bytes per stop string.
pub const MAX_STOPS: usize = 16;
/// Bytes per stop string.
pub const MAX_STOP_LEN: usize = 256;
/// Most logit-bias entries per request.
pub const MAX_LOGIT_BIAS: usize = 1024;

/// Fields shared by `/v1/chat/completions` and `/v1/completions`.
#[derive(Debug, Default, Deserialize)]
pub struct Common {
    pub model: Option<String>,
    pub max_tokens: Option<Json>,
    pub max_completion_tokens: Option<Json>,
    pub temperature: Option<Json>,
    pub top_p: Option<Json>,
    pub top_k: Option<Json>,
    pub min_p: Option<Json>,
    pub n: Option<Json>,
    pub stop: Option<Json>,
    pub seed: Option<Json>,
    pub presence_penalty: Option<Json>,
    pub frequency_penalty: Option<Json>,
    pub repetition_penalty: Option<Json>,
    pub logit_bias: Option<Json>,
    pub stream: Option<Json>,
    pub stream_options: Option<Json>,
    /// llama-server's per-request LoRA scales (`[{"id", "scale"}]`).
    pub lora: Option<Json>,
}

/// What the shared fields ask for.
#[derive(Debug)]
pub struct Parsed {
    pub opts: GenerateOptions,
    /// `max_tokens` as given (`None`: up to the context).
    pub max_tokens: Option<usize>,
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
}

fn num(v: &Json, name: &str) -> Result<f64, ApiError> {
    match v.as_f64() {
        Some(x) if x.is_finite() => Ok(x),
        _ => Err(ApiError::invalid(
            name,
            format!("{name} must be a number, got {v}"),
        )),
    }
}

fn num_in(v: &Option<Json>, name: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(v) => {
            let x = num(v, name)?;
            if x < lo || x > hi {
                return Err(ApiError::invalid(
                    name,
                    format!("{name} must be within [{lo}, {hi}], got {x}"),
                ));
            }
            Ok(Some(x as f32))
        }
    }
}

fn int_in(v: &Option<Json>, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(v) => {
            let x = v.as_i64().ok_or_else(|| {
                ApiError::invalid(name, format!("{name} must be an integer, got {v}"))
            })?;
            if x < lo || x > hi {
                return Err(ApiError::invalid(
                    name,
                    format!("{name} must be within [{lo}, {hi}], got {x}"),
                ));
            }
            Ok(Some(x))
        }
    }
}

fn boolean(v: &Option<Json>, name: &str) -> Result<Option<bool>, ApiError> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::invalid(
            name,
            format!("{name} must be a boolean, got {v}"),
        )),
    }
}

impl Common {
    /// Validate against a model of `n_vocab` tokens.
    pub fn parse(&self, n_vocab: usize) -> Result<Parsed, ApiError> {
        let mut o = GenerateOptions::default();
        let s = &mut o.sampling;
        if let Some(t) = num_in(&self.temperature, "temperature", 0.0, 100.0)? {
            s.temperature = t;
        }
        if let Some(p) = num_in(&self.top_p, "top_p", 0.0, 1.0)? {
            if p == 0.0 {
                // OpenAI accepts 0: only the most likely token
                s.top_k = 1;
            } else {
                s.top_p = p;
            }
        }
        if let Some(k) = int_in(&self.top_k, "top_k", 0, n_vocab as i64)? {
            s.top_k = k as usize;
        }
        if let Some(p) = num_in(&self.min_p, "min_p", 0.0, 1.0)? {
            s.min_p = p;
        }
        if let Some(p) = num_in(&self.presence_penalty, "presence_penalty", -2.0, 2.0)? {
            s.presence_penalty = p;
        }
        if let Some(p) = num_in(&self.frequency_penalty, "frequency_penalty", -2.0, 2.0)? {
            s.frequency_penalty = p;
        }
        if let Some(p) = num_in(&self.repetition_penalty, "repetition_penalty", 0.0, 10.0)? {
            s.repeat_penalty = p;
        }
        if s.presence_penalty != 0.0 || s.frequency_penalty != 0.0 {
            // OpenAI's penalties count every generated token, not a window
            s.penalty_last_n = -1;
        }
        match &self.seed {
            None | Some(Json::Null) => {}
            Some(v) => {
                let seed = v
                    .as_u64()
                    .or_else(|| v.as_i64().map(|x| x as u64))
                    .ok_or_else(|| {
                        ApiError::invalid("seed", format!("seed must be an integer, got {v}"))
                    })?;
                s.seed = Some(seed);
            }
        }
        s.stop_strings = stops(&self.stop)?;
        s.logit_bias = logit_bias(&self.logit_bias, n_vocab)?;
        let n = int_in(&self.n, "n", 1, MAX_N as i64)?.unwrap_or(1) as usize;
        let max_tokens = match (&self.max_completion_tokens, &self.max_tokens) {
            // past the context is checked with the prompt's length (context_length_exceeded)
            (Some(v), _) if !v.is_null() => {
                int_in(&Some(v.clone()), "max_completion_tokens", 1, i64::MAX)?
            }
            (_, v) => int_in(v, "max_tokens", 1, i64::MAX)?,
        }
        .map(|x| x as usize);
        let stream = boolean(&self.stream, "stream")?.unwrap_or(false);
        let include_usage = match &self.stream_options {
            None | Some(Json::Null) => false,
            Some(Json::Object(m)) => boolean(
                &m.get("include_usage").cloned(),
                "stream_options.include_usage",
            )?
            .unwrap_or(false),
            Some(v) => {
                return Err(ApiError::invalid(
                    "stream_options",
                    format!("stream_options must be an object, got {v}"),
                ))
            }
        };
        o.sampling
            .validate()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(Parsed {
            opts: o,
            max_tokens,
            n,
            stream,
            include_usage,
        })
    }
}

fn stops(v: &Option<Json>) -> Result<Vec<String>, ApiError> {
    let list: Vec<&Json> = match v {
        None | Some(Json::Null) => return Ok(Vec::new()),
        Some(s @ Json::String(_)) => vec![s],
        Some(Json::Array(a)) => a.iter().collect(),
        Some(v) => {
            return Err(ApiError::invalid(
                "stop",
                format!("stop must be a string or a list of strings, got {v}"),
            ))
        }
    };
    if list.len() > MAX_STOPS {
        return Err(ApiError::invalid(
            "stop",
            format!("at most {MAX_STOPS} stop strings, got {}", list.len()),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for s in list {
        let s = s.as_str().ok_or_else(|| {
            ApiError::invalid("stop", format!("stop strings must be strings, got {s}"))
        })?;
        if s.len() > MAX_STOP_LEN {
            return Err(ApiError::invalid(
                "stop",
                format!("a stop string is {} bytes; at most {MAX_STOP_LEN}", s.len()),
            ));
        }
        if !s.is_empty() {
            out.push(s.to_string());
        }
    }
    Ok(out)
}

fn logit_bias(v: &Option<Json>, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let m = match v {
        None | Some(Json::Null) => return Ok(Vec::new()),
        Some(Json::Object(m)) => m,
        Some(v) => {
            return Err(ApiError::invalid(
                "logit_bias",
                format!("logit_bias must be an object of token id to bias, got {v}"),
            ))
        }
    };
    if m.len() > MAX_LOGIT_BIAS {
        return Err(ApiError::invalid(
            "logit_bias",
            format!("at most {MAX_LOGIT_BIAS} entries, got {}", m.len()),
        ));
    }
    let mut out = Vec::with_capacity(m.len());
    for (k, v) in m {
        let id: u32 = k
            .parse()
            .ok()
            .filter(|&i: &u32| (i as usize) < n_vocab)
            .ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!("logit_bias key {k:?} is not a token id below {n_vocab}"),
                )
            })?;
        let b = num(v, "logit_bias")?;
        if !(-100.0..=100.0).contains(&b) {
            return Err(ApiError::invalid(
                "logit_bias",
                format!("logit_bias values must be within [-100, 100], got {b}"),
            ));
        }
        out.push((id, b as f32));
    }
    Ok(out)
}

/// Set the budget: `max_tokens` if given (it must fit the context with the prompt), else all
/// the context the prompt leaves.
pub fn budget(max_tokens: Option<usize>, prompt_len: usize, ctx: usize) -> Result<usize, ApiError> {
    if prompt_len >= ctx {
        return Err(ApiError::bad_request(format!(
            "the prompt has {prompt_len} tokens; this server's context holds {ctx}"
        ))
        .with_code("context_length_exceeded"));
    }
    match max_tokens {
        Some(m) if prompt_len + m > ctx => Err(ApiError::bad_request(format!(
            "the prompt has {prompt_len} tokens and max_tokens is {m}: {} tokens, more than this server's context of {ctx}",
            prompt_len + m
        ))
        .with_code("context_length_exceeded")),
        Some(m) => Ok(m),
        None => Ok(ctx - prompt_len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(j: Json) -> Result<Parsed, ApiError> {
        let c: Common =
            serde_json::from_value(j).map_err(|e| ApiError::bad_request(e.to_string()))?;
        c.parse(1000)
    }

    #[test]
    fn accepts_openai_fields() {
        let p = parse(serde_json::json!({
            "model": "x", "temperature": 0.5, "top_p": 0.9, "n": 2, "stop": ["\n", "END"],
            "seed": 7, "max_tokens": 10, "logit_bias": {"5": -100}, "stream": true,
            "stream_options": {"include_usage": true}, "frobnicate": 1
        }))
        .unwrap();
        assert_eq!(p.n, 2);
        assert_eq!(p.max_tokens, Some(10));
        assert_eq!(p.opts.sampling.stop_strings, vec!["\n", "END"]);
        assert_eq!(p.opts.sampling.logit_bias, vec![(5, -100.0)]);
        assert!(p.stream && p.include_usage);
        assert_eq!(p.opts.sampling.seed, Some(7));
    }

    #[test]
    fn refuses_bad_values_naming_the_field() {
        for (j, field) in [
            (serde_json::json!({"max_tokens": -1}), "max_tokens"),
            (serde_json::json!({"max_tokens": "ten"}), "max_tokens"),
            (serde_json::json!({"temperature": "hot"}), "temperature"),
            (serde_json::json!({"top_p": 1.5}), "top_p"),
            (serde_json::json!({"n": 0}), "n"),
            (serde_json::json!({"stop": 3}), "stop"),
            (
                serde_json::json!({"logit_bias": {"99999": 1}}),
                "logit_bias",
            ),
            (serde_json::json!({"logit_bias": {"1": 1000}}), "logit_bias"),
            (
                serde_json::json!({"presence_penalty": 5}),
                "presence_penalty",
            ),
            (serde_json::json!({"stream": "yes"}), "stream"),
        ] {
            let e = parse(j.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{j}");
            assert_eq!(e.status, 400);
        }
        let many: Vec<String> = (0..10_000).map(|i| format!("s{i}")).collect();
        let e = parse(serde_json::json!({ "stop": many })).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stop"));
    }

    #[test]
    fn budget_fits_the_context() {
        assert_eq!(budget(None, 100, 512).unwrap(), 412);
        assert_eq!(budget(Some(12), 500, 512).unwrap(), 12);
        assert_eq!(
            budget(Some(13), 500, 512).unwrap_err().code,
            Some("context_length_exceeded")
        );
        assert!(budget(None, 512, 512).is_err());
    }
}
