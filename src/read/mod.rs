//! Read stage: input files → JSON records, streamed (memory does not grow with file size).
//!
//! JSONL is read line by line, a JSON array element by element, Parquet by row group. JSON lines
//! are parsed by whoever processes the row ([`RawRow::into_value`], on the pipeline's worker
//! threads), not by the reader; a line that does not parse is an error for that row only, so
//! the row is rejected and counted. So is an array element nested too deep to parse, a record
//! over [`ReadOptions::max_row_bytes`] (`too_large`; a JSON line over it is skipped, never held
//! whole) and a blank line (filtered `blank_line`, so that `read` counts every line). A file
//! that cannot be read at all, or an array that breaks off, stops the run with its path.

pub mod chunks;
mod json;
mod parquet;
pub mod sample;

pub use json::{next_line, Line};
pub use sample::{FileSample, Sampling};

use crate::model::json_exact;
use crate::reject::{FilterReason, Reject, RejectReason, Skip};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One record of an input file.
#[derive(Debug)]
pub struct RawRow {
    /// Index of the file in the source's `files`.
    pub file: usize,
    /// 0-based record index within that file (blank lines are not records: they do not move
    /// it). Part of `sample_id`, so stable.
    pub row: u64,
    /// For line formats, the 1-based line number, as editors show it.
    pub line: Option<u64>,
    pub record: Record,
}

/// A record as read.
#[derive(Debug)]
pub enum Record {
    Parsed(Value),
    /// One line of a JSON lines file, not parsed yet: parsing is most of the reading cost, and
    /// done on the thread that adapts the row it runs in parallel and stays in that thread's
    /// cache.
    Line(Vec<u8>),
    /// An empty or whitespace-only line.
    Blank,
    /// A record over `max_row_bytes`, of this many bytes (newline excluded), not kept.
    TooLarge {
        bytes: u64,
        limit: u64,
    },
    /// A record that cannot be parsed on its own (an array element nested too deep), why.
    Invalid(String),
    /// A record read but refused (an integer outside 64 bits in an array element).
    Refused(Reject),
    /// A record not turned into JSON yet ([`ReadOptions::defer`]); until
    /// [`RawRow::materialize`]d, its weight is an estimate.
    Deferred(Box<Deferred>),
}

/// A record read but not yet turned into JSON, which is most of reading it: the thread that
/// works the row does it, not the one thread that reads a file in order.
#[derive(Debug)]
pub enum Deferred {
    /// A Parquet row: a reference into its decoded record batch.
    Parquet(parquet::ArrowRow),
    /// A JSON array's element as text (within `max_row_bytes`), and its index in the array.
    Element {
        text: Box<serde_json::value::RawValue>,
        row: u64,
    },
}

impl Deferred {
    /// The record a read without deferring gives.
    pub fn materialize(self) -> Record {
        match self {
            Deferred::Parquet(row) => row.materialize(),
            Deferred::Element { text, row } => json::element_record(text.get(), row),
        }
    }

    /// About how much work the record is before it is materialized: a Parquet row's share
    /// of its batch's memory, an element's length.
    fn estimate(&self) -> usize {
        match self {
            Deferred::Parquet(row) => row.estimate(),
            Deferred::Element { text, .. } => text.get().len(),
        }
    }
}

impl RawRow {
    /// The record as JSON, or why the row is skipped.
    pub fn into_value(self) -> Result<Value, Skip> {
        self.record.into_value()
    }

    /// The row with a [`Record::Deferred`] turned into the record a read without deferring
    /// gives (the same for any other record).
    pub fn materialize(self) -> RawRow {
        match self.record {
            Record::Deferred(row) => RawRow {
                record: (*row).materialize(),
                ..self
            },
            _ => self,
        }
    }

    /// The row number to show a user: the line number for line formats, else the record index.
    pub fn shown_row(&self) -> u64 {
        self.line.unwrap_or(self.row)
    }
}

/// Reader settings (from the pipeline).
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Largest record accepted, in bytes of its JSON text (a JSON line without its newline; a
    /// Parquet row as its JSON).
    pub max_row_bytes: u64,
    /// Read only these samples of the files (`chatshards check`), counting the bytes read;
    /// a file not listed is read whole. `None`: every record of every file.
    pub sample: Option<std::sync::Arc<Sampling>>,
    /// Hand out Parquet rows and JSON array elements as [`Record::Deferred`], for the thread
    /// that works them to turn into JSON (the build's passes); `false`: every record is JSON
    /// (or a line) as read.
    pub defer: bool,
}

/// 64 MiB: far above any real chat row (the longest agentic trajectories in the shipped mix
/// are a few MB), small enough that a handful of worker threads holding one each stay well
/// inside a small machine's memory.
pub const DEFAULT_MAX_ROW_BYTES: u64 = 64 << 20;

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_row_bytes: DEFAULT_MAX_ROW_BYTES,
            sample: None,
            defer: false,
        }
    }
}

