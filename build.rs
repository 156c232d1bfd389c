//! Compiles `bpf/*.bpf.c` into libbpf-rs skeletons in `OUT_DIR`.
//!
//! No generated vmlinux.h: the programs use the kernel's UAPI headers, which on
//! Debian need the multiarch include directory for `asm/types.h`.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["profile", "events"];

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
    println!("cargo:rerun-if-changed=bpf/emberd.h");
    for header in [
        "buffers.h",
        "new_process.h",
        "unwind.h",
        "python.h",
        "walk.h",
        "runtime.h",
        "memory.h",
        "blockio.h",
    ] {
        println!("cargo:rerun-if-changed=bpf/{header}");
    }
}
