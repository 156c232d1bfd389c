//! Where pushes go: a base URL, its credentials and extra headers, and one
//! HTTP/1.1 POST with a deadline.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper::header::{HeaderName, HeaderValue};

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
    headers: Vec<(HeaderName, HeaderValue)>,
}

/// What a destination answered to a push.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The start of the body, lossily as text.
    pub body: String,
}

/// Credentials and headers of a destination, as configured.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Bearer token (`Authorization: Bearer ...`).
    pub bearer: Option<String>,
    /// Basic auth user and password.
    pub basic: Option<(String, String)>,
    /// Extra headers, `Name: value` (`X-Scope-OrgID: tenant`).
    pub headers: Vec<String>,
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
        if let Some(token) = &creds.bearer {
            headers.push((
                hyper::header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| format!("{key}: the bearer token is not a header value"))?,
            ));
        } else if let Some((user, password)) = &creds.basic {
            use base64::Engine;
            let enc =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            headers.push((
                hyper::header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Basic {enc}")).expect("base64 is a header value"),
            ));
        }
        for h in &creds.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| format!("{key} header {h:?}: write it as \"Name: value\""))?;
            let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                format!("{key} header {h:?}: {:?} is not a header name", name.trim())
            })?;
            let value = HeaderValue::from_str(value.trim())
                .map_err(|_| format!("{key} header {h:?}: the value is not a header value"))?;
            headers.push((name, value));
        }
        Ok(Destination {
            protocol,
            url: format!("http://{authority}{path}"),
            authority,
            path,
            headers,
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
            for (k, v) in &self.headers {
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
            basic: Some(("123".into(), "secret".into())),
            headers: vec!["X-Scope-OrgID: tenant-a".into()],
            ..Default::default()
        };
        let d = Destination::new(Protocol::Pyroscope, "http://p:4040", &c).unwrap();
        assert_eq!(d.headers[0].1, "Basic MTIzOnNlY3JldA==");
        assert_eq!(d.headers[1].0, "x-scope-orgid");
        assert_eq!(d.headers[1].1, "tenant-a");
        let bad = Credentials {
            headers: vec!["no colon".into()],
            ..Default::default()
        };
        assert!(Destination::new(Protocol::Pyroscope, "http://p:4040", &bad).is_err());
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