impl Record {
    /// About how much work the record is, in bytes of JSON: its line's length, or for a parsed
    /// record the length of its strings plus a few bytes per other value.
    pub fn weight(&self) -> usize {
        fn value(v: &Value) -> usize {
            match v {
                Value::String(s) => s.len() + 2,
                Value::Array(items) => 2 + items.iter().map(value).sum::<usize>(),
                Value::Object(fields) => {
                    2 + fields
                        .iter()
                        .map(|(k, v)| k.len() + 3 + value(v))
                        .sum::<usize>()
                }
                _ => 4,
            }
        }
        match self {
            Record::Parsed(v) => value(v),
            Record::Line(line) => line.len(),
            Record::Deferred(row) => row.estimate(),
            Record::Blank | Record::TooLarge { .. } | Record::Invalid(_) | Record::Refused(_) => 16,
        }
    }

    /// The record as JSON, or why the row is skipped: its line is not valid JSON
    /// (`invalid_json`), it is too large (`too_large`) or a blank line (filtered).
    pub fn into_value(self) -> Result<Value, Skip> {
        let invalid = |message: String| Skip::from(Reject::new(RejectReason::InvalidJson, message));
        match self {
            Record::Parsed(value) => Ok(value),
            Record::Line(line) => parse(line.trim_ascii_end()).map_err(Skip::from),
            Record::Blank => Err(Skip::Filtered(FilterReason::BlankLine)),
            Record::TooLarge { bytes, limit } => Err(Skip::from(Reject::new(
                RejectReason::TooLarge,
                format!("the record is {bytes} bytes, over the limit of {limit} (`max_row_bytes`)"),
            ))),
            Record::Invalid(message) => Err(invalid(message)),
            Record::Refused(reject) => Err(Skip::from(reject)),
            Record::Deferred(row) => (*row).materialize().into_value(),
        }
    }
}

/// A record's JSON text as a value, with Python's reading of integers
/// ([`json_exact`](crate::model::json_exact)): a syntax error is `invalid_json`, an integer
/// outside 64 bits `number_out_of_range`.
pub fn parse(text: &[u8]) -> Result<Value, Reject> {
    json_exact::from_slice(text).map_err(|e| match (e.out_of_range(""), e) {
        (Some(reject), _) => reject,
        (None, json_exact::Error::Json(e)) => {
            Reject::new(RejectReason::InvalidJson, one_line_error(&e))
        }
        (None, e) => Reject::new(RejectReason::InvalidJson, e.to_string()),
    })
}

/// A JSON error in a one-line record, placed by column only (serde_json says "line 1").
pub fn one_line_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rsplit_once(" at line ") {
        Some((head, _)) if e.line() == 1 => format!("{head} at column {}", e.column()),
        _ => text,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("failed to read `{}`", .0.display())]
    Io(PathBuf, #[source] std::io::Error),
    #[error("`{}` is not valid JSON near record {row}: {message}", path.display())]
    Json {
        path: PathBuf,
        row: u64,
        message: String,
    },
    #[error("failed to read Parquet file `{}`: {message}", path.display())]
    Parquet { path: PathBuf, message: String },
    #[error("`{}`: unknown file type; expected .jsonl, .json or .parquet", .0.display())]
    UnknownType(PathBuf),
}

/// Streams every record of `files` in order into `sink`, which returns `false` to stop early,
/// with the default [`ReadOptions`].
pub fn read_files(
    files: &[PathBuf],
    sink: &mut dyn FnMut(RawRow) -> bool,
) -> Result<(), ReadError> {
    read_files_with(files, &ReadOptions::default(), sink)
}

/// [`read_files`] with explicit options.
pub fn read_files_with(
    files: &[PathBuf],
    options: &ReadOptions,
    sink: &mut dyn FnMut(RawRow) -> bool,
) -> Result<(), ReadError> {
    for (index, path) in files.iter().enumerate() {
        let selection = options
            .sample
            .as_ref()
            .and_then(|s| s.files.get(path))
            .unwrap_or(&FileSample::All);
        // Whether `sink` asked to stop (a sampled read also stops a file early on its own).
        let mut stopped = false;
        {
            let mut file_sink = |row: u64, line: Option<u64>, record: Record| {
                let go_on = sink(RawRow {
                    file: index,
                    row,
                    line,
                    record,
                });
                stopped |= !go_on;
                go_on
            };
            let kind = file_type(path)?;
            match selection {
                FileSample::All => {
                    match kind {
                        FileType::Json => json::read(path, false, options, &mut file_sink)?,
                        FileType::JsonLines => json::read(path, true, options, &mut file_sink)?,
                        FileType::Parquet => parquet::read(path, options, &mut file_sink)?,
                    };
                }
                FileSample::Records(only) if only.is_empty() => {}
                FileSample::Records(only) => {
                    if let FileType::Parquet = kind {
                        parquet::read_rows(path, options, Some(only.as_slice()), &mut file_sink)?;
                    } else {
                        // Blank lines are no records; the read ends after the last wanted one.
                        let mut next = 0usize;
                        let mut wanted = |row: u64, line: Option<u64>, record: Record| {
                            if matches!(record, Record::Blank) {
                                return true;
                            }
                            while next < only.len() && only[next] < row {
                                next += 1;
                            }
                            if only.get(next) == Some(&row) {
                                next += 1;
                                if !file_sink(row, line, record) {
                                    return false;
                                }
                            }
                            next < only.len()
                        };
                        let lines = matches!(kind, FileType::JsonLines);
                        json::read(path, lines, options, &mut wanted)?;
                    }
                }
                FileSample::LineStarts(starts) => {
                    json::read_line_starts(path, starts, options, &mut file_sink)?;
                }
                FileSample::LineRange { lo, hi } => {
                    json::read_line_range(path, *lo, *hi, options, &mut file_sink)?;
                }
            }
        }
        if stopped {
            break;
        }
    }
    Ok(())
}

