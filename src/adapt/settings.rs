//! A source's format settings (`columns`, `tags`, `resolved_only`), and the one check that
//! rejects those its format does not read.

use super::FormatName;
use serde::Deserialize;

/// Column mapping. Which keys apply depends on the format.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnsConfig {
    pub messages: Option<String>,
    pub tools: Option<String>,
    pub system: Option<String>,
    pub instruction: Option<String>,
    pub input: Option<String>,
    pub output: Option<String>,
    /// `speculator` only: the token ids, the loss mask and the row's id.
    pub input_ids: Option<String>,
    pub loss_mask: Option<String>,
    pub id: Option<String>,
}

/// ShareGPT tag mapping (LLaMA-Factory names).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagsConfig {
    pub role_tag: Option<String>,
    pub content_tag: Option<String>,
    pub user_tag: Option<String>,
    pub assistant_tag: Option<String>,
    pub system_tag: Option<String>,
    pub observation_tag: Option<String>,
    pub function_tag: Option<String>,
}

/// Source options that are neither column nor tag mappings (`SourceConfig` fields).
#[derive(Debug, Clone, Default)]
pub struct FormatOptions {
    pub resolved_only: Option<bool>,
}

/// A `columns` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Messages,
    Tools,
    System,
    Instruction,
    Input,
    Output,
    InputIds,
    LossMask,
    Id,
}

impl Column {
    /// The key as written under `columns:`.
    pub fn key(self) -> &'static str {
        match self {
            Column::Messages => "messages",
            Column::Tools => "tools",
            Column::System => "system",
            Column::Instruction => "instruction",
            Column::Input => "input",
            Column::Output => "output",
            Column::InputIds => "input_ids",
            Column::LossMask => "loss_mask",
            Column::Id => "id",
        }
    }
}

/// What a format reads of its source's settings: [`super::Format::READS`].
#[derive(Debug, Clone, Copy)]
pub struct Reads {
    /// The `columns` keys it maps. None: it reads its source's exact columns and takes no
    /// `columns` at all.
    pub columns: &'static [Column],
    /// ShareGPT `tags`.
    pub tags: bool,
    /// `resolved_only`.
    pub resolved_only: bool,
}

impl Reads {
    /// A format that reads its source's exact columns and no option.
    pub const EXACT: Reads = Reads {
        columns: &[],
        tags: false,
        resolved_only: false,
    };
}

/// A source's format settings, as a format's [`super::Format::configure`] reads them.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    pub format: FormatName,
    pub columns: &'a ColumnsConfig,
    pub tags: &'a TagsConfig,
    pub options: &'a FormatOptions,
}

impl Settings<'_> {
    /// Sets `value` to the column given for `key`, if any.
    pub fn column(&self, key: Column, value: &mut String) {
        if let Some(given) = self.column_given(key) {
            value.clone_from(given);
        }
    }

    /// The column given for `key`.
    pub fn column_given(&self, key: Column) -> Option<&String> {
        let c = self.columns;
        match key {
            Column::Messages => c.messages.as_ref(),
            Column::Tools => c.tools.as_ref(),
            Column::System => c.system.as_ref(),
            Column::Instruction => c.instruction.as_ref(),
            Column::Input => c.input.as_ref(),
            Column::Output => c.output.as_ref(),
            Column::InputIds => c.input_ids.as_ref(),
            Column::LossMask => c.loss_mask.as_ref(),
            Column::Id => c.id.as_ref(),
        }
    }

    /// An error for each setting given that a format reading `reads` does not use.
    pub fn unused(&self, reads: Reads) -> Vec<String> {
        let mut errors = Vec::new();
        let mut unused = |name: &str, set: bool| {
            if set {
                errors.push(format!("`{name}` does not apply to this format"));
            }
        };
        let t = self.tags;
        let any_tag = [
            &t.role_tag,
            &t.content_tag,
            &t.user_tag,
            &t.assistant_tag,
            &t.system_tag,
            &t.observation_tag,
            &t.function_tag,
        ]
        .iter()
        .any(|v| v.is_some());
        let exact = reads.columns.is_empty();
        let unread = |keys: &'static [Column]| {
            keys.iter()
                .filter(|k| !reads.columns.contains(k))
                .map(|&k| (k.key(), self.column_given(k).is_some()))
        };
        if !exact {
            for (key, set) in unread(MAPPED) {
                unused(&format!("columns.{key}"), set);
            }
            unused("tags", !reads.tags && any_tag);
        }
        for (key, set) in unread(PRETOKENIZED) {
            unused(&format!("columns.{key}"), set);
        }
        unused(
            "resolved_only",
            !reads.resolved_only && self.options.resolved_only.is_some(),
        );
        if exact {
            unused("tags", any_tag);
            if MAPPED.iter().any(|&k| self.column_given(k).is_some()) {
                errors.push(
                    "`columns` does not apply to this format: it reads its source's exact \
                     columns (for a mirror with renamed columns use `openai`, `sharegpt` or \
                     `alpaca`)"
                        .to_owned(),
                );
            }
        }
        errors
    }
}

/// The `columns` keys of the conversation formats, in the order their errors are listed.
const MAPPED: &[Column] = &[
    Column::Messages,
    Column::Tools,
    Column::System,
    Column::Instruction,
    Column::Input,
    Column::Output,
];
/// The `columns` keys of pre-tokenized rows.
const PRETOKENIZED: &[Column] = &[Column::InputIds, Column::LossMask, Column::Id];
