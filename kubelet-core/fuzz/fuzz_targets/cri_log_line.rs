//! The container log line parsers (`logs::parse::parse_cri`, `parse_docker_json`; upstream
//! `parseCRILog`, `parseDockerJSONLog`): lines a container writes, so any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    let _ = kubelet_core::logs::parse::parse_cri(line);
    let _ = kubelet_core::logs::parse::parse_docker_json(line);
});