/// How a partitioned build splits a file: JSON lines by byte ranges, Parquet by row groups,
/// a JSON array not at all.
pub enum Splitting {
    Lines,
    /// The rows of each row group.
    RowGroups(Vec<u64>),
    Whole,
}

pub fn splitting(path: &Path) -> Result<Splitting, ReadError> {
    Ok(match file_type(path)? {
        FileType::Parquet => Splitting::RowGroups(parquet::row_groups(path)?),
        _ if is_json_lines(path)? => Splitting::Lines,
        _ => Splitting::Whole,
    })
}

/// Whether a file is JSON lines (`.jsonl`, or a `.json` file that is not an array), whose
/// lines a partitioned build splits by byte ranges; other files go whole to one part.
pub fn is_json_lines(path: &Path) -> Result<bool, ReadError> {
    Ok(match file_type(path)? {
        FileType::JsonLines => true,
        FileType::Json => !json::starts_with_array(path, &Default::default())?,
        FileType::Parquet => false,
    })
}

/// How much reading a file is, known before reading it (for progress): a JSON file's size in
/// bytes; a Parquet file's row count and uncompressed data size, from its footer (a few KB
/// read, not the data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileSize {
    Bytes(u64),
    Rows { rows: u64, bytes: u64 },
}

/// [`FileSize`] of an input file.
pub fn file_size(path: &Path) -> Result<FileSize, ReadError> {
    match file_type(path)? {
        FileType::Json | FileType::JsonLines => std::fs::metadata(path)
            .map(|m| FileSize::Bytes(m.len()))
            .map_err(|e| ReadError::Io(path.to_owned(), e)),
        FileType::Parquet => parquet::footer_size(path),
    }
}

enum FileType {
    /// `.json`: the content decides between an array and JSON lines (Hub datasets use both).
    Json,
    /// `.jsonl`, `.ndjson`: always lines, even if the first line is an array.
    JsonLines,
    Parquet,
}

fn file_type(path: &Path) -> Result<FileType, ReadError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if name.ends_with(".jsonl") || name.ends_with(".ndjson") {
        Ok(FileType::JsonLines)
    } else if name.ends_with(".json") {
        Ok(FileType::Json)
    } else if name.ends_with(".parquet") {
        Ok(FileType::Parquet)
    } else {
        Err(ReadError::UnknownType(path.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_of_a_parquet_file_is_its_footer_row_count() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo/alpaca.parquet");
        let Ok(FileSize::Rows { rows, bytes }) = file_size(&path) else {
            panic!("a Parquet file is sized in rows");
        };
        // 60 rows (tests/fixtures/demo/make_demo.py), as many as the reader streams.
        let mut read = 0u64;
        read_files(&[path], &mut |_| {
            read += 1;
            true
        })
        .expect("readable");
        assert_eq!((rows, read), (60, 60));
        assert!(bytes > 0);
    }

    #[test]
    fn the_size_of_a_json_file_is_its_byte_count() {
        let dir = tempfile::tempdir().expect("temp dir");
        for name in ["a.jsonl", "a.json", "a.ndjson"] {
            let path = dir.path().join(name);
            let content = "{\"a\": 1}\n\n{\"b\": \"\u{e9}\"}\n";
            std::fs::write(&path, content).expect("write");
            assert_eq!(
                file_size(&path).expect("sized"),
                FileSize::Bytes(content.len() as u64),
                "{name}"
            );
        }
        let missing = dir.path().join("missing.jsonl");
        assert!(matches!(file_size(&missing), Err(ReadError::Io(p, _)) if p == missing));
    }

    #[test]
    fn a_record_weighs_about_its_json_length() {
        let line = br#"{"messages": [{"role": "user", "content": "hi"}]}"#.to_vec();
        assert_eq!(Record::Line(line.clone()).weight(), line.len());
        // A parsed record: close to its compact JSON (commas and numbers are estimated).
        let value: Value = serde_json::from_slice(&line).expect("json");
        let long = serde_json::json!({"content": "x".repeat(100_000), "n": [1, 2.5, null]});
        for value in [value, long] {
            let json = serde_json::to_string(&value).expect("json").len();
            let weight = Record::Parsed(value).weight();
            assert!(weight.abs_diff(json) <= 4, "{weight} for {json} bytes");
        }
    }
}
