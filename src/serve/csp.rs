//! The Content-Security-Policy of the SVGs emberd serves: each may run its
//! own script and nothing else, so an SVG opened on its own (saved, linked,
//! framed) can never run script a frame name or a posted profile smuggled
//! in, even if escaping ever failed.

use base64::Engine;
use sha2::{Digest, Sha256};

/// What an SVG may do besides its scripts: its inline styles, `data:`
/// images, nothing fetched, no forms, framed only by emberd's page.
const REST: &str = "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

/// The policy for `svg`: `script-src` lists the SHA-256 of each of its
/// `<script>` elements' text (the scripts carry values of the render, so
/// the hashes are taken from the body, not fixed).
pub fn svg_policy(svg: &[u8]) -> String {
    let hashes = script_hashes(svg);
    let scripts = if hashes.is_empty() {
        "'none'".to_owned()
    } else {
        hashes
            .iter()
            .map(|h| format!("'sha256-{h}'"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!("default-src 'none'; script-src {scripts}; {REST}")
}

/// Base64 SHA-256 of each `<script>` element's text: a CDATA section's
/// contents (what the browser hashes: the element's child text), else the
/// text as written.
pub fn script_hashes(svg: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(at) = find(rest, b"<script") {
        let tag = &rest[at..];
        let Some(gt) = find(tag, b">") else { break };
        let body = &tag[gt + 1..];
        let Some(end) = find(body, b"</script>") else {
            break;
        };
        let inner = &body[..end];
        let text = inner
            .strip_prefix(b"<![CDATA[")
            .and_then(|t| t.strip_suffix(b"]]>"))
            .unwrap_or(inner);
        out.push(base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text)));
        rest = &body[end..];
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_script_is_listed_by_its_hash() {
        let svg = b"<svg><script type=\"text/ecmascript\"><![CDATA[\nalert(1)\n]]></script>\
                    <text>&lt;script&gt;</text><script>x()</script></svg>";
        let p = svg_policy(svg);
        let b64 = |t: &[u8]| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(t));
        assert!(
            p.contains(&format!("'sha256-{}'", b64(b"\nalert(1)\n"))),
            "{p}"
        );
        assert!(p.contains(&format!("'sha256-{}'", b64(b"x()"))), "{p}");
        assert!(!p.contains("unsafe-inline'; img") || !p.contains("script-src 'unsafe-inline'"));
        assert_eq!(script_hashes(svg).len(), 2);
        assert!(svg_policy(b"<svg/>").contains("script-src 'none'"));
    }
}
