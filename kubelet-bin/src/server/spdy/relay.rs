//! The relay between a `v5.channel.k8s.io` websocket client and the runtime's v4 remote
//! command streams over SPDY ([`super::remotecommand`]), as upstream's kubelet-side
//! translation does (`kubelet/pkg/cri/streaming/remotecommand/websocket.go` for the v5
//! channels, `client-go/tools/remotecommand/v4.go` for the streams):
//!
//! - client to runtime: channel 0 (stdin) and 4 (resize) as DATA on the `stdin` and
//!   `resize` streams; the CLOSE signal `[255, 0]` (v5's `stdin.Close()`) as an empty DATA
//!   with FIN on `stdin`, the half-close v4 over a websocket cannot say; the client's close,
//!   or the end of its connection, resets every stream, sends GOAWAY and ends the runtime's
//!   connection (as upstream's client closes one);
//! - runtime to client: DATA on `stdout`, `stderr` and `error` (the v4 `Status` JSON with the
//!   exit code) as channels 1, 2 and 3; GOAWAY, or the end of the runtime's connection, closes
//!   the client's websocket (1000, normal);
//! - pings of either side are answered by the kubelet.
//!
//! The runtime's SYN_REPLYs, RST_STREAMs, SETTINGS and
//! WINDOW_UPDATEs change nothing here (upstream's server ends a session by resetting every
//! stream, then GOAWAY, then closing).

use std::collections::HashSet;

use kubelet_core::runtime::{ClosedBy, StreamOptions};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use super::Error;
use super::frame::{CANCEL, Decoder, Encoder, FLAG_FIN, Frame};
use super::remotecommand::{Streams, channel};
use crate::server::ws_frame::{self, BINARY, CLOSE, PING, PONG};

/// Upstream `remotecommand.StreamClose`: the channel of the CLOSE signal.
const STREAM_CLOSE: u8 = 255;
/// The largest DATA frame the relay sends (a client's message is cut into these).
const CHUNK: usize = 32 << 10;
/// The websocket close code of a normal end.
const NORMAL_CLOSURE: u16 = 1000;

/// The SPDY side's writer: the connection and its header compression state.
struct SpdyWriter<W> {
    io: W,
    encoder: Encoder,
}

impl<W: AsyncWrite + Unpin> SpdyWriter<W> {
    async fn send(&mut self, frame: &Frame) -> Result<(), Error> {
        let bytes = self.encoder.encode(frame)?;
        self.io.write_all(&bytes).await?;
        Ok(self.io.flush().await?)
    }
}

/// Relays the v5 `client` (after its upgrade) to the runtime's SPDY connection `runtime`
/// (after its upgrade) for a session with `options`, until either side ends; which did.
pub(crate) async fn relay<C, R>(client: C, runtime: R, options: StreamOptions) -> ClosedBy
where
    C: AsyncRead + AsyncWrite + Unpin,
    R: AsyncRead + AsyncWrite + Unpin,
{
    let streams = Streams::for_options(&options);
    let (client_read, client_write) = tokio::io::split(client);
    let (runtime_read, runtime_write) = tokio::io::split(runtime);
    let client_write = Mutex::new(client_write);
    let encoder = match Encoder::new() {
        Ok(encoder) => encoder,
        Err(e) => {
            tracing::warn!(error = %e, "v5 session over SPDY: header compression");
            return ClosedBy::Runtime;
        }
    };
    let runtime_write = Mutex::new(SpdyWriter {
        io: runtime_write,
        encoder,
    });
    for syn in streams.syn_streams() {
        if let Err(e) = runtime_write.lock().await.send(&syn).await {
            tracing::debug!(error = %e, "v5 session over SPDY: opening the streams");
            let _ = close_client(&client_write).await;
            return ClosedBy::Runtime;
        }
    }
    let upstream = from_client(client_read, &client_write, &runtime_write, &streams);
    let downstream = from_runtime(runtime_read, &client_write, &runtime_write, &streams);
    let closed_by = tokio::select! {
        () = upstream => ClosedBy::Client,
        () = downstream => ClosedBy::Runtime,
    };
    if closed_by == ClosedBy::Client {
        end_runtime(&runtime_write, &streams).await;
    }
    tracing::debug!(?closed_by, "v5 streaming session over SPDY ended");
    closed_by
}

