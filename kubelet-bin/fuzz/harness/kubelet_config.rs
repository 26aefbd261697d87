//! The `KubeletConfiguration` file (`--config`, kubelet.config.k8s.io/v1beta1): read and
//! merged with the flags by the binary's `settings` modules, compiled in from their source
//! files (they are the binary's, not the library's). Any file gives settings or a usage
//! error, never a panic; accepted settings are the same when read again.

use std::ffi::OsStr;

use clap::Parser;

use super::settings::{Flags, Settings};

/// Reads `data` as the kubelet's config file.
pub fn run(data: &[u8]) {
    let work = super::scratch::dir("kubelet_config");
    let path = work.join("config.yaml");
    std::fs::write(&path, data).expect("scratch config file");
    let read = || {
        let flags = Flags::try_parse_from([
            OsStr::new("kubelet"),
            OsStr::new("--config"),
            path.as_os_str(),
            OsStr::new("--hostname-override"),
            OsStr::new("fuzz-node"),
        ])
        .expect("the flags parse");
        Settings::from_flags(flags)
    };
    match read() {
        Ok(settings) => {
            let again = read().expect("accepted twice");
            assert_eq!(settings, again, "the same file gives the same settings");
        }
        Err(e) => assert!(!e.0.is_empty(), "a usage error says why"),
    }
}
