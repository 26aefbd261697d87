//! Runs a fuzz target's checked-in inputs through its harness (the workspace's corpus tests).

use std::path::{Path, PathBuf};

/// Every file of `<fuzz_crate>/fuzz/seeds/<target>/` (seeds, and the inputs of crashes found
/// and fixed since; `fuzz_crate` is `kubelet-core` or `kubelet-bin`) and of `extra`
/// directories through `run`; a panic names the input.
pub fn run_all(fuzz_crate: &str, target: &str, extra: &[&Path], run: fn(&[u8])) {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(fuzz_crate)
        .join("fuzz/seeds")
        .join(target);
    let mut inputs: Vec<PathBuf> = Vec::new();
    for dir in std::iter::once(seeds.as_path()).chain(extra.iter().copied()) {
        let entries = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("the inputs of {target} in {}: {e}", dir.display()));
        inputs.extend(entries.flatten().map(|e| e.path()));
    }
    inputs.sort();
    assert!(!inputs.is_empty(), "no inputs for {target}");
    for input in &inputs {
        let data = std::fs::read(input).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
        if std::panic::catch_unwind(|| run(&data)).is_err() {
            panic!("fuzz target {target} fails on {}", input.display());
        }
    }
    super::scratch::clean(target);
    println!("{target}: {} inputs", inputs.len());
}
