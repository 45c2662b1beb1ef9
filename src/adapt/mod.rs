//! Adapt stage: one source row (a JSON object) → [`Conversation`], or a [`Reject`].
//!
//! Each format is a typed adapter. Safe repairs (string tool arguments parsed into objects,
//! text parts joined, ...) are recorded in a [`Repairs`] log; anything else is rejected with a
//! stable reason code and a message naming the field.

mod alpaca;
mod fields;
mod openai;
mod sharegpt;

pub use alpaca::AlpacaAdapter;
pub use openai::OpenAiAdapter;
pub use sharegpt::{to_sharegpt_record, ShareGptAdapter};

use crate::conversation::Conversation;
use crate::reject::{Reject, Repair};
use serde_json::{Map, Value};

/// The repairs applied to one row, in order.
pub type Repairs = Vec<Repair>;

/// A source format, with its column and tag mapping resolved.
#[derive(Debug, Clone)]
pub enum Adapter {
    OpenAi(OpenAiAdapter),
    ShareGpt(ShareGptAdapter),
    Alpaca(AlpacaAdapter),
}

impl Adapter {
    /// Adapts one row. `row` is the whole record as read from the file.
    pub fn adapt(&self, row: &Value, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let object = row.as_object().ok_or_else(|| {
            Reject::new(
                crate::reject::RejectReason::InvalidField,
                format!("row is a JSON {}, not an object", fields::kind(row)),
            )
        })?;
        match self {
            Adapter::OpenAi(a) => a.adapt(object, repairs),
            Adapter::ShareGpt(a) => a.adapt(object, repairs),
            Adapter::Alpaca(a) => a.adapt(object, repairs),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Adapter::OpenAi(_) => "openai",
            Adapter::ShareGpt(_) => "sharegpt",
            Adapter::Alpaca(_) => "alpaca",
        }
    }
}

/// A row as a JSON object; adapters read columns out of it.
pub type Row = Map<String, Value>;
