//! Parquet files, read in record batches (bounded memory), each row turned into a JSON object.
//!
//! Text stored as BINARY (byte arrays without the UTF-8 annotation, as older Spark and Hive
//! writers store strings) is read as the UTF-8 text it holds; a row whose bytes there are not
//! UTF-8 is rejected, naming the column.

use super::{Deferred, ReadError, ReadOptions, Record};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::reader::{ChunkReader, Length};
use serde_json::{Map, Number, Value};
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Sink<'a> = dyn FnMut(u64, Option<u64>, Record) -> bool + 'a;

pub fn read(path: &Path, options: &ReadOptions, sink: &mut Sink) -> Result<bool, ReadError> {
    read_rows(path, options, None, sink)
}

/// The rows with the sorted, distinct indices `only` (all rows when `None`), each with its
/// index in the file. Only the row groups holding them are read, and within those the pages
/// holding them where the file has a page index.
pub fn read_rows(
    path: &Path,
    options: &ReadOptions,
    only: Option<&[u64]>,
    sink: &mut Sink,
) -> Result<bool, ReadError> {
    let err = |message: String| ReadError::Parquet {
        path: path.to_owned(),
        message,
    };
    let counter = options.sample.as_ref().map(|s| s.bytes_read.clone());
    let file = CountedFile {
        file: File::open(path).map_err(|e| ReadError::Io(path.to_owned(), e))?,
        counter,
    };
    let reader_options =
        ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    let mut builder = ParquetRecordBatchReaderBuilder::try_new_with_options(file, reader_options)
        .map_err(|e| err(e.to_string()))?
        .with_batch_size(1024);
    // The file index of each row the reader yields, in order (`None`: 0, 1, 2...).
    let mut rows_of: Option<Vec<u64>> = None;
    if let Some(only) = only {
        let metadata = builder.metadata().clone();
        let (mut groups, mut selectors, mut kept) = (Vec::new(), Vec::new(), Vec::new());
        let (mut first, mut next) = (0u64, 0usize);
        for (g, group) in metadata.row_groups().iter().enumerate() {
            let n = u64::try_from(group.num_rows()).unwrap_or(0);
            let end = first + n;
            let start_next = next;
            while next < only.len() && only[next] < end {
                next += 1;
            }
            if next > start_next {
                groups.push(g);
                let mut at = first;
                for &row in &only[start_next..next] {
                    if row > at {
                        selectors.push(RowSelector::skip((row - at) as usize));
                    }
                    selectors.push(RowSelector::select(1));
                    kept.push(row);
                    at = row + 1;
                }
                if end > at {
                    selectors.push(RowSelector::skip((end - at) as usize));
                }
            }
            first = end;
        }
        if groups.is_empty() {
            return Ok(true);
        }
        builder = builder
            .with_row_groups(groups)
            .with_row_selection(RowSelection::from(selectors));
        rows_of = Some(kept);
    }
    let reader = builder.build().map_err(|e| err(e.to_string()))?;
    let mut yielded = 0usize;
    for batch in reader {
        let batch = batch.map_err(|e| err(e.to_string()))?;
        let per_row = batch.get_array_memory_size() / batch.num_rows().max(1);
        let deferred = options.defer.then(|| Arc::new(batch.clone()));
        for i in 0..batch.num_rows() {
            let row = match &rows_of {
                Some(rows) => match rows.get(yielded) {
                    Some(&r) => r,
                    None => return Err(err("the row selection yielded extra rows".into())),
                },
                None => yielded as u64,
            };
            yielded += 1;
            let record = match &deferred {
                Some(batch) => Record::Deferred(Box::new(Deferred::Parquet(ArrowRow {
                    batch: Arc::clone(batch),
                    index: i,
                    estimate: per_row,
                    max_row_bytes: options.max_row_bytes,
                }))),
                None => record_of(&batch, i, options.max_row_bytes),
            };
            if !sink(row, None, record) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Row `i` of `batch` as a record: its JSON object, `Invalid` when a cell has no JSON form, or
/// `TooLarge` (a row group is in memory already: an oversize row is refused after reading).
fn record_of(batch: &RecordBatch, i: usize, max_row_bytes: u64) -> Record {
    let record = match row_object(batch, i) {
        Ok(object) => Record::Parsed(Value::Object(object)),
        Err(why) => Record::Invalid(why.to_string()),
    };
    let bytes = record.weight() as u64;
    if bytes > max_row_bytes {
        return Record::TooLarge {
            bytes,
            limit: max_row_bytes,
        };
    }
    record
}

/// A Parquet row not yet turned into JSON ([`ReadOptions::defer`]): that is most of reading a
/// Parquet file (building a map of strings per row).
pub struct ArrowRow {
    batch: Arc<RecordBatch>,
    index: usize,
    /// The batch's memory over its rows: what a job's size is counted in until the row is
    /// [`materialize`](Self::materialize)d.
    estimate: usize,
    max_row_bytes: u64,
}

impl ArrowRow {
    /// The record the row is when read without deferring.
    pub(super) fn materialize(&self) -> Record {
        record_of(&self.batch, self.index, self.max_row_bytes)
    }

    pub(super) fn estimate(&self) -> usize {
        self.estimate
    }
}

impl std::fmt::Debug for ArrowRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArrowRow(row {} of a batch)", self.index)
    }
}

/// The file's footer (its metadata), read alone.
fn footer(path: &Path) -> Result<Arc<ParquetMetaData>, ReadError> {
    let file = File::open(path).map_err(|e| ReadError::Io(path.to_owned(), e))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| ReadError::Parquet {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    Ok(builder.metadata().clone())
}

/// Rows and uncompressed column bytes, from the footer alone.
pub fn footer_size(path: &Path) -> Result<super::FileSize, ReadError> {
    let meta = footer(path)?;
    let rows = u64::try_from(meta.file_metadata().num_rows()).unwrap_or(0);
    let bytes = meta
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.total_byte_size()).unwrap_or(0))
        .sum();
    Ok(super::FileSize::Rows { rows, bytes })
}

