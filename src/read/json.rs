//! JSON lines and JSON arrays. A `.jsonl` file is always lines; for `.json` (Hub datasets name
//! both `.json`) the first non-space byte decides: `[` is an array (streamed element by
//! element), anything else is JSON lines. A UTF-8 byte order mark at the start is skipped.

use super::sample::Counted;
use super::{Deferred, ReadError, ReadOptions, Record};
use crate::reject::RejectReason;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Receives (record index, line number for line formats, record); `false` stops the read.
type Sink<'a> = dyn FnMut(u64, Option<u64>, Record) -> bool + 'a;

pub(super) const BOM: &[u8] = b"\xEF\xBB\xBF";

pub fn read(
    path: &Path,
    lines: bool,
    options: &ReadOptions,
    sink: &mut Sink,
) -> Result<bool, ReadError> {
    let io = |e| ReadError::Io(path.to_owned(), e);
    let mut reader = open(path, options, true)?;
    if lines {
        return read_lines(path, reader, options, sink);
    }
    let first = loop {
        let buf = reader.fill_buf().map_err(io)?;
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(p) => break Some(buf[p]),
            None if buf.is_empty() => break None,
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    };
    match first {
        None => Ok(true),
        Some(b'[') => read_array(path, reader, options, sink),
        Some(_) => read_lines(path, reader, options, sink),
    }
}

/// The file for a whole read (its bytes counted for a sampled run), past a byte order mark at
/// its start when `skip_bom`.
fn open(
    path: &Path,
    options: &ReadOptions,
    skip_bom: bool,
) -> Result<BufReader<Counted<File>>, ReadError> {
    open_with(path, options, skip_bom, 1 << 20)
}

/// [`open`] with a buffer of `capacity` bytes.
fn open_with(
    path: &Path,
    options: &ReadOptions,
    skip_bom: bool,
    capacity: usize,
) -> Result<BufReader<Counted<File>>, ReadError> {
    let io = |e| ReadError::Io(path.to_owned(), e);
    let counter = options.sample.as_ref().map(|s| s.bytes_read.clone());
    let file = Counted::new(File::open(path).map_err(io)?, counter);
    let mut reader = BufReader::with_capacity(capacity, file);
    if skip_bom && reader.fill_buf().map_err(io)?.starts_with(BOM) {
        reader.consume(BOM.len());
    }
    Ok(reader)
}

