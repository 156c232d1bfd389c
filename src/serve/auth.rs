//! Who may read, for a browser: one-time login codes and session cookies.
//!
//! With `auth_token_file` every route but `/healthz` and `/login` needs
//! `Authorization: Bearer TOKEN`. curl and scrapers send it; a browser
//! cannot (a typed URL carries no header, and the page's script never sees
//! the token). So:
//!
//! 1. a holder of the token asks the daemon for a one-time code:
//!    `POST /login` with the bearer header (`emberd login` does it and
//!    prints the URL);
//! 2. the browser opens `GET /login?code=CODE`, which spends the code, sets
//!    an `HttpOnly; SameSite=Strict; Path=/` session cookie and redirects
//!    to `/`;
//! 3. the guard takes a live session cookie as it takes the header.
//!
//! Why the daemon mints the codes: whoever can read the token file (root
//! and the file's group, see `scripts/install-token`) can already read
//! every profile, so showing the token to the daemon is the whole check. A
//! group member needs no root, no key derivation and no clock shared with
//! the daemon, and the daemon needs no secret besides the token.
//!
//! Bounds: at most [`MAX_CODES`] codes wait at once, each for [`CODE_TTL`],
//! and a code works once; at most [`MAX_SESSIONS`] sessions live at once,
//! each for [`SESSION_TTL`] (a new one past the count ends the oldest). A
//! few KiB in all, whoever asks. Codes and sessions are 128 random bits
//! (getrandom(2)), compared in constant time.
//!
//! Cookies are not confined to a port (RFC 6265, section 8.5): the browser
//! also sends the session cookie to other servers on the same host name.
//! So a session only reads profiles: it cannot mint codes (that takes the
//! token itself), and it ends after [`SESSION_TTL`].

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Access, AppState, constant_time_eq};

/// How long a login code can be used after it was minted.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// Codes waiting to be used at once; more get 429 until some expire.
pub const MAX_CODES: usize = 16;
/// How long a browser session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions alive at once; a new one past this ends the oldest.
pub const MAX_SESSIONS: usize = 64;
/// The session cookie's name.
pub const COOKIE: &str = "emberd_session";

/// Why a login was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// [`MAX_CODES`] codes are waiting.
    #[error(
        "{MAX_CODES} login codes are already waiting to be used; retry when they expire (each lasts {} s)",
        CODE_TTL.as_secs()
    )]
    TooManyCodes,
    /// The code was never minted, was used, or expired.
    #[error(
        "this login code is unknown, used or expired (a code works once, for {} s): run `emberd login` again",
        CODE_TTL.as_secs()
    )]
    BadCode,
    /// getrandom(2) failed.
    #[error("no random bytes for a login: {0}")]
    Random(std::io::Error),
}

/// A code or a session: a random value and when it stops working.
struct Secret {
    value: String,
    expires: Instant,
}

#[derive(Default)]
struct Held {
    codes: Vec<Secret>,
    /// In the order they were made: the first is the oldest.
    sessions: Vec<Secret>,
}

/// Login codes and sessions of one daemon (see the module's comment).
#[derive(Default)]
pub struct Logins {
    held: Mutex<Held>,
}

impl std::fmt::Debug for Logins {
    // Counts only: the values are credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = self.lock();
        f.debug_struct("Logins")
            .field("codes", &h.codes.len())
            .field("sessions", &h.sessions.len())
            .finish()
    }
}

/// Index of the entry whose value is `given`, comparing with every entry
/// in constant time (no early exit on a match).
fn position(list: &[Secret], given: &str) -> Option<usize> {
    let mut found = None;
    for (i, s) in list.iter().enumerate() {
        if constant_time_eq(s.value.as_bytes(), given.as_bytes()) {
            found = Some(i);
        }
    }
    found
}

/// 128 random bits as 32 hex digits.
fn random_hex() -> Result<String, LoginError> {
    let mut buf = [0u8; 16];
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        return Err(LoginError::Random(std::io::Error::last_os_error()));
    }
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