/// The rows of each row group, in order, from the footer.
pub fn row_groups(path: &Path) -> Result<Vec<u64>, ReadError> {
    Ok(footer(path)?
        .row_groups()
        .iter()
        .map(|g| u64::try_from(g.num_rows()).unwrap_or(0))
        .collect())
}

/// The file's row count, from its footer.
pub fn row_count(path: &Path, counter: &Arc<AtomicU64>) -> Result<u64, ReadError> {
    let file = CountedFile {
        file: File::open(path).map_err(|e| ReadError::Io(path.to_owned(), e))?,
        counter: Some(counter.clone()),
    };
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| ReadError::Parquet {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    Ok(u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0))
}

/// A Parquet file whose reads are counted (`chatshards check` reports them).
struct CountedFile {
    file: File,
    counter: Option<Arc<AtomicU64>>,
}

impl CountedFile {
    fn count(&self, n: u64) {
        if let Some(c) = &self.counter {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }
}

impl Length for CountedFile {
    fn len(&self) -> u64 {
        Length::len(&self.file)
    }
}

impl ChunkReader for CountedFile {
    type T = super::sample::Counted<<File as ChunkReader>::T>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(super::sample::Counted::new(
            self.file.get_read(start)?,
            self.counter.clone(),
        ))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        let bytes = self.file.get_bytes(start, length)?;
        self.count(bytes.len() as u64);
        Ok(bytes)
    }
}

/// A cell with no JSON form: the row is invalid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "column `{column}` is binary and its value is not UTF-8 text (invalid byte at {valid_up_to})"
)]
pub struct CellError {
    /// The column, with `.field` and `[]` for the struct fields and list items within it.
    pub column: String,
    pub valid_up_to: usize,
}

fn row_object(batch: &RecordBatch, i: usize) -> Result<Map<String, Value>, CellError> {
    let schema = batch.schema();
    schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| {
            Ok((
                field.name().clone(),
                cell(column.as_ref(), i, field.name())?,
            ))
        })
        .collect()
}

