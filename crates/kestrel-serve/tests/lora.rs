//! LoRA adapters through the server, as llama-server serves them, on SmolLM2 with two random
//! adapters written by kestrel's GGUF writer: `GET /lora-adapters`, a request's own choice
//! (`lora` list, `"model": "smollm2:<adapter>"`), concurrent requests with different adapters
//! in one batch, `POST /lora-adapters` changing the default, and bad choices refused; each
//! reply is the library's (`GenerateOptions::with_adapter`) for the same choice.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use common::*;
use kestrel::gguf::models::{test_model, SMOLLM2_135M_Q4_1};
use kestrel::gguf::{GgufModel, GgufWriter};
use kestrel::{ChatMessage, GenerateOptions, LoadOptions, Model};
use kestrel_serve::{ServeOptions, Server};
use serde_json::{json, Value};

const QUESTION: &str = "Name three colours.";
const MAX: usize = 12;

/// A rank-8 adapter on a few of `model`'s matmuls, values from `seed`.
fn write_adapter(model: &Path, path: &Path, seed: u64, targets: &[&str]) {
    write_activated(model, path, seed, targets, &[]);
}

/// [`write_adapter`], activated by `invocation` (an ordinary adapter when empty).
fn write_activated(model: &Path, path: &Path, seed: u64, targets: &[&str], invocation: &[u32]) {
    let base = GgufModel::open(model).unwrap();
    let mut s = seed;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * 0.05
    };
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama");
    w.add_metadata("general.type", "adapter");
    w.add_metadata("adapter.type", "lora");
    w.add_metadata("adapter.lora.alpha", 16.0f32);
    if !invocation.is_empty() {
        w.add_metadata(
            "adapter.alora.invocation_tokens",
            kestrel::gguf::MetadataValue::u32_array(invocation.iter().copied()),
        );
    }
    let rank = 8u64;
    for name in targets {
        let dims = base.tensor_info(name).unwrap().dims().to_vec();
        let (k, m) = (dims[0], dims[1]);
        let a: Vec<f32> = (0..k * rank).map(|_| next()).collect();
        let b: Vec<f32> = (0..rank * m).map(|_| next()).collect();
        w.add_f32_tensor(&format!("{name}.lora_a"), &[k, rank], &a)
            .unwrap();
        w.add_f32_tensor(&format!("{name}.lora_b"), &[rank, m], &b)
            .unwrap();
    }
    w.write_file(path).unwrap();
}

