//! A real browser for tests: Debian's chromium, driven by chromedriver over
//! the W3C WebDriver protocol (plain HTTP + JSON, no client crate needed).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Workload, free_port, parse_response, wait};

/// A headless chromium session, closed (and chromedriver stopped) on drop.
pub struct Browser {
    port: u16,
    session: String,
    _driver: Workload,
}

fn request(port: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
    let mut s =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connecting to chromedriver");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // chromedriver keeps the connection open: read the head, then exactly
    // Content-Length bytes.
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let body_len = loop {
        let n = s.read(&mut buf).expect("reading chromedriver's answer");
        assert!(
            n > 0,
            "chromedriver closed the connection: {}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .expect("chromedriver sends Content-Length");
            break end + 4 + len;
        }
    };
    while raw.len() < body_len {
        let n = s.read(&mut buf).expect("reading chromedriver's answer");
        assert!(n > 0, "chromedriver closed the connection early");
        raw.extend_from_slice(&buf[..n]);
    }
    let resp = parse_response(&raw);
    let v: Value = serde_json::from_slice(&resp.body).unwrap_or_else(|e| {
        panic!(
            "chromedriver answered {} with no JSON ({e}): {}",
            resp.status,
            resp.text()
        )
    });
    assert_eq!(resp.status, 200, "{method} {path}: {v}");
    v["value"].clone()
}

impl Browser {
    /// Starts chromedriver and a headless chromium (installed by
    /// `./scripts/setup`). Panics with a clear message if either is missing.
    pub fn start() -> Browser {
        let port = free_port();
        let driver = Workload::spawn(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdin(Stdio::null()),
        );
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "chromedriver did not start (run ./scripts/setup: it installs chromium and chromium-driver)"
            );
            wait(100);
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1300,1000"]
            },
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let v = request(port, "POST", "/session", Some(&caps));
        let session = v["sessionId"]
            .as_str()
            .expect("a session id from chromedriver")
            .to_owned();
        Browser {
            port,
            session,
            _driver: driver,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        request(
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
    }

    /// Sizes the window to `width` x `height` CSS pixels (its outer size,
    /// as a desktop window's), for tests about what shows without
    /// scrolling.
    pub fn set_window_size(&self, width: u32, height: u32) {
        self.call(
            "POST",
            "/window/rect",
            Some(&json!({ "width": width, "height": height })),
        );
    }

    /// Loads `url` and waits for it.
    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(&json!({ "url": url })));
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(&json!({ "script": script, "args": [] })),
        )
    }

    /// Clicks the element `css` selects, as a user would (WebDriver click).
    pub fn click(&self, css: &str) {
        let el = self.call(
            "POST",
            "/element",
            Some(&json!({"using": "css selector", "value": css})),
        );
        let id = el
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {el}"))
            .to_owned();
        self.call("POST", &format!("/element/{id}/click"), Some(&json!({})));
    }

    /// Writes a PNG screenshot of the window to `path`, for a person to look at.
    pub fn screenshot(&self, path: &std::path::Path) {
        let v = self.call("GET", "/screenshot", None);
        let png = base64_decode(v.as_str().expect("a base64 screenshot"));
        std::fs::write(path, png).expect("writing the screenshot");
    }

    /// The browser console's messages at level SEVERE (JavaScript errors,
    /// failed loads).
    pub fn console_errors(&self) -> Vec<String> {
        let logs = self.call("POST", "/se/log", Some(&json!({"type": "browser"})));
        logs.as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port)).map(|mut s| {
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut sink = [0u8; 4096];
            let _ = s.read(&mut sink);
        });
    }
}

/// Standard base64 (WebDriver screenshots), without padding checks.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let (mut out, mut acc, mut bits) = (Vec::with_capacity(s.len() * 3 / 4), 0u32, 0);
    for v in s.bytes().filter_map(val) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
