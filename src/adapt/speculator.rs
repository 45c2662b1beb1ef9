//! `format: speculator`: rows that are token ids already, as speculators' own regeneration
//! (`speculators regenerate`, `cli/regenerate_responses.py`) writes them and its
//! `prepare-data` passes them through: `input_ids` (token ids), `loss_mask` (0/1 per token),
//! and `primary_id` (the conversation the row came from; `id` is the row's own). Other columns
//! (`text`, `metadata`) are ignored.
//!
//! Nothing is rendered: the row is checked and kept byte for byte. Rejects, each naming the
//! field: a column missing (`missing_field`); not a list, an element that is not a token id of
//! the pipeline's tokenizer or not 0/1 (or a boolean), lists of different lengths, an id that
//! is not a string or an integer (`invalid_field`); no token (`empty_conversation`); no
//! supervised token (`no_assistant_turn`).

use super::fields::kind;
use crate::read::Record;
use crate::reject::{Reject, RejectReason, Skip};
use serde_json::Value;

/// The columns of a speculator-format row (`columns: {input_ids, loss_mask, id}` rename them).
#[derive(Debug, Clone)]
pub struct SpeculatorAdapter {
    pub input_ids: String,
    pub loss_mask: String,
    /// `None`: `primary_id` where the row has it, else `id`.
    pub id: Option<String>,
}

impl Default for SpeculatorAdapter {
    fn default() -> Self {
        SpeculatorAdapter {
            input_ids: "input_ids".to_owned(),
            loss_mask: "loss_mask".to_owned(),
            id: None,
        }
    }
}

/// A checked speculator-format row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub ids: Vec<u32>,
    pub mask: Vec<u8>,
    /// The id column's value as JSON text (`"c1"`, `7`): the rows that share it are one
    /// conversation for `output.validation`'s split.
    pub group: Option<String>,
}

impl SpeculatorAdapter {
    /// Reads and checks one record against a tokenizer of `vocab_size` ids (added tokens
    /// included).
    pub fn read(&self, record: Record, vocab_size: usize) -> Result<TokenRow, Skip> {
        let value = record.into_value()?;
        Ok(self.check(&value, vocab_size)?)
    }

    fn check(&self, row: &Value, vocab_size: usize) -> Result<TokenRow, Reject> {
        let invalid = |message: String| Reject::new(RejectReason::InvalidField, message);
        let Some(row) = row.as_object() else {
            return Err(invalid(format!(
                "row is a JSON {}, not an object",
                kind(row)
            )));
        };
        let list = |name: &str| -> Result<&Vec<Value>, Reject> {
            match row.get(name) {
                None | Some(Value::Null) => Err(Reject::new(
                    RejectReason::MissingField,
                    format!("`{name}` is missing"),
                )),
                Some(Value::Array(items)) => Ok(items),
                Some(other) => Err(invalid(format!(
                    "`{name}` is a JSON {}, not a list",
                    kind(other)
                ))),
            }
        };
        let (ids_name, mask_name) = (&self.input_ids, &self.loss_mask);
        let (ids, mask) = (list(ids_name)?, list(mask_name)?);
        let mut out_ids = Vec::with_capacity(ids.len());
        for (i, v) in ids.iter().enumerate() {
            match v.as_u64() {
                Some(id) if id < vocab_size as u64 => out_ids.push(id as u32),
                Some(id) => {
                    return Err(invalid(format!(
                        "`{ids_name}[{i}]` is {id}, outside the tokenizer's vocabulary of {vocab_size} ids"
                    )))
                }
                None => {
                    return Err(invalid(format!(
                        "`{ids_name}[{i}]` is {}, not a token id",
                        shown(v)
                    )))
                }
            }
        }
        let mut out_mask = Vec::with_capacity(mask.len());
        for (i, v) in mask.iter().enumerate() {
            let m = match v {
                Value::Bool(b) => u8::from(*b),
                Value::Number(n) if n.as_u64() == Some(0) => 0,
                Value::Number(n) if n.as_u64() == Some(1) => 1,
                _ => {
                    return Err(invalid(format!(
                        "`{mask_name}[{i}]` is {}, not 0 or 1",
                        shown(v)
                    )))
                }
            };
            out_mask.push(m);
        }
        if out_ids.len() != out_mask.len() {
            return Err(invalid(format!(
                "`{ids_name}` has {} tokens but `{mask_name}` has {} values",
                out_ids.len(),
                out_mask.len()
            )));
        }
        if out_ids.is_empty() {
            return Err(Reject::new(
                RejectReason::EmptyConversation,
                format!("`{ids_name}` is empty"),
            ));
        }
        if !out_mask.contains(&1) {
            return Err(Reject::new(
                RejectReason::NoAssistantTurn,
                format!("`{mask_name}` supervises no token (every value is 0)"),
            ));
        }
        let id_names: Vec<&str> = match &self.id {
            Some(name) => vec![name.as_str()],
            None => vec!["primary_id", "id"],
        };
        let mut group = None;
        if let Some((name, v)) = id_names
            .iter()
            .find_map(|&n| row.get(n).filter(|v| !v.is_null()).map(|v| (n, v)))
        {
            if !(v.is_string() || v.is_u64() || v.is_i64()) {
                return Err(invalid(format!(
                    "`{name}` is a JSON {}, not a string or an integer",
                    kind(v)
                )));
            }
            group = Some(v.to_string());
        }
        Ok(TokenRow {
            ids: out_ids,
            mask: out_mask,
            group,
        })
    }
}

