//! SPDY/3.1 frames (draft-mbelshe-httpbis-spdy-00 section 2.2 and 2.6; upstream's framer is
//! `github.com/moby/spdystream/spdy`, `types.go`, `read.go`, `write.go`, which the runtime's
//! streaming server speaks):
//!
//! - control frames: a set high bit, the version (3) and the type; 8 bits of flags and 24 of
//!   length; SYN_STREAM, SYN_REPLY and HEADERS carry a compressed header block
//!   ([`super::header_block`]);
//! - data frames: a clear high bit and the 31-bit stream id; flags ([`FLAG_FIN`] half-closes
//!   the sender's side of the stream) and length; the payload.
//!
//! A control frame of a type the draft does not define is read and skipped (section 2.2.1).

use tokio::io::{AsyncRead, AsyncReadExt};

use super::Error;
use super::header_block::{Compressor, Decompressor, Headers};

/// The protocol version of control frames.
pub(crate) const VERSION: u16 = 3;
/// FIN: the sender's last frame on the stream (upstream `DataFlagFin`, `ControlFlagFin`).
pub(crate) const FLAG_FIN: u8 = 0x01;
/// The largest payload of a frame (24-bit length; upstream `MaxDataLength`).
pub(crate) const MAX_LENGTH: usize = 0xff_ffff;
/// RST_STREAM status CANCEL (upstream `spdy.Cancel`), as upstream's `Stream.Reset` sends.
pub(crate) const CANCEL: u32 = 5;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// One frame, header blocks decompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// Opens stream `stream_id` with `headers` (upstream `SynStreamFrame`).
    SynStream {
        /// The new stream (odd from a client, even from a server).
        stream_id: u32,
        /// [`FLAG_FIN`], and `0x02` UNIDIRECTIONAL.
        flags: u8,
        /// 0 (highest) to 7.
        priority: u8,
        /// The stream's headers (`streamtype` for the remote command protocols).
        headers: Headers,
    },
    /// Accepts stream `stream_id` (upstream `SynReplyFrame`).
    SynReply {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The reply's headers.
        headers: Headers,
    },
    /// Ends stream `stream_id` abnormally (upstream `RstStreamFrame`).
    RstStream {
        /// The stream.
        stream_id: u32,
        /// Why (e.g. [`CANCEL`]).
        status: u32,
    },
    /// Settings; the kubelet reads and ignores them (upstream spdystream does too).
    Settings(Vec<(u8, u32, u32)>),
    /// A ping, answered with itself by the side that did not send it.
    Ping(u32),
    /// The sender ends the session (upstream `GoAwayFrame`).
    GoAway {
        /// The last stream the sender took.
        last_good_stream_id: u32,
        /// 0 OK, 1 PROTOCOL_ERROR, 2 INTERNAL_ERROR.
        status: u32,
    },
    /// More headers of a stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The headers.
        headers: Headers,
    },
    /// Flow control (SPDY/3.1); upstream's spdystream neither sends nor honours it.
    WindowUpdate {
        /// The stream (0: the session).
        stream_id: u32,
        /// Bytes the receiver takes more.
        delta: u32,
    },
    /// Data on stream `stream_id`.
    Data {
        /// The stream.
        stream_id: u32,
        /// [`FLAG_FIN`].
        flags: u8,
        /// The payload.
        data: Vec<u8>,
    },
    /// A control frame of a type the draft does not define (skipped).
    Unknown(u16),
}

fn control_head(kind: u16, flags: u8, length: usize) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + length);
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.extend_from_slice(&((u32::from(flags) << 24) | length as u32).to_be_bytes());
    frame
}

fn control(kind: u16, flags: u8, words: &[u32], rest: &[u8]) -> Result<Vec<u8>, Error> {
    let length = words.len() * 4 + rest.len();
    if length > MAX_LENGTH {
        return Err(Error::InvalidFrame("frame too large"));
    }
    let mut frame = control_head(kind, flags, length);
    for word in words {
        frame.extend_from_slice(&word.to_be_bytes());
    }
    frame.extend_from_slice(rest);
    Ok(frame)
}

/// Writes frames: one side of a connection (its header compression state).
pub(crate) struct Encoder {
    compressor: Compressor,
}

impl Encoder {
    pub(crate) fn new() -> Result<Self, Error> {
        Ok(Self {
            compressor: Compressor::new()?,
        })
    }

