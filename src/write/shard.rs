//! Arrow IPC *stream* shards (the format `datasets` memory-maps), uncompressed, every field
//! nullable, hashed as written, and renamed into place only when complete.

use super::spill::SpilledRow;
use super::{OutputFile, WriteError};
use crate::tokenize::mask_config::MaskDtype;
use arrow_array::builder::StringBuilder;
use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, Int8Array, ListArray, RecordBatch,
};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The output schema, with the `huggingface` metadata `datasets` itself writes; `loss_mask`
/// items are `int8` or `bool`.
pub fn schema(mask: MaskDtype) -> Arc<Schema> {
    static INT8: std::sync::LazyLock<Arc<Schema>> =
        std::sync::LazyLock::new(|| build_schema(MaskDtype::Int8));
    static BOOL: std::sync::LazyLock<Arc<Schema>> =
        std::sync::LazyLock::new(|| build_schema(MaskDtype::Bool));
    match mask {
        MaskDtype::Int8 => INT8.clone(),
        MaskDtype::Bool => BOOL.clone(),
    }
}

fn mask_type(mask: MaskDtype) -> DataType {
    match mask {
        MaskDtype::Int8 => DataType::Int8,
        MaskDtype::Bool => DataType::Boolean,
    }
}

fn build_schema(mask: MaskDtype) -> Arc<Schema> {
    let fields = vec![
        Field::new(
            "input_ids",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ),
        Field::new(
            "loss_mask",
            DataType::List(Arc::new(Field::new("item", mask_type(mask), true))),
            true,
        ),
        Field::new("seq_len", DataType::Int64, true),
        Field::new("sample_id", DataType::Utf8, true),
        Field::new("source", DataType::Utf8, true),
    ];
    let info = serde_json::json!({ "info": { "features": super::dataset::features(mask) } });
    let metadata = HashMap::from([("huggingface".to_owned(), info.to_string())]);
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ShardSummary {
    pub file: String,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
}

/// SHA-256 of a file's bytes on a thread of its own, fed the chunks as they are written, so
/// that hashing overlaps encoding, writing and the final `fsync` instead of adding to them.
struct ChunkHasher {
    chunks: std::sync::mpsc::SyncSender<Arc<Vec<u8>>>,
    thread: std::thread::JoinHandle<String>,
}

impl ChunkHasher {
    fn start() -> Self {
        let (chunks, rx) = std::sync::mpsc::sync_channel::<Arc<Vec<u8>>>(4);
        let sha = std::thread::Builder::new().name("shard-sha256".to_owned());
        let thread = sha
            .spawn(move || {
                let mut hasher = Sha256::new();
                for chunk in rx {
                    hasher.update(chunk.as_slice());
                }
                hex::encode(hasher.finalize())
            })
            .expect("failed to spawn thread");
        ChunkHasher { chunks, thread }
    }

    fn update(&self, chunk: Arc<Vec<u8>>) {
        // The thread only stops when the channel closes.
        let _ = self.chunks.send(chunk);
    }

    fn finish(self) -> String {
        drop(self.chunks);
        self.thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// Why a record batch or a shard's bytes could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("a record batch exceeds 2^31 tokens")]
    BatchTooLarge,
    #[error(transparent)]
    Arrow(#[from] arrow_schema::ArrowError),
}

/// Rows per record batch, as `datasets` writes them. Batches never span shards: a shard's
/// batches start at its first row.
pub const BATCH_ROWS: usize = 1000;

/// Builds record batches row by row, copying each row out of its spill bucket as it comes
/// (a batch may span buckets). Built apart from the writer, so that building the next batch
/// overlaps writing this one.
#[derive(Default)]
pub struct BatchBuilder {
    /// The `loss_mask` item type written.
    dtype: MaskDtype,
    offsets: Vec<i32>,
    ids: Vec<i32>,
    mask: Vec<i8>,
    seq_len: Vec<i64>,
    sample_ids: StringBuilder,
    source_names: StringBuilder,
}

impl BatchBuilder {
    pub fn new(dtype: MaskDtype) -> Self {
        BatchBuilder {
            dtype,
            ..BatchBuilder::default()
        }
    }

    pub fn rows(&self) -> usize {
        self.seq_len.len()
    }

    /// Appends a row; `sources` names the rows' source indices.
    pub fn push(&mut self, row: &SpilledRow<'_>, sources: &[String]) -> Result<(), ShardError> {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        row.append_to(&mut self.ids, &mut self.mask);
        let end = i32::try_from(self.ids.len()).map_err(|_| ShardError::BatchTooLarge)?;
        self.offsets.push(end);
        self.seq_len.push(row.len() as i64);
        self.sample_ids.append_value(row.sample_id);
        self.source_names.append_value(
            sources
                .get(row.source as usize)
                .map(String::as_str)
                .unwrap_or_default(),
        );
        Ok(())
    }

    /// The record batch of the rows pushed since the last one (built from plain buffers, with
    /// no null buffers, as builders without nulls write them).
    pub fn finish(&mut self) -> Result<RecordBatch, ShardError> {
        let mut offsets = std::mem::take(&mut self.offsets);
        if offsets.is_empty() {
            offsets.push(0);
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
        // The next batch is about as large: reserving as much spares it the regrowing.
        let tokens = self.ids.len();
        let ids = Int32Array::from(std::mem::replace(&mut self.ids, Vec::with_capacity(tokens)));
        let mask = std::mem::replace(&mut self.mask, Vec::with_capacity(tokens));
        let mask: ArrayRef = match self.dtype {
            MaskDtype::Int8 => Arc::new(Int8Array::from(mask)),
            MaskDtype::Bool => Arc::new(BooleanArray::from(
                mask.iter().map(|&m| m != 0).collect::<Vec<bool>>(),
            )),
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(list(DataType::Int32, Arc::new(ids))),
            Arc::new(list(mask_type(self.dtype), mask)),
            Arc::new(Int64Array::from(std::mem::take(&mut self.seq_len))),
            Arc::new(self.sample_ids.finish()),
            Arc::new(self.source_names.finish()),
        ];
        Ok(RecordBatch::try_new(schema(self.dtype), columns)?)
    }
}

/// Turns one shard's record batches into its bytes, exactly as arrow's `StreamWriter` writes
/// them (the schema before the first batch, the end-of-stream marker after the last), so that
/// encoding can run on another thread than the writing.
pub struct ShardEncoder {
    writer: StreamWriter<Vec<u8>>,
}

impl ShardEncoder {
    pub fn new(mask: MaskDtype) -> Result<Self, ShardError> {
        let writer = StreamWriter::try_new(Vec::new(), &schema(mask))?;
        Ok(ShardEncoder { writer })
    }

    /// The bytes that follow those returned so far, up to and including `batch`.
    /// An encoder for a batch in the middle of a shard: its bytes are the batch's message
    /// alone, without the schema that opens a stream (no state carries from one batch of a
    /// stream to the next: no dictionaries, no compression), so batches encode in parallel.
    pub fn continuing(mask: MaskDtype) -> Result<Self, ShardError> {
        let mut encoder = ShardEncoder::new(mask)?;
        encoder.writer.get_mut().clear();
        Ok(encoder)
    }

    pub fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, ShardError> {
        self.writer.write(batch)?;
        Ok(std::mem::take(self.writer.get_mut()))
    }

    /// The last bytes of the shard.
    pub fn finish(mut self) -> Result<Vec<u8>, ShardError> {
        self.writer.finish()?;
        Ok(self.writer.into_inner()?)
    }
}

/// Writes one shard's bytes from a [`ShardEncoder`]. Call [`ShardWriter::finish`]; a dropped
/// writer leaves only a temp file.
pub struct ShardWriter {
    file: OutputFile,
    hasher: ChunkHasher,
    temp: PathBuf,
    path: PathBuf,
    name: String,
    bytes: u64,
    rows: u64,
}

impl ShardWriter {
    pub fn create(dir: &Path, name: String) -> Result<Self, WriteError> {
        let path = dir.join(&name);
        // Beside the shard, in its own folder (`validation/` for a validation shard).
        let (folder, file) = name.rsplit_once('/').unwrap_or(("", &name));
        let temp = dir.join(folder).join(format!(".{file}.partial"));
        let mut file = OutputFile::create(&temp).map_err(|e| WriteError::Io(temp.clone(), e))?;
        file.early_writeback();
        Ok(ShardWriter {
            file,
            hasher: ChunkHasher::start(),
            temp,
            path,
            name,
            bytes: 0,
            rows: 0,
        })
    }

    /// Appends encoded bytes holding `rows` rows.
    pub fn append(&mut self, bytes: Vec<u8>, rows: u64) -> Result<(), WriteError> {
        self.file
            .write_all(&bytes)
            .map_err(|e| WriteError::Io(self.temp.clone(), e))?;
        self.bytes += bytes.len() as u64;
        self.rows += rows;
        self.hasher.update(Arc::new(bytes));
        Ok(())
    }

    /// Syncs the file and renames it into place.
    pub fn finish(mut self) -> Result<ShardSummary, WriteError> {
        // The sync and the end of the hashing run at the same time.
        let synced = self.file.sync_all();
        let sha256 = self.hasher.finish();
        synced.map_err(|e| WriteError::Io(self.temp.clone(), e))?;
        std::fs::rename(&self.temp, &self.path)
            .map_err(|e| WriteError::Io(self.path.clone(), e))?;
        Ok(ShardSummary {
            file: self.name,
            rows: self.rows,
            bytes: self.bytes,
            sha256,
        })
    }
}
