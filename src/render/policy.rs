//! Which rows a conversation yields under a render policy, and which assistant turns each
//! row supervises. Works on message indices only; rendering happens once per row.

use crate::conversation::{Conversation, Role};
use serde::Deserialize;
use std::ops::Range;

/// Which assistant turns are supervised, and how many rows a conversation yields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RenderPolicy {
    /// Render once; supervise every assistant turn (history turns as the template renders them).
    All,
    /// Render once; supervise only the assistant turns after the last user query.
    Last,
    /// One row per user query: the conversation up to that query's last assistant turn,
    /// rendered as inference sees it, supervising that query's assistant turns. Equal to `all`
    /// for single-query conversations (agentic data), so those never multiply.
    #[default]
    Expand,
    /// One row per assistant turn (speculators 0.9's render-boundary rows): the conversation up
    /// to that turn, rendered as inference sees it, supervising that turn only.
    Turns,
}

/// One output row: render `messages[..end]` and supervise the assistant turns whose ordinal
/// (0-based among the rendered assistant turns) is in `supervise`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSpec {
    pub end: usize,
    pub supervise: Range<usize>,
    /// Ordinal of the first assistant turn after the row's last real query. Every later row of
    /// the conversation renders the text before that turn's header exactly as this row does
    /// (it is all history there), so its token count bounds every later row's length from
    /// below: once it passes `max_tokens`, no later row can fit.
    pub shared: usize,
}

/// Plans the rows of a validated conversation (it ends with an assistant turn and has a query).
pub fn plan_rows(conversation: &Conversation, policy: RenderPolicy) -> Vec<RowSpec> {
    let messages = &conversation.messages;
    // ordinal[i] = number of assistant messages before index i.
    let mut ordinal = Vec::with_capacity(messages.len() + 1);
    let mut count = 0;
    for m in messages {
        ordinal.push(count);
        count += usize::from(m.role == Role::Assistant);
    }
    ordinal.push(count);
    let queries = conversation.query_indices();
    match policy {
        RenderPolicy::All => vec![RowSpec {
            end: messages.len(),
            supervise: 0..count,
            shared: 0,
        }],
        RenderPolicy::Last => {
            let last_query = queries.last().copied().unwrap_or(0);
            vec![RowSpec {
                end: messages.len(),
                supervise: ordinal[last_query]..count,
                shared: ordinal[last_query],
            }]
        }
        RenderPolicy::Expand => {
            let mut rows = Vec::new();
            for (k, &q) in queries.iter().enumerate() {
                let next = queries.get(k + 1).copied().unwrap_or(messages.len());
                let Some(last) = (q..next)
                    .rev()
                    .find(|&i| messages[i].role == Role::Assistant)
                else {
                    continue;
                };
                rows.push(RowSpec {
                    end: last + 1,
                    supervise: ordinal[q]..ordinal[last + 1],
                    shared: ordinal[q],
                });
            }
            rows
        }
        RenderPolicy::Turns => {
            // Turns before the first real query have no prompt the template accepts.
            let Some(&first_query) = queries.first() else {
                return Vec::new();
            };
            let mut query = first_query;
            let mut next = 1;
            let mut rows = Vec::new();
            for i in first_query..messages.len() {
                if queries.get(next) == Some(&i) {
                    query = i;
                    next += 1;
                }
                if messages[i].role == Role::Assistant {
                    rows.push(RowSpec {
                        end: i + 1,
                        supervise: ordinal[i]..ordinal[i] + 1,
                        shared: ordinal[query],
                    });
                }
            }
            rows
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Message;

    fn conversation(roles: &str) -> Conversation {
        let messages = roles
            .chars()
            .map(|r| match r {
                's' => Message::system("s"),
                'u' => Message::user("q"),
                'a' => Message::assistant("a"),
                't' => Message::tool("r"),
                _ => unreachable!("test roles are s/u/a/t"),
            })
            .collect();
        Conversation {
            messages,
            tools: Vec::new(),
        }
    }

    #[test]
    fn expand_yields_one_row_per_query_segment() {
        let c = conversation("suauatata");
        assert_eq!(
            plan_rows(&c, RenderPolicy::Expand),
            vec![
                RowSpec {
                    end: 3,
                    supervise: 0..1,
                    shared: 0
                },
                RowSpec {
                    end: 9,
                    supervise: 1..4,
                    shared: 1
                },
            ]
        );
        assert_eq!(
            plan_rows(&c, RenderPolicy::All),
            vec![RowSpec {
                end: 9,
                supervise: 0..4,
                shared: 0
            }]
        );
        assert_eq!(
            plan_rows(&c, RenderPolicy::Last),
            vec![RowSpec {
                end: 9,
                supervise: 1..4,
                shared: 1
            }]
        );
    }

    #[test]
    fn agentic_single_query_is_one_row_under_expand() {
        let c = conversation("suatatatatata");
        assert_eq!(
            plan_rows(&c, RenderPolicy::Expand),
            vec![RowSpec {
                end: 13,
                supervise: 0..6,
                shared: 0
            }]
        );
    }

    #[test]
    fn wrapped_tool_response_user_turn_is_not_a_query() {
        let mut c = conversation("uaua");
        c.messages[2].content = " <tool_response>\nx\n</tool_response>\n".into();
        assert_eq!(
            plan_rows(&c, RenderPolicy::Expand),
            vec![RowSpec {
                end: 4,
                supervise: 0..2,
                shared: 0
            }]
        );
    }

    #[test]
    fn turns_yield_one_row_per_assistant_turn_after_the_first_query() {
        let c = conversation("sauatauua");
        let rows = plan_rows(&c, RenderPolicy::Turns);
        let got: Vec<(usize, Range<usize>, usize)> = rows
            .into_iter()
            .map(|r| (r.end, r.supervise, r.shared))
            .collect();
        assert_eq!(got, vec![(4, 1..2, 1), (6, 2..3, 1), (9, 3..4, 3)]);
    }

    #[test]
    fn query_without_answer_is_skipped() {
        let c = conversation("uuaua");
        assert_eq!(
            plan_rows(&c, RenderPolicy::Expand),
            vec![
                RowSpec {
                    end: 3,
                    supervise: 0..1,
                    shared: 0
                },
                RowSpec {
                    end: 5,
                    supervise: 1..2,
                    shared: 1
                },
            ]
        );
    }
}
