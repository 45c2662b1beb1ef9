//! What tokenization makes of a conversation: its rows' ids and masks, or why it has none.
//! Shared by the build's row path and by regeneration, which builds rows from a server's ids.

use crate::reject::{FilterReason, Reject};
use crate::tokenize::Origin;

/// One tokenized row of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    /// Row index within the conversation (the `expand` segment).
    pub segment: usize,
    /// The rendered text; empty in the rows of the build's row processor once they are
    /// checked (a build writes ids only, and a long conversation's rows would otherwise hold
    /// the text of every prefix).
    pub text: String,
    pub ids: Vec<u32>,
    pub mask: Vec<u8>,
    pub truncated: bool,
    /// An edge of a supervised span fell inside a token (the header's newline merged with the
    /// reply's leading whitespace), decided by the boundary rule: counted per source.
    pub boundary_merged: bool,
    /// Where the encoder got the ids (a spot check re-encodes only derived ones).
    pub origin: Origin,
}

impl Tokenized {
    pub fn supervised(&self) -> usize {
        self.mask.iter().filter(|&&m| m == 1).count()
    }
}

/// What became of one conversation after tokenization; `K` is what a kept one carries.
#[derive(Debug)]
pub enum Outcome<K> {
    Kept(K),
    Rejected(Reject),
    Filtered(FilterReason),
    /// The encoder disagreed with the `tokenizers` crate on a spot-checked row.
    EncoderMismatch(String),
    /// The native renderer disagreed with minijinja on a spot-checked row.
    RendererMismatch(String),
}
