//! Write stage: token rows → the `datasets.save_to_disk` layout, plus the side outputs.
//!
//! Rows are spilled to bucket files keyed by their shuffle key while the pipeline runs, then
//! each bucket is sorted and appended to the Arrow shards, so memory stays bounded by one
//! bucket whatever the dataset size, and the order depends only on the keys (never on threads).

mod dataset;
mod direct;
pub mod identity;
pub mod manifest;
pub mod output;
mod shard;
mod shards;
mod spill;

pub use dataset::{dataset_info_json, features, pretty, shard_name, state_json};
pub use direct::OutputFile;
pub use shard::{
    schema, BatchBuilder, ShardEncoder, ShardSummary, ShardWriter, BATCH_ROWS as SHARD_BATCH_ROWS,
};
pub use shards::{write_shards, ShardLayout};
pub use spill::{shuffle_key, Bucket, LoadedBucket, Spill, SpilledBucket, SpilledRow};

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
    #[error("failed to write Arrow shard `{}`: {message}", path.display())]
    Arrow {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("spill file `{}` is corrupt", .0.display())]
    Corrupt(std::path::PathBuf),
}

/// Rewrites a file without the given byte ranges (`(start, len)`, sorted, not overlapping): the
/// `conversations.jsonl` lines of rows that were tokenized but not selected. Streams, so memory
/// does not grow with the file.
pub fn drop_line_ranges(path: &std::path::Path, ranges: &[(u64, u32)]) -> std::io::Result<()> {
    use std::io::{BufReader, BufWriter, Read, Write};
    let tmp = path.with_extension("jsonl.tmp");
    {
        let mut input = BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
        let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
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
        out.flush()?;
    }
    std::fs::rename(&tmp, path)
}