/// Ends the runtime's side as upstream's client closes a connection: every stream reset
/// (CANCEL), then GOAWAY; best effort (the connection is dropped next anyway).
async fn end_runtime<W: AsyncWrite + Unpin>(runtime: &Mutex<SpdyWriter<W>>, streams: &Streams) {
    let mut runtime = runtime.lock().await;
    let resets = streams.ids().map(|stream_id| Frame::RstStream {
        stream_id,
        status: CANCEL,
    });
    let goaway = Frame::GoAway {
        last_good_stream_id: 0,
        status: 0,
    };
    for frame in resets.chain([goaway]) {
        if runtime.send(&frame).await.is_err() {
            return;
        }
    }
}

async fn close_client<W: AsyncWrite + Unpin>(client: &Mutex<W>) -> std::io::Result<()> {
    send_client(client, CLOSE, &NORMAL_CLOSURE.to_be_bytes()).await
}

async fn send_client<W: AsyncWrite + Unpin>(
    client: &Mutex<W>,
    opcode: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    ws_frame::send(&mut *client.lock().await, opcode, payload, false).await
}

/// Client to runtime: stdin and resize data as DATA frames, the CLOSE signal as FIN, pings
/// answered; returns when the client closed or failed.
async fn from_client<R, W1, W2>(
    read: R,
    client: &Mutex<W1>,
    runtime: &Mutex<SpdyWriter<W2>>,
    streams: &Streams,
) where
    R: AsyncRead + Unpin,
    W1: AsyncWrite + Unpin,
    W2: AsyncWrite + Unpin,
{
    let mut messages = ws_frame::Reader::new(read);
    // Streams the client half-closed.
    let mut finished = HashSet::new();
    let writable = |channel: u8| {
        [channel::STDIN, channel::RESIZE]
            .contains(&channel)
            .then(|| streams.stream(channel))
            .flatten()
    };
    loop {
        let sent = match messages.next().await {
            Ok(Some(m)) if m.opcode == BINARY => match m.payload.split_first() {
                Some((&STREAM_CLOSE, id)) => match id.first().and_then(|&c| writable(c)) {
                    Some(stream_id) if finished.insert(stream_id) => {
                        let fin = Frame::Data {
                            stream_id,
                            flags: FLAG_FIN,
                            data: Vec::new(),
                        };
                        runtime.lock().await.send(&fin).await
                    }
                    _ => Ok(()),
                },
                Some((&channel, data)) => match writable(channel) {
                    Some(stream_id) if !finished.contains(&stream_id) => {
                        send_data(runtime, stream_id, data).await
                    }
                    _ => Ok(()),
                },
                None => Ok(()),
            },
            Ok(Some(m)) if m.opcode == PING => send_client(client, PONG, &m.payload)
                .await
                .map_err(Error::from),
            Ok(Some(m)) if m.opcode == CLOSE => {
                let _ = send_client(client, CLOSE, &m.payload).await;
                return;
            }
            Ok(Some(_)) => Ok(()),
            Ok(None) | Err(_) => return,
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "v5 relay to the runtime over SPDY");
            return;
        }
    }
}

async fn send_data<W: AsyncWrite + Unpin>(
    runtime: &Mutex<SpdyWriter<W>>,
    stream_id: u32,
    data: &[u8],
) -> Result<(), Error> {
    let mut runtime = runtime.lock().await;
    for chunk in data.chunks(CHUNK) {
        let frame = Frame::Data {
            stream_id,
            flags: 0,
            data: chunk.to_vec(),
        };
        runtime.send(&frame).await?;
    }
    Ok(())
}