impl Logins {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new one-time code, valid for [`CODE_TTL`] from `now`.
    pub fn mint_code(&self, now: Instant) -> Result<String, LoginError> {
        let mut h = self.lock();
        h.codes.retain(|c| c.expires > now);
        if h.codes.len() >= MAX_CODES {
            return Err(LoginError::TooManyCodes);
        }
        let value = random_hex()?;
        h.codes.push(Secret {
            value: value.clone(),
            expires: now + CODE_TTL,
        });
        Ok(value)
    }

    /// Spends `code` and returns a new session, valid for [`SESSION_TTL`].
    pub fn redeem(&self, code: &str, now: Instant) -> Result<String, LoginError> {
        let mut h = self.lock();
        h.codes.retain(|c| c.expires > now);
        let i = position(&h.codes, code).ok_or(LoginError::BadCode)?;
        h.codes.swap_remove(i);
        let value = random_hex()?;
        h.sessions.retain(|s| s.expires > now);
        if h.sessions.len() >= MAX_SESSIONS {
            h.sessions.remove(0);
        }
        h.sessions.push(Secret {
            value: value.clone(),
            expires: now + SESSION_TTL,
        });
        Ok(value)
    }

    /// Whether `session` is a session that has not ended at `now`.
    pub fn session_ok(&self, session: &str, now: Instant) -> bool {
        let h = self.lock();
        position(&h.sessions, session).is_some_and(|i| h.sessions[i].expires > now)
    }
}

/// The values of every `emberd_session` cookie the request carries.
fn session_cookies(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// Routes anyone may ask for: liveness, and the login itself (a browser
/// has no credentials yet; `POST /login` checks the token in [`mint`]).
pub(super) fn open_route(path: &str) -> bool {
    matches!(path, "/healthz" | "/login")
}

impl Access {
    /// Whether the request may read profiles: no token is configured, or it
    /// carries the token, or a live session cookie.
    pub(super) fn allows(&self, req: &Request) -> bool {
        self.token_ok(req)
            || session_cookies(req.headers()).any(|s| self.logins.session_ok(s, Instant::now()))
    }
}

/// The 401 of a request without the token or a session.
pub(super) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "this emberd needs Authorization: Bearer <token> (auth_token_file), or for the web page \
         a login: run `emberd login` as root or a member of the token file's group and open the URL it prints\n",
    )
        .into_response()
}

/// `POST /login` with the bearer token: a one-time code, answered as the
/// path to open (`/login?code=...`).
pub(super) async fn mint(State(st): State<AppState>, req: Request) -> Response {
    if st.access.token.is_none() {
        return (
            StatusCode::CONFLICT,
            "this emberd has no auth_token_file: every local user reads profiles, and the page needs no login\n",
        )
            .into_response();
    }
    // The header itself: a session (a cookie another local server may have
    // seen) must not make itself new ones.
    if !st.access.token_ok(&req) {
        return unauthorized();
    }
    match st.access.logins.mint_code(Instant::now()) {
        Ok(code) => (
            [(header::CACHE_CONTROL, "no-store")],
            format!("/login?code={code}\n"),
        )
            .into_response(),
        Err(e @ LoginError::TooManyCodes) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, CODE_TTL.as_secs().to_string())],
            format!("{e}\n"),
        )
            .into_response(),
        Err(e) => super::AppError::Internal(e.to_string()).into_response(),
    }
}

/// `GET /login?code=CODE`: spends the code, sets the session cookie and
/// sends the browser to the page.
pub(super) async fn redeem(State(st): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    let to_page = |cookie: Option<String>| {
        let mut resp = (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, "/"),
                (header::CACHE_CONTROL, "no-store"),
                (header::REFERRER_POLICY, "no-referrer"),
            ],
        )
            .into_response();
        if let Some(c) = cookie.and_then(|c| c.parse().ok()) {
            resp.headers_mut().insert(header::SET_COOKIE, c);
        }
        resp
    };
    if st.access.token.is_none() {
        return to_page(None);
    }
    let raw = raw.unwrap_or_default();
    let Some(code) = form_urlencoded::parse(raw.as_bytes())
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
    else {
        return (
            StatusCode::BAD_REQUEST,
            "missing parameter \"code\": open the URL `emberd login` prints\n",
        )
            .into_response();
    };
    match st.access.logins.redeem(&code, Instant::now()) {
        Ok(session) => to_page(Some(format!(
            "{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            SESSION_TTL.as_secs()
        ))),
        Err(e @ LoginError::BadCode) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{e}\n"),
        )
            .into_response(),
        Err(e) => super::AppError::Internal(e.to_string()).into_response(),
    }
}

