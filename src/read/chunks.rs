//! JSON lines files cut into byte ranges that the build's workers read in parallel, as the
//! partitioned build cuts them across machines: a range holds the lines that *start* in it.
//! The record and line numbers of each range are counted first (a pass over the bytes, in
//! parallel), so that every row of a range carries the same `row` and `line` as a whole-file
//! read gives it, whichever thread reads it and in whatever order.

use super::json;
use super::{file_type, FileType, RawRow, ReadError, ReadOptions, Record};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// One byte range of a JSON lines file, numbered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Index of the file in the source's `files`.
    pub file: usize,
    /// The lines whose first byte is in `lo..hi`.
    pub lo: u64,
    pub hi: u64,
    /// Records of the file before the range (its first record's index).
    pub row: u64,
    /// Lines of the file before the range (its first line is number `line + 1`).
    pub line: u64,
    /// Lines of the source (all its files) before the range: every line is one record of a
    /// read, blank ones included, so this is the range's position in a pass over the source.
    pub ordinal: u64,
    /// Records (lines but blank ones) and lines in the range.
    pub records: u64,
    pub lines: u64,
}

/// The chunks of `files`, of about `bytes` each, numbered; `None` when the files are not all
/// JSON lines (a JSON array or Parquet file is read whole, in order) or the read is sampled.
/// The counting runs on the current rayon pool.
pub fn line_chunks(
    files: &[PathBuf],
    options: &ReadOptions,
    bytes: u64,
) -> Result<Option<Vec<Chunk>>, ReadError> {
    if options.sample.is_some() {
        return Ok(None);
    }
    let mut chunks = Vec::new();
    for (file, path) in files.iter().enumerate() {
        let lines = match file_type(path)? {
            FileType::JsonLines => true,
            FileType::Json => super::is_json_lines(path)?,
            FileType::Parquet => false,
        };
        if !lines {
            return Ok(None);
        }
        let size = std::fs::metadata(path)
            .map_err(|e| ReadError::Io(path.clone(), e))?
            .len();
        let bytes = bytes.max(1);
        let mut lo = 0;
        loop {
            let hi = (lo + bytes).min(size);
            chunks.push(Chunk {
                file,
                lo,
                hi,
                row: 0,
                line: 0,
                ordinal: 0,
                records: 0,
                lines: 0,
            });
            if hi >= size {
                break;
            }
            lo = hi;
        }
    }
    let counts: Vec<(u64, u64)> = chunks
        .par_iter()
        .map(|c| count(&files[c.file], c.lo, c.hi, options))
        .collect::<Result<_, _>>()?;
    let (mut row, mut line, mut ordinal) = (0u64, 0u64, 0u64);
    for (i, (records, lines)) in counts.into_iter().enumerate() {
        if i > 0 && chunks[i].file != chunks[i - 1].file {
            (row, line) = (0, 0);
        }
        let c = &mut chunks[i];
        (c.row, c.line, c.ordinal, c.records, c.lines) = (row, line, ordinal, records, lines);
        row += records;
        line += lines;
        ordinal += lines;
    }
    Ok(Some(chunks))
}

/// Records and lines among the lines starting in `lo..hi`, classified exactly as
/// [`read_chunk`] classifies them (it is the same reading, the lines not kept).
fn count(path: &Path, lo: u64, hi: u64, options: &ReadOptions) -> Result<(u64, u64), ReadError> {
    let (mut records, mut lines) = (0, 0);
    json::read_line_range(path, lo, hi, options, &mut |_, _, record| {
        lines += 1;
        records += u64::from(!matches!(record, Record::Blank));
        true
    })?;
    Ok((records, lines))
}

/// Reads the lines of `chunk` into `sink`, numbered as a whole-file read numbers them.
pub fn read_chunk(
    files: &[PathBuf],
    chunk: &Chunk,
    options: &ReadOptions,
    sink: &mut dyn FnMut(RawRow) -> bool,
) -> Result<(), ReadError> {
    let path = &files[chunk.file];
    json::read_line_range(
        path,
        chunk.lo,
        chunk.hi,
        options,
        &mut |row, line, record| {
            sink(RawRow {
                file: chunk.file,
                row: chunk.row + row,
                line: line.map(|l| chunk.line + l),
                record,
            })
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record of `files` by a whole-file read and by chunks of every size from 1 byte.
    fn whole(files: &[PathBuf], options: &ReadOptions) -> Vec<String> {
        let mut out = Vec::new();
        super::super::read_files_with(files, options, &mut |r| {
            out.push(format!("{} {} {:?} {:?}", r.file, r.row, r.line, r.record));
            true
        })
        .expect("read");
        out
    }

    #[test]
    fn chunks_of_any_size_read_every_record_once_numbered_as_a_whole_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.json");
        // A byte order mark, blank and whitespace lines, CRLF, a line over the limit, a
        // whitespace line over it, no newline at the end.
        std::fs::write(
            &a,
            b"\xEF\xBB\xBF{\"x\":1}\n\n  \r\n{\"x\":2}\r\n{\"long\":\"aaaaaaaaaaaaaaaaaaaaaaaa\"}\n                                   \n{\"x\":3}",
        )
        .expect("write");
        std::fs::write(&b, b"{\"y\":1}\n\n{\"y\":2}\n").expect("write");
        let files = vec![a, b];
        let options = ReadOptions {
            max_row_bytes: 20,
            sample: None,
            defer: false,
        };
        let expected = whole(&files, &options);
        assert_eq!(expected.len(), 10, "{expected:#?}");
        for bytes in 1..=120 {
            let chunks = line_chunks(&files, &options, bytes)
                .expect("chunks")
                .expect("lines");
            let mut got = Vec::new();
            let mut ordinal = 0;
            for c in &chunks {
                assert_eq!(c.ordinal, ordinal, "{bytes}: {c:?}");
                ordinal += c.lines;
                let before = got.len();
                read_chunk(&files, c, &options, &mut |r| {
                    got.push(format!("{} {} {:?} {:?}", r.file, r.row, r.line, r.record));
                    true
                })
                .expect("read");
                assert_eq!((got.len() - before) as u64, c.lines, "{bytes}: {c:?}");
            }
            assert_eq!(got, expected, "chunks of {bytes} bytes");
        }
    }

    #[test]
    fn arrays_parquet_and_sampled_reads_are_not_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.json");
        std::fs::write(&a, b"  [{\"x\":1}]").expect("write");
        let none = line_chunks(&[a], &ReadOptions::default(), 4).expect("chunks");
        assert!(none.is_none());
    }
}
