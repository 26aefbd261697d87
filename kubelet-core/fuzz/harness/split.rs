//! Inputs made of several parts: the parts are separated by lines `%%`.

/// The parts of `data` between lines `%%`.
pub fn parts(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while let Some(at) = rest.windows(4).position(|w| w == b"\n%%\n") {
        parts.push(&rest[..at]);
        rest = &rest[at + 4..];
    }
    parts.push(rest);
    parts
}
