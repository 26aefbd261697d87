//! One line of a container log file, in the CRI format or Docker's JSON format (upstream
//! `pkg/kubelet/kuberuntime/logs/logs.go` `parseCRILog`, `parseDockerJSONLog`,
//! `getParseFunc`).
//!
//! A CRI line is `<RFC3339Nano timestamp> <stdout|stderr> <tags> <content>`, where the first
//! tag is `P` (partial: the runtime split a long line, the next line continues it) or `F`
//! (full). A partial line's own newline is dropped, so writing the pieces in order joins them.

use k8s_openapi::jiff::Timestamp;

/// The stream a log line was written to (CRI `LogStreamType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// `stdout`.
    Stdout,
    /// `stderr`.
    Stderr,
}

/// One parsed log line (upstream `logMessage`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// When the runtime received it.
    pub timestamp: Timestamp,
    /// Where the container wrote it.
    pub stream: Stream,
    /// The content: with its newline for a full line, without for a partial one.
    pub log: Vec<u8>,
}

/// Why a line could not be parsed (the reader logs it and skips the line, as upstream).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// No space after the timestamp.
    #[error("timestamp is not found")]
    NoTimestamp,
    /// The timestamp is not RFC 3339.
    #[error("unexpected timestamp format: {0}")]
    Timestamp(String),
    /// No space after the stream type.
    #[error("stream type is not found")]
    NoStream,
    /// The stream is neither `stdout` nor `stderr`.
    #[error("unexpected stream type {0:?}")]
    StreamType(String),
    /// No space after the tags.
    #[error("log tag is not found")]
    NoTag,
    /// Not a Docker JSON log line either.
    #[error("unsupported log format: {0:?}")]
    Unsupported(String),
}

/// A line parser: CRI or Docker JSON, chosen from a file's first line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The CRI format.
    Cri,
    /// Docker's `json-file` format.
    DockerJson,
}

impl Format {
    /// The format `line` is in (upstream `getParseFunc`: CRI first, then Docker JSON).
    pub fn detect(line: &[u8]) -> Result<Self, ParseError> {
        if parse_cri(line).is_ok() {
            Ok(Self::Cri)
        } else if parse_docker_json(line).is_ok() {
            Ok(Self::DockerJson)
        } else {
            Err(ParseError::Unsupported(
                String::from_utf8_lossy(line).into_owned(),
            ))
        }
    }

    /// Parses one line (with its newline, if it has one) in this format.
    pub fn parse(self, line: &[u8]) -> Result<Message, ParseError> {
        match self {
            Self::Cri => parse_cri(line),
            Self::DockerJson => parse_docker_json(line),
        }
    }
}

fn split_space(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let idx = line.iter().position(|&b| b == b' ')?;
    Some((&line[..idx], &line[idx + 1..]))
}

/// Parses a CRI log line (upstream `parseCRILog`).
pub fn parse_cri(line: &[u8]) -> Result<Message, ParseError> {
    let (ts, rest) = split_space(line).ok_or(ParseError::NoTimestamp)?;
    let ts = std::str::from_utf8(ts).map_err(|e| ParseError::Timestamp(e.to_string()))?;
    let timestamp: Timestamp = ts
        .parse()
        .map_err(|e: k8s_openapi::jiff::Error| ParseError::Timestamp(e.to_string()))?;
    let (stream, rest) = split_space(rest).ok_or(ParseError::NoStream)?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => {
            return Err(ParseError::StreamType(
                String::from_utf8_lossy(other).into_owned(),
            ));
        }
    };
    let (tags, content) = split_space(rest).ok_or(ParseError::NoTag)?;
    let partial = tags.split(|&b| b == b':').next() == Some(b"P");
    let mut log = content.to_vec();
    if partial && log.last() == Some(&b'\n') {
        log.pop();
    }
    Ok(Message {
        timestamp,
        stream,
        log,
    })
}

#[derive(serde::Deserialize)]
struct JsonLog {
    #[serde(default)]
    log: String,
    #[serde(default)]
    stream: String,
    time: String,
}

/// Parses a Docker JSON log line (upstream `parseDockerJSONLog`).
pub fn parse_docker_json(line: &[u8]) -> Result<Message, ParseError> {
    let l: JsonLog = serde_json::from_slice(line)
        .map_err(|_| ParseError::Unsupported(String::from_utf8_lossy(line).into_owned()))?;
    let stream = match l.stream.as_str() {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        other => return Err(ParseError::StreamType(other.to_owned())),
    };
    let timestamp = l
        .time
        .parse()
        .map_err(|e: k8s_openapi::jiff::Error| ParseError::Timestamp(e.to_string()))?;
    Ok(Message {
        timestamp,
        stream,
        log: l.log.into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test input is valid")
    }

    #[test]
    fn cri_full_and_partial_lines() {
        let m = parse_cri(b"2016-10-06T00:17:09.669794202Z stdout F log content 1\n")
            .expect("test input is valid");
        assert_eq!(m.timestamp, ts("2016-10-06T00:17:09.669794202Z"));
        assert_eq!(m.stream, Stream::Stdout);
        assert_eq!(m.log, b"log content 1\n");
        let m = parse_cri(b"2016-10-06T00:17:09.669794203Z stderr P part\n")
            .expect("test input is valid");
        assert_eq!(m.stream, Stream::Stderr);
        assert_eq!(m.log, b"part");
        // Tags after the first are kept for forward compatibility and ignored.
        let m = parse_cri(b"2016-10-06T00:17:09.669794203+02:00 stdout P:x y\n")
            .expect("test input is valid");
        assert_eq!(m.log, b"y");
        assert_eq!(m.timestamp, ts("2016-10-05T22:17:09.669794203Z"));
    }

    #[test]
    fn cri_errors_as_upstream() {
        assert_eq!(parse_cri(b"nospace"), Err(ParseError::NoTimestamp));
        assert!(matches!(
            parse_cri(b"yesterday stdout F x"),
            Err(ParseError::Timestamp(_))
        ));
        assert_eq!(
            parse_cri(b"2016-10-06T00:17:09Z stdout"),
            Err(ParseError::NoStream)
        );
        assert_eq!(
            parse_cri(b"2016-10-06T00:17:09Z stdin F x"),
            Err(ParseError::StreamType("stdin".into()))
        );
        assert_eq!(
            parse_cri(b"2016-10-06T00:17:09Z stdout F"),
            Err(ParseError::NoTag)
        );
    }

    #[test]
    fn docker_json_lines_and_detection() {
        let line =
            br#"{"log":"content 1\n","stream":"stderr","time":"2016-10-20T18:39:20.57606443Z"}"#;
        let m = parse_docker_json(line).expect("test input is valid");
        assert_eq!(m.stream, Stream::Stderr);
        assert_eq!(m.log, b"content 1\n");
        assert_eq!(Format::detect(line), Ok(Format::DockerJson));
        assert_eq!(
            Format::detect(b"2016-10-06T00:17:09Z stdout F x\n"),
            Ok(Format::Cri)
        );
        assert!(matches!(
            Format::detect(b"plain text\n"),
            Err(ParseError::Unsupported(_))
        ));
    }
}
