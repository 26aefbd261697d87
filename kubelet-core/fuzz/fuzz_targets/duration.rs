//! The Go duration parser of flags and the `KubeletConfiguration` file (`kubelet-bin`'s
//! `duration::parse`, Go `time.ParseDuration`). Its source file is compiled in here rather
//! than depending on the binary's crate (which would build the whole kubelet under the
//! sanitizer).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../../kubelet-bin/src/duration.rs"]
#[allow(dead_code)]
mod duration;

fuzz_target!(|s: &str| {
    let _ = duration::parse(s);
});
