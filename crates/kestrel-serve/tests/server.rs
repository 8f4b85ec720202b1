//! The server end to end on SmolLM2, through a plain HTTP client: every endpoint, streaming,
//! tools, JSON Schema output, log-probabilities, authentication, a malformed-request suite,
//! client disconnects freeing their KV blocks, 429 when the queue is full, and concurrent
//! streaming clients.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use kestrel::{ChatMessage, GenerateOptions};
use kestrel_serve::{ServeOptions, Server};
use serde_json::{json, Value};

const KEY: &str = "test-key";

/// One server for the tests of this file (key required, 4 sequences in parallel).
fn shared() -> Option<SocketAddr> {
    static S: OnceLock<Option<Server>> = OnceLock::new();
    S.get_or_init(|| {
        server(
            1024,
            ServeOptions {
                parallel: 4,
                api_key: Some(KEY.into()),
                max_body_bytes: 256 << 10,
                ..ServeOptions::default()
            },
        )
    })
    .as_ref()
    .map(Server::addr)
}

fn chat(addr: SocketAddr, body: Value) -> Resp {
    post(addr, "/v1/chat/completions", &body, Some(KEY))
}

#[test]
fn chat_greedy_matches_the_library() {
    let Some(addr) = shared() else { return };
    let q = "What is the capital of France?";
    let r = chat(
        addr,
        json!({"model": "smollm2", "messages": [{"role": "user", "content": q}], "max_tokens": 24, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(j["object"], "chat.completion");
    assert_eq!(j["model"], "smollm2");
    let c = &j["choices"][0];
    assert_eq!(c["message"]["role"], "assistant");
    let text = c["message"]["content"].as_str().unwrap();
    let u = &j["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    assert!(u["completion_tokens"].as_u64().unwrap() <= 24);
    // the same conversation through the library, greedy: the same reply
    let mut model = smollm2(1024).unwrap();
    let want = model
        .chat(
            &[ChatMessage::new("user", q)],
            &GenerateOptions::greedy().with_max_tokens(24),
        )
        .unwrap();
    assert_eq!(text, want.text);
    assert_eq!(c["finish_reason"], want.finish.as_openai());
}

#[test]
fn chat_stream_equals_the_whole_reply_and_reports_usage() {
    let Some(addr) = shared() else { return };
    let msgs = json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}]);
    let whole = chat(
        addr,
        json!({"messages": msgs, "max_tokens": 20, "temperature": 0}),
    )
    .json();
    let r = chat(
        addr,
        json!({"messages": msgs, "max_tokens": 20, "temperature": 0, "stream": true,
               "stream_options": {"include_usage": true}}),
    );
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.sse();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| {
            c["choices"]
                .get(0)?
                .get("delta")?
                .get("content")?
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|ch| &ch["finish_reason"]))
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&whole["choices"][0]["finish_reason"]]);
    let usage = &chunks.last().unwrap()["usage"];
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage[k], whole["usage"][k], "usage chunk {k}");
    }
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
}

#[test]
fn completions_many_prompts_and_choices() {
    let Some(addr) = shared() else { return };
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": ["Once upon a time", "The sky is"], "n": 2, "max_tokens": 6,
                "temperature": 0.9, "seed": 11, "echo": true, "logprobs": 2}),
        Some(KEY),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(j["object"], "text_completion");
    let choices = j["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        let prefix = if i < 2 {
            "Once upon a time"
        } else {
            "The sky is"
        };
        assert!(c["text"].as_str().unwrap().starts_with(prefix), "{c}");
        let lp = &c["logprobs"];
        let n = lp["tokens"].as_array().unwrap().len();
        assert!(n > 0 && lp["token_logprobs"].as_array().unwrap().len() == n);
        assert!(lp["token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x.as_f64().unwrap() <= 0.0));
        assert!(lp["top_logprobs"][0].as_object().unwrap().len() <= 2);
    }
    // the same seed twice: the same text; token-id prompts are accepted
    let a = post(
        addr,
        "/v1/completions",
        &json!({"prompt": [1, 504, 3337], "max_tokens": 5, "seed": 5}),
        Some(KEY),
    )
    .json();
    let b = post(
        addr,
        "/v1/completions",
        &json!({"prompt": [1, 504, 3337], "max_tokens": 5, "seed": 5}),
        Some(KEY),
    )
    .json();
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
}

