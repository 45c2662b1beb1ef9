//! Why a row did not become training data. Rejects are data, not errors: they are counted per
//! source, written to `rejects.jsonl`, and never stop a run.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A row the pipeline could not use (bad input or a template/validation failure).
/// The snake_case codes are stable: they appear in manifests and reject files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// The line or record is not valid JSON.
    InvalidJson,
    /// An integer literal outside the 64-bit range, which Python keeps exact and chatshards
    /// cannot render the same way.
    NumberOutOfRange,
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
    /// The assistant answer (`output`, `response`, `solution`) is empty.
    EmptyResponse,
    /// The answer is empty but `input` is not: CodeAlpaca rows whose answer sits in `input`.
    AnswerInInput,
    /// The user prompt (`instruction` + `input`, `question`, `problem`) is empty.
    EmptyPrompt,
    /// The tool list (a column or schemas embedded in a system prompt) cannot be read.
    InvalidTools,
    /// A tool call written in text (`<functioncall>`, `<tool_call>`) cannot be parsed.
    InvalidToolCall,
    /// A call names a function the row does not declare.
    UndeclaredTool,
    /// A tool response that answers no pending call.
    OrphanToolResponse,
    /// A role marker (`USER:`, `ASSISTANT:`, ...) inside an assistant turn: a phantom turn
    /// that would be trained as the model's own text.
    StrayRoleMarker,
    /// The record is larger than `max_row_bytes` (not held in memory where the format allows).
    TooLarge,
    /// `regenerate`: the server's prompt ids differ from chatshards' render of the same messages.
    RenderMismatch,
    /// `regenerate`: a request failed for good (after its retries).
    RegenError,
    /// `regenerate`: the first generation stopped at `max_tokens` under `truncated: drop`.
    RegenTruncated,
}

impl RejectReason {
    pub fn code(self) -> &'static str {
        match self {
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::NumberOutOfRange => "number_out_of_range",
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
            RejectReason::EmptyResponse => "empty_response",
            RejectReason::AnswerInInput => "answer_in_input",
            RejectReason::EmptyPrompt => "empty_prompt",
            RejectReason::InvalidTools => "invalid_tools",
            RejectReason::InvalidToolCall => "invalid_tool_call",
            RejectReason::UndeclaredTool => "undeclared_tool",
            RejectReason::OrphanToolResponse => "orphan_tool_response",
            RejectReason::StrayRoleMarker => "stray_role_marker",
            RejectReason::TooLarge => "too_large",
            RejectReason::RenderMismatch => "render_mismatch",
            RejectReason::RegenError => "regen_error",
            RejectReason::RegenTruncated => "regen_truncated",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A rejected row: the reason code and a message naming the field at fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

    /// A regeneration failure at assistant turn `turn` (1-based) of the `planned` ones: the
    /// message starts with both, and the request accounting reads them back
    /// ([`Self::regenerate_turn`]), so that it survives a resumed build's journal.
    pub fn regenerate(
        reason: RejectReason,
        turn: u64,
        planned: u64,
        detail: impl fmt::Display,
    ) -> Self {
        Reject::new(
            reason,
            format!("assistant turn {turn} of {planned}: {detail}"),
        )
    }

    /// `(turn, planned)` of a [`Self::regenerate`] reject.
    pub fn regenerate_turn(&self) -> Option<(u64, u64)> {
        use RejectReason as R;
        if !matches!(
            self.reason,
            R::RenderMismatch | R::RegenError | R::RegenTruncated
        ) {
            return None;
        }
        let rest = self.message.strip_prefix("assistant turn ")?;
        let (turn, rest) = rest.split_once(" of ")?;
        let (planned, _) = rest.split_once(':')?;
        Some((turn.parse().ok()?, planned.parse().ok()?))
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
    /// An agentic trajectory not known to be resolved, under `resolved_only: true`.
    Unresolved,
    /// A blank (empty or whitespace-only) line of a JSON lines file: counted so that `read`
    /// is the number of lines, but nothing to reject.
    BlankLine,
}

impl FilterReason {
    pub fn code(self) -> &'static str {
        match self {
            FilterReason::TooLong => "too_long",
            FilterReason::TooFewSupervised => "too_few_supervised",
            FilterReason::Unresolved => "unresolved",
            FilterReason::BlankLine => "blank_line",
        }
    }
}

/// Why a source row yields no conversation at the adapt stage: bad data (rejected, written to
/// the reject file) or a valid row an adapter-level rule leaves out (filtered, only counted).
#[derive(Debug, Clone, PartialEq)]
pub enum Skip {
    Rejected(Reject),
    Filtered(FilterReason),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Rejected(r) => write!(f, "rejected `{}`: {}", r.reason, r.message),
            Skip::Filtered(reason) => write!(f, "filtered `{}`", reason.code()),
        }
    }
}

impl From<Reject> for Skip {
    fn from(reject: Reject) -> Self {
        Skip::Rejected(reject)
    }
}

