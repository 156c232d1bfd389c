//! Who may read, for a browser: one-time login codes bound to a user, and
//! sessions only this daemon's origin holds.
//!
//! With `auth_token_file` every route but `/healthz`, `/login` and the
//! page's static files needs `Authorization: Bearer TOKEN`. curl and
//! scrapers send it; a browser cannot (a typed URL carries no header, and
//! the page's script never sees the token). So:
//!
//! 1. a holder of the token asks the daemon for a one-time code:
//!    `POST /login` with the bearer header (`emberd login` does it and
//!    prints `http://HOST:PORT/#login=CODE`). The code is bound to the user
//!    whose socket asked (or, from root, to the user `?for=UID` names:
//!    `sudo emberd login` binds it to `SUDO_UID`);
//! 2. the browser opens the page; its script takes the code out of the
//!    URL's fragment (never sent to a server, and removed from the address
//!    bar and history at once) and spends it with `POST /login/session`.
//!    The daemon looks up who owns the browser's socket (see
//!    [`crate::shared::peer`]): only the code's user or root may spend it.
//!    The answer's body is the session;
//! 3. the script keeps the session in `sessionStorage` and sends it as
//!    `X-Emberd-Session` on its own requests; the guard takes it as it
//!    takes the token. The comparison views are SVGs in a frame, loaded by
//!    URL: for each the script trades its session for a one-time view
//!    ticket (`POST /login/view`), valid for [`VIEW_TTL`] and for one GET
//!    that carries it as `?view=TICKET`.
//!
//! Why not a cookie: cookies are not confined to a port (RFC 6265,
//! section 8.5), so the browser would send a session cookie to every
//! server on 127.0.0.1, and any local user may run one. `sessionStorage`
//! belongs to one origin (scheme, host and port) and one tab; a header is
//! sent only where the script sends it, and another origin's page cannot
//! make the browser send it (a custom header needs a CORS preflight that
//! emberd never grants; [`super::origin`] refuses other origins anyway).
//!
//! Why the code is bound to a user: a URL is seen by more than its
//! reader. `xdg-open URL` puts it in the browser's argv, which every local
//! user can read in `/proc`, and whoever spent a code first would hold the
//! session. Bound to the user who asked, a code seen by another user is
//! worth nothing to them; root, who can read the token anyway, may spend
//! any. A browser on another host has no socket here to look up: its
//! login is not bound (the daemon listens off loopback only with
//! `allow_remote`), and stays one-time, short-lived and out of URLs sent.
//!
//! Why the daemon mints the codes: whoever can read the token file (root
//! and the file's group, see `scripts/install-token`) can already read
//! every profile, so showing the token to the daemon is the whole check. A
//! group member needs no root, no key derivation and no clock shared with
//! the daemon, and the daemon needs no secret besides the token.
//!
//! Bounds: at most [`MAX_CODES`] codes wait at once, each for [`CODE_TTL`],
//! and a code works once; at most [`MAX_SESSIONS`] sessions live at once,
//! each for [`SESSION_TTL`] (a new one past the count ends the oldest); at
//! most [`MAX_VIEWS`] view tickets. A few KiB in all, whoever asks. Codes,
//! sessions and tickets are 128 random bits (getrandom(2)), compared in
//! constant time. A session only reads profiles: it cannot mint codes
//! (that takes the token itself).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::conn::Ends;
use super::{Access, AppState, constant_time_eq};
use crate::shared::Secret;
use crate::shared::peer::{PeerOwner, Trusted, Untrusted, user_name};

/// How long a login code can be used after it was minted.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// Codes waiting to be used at once; more get 429 until some expire.
pub const MAX_CODES: usize = 16;
/// How long a browser session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions alive at once; a new one past this ends the oldest.
pub const MAX_SESSIONS: usize = 64;
/// How long a view ticket (one framed SVG) can be used.
pub const VIEW_TTL: Duration = Duration::from_secs(30);
/// View tickets waiting at once; a new one past this ends the oldest.
pub const MAX_VIEWS: usize = 16;
/// The header the page sends its session in.
pub const SESSION_HEADER: &str = "x-emberd-session";
/// The query parameter of a view ticket.
pub const VIEW_PARAM: &str = "view";

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
    /// The code is another user's.
    #[error(
        "this login code was made for {owner}, and this browser runs as {user}: a code works only for the user who ran `emberd login` (or root); run it as {user}, or `sudo emberd login` from {user}'s session"
    )]
    OtherUser {
        /// Whom the code is for.
        owner: String,
        /// Who tried.
        user: String,
    },
    /// getrandom(2) failed.
    #[error("no random bytes for a login: {0}")]
    Random(std::io::Error),
}

