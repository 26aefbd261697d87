//! The static pod manifest decoder (`config::static_pod::decode`, upstream
//! `tryDecodeSinglePod`): YAML or JSON bytes from a file the kubelet does not control. Any
//! input must give a pod or an error, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kubelet_core::config::static_pod::decode(data, Path::new("/fuzz/pod.yaml"), "node-1");
});