    /// The wire bytes of `frame` (stream ids are 31 bits: the high bit is dropped).
    pub(crate) fn encode(&mut self, frame: &Frame) -> Result<Vec<u8>, Error> {
        const ID: u32 = 0x7fff_ffff;
        match frame {
            Frame::SynStream {
                stream_id,
                flags,
                priority,
                headers,
            } => {
                let block = self.compressor.compress(headers)?;
                // Associated-to stream 0; priority in the top 3 bits; slot 0.
                let mut rest = vec![(priority & 0x7) << 5, 0];
                rest.extend_from_slice(&block);
                control(SYN_STREAM, *flags, &[stream_id & ID, 0], &rest)
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => {
                let block = self.compressor.compress(headers)?;
                control(SYN_REPLY, *flags, &[stream_id & ID], &block)
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                let block = self.compressor.compress(headers)?;
                control(HEADERS, *flags, &[stream_id & ID], &block)
            }
            Frame::RstStream { stream_id, status } => {
                control(RST_STREAM, 0, &[stream_id & ID, *status], &[])
            }
            Frame::Settings(entries) => {
                let mut words = vec![entries.len() as u32];
                for (flags, id, value) in entries {
                    words.extend([(u32::from(*flags) << 24) | (id & 0xff_ffff), *value]);
                }
                control(SETTINGS, 0, &words, &[])
            }
            Frame::Ping(id) => control(PING, 0, &[*id], &[]),
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => control(GOAWAY, 0, &[last_good_stream_id & ID, *status], &[]),
            Frame::WindowUpdate { stream_id, delta } => {
                control(WINDOW_UPDATE, 0, &[stream_id & ID, delta & ID], &[])
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                if data.len() > MAX_LENGTH {
                    return Err(Error::InvalidFrame("frame too large"));
                }
                let mut frame = Vec::with_capacity(8 + data.len());
                frame.extend_from_slice(&(stream_id & ID).to_be_bytes());
                frame.extend_from_slice(
                    &((u32::from(*flags) << 24) | data.len() as u32).to_be_bytes(),
                );
                frame.extend_from_slice(data);
                Ok(frame)
            }
            Frame::Unknown(_) => Err(Error::InvalidFrame("an unknown frame is not sent")),
        }
    }
}

/// Reads frames off one side of a connection.
pub(crate) struct Decoder<R> {
    io: R,
    decompressor: Decompressor,
}

impl<R: AsyncRead + Unpin> Decoder<R> {
    pub(crate) fn new(io: R) -> Self {
        Self {
            io,
            decompressor: Decompressor::new(),
        }
    }

