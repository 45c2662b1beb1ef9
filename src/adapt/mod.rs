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
//!
//! One file per format: its adapter type implements [`Format`] (the settings it reads, and one
//! row to a conversation), and one line of the [`formats!`] list below registers it under its
//! `format:` name (docs/extending.md).

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
mod settings;
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
pub use settings::{Column, ColumnsConfig, FormatOptions, Reads, Settings, TagsConfig};
pub use sharegpt::{to_sharegpt_record, ShareGptAdapter};
pub use speculator::{SpeculatorAdapter, TokenRow};
pub use xlam::XlamAdapter;

use crate::conversation::Conversation;
use crate::read::Record;
use crate::reject::{FilterReason, Reject, Repair, Skip};
use serde_json::{Map, Value};

/// The repairs applied to one row, in order.
pub type Repairs = Vec<Repair>;

/// A source format: its settings, and its conversion of one row. Each format's file implements
/// it for its adapter type; the [`formats!`] list registers it under its `format:` name.
pub trait Format: Sized {
    /// The settings it reads; others given are errors ([`Settings::unused`]).
    const READS: Reads = Reads::EXACT;

    /// `true` when [`adapt`](Format::adapt) checks that every tool response answers a call
    /// itself (otherwise [`Adapter::adapt`] does).
    const CHECKS_TOOL_RESPONSES: bool = false;

    /// The adapter for a source's settings (`settings.format` is the name it is registered
    /// under).
    fn configure(settings: &Settings) -> Self;

    /// One row (a JSON object) to a conversation, or why not, recording each repair.
    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject>;

    /// The format's own row filter: `Some(reason)` for a valid row its options leave out.
    fn filter(&self, _row: &Row) -> Result<Option<FilterReason>, Reject> {
        Ok(None)
    }

    /// Source labels that are not part of the conversation (ids, a trajectory's `resolved`,
    /// ...), for the normalized output.
    fn metadata(&self, _row: &Row) -> Map<String, Value> {
        Map::new()
    }
}

/// Generates, from the list of `"name" => Variant(AdapterType)`, [`FormatName`] (the
/// `format:` values), [`Adapter`] (one variant per format) and their dispatch.
macro_rules! formats {
    ($($(#[doc = $doc:literal])* $name:literal => $variant:ident($type:ty),)*) => {
        /// A `format:` value. Each format's module docs (`src/adapt/`) list its repair and
        /// reject rules.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
        pub enum FormatName {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant,)*
        }

        /// Every `format:` name, in the order registered.
        pub const FORMATS: &[&str] = &[$($name),*];

        /// A source format, with its column and tag mapping resolved.
        #[derive(Debug, Clone)]
        pub enum Adapter {
            $($variant($type),)*
        }

        impl Adapter {
            /// The adapter of `settings.format`, or an error for each setting it does not use.
            pub fn configure(settings: &Settings) -> Result<Adapter, Vec<String>> {
                let (reads, adapter) = match settings.format {
                    $(FormatName::$variant => (
                        <$type as Format>::READS,
                        Adapter::$variant(<$type as Format>::configure(settings)),
                    ),)*
                };
                let errors = settings.unused(reads);
                if errors.is_empty() {
                    Ok(adapter)
                } else {
                    Err(errors)
                }
            }

            /// The `format:` name.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Adapter::$variant(_) => $name,)*
                }
            }

            fn checks_tool_responses(&self) -> bool {
                match self {
                    $(Adapter::$variant(_) => <$type as Format>::CHECKS_TOOL_RESPONSES,)*
                }
            }

            fn adapt_row(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
                match self {
                    $(Adapter::$variant(a) => Format::adapt(a, row, repairs),)*
                }
            }

            fn filter_row(&self, row: &Row) -> Result<Option<FilterReason>, Reject> {
                match self {
                    $(Adapter::$variant(a) => Format::filter(a, row),)*
                }
            }

            fn row_metadata(&self, row: &Row) -> Map<String, Value> {
                match self {
                    $(Adapter::$variant(a) => Format::metadata(a, row),)*
                }
            }
        }
    };
}

