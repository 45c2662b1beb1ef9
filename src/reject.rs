//! Why a row did not become training data. Rejects are data, not errors: they are counted per
//! source, written to `rejects.jsonl`, and never stop a run.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Declares a reason enum from one line per reason, `Variant = "code"`: the code is the serde
/// name (manifests) and [`code`](RejectReason::code) (reject files) alike, and `ALL` lists every
/// reason. A new reason is one such line where its kind is declared.
macro_rules! codes {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[doc = $doc:literal])* $variant:ident = $code:literal,)*
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[doc = $doc])* #[serde(rename = $code)] $variant,)*
        }

        impl $name {
            /// Every reason, in the order declared.
            pub const ALL: &[$name] = &[$($name::$variant),*];

            /// The stable snake_case code.
            pub fn code(self) -> &'static str {
                match self {
                    $($name::$variant => $code,)*
                }
            }
        }
    };
}

codes! {
    /// A row the pipeline could not use (bad input or a template/validation failure).
    /// The snake_case codes are stable: they appear in manifests and reject files.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum RejectReason {
        /// The line or record is not valid JSON.
        InvalidJson = "invalid_json",
        /// An integer literal outside the 64-bit range, which Python keeps exact and chatshards
        /// cannot render the same way.
        NumberOutOfRange = "number_out_of_range",
        /// A field the format needs is absent or null.
        MissingField = "missing_field",
        /// A field has the wrong type or an unparseable value.
        InvalidField = "invalid_field",
        /// A role the chat template does not know (e.g. `developer`, `function`).
        UnknownRole = "unknown_role",
        /// No messages after adaptation.
        EmptyConversation = "empty_conversation",
        /// No user message that is a real query (the template raises on this).
        NoUserQuery = "no_user_query",
        /// A system message after the first position that could not be merged.
        SystemNotFirst = "system_not_first",
        /// No assistant turn to supervise.
        NoAssistantTurn = "no_assistant_turn",
        /// Tool-call arguments that are not a JSON object (or a string holding one).
        InvalidToolArguments = "invalid_tool_arguments",
        /// Image, video or audio content: this tool builds text-only data.
        MultimodalContent = "multimodal_content",
        /// Content contains the text of a control token such as `<|im_start|>`.
        SpecialTokenInContent = "special_token_in_content",
        /// The chat template raised an error for this row.
        Template = "template",
        /// The tokenizer failed on the rendered text.
        Tokenize = "tokenize",
        /// The loss mask did not decode to exactly the assistant spans (a bug guard).
        MaskCheck = "mask_check",
        /// The assistant answer (`output`, `response`, `solution`) is empty.
        EmptyResponse = "empty_response",
        /// The answer is empty but `input` is not: CodeAlpaca rows whose answer sits in `input`.
        AnswerInInput = "answer_in_input",
        /// The user prompt (`instruction` + `input`, `question`, `problem`) is empty.
        EmptyPrompt = "empty_prompt",
        /// The tool list (a column or schemas embedded in a system prompt) cannot be read.
        InvalidTools = "invalid_tools",
        /// A tool call written in text (`<functioncall>`, `<tool_call>`) cannot be parsed.
        InvalidToolCall = "invalid_tool_call",
        /// A call names a function the row does not declare.
        UndeclaredTool = "undeclared_tool",
        /// A tool response that answers no pending call.
        OrphanToolResponse = "orphan_tool_response",
        /// A role marker (`USER:`, `ASSISTANT:`, ...) inside an assistant turn: a phantom turn
        /// that would be trained as the model's own text.
        StrayRoleMarker = "stray_role_marker",
        /// The record is larger than `max_row_bytes` (not held in memory where the format allows).
        TooLarge = "too_large",
        /// `regenerate`: the server's prompt ids differ from chatshards' render of the same messages.
        RenderMismatch = "render_mismatch",
        /// `regenerate`: a request failed for good (after its retries).
        RegenError = "regen_error",
        /// `regenerate`: the first generation stopped at `max_tokens` under `truncated: drop`.
        RegenTruncated = "regen_truncated",
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

codes! {
    /// A valid row that a curation rule left out. Counted apart from rejects.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
    pub enum FilterReason {
        /// Longer than `max_tokens` (length policy `drop`, or no turn boundary fits).
        TooLong = "too_long",
        /// Fewer supervised tokens than `min_supervised_tokens`.
        TooFewSupervised = "too_few_supervised",
        /// An agentic trajectory not known to be resolved, under `resolved_only: true`.
        Unresolved = "unresolved",
        /// A blank (empty or whitespace-only) line of a JSON lines file: counted so that `read`
        /// is the number of lines, but nothing to reject.
        BlankLine = "blank_line",
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

codes! {
    /// A safe change an adapter or validator made to keep a row. Counted per source.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum Repair {
        /// Tool-call arguments given as a JSON string were parsed into an object.
        ToolArgumentsParsed = "tool_arguments_parsed",
        /// A list or object stored as a JSON string was parsed.
        JsonStringParsed = "json_string_parsed",
        /// Text content parts were joined into one string.
        ContentPartsJoined = "content_parts_joined",
        /// Consecutive leading system messages were merged into one.
        SystemMerged = "system_merged",
        /// Trailing turns after the last assistant turn were dropped.
        TrailingTurnsDropped = "trailing_turns_dropped",
        /// Bare function schemas were wrapped as OpenAI tool objects.
        ToolsWrapped = "tools_wrapped",
        /// Tool calls without ids got `call_0`, `call_1`, ... (per row), and each tool response
        /// the id of the call it answers.
        ToolCallIdsSynthesized = "tool_call_ids_synthesized",
        /// A function declared more than once: one definition kept (the first that accepts every
        /// argument the row passes to it, else the first).
        DuplicateToolDropped = "duplicate_tool_dropped",
        /// Glaive: a call with `"parameters"` instead of `"arguments"`.
        ArgumentsKeyRenamed = "arguments_key_renamed",
        /// Glaive: `\'` escapes inside single-quoted call arguments were unescaped.
        QuotedArgumentsUnescaped = "quoted_arguments_unescaped",
        /// Glaive: the one-off `AI to= name: {...}` call syntax was parsed as a call.
        LegacyCallSyntaxParsed = "legacy_call_syntax_parsed",
        /// Consecutive user turns were merged into one (joined by a blank line).
        ConsecutiveTurnsMerged = "consecutive_turns_merged",
        /// An assistant turn identical to the one before it was dropped.
        DuplicateTurnDropped = "duplicate_turn_dropped",
        /// Turns with no text and no calls were dropped.
        EmptyTurnsDropped = "empty_turns_dropped",
        /// A leftover role marker (`ASSISTANT:` before a call, `SYSTEM: `) or a trailing
        /// `<|endoftext|>` was removed.
        StrayMarkerRemoved = "stray_marker_removed",
        /// Hermes: a tool call or tool list written as a Python literal (`'...'`, `True`) was parsed.
        PythonLiteralParsed = "python_literal_parsed",
        /// Hermes: literal `\n` (backslash, n) around a `<tool_call>` body was read as a newline.
        LiteralNewlinesReplaced = "literal_newlines_replaced",
        /// Hermes: a call with no top-level `name` took it from `arguments.name`.
        CallNameUnnested = "call_name_unnested",
        /// Agentic: a call written as `<function=...>` text was parsed into a tool call.
        TextToolCallParsed = "text_tool_call_parsed",
        /// Agentic: environment observations sent as user turns became tool responses.
        ObservationsAsTool = "observations_as_tool",
        /// Agentic (SWE-smith): messages of sub-agents (`agent` other than `main`) were dropped.
        SubagentMessagesDropped = "subagent_messages_dropped",
        /// Null-valued keys in tool schemas (Parquet struct columns pad missing keys with nulls)
        /// were dropped.
        ToolSchemaNullsDropped = "tool_schema_nulls_dropped",
        /// Agentic: a function listing in the system prompt (`---- BEGIN FUNCTION #1: ...`) became
        /// the row's tools and was taken out of the system text.
        ToolListingParsed = "tool_listing_parsed",
        /// Agentic: a function listing in the system prompt that does not parse exactly (or a row
        /// that also has a tools column) was left in the text (counted, not changed).
        ToolListingKept = "tool_listing_kept",
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

    /// `code()` is written to reject files, the serde name to manifests: they must agree, and
    /// each is the snake_case of its variant (the naming the codes have always had).
    #[test]
    fn codes_are_the_serde_names() {
        fn snake(variant: &str) -> String {
            let mut out = String::new();
            for (i, c) in variant.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(c.to_ascii_lowercase());
            }
            out
        }
        fn check<T: Serialize + fmt::Debug + Copy>(all: &[T], code: fn(T) -> &'static str) {
            for &r in all {
                assert_eq!(serde_name(r), code(r));
                assert_eq!(code(r), snake(&format!("{r:?}")));
            }
        }
        check(RejectReason::ALL, RejectReason::code);
        check(FilterReason::ALL, FilterReason::code);
        check(Repair::ALL, Repair::code);
        assert_eq!(
            (
                RejectReason::ALL.len(),
                FilterReason::ALL.len(),
                Repair::ALL.len()
            ),
            (27, 4, 24)
        );
        // Read back from a manifest under the same name.
        let read: RejectReason = serde_json::from_value(Value::String("answer_in_input".into()))
            .expect("a code reads back");
        assert_eq!(read, RejectReason::AnswerInInput);
    }
}
