//! A container's log files: the one the runtime writes and the ones rotation left beside it
//! (upstream `pkg/kubelet/logs/container_log_manager.go` `GetAllLogs`, `filterUnusedLogs`):
//! `0.log`, `0.log.<YYYYMMDD-hhmmss>` (the newest rotated one, uncompressed) and
//! `0.log.<YYYYMMDD-hhmmss>.gz`; `.tmp` files and uncompressed copies of a compressed one
//! are leftovers of an interrupted rotation, not logs.
//!
//! Every function here that touches a file blocks: callers run it on the blocking pool.

// Reviewed (issue 16): blocking helpers by contract; the log reader and the rotation call
// them in spawn_blocking.
#![allow(clippy::disallowed_methods)]

use std::io::Read;
use std::path::{Path, PathBuf};

/// Suffix of a compressed rotated log (upstream `compressSuffix`).
pub const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of a file being compressed (upstream `tmpSuffix`).
pub const TMP_SUFFIX: &str = ".tmp";

/// Every file named `<log>.*`, sorted by name (upstream's `filepath.Glob(log + ".*")`).
pub fn rotated_candidates(log: &Path) -> std::io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Splits `logs` into those in use and leftovers (upstream `filterUnusedLogs`).
pub fn filter_unused(logs: Vec<PathBuf>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let names: Vec<String> = logs.iter().map(|l| l.display().to_string()).collect();
    let mut in_use = Vec::new();
    let mut unused = Vec::new();
    for (log, name) in logs.into_iter().zip(&names) {
        let used = if name.ends_with(TMP_SUFFIX) {
            false
        } else if name.ends_with(COMPRESS_SUFFIX) {
            true
        } else {
            !names.contains(&format!("{name}{COMPRESS_SUFFIX}"))
        };
        if used {
            in_use.push(log);
        } else {
            unused.push(log);
        }
    }
    (in_use, unused)
}

/// The rotated logs of `log` still in use, oldest first, then `log` itself (upstream
/// `GetAllLogs`).
pub fn all_logs(log: &Path) -> std::io::Result<Vec<PathBuf>> {
    let (mut in_use, _) = filter_unused(rotated_candidates(log)?);
    in_use.sort();
    in_use.push(log.to_owned());
    Ok(in_use)
}

/// The content of a log file, decompressed when it ends in `.gz`.
pub fn read_log_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut out = Vec::new();
    if path.to_string_lossy().ends_with(COMPRESS_SUFFIX) {
        flate2::read::GzDecoder::new(file).read_to_end(&mut out)?;
    } else {
        std::io::BufReader::new(file).read_to_end(&mut out)?;
    }
    Ok(out)
}
