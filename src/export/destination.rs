//! Where pushes go: a base URL, its credentials and extra headers, and one
//! HTTP/1.1 POST with a deadline.
//!
//! A push carries credentials and every process's stacks, so before a byte
//! is written the connection's far end is checked: a socket of this host
//! must be owned by root or the configured `*_listener_user`
//! ([`crate::shared::peer`] says why and how); another host's is not
//! checked. Credential headers are marked sensitive (hyper keeps them out
//! of its debug output and HPACK tables) and print as `Secret(..)`.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper::header::{HeaderName, HeaderValue};

use crate::shared::Secret;
use crate::shared::peer::{Trusted, Untrusted};

/// Which store a destination is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Grafana Pyroscope's Connect push API.
    Pyroscope,
    /// OpenTelemetry's OTLP/HTTP profiles signal.
    Otlp,
}

impl Protocol {
    /// The name in metrics, logs and `emberd check`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Pyroscope => "pyroscope",
            Protocol::Otlp => "otlp",
        }
    }

    /// The path the protocol posts to, after the base URL's path.
    pub fn path(self) -> &'static str {
        match self {
            Protocol::Pyroscope => "/push.v1.PusherService/Push",
            Protocol::Otlp => "/v1development/profiles",
        }
    }
}

/// A push failed: why, and whether to try the same payload again.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// No connection (refused, unreachable, DNS).
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The URL posted to.
        url: String,
        /// The error.
        reason: String,
    },
    /// No answer within the deadline.
    #[error("{url} did not answer within {seconds} s")]
    Timeout {
        /// The URL posted to.
        url: String,
        /// The deadline.
        seconds: u64,
    },
    /// The connection broke mid-exchange.
    #[error("{url}: {reason}")]
    Http {
        /// The URL posted to.
        url: String,
        /// The error.
        reason: String,
    },
    /// The far end is a socket of this host owned by a user not trusted
    /// with the credentials (or whose owner could not be told).
    #[error("{url}: refused to push: {reason}")]
    Untrusted {
        /// The URL posted to.
        url: String,
        /// Who listens, and who may.
        reason: Untrusted,
    },
    /// The server answered with an error status.
    #[error("{url} answered {status}: {body}")]
    Status {
        /// The URL posted to.
        url: String,
        /// HTTP status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
}

impl PushError {
    /// Whether sending the same payload later may succeed: not when the
    /// server refused it as malformed or unauthorized (4xx but 408 and
    /// 429), which resending cannot change.
    pub fn retryable(&self) -> bool {
        match self {
            PushError::Status { status, .. } => {
                !(400..500).contains(status) || matches!(status, 408 | 429)
            }
            _ => true,
        }
    }
}

/// Bytes of an answer's body kept (for error messages and `emberd check`).
pub const ANSWER_MAX: usize = 64 << 10;

/// The connection's task, stopped when the exchange ends or is abandoned
/// at its deadline, not left to notice that nobody waits for its answer
/// (hyper closes it then too: `tests/push`'s silent receiver sees no
/// connection left open with or without this).
struct ConnTask(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for ConnTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A header whose value may be a credential: it prints as `Secret(..)`.
#[derive(Clone)]
struct SentHeader(HeaderName, HeaderValue);

impl std::fmt::Debug for SentHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.1.is_sensitive() {
            write!(f, "{}: Secret(..)", self.0)
        } else {
            write!(f, "{}: {:?}", self.0, self.1)
        }
    }
}

/// A configured destination.
#[derive(Debug, Clone)]
pub struct Destination {
    /// Pyroscope or OTLP.
    pub protocol: Protocol,
    /// `host:port` to connect to.
    authority: String,
    /// The full URL posted to (for messages).
    pub url: String,
    /// The request path.
    path: String,
    /// `Authorization` and extra headers.
    headers: Vec<SentHeader>,
    /// Who may own a local socket that receives the pushes.
    listener: Trusted,
}

/// What a destination answered to a push.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The start of the body, lossily as text.
    pub body: String,
}

/// Credentials and headers of a destination, as configured, and who may
/// receive them on this host.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Bearer token (`Authorization: Bearer ...`).
    pub bearer: Option<Secret>,
    /// Basic auth user and password.
    pub basic: Option<(String, Secret)>,
    /// Extra headers, `Name: value` (`X-Scope-OrgID: tenant`). Their values
    /// may be credentials too: each is sent marked sensitive and printed
    /// as `Secret(..)`.
    pub headers: Vec<Secret>,
    /// Users besides root whose local socket may receive the pushes
    /// (`*_listener_user`).
    pub listener: Trusted,
}