/// Runtime to client: each stream's data on its channel, the runtime's pings answered;
/// returns when the runtime went away (GOAWAY, the end of the connection, a bad frame),
/// having closed the client's websocket.
async fn from_runtime<R, W1, W2>(
    read: R,
    client: &Mutex<W1>,
    runtime: &Mutex<SpdyWriter<W2>>,
    streams: &Streams,
) where
    R: AsyncRead + Unpin,
    W1: AsyncWrite + Unpin,
    W2: AsyncWrite + Unpin,
{
    let mut frames = Decoder::new(read);
    loop {
        let sent = match frames.next().await {
            Ok(Some(Frame::Data {
                stream_id, data, ..
            })) => match streams.channel(stream_id) {
                Some(channel) if !data.is_empty() => {
                    let mut message = Vec::with_capacity(data.len() + 1);
                    message.push(channel);
                    message.extend_from_slice(&data);
                    send_client(client, BINARY, &message)
                        .await
                        .map_err(Error::from)
                }
                _ => Ok(()),
            },
            // Pings the runtime sent (even ids) are answered with themselves.
            Ok(Some(Frame::Ping(id))) if id % 2 == 0 => {
                runtime.lock().await.send(&Frame::Ping(id)).await
            }
            Ok(Some(Frame::RstStream { stream_id, status })) => {
                tracing::trace!(stream_id, status, "runtime reset a stream");
                Ok(())
            }
            Ok(Some(Frame::GoAway { .. })) | Ok(None) => {
                let _ = close_client(client).await;
                return;
            }
            Ok(Some(_)) => Ok(()),
            Err(e) => {
                tracing::debug!(error = %e, "v5 relay from the runtime over SPDY");
                let _ = close_client(client).await;
                return;
            }
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "v5 relay to the client");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::DuplexStream;

    use super::*;

    /// A relay over in-memory connections for a session with stdin and stdout; the client's
    /// and the runtime's far ends.
    fn start() -> (
        tokio::task::JoinHandle<ClosedBy>,
        DuplexStream,
        DuplexStream,
    ) {
        let (client, client_far) = tokio::io::duplex(1 << 16);
        let (runtime, runtime_far) = tokio::io::duplex(1 << 16);
        let options = StreamOptions {
            stdin: true,
            stdout: true,
            ..Default::default()
        };
        let relay = tokio::spawn(relay(client, runtime, options));
        (relay, client_far, runtime_far)
    }

    #[tokio::test]
    async fn runtime_pings_are_answered_and_its_goaway_closes_the_client() {
        let (relay, client, runtime) = start();
        let (runtime_read, mut runtime_write) = tokio::io::split(runtime);
        let mut frames = Decoder::new(runtime_read);
        let mut opened = Vec::new();
        for _ in 0..3 {
            match frames.next().await.expect("a frame") {
                Some(Frame::SynStream { stream_id, .. }) => opened.push(stream_id),
                other => panic!("not a SYN_STREAM: {other:?}"),
            }
        }
        assert_eq!(opened, [1, 3, 5]);
        let mut encoder = Encoder::new().expect("encoder");
        for frame in [
            Frame::Ping(2),
            Frame::Data {
                stream_id: 5,
                flags: 0,
                data: b"out".to_vec(),
            },
            // Data of a stream the session does not have is dropped.
            Frame::Data {
                stream_id: 9,
                flags: 0,
                data: b"stray".to_vec(),
            },
            Frame::GoAway {
                last_good_stream_id: 0,
                status: 0,
            },
        ] {
            let bytes = encoder.encode(&frame).expect("encode");
            runtime_write.write_all(&bytes).await.expect("write");
        }
        assert_eq!(frames.next().await.expect("a frame"), Some(Frame::Ping(2)));
        let mut messages = ws_frame::Reader::new(client);
        let m = messages.next().await.expect("read").expect("a message");
        assert_eq!((m.opcode, m.payload), (BINARY, b"\x01out".to_vec()));
        let m = messages.next().await.expect("read").expect("a message");
        assert_eq!((m.opcode, m.payload), (CLOSE, b"\x03\xe8".to_vec()));
        assert_eq!(relay.await.expect("relay"), ClosedBy::Runtime);
    }

    #[tokio::test]
    async fn a_client_that_goes_away_ends_the_session_and_data_after_fin_is_dropped() {
        let (relay, mut client, runtime) = start();
        let wire = [
            ws_frame::encode(BINARY, &[255, 0], true),
            ws_frame::encode(BINARY, b"\x00late", true),
            // stdout is not the client's to write.
            ws_frame::encode(BINARY, b"\x01nope", true),
        ]
        .concat();
        client.write_all(&wire).await.expect("write");
        drop(client);
        assert_eq!(relay.await.expect("relay"), ClosedBy::Client);
        let mut frames = Decoder::new(runtime);
        let mut got = Vec::new();
        while let Ok(Some(frame)) = frames.next().await {
            got.push(frame);
        }
        let reset = |stream_id| Frame::RstStream {
            stream_id,
            status: CANCEL,
        };
        assert_eq!(
            got[3..],
            [
                Frame::Data {
                    stream_id: 3,
                    flags: FLAG_FIN,
                    data: vec![]
                },
                reset(1),
                reset(3),
                reset(5),
                Frame::GoAway {
                    last_good_stream_id: 0,
                    status: 0
                },
            ]
        );
    }
}
