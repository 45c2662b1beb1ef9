//! Curate stage: exact deduplication across sources, in input order (first occurrence wins),
//! keyed on the normalized conversation.

use crate::conversation::Conversation;
use sha2::{Digest, Sha256};
use std::collections::HashSet;

pub type Fingerprint = [u8; 16];

/// A 128-bit fingerprint of the normalized conversation (messages and tools).
pub fn fingerprint(conversation: &Conversation) -> Fingerprint {
    let mut hasher = Sha256::new();
    // Serializing a derive(Serialize) struct of strings and JSON values cannot fail.
    if let Ok(bytes) = serde_json::to_vec(conversation) {
        hasher.update(bytes);
    }
    let digest = hasher.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

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
