//! SPDY/3 name/value header blocks (draft-mbelshe-httpbis-spdy-00 section 2.6.10; upstream's
//! framer is `github.com/moby/spdystream/spdy`, `writeHeaderValueBlock` and
//! `parseHeaderValueBlock`): a 32-bit count, then each name and value with a 32-bit length
//! (names lowercase, several values of one name joined by NUL), zlib-compressed with the
//! SPDY/3 dictionary as one zlib stream per direction of a connection, each block ended by a
//! sync flush.

use std::sync::LazyLock;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

use super::Error;

/// A header block's names and values in order (names lowercase; NUL separates the values of
/// a name that has several, as upstream's `headerValueSeparator`).
pub(crate) type Headers = Vec<(String, String)>;

/// The largest header block the kubelet takes, decompressed.
const MAX_BLOCK: usize = 1 << 20;

/// The words of the SPDY/3 dictionary, each preceded by its 32-bit length in the dictionary.
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// The rest of the SPDY/3 dictionary, as it is (no lengths).
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 ",
    "Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 ",
    "Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, ",
    "Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// The SPDY/3 header compression dictionary (section 2.6.10.1; upstream
/// `headerDictionary`), 1423 bytes.
pub(crate) fn dictionary() -> &'static [u8] {
    static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(|| {
        let mut dictionary = Vec::with_capacity(1423);
        for word in DICTIONARY_WORDS {
            dictionary.extend_from_slice(&(word.len() as u32).to_be_bytes());
            dictionary.extend_from_slice(word.as_bytes());
        }
        dictionary.extend_from_slice(DICTIONARY_TAIL.as_bytes());
        dictionary
    });
    &DICTIONARY
}

/// The uncompressed block of `headers` (names lowercased, as upstream writes them).
fn encode_block(headers: &[(String, String)]) -> Vec<u8> {
    let mut block = Vec::new();
    block.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        block.extend_from_slice(&(name.len() as u32).to_be_bytes());
        block.extend_from_slice(name.as_bytes());
        block.extend_from_slice(&(value.len() as u32).to_be_bytes());
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// The names and values of an uncompressed block.
fn parse_block(mut block: &[u8]) -> Result<Headers, Error> {
    fn take<'a>(block: &mut &'a [u8], n: usize) -> Result<&'a [u8], Error> {
        if block.len() < n {
            return Err(Error::InvalidFrame("truncated header block"));
        }
        let (head, rest) = block.split_at(n);
        *block = rest;
        Ok(head)
    }
    fn length(block: &mut &[u8]) -> Result<usize, Error> {
        let bytes = take(block, 4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize)
    }
    fn string(block: &mut &[u8]) -> Result<String, Error> {
        let n = length(block)?;
        Ok(String::from_utf8_lossy(take(block, n)?).into_owned())
    }
    let count = length(&mut block)?;
    // Each pair takes 8 bytes at least: a count beyond that is a lie.
    let mut headers = Vec::with_capacity(count.min(block.len() / 8));
    for _ in 0..count {
        let name = string(&mut block)?;
        let value = string(&mut block)?;
        headers.push((name, value));
    }
    Ok(headers)
}

/// Compresses the header blocks one side of a connection sends.
pub(crate) struct Compressor(Compress);

impl Compressor {
    /// A zlib stream at best compression over the SPDY/3 dictionary (upstream
    /// `zlib.NewWriterLevelDict(…, zlib.BestCompression, headerDictionary)`).
    pub(crate) fn new() -> Result<Self, Error> {
        let mut compress = Compress::new(Compression::best(), true);
        compress.set_dictionary(dictionary())?;
        Ok(Self(compress))
    }

