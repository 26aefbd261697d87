//! The Go duration parser of flags and the `KubeletConfiguration` file (`kubelet-bin`'s
//! `duration::parse`, Go `time.ParseDuration`), compiled from its source file (see the
//! target) rather than through the binary's crate.

/// Parses `data` as a Go duration.
pub fn run(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = super::duration::parse(s);
}
