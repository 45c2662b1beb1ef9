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
