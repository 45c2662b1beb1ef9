//! Semi-on-policy tool calls, as speculators does it (vllm-project/speculators PR #750): the
//! model regenerates its calls, tools are not executed, and the dataset's k-th tool result is
//! spliced after the k-th regenerated call.

use super::client::CallOut;
use crate::conversation::{Message, Role, ToolCall};
use indexmap::IndexMap;

/// What follows a regenerated assistant turn.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// The dataset's results paired with the regenerated calls (none when neither has any);
    /// the conversation goes on at message `resume`.
    Go {
        results: Vec<Message>,
        resume: usize,
    },
    /// The calls and the dataset's results cannot be paired: the conversation ends here.
    Unpaired(String),
}

/// The regenerated calls as conversation calls: arguments must be a JSON object.
pub fn calls(out: &[CallOut]) -> Result<Vec<ToolCall>, String> {
    out.iter()
        .map(
            |c| match serde_json::from_str::<IndexMap<String, serde_json::Value>>(&c.arguments) {
                Ok(arguments) => Ok(ToolCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments,
                }),
                Err(_) => Err(format!(
                    "the regenerated call of `{}` has arguments that are not a JSON object",
                    c.name
                )),
            },
        )
        .collect()
}

/// Pairs the regenerated `calls` of the assistant turn at `messages[at]` with the dataset's
/// tool results that follow it. Fewer calls than results: the extra results are left out (the
/// model did not ask for them); more calls than results, or no call where the dataset has
/// results, or a call the dataset never answers before its next turn: unpaired.
pub fn pair(messages: &[Message], at: usize, calls: &[ToolCall]) -> Next {
    let start = at + 1;
    let end = messages[start..]
        .iter()
        .position(|m| m.role != Role::Tool)
        .map_or(messages.len(), |n| start + n);
    let dataset = &messages[start..end];
    let more_turns = end < messages.len();
    if calls.len() > dataset.len() && (more_turns || !dataset.is_empty()) {
        return Next::Unpaired(format!(
            "the model made {} call(s) where the dataset has {} tool result(s)",
            calls.len(),
            dataset.len()
        ));
    }
    if calls.is_empty() && !dataset.is_empty() {
        return Next::Unpaired(format!(
            "the model made no call where the dataset has {} tool result(s)",
            dataset.len()
        ));
    }
    let results = calls
        .iter()
        .zip(dataset)
        .map(|(call, result)| Message {
            name: Some(call.name.clone()),
            tool_call_id: call.id.clone(),
            ..result.clone()
        })
        .collect();
    Next::Go {
        results,
        resume: end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str) -> ToolCall {
        ToolCall {
            id: Some(format!("id-{name}")),
            name: name.into(),
            arguments: IndexMap::new(),
        }
    }

    fn convo() -> Vec<Message> {
        vec![
            Message::user("weather in Paris and Rome?"),
            Message::assistant("").with_tool_calls(vec![call("a"), call("b")]),
            Message::tool("sunny"),
            Message::tool("rain"),
            Message::assistant("Paris is sunny, Rome rainy."),
        ]
    }

    #[test]
    fn the_kth_result_follows_the_kth_regenerated_call() {
        let m = convo();
        let Next::Go { results, resume } = pair(&m, 1, &[call("x"), call("y")]) else {
            panic!("paired")
        };
        assert_eq!(resume, 4);
        assert_eq!(results[0].content, "sunny");
        assert_eq!(results[0].name.as_deref(), Some("x"));
        assert_eq!(results[1].tool_call_id.as_deref(), Some("id-y"));
        // One call: the second result is left out.
        let Next::Go { results, .. } = pair(&m, 1, &[call("x")]) else {
            panic!("paired")
        };
        assert_eq!(results.len(), 1);
    }

    #[test]
    fn calls_that_cannot_be_paired_end_the_conversation() {
        let m = convo();
        assert_eq!(
            pair(&m, 1, &[call("x"), call("y"), call("z")]),
            Next::Unpaired(
                "the model made 3 call(s) where the dataset has 2 tool result(s)".into()
            )
        );
        assert_eq!(
            pair(&m, 1, &[]),
            Next::Unpaired("the model made no call where the dataset has 2 tool result(s)".into())
        );
        // A call in the last turn, with nothing after it: nothing to pair, nothing lost.
        assert_eq!(
            pair(&m, 4, &[call("x")]),
            Next::Go {
                results: vec![],
                resume: 5
            }
        );
        // A call where the dataset goes on with a user turn: unpaired.
        let mut more = m.clone();
        more.push(Message::user("thanks"));
        more.push(Message::assistant("welcome"));
        assert!(matches!(pair(&more, 4, &[call("x")]), Next::Unpaired(_)));
        assert!(calls(&[CallOut {
            id: None,
            name: "f".into(),
            arguments: "[1]".into()
        }])
        .is_err());
    }
}
