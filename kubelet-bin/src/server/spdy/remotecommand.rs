//! The v4 remote command protocol over SPDY/3.1, client side (upstream
//! `k8s.io/client-go/tools/remotecommand/spdy.go` `NewSPDYExecutor`, and `v2.go`–`v4.go`
//! `createStreams`): the upgrade asks for `SPDY/3.1` with `X-Stream-Protocol-Version:
//! v4.channel.k8s.io`, then the client opens one stream per requested standard stream, each
//! named by its `streamType` header, in upstream's order: `error`, `stdin`, `stdout`,
//! `stderr`, and `resize` for a terminal. The runtime (upstream
//! `kubelet/pkg/cri/streaming/remotecommand/httpstream.go` `waitForStreams`) starts the
//! command once it has as many streams as the request's options ask for; it writes the exit
//! status as a v4 `Status` JSON on the error stream.

use kubelet_core::runtime::StreamOptions;

use super::frame::Frame;

/// The `Upgrade` of a SPDY request (upstream `HeaderSpdy31`).
pub(crate) const UPGRADE: &str = "SPDY/3.1";
/// The request header naming the remote command protocols offered (upstream
/// `httpstream.HeaderProtocolVersion`).
pub(crate) const PROTOCOL_HEADER: &str = "x-stream-protocol-version";
/// The protocol spoken to the runtime.
pub(crate) const V4: &str = "v4.channel.k8s.io";

/// The channels of the `channel.k8s.io` websocket protocols (upstream
/// `k8s.io/apimachinery/pkg/util/remotecommand` `StreamStdIn`…`StreamResize`).
pub(crate) mod channel {
    /// Standard input.
    pub(crate) const STDIN: u8 = 0;
    /// Standard output.
    pub(crate) const STDOUT: u8 = 1;
    /// Standard error.
    pub(crate) const STDERR: u8 = 2;
    /// The error stream: the v4 `Status` at the end.
    pub(crate) const ERROR: u8 = 3;
    /// Terminal size changes (JSON `TerminalSize`).
    pub(crate) const RESIZE: u8 = 4;
}

/// Which SPDY stream carries which channel in one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Streams(Vec<(u8, u32)>);

impl Streams {
    /// The streams upstream's client opens for `options`, in its order, with the client's
    /// stream ids (1, 3, 5, …).
    pub(crate) fn for_options(options: &StreamOptions) -> Self {
        let wanted = [
            (channel::ERROR, true),
            (channel::STDIN, options.stdin),
            (channel::STDOUT, options.stdout),
            (channel::STDERR, options.stderr && !options.tty),
            (channel::RESIZE, options.tty),
        ];
        let channels = wanted.into_iter().filter(|(_, on)| *on).map(|(c, _)| c);
        Self(channels.zip((1u32..).step_by(2)).collect())
    }

    /// The SYN_STREAM frames that open the streams.
    pub(crate) fn syn_streams(&self) -> Vec<Frame> {
        self.0
            .iter()
            .map(|&(channel, stream_id)| Frame::SynStream {
                stream_id,
                flags: 0,
                priority: 0,
                headers: vec![("streamtype".to_owned(), stream_type(channel).to_owned())],
            })
            .collect()
    }

    /// The session's stream ids.
    pub(crate) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().map(|(_, s)| *s)
    }

    /// The stream of `channel`, if the session has one.
    pub(crate) fn stream(&self, channel: u8) -> Option<u32> {
        self.0.iter().find(|(c, _)| *c == channel).map(|(_, s)| *s)
    }

    /// The channel of `stream_id`, if it is one of the session's.
    pub(crate) fn channel(&self, stream_id: u32) -> Option<u8> {
        self.0
            .iter()
            .find(|(_, s)| *s == stream_id)
            .map(|(c, _)| *c)
    }
}

/// Upstream's `streamType` header value of `channel` (`v1.StreamTypeStdin`, …).
fn stream_type(channel: u8) -> &'static str {
    match channel {
        channel::STDIN => "stdin",
        channel::STDOUT => "stdout",
        channel::STDERR => "stderr",
        channel::RESIZE => "resize",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(streams: &Streams) -> Vec<(u32, String)> {
        streams
            .syn_streams()
            .into_iter()
            .filter_map(|f| match f {
                Frame::SynStream {
                    stream_id, headers, ..
                } => Some((stream_id, headers[0].1.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_streams_are_upstreams_in_its_order() {
        let all = Streams::for_options(&StreamOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        });
        assert_eq!(
            types(&all),
            [
                (1, "error".to_owned()),
                (3, "stdin".to_owned()),
                (5, "stdout".to_owned()),
                (7, "stderr".to_owned()),
            ]
        );
        assert_eq!(all.stream(channel::STDIN), Some(3));
        assert_eq!(all.channel(7), Some(channel::STDERR));
        assert_eq!(all.stream(channel::RESIZE), None);
        assert_eq!(all.channel(9), None);

        // A terminal: no stderr, a resize stream.
        let tty = Streams::for_options(&StreamOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        });
        assert_eq!(
            types(&tty),
            [
                (1, "error".to_owned()),
                (3, "stdin".to_owned()),
                (5, "stdout".to_owned()),
                (7, "resize".to_owned()),
            ]
        );
    }
}