    /// The next frame; `None` at the end of the connection (between frames).
    pub(crate) async fn next(&mut self) -> Result<Option<Frame>, Error> {
        let mut head = [0u8; 8];
        if self.io.read(&mut head[..1]).await? == 0 {
            return Ok(None);
        }
        self.io.read_exact(&mut head[1..]).await?;
        let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let flags = head[4];
        let length = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
        let mut payload = vec![0u8; length];
        self.io.read_exact(&mut payload).await?;
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream_id: first,
                flags,
                data: payload,
            }));
        }
        if (first >> 16) & 0x7fff != u32::from(VERSION) {
            return Err(Error::InvalidFrame("unsupported SPDY version"));
        }
        self.control((first & 0xffff) as u16, flags, &payload)
            .map(Some)
    }

    fn control(&mut self, kind: u16, flags: u8, payload: &[u8]) -> Result<Frame, Error> {
        let word = |i: usize| -> Result<u32, Error> {
            payload
                .get(i * 4..i * 4 + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or(Error::InvalidFrame("control frame too short"))
        };
        let id = |i: usize| word(i).map(|w| w & 0x7fff_ffff);
        Ok(match kind {
            SYN_STREAM => {
                let stream_id = id(0)?;
                let priority = payload.get(8).map(|p| p >> 5).unwrap_or(0);
                let block = payload
                    .get(10..)
                    .ok_or(Error::InvalidFrame("control frame too short"))?;
                Frame::SynStream {
                    stream_id,
                    flags,
                    priority,
                    headers: self.decompressor.decompress(block)?,
                }
            }
            SYN_REPLY | HEADERS => {
                let stream_id = id(0)?;
                let headers = self.decompressor.decompress(&payload[4..])?;
                if kind == SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        flags,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        flags,
                        headers,
                    }
                }
            }
            RST_STREAM => Frame::RstStream {
                stream_id: id(0)?,
                status: word(1)?,
            },
            SETTINGS => {
                let count = word(0)? as usize;
                let mut entries = Vec::with_capacity(count.min(payload.len() / 8));
                for i in 0..count {
                    let flag_id = word(1 + 2 * i)?;
                    entries.push(((flag_id >> 24) as u8, flag_id & 0xff_ffff, word(2 + 2 * i)?));
                }
                Frame::Settings(entries)
            }
            PING => Frame::Ping(word(0)?),
            GOAWAY => Frame::GoAway {
                last_good_stream_id: id(0)?,
                status: word(1).unwrap_or(0),
            },
            WINDOW_UPDATE => Frame::WindowUpdate {
                stream_id: id(0)?,
                delta: id(1)?,
            },
            other => Frame::Unknown(other),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syn(stream_id: u32, kind: &str) -> Frame {
        Frame::SynStream {
            stream_id,
            flags: 0,
            priority: 0,
            headers: vec![("streamtype".into(), kind.into())],
        }
    }

    #[tokio::test]
    async fn frames_round_trip() {
        let frames = [
            syn(1, "error"),
            syn(3, "stdin"),
            Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: vec![],
            },
            Frame::Data {
                stream_id: 3,
                flags: 0,
                data: b"hello\n".to_vec(),
            },
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: vec![],
            },
            Frame::Headers {
                stream_id: 5,
                flags: FLAG_FIN,
                headers: vec![("a".into(), "b\0c".into())],
            },
            Frame::RstStream {
                stream_id: 5,
                status: CANCEL,
            },
            Frame::Settings(vec![(0, 7, 65536), (1, 4, 100)]),
            Frame::Ping(2),
            Frame::WindowUpdate {
                stream_id: 0,
                delta: 4096,
            },
            Frame::Data {
                stream_id: 7,
                flags: 0,
                data: vec![9; 70_000],
            },
            Frame::GoAway {
                last_good_stream_id: 3,
                status: 0,
            },
        ];
        let mut encoder = Encoder::new().expect("encoder");
        let mut wire = Vec::new();
        for frame in &frames {
            wire.extend(encoder.encode(frame).expect("encode"));
        }
        let mut decoder = Decoder::new(wire.as_slice());
        let mut got = Vec::new();
        while let Some(frame) = decoder.next().await.expect("valid") {
            got.push(frame);
        }
        assert_eq!(got, frames);
    }

    #[test]
    fn the_wire_format_is_the_drafts() {
        let mut encoder = Encoder::new().expect("encoder");
        // DATA: stream id, then flags and 24-bit length.
        let data = encoder
            .encode(&Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: b"hi".to_vec(),
            })
            .expect("data");
        assert_eq!(data, [0, 0, 0, 3, 1, 0, 0, 2, b'h', b'i']);
        // RST_STREAM: control bit, version 3, type 3, length 8.
        let rst = encoder
            .encode(&Frame::RstStream {
                stream_id: 5,
                status: CANCEL,
            })
            .expect("rst");
        assert_eq!(rst, [0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 5, 0, 0, 0, 5]);
        // SYN_STREAM: stream id, associated stream, priority, slot, then the block.
        let syn = encoder.encode(&syn(1, "error")).expect("syn");
        assert_eq!(syn[..4], [0x80, 3, 0, 1]);
        let length = u32::from_be_bytes([0, syn[5], syn[6], syn[7]]) as usize;
        assert_eq!(length, syn.len() - 8);
        assert_eq!(syn[8..18], [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    }

    #[tokio::test]
    async fn unknown_control_frames_are_skipped_and_bad_versions_refused() {
        let mut wire = vec![0x80, 3, 0, 0x20, 0, 0, 0, 2, 0xaa, 0xbb];
        wire.extend([0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]);
        let mut decoder = Decoder::new(wire.as_slice());
        assert_eq!(
            decoder.next().await.expect("valid"),
            Some(Frame::Unknown(0x20))
        );
        assert_eq!(decoder.next().await.expect("valid"), Some(Frame::Ping(1)));
        assert_eq!(decoder.next().await.expect("valid"), None);
        let v2 = [0x80u8, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1];
        assert!(Decoder::new(v2.as_slice()).next().await.is_err());
        // A frame cut short is an error, not the end.
        assert!(Decoder::new(&wire[..5]).next().await.is_err());
    }
}