/// Why `emberd login` got no URL.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon could not be reached or did not answer.
    #[error("asking emberd at {addr} for a login code: {source}")]
    Io {
        /// Where it was asked.
        addr: SocketAddr,
        /// What failed.
        source: std::io::Error,
    },
    /// The daemon answered with an error.
    #[error("emberd at {addr} answered {status}: {body}")]
    Refused {
        /// Where it was asked.
        addr: SocketAddr,
        /// The HTTP status line's code.
        status: String,
        /// The reason it gave.
        body: String,
    },
}

/// Where a client reaches a daemon listening on `listen`: an unspecified
/// address (0.0.0.0, ::) is reached on loopback.
pub fn reachable(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

/// Longest answer to `POST /login` read (a path of ~50 bytes is expected).
const MAX_ANSWER: u64 = 64 << 10;

/// Asks the daemon at `addr` for a one-time code with `token` and returns
/// the URL that logs a browser in.
pub fn login_url(addr: SocketAddr, token: &str) -> Result<String, ClientError> {
    let io = |source| ClientError::Io { addr, source };
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(io)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io)?;
    write!(
        s,
        "POST /login HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\n\r\n"
    )
    .map_err(io)?;
    let mut raw = Vec::new();
    s.take(MAX_ANSWER).read_to_end(&mut raw).map_err(io)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("nothing");
    let path = body.trim();
    if status != "200" || !path.starts_with("/login?code=") {
        return Err(ClientError::Refused {
            addr,
            status: status.to_owned(),
            body: path.to_owned(),
        });
    }
    Ok(format!("http://{addr}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_works_once_and_not_after_its_time() {
        let l = Logins::default();
        let t0 = Instant::now();
        let code = l.mint_code(t0).unwrap();
        assert_eq!(code.len(), 32);
        let session = l.redeem(&code, t0 + Duration::from_secs(1)).unwrap();
        assert!(l.session_ok(&session, t0 + Duration::from_secs(2)));
        assert!(matches!(
            l.redeem(&code, t0 + Duration::from_secs(2)),
            Err(LoginError::BadCode)
        ));
        let late = l.mint_code(t0).unwrap();
        assert!(matches!(
            l.redeem(&late, t0 + CODE_TTL),
            Err(LoginError::BadCode)
        ));
        assert!(!l.session_ok(&session, t0 + Duration::from_secs(1) + SESSION_TTL));
        assert!(!l.session_ok("", t0));
    }

    #[test]
    fn codes_and_sessions_are_bounded() {
        let l = Logins::default();
        let t0 = Instant::now();
        let codes: Vec<String> = (0..MAX_CODES).map(|_| l.mint_code(t0).unwrap()).collect();
        assert!(matches!(l.mint_code(t0), Err(LoginError::TooManyCodes)));
        // Expired codes make room.
        assert!(l.mint_code(t0 + CODE_TTL).is_ok());
        assert!(matches!(
            l.redeem(&codes[0], t0 + CODE_TTL),
            Err(LoginError::BadCode)
        ));
        let mut sessions = Vec::new();
        for i in 0..=MAX_SESSIONS {
            let t = t0 + CODE_TTL * 2 + Duration::from_millis(i as u64);
            let code = l.mint_code(t).unwrap();
            sessions.push(l.redeem(&code, t).unwrap());
        }
        let t = t0 + CODE_TTL * 3;
        assert!(!l.session_ok(&sessions[0], t), "the oldest session ended");
        assert!(sessions[1..].iter().all(|s| l.session_ok(s, t)));
        assert_eq!(l.lock().sessions.len(), MAX_SESSIONS);
    }

    #[test]
    fn session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            "a=1; emberd_session=abc; b=2".parse().unwrap(),
        );
        h.append(header::COOKIE, "emberd_sessionx=no".parse().unwrap());
        assert_eq!(session_cookies(&h).collect::<Vec<_>>(), vec!["abc"]);
    }
}
