//! Per-source counters that merge, and the identity every run must satisfy.

use crate::reject::{RejectReason, Repair};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::AddAssign;

/// What happened to one source's rows. Source rows are accounted, not output rows: a
/// conversation that `expand`s into three rows is one `kept` source row and three `rows`.
/// Read back from a manifest (`verify`), a counter an older version did not write is zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SourceStats {
    pub read: u64,
    pub kept: u64,
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Valid rows a rule left out, by filter name (`too_long`, `unresolved`, a named filter).
    pub filtered: BTreeMap<String, u64>,
    /// Exact duplicates of an earlier row (`dedup`).
    pub deduplicated: u64,
    /// In a near-duplicate group whose survivor is another row (`near_dup`).
    pub near_duplicate: u64,
    /// Sharing an n-gram with a benchmark item (`decontaminate`).
    pub contaminated: u64,
    /// Surviving rows that `take` or `mix` did not select.
    pub sampled_out: u64,
    /// Copies added by `mix.max_repeats` (output conversations beyond `kept`; not source rows).
    pub repeated: u64,
    /// Rows that needed a repair, by repair (a row can have several).
    pub repaired: BTreeMap<Repair, u64>,
    /// Output rows (after `expand`).
    pub rows: u64,
    pub tokens: u64,
    pub supervised_tokens: u64,
    /// Output rows cut at a turn boundary by `length_policy: truncate`.
    pub truncated_rows: u64,
    /// Output rows where a supervised span's edge fell inside a token (the header's newline
    /// merged with content starting with whitespace), decided by `mask.boundary`.
    pub mask_boundary_merged: u64,
    /// Source rows whose ids were also computed with the `tokenizers` crate and matched.
    pub encoder_checked_rows: u64,
    /// Source rows whose native render was also made with minijinja and matched.
    pub renderer_checked_rows: u64,
    /// The requests of on-policy regeneration (`regenerate:`), over the rows counted above;
    /// absent for a source without it.
    #[serde(skip_serializing_if = "RegenTally::is_zero")]
    pub regenerate: RegenTally,
}

/// The generation requests of regenerated conversations: every assistant turn planned for
/// regeneration is `requested`, and `requested = succeeded + errored + truncated + skipped`
/// (`skipped`: never asked for, because its conversation ended earlier).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RegenTally {
    /// Conversations sent to regeneration.
    pub conversations: u64,
    pub requested: u64,
    pub succeeded: u64,
    pub errored: u64,
    /// Generations that stopped at `max_tokens` (kept or dropped by `regenerate.truncated`).
    pub truncated: u64,
    pub skipped: u64,
    /// Conversations whose server prompt differed from chatshards' render (rejected).
    pub render_mismatch: u64,
    /// Conversations ended by a regenerated tool call that the dataset's results cannot answer.
    pub unpaired_tool_calls: u64,
    /// Completion tokens in the regenerated rows.
    pub generated_tokens: u64,
    /// Conversations under `rows: per_conversation` whose later prompts did not start with the
    /// earlier prompt and completion ids (the template rewrote an earlier turn): written one
    /// row per generation instead.
    pub not_verbatim: u64,
}

impl RegenTally {
    pub fn is_zero(&self) -> bool {
        *self == RegenTally::default()
    }
    /// The requests of a conversation that regeneration rejected at turn k of n: the k-1 turns
    /// before it succeeded (a truncation or an error ends a conversation), the failing one is
    /// counted by its reason, the n-k after it were skipped.
    pub fn of_reject(reject: &crate::reject::Reject) -> RegenTally {
        let Some((turn, planned)) = reject.regenerate_turn() else {
            return RegenTally::default();
        };
        let before = turn.saturating_sub(1);
        let mut t = RegenTally {
            conversations: 1,
            requested: planned,
            succeeded: before,
            skipped: planned.saturating_sub(turn),
            ..RegenTally::default()
        };
        match reject.reason {
            RejectReason::RegenError => t.errored = 1,
            RejectReason::RegenTruncated => t.truncated = 1,
            // The server answered: the request succeeded, the row did not.
            _ => {
                t.succeeded += 1;
                t.render_mismatch = 1;
            }
        }
        t
    }

    /// `requested = succeeded + errored + truncated + skipped`.
    pub fn balanced(&self) -> bool {
        self.requested == self.succeeded + self.errored + self.truncated + self.skipped
    }
}

impl AddAssign<&RegenTally> for RegenTally {
    fn add_assign(&mut self, o: &RegenTally) {
        self.conversations += o.conversations;
        self.requested += o.requested;
        self.succeeded += o.succeeded;
        self.errored += o.errored;
        self.truncated += o.truncated;
        self.skipped += o.skipped;
        self.render_mismatch += o.render_mismatch;
        self.unpaired_tool_calls += o.unpaired_tool_calls;
        self.generated_tokens += o.generated_tokens;
        self.not_verbatim += o.not_verbatim;
    }
}

impl SourceStats {
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
    pub fn filtered_total(&self) -> u64 {
        self.filtered.values().sum()
    }
    /// `read = kept + Σ rejected + Σ filtered + deduplicated + near_duplicate + contaminated +
    /// sampled_out`.
    pub fn balanced(&self) -> bool {
        self.read
            == self.kept
                + self.rejected_total()
                + self.filtered_total()
                + self.deduplicated
                + self.near_duplicate
                + self.contaminated
                + self.sampled_out
            && self.regenerate.balanced()
    }
}

impl AddAssign<&SourceStats> for SourceStats {
    fn add_assign(&mut self, o: &SourceStats) {
        self.read += o.read;
        self.kept += o.kept;
        for (k, v) in &o.rejected {
            *self.rejected.entry(*k).or_default() += v;
        }
        for (k, v) in &o.filtered {
            *self.filtered.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.repaired {
            *self.repaired.entry(*k).or_default() += v;
        }
        self.deduplicated += o.deduplicated;
        self.near_duplicate += o.near_duplicate;
        self.contaminated += o.contaminated;
        self.sampled_out += o.sampled_out;
        self.repeated += o.repeated;
        self.rows += o.rows;
        self.tokens += o.tokens;
        self.supervised_tokens += o.supervised_tokens;
        self.truncated_rows += o.truncated_rows;
        self.mask_boundary_merged += o.mask_boundary_merged;
        self.encoder_checked_rows += o.encoder_checked_rows;
        self.renderer_checked_rows += o.renderer_checked_rows;
        self.regenerate += &o.regenerate;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_counts_every_outcome() {
        let mut s = SourceStats {
            read: 10,
            kept: 5,
            deduplicated: 1,
            ..Default::default()
        };
        s.rejected.insert(RejectReason::Template, 2);
        s.filtered.insert("too_long".into(), 1);
        assert!(!s.balanced());
        s.sampled_out = 1;
        assert!(s.balanced());
        let mut t = SourceStats::default();
        t += &s;
        t += &s;
        assert_eq!(t.read, 20);
        assert_eq!(t.rejected[&RejectReason::Template], 4);
        assert!(t.balanced());
    }
}