// The registered formats, in the order the docs list them: `"name" => Variant(AdapterType)`,
// the type defined in its own file of this folder.
formats! {
    /// OpenAI messages (`messages`, `tools`).
    "openai" => OpenAi(OpenAiAdapter),
    /// ShareGPT / LLaMA-Factory `conversations` with tag mapping.
    "sharegpt" => ShareGpt(ShareGptAdapter),
    /// Alpaca `instruction` / `input` / `output` / `system` with column mapping.
    "alpaca" => Alpaca(AlpacaAdapter),
    /// Open-Orca/OpenOrca: `id`, `system_prompt`, `question`, `response`.
    "openorca" => OpenOrca(OpenOrcaAdapter),
    /// sahil2801/CodeAlpaca-20k: `instruction`, `input`, `output`.
    "codealpaca" => CodeAlpaca(PresetAdapter),
    /// theblackcat102/evol-codealpaca-v1: `instruction`, `output`.
    "evol_codealpaca" => EvolCodeAlpaca(PresetAdapter),
    /// ise-uiuc/Magicoder-OSS-Instruct-75K: `problem`, `solution`.
    "magicoder_oss" => MagicoderOss(PresetAdapter),
    /// ise-uiuc/Magicoder-Evol-Instruct-110K: `instruction`, `response`.
    "magicoder_evol" => MagicoderEvol(PresetAdapter),
    /// Agent trajectories: thoughtworks, SWE-smith, nebius SWE-agent / OpenHands, SWE-Gym.
    "agentic" => Agentic(AgenticAdapter),
    /// glaiveai/glaive-function-calling-v2 raw `system` / `chat` text.
    "glaive" => Glaive(GlaiveAdapter),
    /// Mustafaege/qwen3.5-functioncalling-v2: role/content messages, tools in the system text.
    "qwen35_fc" => Qwen35Fc(Qwen35FcAdapter),
    /// NousResearch/hermes-function-calling-v1: ShareGPT with `<tool_call>` text.
    "hermes" => Hermes(HermesAdapter),
    /// Salesforce/xlam-function-calling-60k: `query`, `answers`, `tools`.
    "xlam" => Xlam(XlamAdapter),
    /// Pre-tokenized rows: `input_ids`, `loss_mask`, optional `primary_id` / `id`, as
    /// speculators' regeneration writes them (docs/trainers.md). Never a conversation: the
    /// engine reads them with [`SpeculatorAdapter::read`].
    "speculator" => Speculator(SpeculatorAdapter),
}

impl Adapter {
    /// Adapts one row. `row` is the whole record as read from the file.
    pub fn adapt(&self, row: &Value, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let object = as_row(row)?;
        media_columns(object)?;
        let conversation = self.adapt_row(object, repairs)?;
        if !self.checks_tool_responses() {
            tools::check_orphans(&conversation.messages)?;
        }
        Ok(conversation)
    }

    /// The adapter-level filter: `Some(reason)` for a row its options leave out.
    pub fn filter(&self, row: &Value) -> Result<Option<FilterReason>, Reject> {
        self.filter_row(as_row(row)?)
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
        match row.as_object() {
            Some(row) => self.row_metadata(row),
            None => Map::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each registered name reads as its `format:` value and configures the adapter that
    /// reports that name, with the settings' defaults.
    #[test]
    fn every_registered_format_is_read_and_configured_under_its_name() {
        for &name in FORMATS {
            let format: FormatName =
                serde_json::from_value(Value::String(name.to_owned())).expect(name);
            let settings = Settings {
                format,
                columns: &ColumnsConfig::default(),
                tags: &TagsConfig::default(),
                options: &FormatOptions::default(),
            };
            let adapter = Adapter::configure(&settings).expect(name);
            assert_eq!(adapter.name(), name);
        }
        let mut names = FORMATS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FORMATS.len(), "a name registered twice");
        let err = serde_json::from_value::<FormatName>(Value::String("opena".into()))
            .expect_err("unknown");
        assert!(
            err.to_string()
                .starts_with("unknown variant `opena`, expected one of `openai`, `sharegpt`,"),
            "{err}"
        );
    }
}
