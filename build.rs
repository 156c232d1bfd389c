//! Compiles `bpf/*.bpf.c` into libbpf-rs skeletons in `OUT_DIR`, and turns
//! the enums of `bpf/emberd.h` into Rust constants (`bpf_enums.rs`, read by
//! `src/bpf.rs`), so the agent's indices and ids are the C list's own.
//!
//! No generated vmlinux.h: the programs use the kernel's UAPI headers, which on
//! Debian need the multiarch include directory for `asm/types.h`.

use std::collections::HashMap;
use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["profile", "events"];

/// Headers the programs include: a change to one rebuilds them.
const HEADERS: &[&str] = &[
    "emberd.h",
    "buffers.h",
    "new_process.h",
    "unwind.h",
    "python.h",
    "hotspot.h",
    "v8.h",
    "walk.h",
    "runtime.h",
    "events.h",
    "memory.h",
    "blockio.h",
];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    for name in PROGRAMS {
        let src = format!("bpf/{name}.bpf.c");
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([multiarch.as_str(), "-Wall", "-O2"])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| {
                panic!(
                    "building {src} failed: {e:#}\n\
                     hint: run ./scripts/setup (needs clang and libelf-dev)"
                )
            });
        println!("cargo:rerun-if-changed={src}");
    }
    for header in HEADERS {
        println!("cargo:rerun-if-changed=bpf/{header}");
    }
    let header = std::fs::read_to_string("bpf/emberd.h").expect("bpf/emberd.h is readable");
    let enums = c_enums(&header).unwrap_or_else(|e| panic!("bpf/emberd.h: {e}"));
    std::fs::write(out.join("bpf_enums.rs"), rust_consts(&enums)).expect("OUT_DIR is writable");
}

/// One C enum: its name and its enumerators with their values.
type CEnum = (String, Vec<(String, u64)>);

/// The enums of a C header, with their values worked out the way C does
/// (a value, `OTHER`, `OTHER + N`, or the last one plus one).
fn c_enums(text: &str) -> Result<Vec<CEnum>, String> {
    let text = strip_comments(text);
    let mut values: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = find_enum(rest) {
        rest = &rest[at + "enum".len()..];
        let open = rest.find('{').ok_or("an enum without a body")?;
        let name = rest[..open].trim().to_owned();
        let close = rest
            .find('}')
            .ok_or_else(|| format!("enum {name} is not closed"))?;
        let mut next = 0u64;
        let mut items = Vec::new();
        for item in rest[open + 1..close].split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (ident, value) = match item.split_once('=') {
                Some((ident, expr)) => (
                    ident.trim(),
                    eval(expr, &values)
                        .map_err(|e| format!("enum {name}: {ident}: {e}", ident = ident.trim()))?,
                ),
                None => (item, next),
            };
            values.insert(ident.to_owned(), value);
            items.push((ident.to_owned(), value));
            next = value + 1;
        }
        out.push((name, items));
        rest = &rest[close..];
    }
    Ok(out)
}

/// The offset of the next `enum NAME {` (a declaration, not a use such
/// as `enum stack_end` in a comment, which are stripped, or a field type).
fn find_enum(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find("enum ") {
        let at = from + i;
        let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
        let line_end = text[at..].find('\n').map_or(text.len(), |n| at + n);
        if text[line_start..at].trim().is_empty() && text[at..line_end].contains('{') {
            return Some(at);
        }
        from = at + 5;
    }
    None
}

/// `A + 6`, `0x10`, `B`: a sum of numbers and earlier enumerators.
fn eval(expr: &str, values: &HashMap<String, u64>) -> Result<u64, String> {
    expr.split('+').try_fold(0u64, |sum, term| {
        let term = term.trim().trim_end_matches(['U', 'L', 'u', 'l']);
        let v = if let Some(hex) = term.strip_prefix("0x") {
            u64::from_str_radix(hex, 16).ok()
        } else if term.starts_with(|c: char| c.is_ascii_digit()) {
            term.parse().ok()
        } else {
            values.get(term).copied()
        };
        v.map(|v| sum + v).ok_or_else(|| {
            format!("cannot work out {term:?} (numbers, earlier enumerators and + only)")
        })
    })
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        match (block, line) {
            (Some(b), l) if l.is_none_or(|l| b < l) => {
                out.push_str(&rest[..b]);
                let end = rest[b + 2..]
                    .find("*/")
                    .map_or(rest.len(), |e| b + 2 + e + 2);
                out.push(' ');
                rest = &rest[end..];
            }
            (_, Some(l)) => {
                out.push_str(&rest[..l]);
                rest = &rest[rest[l..].find('\n').map_or(rest.len(), |e| l + e)..];
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

fn rust_consts(enums: &[CEnum]) -> String {
    let mut s = String::from("// Generated by build.rs from bpf/emberd.h: do not edit.\n");
    for (name, items) in enums {
        for (ident, value) in items {
            let _ = writeln!(
                s,
                "/// `{ident}` of `enum {name}` in `bpf/emberd.h`.\npub const {ident}: u32 = {value};"
            );
        }
    }
    s
}