fn chat_body(extra: Value) -> Value {
    let mut b = json!({
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": MAX,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn reply(addr: SocketAddr, extra: Value) -> String {
    let r = post(addr, "/v1/chat/completions", &chat_body(extra), None);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn load(path: &Path, adapters: &[(PathBuf, f32)]) -> Model {
    let mut opts = LoadOptions {
        threads: 2,
        ctx: 256,
        ..LoadOptions::default()
    };
    for (p, s) in adapters {
        opts = opts.with_lora(p, *s);
    }
    Model::load_file(path, opts).unwrap()
}

#[test]
fn adapters_per_request_and_at_run_time() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kestrel-serve-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("terse.gguf"), dir.join("loud.gguf"));
    write_adapter(
        &path,
        &a,
        3,
        &[
            "blk.0.attn_q.weight",
            "blk.3.ffn_down.weight",
            "blk.2.attn_output.weight",
        ],
    );
    write_adapter(
        &path,
        &b,
        4,
        &["blk.1.attn_v.weight", "blk.5.ffn_up.weight"],
    );
    let loaded = [(a.clone(), 1.0), (b.clone(), 0.0)];

    // The library's replies: the model loaded with both, each choice made per generation.
    let mut lib = load(&path, &loaded);
    let names: Vec<String> = lib.adapters().iter().map(|i| i.name.clone()).collect();
    assert_eq!(names, ["terse", "loud"]);
    let msgs = [ChatMessage::new("user", QUESTION)];
    let greedy = GenerateOptions::greedy().with_max_tokens(MAX);
    let mut lib_reply = |o: &GenerateOptions| lib.chat(&msgs, o).unwrap().text;
    let default = lib_reply(&greedy);
    let none = lib_reply(&greedy.clone().without_adapters());
    let loud = lib_reply(&greedy.clone().with_adapter("loud", 1.0));
    let both = lib_reply(
        &greedy
            .clone()
            .with_adapter("terse", 0.5)
            .with_adapter("1", 1.0),
    );
    assert_eq!(
        lib_reply(&greedy.clone().with_adapter("terse", 1.0)),
        default
    );
    // A model loaded with just `loud` gives what choosing it gives.
    assert_eq!(
        load(&path, &[(b.clone(), 1.0)])
            .chat(&msgs, &greedy)
            .unwrap()
            .text,
        loud
    );
    let distinct: std::collections::HashSet<_> = [&default, &none, &loud, &both].into();
    assert!(
        distinct.len() >= 3,
        "adapters barely change the replies: {distinct:?}"
    );
    let err = lib.chat(&msgs, &greedy.clone().with_adapter("quiet", 1.0));
    assert!(err
        .unwrap_err()
        .to_string()
        .contains("no LoRA adapter \"quiet\""));

    let server = Server::start(
        load(&path, &loaded),
        ServeOptions {
            port: 0,
            model_id: Some("smollm2".into()),
            parallel: 4,
            ..ServeOptions::default()
        },
    )
    .unwrap();
    let addr = server.addr();
    let list = get(addr, "/lora-adapters", None).json();
    assert_eq!(list[0]["id"], 0);
    assert_eq!(list[0]["scale"], 1.0);
    assert_eq!(list[1]["name"], "loud");
    assert_eq!(list[1]["scale"], 0.0);
    assert!(list[1]["path"].as_str().unwrap().ends_with("loud.gguf"));
    // Ordinary adapters list no invocation.
    assert!(list[1].get("alora_invocation_tokens").is_none());

    // Each choice alone, then all at once (one batch of sequences with different adapters).
    let cases = [
        (json!({}), default.clone()),
        (json!({"lora": []}), none.clone()),
        (json!({"model": "smollm2:loud"}), loud.clone()),
        (json!({"lora": [{"id": 1, "scale": 1.0}]}), loud.clone()),
        (
            json!({"lora": [{"id": 0, "scale": 0.5}, {"id": 1, "scale": 1.0}]}),
            both.clone(),
        ),
    ];
    for (extra, want) in &cases {
        assert_eq!(&reply(addr, extra.clone()), want, "{extra}");
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .iter()
            .chain(&cases)
            .map(|(extra, want)| s.spawn(move || (reply(addr, extra.clone()), want, extra)))
            .collect();
        for h in handles {
            let (got, want, extra) = h.join().unwrap();
            assert_eq!(&got, want, "concurrent {extra}");
        }
    });

    // Run-time scales: `loud` alone becomes the default.
    let r = post(
        addr,
        "/lora-adapters",
        &json!([{"id": 1, "scale": 1.0}]),
        None,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let list = get(addr, "/lora-adapters", None).json();
    assert_eq!(
        (list[0]["scale"].as_f64(), list[1]["scale"].as_f64()),
        (Some(0.0), Some(1.0))
    );
    assert_eq!(reply(addr, json!({})), loud);
    assert_eq!(
        reply(addr, json!({"lora": [{"id": 0, "scale": 1.0}]})),
        default
    );

    // Refusals: an unknown id or adapter, a malformed list.
    for (extra, status) in [
        (json!({"lora": [{"id": 7, "scale": 1.0}]}), 400),
        (json!({"lora": [{"id": 0, "scale": "x"}]}), 400),
        (json!({"lora": "terse"}), 400),
        (json!({"model": "smollm2:quiet"}), 404),
        (json!({"model": "other:loud"}), 404),
    ] {
        let r = post(
            addr,
            "/v1/chat/completions",
            &chat_body(extra.clone()),
            None,
        );
        assert_eq!(
            r.status,
            status,
            "{extra}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.error();
    }
    for body in [json!({"id": 0}), json!([{"id": 2, "scale": 1}])] {
        let r = post(addr, "/lora-adapters", &body, None);
        assert_eq!(r.status, 400, "{body}");
        r.error();
    }
    assert_eq!(reply(addr, json!({})), loud);
    assert_no_leaked_blocks(&settle(addr, None));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_activated_adapter_acts_only_where_a_prompt_invokes_it() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kestrel-serve-alora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain = load(&path, &[]);
    let greedy = GenerateOptions::greedy().with_max_tokens(MAX);
    let invoking = "Question: name three colours.\nAnswer:";
    let ids = plain.encode(invoking, &greedy).unwrap();
    let invocation = &ids[ids.len() - 2..];
    let a = dir.join("answer.gguf");
    write_activated(
        &path,
        &a,
        5,
        &[
            "blk.0.attn_q.weight",
            "blk.1.attn_v.weight",
            "blk.3.ffn_down.weight",
            "blk.4.ffn_up.weight",
        ],
        invocation,
    );
    let mut lib = load(&path, &[(a.clone(), 1.0)]);
    let invoked = lib.generate(invoking, &greedy).unwrap().text;
    // A prompt without the invocation runs as the base model.
    let other = "The three primary colours are";
    let base_other = lib
        .generate(other, &greedy.clone().without_adapters())
        .unwrap()
        .text;
    assert_eq!(lib.generate(other, &greedy).unwrap().text, base_other);
    assert_eq!(lib.adapters()[0].invocation_tokens, invocation);

    let server = Server::start(
        lib,
        ServeOptions {
            port: 0,
            model_id: Some("smollm2".into()),
            parallel: 2,
            ..ServeOptions::default()
        },
    )
    .unwrap();
    let addr = server.addr();
    let list = get(addr, "/lora-adapters", None).json();
    assert_eq!(list[0]["alora_invocation_tokens"], json!(invocation));
    assert!(!list[0]["alora_invocation_string"]
        .as_str()
        .unwrap()
        .is_empty());
    let complete = |prompt: &str| {
        let body = json!({"prompt": prompt, "max_tokens": MAX, "temperature": 0});
        let r = post(addr, "/v1/completions", &body, None);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.json()["choices"][0]["text"].as_str().unwrap().to_string()
    };
    std::thread::scope(|s| {
        let a = s.spawn(|| complete(invoking));
        let b = s.spawn(|| complete(other));
        assert_eq!(a.join().unwrap(), invoked);
        assert_eq!(b.join().unwrap(), base_other);
    });
    assert_no_leaked_blocks(&settle(addr, None));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_session_pool_keeps_a_conversation_per_adapter_choice() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kestrel-pool-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("terse.gguf");
    write_adapter(
        &path,
        &a,
        3,
        &["blk.0.attn_q.weight", "blk.3.ffn_down.weight"],
    );
    let mut m = Model::load_file(
        &path,
        LoadOptions {
            threads: 2,
            ctx: 256,
            session_pool: 2,
            ..LoadOptions::default()
        }
        .with_lora(&a, 1.0),
    )
    .unwrap();
    let text = "The history of the city of Lyon begins with the Roman colony of Lugdunum, founded in 43 BC.";
    let greedy = GenerateOptions::greedy().with_max_tokens(4);
    let first = m.generate(text, &greedy).unwrap();
    // The same prompt without the adapter: nothing of the adapted cache may be reused.
    let plain = m
        .generate(text, &greedy.clone().without_adapters())
        .unwrap();
    assert!(plain.metrics.cached_tokens == 0, "{:?}", plain.metrics);
    let base = load(&path, &[]).generate(text, &greedy).unwrap();
    assert_eq!(plain.text, base.text);
    // Back with the adapter: its conversation is still cached in the other session.
    let again = m
        .generate(&format!("{text}{}", first.text), &greedy)
        .unwrap();
    assert!(
        again.metrics.cached_tokens > 20,
        "{} of {} prompt tokens cached",
        again.metrics.cached_tokens,
        again.metrics.prompt_tokens
    );
    let _ = std::fs::remove_dir_all(&dir);
}