#[test]
fn json_schema_output_is_valid() {
    let Some(addr) = shared() else { return };
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": false});
    let r = chat(
        addr,
        json!({"messages": [{"role": "user", "content": "Invent a person."}], "max_tokens": 80, "temperature": 0.7, "seed": 3,
               "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}}}),
    );
    assert_eq!(r.status, 200);
    let text = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(v["name"].is_string() && v["age"].is_u64(), "{v}");
    assert!(v.as_object().unwrap().len() == 2);
    // json_object: any JSON object
    let r = chat(
        addr,
        json!({"messages": [{"role": "user", "content": "A JSON object please."}], "max_tokens": 60, "seed": 1,
               "response_format": {"type": "json_object"}}),
    );
    let text = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    if r.json()["choices"][0]["finish_reason"] == "stop" {
        assert!(
            serde_json::from_str::<Value>(&text).unwrap().is_object(),
            "{text}"
        );
    }
}

#[test]
fn tool_call_round_trip() {
    let Some(addr) = shared() else { return };
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"]}}}]);
    let user = json!({"role": "user", "content": "What is the weather in Paris?"});
    let r = chat(
        addr,
        json!({"messages": [user], "tools": tools, "tool_choice": "required", "max_tokens": 48, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    let c = &j["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls");
    let call = &c["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
    // send the result back: the model answers in text
    let r = chat(
        addr,
        json!({"messages": [user, c["message"], {"role": "tool", "tool_call_id": call["id"], "content": "{\"temp_c\": 18, \"sky\": \"sunny\"}"}],
               "tools": tools, "max_tokens": 24, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let m = &r.json()["choices"][0]["message"];
    assert!(
        m["content"].is_string() || m["tool_calls"].is_array(),
        "{m}"
    );
    // streamed: the call arrives as a tool_calls delta
    let r = chat(
        addr,
        json!({"messages": [user], "tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                              "max_tokens": 48, "temperature": 0, "stream": true}),
    );
    let chunks: Vec<Value> = r
        .sse()
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let delta_call = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"].get("tool_calls").cloned())
        .expect("tool_calls delta");
    assert_eq!(delta_call[0]["function"]["name"], "get_weather");
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));
}

#[test]
fn chat_logprobs() {
    let Some(addr) = shared() else { return };
    let r = chat(
        addr,
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0,
                              "logprobs": true, "top_logprobs": 3}),
    );
    let j = r.json();
    let content = j["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!content.is_empty());
    for t in &content {
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // greedy: the chosen token is the most likely one
        assert_eq!(top[0]["token"], t["token"]);
        assert!(
            (top[0]["logprob"].as_f64().unwrap() - t["logprob"].as_f64().unwrap()).abs() < 1e-6
        );
        assert!(top[1]["logprob"].as_f64() <= top[0]["logprob"].as_f64());
    }
}

#[test]
fn embeddings_float_and_base64() {
    let Some(addr) = shared() else { return };
    let r = post(
        addr,
        "/v1/embeddings",
        &json!({"input": ["a cat sat on the mat", "a cat sat on the mat", "stock prices fell"]}),
        Some(KEY),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    let vecs: Vec<Vec<f64>> = j["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(vecs.len(), 3);
    assert_eq!(vecs[0].len(), 576);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    assert!((dot(&vecs[0], &vecs[0]) - 1.0).abs() < 1e-4);
    assert!((dot(&vecs[0], &vecs[1]) - 1.0).abs() < 1e-4);
    assert!(dot(&vecs[0], &vecs[2]) < 0.9999);
    assert!(j["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let b = post(
        addr,
        "/v1/embeddings",
        &json!({"input": "a cat sat on the mat", "encoding_format": "base64"}),
        Some(KEY),
    )
    .json();
    let s = b["data"][0]["embedding"].as_str().unwrap();
    let bytes = base64_decode(s);
    let floats: Vec<f64> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
        .collect();
    assert_eq!(floats.len(), 576);
    assert!(floats
        .iter()
        .zip(&vecs[0])
        .all(|(a, b)| (a - b).abs() < 1e-6));
}

#[test]
fn models_health_metrics_and_auth() {
    let Some(addr) = shared() else { return };
    let m = get(addr, "/v1/models", Some(KEY)).json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "smollm2");
    assert_eq!(get(addr, "/v1/models/smollm2", Some(KEY)).status, 200);
    assert_eq!(get(addr, "/health", None).status, 200);
    let text = String::from_utf8_lossy(&get(addr, "/metrics", Some(KEY)).body).into_owned();
    for name in [
        "kestrel_queue_depth",
        "kestrel_kv_blocks_used",
        "kestrel_kv_blocks_total",
        "kestrel_decode_tokens_per_second",
        "kestrel_prefill_tokens_per_second",
        "kestrel_generated_tokens_total",
    ] {
        metric(&text, name);
    }
    assert!(text.contains("kestrel_time_to_first_token_seconds_bucket{le=\"+Inf\"}"));
    // no key, a wrong key
    for key in [None, Some("nope")] {
        let r = get(addr, "/v1/models", key);
        assert_eq!(r.status, 401);
        assert_eq!(r.error()["type"], "authentication_error");
    }
}

/// The chat page needs no key (its API calls do), ships a CSP that allows only this server,
/// and `webui: false` leaves `/` unserved.
#[test]
fn chat_page_is_served_without_a_key_and_can_be_turned_off() {
    let Some(addr) = shared() else { return };
    let page = get(addr, "/", None);
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap_or_default()
        .starts_with("text/html"));
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(String::from_utf8_lossy(&page.body).contains("/webui/app.js"));
    for (path, kind) in [
        ("/webui/app.js", "text/javascript"),
        ("/webui/markdown.js", "text/javascript"),
        ("/webui/style.css", "text/css"),
    ] {
        let r = get(addr, path, None);
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type")
                .unwrap_or_default()
                .starts_with(kind),
            "{path}"
        );
    }
    assert_eq!(get(addr, "/webui/nope.js", None).status, 404);
    let Some(off) = server(
        256,
        ServeOptions {
            webui: false,
            ..ServeOptions::default()
        },
    ) else {
        return;
    };
    assert_eq!(get(off.addr(), "/", None).status, 404);
    assert_eq!(get(off.addr(), "/webui/app.js", None).status, 404);
    assert_eq!(get(off.addr(), "/health", None).status, 200);
}

#[test]
fn malformed_requests_get_openai_errors_and_the_server_keeps_serving() {
    let Some(addr) = shared() else { return };
    let many_stops: Vec<String> = (0..10_000).map(|i| format!("stop{i}")).collect();
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("bad JSON", b"{\"messages\": [".to_vec(), 400),
        ("not an object", b"[1, 2, 3]".to_vec(), 400),
        ("messages wrong type", json!({"messages": "hello"}).to_string().into_bytes(), 400),
        ("no messages", json!({"max_tokens": 5}).to_string().into_bytes(), 400),
        ("empty messages", json!({"messages": []}).to_string().into_bytes(), 400),
        ("bad role", json!({"messages": [{"role": "wizard", "content": "x"}]}).to_string().into_bytes(), 400),
        ("content wrong type", json!({"messages": [{"role": "user", "content": 5}]}).to_string().into_bytes(), 400),
        ("negative max_tokens", json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}).to_string().into_bytes(), 400),
        ("max_tokens a string", json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}).to_string().into_bytes(), 400),
        ("max_tokens past the context", json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}).to_string().into_bytes(), 400),
        ("temperature wrong type", json!({"messages": [{"role": "user", "content": "x"}], "temperature": "warm"}).to_string().into_bytes(), 400),
        ("top_p out of range", json!({"messages": [{"role": "user", "content": "x"}], "top_p": 7}).to_string().into_bytes(), 400),
        ("n zero", json!({"messages": [{"role": "user", "content": "x"}], "n": 0}).to_string().into_bytes(), 400),
        ("unknown model", json!({"model": "gpt-17", "messages": [{"role": "user", "content": "x"}]}).to_string().into_bytes(), 404),
        ("invalid schema", json!({"messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frobnicate"}}}}).to_string().into_bytes(), 400),
        ("unknown response_format", json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}).to_string().into_bytes(), 400),
        ("10k stop strings", json!({"messages": [{"role": "user", "content": "x"}], "stop": many_stops}).to_string().into_bytes(), 400),
        ("bad logit_bias", json!({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"abc": 1}}).to_string().into_bytes(), 400),
        ("bad tools", json!({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}).to_string().into_bytes(), 400),
        ("tool_choice not in tools", json!({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}}}).to_string().into_bytes(), 400),
        ("huge body", {
            let mut v = b"{\"messages\": [{\"role\": \"user\", \"content\": \"".to_vec();
            v.extend(std::iter::repeat_n(b'a', 1 << 20));
            v.extend_from_slice(b"\"}]}");
            v
        }, 413),
    ];
    for (what, body, status) in &cases {
        let r = call(addr, "POST", "/v1/chat/completions", Some(body), Some(KEY));
        assert_eq!(
            r.status,
            *status,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let e = r.error();
        if *what == "max_tokens past the context" {
            assert_eq!(e["code"], "context_length_exceeded");
        }
        if *what == "negative max_tokens" {
            assert_eq!(e["param"], "max_tokens");
        }
    }
    // other endpoints
    let r = post(addr, "/v1/completions", &json!({"prompt": 12}), Some(KEY));
    assert_eq!(r.status, 400);
    r.error();
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": [999999999]}),
        Some(KEY),
    );
    assert_eq!(r.status, 400);
    let r = post(
        addr,
        "/v1/embeddings",
        &json!({"input": {"x": 1}}),
        Some(KEY),
    );
    assert_eq!(r.status, 400);
    r.error();
    let r = post(addr, "/v1/nothing", &json!({}), Some(KEY));
    assert_eq!(r.status, 404);
    r.error();
    let r = get(addr, "/v1/chat/completions", Some(KEY));
    assert_eq!(r.status, 405);
    r.error();
    // a request line that is not HTTP: the connection is refused, the server lives on
    let _ = raw(addr, b"GARBAGE\r\n\r\n");
    // still serving
    let r = chat(
        addr,
        json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_client_that_disconnects_frees_its_blocks() {
    use std::io::{Read, Write};
    let Some(addr) = shared() else { return };
    let body =
        json!({"messages": [{"role": "user", "content": "Write a very long story about the sea."}],
                      "max_tokens": 900, "stream": true, "temperature": 0.8, "seed": 1})
        .to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = [0u8; 2048];
    let mut got = 0;
    while got < 600 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n;
    }
    drop(s);
    let m = settle(addr, Some(KEY));
    assert_no_leaked_blocks(&m);
    assert!(
        metric(&m, "kestrel_cancelled_sequences_total") >= 1.0,
        "{m}"
    );
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    let Some(srv) = server(
        512,
        ServeOptions {
            parallel: 1,
            queue: 0,
            ..ServeOptions::default()
        },
    ) else {
        return;
    };
    let addr = srv.addr();
    let long = std::thread::spawn(move || {
        post(
            addr,
            "/v1/completions",
            &json!({"prompt": "Once upon a time", "max_tokens": 300, "temperature": 1.0, "seed": 2,
                                              "logit_bias": {"2": -100}}),
            None,
        )
    });
    // wait until it runs
    for _ in 0..200 {
        let m = String::from_utf8_lossy(&get(addr, "/metrics", None).body).into_owned();
        if metric(&m, "kestrel_inflight_sequences") >= 1.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
        None,
    );
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.error()["type"], "rate_limit_error");
    assert_eq!(long.join().unwrap().status, 200);
    assert_eq!(
        post(
            addr,
            "/v1/completions",
            &json!({"prompt": "Hi", "max_tokens": 2}),
            None
        )
        .status,
        200
    );
}

#[test]
fn concurrent_streaming_clients_all_finish() {
    let Some(addr) = shared() else { return };
    let clients: Vec<_> = (0..8)
        .map(|c| {
            std::thread::spawn(move || {
                for r in 0..3 {
                    let n = 4 + (c * 7 + r * 5) % 20;
                    let resp = chat(addr, json!({"messages": [{"role": "user", "content": format!("Count to {n}.")}],
                                                 "max_tokens": n, "stream": true, "seed": c * 10 + r}));
                    assert_eq!(resp.status, 200);
                    let ev = resp.sse();
                    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
                    assert!(!ev.iter().any(|e| e.contains("\"error\"")), "{ev:?}");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let m = settle(addr, Some(KEY));
    assert_no_leaked_blocks(&m);
}
