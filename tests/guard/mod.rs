//! The HTTP side under attack: posted bodies that claim huge trees, pages
//! of other sites sending requests, and requests that time out mid-render.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::common::*;

/// Sends `head` (request line and headers, without the blank line) and
/// `body` (with its Content-Length), and reads the whole response; `None`
/// if the daemon did not answer within `timeout`.
fn request(port: u16, head: &str, body: &[u8], timeout: Duration) -> Option<HttpResponse> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connecting to emberd");
    s.set_read_timeout(Some(timeout)).unwrap();
    let length = if body.is_empty() && head.starts_with("GET") {
        String::new()
    } else {
        format!("Content-Length: {}\r\n", body.len())
    };
    write!(s, "{head}\r\n{length}Connection: close\r\n\r\n").unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    (!raw.is_empty()).then(|| parse_response(&raw))
}

/// Posts `body` as a baseline to `/diff.svg` and returns the response and
/// the daemon's peak RSS (VmHWM, reset just before) above its RSS then, in
/// KiB.
fn post_and_measure(d: &Daemon, body: &[u8]) -> (HttpResponse, u64) {
    let pid = d.child.id();
    // "5" resets VmHWM to the current RSS: the peak is this request's.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("resetting VmHWM");
    let before = status_kib(pid, "VmRSS");
    let r = request(
        d.port,
        "POST /diff.svg?seconds=5 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain",
        body,
        Duration::from_secs(60),
    )
    .expect("an answer to the POST");
    let peak = status_kib(pid, "VmHWM");
    (r, peak.saturating_sub(before))
}