/// One cell of column `column` as JSON. Types without a natural JSON form fall back to Arrow's
/// display string; bytes (BINARY) are read as UTF-8 text, and refused when they are not.
fn cell(array: &dyn Array, i: usize, column: &str) -> Result<Value, CellError> {
    if array.is_null(i) {
        return Ok(Value::Null);
    }
    macro_rules! int {
        ($t:ty) => {
            Value::from(array.as_primitive::<$t>().value(i))
        };
    }
    let text = |bytes: &[u8]| match std::str::from_utf8(bytes) {
        Ok(text) => Ok(Value::String(text.to_owned())),
        Err(e) => Err(CellError {
            column: column.to_owned(),
            valid_up_to: e.valid_up_to(),
        }),
    };
    Ok(match array.data_type() {
        DataType::Null => Value::Null,
        DataType::Boolean => Value::Bool(array.as_boolean().value(i)),
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float32 => float(f64::from(array.as_primitive::<Float32Type>().value(i))),
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(i)),
        DataType::Utf8 => Value::String(array.as_string::<i32>().value(i).to_owned()),
        DataType::LargeUtf8 => Value::String(array.as_string::<i64>().value(i).to_owned()),
        DataType::Utf8View => Value::String(array.as_string_view().value(i).to_owned()),
        DataType::Binary => text(array.as_binary::<i32>().value(i))?,
        DataType::LargeBinary => text(array.as_binary::<i64>().value(i))?,
        DataType::BinaryView => text(array.as_binary_view().value(i))?,
        DataType::FixedSizeBinary(_) => text(array.as_fixed_size_binary().value(i))?,
        DataType::List(_) => list(array.as_list::<i32>().value(i).as_ref(), column)?,
        DataType::LargeList(_) => list(array.as_list::<i64>().value(i).as_ref(), column)?,
        DataType::Struct(fields) => {
            let s = array.as_struct();
            Value::Object(
                fields
                    .iter()
                    .zip(s.columns())
                    .map(|(f, c)| {
                        let name = format!("{column}.{}", f.name());
                        Ok((f.name().clone(), cell(c.as_ref(), i, &name)?))
                    })
                    .collect::<Result<_, CellError>>()?,
            )
        }
        _ => display(array, i),
    })
}