    /// The compressed block of `headers`, flushed so the peer can read it at once.
    pub(crate) fn compress(&mut self, headers: &[(String, String)]) -> Result<Vec<u8>, Error> {
        let block = encode_block(headers);
        let start = self.0.total_in();
        let mut out = Vec::with_capacity(block.len() + 64);
        loop {
            let consumed = (self.0.total_in() - start) as usize;
            out.reserve(block.len() - consumed + 64);
            self.0
                .compress_vec(&block[consumed..], &mut out, FlushCompress::Sync)?;
            // Flushed once all input went in and the output did not fill up.
            if (self.0.total_in() - start) as usize == block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// Decompresses the header blocks one side of a connection receives.
pub(crate) struct Decompressor(Decompress);

impl Decompressor {
    /// A zlib stream that takes the SPDY/3 dictionary when the peer's stream asks for it.
    pub(crate) fn new() -> Self {
        Self(Decompress::new(true))
    }

    /// The names and values of the compressed `block`.
    pub(crate) fn decompress(&mut self, block: &[u8]) -> Result<Headers, Error> {
        let start = self.0.total_in();
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        loop {
            let (in_before, out_before) = (self.0.total_in(), self.0.total_out());
            let consumed = (in_before - start) as usize;
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(256));
            }
            match self
                .0
                .decompress_vec(&block[consumed..], &mut out, FlushDecompress::Sync)
            {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.0.set_dictionary(dictionary())?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            if out.len() > MAX_BLOCK {
                return Err(Error::InvalidFrame("header block too large"));
            }
            let consumed = (self.0.total_in() - start) as usize;
            if consumed == block.len() && out.len() < out.capacity() {
                return parse_block(&out);
            }
            if (self.0.total_in(), self.0.total_out()) == (in_before, out_before)
                && out.len() < out.capacity()
            {
                return Err(Error::InvalidFrame("header block does not decompress"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_dictionary_is_spdy_3s() {
        let dictionary = dictionary();
        assert_eq!(dictionary.len(), 1423);
        assert!(dictionary.starts_with(b"\0\0\0\x07options\0\0\0\x04head"));
        assert!(dictionary.ends_with(b",enq=0."));
        // Its Adler-32 is the DICTID a peer's zlib header names (as Go's and containerd's).
        let adler = Compress::new(Compression::best(), true)
            .set_dictionary(dictionary)
            .expect("dictionary");
        assert_eq!(adler, 0xe3c6_a7c2);
    }

    #[test]
    fn blocks_round_trip_through_one_stream_per_direction() {
        let mut compressor = Compressor::new().expect("compressor");
        let mut decompressor = Decompressor::new();
        let blocks = [
            headers(&[("streamtype", "error")]),
            headers(&[("streamtype", "stdin")]),
            headers(&[]),
            headers(&[("x-many", "a\0b"), ("content-type", "text/plain")]),
        ];
        for block in &blocks {
            let compressed = compressor.compress(block).expect("compress");
            assert_eq!(
                &decompressor.decompress(&compressed).expect("decompress"),
                block
            );
        }
        // Names go out lowercase, as upstream writes them.
        let compressed = compressor
            .compress(&headers(&[("StreamType", "stdout")]))
            .expect("compress");
        assert_eq!(
            decompressor.decompress(&compressed).expect("decompress"),
            headers(&[("streamtype", "stdout")])
        );
    }

    #[test]
    fn the_first_block_names_the_dictionary_and_uses_it() {
        let compressed = Compressor::new()
            .expect("compressor")
            .compress(&headers(&[("content-type", "text/plain")]))
            .expect("compress");
        // zlib header with FDICT, then the dictionary's Adler-32.
        assert_eq!(compressed[1] & 0x20, 0x20, "{compressed:02x?}");
        assert_eq!(compressed[2..6], 0xe3c6_a7c2u32.to_be_bytes());
        // Without the dictionary a plain zlib stream cannot read it.
        let mut plain = Decompress::new(true);
        let mut out = Vec::with_capacity(256);
        let err = plain
            .decompress_vec(&compressed, &mut out, FlushDecompress::Sync)
            .expect_err("needs the dictionary");
        assert_eq!(err.needs_dictionary(), Some(0xe3c6_a7c2));
    }

    #[test]
    fn corrupt_or_truncated_blocks_are_errors() {
        let mut compressor = Compressor::new().expect("compressor");
        let compressed = compressor
            .compress(&headers(&[("streamtype", "error")]))
            .expect("compress");
        assert!(Decompressor::new().decompress(&compressed[..3]).is_err());
        assert!(Decompressor::new().decompress(b"not zlib at all").is_err());
        assert!(parse_block(&[0, 0, 0, 2, 0, 0, 0, 1, b'a']).is_err());
    }
}
