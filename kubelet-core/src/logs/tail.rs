//! Where the last `n` lines of a log start (upstream `pkg/util/tail/tail.go`
//! `FindTailLineStartIndex`): lines are counted by their newlines, reading blocks from the
//! end, so a file of any size costs what its tail costs.

use std::io::{Read, Seek, SeekFrom};

/// Size of the blocks read backwards (upstream `blockSize`).
const BLOCK_SIZE: u64 = 1024;

/// Where the tail starts and how many lines it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailStart {
    /// Offset of the first byte of the tail.
    pub offset: u64,
    /// Newline-terminated lines from `offset` to the end: `n`, or fewer when the whole
    /// input has fewer (then `offset` is 0).
    pub lines: u64,
}

/// The start of the last `n` lines of `f` (upstream `FindTailLineStartIndex`).
pub fn find_tail_line_start<F: Read + Seek>(f: &mut F, n: u64) -> std::io::Result<TailStart> {
    let size = f.seek(SeekFrom::End(0))?;
    let mut count = 0u64;
    let mut right = size;
    let mut left = size;
    let mut buf = Vec::new();
    while right > 0 && count <= n {
        left = right.saturating_sub(BLOCK_SIZE);
        let len = usize::try_from(right - left).unwrap_or(0);
        buf.resize(len, 0);
        f.seek(SeekFrom::Start(left))?;
        f.read_exact(&mut buf)?;
        count += count_newlines(&buf);
        right = left;
    }
    let mut offset = left;
    let mut block: &[u8] = &buf;
    while count > n {
        let Some(idx) = block.iter().position(|&b| b == b'\n') else {
            break;
        };
        block = &block[idx + 1..];
        offset += idx as u64 + 1;
        count -= 1;
    }
    Ok(TailStart {
        offset,
        lines: count,
    })
}

/// [`find_tail_line_start`] over bytes in memory.
pub fn tail_of(data: &[u8], n: u64) -> TailStart {
    find_tail_line_start(&mut std::io::Cursor::new(data), n).unwrap_or(TailStart {
        offset: 0,
        lines: count_newlines(data),
    })
}

fn count_newlines(data: &[u8]) -> u64 {
    data.iter().filter(|&&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_as_upstream() {
        let data = b"a\nb\nc\n";
        assert_eq!(
            tail_of(data, 0),
            TailStart {
                offset: 6,
                lines: 0
            }
        );
        assert_eq!(
            tail_of(data, 2),
            TailStart {
                offset: 2,
                lines: 2
            }
        );
        assert_eq!(
            tail_of(data, 3),
            TailStart {
                offset: 0,
                lines: 3
            }
        );
        assert_eq!(
            tail_of(data, 10),
            TailStart {
                offset: 0,
                lines: 3
            }
        );
        // An unterminated last line is not counted (upstream counts newlines).
        assert_eq!(
            tail_of(b"a\nb\nc", 1),
            TailStart {
                offset: 2,
                lines: 1
            }
        );
        assert_eq!(
            tail_of(b"", 5),
            TailStart {
                offset: 0,
                lines: 0
            }
        );
    }

    #[test]
    fn tails_across_blocks() {
        let line = format!("{}\n", "x".repeat(299));
        let data = line.repeat(20);
        let t = tail_of(data.as_bytes(), 7);
        assert_eq!(
            t,
            TailStart {
                offset: 300 * 13,
                lines: 7
            }
        );
    }
}
