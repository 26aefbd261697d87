//! Links the release `kubelet` with the code it runs when idle placed together (issue 17).
//!
//! The kernel maps an executable's code in 64 KiB pieces around each page fault, so the code
//! a process keeps resident depends on how the functions that run are spread over the file.
//! Once the idle kubelet has given its code pages back (`src/idle_trim.rs`), its periodic
//! loops fault back about 1,100 functions (0.9 MiB of code): spread over `.text` by the
//! default layout they kept 6.3 MiB resident, placed together 2.4 MiB.
//! `idle-functions.txt` lists them (`cargo xtask idle-order` writes it from the release
//! binary); LLD places them at the start of `.text`. Names the binary does not define (from
//! another toolchain or dependency version) are skipped, so a stale list costs only the gain,
//! never the build; the bench reports how many are still found.
//!
//! Only release builds for x86_64 Linux GNU with rustc's own linker (LLD, the default from
//! Rust 1.90) get the flags: GNU ld does not know `--symbol-ordering-file`.

use std::{env, path::PathBuf, process::Command};

/// The list, beside this script.
const ORDER_FILE: &str = "idle-functions.txt";

fn main() {
    println!("cargo::rerun-if-changed={ORDER_FILE}");
    println!("cargo::rerun-if-changed=build.rs");
    if !links_with_rust_lld() {
        return;
    }
    let Some(dir) = env::var_os("CARGO_MANIFEST_DIR") else {
        return;
    };
    let order = PathBuf::from(dir).join(ORDER_FILE);
    if !order.is_file() {
        return;
    }
    println!(
        "cargo::rustc-link-arg-bin=kubelet=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo::rustc-link-arg-bin=kubelet=-Wl,--no-warn-symbol-ordering");
}

/// A release build for `x86_64-unknown-linux-gnu` by rustc ≥ 1.90 with no linker chosen by
/// the user (`RUSTC_LINKER`, or linker flags in `RUSTFLAGS`): rustc links with its LLD then.
fn links_with_rust_lld() -> bool {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let rustflags = var("CARGO_ENCODED_RUSTFLAGS");
    var("PROFILE") == "release"
        && var("TARGET") == "x86_64-unknown-linux-gnu"
        && env::var_os("RUSTC_LINKER").is_none()
        && !rustflags.contains("linker")
        && !rustflags.contains("link-self-contained")
        && !rustflags.contains("fuse-ld")
        && rustc_minor().is_some_and(|minor| minor >= 90)
}

/// The minor version of the compiler Cargo runs (`rustc 1.95.0 (…)`).
fn rustc_minor() -> Option<u32> {
    let rustc = env::var_os("RUSTC")?;
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let version = String::from_utf8(out.stdout).ok()?;
    version
        .split_whitespace()
        .nth(1)?
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}
