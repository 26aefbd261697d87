//! The websocket wire format (RFC 6455) that the kubelet speaks itself when it terminates a
//! `v5.channel.k8s.io` client ([`super::ws_v5`]): the opening handshake's accept key, and
//! frames read (fragmented messages joined, control frames as they come) and written
//! (masked towards a server, as the RFC requires of clients).

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A continuation frame.
const CONTINUATION: u8 = 0x0;
/// A text message.
pub(crate) const TEXT: u8 = 0x1;
/// A binary message (every `channel.k8s.io` protocol's data).
pub(crate) const BINARY: u8 = 0x2;
/// The closing handshake.
pub(crate) const CLOSE: u8 = 0x8;
/// A ping; answered with a pong carrying its payload.
pub(crate) const PING: u8 = 0x9;
/// A pong.
pub(crate) const PONG: u8 = 0xa;

/// The largest message the kubelet takes (a frame or a joined message).
pub(crate) const MAX_MESSAGE: usize = 16 << 20;

/// The `Sec-WebSocket-Accept` of a `Sec-WebSocket-Key` (RFC 6455 section 4.2.2).
pub(crate) fn accept_key(key: &str) -> String {
    const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}{GUID}").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// A message (or control frame): its opcode and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    /// [`TEXT`], [`BINARY`], [`CLOSE`], [`PING`] or [`PONG`].
    pub(crate) opcode: u8,
    /// The payload, unmasked.
    pub(crate) payload: Vec<u8>,
}

/// Reads messages off one side of a connection.
pub(crate) struct Reader<R> {
    io: R,
    /// A fragmented message being joined.
    partial: Option<Message>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub(crate) fn new(io: R) -> Self {
        Self { io, partial: None }
    }

    /// The next message, or control frame; `None` at the end of the connection.
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Message>> {
        loop {
            let Some((fin, opcode, payload)) = self.frame().await? else {
                return Ok(None);
            };
            if opcode >= CLOSE {
                return Ok(Some(Message { opcode, payload }));
            }
            let message = match (self.partial.take(), opcode) {
                (None, CONTINUATION) => return Err(invalid("a continuation of no message")),
                (None, _) => Message { opcode, payload },
                (Some(mut m), CONTINUATION) => {
                    if m.payload.len() + payload.len() > MAX_MESSAGE {
                        return Err(invalid("message too large"));
                    }
                    m.payload.extend_from_slice(&payload);
                    m
                }
                (Some(_), _) => return Err(invalid("a new message inside a fragmented one")),
            };
            if fin {
                return Ok(Some(message));
            }
            self.partial = Some(message);
        }
    }

    /// One frame: FIN, opcode, unmasked payload.
    async fn frame(&mut self) -> std::io::Result<Option<(bool, u8, Vec<u8>)>> {
        let mut head = [0u8; 2];
        match self.io.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
        let len = match head[1] & 0x7f {
            126 => u64::from(self.io.read_u16().await?),
            127 => self.io.read_u64().await?,
            n => u64::from(n),
        };
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= MAX_MESSAGE)
            .ok_or_else(|| invalid("frame too large"))?;
        let mask = if head[1] & 0x80 != 0 {
            let mut mask = [0u8; 4];
            self.io.read_exact(&mut mask).await?;
            Some(mask)
        } else {
            None
        };
        let mut payload = vec![0u8; len];
        self.io.read_exact(&mut payload).await?;
        if let Some(mask) = mask {
            apply_mask(&mut payload, mask);
        }
        Ok(Some((fin, opcode, payload)))
    }
}

fn invalid(what: &'static str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

fn apply_mask(payload: &mut [u8], mask: [u8; 4]) {
    for (i, byte) in payload.iter_mut().enumerate() {
        *byte ^= mask[i % 4];
    }
}

/// One unfragmented frame of `opcode` with `payload`, masked with a fresh key when `masked`
/// (a client's frames).
pub(crate) fn encode(opcode: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut frame = Vec::with_capacity(payload.len() + 14);
    frame.push(0x80 | opcode);
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => frame.push(mask_bit | n as u8),
        n if n <= usize::from(u16::MAX) => {
            frame.push(mask_bit | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(mask_bit | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let mask: [u8; 4] = rand::random();
        frame.extend_from_slice(&mask);
        let start = frame.len();
        frame.extend_from_slice(payload);
        apply_mask(&mut frame[start..], mask);
    } else {
        frame.extend_from_slice(payload);
    }
    frame
}

/// Writes one frame.
pub(crate) async fn send<W: AsyncWrite + Unpin>(
    io: &mut W,
    opcode: u8,
    payload: &[u8],
    masked: bool,
) -> std::io::Result<()> {
    io.write_all(&encode(opcode, payload, masked)).await?;
    io.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_rfc_6455s() {
        // RFC 6455 section 1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn frames_round_trip_masked_or_not_and_fragments_are_joined() {
        let mut wire = Vec::new();
        wire.extend(encode(BINARY, b"\x01hello", true));
        wire.extend(encode(PING, b"p", false));
        // A message in three fragments, a ping between them.
        wire.extend([0x02, 2, b'\x01', b'a']);
        wire.extend([0x00, 1, b'b']);
        wire.extend(encode(PING, b"q", true));
        wire.extend([0x80, 1, b'c']);
        let big = vec![7u8; 70_000];
        wire.extend(encode(BINARY, &big, true));
        wire.extend(encode(BINARY, &big[..300], false));
        let mut reader = Reader::new(wire.as_slice());
        let mut got = Vec::new();
        while let Some(m) = reader.next().await.expect("valid") {
            got.push(m);
        }
        let m = |opcode, payload: &[u8]| Message {
            opcode,
            payload: payload.to_vec(),
        };
        assert_eq!(
            got,
            [
                m(BINARY, b"\x01hello"),
                m(PING, b"p"),
                m(PING, b"q"),
                m(BINARY, b"\x01abc"),
                m(BINARY, &big),
                m(BINARY, &big[..300]),
            ]
        );
    }

    #[tokio::test]
    async fn a_continuation_of_nothing_is_refused() {
        let wire = [0x80u8, 1, b'x'];
        assert!(Reader::new(wire.as_slice()).next().await.is_err());
    }
}
