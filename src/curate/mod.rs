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
//! [`text`] holds the text scopes and the normalization the steps share. Every persisted or
//! order-deciding hash is xxh3-64 with an explicit seed or SHA-256.

pub mod decontaminate;
pub mod exact;
pub mod filters;
pub mod near_dup;
pub mod select;
pub mod text;

pub use exact::Fingerprint;

use crate::conversation::Conversation;
use std::collections::HashSet;

/// The whole-conversation fingerprint ([`exact::fingerprint`] with [`exact::DedupKey::Conversation`]).
pub fn fingerprint(conversation: &Conversation) -> Fingerprint {
    exact::fingerprint(conversation, exact::DedupKey::Conversation)
}

/// Fingerprints seen so far, for the streaming build (superseded by [`exact::ExactIndex`]).
#[derive(Default)]
pub struct Deduper {
    seen: HashSet<Fingerprint>,
}

impl Deduper {
    /// True if this fingerprint was seen before (the row is a duplicate).
    pub fn is_duplicate(&mut self, fingerprint: Fingerprint) -> bool {
        !self.seen.insert(fingerprint)
    }

    /// Undoes the first sighting of `fingerprint` (for rows read ahead but never used).
    pub fn forget(&mut self, fingerprint: &Fingerprint) {
        self.seen.remove(fingerprint);
    }
}