/// Whether a `.json` file holds an array (its first byte after a byte order mark and
/// whitespace is `[`), rather than JSON lines.
pub(super) fn starts_with_array(path: &Path, counter: &Arc<AtomicU64>) -> Result<bool, ReadError> {
    let io = |e| ReadError::Io(path.to_owned(), e);
    let file = Counted::new(File::open(path).map_err(io)?, Some(counter.clone()));
    let mut reader = BufReader::with_capacity(16 << 10, file);
    if reader.fill_buf().map_err(io)?.starts_with(BOM) {
        reader.consume(BOM.len());
    }
    loop {
        let buf = reader.fill_buf().map_err(io)?;
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(p) => return Ok(buf[p] == b'['),
            None if buf.is_empty() => return Ok(false),
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

/// The JSON lines starting at the byte offsets `starts` (sorted), each with its offset as its
/// record index and no line number (unknown without reading up to it).
pub(super) fn read_line_starts(
    path: &Path,
    starts: &[u64],
    options: &ReadOptions,
    sink: &mut Sink,
) -> Result<bool, ReadError> {
    let io = |e| ReadError::Io(path.to_owned(), e);
    let counter = options.sample.as_ref().map(|s| s.bytes_read.clone());
    let file = Counted::new(File::open(path).map_err(io)?, counter);
    // Small: a seek discards what is buffered.
    let mut reader = BufReader::with_capacity(16 << 10, file);
    for &start in starts {
        reader.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut line = Vec::new();
        let record = match next_line(&mut reader, &mut line, options.max_row_bytes).map_err(io)? {
            None => continue,
            Some(Line::TooLong(bytes)) => Record::TooLarge {
                bytes,
                limit: options.max_row_bytes,
            },
            Some(Line::Kept) if line.iter().all(u8::is_ascii_whitespace) => Record::Blank,
            Some(Line::Kept) => Record::Line(line),
        };
        if !sink(start, None, record) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The lines whose first byte is in `lo..hi`, numbered from the first of them (record 0, line
/// 1): a byte range of a partitioned build. A line that starts before `lo` belongs to the range
/// before; the byte order mark is skipped only at the start of the file.
pub(super) fn read_line_range(
    path: &Path,
    lo: u64,
    hi: u64,
    options: &ReadOptions,
    sink: &mut Sink,
) -> Result<bool, ReadError> {
    let io = |e| ReadError::Io(path.to_owned(), e);
    // About the range (a small range is read by a build's worker, many at once), plus room
    // for the line that runs past its end.
    let capacity = usize::try_from(hi.saturating_sub(lo))
        .unwrap_or(usize::MAX)
        .saturating_add(64 << 10)
        .clamp(64 << 10, 1 << 20);
    let mut reader = open_with(path, options, false, capacity)?;
    let mut at = if lo == 0 {
        // Past the byte order mark: the lines' offsets are the file's.
        if reader.fill_buf().map_err(io)?.starts_with(BOM) {
            reader.consume(BOM.len());
            BOM.len() as u64
        } else {
            0
        }
    } else {
        // The first line starting at or after `lo` starts after the first newline at or
        // after `lo - 1`.
        reader.seek(SeekFrom::Start(lo - 1)).map_err(io)?;
        let mut at = lo - 1;
        loop {
            let buf = reader.fill_buf().map_err(io)?;
            if buf.is_empty() {
                return Ok(true);
            }
            match memchr::memchr(b'\n', buf) {
                Some(i) => {
                    reader.consume(i + 1);
                    break at + i as u64 + 1;
                }
                None => {
                    let n = buf.len();
                    at += n as u64;
                    reader.consume(n);
                }
            }
        }
    };
    let (mut row, mut number) = (0u64, 0u64);
    let mut line = Vec::new();
    // Where the next line starts, for whether it is in the range: the file's first line
    // starts at 0, its byte order mark included.
    let mut start = if lo == 0 { 0 } else { at };
    while start < hi {
        line.clear();
        let read = next_line(&mut reader, &mut line, options.max_row_bytes).map_err(io)?;
        number += 1;
        let record = match read {
            None => return Ok(true),
            Some(Line::TooLong(bytes)) => {
                // Its length with the newline is not kept: ask the file where the read is.
                at = reader.stream_position().map_err(io)?;
                start = at;
                Record::TooLarge {
                    bytes,
                    limit: options.max_row_bytes,
                }
            }
            Some(Line::Kept) => {
                at += line.len() as u64;
                start = at;
                if line.iter().all(u8::is_ascii_whitespace) {
                    if !sink(row, Some(number), Record::Blank) {
                        return Ok(false);
                    }
                    continue;
                }
                Record::Line(std::mem::take(&mut line))
            }
        };
        if !sink(row, Some(number), record) {
            return Ok(false);
        }
        row += 1;
    }
    Ok(true)
}

/// One line read by [`next_line`].
pub enum Line {
    /// In the buffer, newline included.
    Kept,
    /// Longer than the limit: skipped, this many bytes without the newline.
    TooLong(u64),
}

/// Reads the next line into `buf` (newline included), or skips it, counting its bytes, once it
/// is longer than `limit`: a huge line is never held. `None` at the end of the file.
pub fn next_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    limit: u64,
) -> std::io::Result<Option<Line>> {
    let mut total = 0u64;
    let mut over = false;
    let mut newline = 0u64;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            break;
        }
        let (chunk, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        total += chunk.len() as u64;
        if !over {
            buf.extend_from_slice(chunk);
            // Room for the newline (and a carriage return) beyond the limit.
            if buf.len() as u64 > limit.saturating_add(2) {
                over = true;
                *buf = Vec::new();
            }
        }
        if done {
            newline = if over {
                1 + u64::from(chunk.len() >= 2 && chunk[chunk.len() - 2] == b'\r')
            } else {
                (buf.len() - buf.trim_ascii_end().len()) as u64
            };
        }
        let n = chunk.len();
        reader.consume(n);
        if done {
            break;
        }
    }
    if total == 0 {
        return Ok(None);
    }
    let content = total - newline.min(total);
    if over || (content > limit && !buf.trim_ascii().is_empty()) {
        buf.clear();
        return Ok(Some(Line::TooLong(content)));
    }
    Ok(Some(Line::Kept))
}

fn read_lines(
    path: &Path,
    mut reader: impl BufRead,
    options: &ReadOptions,
    sink: &mut Sink,
) -> Result<bool, ReadError> {
    let mut row = 0u64;
    let mut number = 0u64;
    // Each line is handed on, so each gets its own buffer, sized like the last to avoid regrowth
    // (capped, so that one huge line does not make every later buffer huge).
    let mut capacity = 1024;
    loop {
        let mut line = Vec::with_capacity(capacity);
        let read = next_line(&mut reader, &mut line, options.max_row_bytes)
            .map_err(|e| ReadError::Io(path.to_owned(), e))?;
        number += 1;
        let record = match read {
            None => return Ok(true),
            Some(Line::TooLong(bytes)) => Record::TooLarge {
                bytes,
                limit: options.max_row_bytes,
            },
            // Blank lines are counted, but they are not records: the record index (part of
            // `sample_id`) of the rows after them does not move.
            Some(Line::Kept) if line.iter().all(u8::is_ascii_whitespace) => {
                if !sink(row, Some(number), Record::Blank) {
                    return Ok(false);
                }
                continue;
            }
            Some(Line::Kept) => {
                capacity = line.len().next_power_of_two().min(1 << 20);
                Record::Line(line)
            }
        };
        if !sink(row, Some(number), record) {
            return Ok(false);
        }
        row += 1;
    }
}

/// Element `row` of an array, within `max_row_bytes`, as its record: parsed, or why not.
pub(super) fn element_record(text: &str, row: u64) -> Record {
    match super::parse(text.as_bytes()) {
        Ok(value) => Record::Parsed(value),
        Err(r) if r.reason == RejectReason::InvalidJson => {
            Record::Invalid(format!("array element {row}: {}", r.message))
        }
        Err(r) => Record::Refused(r),
    }
}

/// Streams the elements of a top-level array without holding the array. Each element is first
/// read as raw text (which has no nesting limit) and then parsed on its own, so that an element
/// nested too deep is one bad row, not the end of the file.
fn read_array(
    path: &Path,
    reader: impl BufRead,
    options: &ReadOptions,
    sink: &mut Sink,
) -> Result<bool, ReadError> {
    struct Elements<'a, 'b> {
        sink: &'a mut Sink<'b>,
        row: &'a mut u64,
        stopped: &'a mut bool,
        limit: u64,
        defer: bool,
    }
    impl<'de> Visitor<'de> for Elements<'_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON array of records")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(raw) = seq.next_element::<Box<RawValue>>()? {
                let size = raw.get().len() as u64;
                let record = if size > self.limit {
                    Record::TooLarge {
                        bytes: size,
                        limit: self.limit,
                    }
                } else if self.defer {
                    Record::Deferred(Box::new(Deferred::Element {
                        text: raw,
                        row: *self.row,
                    }))
                } else {
                    element_record(raw.get(), *self.row)
                };
                if !(self.sink)(*self.row, None, record) {
                    *self.stopped = true;
                    // Stop reading; the error this causes at the caller is expected.
                    return Err(serde::de::Error::custom("stopped"));
                }
                *self.row += 1;
            }
            Ok(())
        }
    }
    let mut row = 0u64;
    let mut stopped = false;
    let mut de = serde_json::Deserializer::from_reader(reader);
    let result = de.deserialize_seq(Elements {
        sink,
        row: &mut row,
        stopped: &mut stopped,
        limit: options.max_row_bytes,
        defer: options.defer,
    });
    if stopped {
        return Ok(false);
    }
    result
        .and_then(|()| de.end())
        .map_err(|e| ReadError::Json {
            path: path.to_owned(),
            row,
            message: e.to_string(),
        })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::{read_files_with, RawRow};
    use super::*;
    use crate::reject::Skip;
    use serde_json::{json, Value};

    /// Each record of `content` (written to a file) as read: (row, line, value or skip).
    fn records_with(
        name: &str,
        content: &[u8],
        max_row_bytes: u64,
    ) -> Vec<(u64, Option<u64>, Result<Value, Skip>)> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        std::fs::write(&path, content).expect("write");
        // Read as a build reads (elements deferred, then materialized) and as everything else
        // reads: the same records either way.
        let [(out, _), (deferred, count)] = [false, true].map(|defer| {
            let (mut out, mut count) = (Vec::new(), 0);
            read_files_with(
                std::slice::from_ref(&path),
                &ReadOptions {
                    max_row_bytes,
                    sample: None,
                    defer,
                },
                &mut |raw: RawRow| {
                    count += usize::from(matches!(raw.record, Record::Deferred(_)));
                    let raw = raw.materialize();
                    out.push((raw.row, raw.line, format!("{:?}", raw.record)));
                    true
                },
            )
            .expect("readable");
            (out, count)
        });
        assert_eq!(deferred, out, "{name}");
        // Every element of an array within the limit is deferred (a line never is).
        let array = name.ends_with(".json")
            && (content.strip_prefix(BOM).unwrap_or(content))
                .trim_ascii_start()
                .starts_with(b"[");
        let elements = out
            .iter()
            .filter(|(_, _, r)| !r.starts_with("TooLarge"))
            .count();
        assert_eq!(count, if array { elements } else { 0 }, "{name}");
        let mut values = Vec::new();
        read_files_with(
            &[path],
            &ReadOptions {
                max_row_bytes,
                ..ReadOptions::default()
            },
            &mut |raw: RawRow| {
                values.push((raw.row, raw.line, raw.into_value()));
                true
            },
        )
        .expect("readable");
        values
    }

    fn records(name: &str, content: &str) -> Vec<(u64, Option<u64>, Result<Value, Skip>)> {
        records_with(name, content.as_bytes(), 1 << 20)
    }

    fn reason(r: &Result<Value, Skip>) -> String {
        match r {
            Ok(_) => "kept".into(),
            Err(Skip::Rejected(r)) => format!("{}: {}", r.reason, r.message),
            Err(Skip::Filtered(f)) => f.code().into(),
        }
    }

    #[test]
    fn json_lines_are_parsed_per_row_and_a_bad_line_fails_only_its_row() {
        let got = records("a.jsonl", "{\"a\": 1}\n\n{\"a\": \n  \n[2]\n");
        let rows: Vec<(u64, Option<u64>, String)> =
            got.iter().map(|(r, l, v)| (*r, *l, reason(v))).collect();
        assert_eq!(
            rows,
            [
                (0, Some(1), "kept".to_owned()),
                (1, Some(2), "blank_line".to_owned()),
                (
                    1,
                    Some(3),
                    "invalid_json: EOF while parsing a value at column 5".to_owned()
                ),
                (2, Some(4), "blank_line".to_owned()),
                (2, Some(5), "kept".to_owned()),
            ]
        );
        assert_eq!(got[0].2, Ok(json!({"a": 1})));
        assert_eq!(got[4].2, Ok(json!([2])));
    }

    #[test]
    fn a_jsonl_file_starting_with_an_array_line_is_read_as_lines() {
        let got = records("a.jsonl", "[1, 2\n{\"a\": 1}\n");
        assert_eq!(got.len(), 2);
        assert!(
            reason(&got[0].2).starts_with("invalid_json: "),
            "{:?}",
            got[0]
        );
        assert_eq!(got[1].2, Ok(json!({"a": 1})));
        // A `.json` file starting with `[` is an array.
        let got = records("a.json", " [{\"a\": 1}, 2]");
        assert_eq!(got.len(), 2);
        assert_eq!((got[1].0, got[1].1), (1, None));
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        for name in ["a.jsonl", "a.json"] {
            let got = records_with(name, b"\xEF\xBB\xBF{\"a\": 1}\n", 1 << 20);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].2, Ok(json!({"a": 1})), "{name}");
        }
    }

    #[test]
    fn an_element_nested_too_deep_is_one_bad_row_and_the_array_goes_on() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let got = records("a.json", &format!("[{{\"a\": 1}}, {deep}, {{\"b\": 2}}]"));
        assert_eq!(got.len(), 3);
        assert!(
            reason(&got[1].2)
                .starts_with("invalid_json: array element 1: recursion limit exceeded"),
            "{}",
            reason(&got[1].2)
        );
        assert_eq!(got[2].2, Ok(json!({"b": 2})));
    }

    #[test]
    fn records_over_the_size_limit_are_too_large_and_the_read_goes_on() {
        let long = format!("{{\"a\": \"{}\"}}", "x".repeat(100));
        let content = format!("{long}\r\n{{\"b\": 1}}\n{long}");
        let got = records_with("a.jsonl", content.as_bytes(), 50);
        let rows: Vec<String> = got.iter().map(|(_, _, v)| reason(v)).collect();
        let too_large = format!(
            "too_large: the record is {} bytes, over the limit of 50 (`max_row_bytes`)",
            long.len()
        );
        assert_eq!(
            rows,
            [too_large.clone(), "kept".to_owned(), too_large.clone()]
        );
        // Exactly at the limit is kept.
        let got = records_with("a.jsonl", format!("{long}\n").as_bytes(), long.len() as u64);
        assert_eq!(reason(&got[0].2), "kept");
        let got = records_with("a.json", format!("[{long}, 1]").as_bytes(), 50);
        assert_eq!(reason(&got[0].2), too_large);
        assert_eq!(got[1].2, Ok(json!(1)));
    }
}
