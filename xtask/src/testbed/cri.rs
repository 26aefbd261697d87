//! Just enough gRPC to ask CRI `runtime.v1.RuntimeService/Status` whether the runtime and the
//! network are ready, so xtask needs neither tonic nor generated CRI code.
//!
//! One HTTP/2 connection, one stream: the client preface, SETTINGS, a HEADERS frame with HPACK
//! literals, and a DATA frame carrying an empty `StatusRequest`. The reply's DATA is decoded as
//! protobuf by hand; response headers are skipped (never decoded, so HPACK state does not matter).

use std::{
    io::{Read, Write},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use anyhow::{Context, Result, bail};

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;

/// One CRI `RuntimeCondition`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Condition {
    /// `RuntimeReady` or `NetworkReady` (or another the runtime adds).
    pub kind: String,
    /// Whether the condition holds.
    pub status: bool,
    /// A short CamelCase reason when it does not.
    pub reason: String,
    /// A human-readable message when it does not.
    pub message: String,
}

/// Calls CRI `RuntimeService/Status` on the unix socket and returns the runtime conditions.
pub fn runtime_status(socket: &Path, timeout: Duration) -> Result<Vec<Condition>> {
    let mut conn = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to {}", socket.display()))?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;

    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, SETTINGS, 0, 0, &[]);
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/runtime.v1.RuntimeService/Status"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        // Literal header field without indexing, new name (RFC 7541 6.2.2), no Huffman.
        block.push(0);
        for s in [name, value] {
            hpack_int(&mut block, s.len(), 7);
            block.extend_from_slice(s.as_bytes());
        }
    }
    frame(&mut out, HEADERS, END_HEADERS, 1, &block);
    // An empty StatusRequest: not compressed, length 0.
    frame(&mut out, DATA, END_STREAM, 1, &[0, 0, 0, 0, 0]);
    conn.write_all(&out)?;

    let mut body = Vec::new();
    loop {
        let mut head = [0u8; 9];
        conn.read_exact(&mut head)
            .context("CRI connection closed before a reply")?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0; len];
        conn.read_exact(&mut payload)?;
        match kind {
            SETTINGS if flags & ACK == 0 => {
                let mut ack = Vec::new();
                frame(&mut ack, SETTINGS, ACK, 0, &[]);
                conn.write_all(&ack)?;
            }
            PING if flags & ACK == 0 => {
                let mut pong = Vec::new();
                frame(&mut pong, PING, ACK, 0, &payload);
                conn.write_all(&pong)?;
            }
            DATA if stream == 1 => {
                let data = if flags & PADDED != 0 {
                    let pad = usize::from(*payload.first().unwrap_or(&0));
                    payload
                        .get(1..payload.len().saturating_sub(pad))
                        .unwrap_or(&[])
                } else {
                    &payload[..]
                };
                body.extend_from_slice(data);
                if flags & END_STREAM != 0 {
                    break;
                }
            }
            HEADERS if stream == 1 && flags & END_STREAM != 0 => break,
            RST_STREAM if stream == 1 => bail!("CRI Status: stream reset"),
            GOAWAY => bail!("CRI Status: connection refused (GOAWAY)"),
            _ => {}
        }
    }
    if body.len() < 5 {
        bail!("CRI Status returned no message (is the CRI plugin serving yet?)");
    }
    let msg_len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let msg = body
        .get(5..5 + msg_len)
        .context("CRI Status: truncated message")?;
    decode_status(msg)
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 5.1); the prefix bits above are zero.
fn hpack_int(out: &mut Vec<u8>, mut value: usize, n: u32) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(value as u8);
        return;
    }
    out.push(max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128 + 128) as u8);
        value /= 128;
    }
    out.push(value as u8);
}

/// `StatusResponse { RuntimeStatus status = 1 }`, `RuntimeStatus { repeated RuntimeCondition
/// conditions = 1 }`, `RuntimeCondition { type = 1, status = 2, reason = 3, message = 4 }`.
fn decode_status(msg: &[u8]) -> Result<Vec<Condition>> {
    let mut conditions = Vec::new();
    for (num, field) in fields(msg)? {
        let (1, Field::Bytes(status)) = (num, field) else {
            continue;
        };
        for (num, field) in fields(status)? {
            let (1, Field::Bytes(raw)) = (num, field) else {
                continue;
            };
            let mut c = Condition::default();
            for (num, field) in fields(raw)? {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                match (num, field) {
                    (1, Field::Bytes(b)) => c.kind = text(b),
                    (2, Field::Varint(v)) => c.status = v != 0,
                    (3, Field::Bytes(b)) => c.reason = text(b),
                    (4, Field::Bytes(b)) => c.message = text(b),
                    _ => {}
                }
            }
            conditions.push(c);
        }
    }
    Ok(conditions)
}

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The top-level fields of a protobuf message.
fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < buf.len() {
        let key = varint(buf, &mut i)?;
        let field = match key & 7 {
            0 => Field::Varint(varint(buf, &mut i)?),
            2 => {
                let len = varint(buf, &mut i)? as usize;
                let bytes = buf.get(i..i + len).context("protobuf: truncated field")?;
                i += len;
                Field::Bytes(bytes)
            }
            1 => {
                i += 8;
                Field::Fixed
            }
            5 => {
                i += 4;
                Field::Fixed
            }
            wire => bail!("protobuf: unsupported wire type {wire}"),
        };
        out.push((key >> 3, field));
    }
    Ok(out)
}

fn varint(buf: &[u8], i: &mut usize) -> Result<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*i).context("protobuf: truncated varint")?;
        *i += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    bail!("protobuf: varint too long")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_status_response() {
        // conditions: {type: "RuntimeReady", status: true}, {type: "NetworkReady", status: false,
        // reason: "R", message: "M"}
        let c1 = [&[0x0a, 12][..], b"RuntimeReady", &[0x10, 1]].concat();
        let c2 = [
            &[0x0a, 12][..],
            b"NetworkReady",
            &[0x10, 0, 0x1a, 1, b'R', 0x22, 1, b'M'],
        ]
        .concat();
        let status = [
            &[0x0a, c1.len() as u8][..],
            &c1,
            &[0x0a, c2.len() as u8],
            &c2,
        ]
        .concat();
        let msg = [&[0x0a, status.len() as u8][..], &status].concat();
        let got = decode_status(&msg).expect("decodes");
        assert_eq!(got.len(), 2);
        assert!(got[0].status && got[0].kind == "RuntimeReady");
        assert!(!got[1].status && got[1].reason == "R" && got[1].message == "M");
    }

    #[test]
    fn hpack_integers() {
        let mut out = Vec::new();
        hpack_int(&mut out, 10, 7);
        hpack_int(&mut out, 1337, 5);
        assert_eq!(out, [10, 31, 154, 10]);
    }
}
