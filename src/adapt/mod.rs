//! Adapt stage: one source row (a JSON object) → [`Conversation`], or a [`Reject`].
//!
//! Each format is a typed adapter. Safe repairs (string tool arguments parsed into objects,
//! text parts joined, ...) are recorded in a [`Repairs`] log; anything else is rejected with a
//! stable reason code and a message naming the field. Adapter-level filters (a valid row a
//! rule leaves out, such as an unresolved agent trajectory) are separate: [`Adapter::filter`]
//! decides before [`Adapter::adapt`] converts, and [`Adapter::prepare`] runs both.
//!
//! Generic formats (`openai`, `sharegpt`, `alpaca`) take column and tag mappings; the
//! source-specific formats read their source's exact columns (their module docs list every
//! repair and reject).

mod agentic;
mod alpaca;
mod calls;
mod fields;
mod fn_listing;
mod glaive;
mod hermes;
mod openai;
mod openorca;
mod presets;
mod pyliteral;
mod qwen35;
mod sharegpt;
mod speculator;
mod tools;
mod xlam;

pub use agentic::AgenticAdapter;
pub use alpaca::AlpacaAdapter;
pub use glaive::GlaiveAdapter;
pub use hermes::HermesAdapter;
pub use openai::OpenAiAdapter;
pub use openorca::OpenOrcaAdapter;
pub use presets::{Preset, PresetAdapter};
pub use qwen35::Qwen35FcAdapter;
pub use sharegpt::{to_sharegpt_record, ShareGptAdapter};
pub use speculator::{SpeculatorAdapter, TokenRow};
pub use xlam::XlamAdapter;

use crate::conversation::Conversation;
use crate::read::Record;
use crate::reject::{FilterReason, Reject, Repair, Skip};
use serde_json::{Map, Value};

/// The repairs applied to one row, in order.
pub type Repairs = Vec<Repair>;

/// A source format, with its column and tag mapping resolved.
#[derive(Debug, Clone)]
pub enum Adapter {
    OpenAi(OpenAiAdapter),
    ShareGpt(ShareGptAdapter),
    Alpaca(AlpacaAdapter),
    Preset(PresetAdapter),
    OpenOrca(OpenOrcaAdapter),
    Agentic(AgenticAdapter),
    Glaive(GlaiveAdapter),
    Qwen35Fc(Qwen35FcAdapter),
    Hermes(HermesAdapter),
    Xlam(XlamAdapter),
    /// Pre-tokenized rows: never a conversation (the engine reads them with
    /// [`SpeculatorAdapter::read`]).
    Speculator(SpeculatorAdapter),
}

impl Adapter {
    /// Adapts one row. `row` is the whole record as read from the file.
    pub fn adapt(&self, row: &Value, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let object = as_row(row)?;
        media_columns(object)?;
        let conversation = match self {
            Adapter::OpenAi(a) => a.adapt(object, repairs),
            Adapter::ShareGpt(a) => a.adapt(object, repairs),
            Adapter::Alpaca(a) => a.adapt(object, repairs),
            Adapter::Preset(a) => a.adapt(object, repairs),
            Adapter::OpenOrca(a) => a.adapt(object, repairs),
            Adapter::Agentic(a) => a.adapt(object, repairs),
            Adapter::Glaive(a) => a.adapt(object, repairs),
            Adapter::Qwen35Fc(a) => a.adapt(object, repairs),
            Adapter::Hermes(a) => a.adapt(object, repairs),
            Adapter::Xlam(a) => a.adapt(object, repairs),
            Adapter::Speculator(_) => Err(Reject::new(
                crate::reject::RejectReason::InvalidField,
                "format `speculator` rows are token ids, not a conversation",
            )),
        }?;
        // The agentic adapter checks the tool turns of the source itself: the observations it
        // turns into tool responses answer calls written in text, or none.
        if !matches!(self, Adapter::Agentic(_)) {
            tools::check_orphans(&conversation.messages)?;
        }
        Ok(conversation)
    }

    /// The adapter-level filter: `Some(reason)` for a row its options leave out.
    pub fn filter(&self, row: &Value) -> Result<Option<FilterReason>, Reject> {
        match self {
            Adapter::Agentic(a) => a.filter(as_row(row)?),
            _ => Ok(None),
        }
    }

