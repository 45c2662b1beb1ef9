//! Curate stage: the steps that decide which rows a build keeps, each a pure function of a row
//! (or of compact per-row records), in the order the pipeline applies them:
//!
//! 1. [`filters`]: content filters (turns, characters, language, regex, repetition) before
//!    rendering; token filters after tokenizing.
//! 2. [`exact`]: exact duplicates by fingerprint of the conversation or of its prompt; the
//!    first position survives.
//! 3. [`near_dup`]: MinHash + LSH near-duplicates, grouped by union-find; the smallest position
//!    of a group survives.
//! 4. [`decontaminate`]: rows sharing an n-gram with a benchmark item.
//! 5. [`select`]: `take` and `mix` over the surviving rows, by seeded selection keys.
//!
//! The engine's `curator` runs the per-row steps on the pool; [`ledger`] keeps one compact record per row and
//! makes the decisions across rows (dedup survivors, near-duplicate groups, selection) and the
//! accounting. The `language` filter's detector is the workspace crate `langid-index`
//! (`crates/langid-index`). [`text`] holds the text scopes and the normalization the steps share. Every persisted or
//! order-deciding hash is xxh3-64 with an explicit seed or SHA-256.

pub mod decontaminate;
pub mod exact;
pub mod filters;
pub mod ledger;
pub mod near_dup;
pub mod select;
pub mod text;

pub use exact::Fingerprint;

/// A small deterministic generator for the unit tests (Knuth's MMIX LCG), so that their random
/// corpora are the same on every run.
#[cfg(test)]
pub(crate) struct Lcg(pub u64);

#[cfg(test)]
impl Lcg {
    /// A number below `m`, from the state's high bits.
    pub fn below(&mut self, m: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % m
    }
}
