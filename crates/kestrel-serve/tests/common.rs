//! Shared by the server tests: start a server on a real model, and a small HTTP/1.1 client
//! over `std::net::TcpStream` (requests with `Connection: close`, chunked bodies decoded) so the
//! tests need no HTTP client crate.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use kestrel::gguf::models::{test_model, SMOLLM2_135M_Q4_1};
use kestrel::{LoadOptions, Model};
use kestrel_serve::{ServeOptions, Server};
use serde_json::Value;

/// SmolLM2 loaded for tests (2 threads), or `None` when the model is not fetched.
pub fn smollm2(ctx: usize) -> Option<Model> {
    let path = test_model(SMOLLM2_135M_Q4_1)?;
    let opts = LoadOptions {
        threads: 2,
        ctx,
        ..LoadOptions::default()
    };
    Some(Model::load_file(path, opts).expect("load SmolLM2"))
}

/// A server on SmolLM2 at an ephemeral port.
pub fn server(ctx: usize, opts: ServeOptions) -> Option<Server> {
    let model = smollm2(ctx)?;
    let opts = ServeOptions {
        port: 0,
        model_id: Some("smollm2".into()),
        ..opts
    };
    Some(Server::start(model, opts).expect("start server"))
}

/// A response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of an SSE body.
    pub fn sse(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.body)
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            .map(str::to_string)
            .collect()
    }

    /// Asserts OpenAI's error shape and returns the error object.
    pub fn error(&self) -> Value {
        let j = self.json();
        let e = j
            .get("error")
            .unwrap_or_else(|| panic!("no error object: {j}"))
            .clone();
        assert!(
            e["message"].is_string() && !e["message"].as_str().unwrap().is_empty(),
            "{j}"
        );
        assert!(e["type"].is_string(), "{j}");
        e
    }
}

/// Send a raw request and read the whole response.
pub fn raw(addr: SocketAddr, head_and_body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    // a server may answer (413) before reading a huge body: ignore a failed write
    let _ = s.write_all(head_and_body);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse(&buf)
}

/// `method path` with a JSON body (or none), optional bearer key.
pub fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    key: Option<&str>,
) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(k) = key {
        req.push_str(&format!("Authorization: Bearer {k}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(addr, &bytes)
}

pub fn post(addr: SocketAddr, path: &str, body: &Value, key: Option<&str>) -> Resp {
    call(addr, "POST", path, Some(body.to_string().as_bytes()), key)
}

pub fn get(addr: SocketAddr, path: &str, key: Option<&str>) -> Resp {
    call(addr, "GET", path, None, key)
}

fn parse(buf: &[u8]) -> Resp {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = buf[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..nl]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = nl + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

/// A metric's value from `/metrics` text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

/// Wait until the server has no sequence in flight; returns the metrics text then.
pub fn settle(addr: SocketAddr, key: Option<&str>) -> String {
    for _ in 0..600 {
        let m = String::from_utf8_lossy(&get(addr, "/metrics", key).body).into_owned();
        if metric(&m, "kestrel_inflight_sequences") == 0.0
            && metric(&m, "kestrel_running_sequences") == 0.0
        {
            return m;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("sequences still in flight after 60 s");
}

/// Every KV block in use is one the prefix cache keeps (no sequence holds any).
pub fn assert_no_leaked_blocks(metrics: &str) {
    let used = metric(metrics, "kestrel_kv_blocks_used");
    let cached = metric(metrics, "kestrel_kv_blocks_cached");
    assert_eq!(
        used, cached,
        "KV blocks held by finished sequences:\n{metrics}"
    );
}

/// Standard base64 (with padding) to bytes.
pub fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|&c| c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(val(c)) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}