/// Who may spend a code: a uid, or anyone (minted for a browser on
/// another host, or where the minting socket could not be looked up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeFor {
    /// This user (and root).
    Uid(u32),
    /// Not bound.
    Anyone,
}

/// A code, a session or a ticket: a random value and when it stops working.
struct Held {
    value: Secret,
    expires: Instant,
    /// Codes only: whom it is for.
    owner: CodeFor,
}

#[derive(Default)]
struct Tables {
    codes: Vec<Held>,
    /// In the order they were made: the first is the oldest.
    sessions: Vec<Held>,
    /// In the order they were made.
    views: Vec<Held>,
}

/// Login codes, sessions and view tickets of one daemon (see the module's
/// comment).
#[derive(Default)]
pub struct Logins {
    held: Mutex<Tables>,
}

impl std::fmt::Debug for Logins {
    // Counts only: the values are credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = self.lock();
        f.debug_struct("Logins")
            .field("codes", &h.codes.len())
            .field("sessions", &h.sessions.len())
            .field("views", &h.views.len())
            .finish()
    }
}

/// Index of the entry whose value is `given`, comparing with every entry
/// in constant time (no early exit on a match).
fn position(list: &[Held], given: &str) -> Option<usize> {
    let mut found = None;
    for (i, s) in list.iter().enumerate() {
        if constant_time_eq(s.value.expose().as_bytes(), given.as_bytes()) {
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
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new one-time code for `owner`, valid for [`CODE_TTL`] from `now`.
    pub fn mint_code(&self, owner: CodeFor, now: Instant) -> Result<String, LoginError> {
        let mut h = self.lock();
        h.codes.retain(|c| c.expires > now);
        if h.codes.len() >= MAX_CODES {
            return Err(LoginError::TooManyCodes);
        }
        let value = random_hex()?;
        h.codes.push(Held {
            value: Secret::new(value.clone()),
            expires: now + CODE_TTL,
            owner,
        });
        Ok(value)
    }

    /// Spends `code` for a browser whose socket `by` owns (`None`: another
    /// host's) and returns a new session, valid for [`SESSION_TTL`]. A code
    /// shown to another user is refused and not spent.
    pub fn redeem(&self, code: &str, by: Option<u32>, now: Instant) -> Result<Secret, LoginError> {
        let mut h = self.lock();
        h.codes.retain(|c| c.expires > now);
        let i = position(&h.codes, code).ok_or(LoginError::BadCode)?;
        if let (CodeFor::Uid(owner), Some(uid)) = (h.codes[i].owner, by)
            && uid != owner
            && uid != 0
        {
            return Err(LoginError::OtherUser {
                owner: user_name(owner),
                user: user_name(uid),
            });
        }
        h.codes.swap_remove(i);
        let value = Secret::new(random_hex()?);
        h.sessions.retain(|s| s.expires > now);
        if h.sessions.len() >= MAX_SESSIONS {
            h.sessions.remove(0);
        }
        h.sessions.push(Held {
            value: value.clone(),
            expires: now + SESSION_TTL,
            owner: CodeFor::Anyone,
        });
        Ok(value)
    }

    /// Whether `code` is a live code (spends nothing): an unknown code is
    /// refused before any lookup of who asks.
    pub fn code_live(&self, code: &str, now: Instant) -> bool {
        let h = self.lock();
        position(&h.codes, code).is_some_and(|i| h.codes[i].expires > now)
    }

    /// Whether `session` is a session that has not ended at `now`.
    pub fn session_ok(&self, session: &str, now: Instant) -> bool {
        let h = self.lock();
        position(&h.sessions, session).is_some_and(|i| h.sessions[i].expires > now)
    }

    /// A one-time view ticket, valid for [`VIEW_TTL`].
    pub fn mint_view(&self, now: Instant) -> Result<String, LoginError> {
        let mut h = self.lock();
        h.views.retain(|v| v.expires > now);
        if h.views.len() >= MAX_VIEWS {
            h.views.remove(0);
        }
        let value = random_hex()?;
        h.views.push(Held {
            value: Secret::new(value.clone()),
            expires: now + VIEW_TTL,
            owner: CodeFor::Anyone,
        });
        Ok(value)
    }

    /// Spends a view ticket: whether it was live.
    pub fn spend_view(&self, ticket: &str, now: Instant) -> bool {
        let mut h = self.lock();
        h.views.retain(|v| v.expires > now);
        match position(&h.views, ticket) {
            Some(i) => {
                h.views.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

/// The session the request carries in [`SESSION_HEADER`], if any.
fn session_header(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER)?.to_str().ok()
}

/// Routes anyone may ask for: liveness, and the login itself (a browser
/// has no credentials yet; `POST /login` checks the token in [`mint`], the
/// others spend what they are given), and the page's static files (they
/// hold no profile; the page says how to log in).
pub(super) fn open_route(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/login" | "/login/session" | "/" | "/app.js" | "/app.css"
    )
}

/// SVGs a frame of the page loads by URL, with a view ticket.
fn view_route(path: &str) -> bool {
    matches!(path, "/diff.svg" | "/animation.svg" | "/flamegraph.svg")
}

/// The view ticket of a query string, and the query without it.
pub(super) fn split_view(raw: &str) -> Option<(String, String)> {
    let mut ticket = None;
    let mut rest = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        if k == VIEW_PARAM {
            ticket = Some(v.into_owned());
        } else {
            rest.append_pair(&k, &v);
        }
    }
    ticket.map(|t| (t, rest.finish()))
}

impl Access {
    /// Whether the request may read profiles: no token is configured, or it
    /// carries the token, or a live session.
    pub(super) fn allows(&self, req: &Request) -> bool {
        self.token_ok(req)
            || session_header(req.headers())
                .is_some_and(|s| self.logins.session_ok(s, Instant::now()))
    }

    /// Whether `req` is a GET of a framed SVG with a live view ticket
    /// (spent now).
    pub(super) fn view_allowed(&self, req: &Request) -> bool {
        req.method() == axum::http::Method::GET
            && view_route(req.uri().path())
            && req
                .uri()
                .query()
                .and_then(split_view)
                .is_some_and(|(t, _)| self.logins.spend_view(&t, Instant::now()))
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

/// Who owns the far end of the request's connection: `None` for another
/// host's; an error when it cannot be told.
async fn owner_of(ends: Option<Ends>) -> Result<Option<u32>, String> {
    let Some(Ends { local, peer }) = ends else {
        // A Unix socket: a browser does not log in through it.
        return Err("this request came through no TCP connection".into());
    };
    let owner =
        tokio::task::spawn_blocking(move || crate::shared::peer::owner_of_peer(local, peer))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    match owner {
        PeerOwner::Uid(uid) => Ok(Some(uid)),
        PeerOwner::Remote => Ok(None),
        PeerOwner::Unsettled(state) => Err(format!("its socket is in TCP state {state}")),
    }
}

/// `POST /login[?for=UID]` with the bearer token: a one-time code for the
/// user whose socket asked (root may name another with `for`), answered
/// as the path to open (`/#login=...`).
pub(super) async fn mint(
    State(st): State<AppState>,
    ends: Option<axum::Extension<Option<Ends>>>,
    req: Request,
) -> Response {
    if st.access.token.is_none() {
        return (
            StatusCode::CONFLICT,
            "this emberd has no auth_token_file: every local user reads profiles, and the page needs no login\n",
        )
            .into_response();
    }
    // The header itself: a session must not make itself new ones.
    if !st.access.token_ok(&req) {
        return unauthorized();
    }
    let asker = match owner_of(ends.and_then(|e| e.0)).await {
        Ok(a) => a,
        Err(e) => {
            return super::AppError::Internal(format!("who asks for a login code: {e}"))
                .into_response();
        }
    };
    let named: Option<u32> = req
        .uri()
        .query()
        .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "for"))
        .and_then(|(_, v)| v.parse().ok());
    let owner = match (asker, named) {
        (Some(0), Some(uid)) => CodeFor::Uid(uid),
        (Some(uid), _) => CodeFor::Uid(uid),
        (None, _) => CodeFor::Anyone,
    };
    match st.access.logins.mint_code(owner, Instant::now()) {
        Ok(code) => (
            [(header::CACHE_CONTROL, "no-store")],
            format!("/#login={code}\n"),
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

/// `GET /login`: the old form of the login URL (`?code=`) spends nothing
/// and points at the page.
pub(super) async fn old_login(RawQuery(_): RawQuery) -> Response {
    (
        StatusCode::GONE,
        [(header::CACHE_CONTROL, "no-store")],
        "log in with the URL `emberd login` prints now (http://HOST:PORT/#login=CODE): the page spends the code itself\n",
    )
        .into_response()
}

/// Longest body of `POST /login/session` (a code is 32 bytes).
const MAX_CODE_BODY: usize = 256;

/// Time the body of `POST /login/session` has to arrive once its head has:
/// a code is 32 bytes, and a client that sends it slower holds one of the
/// few [`super::MAX_LOGINS_IN_FLIGHT`] places meanwhile.
pub const LOGIN_BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// `POST /login/session` with the code as the body: spends it for the
/// browser's user and answers the session (text).
pub(super) async fn redeem(
    State(st): State<AppState>,
    ends: Option<axum::Extension<Option<Ends>>>,
    body: axum::body::Body,
) -> Response {
    let body = match tokio::time::timeout(
        LOGIN_BODY_TIMEOUT,
        axum::body::to_bytes(body, MAX_CODE_BODY),
    )
    .await
    {
        Ok(Ok(body)) => body,
        Ok(Err(e)) => {
            let e = e.into_inner();
            if e.is::<http_body_util::LengthLimitError>() {
                return (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "a login code is 32 hex digits\n",
                )
                    .into_response();
            }
            return (
                StatusCode::BAD_REQUEST,
                format!("reading the login code: {e}\n"),
            )
                .into_response();
        }
        Err(_) => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                [(header::CONNECTION, "close")],
                format!(
                    "the login code did not arrive within {} s of the request's head\n",
                    LOGIN_BODY_TIMEOUT.as_secs()
                ),
            )
                .into_response();
        }
    };
    if st.access.token.is_none() {
        return (StatusCode::OK, [(header::CACHE_CONTROL, "no-store")], "").into_response();
    }
    let code = String::from_utf8_lossy(&body).trim().to_owned();
    if code.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            "no login code: open the URL `emberd login` prints\n",
        )
            .into_response();
    }
    if !st.access.logins.code_live(&code, Instant::now()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{}\n", LoginError::BadCode),
        )
            .into_response();
    }
    let by = match owner_of(ends.and_then(|e| e.0)).await {
        Ok(by) => by,
        Err(e) => {
            return (
                StatusCode::FORBIDDEN,
                format!("cannot tell which user this browser runs as ({e}); no login\n"),
            )
                .into_response();
        }
    };
    match st.access.logins.redeem(&code, by, Instant::now()) {
        Ok(session) => (
            [
                (header::CACHE_CONTROL, "no-store"),
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            ],
            session.expose().to_owned(),
        )
            .into_response(),
        Err(e @ LoginError::BadCode) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{e}\n"),
        )
            .into_response(),
        Err(e @ LoginError::OtherUser { .. }) => {
            tracing::warn!("login refused: {e}");
            (StatusCode::FORBIDDEN, format!("{e}\n")).into_response()
        }
        Err(e) => super::AppError::Internal(e.to_string()).into_response(),
    }
}

