//! Why a row did not become training data. Rejects are data, not errors: they are counted per
//! source, written to `rejects.jsonl`, and never stop a run.

use serde::Serialize;
use std::fmt;

/// A row the pipeline could not use (bad input or a template/validation failure).
/// The snake_case codes are stable: they appear in manifests and reject files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// The line or record is not valid JSON.
    InvalidJson,
    /// A field the format needs is absent or null.
    MissingField,
    /// A field has the wrong type or an unparseable value.
    InvalidField,
    /// A role the chat template does not know (e.g. `developer`, `function`).
    UnknownRole,
    /// No messages after adaptation.
    EmptyConversation,
    /// No user message that is a real query (the template raises on this).
    NoUserQuery,
    /// A system message after the first position that could not be merged.
    SystemNotFirst,
    /// No assistant turn to supervise.
    NoAssistantTurn,
    /// Tool-call arguments that are not a JSON object (or a string holding one).
    InvalidToolArguments,
    /// Image, video or audio content: this tool builds text-only data.
    MultimodalContent,
    /// Content contains the text of a control token such as `<|im_start|>`.
    SpecialTokenInContent,
    /// The chat template raised an error for this row.
    Template,
    /// The tokenizer failed on the rendered text.
    Tokenize,
    /// The loss mask did not decode to exactly the assistant spans (a bug guard).
    MaskCheck,
}

impl RejectReason {
    pub fn code(self) -> &'static str {
        match self {
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::MissingField => "missing_field",
            RejectReason::InvalidField => "invalid_field",
            RejectReason::UnknownRole => "unknown_role",
            RejectReason::EmptyConversation => "empty_conversation",
            RejectReason::NoUserQuery => "no_user_query",
            RejectReason::SystemNotFirst => "system_not_first",
            RejectReason::NoAssistantTurn => "no_assistant_turn",
            RejectReason::InvalidToolArguments => "invalid_tool_arguments",
            RejectReason::MultimodalContent => "multimodal_content",
            RejectReason::SpecialTokenInContent => "special_token_in_content",
            RejectReason::Template => "template",
            RejectReason::Tokenize => "tokenize",
            RejectReason::MaskCheck => "mask_check",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A rejected row: the reason code and a message naming the field at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct Reject {
    pub reason: RejectReason,
    pub message: String,
}

impl Reject {
    pub fn new(reason: RejectReason, message: impl Into<String>) -> Self {
        Reject {
            reason,
            message: message.into(),
        }
    }
}

/// A valid row that a curation rule left out. Counted apart from rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterReason {
    /// Longer than `max_tokens` (length policy `drop`, or no turn boundary fits).
    TooLong,
    /// Fewer supervised tokens than `min_supervised_tokens`.
    TooFewSupervised,
    /// Read after the source's `take` count was reached.
    TakeLimit,
}

impl FilterReason {
    pub fn code(self) -> &'static str {
        match self {
            FilterReason::TooLong => "too_long",
            FilterReason::TooFewSupervised => "too_few_supervised",
            FilterReason::TakeLimit => "take_limit",
        }
    }
}

/// A safe change an adapter or validator made to keep a row. Counted per source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Repair {
    /// Tool-call arguments given as a JSON string were parsed into an object.
    ToolArgumentsParsed,
    /// A list or object stored as a JSON string was parsed.
    JsonStringParsed,
    /// Text content parts were joined into one string.
    ContentPartsJoined,
    /// Consecutive leading system messages were merged into one.
    SystemMerged,
    /// Trailing turns after the last assistant turn were dropped.
    TrailingTurnsDropped,
    /// Bare function schemas were wrapped as OpenAI tool objects.
    ToolsWrapped,
}

impl Repair {
    pub fn code(self) -> &'static str {
        match self {
            Repair::ToolArgumentsParsed => "tool_arguments_parsed",
            Repair::JsonStringParsed => "json_string_parsed",
            Repair::ContentPartsJoined => "content_parts_joined",
            Repair::SystemMerged => "system_merged",
            Repair::TrailingTurnsDropped => "trailing_turns_dropped",
            Repair::ToolsWrapped => "tools_wrapped",
        }
    }
}