/// A value as a message shows it: short ones whole, others by kind.
fn shown(v: &Value) -> String {
    match v {
        Value::Number(_) | Value::Bool(_) | Value::Null => v.to_string(),
        Value::String(s) if s.chars().count() <= 20 => v.to_string(),
        other => format!("a JSON {}", kind(other)),
    }
}

impl super::Format for SpeculatorAdapter {
    const READS: super::Reads = super::Reads {
        columns: &[
            super::Column::InputIds,
            super::Column::LossMask,
            super::Column::Id,
        ],
        tags: false,
        resolved_only: false,
    };

    fn configure(settings: &super::Settings) -> Self {
        let mut a = SpeculatorAdapter::default();
        settings.column(super::Column::InputIds, &mut a.input_ids);
        settings.column(super::Column::LossMask, &mut a.loss_mask);
        a.id = settings.column_given(super::Column::Id).cloned();
        a
    }

    /// Never a conversation: the engine reads these rows with [`SpeculatorAdapter::read`].
    fn adapt(
        &self,
        _row: &super::Row,
        _repairs: &mut super::Repairs,
    ) -> Result<crate::conversation::Conversation, Reject> {
        Err(Reject::new(
            RejectReason::InvalidField,
            "format `speculator` rows are token ids, not a conversation",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(row: Value) -> Result<TokenRow, String> {
        SpeculatorAdapter::default()
            .check(&row, 100)
            .map_err(|r| format!("{}: {}", r.reason.code(), r.message))
    }

    #[test]
    fn a_row_of_speculators_regeneration_is_read_as_it_is() {
        let row = json!({"id": "c1_gen0", "primary_id": "c1", "input_ids": [5, 0, 99],
            "loss_mask": [0, 1, 1], "text": "x", "metadata": {"idx": 0}});
        assert_eq!(
            check(row),
            Ok(TokenRow {
                ids: vec![5, 0, 99],
                mask: vec![0, 1, 1],
                group: Some("\"c1\"".to_owned())
            })
        );
        // Booleans are a mask too.
        let row = json!({"input_ids": [1, 2], "loss_mask": [false, true]});
        assert_eq!(check(row).map(|r| r.mask), Ok(vec![0, 1]));
        // An integer id, or none.
        let row = json!({"id": 7, "input_ids": [1], "loss_mask": [1]});
        assert_eq!(check(row).map(|r| r.group), Ok(Some("7".to_owned())));
        let row = json!({"input_ids": [1], "loss_mask": [1]});
        assert_eq!(check(row).map(|r| r.group), Ok(None));
    }

    #[test]
    fn each_broken_field_is_named() {
        let cases = [
            (json!({"loss_mask": [1]}), "missing_field: `input_ids` is missing"),
            (
                json!({"input_ids": "1 2", "loss_mask": [1]}),
                "invalid_field: `input_ids` is a JSON string, not a list",
            ),
            (
                json!({"input_ids": [1, -3], "loss_mask": [1, 1]}),
                "invalid_field: `input_ids[1]` is -3, not a token id",
            ),
            (
                json!({"input_ids": [1, 2.5], "loss_mask": [1, 1]}),
                "invalid_field: `input_ids[1]` is 2.5, not a token id",
            ),
            (
                json!({"input_ids": [1, 100], "loss_mask": [1, 1]}),
                "invalid_field: `input_ids[1]` is 100, outside the tokenizer's vocabulary of 100 ids",
            ),
            (
                json!({"input_ids": [1, 2], "loss_mask": [1, 2]}),
                "invalid_field: `loss_mask[1]` is 2, not 0 or 1",
            ),
            (
                json!({"input_ids": [1, 2], "loss_mask": [1]}),
                "invalid_field: `input_ids` has 2 tokens but `loss_mask` has 1 values",
            ),
            (
                json!({"input_ids": [], "loss_mask": []}),
                "empty_conversation: `input_ids` is empty",
            ),
            (
                json!({"input_ids": [1, 2], "loss_mask": [0, 0]}),
                "no_assistant_turn: `loss_mask` supervises no token (every value is 0)",
            ),
            (
                json!({"primary_id": [1], "input_ids": [1], "loss_mask": [1]}),
                "invalid_field: `primary_id` is a JSON array, not a string or an integer",
            ),
        ];
        for (row, message) in cases {
            assert_eq!(check(row.clone()), Err(message.to_owned()), "{row}");
        }
    }
}