/// `POST /login/view` with a session (or the token): a one-time ticket
/// for one framed SVG.
pub(super) async fn view(State(st): State<AppState>) -> Response {
    match st.access.logins.mint_view(Instant::now()) {
        Ok(t) => ([(header::CACHE_CONTROL, "no-store")], t).into_response(),
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
    /// The port is held by a user not trusted with the token.
    #[error(
        "not sending the token to {addr}: {reason} (is emberd running? `systemctl status emberd`; a daemon run as another user: --daemon-user)"
    )]
    Untrusted {
        /// Where it was asked.
        addr: SocketAddr,
        /// Who holds the port.
        reason: Untrusted,
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

/// Asks the daemon at `addr` for a one-time code with `token`, after
/// checking that the port's socket is `daemon`'s (root or the daemon's
/// user), and returns the URL that logs a browser in. `for_uid`: the user
/// whose browser may spend it, when run as root for another (`SUDO_UID`).
pub fn login_url(
    addr: SocketAddr,
    token: &Secret,
    daemon: &Trusted,
    for_uid: Option<u32>,
) -> Result<String, ClientError> {
    let io = |source| ClientError::Io { addr, source };
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(io)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io)?;
    let (local, peer) = (s.local_addr().map_err(io)?, s.peer_addr().map_err(io)?);
    crate::shared::peer::check(local, peer, daemon)
        .map_err(|reason| ClientError::Untrusted { addr, reason })?;
    let query = for_uid.map(|u| format!("?for={u}")).unwrap_or_default();
    write!(
        s,
        "POST /login{query} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Length: 0\r\n\r\n",
        token.expose()
    )
    .map_err(io)?;
    let mut raw = Vec::new();
    s.take(MAX_ANSWER).read_to_end(&mut raw).map_err(io)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("nothing");
    let path = body.trim();
    if status != "200" || !path.starts_with("/#login=") {
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

    const ME: CodeFor = CodeFor::Uid(1000);

    #[test]
    fn a_code_works_once_and_not_after_its_time() {
        let l = Logins::default();
        let t0 = Instant::now();
        let code = l.mint_code(ME, t0).unwrap();
        assert_eq!(code.len(), 32);
        assert!(l.code_live(&code, t0) && !l.code_live("0123", t0));
        let session = l
            .redeem(&code, Some(1000), t0 + Duration::from_secs(1))
            .unwrap();
        assert!(l.session_ok(session.expose(), t0 + Duration::from_secs(2)));
        assert!(matches!(
            l.redeem(&code, Some(1000), t0 + Duration::from_secs(2)),
            Err(LoginError::BadCode)
        ));
        assert!(!l.code_live(&code, t0), "a spent code is not live");
        let late = l.mint_code(ME, t0).unwrap();
        assert!(matches!(
            l.redeem(&late, Some(1000), t0 + CODE_TTL),
            Err(LoginError::BadCode)
        ));
        assert!(!l.session_ok(session.expose(), t0 + Duration::from_secs(1) + SESSION_TTL));
        assert!(!l.session_ok("", t0));
    }

    #[test]
    fn a_code_is_spent_only_by_its_user_or_root() {
        let l = Logins::default();
        let t0 = Instant::now();
        let code = l.mint_code(ME, t0).unwrap();
        let e = l.redeem(&code, Some(65534), t0).unwrap_err();
        assert!(matches!(e, LoginError::OtherUser { .. }), "{e}");
        assert!(e.to_string().contains("uid 1000"), "{e}");
        // Refused, not spent: its user still logs in with it.
        assert!(l.redeem(&code, Some(1000), t0).is_ok());
        let code = l.mint_code(ME, t0).unwrap();
        assert!(l.redeem(&code, Some(0), t0).is_ok(), "root");
        let code = l.mint_code(ME, t0).unwrap();
        assert!(
            l.redeem(&code, None, t0).is_ok(),
            "a browser on another host"
        );
        let code = l.mint_code(CodeFor::Anyone, t0).unwrap();
        assert!(l.redeem(&code, Some(65534), t0).is_ok());
    }

    #[test]
    fn codes_sessions_and_views_are_bounded() {
        let l = Logins::default();
        let t0 = Instant::now();
        let codes: Vec<String> = (0..MAX_CODES)
            .map(|_| l.mint_code(ME, t0).unwrap())
            .collect();
        assert!(matches!(l.mint_code(ME, t0), Err(LoginError::TooManyCodes)));
        // Expired codes make room.
        assert!(l.mint_code(ME, t0 + CODE_TTL).is_ok());
        assert!(matches!(
            l.redeem(&codes[0], Some(1000), t0 + CODE_TTL),
            Err(LoginError::BadCode)
        ));
        let mut sessions = Vec::new();
        for i in 0..=MAX_SESSIONS {
            let t = t0 + CODE_TTL * 2 + Duration::from_millis(i as u64);
            let code = l.mint_code(ME, t).unwrap();
            sessions.push(l.redeem(&code, Some(1000), t).unwrap());
        }
        let t = t0 + CODE_TTL * 3;
        assert!(
            !l.session_ok(sessions[0].expose(), t),
            "the oldest session ended"
        );
        assert!(sessions[1..].iter().all(|s| l.session_ok(s.expose(), t)));
        assert_eq!(l.lock().sessions.len(), MAX_SESSIONS);
        let views: Vec<String> = (0..=MAX_VIEWS).map(|_| l.mint_view(t).unwrap()).collect();
        assert!(!l.spend_view(&views[0], t), "the oldest ticket ended");
        assert!(l.spend_view(&views[1], t));
        assert!(!l.spend_view(&views[1], t), "a ticket works once");
        assert!(!l.spend_view(&views[2], t + VIEW_TTL), "nor after its time");
    }

    #[test]
    fn a_view_ticket_is_taken_out_of_the_query() {
        let (t, rest) = split_view("event=cpu&view=abc&before=1%2C2").unwrap();
        assert_eq!(
            (t.as_str(), rest.as_str()),
            ("abc", "event=cpu&before=1%2C2")
        );
        assert!(split_view("event=cpu").is_none());
    }

    #[test]
    fn logins_print_counts_only() {
        let l = Logins::default();
        let code = l.mint_code(ME, Instant::now()).unwrap();
        let shown = format!("{l:?}");
        assert!(!shown.contains(&code), "{shown}");
    }
}