/// A safe change an adapter or validator made to keep a row. Counted per source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// Tool calls without ids got `call_0`, `call_1`, ... (per row), and each tool response
    /// the id of the call it answers.
    ToolCallIdsSynthesized,
    /// A function declared more than once: one definition kept (the first that accepts every
    /// argument the row passes to it, else the first).
    DuplicateToolDropped,
    /// Glaive: a call with `"parameters"` instead of `"arguments"`.
    ArgumentsKeyRenamed,
    /// Glaive: `\'` escapes inside single-quoted call arguments were unescaped.
    QuotedArgumentsUnescaped,
    /// Glaive: the one-off `AI to= name: {...}` call syntax was parsed as a call.
    LegacyCallSyntaxParsed,
    /// Consecutive user turns were merged into one (joined by a blank line).
    ConsecutiveTurnsMerged,
    /// An assistant turn identical to the one before it was dropped.
    DuplicateTurnDropped,
    /// Turns with no text and no calls were dropped.
    EmptyTurnsDropped,
    /// A leftover role marker (`ASSISTANT:` before a call, `SYSTEM: `) or a trailing
    /// `<|endoftext|>` was removed.
    StrayMarkerRemoved,
    /// Hermes: a tool call or tool list written as a Python literal (`'...'`, `True`) was parsed.
    PythonLiteralParsed,
    /// Hermes: literal `\n` (backslash, n) around a `<tool_call>` body was read as a newline.
    LiteralNewlinesReplaced,
    /// Hermes: a call with no top-level `name` took it from `arguments.name`.
    CallNameUnnested,
    /// Agentic: a call written as `<function=...>` text was parsed into a tool call.
    TextToolCallParsed,
    /// Agentic: environment observations sent as user turns became tool responses.
    ObservationsAsTool,
    /// Agentic (SWE-smith): messages of sub-agents (`agent` other than `main`) were dropped.
    SubagentMessagesDropped,
    /// Null-valued keys in tool schemas (Parquet struct columns pad missing keys with nulls)
    /// were dropped.
    ToolSchemaNullsDropped,
    /// Agentic: a function listing in the system prompt (`---- BEGIN FUNCTION #1: ...`) became
    /// the row's tools and was taken out of the system text.
    ToolListingParsed,
    /// Agentic: a function listing in the system prompt that does not parse exactly (or a row
    /// that also has a tools column) was left in the text (counted, not changed).
    ToolListingKept,
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
            Repair::ToolCallIdsSynthesized => "tool_call_ids_synthesized",
            Repair::DuplicateToolDropped => "duplicate_tool_dropped",
            Repair::ArgumentsKeyRenamed => "arguments_key_renamed",
            Repair::QuotedArgumentsUnescaped => "quoted_arguments_unescaped",
            Repair::LegacyCallSyntaxParsed => "legacy_call_syntax_parsed",
            Repair::ConsecutiveTurnsMerged => "consecutive_turns_merged",
            Repair::DuplicateTurnDropped => "duplicate_turn_dropped",
            Repair::EmptyTurnsDropped => "empty_turns_dropped",
            Repair::StrayMarkerRemoved => "stray_marker_removed",
            Repair::PythonLiteralParsed => "python_literal_parsed",
            Repair::LiteralNewlinesReplaced => "literal_newlines_replaced",
            Repair::CallNameUnnested => "call_name_unnested",
            Repair::TextToolCallParsed => "text_tool_call_parsed",
            Repair::ObservationsAsTool => "observations_as_tool",
            Repair::SubagentMessagesDropped => "subagent_messages_dropped",
            Repair::ToolSchemaNullsDropped => "tool_schema_nulls_dropped",
            Repair::ToolListingParsed => "tool_listing_parsed",
            Repair::ToolListingKept => "tool_listing_kept",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn serde_name<T: Serialize>(value: T) -> String {
        match serde_json::to_value(value) {
            Ok(Value::String(s)) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    /// `code()` is written to reject files, the serde name to manifests: they must agree.
    #[test]
    fn codes_are_the_serde_names() {
        use RejectReason as R;
        for r in [
            R::InvalidJson,
            R::NumberOutOfRange,
            R::MissingField,
            R::InvalidField,
            R::UnknownRole,
            R::EmptyConversation,
            R::NoUserQuery,
            R::SystemNotFirst,
            R::NoAssistantTurn,
            R::InvalidToolArguments,
            R::MultimodalContent,
            R::SpecialTokenInContent,
            R::Template,
            R::Tokenize,
            R::MaskCheck,
            R::EmptyResponse,
            R::AnswerInInput,
            R::EmptyPrompt,
            R::InvalidTools,
            R::InvalidToolCall,
            R::UndeclaredTool,
            R::OrphanToolResponse,
            R::StrayRoleMarker,
            R::TooLarge,
            R::RenderMismatch,
            R::RegenError,
            R::RegenTruncated,
        ] {
            assert_eq!(serde_name(r), r.code());
        }
        use FilterReason as F;
        for f in [F::TooLong, F::TooFewSupervised, F::Unresolved, F::BlankLine] {
            assert_eq!(serde_name(f), f.code());
        }
        use Repair as P;
        for p in [
            P::ToolArgumentsParsed,
            P::JsonStringParsed,
            P::ContentPartsJoined,
            P::SystemMerged,
            P::TrailingTurnsDropped,
            P::ToolsWrapped,
            P::ToolCallIdsSynthesized,
            P::DuplicateToolDropped,
            P::ArgumentsKeyRenamed,
            P::QuotedArgumentsUnescaped,
            P::LegacyCallSyntaxParsed,
            P::ConsecutiveTurnsMerged,
            P::DuplicateTurnDropped,
            P::EmptyTurnsDropped,
            P::StrayMarkerRemoved,
            P::PythonLiteralParsed,
            P::LiteralNewlinesReplaced,
            P::CallNameUnnested,
            P::TextToolCallParsed,
            P::ObservationsAsTool,
            P::SubagentMessagesDropped,
            P::ToolSchemaNullsDropped,
            P::ToolListingParsed,
            P::ToolListingKept,
        ] {
            assert_eq!(serde_name(p), p.code());
        }
    }
}
