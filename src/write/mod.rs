//! Write stage: token rows → the `datasets.save_to_disk` layout, plus the side outputs.
//!
//! Rows are spilled to bucket files keyed by their shuffle key while the pipeline runs, then
//! each bucket is sorted and appended to the Arrow shards, so memory stays bounded by one
//! bucket whatever the dataset size, and the order depends only on the keys (never on threads).

mod dataset;
mod direct;
pub mod manifest;
pub mod output;
mod shard;
mod spill;

pub use dataset::{dataset_info_json, pretty, shard_name, state_json};
pub use direct::OutputFile;
pub use shard::{
    schema, BatchBuilder, ShardEncoder, ShardSummary, ShardWriter, BATCH_ROWS as SHARD_BATCH_ROWS,
};
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
