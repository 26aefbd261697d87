//! The container log line parsers (`logs::parse::parse_cri`, `parse_docker_json`; upstream
//! `parseCRILog`, `parseDockerJSONLog`): lines a container writes, framed by the runtime.

/// Parses `data` as a log line in both formats.
pub fn run(data: &[u8]) {
    let _ = kubelet_core::logs::parse::parse_cri(data);
    let _ = kubelet_core::logs::parse::parse_docker_json(data);
}
