//! Shared types and helpers below every stage: settings the stages read, digests, per-source
//! counts. Nothing here depends on another module of the crate, so any stage may use it
//! without joining a dependency cycle.

pub mod digest;
pub mod embedded;
pub mod json_exact;
pub mod nofollow;
pub mod sample_id;
pub mod settings;
pub mod split;
pub mod stats;

pub use sample_id::SampleId;
pub use settings::LengthPolicy;
