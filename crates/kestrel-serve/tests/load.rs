//! A load test on loopback (run by hand; it takes minutes):
//!
//! ```text
//! cargo test --release -p kestrel-serve --test load -- --ignored --nocapture
//! ```
//!
//! One streaming client alone, then `KESTREL_LOAD_CLIENTS` (32) concurrent streaming clients ×
//! `KESTREL_LOAD_REQUESTS` (20) chat requests of mixed prompt and output lengths on SmolLM2.
//! Asserts 0 errors, every stream ending in `[DONE]`, and no KV block held once all are done
//! (through `/metrics`); prints aggregate generated tok/s next to the single client's.

mod common;

use std::time::Instant;

use common::*;
use kestrel_serve::ServeOptions;
use serde_json::{json, Value};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const TOPICS: [&str; 8] = [
    "the sea",
    "a robot learning to paint",
    "why the sky is blue",
    "the history of bread",
    "a city at night",
    "how bees communicate",
    "a long train journey across the mountains in winter",
    "the rules of chess",
];

/// One streamed request: generated tokens (from the usage chunk).
fn one(addr: std::net::SocketAddr, client: usize, r: usize) -> Result<u64, String> {
    let max_tokens = 16 + (client * 37 + r * 53) % 113;
    let topic = TOPICS[(client + r) % TOPICS.len()];
    let body = json!({
        "messages": [{"role": "user", "content": format!("Write about {topic}.")}],
        "max_tokens": max_tokens, "temperature": 0.8, "seed": client * 1000 + r,
        "stream": true, "stream_options": {"include_usage": true},
    });
    let resp = post(addr, "/v1/chat/completions", &body, None);
    if resp.status != 200 {
        return Err(format!(
            "status {}: {}",
            resp.status,
            String::from_utf8_lossy(&resp.body)
        ));
    }
    let ev = resp.sse();
    if ev.last().map(String::as_str) != Some("[DONE]") {
        return Err(format!("no [DONE]: {ev:?}"));
    }
    if let Some(e) = ev.iter().find(|e| e.contains("\"error\"")) {
        return Err(e.clone());
    }
    let usage: Value = serde_json::from_str(&ev[ev.len() - 2]).map_err(|e| e.to_string())?;
    usage["usage"]["completion_tokens"]
        .as_u64()
        .ok_or_else(|| format!("no usage: {usage}"))
}

#[test]
#[ignore = "minutes of load; run by hand"]
fn loopback_load() {
    let clients = env("KESTREL_LOAD_CLIENTS", 32);
    let requests = env("KESTREL_LOAD_REQUESTS", 20);
    let parallel = env("KESTREL_LOAD_PARALLEL", 16);
    let Some(srv) = server(
        2048,
        ServeOptions {
            parallel,
            queue: 1024,
            ..ServeOptions::default()
        },
    ) else {
        return;
    };
    let addr = srv.addr();
    // single client, a few requests of the same mix
    let t = Instant::now();
    let mut single_tokens = 0;
    for r in 0..8 {
        single_tokens += one(addr, 0, r).expect("single client");
    }
    let single = single_tokens as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            std::thread::spawn(move || {
                let (mut tokens, mut errors) = (0u64, Vec::new());
                for r in 0..requests {
                    match one(addr, c, r) {
                        Ok(n) => tokens += n,
                        Err(e) => errors.push(e),
                    }
                }
                (tokens, errors)
            })
        })
        .collect();
    let (mut tokens, mut errors) = (0u64, Vec::new());
    for h in handles {
        let (t, e) = h.join().expect("client thread");
        tokens += t;
        errors.extend(e);
    }
    let secs = t.elapsed().as_secs_f64();
    let m = settle(addr, None);
    println!(
        "load: {clients} clients x {requests} requests, parallel {parallel}: {} requests, {} errors, {tokens} tokens in {secs:.1} s = {:.1} tok/s aggregate; single client {single:.1} tok/s; ratio {:.2}",
        clients * requests,
        errors.len(),
        tokens as f64 / secs,
        tokens as f64 / secs / single
    );
    println!(
        "metrics: kv blocks used {} (cached {}), total {}; sequences {}; cancelled {}",
        metric(&m, "kestrel_kv_blocks_used"),
        metric(&m, "kestrel_kv_blocks_cached"),
        metric(&m, "kestrel_kv_blocks_total"),
        metric(&m, "kestrel_sequences_total"),
        metric(&m, "kestrel_cancelled_sequences_total"),
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {}",
        errors.len(),
        errors[0]
    );
    assert_no_leaked_blocks(&m);
}