fn list(values: &dyn Array, column: &str) -> Result<Value, CellError> {
    let name = format!("{column}[]");
    (0..values.len())
        .map(|j| cell(values, j, &name))
        .collect::<Result<_, _>>()
        .map(Value::Array)
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

fn display(array: &dyn Array, i: usize) -> Value {
    let options = arrow_cast::display::FormatOptions::default();
    match arrow_cast::display::ArrayFormatter::try_new(array, &options) {
        Ok(f) => Value::String(f.value(i).to_string()),
        Err(_) => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::DEFAULT_MAX_ROW_BYTES;
    use arrow_array::{ArrayRef, BinaryArray, ListArray, StructArray};
    use arrow_buffer::OffsetBuffer;
    use arrow_schema::{Field, Fields, Schema};
    use parquet::arrow::arrow_writer::ArrowWriterOptions;
    use parquet::arrow::ArrowWriter;
    use serde_json::json;

    /// A file in the layout of an older Spark writer: `messages` a list of structs whose
    /// `role` and `content` are BINARY, and `id` BINARY, without (`spark`) or with (as pyarrow
    /// writes `pa.binary()`) the Arrow schema in the footer. The second row's content is not
    /// UTF-8.
    fn binary_file(path: &Path, spark: bool) {
        let bytes = |items: &[&[u8]]| Arc::new(BinaryArray::from_vec(items.to_vec())) as ArrayRef;
        let message = Fields::from(vec![
            Field::new("role", DataType::Binary, false),
            Field::new("content", DataType::Binary, false),
        ]);
        let values = StructArray::new(
            message.clone(),
            vec![
                bytes(&[b"user", b"assistant", b"user", b"assistant"]),
                bytes(&[b"caf\xc3\xa9?", b"oui", b"x", b"\xff\xfe"]),
            ],
            None,
        );
        let item = Arc::new(Field::new("item", DataType::Struct(message), true));
        let messages = ListArray::new(
            item.clone(),
            OffsetBuffer::from_lengths([2, 2]),
            Arc::new(values),
            None,
        );
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Binary, false),
            Field::new("messages", DataType::List(item), false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![bytes(&[b"r1", b"r2"]), Arc::new(messages)],
        )
        .expect("batch");
        let file = File::create(path).expect("create");
        let options = ArrowWriterOptions::new().with_skip_arrow_metadata(spark);
        let mut writer = ArrowWriter::try_new_with_options(file, schema, options).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
    }

    #[test]
    fn binary_columns_are_read_as_utf8_text_or_refused_naming_the_column() {
        let dir = tempfile::tempdir().expect("tempdir");
        for spark in [true, false] {
            let path = dir.path().join(format!("spark-{spark}.parquet"));
            binary_file(&path, spark);
            let mut rows = Vec::new();
            read(&path, &ReadOptions::default(), &mut |row, _, record| {
                rows.push((row, record));
                true
            })
            .expect("read");
            assert_eq!(rows.len(), 2);
            match &rows[0].1 {
                Record::Parsed(value) => assert_eq!(
                    value,
                    &json!({"id": "r1", "messages": [
                        {"role": "user", "content": "café?"},
                        {"role": "assistant", "content": "oui"}
                    ]})
                ),
                _ => panic!("row 0 not read"),
            }
            match &rows[1].1 {
                Record::Invalid(why) => assert_eq!(
                    why,
                    "column `messages[].content` is binary and its value is not UTF-8 text \
                     (invalid byte at 0)"
                ),
                _ => panic!("row 1 not refused"),
            }
        }
    }

    /// What a read hands out, as comparable text: each row's index and its record.
    fn rows_of(path: &Path, options: &ReadOptions, only: Option<&[u64]>) -> Vec<String> {
        let mut rows = Vec::new();
        read_rows(path, options, only, &mut |row, line, record| {
            let record = match record {
                Record::Deferred(deferred) => {
                    assert!(options.defer, "deferred without asking");
                    deferred.materialize()
                }
                record => {
                    assert!(!options.defer, "not deferred when asked");
                    record
                }
            };
            rows.push(format!("{row} {line:?} {record:?}"));
            true
        })
        .expect("read");
        rows
    }

    /// A deferred row turns into the record a direct read gives: every Parquet fixture, a
    /// non-UTF-8 cell (`Invalid`), a limit that makes rows `TooLarge`, a row selection.
    #[test]
    fn a_deferred_row_materializes_to_the_record_a_direct_read_gives() {
        let dir = tempfile::tempdir().expect("tempdir");
        let binary = dir.path().join("binary.parquet");
        binary_file(&binary, false);
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut files = vec![binary];
        for entry in walk(&fixtures) {
            if entry.extension().is_some_and(|e| e == "parquet") {
                files.push(entry);
            }
        }
        assert!(files.len() >= 9, "{files:?}");
        let mut too_large = 0;
        for path in &files {
            for max_row_bytes in [DEFAULT_MAX_ROW_BYTES, 300] {
                let direct = ReadOptions {
                    max_row_bytes,
                    ..ReadOptions::default()
                };
                let deferred = ReadOptions {
                    defer: true,
                    ..direct.clone()
                };
                let want = rows_of(path, &direct, None);
                assert!(!want.is_empty(), "{}", path.display());
                assert_eq!(rows_of(path, &deferred, None), want, "{}", path.display());
                too_large += want.iter().filter(|r| r.contains("TooLarge")).count();
                // Every other row, by index.
                let only: Vec<u64> = (0..want.len() as u64).step_by(2).collect();
                let picked: Vec<String> = want.iter().step_by(2).cloned().collect();
                assert_eq!(rows_of(path, &deferred, Some(&only)), picked);
            }
        }
        assert!(too_large > 0, "no row over the small limit");
    }

    fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
        out.sort();
        out
    }
}
