//! Arrow IPC *stream* shards (the format `datasets` memory-maps), uncompressed, every field
//! nullable, hashed as written, and renamed into place only when complete.

use super::{TokenRow, WriteError};
use arrow_array::builder::StringBuilder;
use arrow_array::{ArrayRef, Int32Array, Int64Array, Int8Array, ListArray, RecordBatch};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The output schema, with the `huggingface` metadata `datasets` itself writes.
pub fn schema() -> Arc<Schema> {
    static SCHEMA: std::sync::LazyLock<Arc<Schema>> = std::sync::LazyLock::new(build_schema);
    SCHEMA.clone()
}

fn build_schema() -> Arc<Schema> {
    let fields = vec![
        Field::new(
            "input_ids",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ),
        Field::new(
            "loss_mask",
            DataType::List(Arc::new(Field::new("item", DataType::Int8, true))),
            true,
        ),
        Field::new("seq_len", DataType::Int64, true),
        Field::new("sample_id", DataType::Utf8, true),
        Field::new("source", DataType::Utf8, true),
    ];
    let info = serde_json::json!({ "info": { "features": super::dataset::features() } });
    let metadata = HashMap::from([("huggingface".to_owned(), info.to_string())]);
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ShardSummary {
    pub file: String,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
}

/// The shard file, counting what has been written.
struct CountingFile {
    file: File,
    bytes: u64,
}

impl Write for CountingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// SHA-256 of a file being written, computed on its own thread by reading the file back behind
/// the writer (from the page cache), so that hashing overlaps encoding, writing and the final
/// `fsync` instead of adding to them.
struct TrailingHasher {
    written: std::sync::mpsc::Sender<u64>,
    thread: std::thread::JoinHandle<std::io::Result<(String, u64)>>,
}

impl TrailingHasher {
    fn start(path: &Path) -> std::io::Result<Self> {
        let mut file = File::open(path)?;
        let (written, upto) = std::sync::mpsc::channel::<u64>();
        let thread = std::thread::spawn(move || {
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut hashed = 0u64;
            // Each message: the file now has this many bytes; the channel closes after the last.
            for target in upto {
                while hashed < target {
                    let want = (target - hashed).min(buf.len() as u64) as usize;
                    let chunk = &mut buf[..want];
                    file.read_exact(chunk)?;
                    hasher.update(&*chunk);
                    hashed += want as u64;
                }
            }
            Ok((hex::encode(hasher.finalize()), hashed))
        });
        Ok(TrailingHasher { written, thread })
    }

    /// Tells the hasher that the file has `bytes` bytes, all written.
    fn written(&self, bytes: u64) {
        // A hasher that stopped (a read error) reports it from `finish`.
        let _ = self.written.send(bytes);
    }

    fn finish(self) -> std::io::Result<(String, u64)> {
        drop(self.written);
        self.thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// Rows per record batch, as `datasets` writes them. Batches never span shards: a shard's
/// batches start at its first row.
pub const BATCH_ROWS: usize = 1000;

/// The record batch of `rows` (built apart from the writer, so that building the next batch
/// overlaps writing this one). `sources` names the rows' source indices.
pub fn record_batch(rows: &[TokenRow], sources: &[String]) -> Result<RecordBatch, String> {
    let tokens: usize = rows.iter().map(|r| r.ids.len()).sum();
    // Built from plain buffers (no null buffers, like builders without nulls write them).
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    let mut ids: Vec<i32> = Vec::with_capacity(tokens);
    let mut mask: Vec<i8> = Vec::with_capacity(tokens);
    let mut sample_ids = StringBuilder::new();
    let mut source_names = StringBuilder::new();
    let mut seq_len = Vec::with_capacity(rows.len());
    offsets.push(0i32);
    for row in rows {
        // Token ids fit in i32: vocabularies are far below 2^31.
        ids.extend(row.ids.iter().map(|&i| i as i32));
        mask.extend(row.mask.iter().map(|&m| m as i8));
        let end = i32::try_from(ids.len())
            .map_err(|_| "a record batch exceeds 2^31 tokens".to_owned())?;
        offsets.push(end);
        seq_len.push(row.ids.len() as i64);
        sample_ids.append_value(&row.sample_id);
        source_names.append_value(
            sources
                .get(row.source as usize)
                .map(String::as_str)
                .unwrap_or_default(),
        );
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    let list = |item: DataType, values: ArrayRef| {
        ListArray::new(
            Arc::new(Field::new("item", item, true)),
            offsets.clone(),
            values,
            None,
        )
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(list(DataType::Int32, Arc::new(Int32Array::from(ids)))),
        Arc::new(list(DataType::Int8, Arc::new(Int8Array::from(mask)))),
        Arc::new(Int64Array::from(seq_len)),
        Arc::new(sample_ids.finish()),
        Arc::new(source_names.finish()),
    ];
    RecordBatch::try_new(schema(), columns).map_err(|e| e.to_string())
}

/// Writes one shard. Call [`ShardWriter::finish`]; a dropped writer leaves only a temp file.
pub struct ShardWriter {
    writer: StreamWriter<CountingFile>,
    hasher: TrailingHasher,
    temp: PathBuf,
    path: PathBuf,
    file: String,
    rows: u64,
}

impl ShardWriter {
    pub fn create(dir: &Path, file: String) -> Result<Self, WriteError> {
        let path = dir.join(&file);
        let temp = dir.join(format!(".{file}.partial"));
        let io_err = |e| WriteError::Io(temp.clone(), e);
        let f = File::create(&temp).map_err(io_err)?;
        let hasher = TrailingHasher::start(&temp).map_err(io_err)?;
        // No buffering: the IPC writer hands over a few large pieces per batch, and the hasher
        // may only read what has reached the file.
        let sink = CountingFile { file: f, bytes: 0 };
        let writer = StreamWriter::try_new(sink, &schema()).map_err(|e| WriteError::Arrow {
            path: path.clone(),
            message: e.to_string(),
        })?;
        hasher.written(writer.get_ref().bytes);
        Ok(ShardWriter {
            writer,
            hasher,
            temp,
            path,
            file,
            rows: 0,
        })
    }

    /// Appends a batch made by [`record_batch`].
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), WriteError> {
        self.writer.write(batch).map_err(|e| WriteError::Arrow {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        self.hasher.written(self.writer.get_ref().bytes);
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Writes the end-of-stream marker, syncs, and renames the shard into place.
    pub fn finish(self) -> Result<ShardSummary, WriteError> {
        let arrow_err = |path: &Path, e: arrow_schema::ArrowError| WriteError::Arrow {
            path: path.to_owned(),
            message: e.to_string(),
        };
        let io_err = |e| WriteError::Io(self.temp.clone(), e);
        let mut writer = self.writer;
        writer.finish().map_err(|e| arrow_err(&self.path, e))?;
        let sink = writer.into_inner().map_err(|e| arrow_err(&self.path, e))?;
        self.hasher.written(sink.bytes);
        // The sync and the end of the hashing run at the same time.
        let synced = sink.file.sync_all();
        let (sha256, hashed) = self.hasher.finish().map_err(io_err)?;
        synced.map_err(io_err)?;
        if hashed != sink.bytes {
            return Err(WriteError::ShortShard {
                path: self.temp.clone(),
                written: sink.bytes,
                read: hashed,
            });
        }
        std::fs::rename(&self.temp, &self.path)
            .map_err(|e| WriteError::Io(self.path.clone(), e))?;
        Ok(ShardSummary {
            file: self.file,
            rows: self.rows,
            bytes: sink.bytes,
            sha256,
        })
    }
}
