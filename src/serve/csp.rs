//! The Content-Security-Policy of the SVGs emberd serves: each may run its
//! own script and nothing else, so an SVG opened on its own (saved, linked,
//! framed) can never run script a frame name or a posted profile smuggled
//! in, even if escaping ever failed.

use base64::Engine;
use sha2::{Digest, Sha256};

/// What an SVG may do besides its scripts: its inline styles, `data:`
/// images, nothing fetched, no forms, framed only by emberd's page.
const REST: &str = "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

/// The policy for `svg`: `script-src` lists the SHA-256 of the one script
/// emberd wrote into it ([`own_script`]), nothing else.
pub fn svg_policy(svg: &[u8]) -> String {
    let scripts = match own_script(svg) {
        Some(text) => format!(
            "'sha256-{}'",
            base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text))
        ),
        None => "'none'".to_owned(),
    };
    format!("default-src 'none'; script-src {scripts}; {REST}")
}

/// How every SVG emberd renders (`render::flamegraph`, `render::diff`,
/// `render::animation`) opens its one script.
const OPEN: &[u8] = b"<script type=\"text/ecmascript\"><![CDATA[";
/// And how it ends the document after it.
const CLOSE: &[u8] = b"]]></script>";

/// The text of the script emberd wrote: each renderer writes exactly one,
/// as the document's last element (`<script ...><![CDATA[ ... ]]></script>`
/// then `</svg>`), so it is found from the end. Frame names, titles and
/// posted profiles come before it, escaped; were escaping ever to fail, a
/// `<script>` they carry is still not the last element and gets no hash.
/// The text is the CDATA section's contents: what the browser hashes.
pub fn own_script(svg: &[u8]) -> Option<&[u8]> {
    let body = trim_end(svg).strip_suffix(b"</svg>")?;
    let body = trim_end(body).strip_suffix(CLOSE)?;
    let at = rfind(body, OPEN)?;
    let text = &body[at + OPEN.len()..];
    // A second script inside the first cannot be: the renderers' scripts
    // are their asset files (`src/render/assets/*.js`), values passed as
    // document attributes, never in the script's text.
    if find(text, b"<script").is_some() || find(text, b"]]>").is_some() {
        return None;
    }
    Some(text)
}

/// Base64 SHA-256 of the scripts the policy allows (one at most).
pub fn script_hashes(svg: &[u8]) -> Vec<String> {
    own_script(svg)
        .map(|t| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(t)))
        .into_iter()
        .collect()
}

fn trim_end(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &b[..n]
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(t: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(t))
    }

    #[test]
    fn only_the_script_emberd_wrote_is_listed_by_its_hash() {
        let svg = b"<svg><text>&lt;script&gt;</text>\
                    <script type=\"text/ecmascript\"><![CDATA[\nalert(1)\n]]></script>\n</svg>\n";
        let p = svg_policy(svg);
        assert!(
            p.contains(&format!("script-src 'sha256-{}';", b64(b"\nalert(1)\n"))),
            "{p}"
        );
        assert_eq!(script_hashes(svg).len(), 1);
        assert!(svg_policy(b"<svg/>").contains("script-src 'none'"));
    }

    /// A frame name or title that carries a `<script>` (were escaping ever
    /// to fail) gets no hash, whether it is a plain script, one written as
    /// emberd writes its own, or one at the end of the document.
    #[test]
    fn a_script_smuggled_in_a_frame_name_gets_no_hash() {
        let own = "<script type=\"text/ecmascript\"><![CDATA[\nmine()\n]]></script>\n</svg>\n";
        for smuggled in [
            "<script>evil()</script>",
            "<script type=\"text/ecmascript\"><![CDATA[evil()]]></script>",
            "<title><script>evil()</script></title>",
        ] {
            let svg = format!("<svg><g><title>{smuggled}</title><text>{smuggled}</text></g>{own}");
            let hashes = script_hashes(svg.as_bytes());
            assert_eq!(hashes, vec![b64(b"\nmine()\n")], "{smuggled}");
            let p = svg_policy(svg.as_bytes());
            assert!(!p.contains(&b64(b"evil()")), "{p}");
        }
        // A smuggled script last, with no script of emberd's after it: the
        // renderers always end with theirs, so this is not one of them.
        let svg = b"<svg><text><script>evil()</script></text></svg>";
        assert!(svg_policy(svg).contains("script-src 'none'"));
        // One nested in emberd's own (impossible for the renderers): none.
        let svg = b"<svg><script type=\"text/ecmascript\"><![CDATA[a<script>b()]]></script></svg>";
        assert!(svg_policy(svg).contains("script-src 'none'"));
    }

    /// The flame graph as rendered, of a frame named like a script: the
    /// policy lists the renderer's own script only.
    #[test]
    fn a_rendered_flame_graph_with_a_script_named_frame_lists_its_own_script_only() {
        let folded = "main;<script>evil()</script> 70\nmain;hot_b 30\n";
        let p = crate::render::folded::read(folded.as_bytes()).unwrap();
        let mut svg = Vec::new();
        crate::render::flamegraph::write(
            &p,
            &crate::render::flamegraph::SvgOptions::new("<script>evil()</script>", "samples"),
            &mut svg,
        )
        .unwrap();
        let text = String::from_utf8_lossy(own_script(&svg).expect("its own script is found"));
        assert!(!text.contains("evil"), "{text}");
        assert_eq!(script_hashes(&svg).len(), 1);
        assert!(!svg_policy(&svg).contains(&b64(b"evil()")));
    }

    /// Every renderer's script is its asset file as it is, the same text
    /// in every SVG: titles, units, phase labels and frame names are data
    /// (escaped attributes and text), so what they hold changes the
    /// document, never the script or its hash.
    #[test]
    fn every_renderer_writes_the_same_script_whatever_its_values() {
        use crate::query::columns::{Diff, Rewrite, Series};
        use crate::query::profile::test_profile as profile;
        use crate::render::{animation, diff, flamegraph};
        let evil = "\"]]></script><script>evil()</script>'";
        let plain = profile(&[("main;a", 3), ("main;b", 1)]);
        let hostile = profile(&[(&format!("main;{evil}"), 5), ("x", 2)]);
        let svgs = |p: &crate::query::profile::Profile, text: &str| -> [Vec<u8>; 3] {
            let mut fg = flamegraph::SvgOptions::new(text, text);
            fg.subtitle = Some(text.to_owned());
            let mut f = Vec::new();
            flamegraph::write(p, &fg, &mut f).unwrap();
            let mut dopts = diff::DiffSvgOptions::new(text, text);
            dopts.notes = vec![text.to_owned()];
            dopts.before = text.to_owned();
            let d = Diff::new(&plain, p, Rewrite::default(), None, true);
            let d = diff::render(&d, &dopts).0.into_bytes();
            let mut aopts = animation::AnimationOptions::new(text, vec![text.into(); 2], text);
            aopts.subtitle = Some(text.to_owned());
            let series = Series::from_profiles(&[&plain, p], Rewrite::default());
            let a = animation::render(&series, &aopts).0.into_bytes();
            [f, d, a]
        };
        let (fair, foul) = (svgs(&plain, "t"), svgs(&hostile, evil));
        for (fair, foul) in fair.iter().zip(&foul) {
            let mine = own_script(fair).expect("a script");
            assert_eq!(own_script(foul), Some(mine));
            assert_eq!(script_hashes(foul), script_hashes(fair));
            assert!(!String::from_utf8_lossy(foul).contains("evil()</script>"));
        }
    }
}
