//! A small W3C WebDriver client over chromedriver, for the chat page's browser test: start
//! headless Chromium with the network cut to everything but localhost, navigate, find elements,
//! type, click, run a script, take a screenshot. Plain HTTP and JSON over a `TcpStream`, so the
//! test needs no browser-automation package.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Chromium and chromedriver, when both are installed (`KESTREL_CHROMIUM`,
/// `KESTREL_CHROMEDRIVER`, else Debian's `/usr/bin/chromium` and `/usr/bin/chromedriver`).
pub fn find_browser() -> Option<(PathBuf, PathBuf)> {
    let pick = |var: &str, default: &str| {
        let p = PathBuf::from(std::env::var(var).unwrap_or_else(|_| default.into()));
        p.is_file().then_some(p)
    };
    Some((
        pick("KESTREL_CHROMIUM", "/usr/bin/chromium")?,
        pick("KESTREL_CHROMEDRIVER", "/usr/bin/chromedriver")?,
    ))
}

/// A chromedriver process and one browser session in it; both end on drop.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    _profile: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A reference to a page element.
#[derive(Clone, Debug)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver and a headless Chromium whose host resolver knows only 127.0.0.1
    /// (every other name fails to resolve: the page must work with no network but the server).
    pub fn start(chromium: &Path, chromedriver: &Path) -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let profile =
            std::env::temp_dir().join(format!("kestrel-webui-{}-{port}", std::process::id()));
        let mut b = Browser {
            driver,
            addr,
            session: String::new(),
            _profile: TempDir(profile.clone()),
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "chromedriver did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,860",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        ];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium.to_string_lossy(), "args": args},
        }}});
        let v = b.raw("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        b
    }

    fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, bytes) = request(self.addr, method, path, body);
        let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "webdriver {method} {path}: not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        assert!(status == 200, "webdriver {method} {path}: {status} {v}");
        v["value"].clone()
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.raw(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    /// The first element matching the CSS `selector`.
    pub fn find(&self, selector: &str) -> Element {
        let v = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": selector})),
        );
        Element(v[ELEMENT].as_str().expect("element id").to_string())
    }

    /// Clears an input and types `text` into it.
    pub fn type_into(&self, selector: &str, text: &str) {
        let e = self.find(selector);
        self.cmd("POST", &format!("/element/{}/clear", e.0), Some(json!({})));
        self.cmd(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        );
    }

    /// Clicks the first element matching `selector`.
    pub fn click(&self, selector: &str) {
        let e = self.find(selector);
        self.cmd("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub fn js(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Polls `script` until it returns something other than `null`/`false`, or panics with
    /// `what` after `limit`.
    pub fn wait_for(&self, what: &str, limit: Duration, script: &str) -> Value {
        let start = Instant::now();
        loop {
            let v = self.js(script, json!([]));
            if !(v.is_null() || v == json!(false)) {
                return v;
            }
            if start.elapsed() > limit {
                let page = self.js("return document.body.innerText;", json!([]));
                panic!(
                    "timed out waiting for {what}; the page says:\n{}",
                    page.as_str().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Writes a PNG screenshot of the window to `path`.
    pub fn screenshot(&self, path: &Path) {
        let v = self.cmd("GET", "/screenshot", None);
        let png = crate::common::base64_decode(v.as_str().expect("base64 screenshot"));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot folder");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = request(
                self.addr,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// One HTTP/1.1 exchange with chromedriver, reading the body by its `Content-Length`
/// (chromedriver keeps the connection open after `Connection: close`).
fn request(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Vec<u8>) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut s = TcpStream::connect(addr).expect("connect to chromedriver");
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body.as_bytes()))
        .expect("write to chromedriver");
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut len = 0;
    loop {
        line.clear();
        r.read_line(&mut line).expect("header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().expect("content length");
            }
        }
    }
    let mut out = vec![0; len];
    r.read_exact(&mut out).expect("body");
    (status, out)
}
