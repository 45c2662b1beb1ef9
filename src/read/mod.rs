//! Read stage: input files → JSON records, streamed (memory does not grow with file size).
//!
//! JSONL is read line by line, a JSON array element by element, Parquet by row group. JSON lines
//! are parsed by whoever processes the row ([`RawRow::into_value`], on the pipeline's worker
//! threads), not by the reader; a line that does not parse is an error for that row only, so
//! the row is rejected and counted. A file that cannot be read at all stops the run with its
//! path.

mod json;
mod parquet;

use serde_json::Value;
use std::path::{Path, PathBuf};

/// One record of an input file.
#[derive(Debug)]
pub struct RawRow {
    /// Index of the file in the source's `files`.
    pub file: usize,
    /// 0-based record index within that file.
    pub row: u64,
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
}

impl RawRow {
    /// The record as JSON, or why its line is not valid JSON.
    pub fn into_value(self) -> Result<Value, String> {
        self.record.into_value()
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
        }
    }

    /// The record as JSON, or why its line is not valid JSON.
    pub fn into_value(self) -> Result<Value, String> {
        match self {
            Record::Parsed(value) => Ok(value),
            Record::Line(line) => serde_json::from_slice(&line).map_err(|e| e.to_string()),
        }
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

/// Streams every record of `files` in order into `sink`, which returns `false` to stop early.
pub fn read_files(
    files: &[PathBuf],
    sink: &mut dyn FnMut(RawRow) -> bool,
) -> Result<(), ReadError> {
    for (index, path) in files.iter().enumerate() {
        let mut file_sink = |row: u64, record: Record| {
            sink(RawRow {
                file: index,
                row,
                record,
            })
        };
        let go_on = match file_type(path)? {
            FileType::Json => json::read(path, &mut file_sink)?,
            FileType::Parquet => parquet::read(path, &mut file_sink)?,
        };
        if !go_on {
            break;
        }
    }
    Ok(())
}

enum FileType {
    /// `.json` or `.jsonl`; the content decides between an array and JSON lines.
    Json,
    Parquet,
}

fn file_type(path: &Path) -> Result<FileType, ReadError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if name.ends_with(".jsonl") || name.ends_with(".json") || name.ends_with(".ndjson") {
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