/// A 2 MB line of 1,000,000 frames, and 2 MB of distinct lines that would
/// make a tree of a million nodes, posted as baselines to `/diff.svg`: each
/// is answered 200 with `X-Emberd-Cut` saying what was cut and the limit,
/// the daemon's peak RSS stays within 64 MiB of what it was before (it was
/// 1.1 GiB for the long line); so it does for twelve 12 MiB bodies posted
/// at once; a body of 17 MiB is 413; and `/folded` still answers.
#[test]
fn posted_baselines_cost_memory_in_proportion() {
    require_root();
    let d = Daemon::start(&[], &[]);
    wait(2000);
    let budget_kib = 64 * 1024;

    let mut long = "f;".repeat(1_000_000).into_bytes();
    long.pop();
    long.extend_from_slice(b" 7\n");
    let (r, grew) = post_and_measure(&d, &long);
    eprintln!(
        "1,000,000-frame line ({} bytes): peak RSS +{grew} KiB",
        long.len()
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let cut = r.header("x-emberd-cut").unwrap_or_default();
    assert!(
        cut.contains("cut_lines=1") && cut.contains("frames_per_line=512"),
        "X-Emberd-Cut: {cut:?}"
    );
    assert!(r.text().contains("[truncated]"), "the cut line is marked");
    assert!(grew < budget_kib, "the long line took {grew} KiB");

    // 8,000 lines of 61 frames under distinct roots: ~490,000 tree nodes.
    let mut many = Vec::new();
    for i in 0..8_000 {
        write!(many, "root{i:05}").unwrap();
        for f in 0..60 {
            write!(many, ";f{f:02}").unwrap();
        }
        writeln!(many, " {}", 1 + i % 5).unwrap();
    }
    let (r, grew) = post_and_measure(&d, &many);
    eprintln!(
        "{} distinct lines ({} bytes): peak RSS +{grew} KiB",
        8_000,
        many.len()
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let cut = r.header("x-emberd-cut").unwrap_or_default();
    assert!(
        cut.contains("dropped_lines=") && cut.contains("frames_total=262144"),
        "X-Emberd-Cut: {cut:?}"
    );
    assert!(grew < budget_kib, "the distinct lines took {grew} KiB");
    assert!(r.body.len() < 32 << 20, "the SVG is {} bytes", r.body.len());

    // Twelve 12 MiB bodies at once: only two are read at a time (twelve
    // buffered would be 144 MiB), and one over 16 MiB is refused naming it.
    let big: std::sync::Arc<Vec<u8>> = "main;work 1\n".repeat(1 << 20).into_bytes().into();
    let pid = d.child.id();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("resetting VmHWM");
    let before = status_kib(pid, "VmRSS");
    let posts: Vec<_> = (0..12)
        .map(|_| {
            let (big, port) = (big.clone(), d.port);
            std::thread::spawn(move || {
                let head = "POST /diff.folded?seconds=5 HTTP/1.1\r\nHost: 127.0.0.1";
                request(port, head, &big, Duration::from_secs(60)).map(|r| r.status)
            })
        })
        .collect();
    let statuses: Vec<_> = posts.into_iter().map(|p| p.join().unwrap()).collect();
    let grew = status_kib(pid, "VmHWM").saturating_sub(before);
    eprintln!(
        "12 bodies of {} bytes at once: {statuses:?}, peak RSS +{grew} KiB",
        big.len()
    );
    assert!(statuses.iter().all(|s| *s == Some(200)), "{statuses:?}");
    assert!(grew < budget_kib, "twelve bodies took {grew} KiB");
    // A body that says it is 17 MiB is refused before it is read (sent
    // only in part: a server may answer early, and the rest would be reset).
    let mut s = std::net::TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /diff.folded?seconds=5 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
        17 << 20
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .expect("an answer to the 17 MiB claim");
    let r = parse_response(&raw);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("16 MiB"), "{}", r.text());

    let f = d.get("/folded?seconds=5");
    assert_eq!(f.status, 200, "{}", f.text());
    assert!(!f.body.is_empty(), "the daemon still samples");
}

/// A page of another site cannot make the daemon work: a text/plain POST
/// to `/diff.svg` and a GET of `/flamegraph.svg` with `Origin:
/// http://evil.example` or `Sec-Fetch-Site: cross-site` get 403 naming why;
/// the daemon's own origin, and requests without either header (curl,
/// scrapers), get 200 with `X-Content-Type-Options: nosniff` and, for the
/// SVG, a CSP that allows its own script (by hash) and nothing fetched. An
/// HTTP/1.1 request without Host, or with a non-ASCII one, is 400.
#[test]
fn cross_origin_requests_are_refused() {
    require_root();
    let d = Daemon::start(&[], &[]);
    wait(1500);
    let port = d.port;
    let t = Duration::from_secs(30);
    let post = |extra: &str| {
        request(
            port,
            &format!(
                "POST /diff.svg?seconds=5 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain{extra}"
            ),
            b"main;work 10\n",
            t,
        )
        .expect("an answer")
    };
    let get = |extra: &str| {
        request(
            port,
            &format!("GET /flamegraph.svg?seconds=5 HTTP/1.1\r\nHost: 127.0.0.1:{port}{extra}"),
            b"",
            t,
        )
        .expect("an answer")
    };
    for extra in [
        "\r\nOrigin: http://evil.example",
        "\r\nSec-Fetch-Site: cross-site",
        "\r\nSec-Fetch-Site: same-site",
        "\r\nOrigin: null",
    ] {
        for (what, r) in [
            ("POST /diff.svg", post(extra)),
            ("GET /flamegraph.svg", get(extra)),
        ] {
            assert_eq!(r.status, 403, "{what} with {extra:?}: {}", r.text());
            let reason = r.text();
            assert!(
                reason.contains("refused") && reason.lines().count() == 1,
                "{what}: {reason:?}"
            );
            assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        }
    }
    let own = format!("\r\nOrigin: http://127.0.0.1:{port}\r\nSec-Fetch-Site: same-origin");
    for extra in [own.as_str(), ""] {
        for (what, r) in [
            ("POST /diff.svg", post(extra)),
            ("GET /flamegraph.svg", get(extra)),
        ] {
            assert_eq!(r.status, 200, "{what} with {extra:?}: {}", r.text());
            assert_eq!(
                r.header("x-content-type-options"),
                Some("nosniff"),
                "{what}"
            );
            let csp = r.header("content-security-policy").unwrap_or_default();
            assert!(
                csp.contains("default-src 'none'")
                    && csp.contains("script-src 'sha256-")
                    && !csp.contains("script-src 'unsafe-inline'"),
                "{what}: CSP {csp:?}"
            );
            assert!(
                r.text().contains("<script"),
                "{what}: the SVG has its script"
            );
        }
    }
    // Text answers carry nosniff too; the page may be linked from anywhere.
    let r = request(
        port,
        "GET /folded?seconds=5 HTTP/1.1\r\nHost: 127.0.0.1",
        b"",
        t,
    )
    .unwrap();
    assert_eq!(
        (r.status, r.header("x-content-type-options")),
        (200, Some("nosniff"))
    );
    let r = request(
        port,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nSec-Fetch-Site: cross-site",
        b"",
        t,
    )
    .unwrap();
    assert_eq!(r.status, 200, "the page itself: {}", r.text());

    let r = request(port, "GET /folded HTTP/1.1", b"", t).unwrap();
    assert_eq!(r.status, 400, "HTTP/1.1 without Host: {}", r.text());
    assert!(r.text().contains("Host"), "{}", r.text());
    let r = request(port, "GET /folded HTTP/1.1\r\nHost: 127.0.0.\u{e9}", b"", t).unwrap();
    assert_eq!(r.status, 400, "non-ASCII Host: {}", r.text());
    // HTTP/1.0 may leave Host out (no browser does).
    let r = request(port, "GET /folded?seconds=5 HTTP/1.0", b"", t).unwrap();
    assert_eq!(r.status, 200, "HTTP/1.0 without Host: {}", r.text());
}

/// Renders made slow (3 s each, test hook) against a 1 s request time-out,
/// requested four at a time every 300 ms for 4 s: the time-outs answer 503,
/// yet renders at once never pass the limit of 2 (`renders_running_max`),
/// because a timed-out render keeps its permit until it really ends; and
/// afterwards the same request gets its answer.
#[test]
fn timed_out_renders_keep_their_permit() {
    require_root();
    let d = Daemon::start(
        &[],
        &[
            ("EMBERD_TEST_SLOW_RENDERS", "3000:6"),
            ("EMBERD_TEST_REQUEST_TIMEOUT_MS", "1000"),
        ],
    );
    wait(1500);
    let port = d.port;
    let t0 = Instant::now();
    let mut clients = Vec::new();
    let mut n = 0;
    while t0.elapsed() < Duration::from_secs(4) {
        for _ in 0..4 {
            let path = format!("/flamegraph.svg?seconds=30&title=t{n}");
            n += 1;
            clients.push(std::thread::spawn(move || {
                // The client gives up later than the daemon's time-out.
                request(
                    port,
                    &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1"),
                    b"",
                    Duration::from_secs(3),
                )
                .map(|r| (r.status, r.text()))
            }));
        }
        wait(300);
    }
    let answers: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let timed_out = answers
        .iter()
        .filter(|a| matches!(a, Some((503, text)) if text.contains("took longer")))
        .count();
    assert!(
        timed_out >= n / 2,
        "{timed_out} of {n} requests timed out: {answers:?}"
    );
    let running_max = metric(&d.get("/metrics").text(), "emberd_renders_running_max");
    assert!(
        (1.0..=2.0).contains(&running_max),
        "{running_max} renders ran at once (the limit is 2)"
    );
    // The same request as the first, once the slow renders are spent.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = request(
            port,
            "GET /flamegraph.svg?seconds=30&title=t0 HTTP/1.1\r\nHost: 127.0.0.1",
            b"",
            Duration::from_secs(5),
        );
        if let Some(r) = r.filter(|r| r.status == 200) {
            assert!(r.text().contains("<svg"), "{}", r.text());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no answer to a retry within 30 s"
        );
        wait(500);
    }
    // Renders the retries started and gave up on end, and are counted out.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = d.get("/metrics").text();
        assert!(metric(&m, "emberd_renders_running_max") <= 2.0);
        if metric(&m, "emberd_renders_running") == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "renders still running after 10 s"
        );
        wait(200);
    }
}