    /// [`filter`](Self::filter), then [`adapt`](Self::adapt): what a build does with a row.
    pub fn prepare(&self, row: &Value, repairs: &mut Repairs) -> Result<Conversation, Skip> {
        if let Some(reason) = self.filter(row)? {
            return Err(Skip::Filtered(reason));
        }
        Ok(self.adapt(row, repairs)?)
    }

    /// [`prepare`](Self::prepare) for a record as read: a JSON line parsed (a line that is not
    /// JSON is rejected), or adapted from its text by the format's typed path when it has one
    /// and the line fits it.
    pub fn prepare_record(
        &self,
        record: Record,
        repairs: &mut Repairs,
    ) -> Result<Conversation, Skip> {
        if let (Adapter::OpenAi(a), Record::Line(line)) = (self, &record) {
            if let Some((conversation, done)) = a.adapt_line(line) {
                repairs.extend(done);
                tools::check_orphans(&conversation.messages)?;
                return Ok(conversation);
            }
        }
        let value = record.into_value()?;
        self.prepare(&value, repairs)
    }

    /// Source labels that are not part of the conversation (ids, OpenOrca's submix, a
    /// trajectory's `resolved`, ...), for the normalized output. Empty when the format has none.
    pub fn metadata(&self, row: &Value) -> Map<String, Value> {
        let Some(row) = row.as_object() else {
            return Map::new();
        };
        match self {
            Adapter::Preset(a) => a.metadata(row),
            Adapter::OpenOrca(a) => a.metadata(row),
            Adapter::Agentic(a) => a.metadata(row),
            Adapter::Hermes(a) => a.metadata(row),
            Adapter::Xlam(a) => a.metadata(row),
            _ => Map::new(),
        }
    }

    /// The `format:` name.
    pub fn name(&self) -> &'static str {
        match self {
            Adapter::OpenAi(_) => "openai",
            Adapter::ShareGpt(_) => "sharegpt",
            Adapter::Alpaca(_) => "alpaca",
            Adapter::Preset(a) => a.name(),
            Adapter::OpenOrca(_) => "openorca",
            Adapter::Agentic(_) => "agentic",
            Adapter::Glaive(_) => "glaive",
            Adapter::Qwen35Fc(_) => "qwen35_fc",
            Adapter::Hermes(_) => "hermes",
            Adapter::Xlam(_) => "xlam",
            Adapter::Speculator(_) => "speculator",
        }
    }
}

fn as_row(row: &Value) -> Result<&Row, Reject> {
    row.as_object().ok_or_else(|| {
        Reject::new(
            crate::reject::RejectReason::InvalidField,
            format!("row is a JSON {}, not an object", fields::kind(row)),
        )
    })
}

/// The listed fields of a row that are strings, numbers or booleans, in the listed order.
fn scalar_fields(row: &Row, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|&k| match row.get(k) {
            Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
                Some((k.to_owned(), v.clone()))
            }
            _ => None,
        })
        .collect()
}

/// A row as a JSON object; adapters read columns out of it.
pub type Row = Map<String, Value>;

/// The media columns of the multimodal layouts: LLaMA-Factory's `images`/`videos`/`audios`
/// (lists of paths, `<image>` placeholders in the text) and LLaVA's `image` (one path).
const MEDIA_COLUMNS: [&str; 6] = ["images", "image", "videos", "video", "audios", "audio"];

/// Rejects a row that carries media in a column beside its text: its text talks about a
/// picture (or a clip) the model would never see. Empty or `null` columns are text rows.
fn media_columns(row: &Map<String, Value>) -> Result<(), Reject> {
    for column in MEDIA_COLUMNS {
        let count = match row.get(column) {
            None | Some(Value::Null) => 0,
            Some(Value::String(s)) => usize::from(!s.is_empty()),
            Some(Value::Array(items)) => items.len(),
            Some(_) => 1,
        };
        if count > 0 {
            return Err(Reject::new(
                crate::reject::RejectReason::MultimodalContent,
                format!(
                    "`{column}` holds {count} media file{}; only text is supported",
                    if count == 1 { "" } else { "s" }
                ),
            ));
        }
    }
    Ok(())
}
