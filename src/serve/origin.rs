//! Who may make the daemon work: the `Host` a request names, and the site a
//! browser says it comes from.
//!
//! A web page the administrator opens can send requests to 127.0.0.1: a
//! `text/plain` POST or a GET needs no preflight, so without these checks
//! any page could make the daemon parse and render. Browsers name the page
//! that sent a request in `Origin` (every POST, and cross-origin fetches)
//! and `Sec-Fetch-Site`; curl, Prometheus and pprof clients send neither
//! and pass.

use axum::http::{HeaderMap, Method, Version, header};

/// Why a request is refused before any work, with the status to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An HTTP/1.1 request without `Host` (RFC 9112 section 3.2 asks for
    /// 400). HTTP/1.0 requests may omit it: browsers always send it, so a
    /// page cannot use its absence.
    #[error("an HTTP/1.1 request must name the server in its Host header")]
    MissingHost,
    /// A `Host` that is not visible ASCII.
    #[error("the Host header is not ASCII")]
    BadHost,
    /// `Origin` names another origin than the one the request was sent to.
    #[error(
        "cross-origin request refused: Origin {origin} is not this server ({own}); emberd answers its own page, curl and scrapers"
    )]
    CrossOrigin {
        /// The `Origin` header as sent.
        origin: String,
        /// This server's origin, from `Host`.
        own: String,
    },
    /// `Sec-Fetch-Site` says another site (or another origin of this site)
    /// sent it.
    #[error(
        "cross-site request refused: Sec-Fetch-Site is {0}; emberd answers its own page, curl and scrapers"
    )]
    CrossSite(String),
}

impl Refusal {
    /// The status code: 400 for a malformed request, 403 for a refused one.
    pub fn status(&self) -> axum::http::StatusCode {
        match self {
            Refusal::MissingHost | Refusal::BadHost => axum::http::StatusCode::BAD_REQUEST,
            _ => axum::http::StatusCode::FORBIDDEN,
        }
    }
}

/// The request's `Host`, if it has one: missing is an error only for
/// HTTP/1.1, a value that is not ASCII always.
pub fn host(version: Version, headers: &HeaderMap) -> Result<Option<&str>, Refusal> {
    match headers.get(header::HOST) {
        None if version == Version::HTTP_10 || version == Version::HTTP_09 => Ok(None),
        None => Err(Refusal::MissingHost),
        Some(v) => v.to_str().map(Some).map_err(|_| Refusal::BadHost),
    }
}

/// Routes that do no work and hold nothing a page could not have anyway:
/// the page and its assets (a link from another site to the page must
/// work) and the health checks.
fn static_route(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD)
        && matches!(path, "/" | "/app.js" | "/app.css" | "/healthz" | "/readyz")
}

/// Refuses a browser request that another page sent: an `Origin` other than
/// `http://HOST` (for the request's own `Host`), or a `Sec-Fetch-Site` of
/// `cross-site` or `same-site` (another port of 127.0.0.1 is the same
/// site). Requests without either header (curl, scrapers, a typed URL)
/// pass, and so do the static routes.
pub fn check_origin(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    host: Option<&str>,
) -> Result<(), Refusal> {
    if static_route(method, path) {
        return Ok(());
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("(not ASCII)");
        if !matches!(site, "same-origin" | "none") {
            return Err(Refusal::CrossSite(site.to_owned()));
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("(not ASCII)");
    let own = host.map(authority);
    let same = origin
        .strip_prefix("http://")
        .filter(|a| !a.contains('/'))
        .map(authority);
    match (same, own) {
        (Some(a), Some(b)) if a == b => Ok(()),
        (_, own) => Err(Refusal::CrossOrigin {
            origin: origin.to_owned(),
            own: own.map_or_else(|| "no Host given".to_owned(), |o| format!("http://{o}")),
        }),
    }
}

/// `host[:port]` lower-cased with the port made explicit (80 when absent:
/// `Origin` leaves out the scheme's default port, `Host` may).
fn authority(a: &str) -> String {
    let a = a.trim().to_ascii_lowercase();
    let has_port = match a.rfind(']') {
        // [v6] or [v6]:port
        Some(close) => a[close..].contains(':'),
        None => a.contains(':'),
    };
    if has_port { a } else { format!("{a}:80") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    fn check(path: &str, pairs: &[(&'static str, &str)], host: &str) -> Result<(), Refusal> {
        check_origin(&Method::GET, path, &headers(pairs), Some(host))
    }

    #[test]
    fn own_origin_and_no_origin_pass() {
        let host = "127.0.0.1:7099";
        assert_eq!(check("/folded", &[], host), Ok(()));
        for o in ["http://127.0.0.1:7099", "HTTP://127.0.0.1:7099"] {
            let r = check("/folded", &[("origin", o)], host);
            assert_eq!(r.is_ok(), o.starts_with("http:"), "{o}: {r:?}");
        }
        assert_eq!(
            check("/folded", &[("origin", "http://localhost")], "LocalHost:80"),
            Ok(())
        );
        assert_eq!(
            check("/folded", &[("origin", "http://[::1]:7099")], "[::1]:7099"),
            Ok(())
        );
        for site in ["same-origin", "none"] {
            assert_eq!(check("/folded", &[("sec-fetch-site", site)], host), Ok(()));
        }
    }

    #[test]
    fn other_origins_and_sites_are_refused() {
        let host = "127.0.0.1:7099";
        for o in [
            "http://evil.example",
            "http://127.0.0.1:8080",
            "http://127.0.0.1",
            "https://127.0.0.1:7099",
            "null",
            "http://127.0.0.1:7099/x",
        ] {
            let r = check("/flamegraph.svg", &[("origin", o)], host);
            assert!(matches!(r, Err(Refusal::CrossOrigin { .. })), "{o}: {r:?}");
        }
        for site in ["cross-site", "same-site"] {
            let r = check("/folded", &[("sec-fetch-site", site)], host);
            assert_eq!(r, Err(Refusal::CrossSite(site.into())));
            assert_eq!(r.unwrap_err().status(), 403);
        }
        // Without Host (HTTP/1.0), no Origin can match.
        let r = check_origin(
            &Method::GET,
            "/folded",
            &headers(&[("origin", "http://127.0.0.1:7099")]),
            None,
        );
        assert!(r.is_err());
        // The page itself may be linked to from anywhere; a POST to it may not.
        let evil = [
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ];
        assert_eq!(check("/", &evil, host), Ok(()));
        assert!(check_origin(&Method::POST, "/", &headers(&evil), Some(host)).is_err());
    }

    #[test]
    fn host_is_required_for_http_1_1() {
        let none = HeaderMap::new();
        assert_eq!(host(Version::HTTP_11, &none), Err(Refusal::MissingHost));
        assert_eq!(host(Version::HTTP_10, &none), Ok(None));
        let mut bad = HeaderMap::new();
        bad.insert(
            header::HOST,
            axum::http::HeaderValue::from_bytes(b"h\xe9").unwrap(),
        );
        assert_eq!(host(Version::HTTP_10, &bad), Err(Refusal::BadHost));
        assert_eq!(host(Version::HTTP_11, &bad).unwrap_err().status(), 400);
    }
}
