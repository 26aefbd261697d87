//! A scratch directory per fuzz target and process, emptied before each input.

use std::path::PathBuf;

/// `$TMPDIR/kubelet-fuzz-<target>-<pid>`, empty.
pub fn dir(target: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kubelet-fuzz-{target}-{}", std::process::id()));
    remove(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Removes the scratch directory of `target` (when a corpus run ends).
pub fn clean(target: &str) {
    remove(&std::env::temp_dir().join(format!("kubelet-fuzz-{target}-{}", std::process::id())));
}

fn remove(dir: &std::path::Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("emptying the scratch directory {}: {e}", dir.display()),
    }
}
