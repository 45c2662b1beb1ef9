//! The one framed-record codec of the files the tool writes and reads back itself: the build
//! journal's pass files (the engine's journal) and the part files of a partitioned build
//! (the engine's partition module).
//!
//! A frame is a 12-byte head, then the payload (a postcard value): the payload's length as a
//! little-endian `u32`, then the payload's 64-bit xxh3 seeded with that length (little-endian
//! `u64`), so a flipped bit in the length or in the payload fails the check. A reader names the
//! frame (its index from 0, and the byte offset of its head) that it cannot use, and says
//! whether the damage is a *torn tail*: a frame cut short by the end of the file, or failing its
//! check while ending exactly at the end of the file (what a write cut off by a kill or a power
//! loss leaves). Damage anywhere else is corruption.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{self, Read};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Bytes before a frame's payload.
pub const HEAD: usize = 12;

/// The largest payload a frame holds (a row's record is a few hundred bytes; a rejected row's
/// message is bounded by the reader's row limit).
pub const MAX_FRAME: u32 = 1 << 30;

/// Why a frame cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame {index} at byte {offset} is cut short by the end of the file")]
    Torn { index: u64, offset: u64 },
    #[error("frame {index} at byte {offset} fails its checksum")]
    Corrupt {
        index: u64,
        offset: u64,
        /// The frame, as its length says, ends exactly at the end of the file.
        at_end: bool,
    },
    #[error("frame {index} at byte {offset} announces {len} bytes, over the 1 GiB limit")]
    TooLarge { index: u64, offset: u64, len: u32 },
    #[error("frame {index} at byte {offset} holds no record this tool reads: {message}")]
    Decode {
        index: u64,
        offset: u64,
        message: String,
    },
    #[error("failed to read frame {index} at byte {offset}: {source}")]
    Io {
        index: u64,
        offset: u64,
        source: io::Error,
    },
    #[error("a record of {0} bytes is over the 1 GiB limit of a frame")]
    Oversized(usize),
    #[error("failed to encode a record: {0}")]
    Encode(String),
}

impl FrameError {
    /// Damage a kill or power loss leaves at the end of a file being appended to: the frame
    /// is cut short, or fails its check and ends at the end of the file.
    pub fn is_torn_tail(&self) -> bool {
        matches!(
            self,
            FrameError::Torn { .. } | FrameError::Corrupt { at_end: true, .. }
        )
    }
}

/// `value` as one frame.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, FrameError> {
    let mut out =
        postcard::to_extend(value, vec![0; HEAD]).map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = out.len() - HEAD;
    let len32 = u32::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_FRAME)
        .ok_or(FrameError::Oversized(len))?;
    let sum = xxh3_64_with_seed(&out[HEAD..], u64::from(len32));
    out[..4].copy_from_slice(&len32.to_le_bytes());
    out[4..HEAD].copy_from_slice(&sum.to_le_bytes());
    Ok(out)
}

/// Reads frames one after another.
pub struct FrameReader<R> {
    reader: R,
    /// The file's length, to tell a torn tail from damage before it.
    len: u64,
    buffer: Vec<u8>,
    /// The next frame's index and byte offset.
    index: u64,
    offset: u64,
}

impl<R: Read> FrameReader<R> {
    /// Frames of `reader`, a file of `len` bytes read from its start.
    pub fn new(reader: R, len: u64) -> FrameReader<R> {
        FrameReader {
            reader,
            len,
            buffer: Vec::new(),
            index: 0,
            offset: 0,
        }
    }

    /// Bytes of the frames read whole so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Frames read whole so far (the index of the next one).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The next frame's value; `None` at the end of the file, after a whole frame.
    pub fn read<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        let (index, offset) = (self.index, self.offset);
        let io = |source| FrameError::Io {
            index,
            offset,
            source,
        };
        let mut head = [0u8; HEAD];
        match fill(&mut self.reader, &mut head).map_err(io)? {
            0 => return Ok(None),
            HEAD => {}
            _ => return Err(FrameError::Torn { index, offset }),
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let mut sum = [0u8; 8];
        sum.copy_from_slice(&head[4..]);
        let sum = u64::from_le_bytes(sum);
        let end = offset + HEAD as u64 + u64::from(len);
        if len > MAX_FRAME {
            // A length past the end of the file is a torn head as likely as a flipped bit.
            return Err(if end > self.len {
                FrameError::Torn { index, offset }
            } else {
                FrameError::TooLarge { index, offset, len }
            });
        }
        self.buffer.resize(len as usize, 0);
        if fill(&mut self.reader, &mut self.buffer).map_err(io)? < len as usize {
            return Err(FrameError::Torn { index, offset });
        }
        if xxh3_64_with_seed(&self.buffer, u64::from(len)) != sum {
            return Err(FrameError::Corrupt {
                index,
                offset,
                at_end: end == self.len,
            });
        }
        let value = postcard::from_bytes(&self.buffer).map_err(|e| FrameError::Decode {
            index,
            offset,
            message: e.to_string(),
        })?;
        self.index += 1;
        self.offset = end;
        Ok(Some(value))
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn fill(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(values: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for v in values {
            out.extend(to_vec(v).expect("encode"));
        }
        out
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<String>, FrameError> {
        let mut r = FrameReader::new(bytes, bytes.len() as u64);
        let mut out = Vec::new();
        while let Some(v) = r.read::<String>()? {
            out.push(v);
        }
        Ok(out)
    }

    #[test]
    fn frames_read_back_in_order() {
        let bytes = frames(&["a", "bc", ""]);
        assert_eq!(bytes.len(), 3 * HEAD + 2 + 3 + 1);
        assert_eq!(read_all(&bytes).expect("read"), ["a", "bc", ""]);
    }

    #[test]
    fn every_flipped_bit_is_caught_and_located() {
        let bytes = frames(&["first", "second", "third"]);
        let second = (HEAD + 6) as u64;
        for bit in 0..(bytes.len() * 8) {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let err = read_all(&damaged).expect_err("a flipped bit read back");
            // A bit of the second frame is reported as frame 1 at its offset.
            let byte = (bit / 8) as u64;
            if (second..second + HEAD as u64 + 7).contains(&byte) {
                let text = err.to_string();
                assert!(text.starts_with("frame 1 at byte 18 "), "{text}");
            }
        }
    }

    #[test]
    fn a_torn_tail_is_told_from_damage_before_it() {
        let bytes = frames(&["first", "second"]);
        for cut in 1..bytes.len() {
            match read_all(&bytes[..cut]) {
                Ok(v) => assert_eq!(cut, HEAD + 6, "{v:?}"),
                Err(e) => assert!(e.is_torn_tail(), "cut at {cut}: {e}"),
            }
        }
        // Damage in the last frame's payload, ending at the end of the file: a torn tail.
        let mut last = bytes.clone();
        let n = last.len();
        last[n - 1] ^= 1;
        assert!(read_all(&last).expect_err("damaged").is_torn_tail());
        // The same damage in the first frame is corruption.
        let mut first = bytes.clone();
        first[HEAD] ^= 1;
        let err = read_all(&first).expect_err("damaged");
        assert!(!err.is_torn_tail());
        assert_eq!(err.to_string(), "frame 0 at byte 0 fails its checksum");
    }
}
