//! Validate stage: the strict-template rules, checked before rendering so that each failure
//! gets its own reason code instead of a generic template error.
//!
//! Repairs (safe): consecutive leading system messages are merged; turns after the last
//! assistant turn are dropped. Rejects: empty conversation, a system message elsewhere than
//! first, no assistant turn, no real user query, a leading tool response, and control-token
//! text (`<|im_start|>`, ...) anywhere in the data.

use crate::adapt::Repairs;
use crate::conversation::{Conversation, Role};
use crate::reject::{Reject, RejectReason, Repair};
use aho_corasick::AhoCorasick;

pub struct Validator {
    forbidden: Option<AhoCorasick>,
    forbidden_texts: Vec<String>,
}

impl Validator {
    /// `forbidden` are texts that must not occur in any string of the data (control tokens).
    pub fn new(forbidden: &[String]) -> Self {
        let matcher = if forbidden.is_empty() {
            None
        } else {
            AhoCorasick::new(forbidden).ok()
        };
        Validator {
            forbidden: matcher,
            forbidden_texts: forbidden.to_vec(),
        }
    }

    pub fn validate(
        &self,
        mut conversation: Conversation,
        repairs: &mut Repairs,
    ) -> Result<Conversation, Reject> {
        let messages = &mut conversation.messages;
        if messages.is_empty() {
            return Err(Reject::new(
                RejectReason::EmptyConversation,
                "the conversation has no messages",
            ));
        }
        while messages.len() > 1
            && messages[0].role == Role::System
            && messages[1].role == Role::System
        {
            let second = messages.remove(1);
            let first = &mut messages[0].content;
            if !second.content.is_empty() {
                if !first.is_empty() {
                    first.push_str("\n\n");
                }
                first.push_str(&second.content);
            }
            repairs.push(Repair::SystemMerged);
        }
        if let Some(i) = messages.iter().skip(1).position(|m| m.role == Role::System) {
            return Err(Reject::new(
                RejectReason::SystemNotFirst,
                format!(
                    "message {} is a system message; only the first may be",
                    i + 1
                ),
            ));
        }
        if messages[0].role == Role::Tool {
            return Err(Reject::new(
                RejectReason::InvalidField,
                "the conversation starts with a tool response",
            ));
        }
        let Some(last_assistant) = messages.iter().rposition(|m| m.role == Role::Assistant) else {
            return Err(Reject::new(
                RejectReason::NoAssistantTurn,
                "the conversation has no assistant turn",
            ));
        };
        if last_assistant + 1 < messages.len() {
            messages.truncate(last_assistant + 1);
            repairs.push(Repair::TrailingTurnsDropped);
        }
        if conversation.query_indices().is_empty() {
            return Err(Reject::new(
                RejectReason::NoUserQuery,
                "no user message is a real query (the template requires one)",
            ));
        }
        self.check_control_tokens(&conversation)?;
        Ok(conversation)
    }

    /// Rejects control-token text (`<|im_start|>`, ...) anywhere in the data: it would be
    /// tokenized into real control tokens and forge turn boundaries.
    pub fn check_control_tokens(&self, conversation: &Conversation) -> Result<(), Reject> {
        if let Some(matcher) = &self.forbidden {
            let mut found = None;
            conversation.for_each_text(&mut |s| match matcher.find(s) {
                Some(m) => {
                    found = Some(m.pattern().as_usize());
                    false
                }
                None => true,
            });
            if let Some(i) = found {
                return Err(Reject::new(
                    RejectReason::SpecialTokenInContent,
                    format!(
                        "the data contains the control token text `{}`",
                        self.forbidden_texts[i]
                    ),
                ));
            }
        }
        Ok(())
    }
}
