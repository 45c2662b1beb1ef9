//! Write stage: token rows → the `datasets.save_to_disk` layout, plus the side outputs.
//!
//! Rows are spilled to bucket files keyed by their shuffle key while the pipeline runs, then
//! each bucket is sorted and appended to the Arrow shards, so memory stays bounded by one
//! bucket whatever the dataset size, and the order depends only on the keys (never on threads).

mod dataset;
pub mod derived;
pub mod follow;
pub mod identity;
pub mod manifest;
mod output_file;
pub mod read_back;
mod shard;
mod shards;
mod spill;

use crate::model::nofollow;
pub use dataset::{
    dataset_info_json, features, pretty, shard_name, state_json, VALIDATION_DIR, VALIDATION_FILES,
};
pub use output_file::{BlockWriters, OutputFile};
pub use shard::{
    schema, BatchBuilder, ShardEncoder, ShardError, ShardSummary, ShardWriter,
    BATCH_ROWS as SHARD_BATCH_ROWS,
};
pub use shards::{write_shards, ShardLayout};
pub use spill::{
    shuffle_key, Bucket, EncodedRow, LoadedBucket, Spill, SpillState, SpilledBucket, SpilledRow,
};

/// One tokenized output row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    /// Sort key: a keyed hash of `sample_id` when shuffling, else the arrival sequence.
    pub key: u64,
    pub sample_id: String,
    /// Index of the source in the plan.
    pub source: u16,
    pub ids: Vec<u32>,
    pub mask: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("failed to write `{}`", .0.display())]
    Io(std::path::PathBuf, #[source] std::io::Error),
    // The message includes the shard error's, so it is not also a `source` (the CLI prints
    // each cause on its own line).
    #[error("failed to write Arrow shard `{}`: {error}", path.display())]
    Arrow {
        path: std::path::PathBuf,
        error: ShardError,
    },
    #[error("spill file `{}` is corrupt", .0.display())]
    Corrupt(std::path::PathBuf),
}

/// Rewrites a file without the given byte ranges (`(start, len)`, sorted, not overlapping): the
/// `conversations.jsonl` lines of rows that were tokenized but not selected. Streams, so memory
/// does not grow with the file.
/// A side output of the row passes (`rejects.jsonl`, `filtered.jsonl`, `conversations.jsonl`)
/// that can be made durable at the end of a pass, for the build journal.
pub trait SideOutput: std::io::Write + Send {
    /// Flushes and syncs everything written so far; returns its length.
    fn sync_point(&mut self) -> std::io::Result<u64>;
}

impl SideOutput for OutputFile {
    fn sync_point(&mut self) -> std::io::Result<u64> {
        OutputFile::sync_point(self)
    }
}

impl SideOutput for std::io::BufWriter<std::fs::File> {
    fn sync_point(&mut self) -> std::io::Result<u64> {
        use std::io::{Seek, Write};
        self.flush()?;
        self.get_ref().sync_data()?;
        self.get_mut().stream_position()
    }
}

impl SideOutput for Vec<u8> {
    fn sync_point(&mut self) -> std::io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl SideOutput for std::io::Sink {
    fn sync_point(&mut self) -> std::io::Result<u64> {
        Ok(0)
    }
}

/// Opens a side output of a killed build at `len` (a [`SideOutput::sync_point`] length),
/// dropping what was written after it.
pub fn reopen_side_output(
    path: &std::path::Path,
    len: u64,
) -> std::io::Result<std::io::BufWriter<std::fs::File>> {
    use std::io::Seek;
    let mut file = nofollow::open(nofollow::options().write(true), path)?;
    if file.metadata()?.len() < len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("{} bytes where {len} were recorded", file.metadata()?.len()),
        ));
    }
    file.set_len(len)?;
    file.seek(std::io::SeekFrom::Start(len))?;
    Ok(std::io::BufWriter::with_capacity(1 << 16, file))
}

/// Writes `to` as `from` without the byte ranges `ranges` (sorted, not overlapping): the
/// lines of conversations that were not selected. `from` is left as it is (a resumed build
/// may need it again); with nothing to drop, `to` is a hard link to it where possible.
pub fn copy_without_ranges(
    from: &std::path::Path,
    to: &std::path::Path,
    ranges: &[(u64, u32)],
) -> std::io::Result<()> {
    use std::io::{BufReader, BufWriter, Read, Write};
    match std::fs::remove_file(to) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    if ranges.is_empty() && std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    let mut input = BufReader::with_capacity(1 << 20, std::fs::File::open(from)?);
    let mut out = BufWriter::with_capacity(1 << 20, nofollow::create(to)?);
    let mut at = 0u64;
    for &(start, len) in ranges {
        let keep = start.saturating_sub(at);
        std::io::copy(&mut input.by_ref().take(keep), &mut out)?;
        std::io::copy(
            &mut input.by_ref().take(u64::from(len)),
            &mut std::io::sink(),
        )?;
        at = start + u64::from(len);
    }
    std::io::copy(&mut input, &mut out)?;
    out.flush()
}