impl Destination {
    /// A destination from its base URL (`http://host:port[/prefix]`), as
    /// OpenTelemetry exporters and Pyroscope clients take it.
    pub fn new(protocol: Protocol, base: &str, creds: &Credentials) -> Result<Self, String> {
        let key = match protocol {
            Protocol::Pyroscope => "pyroscope_url",
            Protocol::Otlp => "otlp_endpoint",
        };
        let rest = if let Some(r) = base.strip_prefix("http://") {
            r
        } else if base.starts_with("https://") {
            return Err(format!(
                "{key} = {base:?}: emberd pushes over plain HTTP only (no TLS is built in); \
                 push to a local Grafana Alloy or OpenTelemetry Collector that forwards over TLS"
            ));
        } else {
            return Err(format!(
                "{key} = {base:?} is not a base URL like http://pyroscope:4040"
            ));
        };
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') || authority.contains(['?', '#']) {
            return Err(format!(
                "{key} = {base:?}: give host[:port] after http:// (credentials go in the *_file settings)"
            ));
        }
        if prefix.contains(['?', '#', ' ']) {
            return Err(format!(
                "{key} = {base:?}: a base URL has no query or fragment"
            ));
        }
        let authority = if authority.rsplit_once(':').is_some_and(|(_, p)| {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !authority.ends_with(']')
        }) {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let path = format!("{prefix}{}", protocol.path());
        let mut headers = Vec::new();
        let sensitive = |mut v: HeaderValue| {
            v.set_sensitive(true);
            v
        };
        if let Some(token) = &creds.bearer {
            headers.push(SentHeader(
                hyper::header::AUTHORIZATION,
                sensitive(
                    HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                        .map_err(|_| format!("{key}: the bearer token is not a header value"))?,
                ),
            ));
        } else if let Some((user, password)) = &creds.basic {
            use base64::Engine;
            let enc = base64::engine::general_purpose::STANDARD
                .encode(format!("{user}:{}", password.expose()));
            headers.push(SentHeader(
                hyper::header::AUTHORIZATION,
                sensitive(
                    HeaderValue::from_str(&format!("Basic {enc}"))
                        .expect("base64 is a header value"),
                ),
            ));
        }
        for h in &creds.headers {
            // The name may be shown; the value is not (it may be a key).
            let (name, value) = h.expose().split_once(':').ok_or_else(|| {
                format!("{key} header: write it as \"Name: value\" (value not shown)")
            })?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| format!("{key} header: {:?} is not a header name", name.trim()))?;
            let value = HeaderValue::from_str(value.trim())
                .map_err(|_| format!("{key} header {name}: the value is not a header value"))?;
            headers.push(SentHeader(name, sensitive(value)));
        }
        Ok(Destination {
            protocol,
            url: format!("http://{authority}{path}"),
            authority,
            path,
            headers,
            listener: creds.listener.clone(),
        })
    }

    /// POSTs `body` (`content_type`, `content_encoding` if any) and reads the
    /// answer, all within `deadline`. A status other than 2xx is an error.
    pub async fn post(
        &self,
        body: Bytes,
        content_type: &'static str,
        content_encoding: Option<&'static str>,
        deadline: Duration,
    ) -> Result<Answer, PushError> {
        let url = self.url.clone();
        let exchange = async {
            let stream = tokio::net::TcpStream::connect(&self.authority)
                .await
                .map_err(|e| PushError::Connect {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
            // Who reads what we send, before anything is sent.
            let (local, peer) = (
                stream.local_addr().map_err(|e| PushError::Connect {
                    url: url.clone(),
                    reason: e.to_string(),
                })?,
                stream.peer_addr().map_err(|e| PushError::Connect {
                    url: url.clone(),
                    reason: e.to_string(),
                })?,
            );
            let trusted = self.listener.clone();
            tokio::task::spawn_blocking(move || crate::shared::peer::check(local, peer, &trusted))
                .await
                .map_err(|e| PushError::Http {
                    url: url.clone(),
                    reason: e.to_string(),
                })?
                .map_err(|reason| PushError::Untrusted {
                    url: url.clone(),
                    reason,
                })?;
            let _ = stream.set_nodelay(true);
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .map_err(|e| PushError::Http {
                        url: url.clone(),
                        reason: e.to_string(),
                    })?;
            let _conn = ConnTask(tokio::spawn(conn));
            let mut req = Request::post(&self.path)
                .header(hyper::header::HOST, &self.authority)
                .header(hyper::header::CONTENT_TYPE, content_type)
                .header(
                    hyper::header::USER_AGENT,
                    concat!("emberd/", env!("CARGO_PKG_VERSION")),
                );
            if let Some(enc) = content_encoding {
                req = req.header(hyper::header::CONTENT_ENCODING, enc);
            }
            if self.protocol == Protocol::Pyroscope {
                req = req.header("connect-protocol-version", "1");
            }
            for SentHeader(k, v) in &self.headers {
                req = req.header(k, v);
            }
            let req = req.body(Full::new(body)).map_err(|e| PushError::Http {
                url: url.clone(),
                reason: e.to_string(),
            })?;
            let resp = send.send_request(req).await.map_err(|e| PushError::Http {
                url: url.clone(),
                reason: e.to_string(),
            })?;
            let status = resp.status().as_u16();
            // A body past the limit is cut, not an error: it is only read
            // for its message.
            let body = match Limited::new(resp.into_body(), ANSWER_MAX).collect().await {
                Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
                Err(_) => String::new(),
            };
            Ok(Answer { status, body })
        };
        let answer = tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| PushError::Timeout {
                url: self.url.clone(),
                seconds: deadline.as_secs(),
            })??;
        if !(200..300).contains(&answer.status) {
            let mut body = answer.body.trim().to_owned();
            if body.len() > 512 {
                body.truncate(body.floor_char_boundary(512));
            }
            return Err(PushError::Status {
                url: self.url.clone(),
                status: answer.status,
                body,
            });
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        let c = Credentials::default();
        let d = Destination::new(Protocol::Pyroscope, "http://pyro:4040", &c).unwrap();
        assert_eq!(d.url, "http://pyro:4040/push.v1.PusherService/Push");
        let d = Destination::new(Protocol::Otlp, "http://col:4318/prefix/", &c).unwrap();
        assert_eq!(d.url, "http://col:4318/prefix/v1development/profiles");
        let d = Destination::new(Protocol::Otlp, "http://col", &c).unwrap();
        assert_eq!(d.url, "http://col:80/v1development/profiles");
        let e = Destination::new(Protocol::Otlp, "https://col:4318", &c).unwrap_err();
        assert!(e.contains("plain HTTP"), "{e}");
        assert!(Destination::new(Protocol::Otlp, "col:4318", &c).is_err());
        assert!(Destination::new(Protocol::Otlp, "http://u:p@col:4318", &c).is_err());
    }

    #[test]
    fn credentials_and_headers() {
        let c = Credentials {
            basic: Some(("123".into(), Secret::new("secret"))),
            headers: vec![Secret::new("X-Scope-OrgID: tenant-a")],
            ..Default::default()
        };
        let d = Destination::new(Protocol::Pyroscope, "http://p:4040", &c).unwrap();
        assert_eq!(d.headers[0].1, "Basic MTIzOnNlY3JldA==");
        assert_eq!(d.headers[1].0, "x-scope-orgid");
        assert_eq!(d.headers[1].1, "tenant-a");
        assert!(d.headers.iter().all(|h| h.1.is_sensitive()));
        let bad = Credentials {
            headers: vec![Secret::new("no colon")],
            ..Default::default()
        };
        assert!(Destination::new(Protocol::Pyroscope, "http://p:4040", &bad).is_err());
    }

    #[test]
    fn a_destination_prints_no_credential() {
        let c = Credentials {
            bearer: Some(Secret::new("tok-123456789")),
            headers: vec![Secret::new("X-Api-Key: key-987654321")],
            ..Default::default()
        };
        let d = Destination::new(Protocol::Otlp, "http://c:4318", &c).unwrap();
        let shown = format!("{d:?} {c:?}");
        assert!(
            !shown.contains("tok-123456789") && !shown.contains("key-987654321"),
            "{shown}"
        );
        assert!(shown.contains("x-api-key: Secret(..)"), "{shown}");
    }

    #[test]
    fn which_failures_retry() {
        let st = |status| PushError::Status {
            url: String::new(),
            status,
            body: String::new(),
        };
        assert!(st(500).retryable());
        assert!(st(429).retryable());
        assert!(!st(400).retryable());
        assert!(!st(401).retryable());
    }
}
