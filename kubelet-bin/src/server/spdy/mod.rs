//! A SPDY/3.1 client for the runtime's streaming server, so that a `v5.channel.k8s.io`
//! websocket session with stdin can be served by a runtime that speaks only v4 (containerd
//! 1.6): v4 over a websocket cannot half-close stdin, v4 over SPDY can (a FIN on the stdin
//! stream).
//!
//! - [`frame`]: the frames (upstream `github.com/moby/spdystream/spdy`, the framer under
//!   `k8s.io/apimachinery/pkg/util/httpstream/spdy`);
//! - [`header_block`]: the zlib-compressed name/value blocks with the SPDY/3 dictionary;
//! - [`remotecommand`]: the v4 remote command streams a client opens (upstream
//!   `k8s.io/client-go/tools/remotecommand/spdy.go`, `v2.go`–`v4.go`);
//! - [`relay`]: the relay of a v5 websocket client's channels to those streams and back.
//!
//! No well-kept Rust SPDY crate exists (the one published, `spdy-mux` 0.1, multiplexes SPDY
//! over websocket transports with its own stream-pair API), and the protocol is small: the
//! runtime's side (upstream spdystream) has no flow control, so neither has this client.

pub(crate) mod frame;
pub(crate) mod header_block;
pub(crate) mod relay;
pub(crate) mod remotecommand;

/// Why a SPDY session failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the connection.
    #[error("SPDY connection: {0}")]
    Io(#[from] std::io::Error),
    /// A frame that does not parse, or cannot be sent.
    #[error("invalid SPDY frame: {0}")]
    InvalidFrame(&'static str),
    /// A header block that does not compress.
    #[error("SPDY header compression: {0}")]
    Compress(#[from] flate2::CompressError),
    /// A header block that does not decompress.
    #[error("SPDY header decompression: {0}")]
    Decompress(#[from] flate2::DecompressError),
}
